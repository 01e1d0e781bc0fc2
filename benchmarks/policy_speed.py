"""Policy speed at the default sizes, one thread; prints JSON.

* decision_ms: per backbone, the median wall latency of one decision at batch 1: sample j=8 candidate
  chunks, then (when a critic is plugged in through `score_fn`) score them and take the softmax(Q/0.5)
  weighted combination. Without a critic only the sampling is timed (the key says so: "sample_only").
* decision_cpu_ms: the same, in thread CPU time (less sensitive to other processes on a shared machine)
* decision_ms_lora: as decision_ms with LoRA adapters attached (rank 8, every default target), the
  configuration co-evolution rollouts run in; decision_ms_lora_merged: the same adapters merged into a
  plain copy (`merged_copy`), what a rollout worker can use when it does not train
* train_samples_per_s: SFT steps (full fine-tuning, Adam, batch 64) per backbone, in samples per second

Usage: python benchmarks/policy_speed.py --json [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from coda.learn.policies import POLICIES, ChunkPolicy, add_lora, make_policy, merged_copy

ScoreFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def decide(
    policy: ChunkPolicy,
    obs: torch.Tensor,
    instr: torch.Tensor,
    generator: torch.Generator,
    score_fn: ScoreFn | None = None,
    j: int = 8,
    temperature: float = 0.5,
) -> torch.Tensor:
    """One decision (h, 7): j candidates, critic-weighted when `score_fn(obs, instr, chunks) -> Q (j,)` is given."""
    chunks = policy.sample(obs, instr, j, generator=generator)[0]  # (j, h, 7)
    if score_fn is None:
        return chunks[0]
    weights = torch.softmax(score_fn(obs, instr, chunks) / temperature, dim=0)  # (j,)
    return (weights[:, None, None] * chunks).sum(0)


def time_decisions(policy: ChunkPolicy, repeats: int, score_fn: ScoreFn | None = None) -> tuple[float, float]:
    """Median (wall ms, thread CPU ms) of one decision at batch 1."""
    policy.eval()
    gen = torch.Generator().manual_seed(0)
    obs, instr = torch.randn(1, policy.config.obs_dim, generator=gen), torch.randn(1, policy.config.instr_dim)
    with torch.no_grad():
        for _ in range(10):
            decide(policy, obs, instr, gen, score_fn)
        wall, cpu = [], []
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.thread_time()
            decide(policy, obs, instr, gen, score_fn)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.thread_time() - c0)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def train_throughput(policy: ChunkPolicy, steps: int, batch_size: int = 64) -> float:
    """SFT samples per second: forward, backward and an Adam step on random batches."""
    policy.train()
    gen = torch.Generator().manual_seed(0)
    c = policy.config
    batch = {
        "obs": torch.randn(batch_size, c.obs_dim, generator=gen),
        "instr": torch.randn(batch_size, c.instr_dim, generator=gen),
        "chunk": torch.rand(batch_size, c.horizon, c.action_dim, generator=gen) * 2 - 1,
    }
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-4)

    def step() -> None:
        opt.zero_grad()
        policy.loss(batch, generator=gen).backward()
        opt.step()

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch_size / (time.perf_counter() - t0)


def main(score_fn: ScoreFn | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--train-steps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict = {
        "threads": 1,
        "batch": 1,
        "j": 8,
        "decision": "sample_only" if score_fn is None else "critic_weighted",
        "decision_ms": {},
        "decision_cpu_ms": {},
        "decision_ms_lora": {},
        "decision_ms_lora_merged": {},
        "train_samples_per_s": {},
        "params": {},
    }
    for name in POLICIES:
        policy = make_policy(name)
        out["params"][name] = sum(p.numel() for p in policy.parameters())
        out["decision_ms"][name], out["decision_cpu_ms"][name] = time_decisions(
            policy, args.repeats, score_fn
        )
        out["train_samples_per_s"][name] = train_throughput(policy, args.train_steps)
        add_lora(policy, rank=8, alpha=16)
        out["decision_ms_lora"][name] = time_decisions(policy, args.repeats, score_fn)[0]
        out["decision_ms_lora_merged"][name] = time_decisions(merged_copy(policy), args.repeats, score_fn)[0]
    out = {
        k: ({n: round(v, 3) for n, v in val.items()} if isinstance(val, dict) else val)
        for k, val in out.items()
    }
    print(json.dumps(out, indent=None if args.json else 2))
    return out


if __name__ == "__main__":
    main()
