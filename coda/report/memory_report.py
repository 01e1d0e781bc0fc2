"""`coda memory report RUN --out report.html`: one static, self-contained HTML page about a run's memory.

The page (no external URL, no JavaScript; charts and scene images embedded as base64 PNG) shows the run
(method, seed, profile, rounds, final and per-round success, the critic and policy losses per update), the
difficulty modes of the latest snapshot (validated first, then by importance), the hardness and learning
progress of the validated modes over the rounds, every program of the latest snapshot as JSON with its
lineage (the scenes generated from it and the success of the rollouts on them) and, per mode, example
failures: keyframes of the failing rollout (front and rear figure views, `coda.sim.world.FIGURE_CAMERAS`)
stored with a record (``RECORD/keyframes/``, written by `coda record`) or re-simulated from a run
directory's checkpoints, else the failing scene's initial state (`coda.report.render.render_views`) when
the data folder exists. The keyframes are also files beside the page (``<page>_keyframes/``: PNG strips,
GIFs the page links to, ``keyframes.json``).

Snapshots are read only through `coda.memory.store.load_snapshot`, which verifies them; every text that
comes from memory (causes, program documents, ids) is untrusted and HTML-escaped (`esc`).

Example:
    $ coda memory report runs/table1/coda-0 --out report.html --data scenes
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.errors import UserError
from coda.report.failure_images import MAX_IMAGES, keyframe_renderer, scene_renderer
from coda.report.html_parts import FAILURES_PER_MODE, array_img, esc, png_uri, sorted_modes

__all__ = ["FAILURES_PER_MODE", "array_img", "esc", "sorted_modes"]  # kept importable from the page

IMAGE_SIZE = 160  # pixels per camera view
MAX_CHART_MODES = 12  # validated modes drawn in the hardness and learning-progress charts
MAX_LINEAGE_ROWS = 40  # scenes listed per program

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.validated td { background: #eef8ee; }
pre { background: #f7f7f7; padding: 0.5em; font-size: 0.8em; overflow-x: auto; }
details { margin: 0.3em 0; }
.note { color: #666; font-style: italic; }
.failure { border-left: 3px solid #c66; padding-left: 0.6em; margin: 0.6em 0; }
code { font-size: 0.9em; }
img.keyframes { max-width: 100%; height: auto; }
"""


def fmt(value: Any, digits: int = 3) -> str:
    """A number rounded to `digits` places (escaped text otherwise; None and NaN are a dash)."""
    if isinstance(value, float):
        return "\u2014" if math.isnan(value) else f"{value:.{digits}f}"
    return esc(value)


def anchor(prefix: str, ident: str) -> str:
    """An element id for an (untrusted) memory id: escaped, without whitespace."""
    return esc(f"{prefix}-{'_'.join(str(ident).split())}")


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


# -- reading the run ---------------------------------------------------------------------------------------
def _read_json(path: Path, kind: type, default: Any = None) -> Any:
    if not path.is_file():
        return default
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        raise UserError(f"{path}: not valid JSON ({_one_line(err)})") from None
    if not isinstance(value, kind):
        raise UserError(f"{path}: expected a JSON {kind.__name__}, got {type(value).__name__}")
    return value


