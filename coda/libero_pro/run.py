"""The LIBERO-Pro experiment (Table 2): SFT on planner demonstrations, then CoDA rounds through the shared
co-evolution loop (`coda.coevolve.loop.Loop` over `coda.domains.libero.domain.LiberoDomain`).

* **SFT**: the scripted planner (`coda.sim.libero.planner`) demonstrates the first ``demo_states`` bundled
  initial states of each source task (one clean demonstration, the others with execution noise, labels
  clean); a `RegressionPolicy` is trained on h = 8 chunks. LIBERO runs its OSC controller at 20 Hz (a
  chunk is 0.4 s), the PyBullet families at 10 Hz; nothing else depends on the rate.
* **Rounds**: the PyBullet loop's method ``coda`` on the source tasks — memory-guided generation, the
  rollout-grounded diagnoser, the paired control experiment, training programs, critic TD and AWR +
  imitation — or ``uniform`` (novel programs only, no memory; the same budget), with the profile's
  ``coevolve`` learning recipe and ``libero``'s own budget (rounds, environments and demonstrations per
  source task) and rehearsal of the SFT demonstrations (``libero.rehearsal_share`` of every imitation batch).
* **Evaluation**: the standard, position (``_swap``), new-task (``_task``) and paraphrase (``_lan``) suites
  before (SFT, all evaluation states), after every round (the curve's states) and after the last round (all
  evaluation states), with the critic's decision rule, and after the last round with the policy alone too.

Layout of a run directory: ``sft/`` (policy, demos.npz, metrics.json with the planner's per-task success and
the evaluation); a rounds directory is a co-evolution run directory (`coda.coevolve.state`) whose
``rounds.json`` has every round's evaluation (``libero``) and ``coverage`` of the held-out suites' regions
(`coda.domains.libero.coverage`), and whose ``metrics.json`` is Table 2's row (before, after, after_policy_only).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda import numerics
from coda.domains.libero import interpret as lp
from coda.domains.libero.episodes import (
    Episode,
    SuiteObservation,
    demo_from,
    evaluate,
    make_pool,
    run_episodes,
    suite_objects,
)
from coda.files import write_json
from coda.learn.demos import chunk_dataset, pack_demos
from coda.libero_pro import METHODS
from coda.sim.libero import heldout
from coda.sim.libero.success import curve


# -- SFT ---------------------------------------------------------------------------------------------------
def run_sft(cfg, out: str | Path, *, seed: int = 0) -> dict[str, Any]:
    """Planner demonstrations → SFT → evaluation; writes ``out/policy``, ``out/demos.npz``, ``out/metrics.json``."""
    from coda.learn.policies import make_policy
    from coda.learn.sft import train_sft
    from coda.sim.libero import get_task, require

    require()
    out = Path(out)
    c = cfg.libero
    obs = SuiteObservation(suite_objects(c.suite))
    episodes = [
        Episode(
            c.suite,
            lp.Variant(t, i),
            "planner",
            c.suite,
            noise=0.0 if r == 0 else c.noise,
            seed=seed * 100_003 + t * 1_009 + i * 31 + r,
            max_steps=c.max_steps,
            record=True,
        )
        for t in c.tasks
        for i in heldout.demo_states(c)
        for r in range(c.demo_repeats)
    ]
    t0 = time.perf_counter()
    with make_pool(cfg) as pool:
        results = run_episodes(pool, episodes, "LIBERO planner demonstrations")
        collect_s = time.perf_counter() - t0
        demos = [d for d in map(demo_from, results) if d is not None]
        if not demos:
            raise RuntimeError("libero sft: the planner solved none of the demonstration states")
        planner = {}
        for t in c.tasks:  # the clean demonstrations: the planner's own success on bundled initial states
            clean = [
                r for e, r in zip(episodes, results, strict=True) if e.variant.task == t and e.noise == 0
            ]
            planner[str(t)] = {
                "task": get_task(c.suite, t).language,
                "success": round(float(np.mean([bool(r.get("success")) for r in clean])), 4),
                "held": round(float(np.mean([bool(r.get("success_held")) for r in clean])), 4),
                "n": len(clean),
                "states": [0, c.demo_states - 1],
                "median_s": round(float(np.median([r.get("seconds", 0.0) for r in clean])), 2),
            }
        dataset = chunk_dataset(demos)
        torch.manual_seed(seed)
        policy = make_policy("regression", seed=seed, obs_dim=obs.dim)
        result = train_sft(
            policy, dataset, epochs=c.epochs, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=seed
        )
        policy.save_pretrained(out / "policy")
        np.savez_compressed(out / "demos.npz", **pack_demos(demos, obs.dim))
        evaluation = evaluate(pool, cfg, out / "policy", None, seed, "LIBERO SFT evaluation")
    metrics = {
        "profile": cfg.profile,
        "suite": c.suite,
        "tasks": list(c.tasks),
        "obs_dim": obs.dim,
        "planner": planner,
        "planner_success": round(float(np.mean([p["success"] for p in planner.values()])), 4),
        "demos": len(demos),
        "train_samples": len(dataset["obs"]),
        "updates": result.updates,
        "final_loss": round(result.losses[-1], 5),
        "collect_s": round(collect_s, 1),
        "train_s": round(result.train_s, 1),
        "eval": evaluation,
        "eval_states": list(heldout.eval_states(c)),
    }
    write_json(out / "metrics.json", metrics)
    return metrics


# -- co-evolution rounds -----------------------------------------------------------------------------------
def rounds_config(cfg):
    """The loop's configuration on LIBERO: the profile's `coevolve` recipe (its learning rate and AWR
    weight replaced by `libero`'s where set) with `libero`'s budget and rehearsal (every SFT demonstration,
    `libero.rehearsal_share` of each imitation batch), evaluated after every round (the curve's states; the
    last round: all evaluation states)."""
    c = cfg.libero
    recipe = {k: v for k, v in (("lr", c.lr), ("awr_weight", c.awr_weight)) if v is not None}
    return dataclasses.replace(
        cfg.coevolve,
        **recipe,
        rounds=c.rounds,
        envs_per_family=c.envs_per_task,
        demos_per_family=c.demos_per_task,
        rehearsal_per_family=c.demo_states * c.demo_repeats,
        rehearsal_share=c.rehearsal_share,
        eval_every=1,
        final_eval="full",
        curve_seeds=(),
        transfer=False,
    )


def run_rounds(
    cfg, sft_dir: str | Path, out: str | Path, *, seed: int = 0, method: str = "coda"
) -> dict[str, Any]:
    """Rounds of `method` (`METHODS`) on LIBERO from an SFT directory, resuming in `out`; writes and returns
    Table 2's row."""
    from coda.coevolve.loop import Loop
    from coda.coevolve.methods import METHODS as LOOP_METHODS
    from coda.domains import make_domain
    from coda.learn.updates import TRAIN_THREADS
    from coda.sim.libero import require

    if method not in METHODS:
        raise ValueError(f"unknown LIBERO method {method!r}; expected one of {', '.join(METHODS)}")
    require()
    numerics.pin_torch(TRAIN_THREADS)
    sft_dir, out = Path(sft_dir), Path(out)
    c = rounds_config(cfg)
    with make_pool(cfg) as pool:
        domain = make_domain("libero", cfg, sft_dir, seed, pool)
        loop = Loop(c, LOOP_METHODS[method], seed, domain, sft_dir, out, profile=cfg.profile)
        final = loop.run()
    sft = json.loads((sft_dir / "metrics.json").read_text())
    memory = loop.state.memory
    metrics = {
        "profile": cfg.profile,
        "method": method,
        "suite": cfg.libero.suite,
        "rounds": c.rounds,
        "rehearsal_share": c.rehearsal_share,
        "before": sft["eval"],
        "after": final.get("libero") or sft["eval"],
        "after_policy_only": final.get("libero_policy_only") or sft["eval"],
        "updates": loop.state.updates,
        "demos": len(loop.state.demos),
        "modes_validated": len(memory.modes("validated")),
        "modes_rejected": len(memory.modes("rejected")),
        "planner_success": sft["planner_success"],
        # per round: success on the curve's episodes (round 0: SFT) and the held-out suites' regions reached
        "curve": curve(sft["eval"], loop.state.history),
        "coverage": [
            {"round": h["round"], **{k: v for k, v in h["coverage"].items() if k != "by_split"}}
            for h in loop.state.history
            if h.get("coverage")
        ],
    }
    write_json(out / "metrics.json", metrics)
    return metrics
