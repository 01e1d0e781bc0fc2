"""Decision latency and training throughput of the learning stack at the default sizes, one thread; prints JSON.

* decision_ms: per backbone, the median wall latency of one full rollout decision at batch 1
  (`CriticGuidedPolicy.act` on an observation whose instruction embedding is already cached): sample j=8
  candidate chunks, score them with the default `ChunkCritic`, execute their softmax(Q/0.5)-weighted
  combination, as rollout workers make it (`cached_actor`: the critic and the flow policy's sampling run
  through TorchScript traces, the same bits as eager). decision_cpu_ms: the same in thread CPU time (less
  sensitive to other processes); decision_ms_eager: without the traces. Under the numerics pin, with one
  thread, as in a worker.
* decision_ms_lora: the same for a policy carrying rank-8 LoRA adapters (the co-evolution configuration;
  `CriticGuidedPolicy` merges them once at construction).
* sample_ms / sample_ms_lora: sampling the j=8 candidates alone, without merging the adapters in the
  second; critic_ms: scoring j=8 chunks with the default critic alone.
* train_samples_per_s: training throughput at batch 64. sft_<backbone>: full fine-tuning steps
  (Adam); critic: `CriticTD.update` with j=8 bootstrap candidates; awr_<backbone>: `awr_update` on
  rank-8 LoRA adapters (j=8 candidates sampled and scored per state, so 512 weighted pairs per step),
  counted in states.

Usage: python benchmarks/policy_speed.py --json [--repeats 200] [--train-steps 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

from coda import numerics

numerics.pin_process()  # as every `coda` process and worker: re-executes this script under the numerics pin

import numpy as np  # noqa: E402
import torch  # noqa: E402

from coda.learn.awr import CriticGuidedPolicy, awr_update, prepare_lora  # noqa: E402
from coda.learn.critic import ChunkCritic, CriticTD  # noqa: E402
from coda.learn.policies import POLICIES, ChunkPolicy, add_lora, make_policy  # noqa: E402

J = 8
BATCH = 64
INSTRUCTION = "put the red cube in the bowl"


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median (wall ms, thread CPU ms) of `fn()` after 10 warm-up calls."""
    for _ in range(10):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def time_decision(
    policy: ChunkPolicy, critic: ChunkCritic, repeats: int, trace: bool = True
) -> tuple[float, float]:
    """One `CriticGuidedPolicy.act` per call, on observations that differ every call (fresh noise); with
    `trace`, as rollout workers decide (`cached_actor`: critic and flow sampling through TorchScript traces)."""
    import copy

    rule = CriticGuidedPolicy(
        copy.deepcopy(policy), critic, j=J, mode="softmax", temperature=0.5, trace=trace
    )
    rule.embed(INSTRUCTION)  # instruction embeddings are cached per string in rollouts
    rng = np.random.default_rng(0)
    observations = [
        SimpleNamespace(
            vector=rng.normal(size=policy.config.obs_dim).astype(np.float32), instruction=INSTRUCTION
        )
        for _ in range(16)
    ]
    calls = iter(range(1 << 62))
    return median_ms(lambda: rule.act(observations[next(calls) % len(observations)]), repeats)


def time_sampling(policy: ChunkPolicy, repeats: int) -> float:
    policy.eval()
    gen = torch.Generator().manual_seed(0)
    obs, instr = torch.randn(1, policy.config.obs_dim, generator=gen), torch.randn(1, policy.config.instr_dim)
    with torch.no_grad():
        return median_ms(lambda: policy.sample(obs, instr, J, generator=gen), repeats)[0]


def time_critic(critic: ChunkCritic, repeats: int) -> float:
    critic.eval()
    obs, instr, chunks = torch.randn(1, critic.config.obs_dim), torch.randn(1, 384), torch.rand(1, J, 8, 7)
    with torch.no_grad():
        return median_ms(lambda: critic(obs, instr, chunks), repeats)[0]


def throughput(step: Callable[[], object], steps: int, batch_size: int = BATCH) -> float:
    """Samples per second of `step` (one batch per call) after 5 warm-up steps."""
    for _ in range(5):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch_size / (time.perf_counter() - t0)


