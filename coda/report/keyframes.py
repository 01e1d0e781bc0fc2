"""Keyframes of a recorded failing rollout, re-simulated from what the run directory keeps.

A rollout of round r was produced by the actor the loop published before round r's rollouts
(`coda.coevolve.loop.Loop.round`): the policy and critic after round r-1's training, i.e. the checkpoint
``RUN/rounds/round-{r-1}/`` (``policy/`` when fine-tuning all weights, else the SFT policy with
``adapter/``, and ``critic/``); for round 1 the SFT policy with an untrained critic
(``ChunkCritic(CriticConfig(obs_dim, seed=run_seed))``, `coda.coevolve.state.RunState.fresh`). The worker
(`coda.engine.jobs.rollout_job`) built a `CriticGuidedPolicy` with the run's j, temperature, selection and
the round's seed ``seed * 1000 + r``, and ran `coda.sim.rollout.run_episode` in a `World` configured by
`coda.sim.world.world_kwargs` of the profile. `resimulate` does the same (the actor goes through the same
merge, save and load as a published one) in a rendering world, captures both figure views at every chunk
start and at the end, and keeps at most `MAX_FRAMES` of them: the start, the first chunk of the failing
phase, one in between and the end. The frames are the two figure cameras' views (front | rear,
`coda.sim.world.FIGURE_CAMERAS`: the whole arm and the workspace), not what the policy observes; taking
them reads the state and simulates nothing. Whether the re-simulated outcome (success, phases reached,
steps) equals the recorded rollout's is reported, never assumed.

`save_keyframes` writes one failure's frames as files (a PNG strip, a short GIF, both with a label over
each frame, and a row of ``keyframes.json``), the copies `coda memory report` keeps beside its page.
`record_keyframes` stores those of a few diagnosed failures with a run's record (`coda record`), so that
the memory report of the record shows them where no checkpoint is (a fresh clone).

Example:
    >>> kf = KeyframeRenderer("runs/table1/coda-0", "scenes", params="params.yaml", image_size=160)
    >>> frames = kf(diagnosis_row, rollout_row, spec_json)   # None: no checkpoint, use the initial state
    >>> save_keyframes(frames, diagnosis_row, "report_keyframes")
    >>> record_keyframes("runs/table1/coda-0", "records/.../coda-0/keyframes", data_dir="scenes")
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_FRAMES = 4
GIF_FRAME_MS = 800


class CheckpointMissing(Exception):
    """The actor of a round cannot be rebuilt from the run directory (and the SFT directory)."""


@dataclass
class Keyframes:
    """Frames of one re-simulated rollout: (label, (H, 2W, 3) uint8 front|side) pairs, in time order, and
    how the re-simulated outcome compares with the recorded one (`differences` empty when it matches)."""

    frames: list[tuple[str, np.ndarray]]
    recorded: dict[str, Any]
    resimulated: dict[str, Any]
    differences: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.differences

    @property
    def label(self) -> str:
        """What the page says about the frames (plain text, to be escaped)."""
        return outcome_label(self.differences)

    def labelled_frames(self) -> list[np.ndarray]:
        """Each frame (front | rear) under a band naming it and its views (`coda.report.render.caption`)."""
        from coda.report.render import caption, view_names

        views = " | ".join(view_names())
        return [caption(frame, f"{label}: {views}") for label, frame in self.frames]

    def strip(self) -> np.ndarray:
        """The labelled frames left to right, `STRIP_GAP` white pixels apart: (H + band, n * 2W + gaps, 3)
        uint8."""
        return join_frames(self.labelled_frames())


STRIP_GAP = 6  # white pixels between the frames of a strip


def join_frames(frames: list[np.ndarray]) -> np.ndarray:
    """`frames` (each (H, W', 3)) left to right with `STRIP_GAP` white columns between them."""
    gap = np.full((frames[0].shape[0], STRIP_GAP, 3), 255, np.uint8)
    parts = [part for frame in frames for part in (gap, frame)][1:]
    return np.concatenate(parts, axis=1)


def outcome_label(differences: list[str]) -> str:
    """Whether a re-simulation matched its recorded rollout, in words (`Keyframes.label`)."""
    if not differences:
        return "re-simulated (matches the recorded rollout)"
    return f"re-simulated (differs from the recorded rollout: {'; '.join(differences)})"


INDEX = "keyframes.json"


def save_keyframes(kf: Keyframes, diagnosis: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Write `kf` into `folder` as ``<diagnosis_id>.png`` (`Keyframes.strip`: the frames left to right, each
    front | rear under its label, in 256 colours) and ``<diagnosis_id>.gif`` (one labelled frame per
    keyframe, 0.8 s each, looping), and add its row to the folder's ``keyframes.json`` (ids, mode, frame
    labels, whether the re-simulation matches the recorded rollout); returns the row. The files' bytes
    depend only on the frames (no time stamp or software tag)."""
    from PIL import Image

    from coda.report.render import view_names

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    did = str(diagnosis["diagnosis_id"])
    if not did or any(c in did for c in "/\\") or did.startswith("."):
        raise ValueError(f"diagnosis_id: not usable as a file name: {did!r}")
    frames = kf.labelled_frames()
    png = Image.fromarray(join_frames(frames))
    # 256 colours (median cut, no dithering: deterministic) hold these flat-shaded renders at half the bytes
    png = png.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    png.save(folder / f"{did}.png", optimize=True)
    first, *rest = [Image.fromarray(frame) for frame in frames]
    first.save(
        folder / f"{did}.gif", save_all=True, append_images=rest, duration=GIF_FRAME_MS, loop=0, optimize=True
    )
    row = {
        "diagnosis_id": did,
        "mode_id": diagnosis.get("mode_id"),
        "rollout_id": diagnosis.get("rollout_id"),
        "round": diagnosis.get("round"),
        "png": f"{did}.png",
        "gif": f"{did}.gif",
        "frames": [label for label, _ in kf.frames],
        "views": view_names(),
        "matches": kf.matches,
        "differences": list(kf.differences),
        "recorded": kf.recorded,
        "resimulated": kf.resimulated,
    }
    add_to_index(folder, row)
    return row


def add_to_index(folder: Path, row: dict[str, Any]) -> None:
    """Add `row` to ``folder/keyframes.json``, replacing a row of the same diagnosis."""
    index = folder / INDEX
    rows = json.loads(index.read_text()) if index.is_file() else []
    rows = [r for r in rows if r.get("diagnosis_id") != row["diagnosis_id"]] + [row]
    index.write_text(json.dumps(rows, indent=1, default=str) + "\n")


def _plain_name(name: Any, suffix: str) -> bool:
    return isinstance(name, str) and name.endswith(suffix) and Path(name).name == name and name[0] != "."


def read_index(folder: str | Path) -> dict[str, dict[str, Any]]:
    """The rows of ``folder/keyframes.json`` by diagnosis id, those whose PNG and GIF (plain file names) are
    in `folder`; empty when there is no index or it is not a JSON list."""
    folder = Path(folder)
    try:
        rows = json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not _plain_name(row.get("png"), ".png"):
            continue
        if not _plain_name(row.get("gif"), ".gif") or not (folder / row["png"]).is_file():
            continue
        if (folder / row["gif"]).is_file():
            out[str(row.get("diagnosis_id"))] = row
    return out


def default_sft_dir(run_dir: str | Path) -> Path | None:
    """The SFT directory of a pipeline run: ``sft/`` beside the run's parent folder (``runs/sft`` for
    ``runs/table1/coda-0``), else ``runs/sft`` under the working directory; None when neither has a policy."""
    run_dir = Path(run_dir).resolve()
    for cand in (run_dir.parent.parent / "sft", run_dir.parent.parent / "runs" / "sft", Path("runs/sft")):
        if (cand / "policy").is_dir():
            return cand
    return None


def round_actor(run_dir: Path, r: int, sft_dir: Path | None, run: dict[str, Any]):
    """The `CriticGuidedPolicy` that rolled round `r` out (see the module docstring); `CheckpointMissing`
    when its checkpoint (or, for round 1 and adapters, the SFT policy) is not there."""
    from coda.learn.awr import CriticGuidedPolicy
    from coda.learn.critic import ChunkCritic, CriticConfig
    from coda.learn.policies import ChunkPolicy
    from coda.learn.policies.lora import load_adapter, merged_copy
    from coda.numerics import pin_torch

    pin_torch(1)  # as the rollout worker does (`coda.learn.awr.cached_actor`): one thread, the pinned kernels

    if r < 1:
        raise CheckpointMissing(f"round {r}: no rollouts before round 1")
    ckpt = run_dir / "rounds" / f"round-{r - 1:04d}"
    needs_sft = r == 1 or not (ckpt / "policy").is_dir()
    if needs_sft and (sft_dir is None or not (Path(sft_dir) / "policy").is_dir()):
        raise CheckpointMissing(f"no SFT policy (looked in {sft_dir or 'runs/sft'}; pass --sft)")
    if r > 1 and not (ckpt / "critic").is_dir():
        raise CheckpointMissing(f"no checkpoint {ckpt}/ (critic)")
    if r == 1:
        policy = ChunkPolicy.from_pretrained(Path(sft_dir) / "policy")
        critic = ChunkCritic(CriticConfig(obs_dim=policy.config.obs_dim, seed=int(run.get("seed", 0))))
    else:
        if (ckpt / "policy").is_dir():
            policy = ChunkPolicy.from_pretrained(ckpt / "policy")
        else:
            policy = ChunkPolicy.from_pretrained(Path(sft_dir) / "policy")
            if (ckpt / "adapter").is_dir():
                load_adapter(policy, ckpt / "adapter")
        critic = ChunkCritic.from_pretrained(ckpt / "critic")
    # published actors are merged, saved and loaded again by the worker: the same round trip here
    with tempfile.TemporaryDirectory(prefix="coda-actor-") as tmp:
        (merged_copy(policy) if policy.lora is not None else policy).save_pretrained(Path(tmp) / "policy")
        critic.save_pretrained(Path(tmp) / "critic")
        policy = ChunkPolicy.from_pretrained(Path(tmp) / "policy")
        critic = ChunkCritic.from_pretrained(Path(tmp) / "critic")
    c = run.get("coevolve") or {}
    seed = int(run.get("seed", 0)) * 1000 + r
    return CriticGuidedPolicy(
        policy,
        critic,
        j=int(c.get("j", 8)),
        temperature=float(c.get("temperature", 0.5)),
        seed=seed,
        mode=c.get("selection", "softmax"),
    )


def figure_frame(world, image_size: int | None) -> np.ndarray:
    """The figure cameras' views of `world` now, side by side: (H, 2W, 3) uint8."""
    return np.concatenate(list(world.figure_cameras(image_size)), axis=1)


class _Recorder:
    """Wraps a policy: keeps (step, both figure views) at every chunk start."""

    def __init__(self, policy, world, image_size: int | None) -> None:
        self.policy, self.world, self.image_size, self.step, self.frames = policy, world, image_size, 0, []

    def act(self, obs):
        self.frames.append((self.step, figure_frame(self.world, self.image_size)))
        chunk = self.policy.act(obs)
        self.step += len(chunk)  # run_episode steps the whole chunk unless it succeeds (and stops) in it
        return chunk


def failing_phase(rec, phase_name: str | None) -> tuple[int | None, int | None]:
    """(index, first step) of the failing phase: the diagnosis's phase when the family names it, else the
    first phase not completed; the first step is the one after the previous phase completed (0 for the
    first). (None, None) when every phase completed."""
    names = list(rec.phase_names)
    k = names.index(phase_name) if phase_name in names else rec.phase_reached
    if k >= len(names):
        return None, None
    if k == 0:
        return 0, 0
    done = np.flatnonzero(np.asarray(rec.phases)[:, k - 1])
    return k, int(done[0]) if done.size else None


def choose_frames(
    captured: list[tuple[int, np.ndarray]], end: np.ndarray, rec, phase_name: str | None
) -> list[tuple[str, np.ndarray]]:
    """At most `MAX_FRAMES` labelled frames: the start, the first chunk of the failing phase, one chunk
    between that and the end, and the end."""
    steps = rec.steps
    picks: list[tuple[str, int, np.ndarray]] = []
    if captured:
        picks.append(("start (step 0)", captured[0][0], captured[0][1]))
    k, first = failing_phase(rec, phase_name)
    if k is not None and first is not None:
        later = [(t, img) for t, img in captured if t >= first]
        if later and later[0][0] not in (0, steps):
            t, img = later[0]
            picks.append((f"phase {rec.phase_names[k]!r} begins (step {t})", t, img))
    mid_from = picks[-1][1] if picks else 0
    between = [(t, img) for t, img in captured if mid_from < t < steps]
    if between and len(picks) < MAX_FRAMES - 1:
        t, img = between[len(between) // 2]
        picks.append((f"step {t}", t, img))
    picks.append((f"end (step {steps})", steps, end))
    return [(label, img) for label, _, img in picks[:MAX_FRAMES]]


def resimulate(
    world,
    scene,
    actor,
    *,
    max_chunks: int,
    recorded: dict[str, Any],
    phase_name: str | None = None,
    image_size: int | None = None,
) -> Keyframes:
    """Run `actor` on `scene` in the rendering `world` and compare with the `recorded` rollout row
    (success, phase_reached, steps); the frames are `image_size` pixels per view (default: the world's)."""
    from coda.sim.rollout import run_episode

    recorder = _Recorder(actor, world, image_size)
    rec = run_episode(world, scene, recorder, max_chunks=max_chunks)
    end = figure_frame(world, image_size)
    again = {"success": bool(rec.success), "phase_reached": int(rec.phase_reached), "steps": int(rec.steps)}
    diffs = []
    for key, value in again.items():
        if recorded.get(key) is not None and type(value)(recorded[key]) != value:
            diffs.append(f"{key} {recorded[key]} recorded, {value} re-simulated")
    return Keyframes(choose_frames(recorder.frames, end, rec, phase_name), dict(recorded), again, diffs)


class KeyframeRenderer:
    """Re-simulates the failing rollouts of a run for `coda.report.memory_report.failures_section`: one
    rendering `World` for the page and one actor per round, built on first use; `close` frees them.

    Calling it with a diagnosis row, its rollout row and the scene JSON returns the rollout's `Keyframes`,
    or None when the round's actor cannot be rebuilt (the caller then shows the initial state)."""

    def __init__(
        self,
        run_dir: str | Path,
        data_dir: str | Path,
        *,
        params: str | Path = "params.yaml",
        sft_dir: str | Path | None = None,
        image_size: int = 160,
    ) -> None:
        from coda.config import load_params
        from coda.sim.world import world_kwargs

        self.run_dir = Path(run_dir)
        self.run = json.loads((self.run_dir / "run.json").read_text())
        self.cfg = load_params(params, self.run.get("profile"))
        self.world_kwargs = world_kwargs(self.cfg)
        self.data_dir, self.image_size = Path(data_dir), image_size
        self.sft_dir = Path(sft_dir) if sft_dir is not None else default_sft_dir(self.run_dir)
        self._world = None
        self._actors: dict[int, Any] = {}

    def world(self):
        """The rendering world (the worker's settings; the same robot model as the worker's)."""
        from coda.sim.world import World

        if self._world is None:
            kw = dict(self.world_kwargs)
            lowpoly = bool(kw.pop("render"))  # a non-rendering worker simulated the full Panda model
            if not lowpoly:
                # its policy saw no images: make the observation cameras' (unused here) as cheap as can be
                kw["image_size"] = 1
            self._world = World(self.data_dir, render=True, lowpoly=lowpoly, **kw)
        return self._world

    def actor(self, r: int):
        if r not in self._actors:
            self._actors[r] = round_actor(self.run_dir, r, self.sft_dir, self.run)
        return self._actors[r]

    def keyframes(self, diagnosis: dict[str, Any], rollout: dict[str, Any] | None, spec_json: str):
        """`Keyframes` of the diagnosis's rollout (`CheckpointMissing` when its actor is not there)."""
        from coda.sim.scene import SceneSpec

        r = int((rollout or diagnosis)["round"])
        actor = self.actor(r)
        recorded = {k: (rollout or {}).get(k) for k in ("success", "phase_reached", "steps")}
        if rollout is None:
            recorded["success"] = False  # a diagnosis is of a failure
        return resimulate(
            self.world(),
            SceneSpec.from_json(spec_json),
            actor,
            max_chunks=self.cfg.sim.max_chunks,
            recorded=recorded,
            phase_name=diagnosis.get("phase"),
            image_size=self.image_size,
        )

    def __call__(self, diagnosis: dict[str, Any], rollout: dict[str, Any] | None, spec_json: str):
        """`keyframes`, or None when the round's actor cannot be rebuilt."""
        try:
            return self.keyframes(diagnosis, rollout, spec_json)
        except CheckpointMissing:
            return None

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
            self._world = None
        self._actors.clear()


# -- keyframes stored with a record (`coda record`) ---------------------------------------------------------
RECORD_FOLDER = "keyframes"  # RECORD/keyframes/: the PNG strips, GIFs and keyframes.json of a record
RECORD_PER_MODE = 1  # failures stored per difficulty mode
RECORD_LIMIT = 8  # failures stored per record
RECORD_IMAGE_SIZE = 160  # pixels per view


def record_candidates(mem, per_mode: int = RECORD_PER_MODE, limit: int = RECORD_LIMIT):
    """(mode, diagnoses) of the modes whose failures a record stores, in the order they are tried: the modes
    of `mem` in the memory report's order (validated first, then by importance; `sorted_modes`), taken family
    by family in turn (each family's first mode, then each one's second, ...) so that a few modes of every
    family come before many of one, at most `limit` of them; only modes of the PyBullet task families
    (`coda.data.FAMILIES`: a LIBERO run's are not re-simulated here). Per mode the diagnoses the report lists
    for it (its first `FAILURES_PER_MODE`) whose scene is in memory; `record_keyframes` keeps the first
    `per_mode` that re-simulate."""
    from coda.data import FAMILIES
    from coda.report.html_parts import FAILURES_PER_MODE, sorted_modes

    specs = {s["scene_hash"] for s in mem.rows("scenes")}
    by_mode: dict[str, list[dict]] = {}
    for d in mem.rows("diagnoses"):
        if d["mode_id"] is not None:
            by_mode.setdefault(d["mode_id"], []).append(d)
    per_family: dict[str, list] = {}
    for m in sorted_modes(mem):
        diagnoses = [d for d in by_mode.get(m.mode_id, [])[:FAILURES_PER_MODE] if d["scene_hash"] in specs]
        if diagnoses and per_mode > 0 and m.family in FAMILIES:
            per_family.setdefault(m.family, []).append((m, diagnoses))
    order = []
    for k in range(max((len(v) for v in per_family.values()), default=0)):
        order += [modes[k] for modes in per_family.values() if k < len(modes)]
    return order[:limit]


def record_keyframes(
    run_dir: str | Path,
    folder: str | Path,
    *,
    data_dir: str | Path,
    params: str | Path = "params.yaml",
    sft_dir: str | Path | None = None,
    image_size: int = RECORD_IMAGE_SIZE,
    per_mode: int = RECORD_PER_MODE,
    limit: int = RECORD_LIMIT,
) -> dict[str, Any]:
    """Re-simulate a few diagnosed failures of finished run `run_dir` (its latest snapshot) and save their
    keyframes into `folder` (`save_keyframes`: ``<diagnosis_id>.png``, ``.gif`` and ``keyframes.json``):
    at most `per_mode` per difficulty mode and `limit` in all, the modes and diagnoses `record_candidates`
    orders; a diagnosis whose round's actor is not in the run directory (`CheckpointMissing`) or whose
    re-simulation fails is skipped for the mode's next one. A re-simulation that differs from the recorded
    rollout is stored with that label (its row says how it differs). The bytes depend only on the run, the
    params and the scenes' assets when this process runs under the numerics pin (`coda.numerics`; the
    `coda` command does). Returns ``stored``, ``matching``, ``skipped`` (diagnosis id -> why) and
    ``bytes`` (and ``why`` when no failure is a candidate)."""
    from coda.memory.store import latest_snapshot, load_snapshot

    run_dir, folder = Path(run_dir), Path(folder)
    mem = load_snapshot(latest_snapshot(run_dir))
    specs: dict[str, str] = {}
    for s in mem.rows("scenes"):
        specs.setdefault(s["scene_hash"], s["spec_json"])
    rollouts = {r["rollout_id"]: r for r in mem.rows("rollouts")}
    candidates = record_candidates(mem, per_mode, limit)
    if not candidates:
        why = "no diagnosed failure of a PyBullet task family with its scene in memory"
        return {"stored": 0, "matching": 0, "skipped": {}, "bytes": 0, "why": why}
    rows, skipped = [], {}
    renderer = KeyframeRenderer(run_dir, data_dir, params=params, sft_dir=sft_dir, image_size=image_size)
    try:
        for _, diagnoses in candidates:
            kept = 0
            for d in diagnoses:
                if kept >= per_mode:
                    break
                try:
                    kf = renderer.keyframes(d, rollouts.get(d["rollout_id"]), specs[d["scene_hash"]])
                except Exception as err:  # no checkpoint, or a failed re-simulation: the mode's next one
                    skipped[str(d["diagnosis_id"])] = f"{type(err).__name__}: {' '.join(str(err).split())}"
                    continue
                if kf.frames:
                    rows.append(save_keyframes(kf, d, folder))
                    kept += 1
    finally:
        renderer.close()
    size = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
    return {
        "stored": len(rows),
        "matching": sum(bool(r["matches"]) for r in rows),
        "skipped": skipped,
        "bytes": size,
    }


def record_keyframes_pinned(run_dir: str | Path, folder: str | Path, **kw) -> dict[str, Any]:
    """`record_keyframes` in this process when it runs under the numerics pin (the `coda` command), else in a
    child process started under it (``python -m coda.report.keyframes``): stored bytes never depend on
    the caller's CPU."""
    import os
    import subprocess
    import sys

    from coda import numerics

    if not numerics.enabled() or numerics.started_pinned():
        return record_keyframes(run_dir, folder, **kw)
    args = [sys.executable, "-m", "coda.report.keyframes", str(run_dir), str(folder)]
    for key, value in kw.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, **numerics.pinned_env()}
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"record_keyframes failed in a pinned process: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """``python -m coda.report.keyframes RUN FOLDER --data-dir D [...]``: `record_keyframes`, its result as
    one JSON line (what `record_keyframes_pinned` runs under the pin)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m coda.report.keyframes")
    ap.add_argument("run_dir")
    ap.add_argument("folder")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--sft-dir", default=None)
    for name in ("image-size", "per-mode", "limit"):
        ap.add_argument(f"--{name}", type=int, default=argparse.SUPPRESS)
    args = vars(ap.parse_args(argv))
    print(json.dumps(record_keyframes(args.pop("run_dir"), args.pop("folder"), **args)))


if __name__ == "__main__":
    main()
