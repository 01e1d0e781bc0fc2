"""Generation quality and compute (Appendix C, notebook 09): Table 8 (validity, the failure rate of the round's
policy on generated environments, coverage entropy of generated environments, CoDA against uniform generation,
and the agreement of diagnoses with the factor each program perturbed) and Table 9 (compute per 1,000 accepted
environments, and adaptive against fixed round scheduling).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coda.report import paper
from coda.report.common import FAMILIES, ablation_round, stat_at
from coda.report.runs import RunResult, Runs, fmt, rows_at, stat
from coda.report.tables import Table
from coda.report.targeting import targeting


def generated_scenes(mem) -> list:
    """(family, SceneSpec) of every generated scene in a memory (not seeds or replays)."""
    from coda.sim.scene import SceneSpec

    keep = ("targeted", "control", "mutation", "novel", "transfer")
    return [
        (r["family"], SceneSpec.from_json(r["spec_json"])) for r in mem.rows("scenes") if r["split"] in keep
    ]


def uniform_proposals(run: RunResult, data_dir: str | Path) -> list:
    """What uniform generation proposes: as many scenes as the run accepted, sampled per family from the
    generator space with the run's seed (`uniform` keeps no memory, so its scenes are re-drawn here)."""
    from coda import data
    from coda.sim.assets import load_catalog
    from coda.sim.families import REGISTRY

    catalog = load_catalog(Path(data_dir))
    families = run.run.get("families") or list(FAMILIES)
    n = (run.metrics.get("envs_accepted_total") or 0) // max(1, len(families))
    return [
        (f, REGISTRY[f].sample(data.scene_rng(run.seed, f, "generator", i), catalog, "generator"))
        for f in families
        for i in range(n)
    ]


def coverage_entropy(scenes, data_dir: str | Path = "data") -> float | None:
    """Entropy (bits) of scenes over (family, most-perturbed factor, perturbation size) cells: each scene
    falls in the cell of the factor farthest from the family's seed scenes (in units of the seed spread),
    in three size bins (< 1, 1–2, > 2 spreads)."""
    from coda import data
    from coda.engine.diagnose import factor_values

    if not scenes:
        return None
    ref: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    cells = Counter()
    for f, scene in scenes:
        if f not in ref:
            vals: dict[str, list] = {}
            for s in data.seed_scenes(Path(data_dir), f, limit=100):
                for k, v in factor_values(s).items():
                    if isinstance(v, int | float | tuple | list):
                        vals.setdefault(k, []).append(np.atleast_1d(np.asarray(v, dtype=float)))
            ref[f] = {k: (np.mean(v, 0), np.std(v, 0) + 1e-6) for k, v in vals.items()}
        best, size = None, 0.0
        for k, v in factor_values(scene).items():
            if k not in ref[f] or not isinstance(v, int | float | tuple | list):
                continue
            mu, sd = ref[f][k]
            z = float(np.max(np.abs((np.atleast_1d(np.asarray(v, dtype=float)) - mu) / sd)))
            if z > size:
                best, size = k, z
        cells[(f, best, 0 if size < 1 else 1 if size < 2 else 2)] += 1
    p = np.array(list(cells.values()), dtype=float)
    p /= p.sum()
    return float(-(p * np.log2(p)).sum())


POOLED = "pooled over rollouts (count / rollouts)"