def random_batch(gen: torch.Generator, obs_dim: int = 50) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.randn(BATCH, obs_dim, generator=gen),
        "instr": torch.randn(BATCH, 384, generator=gen),
        "chunk": torch.rand(BATCH, 8, 7, generator=gen) * 2 - 1,
    }


def sft_step(policy: ChunkPolicy) -> Callable[[], None]:
    policy.train()
    gen = torch.Generator().manual_seed(0)
    batch = random_batch(gen, policy.config.obs_dim)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad()
        policy.loss(batch, generator=gen).backward()
        opt.step()

    return step


def critic_step(critic: ChunkCritic) -> Callable[[], None]:
    td = CriticTD(critic)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.randn(BATCH, 50, generator=gen),
        "instr": torch.randn(BATCH, 384, generator=gen),
        "actions": torch.rand(BATCH, 8, 7, generator=gen) * 2 - 1,
        "mask": torch.ones(BATCH, 8, dtype=torch.bool),
        "reward": torch.zeros(BATCH),
        "shaping": torch.randn(BATCH, generator=gen),
        "next_obs": torch.randn(BATCH, 50, generator=gen),
        "done": torch.zeros(BATCH, dtype=torch.bool),
        "steps": torch.full((BATCH,), 8),
        "next_candidates": torch.rand(BATCH, J, 8, 7, generator=gen) * 2 - 1,
    }
    return lambda: td.update(batch)


def awr_step(policy: ChunkPolicy, critic: ChunkCritic) -> Callable[[], None]:
    optimizer = prepare_lora(policy, rank=8)
    gen = torch.Generator().manual_seed(0)
    batch = random_batch(gen, policy.config.obs_dim)
    return lambda: awr_update(policy, critic, batch, optimizer=optimizer, j=J, generator=gen)


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="one line of JSON (default: indented)")
    ap.add_argument("--repeats", type=int, default=200, help="timed decisions per measurement")
    ap.add_argument("--train-steps", type=int, default=30, help="timed training steps per measurement")
    args = ap.parse_args()
    numerics.pin_torch(1)  # a rollout worker's settings
    critic = ChunkCritic().eval()
    out: dict = {
        "threads": 1,
        "batch": 1,
        "j": J,
        "decision": "CriticGuidedPolicy.act: sample j, default ChunkCritic, softmax(Q/0.5) combination",
        "decision_ms": {},
        "decision_ms_eager": {},
        "decision_cpu_ms": {},
        "decision_ms_lora": {},
        "sample_ms": {},
        "sample_ms_lora": {},
        "critic_ms": time_critic(critic, args.repeats),
        "train_samples_per_s": {},
        "params": {"critic": sum(p.numel() for p in critic.parameters())},
    }
    for name in POLICIES:
        policy = make_policy(name)
        out["params"][name] = sum(p.numel() for p in policy.parameters())
        out["decision_ms"][name], out["decision_cpu_ms"][name] = time_decision(policy, critic, args.repeats)
        out["decision_ms_eager"][name] = time_decision(policy, critic, args.repeats, trace=False)[0]
        out["sample_ms"][name] = time_sampling(policy, args.repeats)
        out["train_samples_per_s"][f"sft_{name}"] = throughput(sft_step(policy), args.train_steps)
        lora_policy = add_lora(make_policy(name), rank=8, alpha=16)
        out["decision_ms_lora"][name] = time_decision(lora_policy, critic, args.repeats)[0]
        out["sample_ms_lora"][name] = time_sampling(lora_policy, args.repeats)
    out["train_samples_per_s"]["critic"] = throughput(critic_step(ChunkCritic()), args.train_steps)
    for name in POLICIES:
        step = awr_step(make_policy(name), critic)
        out["train_samples_per_s"][f"awr_{name}"] = throughput(step, args.train_steps)
    out = {
        k: round(v, 3)
        if isinstance(v, float)
        else ({n: round(x, 3) for n, x in v.items()} if isinstance(v, dict) and k != "numerics" else v)
        for k, v in out.items()
    }
    out["numerics"] = numerics.in_force()
    print(json.dumps(out, indent=None if args.json else 2))
    return out


if __name__ == "__main__":
    main()