def read_train_log(path: Path) -> dict[str, list[tuple[int, float]]]:
    """(round, loss) per update of each kind (critic, policy) of ``train_log.csv``, in file order."""
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    if not path.is_file():
        return out
    try:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                try:
                    out[str(row["kind"])].append((int(row["round"]), float(row["loss"])))
                except (KeyError, TypeError, ValueError):
                    continue
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UserError(f"{path}: unreadable ({_one_line(err)})") from None
    return out


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """The run's settings, history, metrics and verified snapshots; `UserError` for a missing or bad run."""
    from coda.memory.snapshots import latest_snapshot, snapshot_path
    from coda.memory.store import MemoryFormatError, load_snapshot, read_manifest

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    if not (run_dir / "run.json").is_file():
        raise UserError(f"{run_dir}: not a run directory (no run.json)")
    latest = latest_snapshot(run_dir)
    if latest is None:
        raise UserError(f"{run_dir}: no memory snapshot (expected memory/round-NNNN/)")
    try:
        last_round = int(read_manifest(latest)["round"])
        memory = load_snapshot(latest)
        history = {}  # round -> Memory, every round's snapshot
        for r in range(0, last_round + 1):
            path = snapshot_path(run_dir, r)
            if path == latest:
                history[r] = memory
            elif (path / "manifest.json").is_file():
                history[r] = load_snapshot(path)
    except MemoryFormatError as err:
        raise UserError(_one_line(err)) from None
    return {
        "path": run_dir,
        "run": _read_json(run_dir / "run.json", dict),
        "rounds": _read_json(run_dir / "rounds.json", list, []),
        "metrics": _read_json(run_dir / "metrics.json", dict),
        "train_log": read_train_log(run_dir / "train_log.csv"),
        "snapshot": latest,
        "round": last_round,
        "memory": memory,
        "history": history,
    }


# -- images ------------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_img(fig, alt: str) -> str:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return f'<img class="chart" alt="{esc(alt)}" src="{png_uri(buf.getvalue())}">'


