"""Keyframes of a recorded failing rollout, re-simulated from what the run directory keeps.

A rollout of round r was produced by the actor the loop published before round r's rollouts
(`coda.coevolve.loop.Loop.round`): the policy and critic after round r-1's training, i.e. the checkpoint
``RUN/rounds/round-{r-1}/`` (``policy/`` when fine-tuning all weights, else the SFT policy with
``adapter/``, and ``critic/``); for round 1 the SFT policy with an untrained critic
(``ChunkCritic(CriticConfig(obs_dim, seed=run_seed))``, `coda.coevolve.state.RunState.fresh`). The worker
(`coda.engine.jobs.rollout_job`) built a `CriticGuidedPolicy` with the run's j, temperature, selection and
the round's seed ``seed * 1000 + r``, and ran `coda.sim.rollout.run_episode` in a `World` configured by
`coda.sim.world.world_kwargs` of the profile. `resimulate` does the same (the actor goes through the same
merge, save and load as a published one) in a rendering world, captures both camera views at every chunk
start and at the end, and keeps at most `MAX_FRAMES` of them: the start, the first chunk of the failing
phase, one in between and the end. Whether the re-simulated outcome (success, phases reached, steps)
equals the recorded rollout's is reported, never assumed.

`save_keyframes` writes one failure's frames as files (a PNG strip, a short GIF and a row of
``keyframes.json``), the copies `coda memory report` keeps beside its page.

Example:
    >>> kf = KeyframeRenderer("runs/table1/coda-0", "scenes", params="params.yaml", image_size=128)
    >>> frames = kf(diagnosis_row, rollout_row, spec_json)   # None: no checkpoint, use the initial state
    >>> save_keyframes(frames, diagnosis_row, "report_keyframes")
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_FRAMES = 4


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
        if self.matches:
            return "re-simulated (matches the recorded rollout)"
        return f"re-simulated (differs from the recorded rollout: {'; '.join(self.differences)})"


INDEX = "keyframes.json"


def save_keyframes(kf: Keyframes, diagnosis: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Write `kf` into `folder` as ``<diagnosis_id>.png`` (the frames left to right, each front | side) and
    ``<diagnosis_id>.gif`` (one frame per keyframe, 0.8 s each, looping), and add its row to the folder's
    ``keyframes.json`` (ids, mode, frame labels, whether the re-simulation matches the recorded rollout);
    returns the row."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    did = str(diagnosis["diagnosis_id"])
    if not did or any(c in did for c in "/\\") or did.startswith("."):
        raise ValueError(f"diagnosis_id: not usable as a file name: {did!r}")
    frames = [np.ascontiguousarray(frame) for _, frame in kf.frames]
    Image.fromarray(np.concatenate(frames, axis=1)).save(folder / f"{did}.png")
    first, *rest = [Image.fromarray(frame) for frame in frames]
    first.save(folder / f"{did}.gif", save_all=True, append_images=rest, duration=800, loop=0)
    row = {
        "diagnosis_id": did,
        "mode_id": diagnosis.get("mode_id"),
        "rollout_id": diagnosis.get("rollout_id"),
        "round": diagnosis.get("round"),
        "png": f"{did}.png",
        "gif": f"{did}.gif",
        "frames": [label for label, _ in kf.frames],
        "matches": kf.matches,
        "differences": list(kf.differences),
        "recorded": kf.recorded,
        "resimulated": kf.resimulated,
    }
    index = folder / INDEX
    rows = json.loads(index.read_text()) if index.is_file() else []
    rows = [r for r in rows if r.get("diagnosis_id") != did] + [row]
    index.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return row


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


class _Recorder:
    """Wraps a policy: keeps (step, both camera views) at every chunk start."""

    def __init__(self, policy, world) -> None:
        self.policy, self.world, self.step, self.frames = policy, world, 0, []

    def act(self, obs):
        images = obs.images if obs.images is not None else self.world.cameras()
        self.frames.append((self.step, np.concatenate(list(images), axis=1)))
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
    world, scene, actor, *, max_chunks: int, recorded: dict[str, Any], phase_name: str | None = None
) -> Keyframes:
    """Run `actor` on `scene` in the rendering `world` and compare with the `recorded` rollout row
    (success, phase_reached, steps)."""
    from coda.sim.rollout import run_episode

    recorder = _Recorder(actor, world)
    rec = run_episode(world, scene, recorder, max_chunks=max_chunks)
    end = np.concatenate(list(world.cameras()), axis=1)
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
        image_size: int = 128,
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
            kw["image_size"] = self.image_size
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
