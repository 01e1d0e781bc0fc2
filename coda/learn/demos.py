"""Planner demonstrations as training data: collected DART-style (the executed actions carry Gaussian noise
while the labels are the planner's clean actions from the perturbed states, which teaches the policy to
recover from its own drift), packed for storage, cut into (observation, instruction, chunk) samples and
drawn in batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

H = 8  # chunk length


class NoisyExpert:
    """Runs a scripted planner, executes its chunk plus Gaussian noise, and keeps the clean chunk as labels."""

    def __init__(self, planner, noise: float, rng: np.random.Generator) -> None:
        self.planner, self.noise, self.rng = planner, noise, rng
        self.labels: list[np.ndarray] = []

    def act(self, obs) -> np.ndarray:
        clean = self.planner.act(obs)
        self.labels.append(clean)
        if self.noise <= 0:
            return clean
        noisy = clean.copy()
        noisy[:, :6] += self.rng.normal(0.0, self.noise, size=(len(clean), 6))
        return np.clip(noisy, -1.0, 1.0)


def demo_job(job: tuple[str, float, int]) -> dict[str, Any]:
    """Worker job: one (possibly noise-injected) planner demonstration of a scene."""
    from coda import data
    from coda.sim.families import REGISTRY
    from coda.sim.rollout import run_episode
    from coda.sim.scene import SceneSpec

    scene_json, noise, seed = job
    scene = SceneSpec.from_json(scene_json)
    world = data._WORLD
    world.load(scene)
    planner = REGISTRY[scene.family].planner(world.ctx)
    planner.sync_to_controller = True
    expert = NoisyExpert(planner, noise, np.random.default_rng(seed))
    rec = run_episode(world, scene, expert, max_chunks=14, reload=False)
    labels = np.concatenate(expert.labels)[: rec.steps] if expert.labels else np.zeros((0, 7))
    return {
        "family": scene.family,
        "success": rec.success,
        "instruction": scene.task.instruction,
        "obs": rec.obs[: rec.steps].astype(np.float32),
        "labels": labels.astype(np.float32),
    }


def pack_demos(demos: list[dict[str, Any]], obs_dim: int) -> dict[str, np.ndarray]:
    """Demonstrations as flat arrays for one ``.npz`` (no pickles): per-demo lengths, concatenated obs
    (sum T, obs_dim) and labels (sum T, 7), instructions and families; `unpack_demos` inverts it."""
    lengths = np.array([len(d["obs"]) for d in demos], dtype=np.int64)
    return {
        "lengths": lengths,
        "obs": np.concatenate([d["obs"] for d in demos]) if demos else np.zeros((0, obs_dim), np.float32),
        "labels": np.concatenate([d["labels"][: len(d["obs"])] for d in demos])
        if demos
        else np.zeros((0, 7), np.float32),
        "instruction": np.array([d["instruction"] for d in demos], dtype=str),
        "family": np.array([d.get("family", "") for d in demos], dtype=str),
    }


def unpack_demos(z) -> list[dict[str, Any]]:
    """The demonstrations of a `pack_demos` archive (an opened ``np.load``)."""
    families = z["family"].tolist() if "family" in z else [""] * len(z["lengths"])
    out, k = [], 0
    for i, n in enumerate(z["lengths"].tolist()):
        out.append(
            {
                "obs": z["obs"][k : k + n],
                "labels": z["labels"][k : k + n],
                "instruction": str(z["instruction"][i]),
                "family": str(families[i]),
                "success": True,
            }
        )
        k += n
    return out


def chunk_dataset(demos: list[dict[str, Any]]) -> dict[str, Any]:
    """Every control step of every successful demonstration starts a training chunk of the next 8 labels.

    Past the end of a demonstration the chunk is padded with "hold still" (zero motion, last gripper command).
    """
    obs, chunks, instr = [], [], []
    for d in demos:
        if not d["success"] or len(d["labels"]) == 0:
            continue
        labels = d["labels"]
        hold = np.zeros((H, 7), dtype=np.float32)
        hold[:, 6] = labels[-1, 6]
        padded = np.concatenate([labels, hold])
        for t in range(len(labels)):
            obs.append(d["obs"][t])
            chunks.append(padded[t : t + H])
            instr.append(d["instruction"])
    return {
        "obs": np.asarray(obs, dtype=np.float32),
        "chunk": np.asarray(chunks, dtype=np.float32),
        "instr": instr,
    }


def demo_batch(ds: dict[str, Any], n: int, rng: np.random.Generator) -> dict[str, Any]:
    """`n` chunks (at least one) drawn with replacement from a `chunk_dataset`: tensors + instruction strings."""
    idx = rng.integers(len(ds["obs"]), size=max(n, 1))
    return {
        "obs": torch.as_tensor(ds["obs"][idx]),
        "instr": [ds["instr"][i] for i in idx],
        "chunk": torch.as_tensor(ds["chunk"][idx]),
    }


# -- SFT ---------------------------------------------------------------------------------------------------
