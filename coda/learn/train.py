"""Policy training: supervised fine-tuning on planner demonstrations and closed-loop evaluation.

SFT is the paper's starting point ("after supervised fine-tuning"): full training of a chunk policy on
planner demonstrations from seed scenes. Demonstrations can be collected DART-style: the executed actions
carry Gaussian noise while the labels are the planner's clean actions from the perturbed states, which
teaches the policy to recover from its own drift. Every gradient step counts toward a global policy-update
counter (the paper's x-axis for learning speed).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda import numerics
from coda.progress import progress

H = 8  # chunk length
# intra-op threads of the training process (SFT, critic and policy updates). Fixed rather than the machine's
# core count, so that results do not depend on it; the rollout workers, idle while the process trains, use
# one thread each (`cached_actor`, `eval_job`).
TRAIN_THREADS = 2


class UpdateCounter:
    """Global number of policy updates (gradient steps) taken so far."""

    def __init__(self, start: int = 0) -> None:
        self.value = start

    def step(self, n: int = 1) -> int:
        self.value += n
        return self.value


# -- demonstrations ---------------------------------------------------------------------------------------
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
@dataclass
class SFTResult:
    losses: list[float]
    updates: int
    train_s: float


def train_sft(
    policy,
    dataset: dict[str, Any],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    counter: UpdateCounter | None = None,
) -> SFTResult:
    """Full-parameter behaviour cloning of `policy` on `dataset` (its own loss: flow matching or L1)."""
    from coda.learn.text import get_encoder

    counter = counter or UpdateCounter()
    t0 = time.perf_counter()
    enc = get_encoder()
    names = sorted(set(dataset["instr"]))
    table = enc.encode(names)
    index = {n: i for i, n in enumerate(names)}
    instr_idx = torch.tensor([index[s] for s in dataset["instr"]])
    obs = torch.from_numpy(dataset["obs"])
    chunk = torch.from_numpy(dataset["chunk"])
    policy.fit_normalizer(obs)
    policy.train()
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr, weight_decay=1e-4)
    n = len(obs)
    steps_per_epoch = max(1, n // batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _epoch in progress(range(epochs), desc="SFT epochs"):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for k in range(steps_per_epoch):
            b = perm[k * batch_size : (k + 1) * batch_size]
            batch = {"obs": obs[b], "instr": table[instr_idx[b]], "chunk": chunk[b]}
            loss = policy.loss(batch, None, generator=gen)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            sched.step()
            counter.step()
            total += float(loss.detach())
        losses.append(total / steps_per_epoch)
    policy.eval()
    return SFTResult(losses, counter.value, time.perf_counter() - t0)


# -- evaluation --------------------------------------------------------------------------------------------
_POLICY_CACHE: dict[str, Any] = {}


def eval_job(job: tuple[str, str, int]) -> dict[str, Any]:
    """Worker job: roll a saved policy out on one scene (the policy is loaded once per worker)."""
    from coda import data
    from coda.learn.policies import ChunkPolicy
    from coda.sim.rollout import run_episode
    from coda.sim.scene import SceneSpec

    policy_dir, scene_json, max_chunks = job
    if policy_dir not in _POLICY_CACHE:
        numerics.pin_torch(1)
        _POLICY_CACHE.clear()
        _POLICY_CACHE[policy_dir] = ChunkPolicy.from_pretrained(policy_dir)
    scene = SceneSpec.from_json(scene_json)
    rec = run_episode(data._WORLD, scene, _POLICY_CACHE[policy_dir], max_chunks=max_chunks)
    return {
        "family": scene.family,
        "success": rec.success,
        "phase_reached": rec.phase_reached,
        "steps": rec.steps,
    }


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


# -- the SFT experiment ------------------------------------------------------------------------------------
def evaluate_sft(
    policy_dir: Path,
    data_dir: Path,
    families: tuple[str, ...],
    eval_id_per_family: int,
    eval_ood_per_suite: int,
    executor,
    max_chunks: int = 12,
) -> dict[str, Any]:
    """The SFT metrics' evaluation keys: a saved policy on the data's fixed ID and OOD episodes."""
    from coda.evaluate import evaluation_items, evaluation_summary

    items = evaluation_items(data_dir, families, eval_id_per_family, eval_ood_per_suite)
    jobs = [(str(Path(policy_dir).resolve()), s.to_json(), max_chunks) for _, _, s in items]
    results = executor.map(eval_job, jobs, desc="evaluation")
    ev = evaluation_summary(items, [bool(r.ok and r.value["success"]) for r in results])
    return {
        "id_success": ev["id_by_family"],
        "ood_success": ev["ood_by_family"],
        "ood_by_suite": ev["ood_by_family_suite"],
        "ood_suite_mean": ev["ood_by_suite"],  # each suite over all families
        "id_mean": ev["id_success"],
        "ood_mean": ev["ood_success"],
        "id_se": ev["id_se"],
        "ood_se": ev["ood_se"],
        "n_id": ev["n_id"],
        "n_ood": ev["n_ood"],
        "eval_outcomes": ev["eval_outcomes"],
    }


def run_sft(
    data_dir: Path,
    out: Path,
    *,
    backbone: str,
    demos_per_family: int,
    noise: float,
    epochs: int,
    batch_size: int,
    lr: float,
    eval_id_per_family: int,
    eval_ood_per_suite: int,
    seed: int,
    families: tuple[str, ...],
    executor,
    max_chunks: int = 12,
    policy_kwargs: dict | None = None,
    demo_repeats: int = 1,
) -> dict:
    """Collect demonstrations, train a policy by SFT, evaluate ID (held-back seed scenes) and OOD (suites)."""
    from coda import data
    from coda.learn.policies import make_policy

    out = Path(out)
    seeds = {f: data.seed_scenes(data_dir, f) for f in families}
    for f, s in seeds.items():
        if len(s) < demos_per_family + eval_id_per_family:
            raise ValueError(
                f"sft: {f} has {len(s)} seed scenes; demos_per_family + eval_id_per_family "
                f"= {demos_per_family + eval_id_per_family}"
            )
    # each seed scene is demonstrated `demo_repeats` times with independent execution noise
    jobs = [
        (s.to_json(), noise, seed * 100_003 + r * 10_007 + i)
        for f in families
        for i, s in enumerate(seeds[f][:demos_per_family])
        for r in range(demo_repeats)
    ]
    t0 = time.perf_counter()
    demos = [r.value for r in executor.map(demo_job, jobs, desc="demonstrations") if r.ok]
    collect_s = time.perf_counter() - t0
    dataset = chunk_dataset(demos)
    torch.manual_seed(seed)
    policy = make_policy(backbone, seed=seed, **(policy_kwargs or {}))
    result = train_sft(policy, dataset, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    policy_dir = out / "policy"
    policy.save_pretrained(policy_dir)

    metrics = {
        "backbone": backbone,
        **evaluate_sft(
            policy_dir, data_dir, families, eval_id_per_family, eval_ood_per_suite, executor, max_chunks
        ),
        "demos": len(demos),
        "demo_success": round(float(np.mean([d["success"] for d in demos])), 4),
        "train_samples": len(dataset["obs"]),
        "updates": result.updates,
        "final_loss": round(result.losses[-1], 5),
        "collect_s": round(collect_s, 1),
        "train_s": round(result.train_s, 1),
    }
    write_json(out / "metrics.json", metrics)
    return metrics
