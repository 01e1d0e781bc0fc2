"""The two benchmark regimes, measured (issue #27): how the SFT policy fares on uniform generator draws.

Regime A is the benchmark as first built: the SFT policy learns from a narrow seed space and fails most uniform
generator draws. Regime B is the paper's regime: the SFT policy learns from a widened seed space
(`coda.sim.families.ranges.regime`) and is competent on most of the generator space, while the held-out suites
sit in the generator's corners where it fails. What tells the regimes apart is one number, measured the same
way for both: the SFT policy's failure rate on certified uniform generator draws (the paper: 24.6%).

`measure` rolls a policy out on ``n_per_family`` certified uniform draws per family (the same draws for any
policy and either regime: the generator space does not depend on the regime) and reads the policy's ID/OOD
evaluation from its SFT metrics; `coda regimes` writes ``metrics/regimes.json`` = ``{"a": {...}, "b": {...}}``.

Example:
    $ coda regimes --regime a=runs/sft:metrics/sft.json:scenes \\
                   --regime b=runs/regime_b/sft:metrics/regime_b/sft.json:scenes_b --out metrics/regimes.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coda.progress import progress

STREAM = "calibration"  # the uniform draws' seed stream (coda.scaling.STREAMS)


def uniform_draws(ex, families, n_per_family: int, seed: int) -> dict[str, list[str]]:
    """`n_per_family` certified uniform generator scenes per family (JSON), in draw order."""
    from coda.scaling import uniform_envs

    envs = uniform_envs(ex, families, n_per_family, seed, stream=STREAM)
    return {f: [v["scene"] for v in envs[f]] for f in families}


def uniform_failure(ex, policy_dir: Path, draws: dict[str, list[str]], max_chunks: int) -> dict[str, Any]:
    """The policy's failure rate on the draws: overall, per family, and the outcomes (1 = success) in order."""
    from coda.learn.sft import eval_job

    policy = str(Path(policy_dir).resolve())
    jobs = [(policy, scene, max_chunks) for f in sorted(draws) for scene in draws[f]]
    results = ex.map(eval_job, jobs, desc=f"{Path(policy_dir).parent.name}: uniform draws")
    outcomes = [bool(r.ok and r.value["success"]) for r in results]
    by_family: dict[str, dict[str, Any]] = {}
    k = 0
    for f in sorted(draws):
        got = outcomes[k : k + len(draws[f])]
        k += len(draws[f])
        by_family[f] = {"n": len(got), "failure": round(1 - sum(got) / max(len(got), 1), 4)}
    n = len(outcomes)
    return {
        "sft_uniform_failure": round(1 - sum(outcomes) / max(n, 1), 4),
        "n_uniform": n,
        "uniform_by_family": by_family,
        "uniform_outcomes": "".join("1" if o else "0" for o in outcomes),
    }


def regime_entry(sft_metrics: Path, measured: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """One regime's entry of metrics/regimes.json: the uniform-draw measurement beside the SFT policy's
    evaluation (its `sft_ood`, `n_ood`, `sft_id`, per suite) and the data it was trained on."""
    m = json.loads(Path(sft_metrics).read_text())
    manifest = json.loads((Path(data_dir) / "manifest.json").read_text())
    by_suite = m.get("ood_by_suite") or {}
    return {
        **{k: v for k, v in measured.items() if k != "uniform_outcomes"},
        "sft_ood": m["ood_mean"],
        "sft_ood_se": m.get("ood_se"),
        "n_ood": m["n_ood"],
        "sft_id": m["id_mean"],
        "n_id": m["n_id"],
        "sft_ood_by_suite": by_suite,
        "data_regime": manifest.get("regime", "a"),
    }


def parse_regime_arg(text: str) -> tuple[str, Path, Path, Path]:
    """``NAME=POLICY_RUN:SFT_METRICS:DATA`` (e.g. ``b=runs/regime_b/sft:metrics/regime_b/sft.json:scenes_b``)."""
    name, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or name not in ("a", "b") or len(parts) != 3 or not all(parts):
        raise ValueError(
            f"--regime: expected NAME=POLICY_RUN:SFT_METRICS:DATA with NAME a or b, got {text!r}"
        )
    return name, Path(parts[0]), Path(parts[1]), Path(parts[2])


def run_regimes(cfg, regimes: list[tuple[str, Path, Path, Path]], n_per_family: int, executor) -> dict:
    """Measure every regime's SFT policy on the same uniform draws; {name: entry}, names sorted."""
    families = tuple(cfg.data.families)
    draws = uniform_draws(executor, families, n_per_family, cfg.seed)
    out = {}
    for name, run, metrics, data_dir in progress(sorted(regimes), desc="regimes"):
        measured = uniform_failure(executor, run / "policy", draws, cfg.sim.max_chunks)
        out[name] = regime_entry(metrics, measured, data_dir)
    return out
