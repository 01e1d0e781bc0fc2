"""The budget curve (issue "Science II"; the paper reports one budget): final OOD success against the
environments the data engine accepted per family, for uniform, SR-guided and CoDA generation, seed 0.

Each point is a full run of the profile's rounds with `--budget N`: N generated environments and up to N
planner demonstrations per family per round, the same policy-update budget at every N. The profile's own
budget is the Table-1 seed-0 run itself. Differences are paired on the same OOD episodes (s.e. over
episodes, one seed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coda.report.common import FAMILIES, pyplot, save_figure
from coda.report.runs import RunResult, Runs, fmt, paired_episodes
from coda.report.tables import Table

METHODS = ("uniform", "sr_guided", "coda")
LABELS = {"uniform": "Uniform generation", "sr_guided": "SR-guided generation", "coda": "CoDA"}


def budget_points(runs: Runs) -> dict[str, dict[int, RunResult]]:
    """method -> {environments per family per round: finished run} (the Table-1 seed-0 run at the
    profile's budget)."""
    points: dict[str, dict[int, RunResult]] = {m: {} for m in METHODS}
    for name, run in runs.budget.items():
        method, _, n = name.rpartition("-")
        if method in points and n.isdigit() and run.at(None) is not None:
            points[method][int(n)] = run
    for method in METHODS:
        run = runs.seed_run(method)
        if run is not None and run.at(None) is not None:
            n = run.run.get("coevolve", {}).get("envs_per_family")
            if n is not None:
                points[method].setdefault(int(n), run)
    return points


def _point(row: dict[str, Any], key: str, se_key: str) -> dict[str, Any]:
    """One run's success in %, with its binomial s.e. over the evaluation episodes."""
    se = row.get(se_key)
    return {"mean": 100 * row[key], "se": None if se is None else 100 * se, "n": 1}


def accepted_per_family(run: RunResult) -> float | None:
    """Environments accepted over all rounds, per family (the runs use every family of `FAMILIES`)."""
    total = run.metrics.get("envs_accepted_total")
    return None if total is None else total / len(FAMILIES)


def budget_curve(runs: Runs, out: Path) -> list[Path]:
    points = budget_points(runs)
    t = Table(
        "budget_curve",
        "Budget curve: final OOD success against accepted environments per family (seed 0)",
        runs.profile(),
    )
    t.columns = [
        "row",
        "method",
        "budget",
        "accepted per family",
        "ours (mean ± s.e., n)",
        "ID",
        "paired vs uniform (points)",
        "paper",
    ]
    rows: list[dict[str, Any]] = []
    for method in METHODS:
        for n, run in sorted(points[method].items()):
            row = run.at(None)
            uni = points["uniform"].get(n)
            d = paired_episodes(row, uni.at(None)) if uni is not None and method != "uniform" else None
            acc = accepted_per_family(run)
            t.add(
                f"{LABELS[method]}, {n}/round",
                fmt(_point(row, "ood_success", "ood_se")),
                None,
                method=method,
                budget=n,
                **{
                    "accepted per family": "" if acc is None else f"{acc:.1f}",
                    "ID": fmt(_point(row, "id_success", "id_se")),
                    "paired vs uniform (points)": fmt(d, signed=True) if d else "",
                },
            )
            rows.append(
                {
                    "method": method,
                    "n": n,
                    "accepted": acc,
                    "ood": 100 * row["ood_success"],
                    "se": 100 * row["ood_se"] if row.get("ood_se") is not None else None,
                }
            )
    rounds = next((r.run.get("coevolve", {}).get("rounds") for r in runs.all()), None)
    t.notes.append(
        f"Budget = generated environments (and at most as many planner demonstrations) per family per round, "
        f"{rounds} rounds, the same number of policy updates at every budget; accepted = environments that "
        "passed validity, summed over the rounds, per family. The paper reports one budget (64 + 64 "
        "environments per family per round). s.e. here are over evaluation episodes (one seed)."
    )
    paths = t.write(out, check_order=False)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for method in METHODS:
        pts = sorted(
            (r["accepted"], r["ood"], r["se"]) for r in rows if r["method"] == method and r["accepted"]
        )
        if pts:
            x, y, se = zip(*pts)
            ax.errorbar(x, y, yerr=[s or 0 for s in se], marker="o", capsize=3, label=LABELS[method])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("accepted environments per family (all rounds)")
    ax.set_ylabel("final OOD success (%)")
    ax.set_title(f"Budget curve, seed 0 (profile {runs.profile()})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return paths + save_figure(fig, out, "budget_curve")
