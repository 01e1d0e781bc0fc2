"""Time of one co-evolution policy update and one critic TD step at the `cpu` profile's sizes; prints JSON.

What is timed is what `coda.coevolve.trainer.Trainer.train` does per step, on the same objects:

* critic step (`critic_ms`): one `train_critic` step, i.e. a replay sample of `batch_size` transitions, its
  tensors and instruction embeddings, and one `CriticTD.update` with the profile's `td_bootstrap` (V(s') from
  the executed next chunk, or from j chunks sampled from the policy: `critic_ms_old`, the recipe before
  2026-12-02);
* policy update (`update_ms`): the imitation batch (rehearsal + demonstrations, `rehearsal_share` of it
  rehearsal) and one `PolicyUpdater.update` (capped AWR weights, the policy's weighted loss, imitation, AdamW
  step) with full fine-tuning, on states drawn as `Trainer.train` draws them (`BehaviourStates`), with the
  profile's `awr_candidates`: the default `update` samples and scores j candidates per state at every update
  (as before 2026-12-02: `update_ms_old`); `update_ms_round` is the `round` recipe, whose candidates were
  sampled and scored once per round for every drawn state (`round_scoring_s`, shared over the round's updates;
  `update_step_ms_round` is the step alone).

The replay and the demonstrations are synthetic (random observations, chunks and rewards over 40 distinct
instructions): timing does not depend on their values. Every step runs with the numerics pin of
`coda.numerics` in force (the benchmark re-executes itself under it when started without) and with the
training thread count of the loop (`TRAIN_THREADS`). ``update_ms``/``critic_ms`` are medians over `--steps`
steps after 5 warm-up steps; ``*_cpu_ms`` the same in process CPU time. The replay is as large as
`--replay` (a `cpu` run's replay grows by ~770 transitions per round).

``critic_ms_openblas``/``update_ms_openblas`` are the same two steps with the pin's opt-in GEMM backend
(`coda.gemm`, ``CODA_GEMM=openblas``: float32 mm/addmm on OpenBLAS's Haswell kernels) switched on in this
process, measured after the default ones (``--no-openblas`` skips them; absent on a CPU without AVX2).

Usage: python benchmarks/train_speed.py --json [--steps 30] [--profile cpu] [--no-old] [--no-openblas]
       CODA_NUMERICS=native python benchmarks/train_speed.py --json   # without the pin, for its cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from coda import numerics

numerics.pin_process()  # before torch loads: re-executes this script under the pin when it is not in force
try:
    numerics.gemm.load()  # before anything can load SciPy's OpenBLAS with another core type
except RuntimeError:  # no AVX2, or no SciPy: the openblas columns are left out
    pass

import numpy as np  # noqa: E402
import torch  # noqa: E402

from coda.coevolve.trainer import BehaviourStates  # noqa: E402
from coda.config import load_params  # noqa: E402
from coda.learn.awr import AWRConfig, PolicyUpdater, policy_candidates, train_critic  # noqa: E402
from coda.learn.critic import ChunkCritic, CriticTD, TDConfig  # noqa: E402
from coda.learn.demos import demo_batch  # noqa: E402
from coda.learn.policies import make_policy  # noqa: E402
from coda.learn.replay import ChunkReplay  # noqa: E402
from coda.learn.text import get_encoder  # noqa: E402
from coda.learn.updates import TRAIN_THREADS  # noqa: E402
from coda.sim.world import OBS_DIM  # noqa: E402

H = 8


def synthetic_replay(n: int, rng: np.random.Generator) -> ChunkReplay:
    store = ChunkReplay(capacity=n)
    for i in range(n):
        steps = int(rng.integers(1, H + 1))
        mask = np.zeros(H, np.float32)
        mask[:steps] = 1.0
        row = {
            "obs": rng.normal(size=OBS_DIM).astype(np.float32),
            "actions": rng.uniform(-1, 1, (H, 7)).astype(np.float32),
            "mask": mask,
            "reward": float(rng.random() < 0.05),
            "shaping": float(rng.normal(scale=0.01)),
            "next_obs": rng.normal(size=OBS_DIM).astype(np.float32),
            "next_actions": rng.uniform(-1, 1, (H, 7)).astype(np.float32),
            "next_mask": np.ones(H, np.float32),
            "steps": steps,
            "done": float(rng.random() < 0.08),
            "success": 0.0,
            "phi": 0.0,
            "next_phi": 0.0,
        }
        store._write(row, {"instruction": f"task {i % 40}", "family": "push", "scene_hash": str(i)})
    return store


def synthetic_demos(n: int, rng: np.random.Generator) -> dict:
    return {
        "obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        "chunk": rng.uniform(-1, 1, (n, H, 7)).astype(np.float32),
        "instr": [f"task {i % 40}" for i in range(n)],
    }


def median_ms(fn, steps: int) -> tuple[float, float]:
    for _ in range(5):
        fn()
    wall, cpu = [], []
    for _ in range(steps):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return round(1e3 * statistics.median(wall), 2), round(1e3 * statistics.median(cpu), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per measurement (after 5 warm-up)")
    ap.add_argument("--profile", default="cpu", help="params.yaml profile whose sizes are timed")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument(
        "--replay", type=int, default=3072, help="replay transitions (a cpu run holds ~770/round)"
    )
    ap.add_argument("--no-old", action="store_true", help="skip the recipe before 2026-12-02")
    ap.add_argument("--no-openblas", action="store_true", help="skip the CODA_GEMM=openblas columns")
    args = ap.parse_args()
    cfg = load_params(args.params, args.profile)
    c = cfg.coevolve
    numerics.pin_torch(TRAIN_THREADS)
    rng = np.random.default_rng(0)
    replay = synthetic_replay(args.replay, rng)
    rehearsal, demos = synthetic_demos(2048, rng), synthetic_demos(512, rng)
    enc = get_encoder()
    enc.encode([f"task {i}" for i in range(40)])  # embeddings are cached per string in a run
    policy = make_policy(cfg.sft.backbone, obs_dim=OBS_DIM)
    critic = ChunkCritic()
    critic.fit_normalizer(replay.gather(np.arange(len(replay)))["obs"])
    td = CriticTD(critic, TDConfig(gamma=c.gamma, temperature=c.temperature))
    policy.eval()
    out: dict = {"profile": args.profile, "backbone": cfg.sft.backbone, "batch_size": c.batch_size, "j": c.j}
    out.update(finetune=c.finetune, threads=TRAIN_THREADS, steps=args.steps, replay=args.replay)

    def critic_step(bootstrap: str):
        fn = (
            policy_candidates(policy, c.j, torch.Generator().manual_seed(0))
            if bootstrap == "policy"
            else None
        )
        return lambda: train_critic(td, replay, steps=1, batch_size=c.batch_size, rng=rng, candidates_fn=fn)

    out["critic_ms"], out["critic_cpu_ms"] = median_ms(critic_step(c.td_bootstrap), args.steps)
    if not args.no_old:
        out["critic_ms_old"], out["critic_cpu_ms_old"] = median_ms(critic_step("policy"), args.steps)
    critic.eval()
    updater = PolicyUpdater(
        policy,
        critic,
        AWRConfig(finetune=c.finetune, lr=c.lr, j=c.j, beta=c.beta, temperature=c.temperature, seed=0),
    )
    shares = ((rehearsal, c.rehearsal_share), (demos, 1 - c.rehearsal_share))
    draws = rng.integers(0, len(replay), size=(c.policy_updates, c.batch_size))
    states = BehaviourStates(replay, draws, enc.encode)
    w0 = time.perf_counter()
    scored = updater.score(states.obs, states.instr)
    out["round_scoring_s"] = round(time.perf_counter() - w0, 3)  # once per round: every distinct drawn state
    out["round_scored_states"] = len(states.slots)
    calls = iter(range(1 << 62))

    def policy_update(per_round: bool):
        def step():
            rows = states.rows(next(calls) % c.policy_updates)
            batch = {"obs": states.obs[rows], "instr": states.instr[rows]}
            parts = [demo_batch(ds, round(c.batch_size * share), rng) for ds, share in shares]
            imitation = {
                "obs": torch.cat([p["obs"] for p in parts]),
                "instr": enc.encode([t for p in parts for t in p["instr"]]),
                "chunk": torch.cat([p["chunk"] for p in parts]),
            }
            updater.update(batch, imitation=imitation, candidates=scored.take(rows) if per_round else None)

        return step

    # update_ms: the profile's recipe; update_ms_round adds the round's scoring shared over its updates
    step_ms, cpu_ms = median_ms(policy_update(True), args.steps)
    amortized = 1e3 * out["round_scoring_s"] / max(c.policy_updates, 1)
    out["update_step_ms_round"], out["update_ms_round"] = step_ms, round(step_ms + amortized, 2)
    if c.awr_candidates == "round":
        out["update_ms"], out["update_cpu_ms"] = out["update_ms_round"], cpu_ms
    else:
        out["update_ms"], out["update_cpu_ms"] = median_ms(policy_update(False), args.steps)
    if not args.no_old:  # the recipe before 2026-12-02 scored per update too
        out["update_ms_old"], out["update_cpu_ms_old"] = (
            (out["update_ms"], out["update_cpu_ms"])
            if c.awr_candidates == "update"
            else median_ms(policy_update(False), args.steps)
        )
    if not args.no_openblas and numerics.gemm.corename() and not numerics.gemm.enabled():
        numerics.gemm.enable()
        out["critic_ms_openblas"], out["critic_cpu_ms_openblas"] = median_ms(
            critic_step(c.td_bootstrap), args.steps
        )
        out["update_ms_openblas"], out["update_cpu_ms_openblas"] = median_ms(
            policy_update(c.awr_candidates == "round"), args.steps
        )
        numerics.gemm.disable()
    out["numerics"] = numerics.in_force()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