# -- sections ----------------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    lines = [f"<table><thead><tr>{head}</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        tr = f'<tr class="{classes[i]}">' if classes and classes[i] else "<tr>"
        lines.append(tr + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _success(metrics: dict[str, Any], key: str) -> str:
    value, se = metrics.get(f"{key}_success"), metrics.get(f"{key}_se")
    if not isinstance(value, (int, float)):
        return "\u2014"
    n = metrics.get(f"n_{key}")
    return (
        fmt(float(value))
        + (f" \u00b1 {fmt(float(se))}" if isinstance(se, (int, float)) else "")
        + (f" (n = {esc(n)})" if n is not None else "")
    )


def loss_chart(train_log: dict[str, list[tuple[int, float]]]) -> str:
    """Critic and policy loss per update (round boundaries dotted)."""
    kinds = [k for k in ("critic", "policy") if train_log.get(k)]
    if not kinds:
        return '<p class="note">no train_log.csv (or no updates logged)</p>'
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 2.4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        points = train_log[kind]
        ax.plot(range(1, len(points) + 1), [loss for _, loss in points], lw=0.7)
        for i in range(1, len(points)):
            if points[i][0] != points[i - 1][0]:
                ax.axvline(i + 0.5, color="grey", lw=0.5, ls=":")
        ax.set_title(f"{kind} loss per update", fontsize=8)
        ax.set_xlabel("update", fontsize=7)
        ax.tick_params(labelsize=6)
    return figure_img(fig, "critic and policy loss per update")


def run_section(run: dict[str, Any]) -> str:
    info, metrics, rounds = run["run"], run["metrics"], run["rounds"]
    rows = [
        ["method", esc(info.get("method"))],
        ["seed", esc(info.get("seed"))],
        ["profile", esc(info.get("profile"))],
        ["rounds (planned)", esc((info.get("coevolve") or {}).get("rounds"))],
        ["rounds (run)", esc(len(rounds))],
        ["latest snapshot", f"round {esc(run['round'])}"],
    ]
    if metrics is not None:
        rows += [
            ["final ID success", _success(metrics, "id")],
            ["final OOD success", _success(metrics, "ood")],
        ]
    else:
        rows.append(["final success", '<span class="note">no metrics.json (run unfinished?)</span>'])
    out = [f'<h2 id="run">Run <code>{esc(run["path"])}</code></h2>', _table(["", ""], rows)]
    evaluated = [r for r in rounds if isinstance(r, dict) and isinstance(r.get("ood_success"), (int, float))]
    if evaluated:
        out.append("<h3>Per-round success (rounds evaluated)</h3>")
        out.append(
            _table(
                ["round", "ID success", "OOD success", "modes", "validated modes"],
                [
                    [esc(r.get("round")), _success(r, "id"), _success(r, "ood")]
                    + [esc(r.get("modes")), esc(r.get("validated_modes"))]
                    for r in evaluated
                ],
            )
        )
    else:
        out.append('<p class="note">no round was evaluated</p>')
    out += ["<h3>Training losses</h3>", loss_chart(run["train_log"])]
    return "\n".join(out)


def _program_link(pid: str | None, programs: dict[str, Any]) -> str:
    if pid is None:
        return ""
    if pid in programs:
        return f'<a href="#{anchor("program", pid)}">{esc(pid)}</a>'
    return f"{esc(pid)} (not stored)"


def modes_section(mem) -> str:
    """One row per difficulty mode of `mem`."""
    modes = sorted_modes(mem)
    if not modes:
        return '<h2 id="modes">Difficulty modes</h2><p class="note">no difficulty modes in memory</p>'
    programs = mem.programs()
    counts: dict[str, int] = defaultdict(int)
    for d in mem.rows("diagnoses"):
        if d["mode_id"] is not None:
            counts[d["mode_id"]] += 1
    rows, classes = [], []
    for m in modes:
        links = [_program_link(p, programs) for p in (m.generation_program_id, m.training_program_id)]
        rows.append(
            [
                f'<a href="#{anchor("failures", m.mode_id)}">{esc(m.mode_id)}</a>',
                esc(m.family),
                esc(m.phase),
                esc(m.factor),
                esc(m.status),
                fmt(m.hardness),
                fmt(m.learning_progress),
                fmt(m.importance),
                esc(counts.get(m.mode_id, 0)),
                "<br>".join(link for link in links if link) or "\u2014",
            ]
        )
        classes.append("validated" if m.status == "validated" else "")
    header = ["mode", "family", "phase", "factor", "status", "hardness", "learning progress", "importance"]
    header += ["diagnoses", "programs"]
    n_val = sum(m.status == "validated" for m in modes)
    return "\n".join(
        [
            '<h2 id="modes">Difficulty modes</h2>',
            f"<p>{len(modes)} modes, {n_val} validated (latest snapshot).</p>",
            _table(header, rows, classes),
        ]
    )


def trends_section(history: dict[int, Any], mem) -> str:
    """Hardness and learning progress per round of the most important validated modes."""
    modes = sorted(mem.modes("validated"), key=lambda m: (-(m.importance or 0.0), m.mode_id))[
        :MAX_CHART_MODES
    ]
    out = ['<h2 id="trends">Hardness and learning progress over rounds</h2>']
    if not modes:
        return out[0] + '<p class="note">no validated modes</p>'
    rounds = sorted(history)
    per_round = {r: {row["mode_id"]: row for row in history[r].rows("modes")} for r in rounds}
    plt = _pyplot()
    for key, title in (("hardness", "hardness"), ("learning_progress", "learning progress")):
        fig, ax = plt.subplots(figsize=(6.5, 2.8))
        for m in modes:
            ys = []
            for r in rounds:
                value = per_round[r].get(m.mode_id, {}).get(key)
                ys.append(float("nan") if value is None else float(value))
            ax.plot(rounds, ys, marker="o", ms=3, lw=1, label=m.mode_id)
        ax.set_title(f"{title} per round (validated modes)", fontsize=8)
        ax.set_xlabel("round", fontsize=7)
        ax.set_xticks(rounds)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        out.append(figure_img(fig, f"{title} per round of the validated modes"))
    return "\n".join(out)


def program_details(
    pid: str, doc: dict[str, Any], scenes: list[dict], successes: dict[str, list[bool]]
) -> str:
    """A program as pretty-printed JSON in ``<details>``, with the scenes generated from it (`scenes`, rows
    whose program_id is `pid`) and the success of the rollouts on them (`successes`: scene hash -> list)."""
    summary = f"{esc(pid)} \u2014 {esc(doc.get('kind'))}, family {esc(doc.get('family') or None)}"
    if doc.get("mode"):
        summary += f", mode {esc(doc['mode'])}"
    if doc.get("perturbs"):
        summary += f", perturbs {esc(doc['perturbs'])}"
    parts = [
        f'<details id="{anchor("program", pid)}"><summary>{summary}</summary>',
        f"<pre>{esc(json.dumps(doc, indent=2, sort_keys=True))}</pre>",
    ]
    if scenes:
        rows = []
        for s in scenes[:MAX_LINEAGE_ROWS]:
            outcomes = successes.get(s["scene_hash"], [])
            result = f"{sum(outcomes)}/{len(outcomes)} succeeded" if outcomes else "no rollout"
            rows.append([esc(s["scene_hash"]), esc(s["split"]), esc(s["base_hash"]), esc(s["round"]), result])
        parts.append(_table(["scene", "split", "base scene", "round", "rollouts"], rows))
        if len(scenes) > MAX_LINEAGE_ROWS:
            parts.append(f'<p class="note">and {len(scenes) - MAX_LINEAGE_ROWS} more scenes</p>')
    else:
        parts.append('<p class="note">no scene in memory names this program</p>')
    parts.append("</details>")
    return "\n".join(parts)


def programs_section(mem) -> str:
    programs = mem.programs()
    by_program: dict[str, list[dict]] = defaultdict(list)
    for s in mem.rows("scenes"):
        if s["program_id"] is not None:
            by_program[s["program_id"]].append(s)
    successes: dict[str, list[bool]] = defaultdict(list)
    for r in mem.rows("rollouts"):
        successes[r["scene_hash"]].append(bool(r["success"]))
    out = ['<h2 id="programs">Programs</h2>']
    for kind in ("generation", "training"):
        ids = [pid for pid, doc in programs.items() if doc.get("kind") == kind]
        out.append(f"<h3>{kind.capitalize()} programs ({len(ids)})</h3>")
        out += [program_details(pid, programs[pid], by_program.get(pid, []), successes) for pid in ids]
        if not ids:
            out.append('<p class="note">none</p>')
    return "\n".join(out)


def failure_html(d: dict[str, Any], image: str) -> str:
    """One diagnosis row (its cause, phase, factor, ids) and the already-built image HTML of its scene."""
    return (
        '<div class="failure">'
        f"<p><b>{esc(d['diagnosis_id'])}</b> (round {esc(d['round'])}, {esc(d['status'])}, "
        f"confidence {fmt(d.get('confidence'), 2)}): phase <code>{esc(d['phase'])}</code>, "
        f"factor <code>{esc(d['factor'])}</code>, rollout <code>{esc(d['rollout_id'])}</code>, "
        f"scene <code>{esc(d['scene_hash'])}</code></p>"
        f'<p class="cause">{esc(d["cause"])}</p>{image}</div>'
    )


def failures_section(mem, render: Callable[..., str] | None, no_images: str = "") -> str:
    """Up to `FAILURES_PER_MODE` diagnoses per mode (modes in table order), with `render(spec_json,
    diagnosis, rollout)` (`scene_renderer`) of the failing scene or rollout; `no_images` says why there are
    no images (with `render` None) or why only some."""
    rollouts = {row["rollout_id"]: row for row in mem.rows("rollouts")}
    specs: dict[str, str] = {}
    for s in mem.rows("scenes"):
        specs.setdefault(s["scene_hash"], s["spec_json"])
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for d in mem.rows("diagnoses"):
        if d["mode_id"] is not None:
            by_mode[d["mode_id"]].append(d)
    out = ['<h2 id="failures">Example failures per mode</h2>']
    if no_images:
        out.append(f'<p class="note">{esc(no_images)}</p>')
    for m in sorted_modes(mem):
        out.append(f'<h3 id="{anchor("failures", m.mode_id)}">{esc(m.mode_id)} ({esc(m.status)})</h3>')
        diagnoses = by_mode.get(m.mode_id, [])[:FAILURES_PER_MODE]
        if not diagnoses:
            out.append('<p class="note">no diagnosis in memory</p>')
        for d in diagnoses:
            spec = specs.get(d["scene_hash"])
            if render is None:
                image = ""
            elif spec is None:
                image = '<p class="note">the scene is not in memory</p>'
            else:
                image = render(spec, d, rollouts.get(d["rollout_id"]))
            out.append(failure_html(d, image))
    return "\n".join(out)


def page(run: dict[str, Any], render: Callable[[str], str] | None, no_images: str = "") -> str:
    """The whole HTML page of a loaded run (`load_run`)."""
    mem = run["memory"]
    info = run["run"]
    title = f"CoDA memory report: {info.get('method', '?')} seed {info.get('seed', '?')}"
    nav = " | ".join(
        f'<a href="#{a}">{t}</a>'
        for a, t in (
            ("run", "run"),
            ("modes", "modes"),
            ("trends", "trends"),
            ("programs", "programs"),
            ("failures", "failures"),
        )
    )
    body = [
        run_section(run),
        modes_section(mem),
        trends_section(run["history"], mem),
        programs_section(mem),
        failures_section(mem, render, no_images),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1><p>{nav}</p>",
            *body,
            "</body></html>",
            "",
        ]
    )