def table8_generation_quality(runs: Runs, out: Path, data_dir: str | Path = "data") -> Table:
    t = Table(
        "table8_generation_quality", "Table 8: generation quality and diagnosis agreement", runs.profile()
    )
    coda, uni = runs.table1.get("coda", []), runs.table1.get("uniform", [])

    def over_rounds(rs, key):
        vals = [
            float(np.mean([x[key] for x in r.rounds if x.get(key) is not None]))
            for r in rs
            if any(x.get(key) is not None for x in r.rounds)
        ]
        return {**stat([{key: v} for v in vals], key)}

    def failure_over_rounds(rs, split):
        vals = []
        for r in rs:
            sr = [
                x["success_by_split"].get(split)
                for x in r.rounds
                if (x.get("success_by_split") or {}).get(split) is not None
            ]
            if sr:
                vals.append(1 - float(np.mean(sr)))
        return stat([{"v": v} for v in vals], "v")

    def entropy(rs, uniform=False):
        sets = (
            [uniform_proposals(r, data_dir) for r in rs]
            if uniform
            else [generated_scenes(m) for m in (r.memory() for r in rs) if m]
        )
        vals = [e for e in (coverage_entropy(x, data_dir) for x in sets) if e is not None]
        m = float(np.mean(vals)) if vals else None
        se = float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None
        return {"mean": m, "se": se, "n": len(vals)}

    def add(label, s, p, digits=1, rank_group=None):
        t.add(label, fmt(s, digits), p)

    add(
        "validity, CoDA: proposals passing every check first time",
        over_rounds(coda, "validity_pass_first"),
        paper.TABLE8["validity_coda"],
    )
    add(
        "validity, uniform generation",
        over_rounds(uni, "validity_pass_first"),
        paper.TABLE8["validity_uniform"],
    )
    add(
        "failure rate of the round's policy, CoDA's targeted envs (mean over rounds)",
        failure_over_rounds(coda, "targeted"),
        paper.TABLE8["precision_coda"],
    )
    add(
        "failure rate of the round's policy, uniform's generated envs (mean over rounds)",
        failure_over_rounds(uni, "novel"),
        paper.TABLE8["precision_uniform"],
    )
    same = targeting(runs)
    counts = same.get("rollouts", {})
    same_rounds = "failure rate of the round's policy, same runs and rounds"
    for key, label, num, den in (
        ("coda_targeted_failure", f"{same_rounds}: CoDA's targeted envs", "targeted_failed", "targeted"),
        ("coda_novel_failure", f"{same_rounds}: CoDA's novel draws", "novel_failed", "novel"),
        (
            "coda_in_mode_precision",
            "in-mode precision: CoDA's targeted envs failed and diagnosed in the targeted mode",
            "in_mode",
            "targeted",
        ),
        (
            "coda_validated_failure",
            f"{same_rounds}: CoDA's targeted envs of modes validated when the round began",
            "validated_failed",
            "validated",
        ),
        (
            "coda_control_failure",
            f"{same_rounds}: the targeted envs' control counterparts (their bases)",
            "control_failed",
            "control",
        ),
        (
            "coda_replay_failure",
            f"{same_rounds}: replays of scenes failed in an earlier round (exact recreation's ceiling)",
            "replay_failed",
            "replay",
        ),
    ):
        per_seed = same.get("per_seed", {}).get(key) or {"mean": None, "se": None, "n": 0}
        pooled = same.get(key)
        t.add(
            label,
            fmt({k: v if k == "n" or v is None else 100 * v for k, v in per_seed.items()}),
            None,
            **{
                POOLED: "not run" if pooled is None else f"{100 * pooled:.1f} ({counts[num]} / {counts[den]})"
            },
        )
    add("coverage entropy, CoDA (bits)", entropy(coda), f"{paper.TABLE8['entropy_coda']:.2f}", digits=2)
    add(
        "coverage entropy, uniform (bits)",
        entropy(uni, uniform=True),
        f"{paper.TABLE8['entropy_uniform']:.2f}",
        digits=2,
    )
    final = rows_at(coda, None)
    totals = [_totals(r) for r in coda]
    rej = stat(
        [{"v": x["rejected_diagnoses"] / x["diagnoses"] if x.get("diagnoses") else None} for x in totals], "v"
    )
    add("CoDA: diagnoses rejected by control experiments", rej, paper.TABLE8["rejected_share"])
    add(
        "CoDA: diagnosis agreement, all diagnoses",
        stat(final, "agreement_before"),
        paper.TABLE8["agreement_before"],
    )
    add(
        "CoDA: diagnosis agreement, after rejection",
        stat(final, "agreement_after"),
        paper.TABLE8["agreement_after"],
    )
    t.notes.append(
        "Validity: share of proposals that pass every physical check before repair, averaged over rounds "
        "(`validity_pass_first`); the validity checks and repairs are the same for every method. The paper's "
        "'targeting precision' is not defined in the text we have; what we report is the failure rate of the "
        "round's policy: for CoDA on its *targeted* environments (recreating a diagnosed difficulty), for "
        "uniform generation on its generated environments, each averaged over the rounds of each run (uniform's "
        "include round 1). Different methods' policies meet those, so the rows below compare CoDA's targeted "
        "environments with its own novel draws, same runs and same rounds (those with both: rounds 2+), pooled "
        "over the rollouts of every seed and per seed (mean ± s.e.), with the share of targeted rollouts that "
        "failed with a diagnosis in the targeted mode (the mode whose program made the scene, read from every "
        "memory snapshot) and the failure rate of the targeted environments of modes already validated when "
        "the round began (the others test candidate modes) (`coda.report.targeting`). "
        "Coverage entropy: scenes binned by (family, most-perturbed factor, size of the perturbation in seed "
        "spreads); uniform generation keeps no memory, so its proposals are re-drawn from the generator space "
        "with the run's seed, as many as it accepted."
    )
    t.notes.append(
        "Diagnosis agreement is scored against the factor each generation program perturbed (ground truth "
        "known to the generator), not against human annotators as in the paper; 'after rejection' keeps the "
        "diagnoses whose mode was validated by control experiments and whose failing scene lies in the "
        "validated program's region, which is partly structural (see README)."
    )
    t.write(out, check_order=False)
    return t


