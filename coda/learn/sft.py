"""Supervised fine-tuning on planner demonstrations, and closed-loop evaluation of a saved policy.

SFT is the paper's starting point ("after supervised fine-tuning"): full training of a chunk policy on
planner demonstrations from seed scenes (`coda.learn.demos`). Every gradient step counts toward a global
policy-update counter (the paper's x-axis for learning speed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda import numerics
from coda.files import write_json
from coda.learn.demos import chunk_dataset, demo_job
from coda.learn.updates import UpdateCounter
from coda.progress import progress


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
