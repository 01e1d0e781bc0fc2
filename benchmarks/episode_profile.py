"""Where a rollout episode's CPU time goes, as a co-evolution worker runs it; prints JSON.

The episodes are the final evaluation's (`coda.evaluate.evaluation_items`, the first `--n-id` held-back seed
scenes per family and the first `--n-ood` scenes of every held-out suite) or the same scenes recorded
(``--record``, what a round's rollouts return). Each goes through `coda.engine.jobs.rollout_job` in this
process exactly as a worker runs it: one `World` configured by the profile (`world_kwargs`), the actor from
`coda.learn.awr.cached_actor` (`--policy`, critic-guided with `--critic`; without one a fresh
`ChunkCritic()` is saved to a temporary directory), the instruction embedding passed in the job, and the
numerics pin in force (`numerics.pin_process` re-executes this script under it; `cached_actor` calls
`pin_torch(1)`, as in a worker).

Three passes over the same jobs, after one warm-up job:

* timed (nothing wrapped, ``--repeats`` times): process CPU time per episode (``cpu_s``, as the job
  reports it; ``episode_cpu_s_mean``, ``episodes_cpu_s_total``) and the outcomes (success, steps, and with
  ``--record`` a digest of each record's states, observations and actions) for before/after comparisons
  (``--outcomes FILE``);
* split (``split_cpu_s``, ``split_fraction``): exclusive process CPU time of physics (`stepSimulation`,
  scene settling included), IK (`calculateInverseKinematics`), the rest of the controller (`World.step`),
  scene loading without its physics, state capture (`World.state`), observations, success checks, the
  decision (critic scoring, policy sampling, the rest of `act`) and everything else of the job (records,
  phase progress); each category wrapped in `time.process_time` (~1 us a call, ~1 % in all);
* cProfile (inline, CPU timer; off with ``--no-profile``): the ``--top`` functions by own time, as fractions.

The shared machine's load changes absolute CPU times by ±15 % from run to run (the same episodes' physics
included): compare versions side by side, e.g. the non-physics time per second of physics.

Usage: python benchmarks/episode_profile.py [--data data] [--policy runs/sft/policy] [--critic DIR]
           [--n-id 2] [--n-ood 2] [--held-back 25] [--record] [--repeats 1] [--outcomes FILE] [--no-profile]
"""

from __future__ import annotations

from coda import numerics

numerics.pin_process()  # before torch loads: re-executes this script under the pin when it is not in force

import argparse  # noqa: E402
import cProfile  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from coda import data  # noqa: E402
from coda.config import load_params  # noqa: E402
from coda.engine import jobs as jobs_mod  # noqa: E402
from coda.evaluate import evaluation_items  # noqa: E402
from coda.sim.world import world_kwargs  # noqa: E402