def _totals(run: RunResult) -> dict[str, Any]:
    return {
        "diagnoses": sum(x.get("diagnoses") or 0 for x in run.rounds),
        "rejected_diagnoses": run.metrics.get("rejected_diagnoses") or 0,
    }


def table9_compute(runs: Runs, out: Path) -> Table:
    t = Table(
        "table9_compute",
        "Table 9: compute per 1,000 accepted environments; adaptive scheduling",
        runs.profile(),
    )
    t.columns = ["row", "ours (mean ± s.e., n)", "paper"]

    def per_1000(rs, fn):
        vals = []
        for r in rs:
            envs = r.metrics.get("envs_accepted_total") or sum(x.get("envs_accepted") or 0 for x in r.rounds)
            if envs:
                vals.append(1000 * fn(r) / envs)
        return {
            "mean": float(np.mean(vals)) if vals else None,
            "se": float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None,
            "n": len(vals),
        }

    tokens = lambda r: sum(
        (x.get("tokens_prompt") or 0) + (x.get("tokens_completion") or 0) for x in r.rounds
    )  # noqa: E731
    cpu_h = lambda r: sum((x.get("cpu_s") or 0) + (x.get("worker_cpu_s") or 0) for x in r.rounds) / 3600  # noqa: E731
    wall_h = lambda r: sum(x.get("wall_s") or 0 for x in r.rounds) / 3600  # noqa: E731
    coda = runs.table1.get("coda", [])
    for m in ("coda", "sr_guided", "uniform"):
        rs = runs.table1.get(m, [])
        t.rows.append(
            {
                "row": f"{m}: CPU-hours (main + workers) per 1,000 accepted envs",
                t.columns[1]: fmt(per_1000(rs, cpu_h), 2),
                "paper": "66 GPU-h (CoDA)" if m == "coda" else "—",
            }
        )
    t.rows.append(
        {
            "row": "coda: wall-clock hours per 1,000 accepted envs",
            t.columns[1]: fmt(per_1000(coda, wall_h), 2),
            "paper": "—",
        }
    )
    t.rows.append(
        {
            "row": "coda: LLM tokens per 1,000 accepted envs",
            t.columns[1]: fmt(per_1000(coda, tokens), 0),
            "paper": "7.4M",
        }
    )
    r = ablation_round(runs)
    fixed, adaptive = runs.ablation_ref("coda"), runs.ablation.get("adaptive")
    for label, run, p in (
        ("fixed scheduling: OOD success (%)", fixed, paper.TABLE9["ood_fixed"]),
        ("adaptive scheduling: OOD success (%)", adaptive, paper.TABLE9["ood_adaptive"]),
    ):
        t.rows.append({"row": label, t.columns[1]: fmt(stat_at(run, r)), "paper": p})
    if fixed and adaptive:

        def cost(run):
            rows = [x for x in run.rounds if x["round"] <= (r or 0)]
            return sum((x.get("cpu_s") or 0) + (x.get("worker_cpu_s") or 0) for x in rows), sum(
                x.get("round_updates") or 0 for x in rows
            )

        (cf, uf), (ca, ua) = cost(fixed), cost(adaptive)
        t.rows.append(
            {
                "row": "adaptive vs fixed: CPU-seconds change (%)",
                t.columns[1]: fmt({"mean": 100 * (ca / cf - 1) if cf else None, "se": None, "n": 1}),
                "paper": paper.TABLE9["adaptive_cost_change"],
            }
        )
        t.rows.append(
            {
                "row": "adaptive vs fixed: policy updates change (%)",
                t.columns[1]: fmt({"mean": 100 * (ua / uf - 1) if uf else None, "se": None, "n": 1}),
                "paper": "—",
            }
        )
    t.notes.append(
        "This machine has no GPU: compute is CPU-seconds of the main process (training) plus the simulation "
        "workers, as measured by the runs. The default compiler is the offline template compiler, which uses "
        "no LLM tokens (0); the `hf`/`openai` compilers count tokens. Scheduling rows: seed 0 at the "
        f"ablation round ({r})."
    )
    t.write(out, check_order=False)
    return t