def build_report(
    run_dir: str | Path,
    out: str | Path,
    data_dir: str | Path = "data",
    image_size: int = IMAGE_SIZE,
    max_images: int = MAX_IMAGES,
    *,
    params: str | Path = "params.yaml",
    sft_dir: str | Path | None = None,
    resimulate: bool = True,
    keyframes_dir: str | Path | None = None,
) -> Path:
    """Write the report of the run `run_dir` to `out`; returns its path. An example failure whose keyframes
    the record keeps (``run_dir/keyframes/``, `coda record`) shows those; else, with `resimulate`, keyframes
    of its rollout re-simulated from the run's checkpoints (`coda.report.keyframes`; the world settings from
    `params`' profile, round 1's actor from `sft_dir`, by default the pipeline's runs/sft); without, or
    where that is impossible, the failing scene's initial state. The keyframes shown are also PNG and GIF
    files with a ``keyframes.json`` index in `keyframes_dir` (default: ``<out stem>_keyframes/`` beside the
    page), and the page links each GIF there."""
    from coda.report.keyframes import INDEX, RECORD_FOLDER, read_index

    if image_size < 1:
        raise UserError(f"--image-size: expected pixels >= 1, got {image_size}")
    run = load_run(run_dir)
    data_dir = Path(data_dir)
    stored_dir = Path(run_dir) / RECORD_FOLDER
    stored = read_index(stored_dir)
    have_data = (data_dir / "manifest.json").is_file()
    render, no_images = None, ""
    if max_images <= 0:
        no_images = "no scene images (image limit 0)"
    elif not have_data and stored:
        no_images = (
            f"the data folder {data_dir}/ is missing: the failures show the keyframes stored with the record "
            "(pass --data, e.g. scenes, for the others' scenes)"
        )
    elif not have_data:
        no_images = f"no scene images: the data folder {data_dir}/ is missing (pass --data, e.g. scenes)"
    out = Path(out)
    if keyframes_dir is None:
        keyframes_dir = out.with_name(f"{out.stem}_keyframes")
    keyframes_dir = Path(keyframes_dir)
    same = keyframes_dir.resolve() == stored_dir.resolve()  # never rewrite a record's own keyframes
    if (keyframes_dir / INDEX).is_file() and not same:  # a new report replaces the old one's keyframes
        (keyframes_dir / INDEX).unlink()
    keyframes = None
    if max_images > 0 and (have_data or stored):
        if resimulate and have_data:
            keyframes = keyframe_renderer(run_dir, data_dir, params, sft_dir, image_size)
        render = scene_renderer(
            data_dir if have_data else None,
            image_size,
            max_images,
            keyframes,
            None if same else keyframes_dir,
            stored=stored,
            stored_dir=stored_dir,
            page_dir=out.parent,
        )
    try:
        text = page(run, render, no_images)
    finally:
        if keyframes is not None:
            keyframes.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
