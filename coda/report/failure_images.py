"""The images of example failures on the memory report: keyframes stored with a record, keyframes
re-simulated from a run directory's checkpoints (`coda.report.keyframes`), or the failing scene's initial
state (`coda.report.render.render_views`), one ``<img>`` each (`scene_renderer`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.report.html_parts import array_img, array_uri, esc, png_uri

MAX_IMAGES = 24  # rendered failing scenes per page, so that a report stays small


def keyframes_html(
    label: str, frames: list[str], views: list[str], src: str, rollout_id: Any, gif: str | None = None
) -> str:
    """A failing rollout's keyframes: its `label` (where the frames come from and whether the re-simulation
    matches the recorded rollout), the ``<img>`` strip at `src` (a data URI; left to right, each frame its
    views under a label) and a link to the animated GIF at the relative URL `gif`."""
    order = "; ".join(esc(name) for name in frames)
    alt = f"rollout {rollout_id}: {len(frames)} keyframes, {' and '.join(views)} views"
    link = f' <a class="gif" href="{esc(gif)}">animated GIF</a>' if gif else ""
    return (
        f'<p class="note">{esc(label)}. Frames, left to right: {order} (each: {esc(" | ".join(views))} '
        f"view){link}</p>"
        f'<img class="keyframes" alt="{esc(alt)}" src="{src}">'
    )


def _href(path: Path, page_dir: Path) -> str:
    """The relative URL of file `path` from a page in `page_dir`."""
    import os
    from urllib.parse import quote

    return quote(Path(os.path.relpath(path.resolve(), page_dir.resolve())).as_posix())


def scene_renderer(
    data_dir: str | Path | None,
    image_size: int,
    limit: int = MAX_IMAGES,
    keyframes: Callable | None = None,
    keyframes_dir: str | Path | None = None,
    *,
    stored: dict[str, dict] | None = None,
    stored_dir: str | Path | None = None,
    page_dir: str | Path = ".",
) -> Callable[..., str]:
    """``render(spec_json, diagnosis=None, rollout=None)`` -> HTML with an ``<img>``: for a diagnosis with a
    row in `stored` (`coda.report.keyframes.read_index` of `stored_dir`, the keyframes a record keeps), those
    keyframes; else with `keyframes` (a `coda.report.keyframes.KeyframeRenderer`) keyframes of the failing
    rollout re-simulated from the run's checkpoint; else (or when the checkpoint is missing) the scene's
    initial views, when there is a `data_dir`. Keyframes are also files in `keyframes_dir`, when given (the
    stored ones copied; `coda.report.keyframes.save_keyframes`), and the page links their GIFs relative to
    `page_dir`. A note instead once `limit` images are on the page, or when the scene does not render."""
    from coda.report import keyframes as kfs
    from coda.report.render import render_views, view_names
    from coda.sim.scene import SceneSpec

    count = 0
    stored = stored or {}
    folder = Path(keyframes_dir) if keyframes_dir is not None else None
    page_dir = Path(page_dir)

    def from_record(row: dict) -> str:
        src = Path(stored_dir) / row["png"]
        gif = Path(stored_dir) / row["gif"]
        if folder is not None and folder.resolve() != Path(stored_dir).resolve():
            folder.mkdir(parents=True, exist_ok=True)
            for f in (src, gif):
                (folder / f.name).write_bytes(f.read_bytes())
            kfs.add_to_index(folder, row)
            gif = folder / gif.name
        label = f"stored with the record: {kfs.outcome_label(row.get('differences') or [])}"
        frames = [str(f) for f in row.get("frames") or []]
        views = [str(v) for v in row.get("views") or view_names()]
        uri = png_uri(src.read_bytes())
        return keyframes_html(label, frames, views, uri, row.get("rollout_id"), _href(gif, page_dir))

    def render(spec_json: str, diagnosis: dict | None = None, rollout: dict | None = None) -> str:
        nonlocal count
        if count >= limit:
            return f'<p class="note">image limit reached ({limit} per page)</p>'
        note = ""
        row = stored.get(str(diagnosis["diagnosis_id"])) if diagnosis is not None else None
        if row is not None:
            count += 1
            return from_record(row)
        if keyframes is not None and diagnosis is not None:
            try:
                kf = keyframes(diagnosis, rollout, spec_json)
            except Exception as err:  # a failed re-simulation must not stop the report
                kf = None
                note = f"could not re-simulate the rollout: {type(err).__name__}: {err}"
            if kf is not None and kf.frames:
                count += 1
                gif = None
                if folder is not None:
                    saved = kfs.save_keyframes(kf, diagnosis, folder)
                    gif = _href(folder / saved["gif"], page_dir)
                frames = [name for name, _ in kf.frames]
                uri = array_uri(kf.strip())
                return keyframes_html(kf.label, frames, view_names(), uri, diagnosis.get("rollout_id"), gif)
            note = note or "no checkpoint to re-simulate the rollout with: the scene's initial state"
        if data_dir is None:
            note = (
                "no keyframes stored with the record for this failure, and no data folder to render its scene"
            )
            return f'<p class="note">{esc(note)}</p>'
        note = f'<p class="note">{esc(note)}</p>' if note else ""
        try:
            scene = SceneSpec.from_json(spec_json)
            img = render_views(scene, data_dir, image_size, label="initial state")
        except Exception as err:  # a bad spec in memory must not stop the report
            return note + (
                f'<p class="note">could not render the scene: {esc(type(err).__name__)}: {esc(err)}</p>'
            )
        count += 1
        return note + array_img(img, f"scene {scene.hash}: initial state, {' and '.join(view_names())} views")

    return render


def keyframe_renderer(run_dir, data_dir, params, sft_dir, image_size):
    """A `KeyframeRenderer` for the run, or None when the params (or the run's profile in them) do not
    load: the page then shows initial states only."""
    from coda.report.keyframes import KeyframeRenderer

    try:
        return KeyframeRenderer(run_dir, data_dir, params=params, sft_dir=sft_dir, image_size=image_size)
    except Exception:  # no params.yaml here, another profile: no re-simulation, still a report
        return None