def make_jobs(args, critic_dir: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """The rollout jobs of the episodes, as `PyBulletDomain.rollout` builds them."""
    from coda.learn.text import get_encoder

    cfg = load_params(args.params, args.profile)
    items = evaluation_items(args.data, tuple(cfg.data.families), args.n_id, args.n_ood, args.held_back)
    scenes = [s for _, _, s in items]
    embeddings = get_encoder().encode([s.task.instruction for s in scenes]).numpy()
    c = cfg.coevolve
    jobs = [
        {
            "policy": args.policy,
            "critic": critic_dir,
            "scene": s.to_json(),
            "embedding": emb,
            "max_chunks": cfg.sim.max_chunks,
            "j": c.j,
            "temperature": c.temperature,
            "selection": c.selection,
            "seed": args.seed,
            "record": args.record,
        }
        for s, emb in zip(scenes, embeddings, strict=True)
    ]
    return jobs, [(split, f) for split, f, _ in items]


def digest(result: dict) -> str:
    """A digest of a recorded episode's states and actions (bit-level)."""
    h = hashlib.blake2b(digest_size=12)
    for k in sorted(result["states"]):
        h.update(np.asarray(result["states"][k], dtype=np.float64).tobytes())
    h.update(np.asarray(result["actions"], dtype=np.float64).tobytes())
    h.update(np.asarray(result["obs"], dtype=np.float32).tobytes())
    return h.hexdigest()


def outcome(result: dict) -> dict:
    if "actions" in result:  # a record
        return {
            "hash": result["scene_hash"],
            "success": result["success"],
            "steps": len(result["actions"]),
            "digest": digest(result),
        }
    return {k: result[k] for k in ("hash", "success", "steps", "phase_reached")}


def run_jobs(jobs: list[dict], run) -> tuple[list[dict], list[float]]:
    """Every job through `run`; returns the results and each job's CPU seconds."""
    results = run(jobs)
    return results, [r["cpu_s"] for r in results]


class Split:
    """Exclusive process CPU time per category: each wrapped callable's time minus that of the wrapped
    callables it calls (a stack), so the categories add up to the episodes' total. A wrapper costs ~1 us a
    call (~80 000 calls for 40 episodes, ~1 % of their time)."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}
        self.n: dict[str, int] = {}
        self._stack: list[list[float]] = []  # [t0, time spent in wrapped callees]
        self._undo: list = []

    def wrap(self, owner, attr: str, name: str, *, static: bool = False) -> None:
        original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
        inner = getattr(owner, attr)
        stack, spent, calls = self._stack, self.s, self.n
        spent.setdefault(name, 0.0)
        calls.setdefault(name, 0)

        def timed(*a, **kw):
            frame = [time.process_time(), 0.0]
            stack.append(frame)
            try:
                return inner(*a, **kw)
            finally:
                stack.pop()
                elapsed = time.process_time() - frame[0]
                spent[name] += elapsed - frame[1]
                calls[name] += 1
                if stack:
                    stack[-1][1] += elapsed

        setattr(owner, attr, staticmethod(timed) if static else timed)
        self._undo.append((owner, attr, original))

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            if original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        self._undo.clear()


def instrument(actor) -> Split:
    """Wrap what an episode spends its time in (see the module docstring for the categories)."""
    import pybullet

    from coda.engine import jobs
    from coda.sim import rollout
    from coda.sim.families import REGISTRY
    from coda.sim.world import World

    sp = Split()
    sp.wrap(jobs, "rollout_job", "job_other")
    sp.wrap(pybullet, "stepSimulation", "physics")
    sp.wrap(pybullet, "calculateInverseKinematics", "ik")
    sp.wrap(World, "load", "load_spawn_settle")
    sp.wrap(World, "step", "controller")
    sp.wrap(World, "state", "state_capture")
    sp.wrap(rollout, "observation_vector", "observation")
    for family in {type(f) if not isinstance(f, type) else f for f in REGISTRY.values()}:
        sp.wrap(family, "success", "success_check", static=True)
    sp.wrap(actor, "act", "decision")
    if hasattr(actor, "score"):
        sp.wrap(actor, "score", "decision_critic")
    if hasattr(actor, "policy"):
        sp.wrap(actor.policy, "sample", "decision_policy_sample")
    return sp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--profile", default="cpu", help="params profile (world settings and rollout budget)")
    ap.add_argument("--policy", default="runs/sft/policy")
    ap.add_argument("--critic", default=None, help="a ChunkCritic directory (default: a fresh ChunkCritic())")
    ap.add_argument("--n-id", type=int, default=2)
    ap.add_argument("--n-ood", type=int, default=2)
    ap.add_argument("--held-back", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--record", action="store_true", help="return records (a round's rollouts)")
    ap.add_argument("--repeats", type=int, default=1, help="timed passes (the median per episode is kept)")
    ap.add_argument("--outcomes", default=None, help="write per-episode outcomes to this JSON file")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--top", type=int, default=25, help="functions listed from the cProfile pass")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory()
    critic_dir = args.critic
    if critic_dir is None:
        from coda.learn.critic import ChunkCritic

        critic_dir = str(ChunkCritic().save_pretrained(Path(tmp.name) / "critic"))
    cfg = load_params(args.params, args.profile)
    data._init_worker(args.data, world_kwargs(cfg))
    jobs, labels = make_jobs(args, critic_dir)

    def run(js):  # jobs_mod.rollout_job is looked up at each call: `instrument` wraps it
        return [jobs_mod.rollout_job(j) for j in js]

    run(jobs[:1])  # warm-up: load the actor, the catalog, the assets' shapes
    from coda.learn import awr

    actor = next(iter(awr._ACTORS.values()))
    cpu_runs, results = [], None
    for _ in range(args.repeats):
        results, cpu = run_jobs(jobs, run)
        cpu_runs.append(cpu)
    sp = instrument(actor)  # a separate pass: the wrappers cost ~1 us a call
    _, cpu_split = run_jobs(jobs, run)
    sp.restore()
    total = sum(sp.s.values())
    per_episode = [statistics.median(xs) for xs in zip(*cpu_runs, strict=True)]
    n_dec = sp.n["decision"]
    out = {
        "coda": str(Path(data.__file__).parent),
        "data": args.data,
        "profile": args.profile,
        "record": args.record,
        "episodes": len(jobs),
        "numerics": numerics.in_force()["pin"],
        "started_pinned": numerics.in_force()["started_pinned"],
        "episode_cpu_s_mean": round(statistics.fmean(per_episode), 4),
        "episodes_cpu_s_total": round(sum(per_episode), 3),
        "control_steps": sum(r["steps"] if "steps" in r else len(r["actions"]) for r in results),
        "successes": sum(bool(r["success"]) for r in results),
        "decisions": n_dec,
        "decision_cpu_ms": round(
            1e3 * sum(v for k, v in sp.s.items() if k.startswith("decision")) / max(n_dec, 1), 3
        ),
        "split_cpu_s": {k: round(v, 3) for k, v in sp.s.items()},
        "split_fraction": {k: round(v / total, 4) for k, v in sp.s.items()},
        "split_total_vs_job_cpu": round(total / sum(cpu_split), 4),
    }
    if args.outcomes:
        rows = [{"split": s, "family": f, **outcome(r)} for (s, f), r in zip(labels, results, strict=True)]
        Path(args.outcomes).write_text(json.dumps(rows, indent=1) + "\n")
    if not args.no_profile:
        prof = cProfile.Profile(time.process_time)  # CPU time: other processes share the cores
        prof.enable()
        run(jobs)
        prof.disable()
        st = pstats.Stats(prof)
        total_tt = sum(v[2] for v in st.stats.values())
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[: args.top]
        out["profile_top_own_time"] = [  # [function, calls, fraction of the profiled CPU time]
            [f"{Path(k[0]).name}:{k[1]}:{k[2]}", v[1], round(v[2] / total_tt, 4)] for k, v in rows
        ]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
