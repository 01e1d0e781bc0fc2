"""How far LIBERO's bundled initial states place each object from where the SFT states put it; prints JSON.

For every source task of the suite: each object's settled x/y on the initial states the co-evolution rounds
use (``libero.demo_states`` .. 50 - ``libero.eval_states``), as the distance to the nearest of its positions on
the SFT demonstration states. The rollout-grounded diagnoser (`coda.domains.libero.diagnose`) counts an object as
moved beyond `LiberoDiagnoser.threshold`, which must lie well above this natural spread.

Usage: python benchmarks/libero_init_spread.py --json [--suite libero_object] [--tasks 0-9]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from coda.config import load_params
from coda.domains.libero.diagnose import LiberoDiagnoser
from coda.domains.libero.episodes import N_INIT
from coda.sim.libero import LiberoEnv, require


def spread(suite: str, task: int, demo_states: int, eval_states: int) -> list[float]:
    env = LiberoEnv(suite, task)
    try:
        positions: dict[str, list[np.ndarray]] = {}
        for i in range(N_INIT - eval_states):
            for name, p in env.reset(i)["objects"].items():
                positions.setdefault(name, []).append(np.asarray(p[:2], dtype=float))
    finally:
        env.close()
    out: list[float] = []
    for ps in positions.values():
        train, rounds = np.stack(ps[:demo_states]), np.stack(ps[demo_states:])
        out += np.min(np.linalg.norm(rounds[:, None] - train[None], axis=2), axis=1).tolist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--tasks", default=None, help="first-last source tasks (default: the profile's)")
    args = ap.parse_args()
    require()
    c = load_params("params.yaml", profile=args.profile).libero
    tasks = (
        c.tasks
        if args.tasks is None
        else range(int(args.tasks.split("-")[0]), int(args.tasks.split("-")[1]) + 1)
    )
    by_task, every = {}, []
    for t in tasks:
        d = spread(c.suite, t, c.demo_states, c.eval_states)
        every += d
        by_task[str(t)] = {"max_m": round(max(d), 4), "p99_m": round(float(np.quantile(d, 0.99)), 4)}
    report = {
        "suite": c.suite,
        "positions": len(every),
        "max_m": round(max(every), 4),
        "p99_m": round(float(np.quantile(every, 0.99)), 4),
        "median_m": round(float(np.median(every)), 4),
        "threshold_m": LiberoDiagnoser.threshold,
        "threshold_over_max": round(LiberoDiagnoser.threshold / max(every), 2),
        "by_task": by_task,
    }
    print(json.dumps(report) if args.json else json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
