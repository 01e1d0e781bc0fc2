"""Regime B's pre-registered predictions, checked against the runs (issue #27).

`PREDICTIONS` holds, as data, the predictions docs/BENCHMARK.md ("Regime B: the paper's regime, and its
pre-registration") committed before any regime-B run (commit 194c002): for each claim, the quantity it is about,
the regime, and the interval it predicted. `preregistration` measures each quantity from the same numbers the
other tables report (paired differences over shared episodes, `coda.report.claims`; Table 8's pooled failure
rates, `coda.report.targeting`) and says whether it landed in its interval, with the s.e. and the number of
seeds, so a reader sees the predictions and the outcomes side by side. A quantity with no records yet is
"not run". An interval bound of None is open.

Example:
    >>> preregistration(Runs.load("records"), Path("figures")).rows[0]["verdict"]
    'inside'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coda.report.claims import claims
from coda.report.runs import Runs, regime_dirs
from coda.report.tables import Table
from coda.report.targeting import targeting


@dataclass(frozen=True)
class Prediction:
    claim: int  # the paper's claim (docs/BENCHMARK.md's numbering)
    regime: str  # "a" or "b"
    quantity: str  # "A-B" (a paired OOD difference, points), a Table 8 key, or "targeted/novel"
    low: float | None  # the predicted interval (points, % or a ratio); None: open
    high: float | None
    text: str  # the prediction as the pre-registration words it


# docs/BENCHMARK.md, "Predictions, per claim, before any regime-B run" (194c002), as intervals
PREDICTIONS: tuple[Prediction, ...] = (
    Prediction(1, "b", "uniform-sft", 5, None, "uniform beats SFT by at least 5 points"),
    Prediction(1, "b", "sr_guided-sft", 5, None, "SR-guided beats SFT by at least 5 points"),
    Prediction(
        1, "b", "critic_no_memory-sft", 5, None, "the critic without memory beats SFT by at least 5 points"
    ),
    Prediction(1, "b", "coda-sft", 5, None, "CoDA beats SFT by at least 5 points"),
    Prediction(1, "b", "domain_rand-sft", 0, 5, "domain randomization beats SFT, by less (under 5 points)"),
    Prediction(2, "b", "sr_guided-uniform", -3, 3, "SR-guided and uniform level (within ±3 points)"),
    Prediction(2, "b", "sr_guided-domain_rand", 0, None, "SR-guided beats domain randomization"),
    Prediction(3, "b", "critic_no_memory-sr_guided", -3, 3, "critic without memory and SR-guided level (±3)"),
    Prediction(
        4, "b", "coda-critic_no_memory", 1, 5, "CoDA beats the critic without memory by 1 to 5 points"
    ),
    Prediction(5, "b", "coda-uniform", 1, 6, "CoDA beats uniform generation by 1 to 6 points"),
    Prediction(5, "a", "coda-uniform", -3, 3, "regime A: CoDA and uniform level (within ±3 points)"),
    Prediction(
        6, "b", "coda_targeted_failure", 50, 70, "the round's policy fails 50-70% of CoDA's targeted envs"
    ),
    Prediction(6, "b", "coda_novel_failure", 30, 40, "the round's policy fails 30-40% of CoDA's novel draws"),
    Prediction(6, "b", "targeted/novel", 1.3, 2.2, "targeted failure / novel failure between 1.3 and 2.2"),
    Prediction(6, "a", "targeted/novel", None, 1.0, "regime A: novel draws failed more often than targeted"),
)


def _interval(p: Prediction) -> str:
    if p.low is None:
        return f"≤ {p.high:g}"
    if p.high is None:
        return f"≥ {p.low:g}"
    return f"[{p.low:g}, {p.high:g}]"


def measure(p: Prediction, claim_rows: list[dict[str, Any]], table8: dict[str, Any]) -> dict[str, Any]:
    """The measured value of `p` (points, % or a ratio), its s.e. and n, from one regime's `claims` rows and
    its `targeting` numbers; value None when not run."""
    if "-" in p.quantity:
        a, b = p.quantity.split("-")
        row = next((r for r in claim_rows if (r["a"], r["b"]) == (a, b)), None)
        if row is None:
            raise KeyError(f"no claim compares {a} with {b}")
        return {"value": row["diff"], "se": row["se"], "n": row["n"]}
    if not table8 or "coda_targeted_failure" not in table8:
        return {"value": None, "se": None, "n": 0}
    if p.quantity == "targeted/novel":
        t, v = table8["coda_targeted_failure"], table8["coda_novel_failure"]
        return {"value": round(t / v, 2) if v else None, "se": None, "n": table8.get("n", 0)}
    seeds = table8.get("per_seed", {}).get(p.quantity, {})
    se = seeds.get("se")
    return {
        "value": round(100 * table8[p.quantity], 1),
        "se": None if se is None else round(100 * se, 1),
        "n": table8.get("n", 0),
    }


def verdict(p: Prediction, value: float | None) -> str:
    if value is None:
        return "not run"
    inside = (p.low is None or value >= p.low) and (p.high is None or value <= p.high)
    return "inside" if inside else "outside"


def preregistration(runs: Runs, out: Path) -> Table:
    """The pre-registered predictions beside what the runs measured (both regimes' records)."""
    folders = regime_dirs(runs.root)
    by = {k: runs if f == runs.root else Runs.load(f) for k, f in folders.items()}
    cache: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    t = Table(
        "preregistration",
        "Regime B's pre-registered predictions (docs/BENCHMARK.md, before any regime-B run) and the outcomes",
        runs.profile(),
        columns=["row", "claim", "regime", "predicted", "measured", "s.e.", "n", "verdict"],
    )
    for p in PREDICTIONS:
        r = by.get(p.regime)
        if p.regime not in cache:
            has = r is not None and bool(r.table1)
            cache[p.regime] = (claims(r) if has else [], targeting(r) if has and r.table1.get("coda") else {})
        rows, t8 = cache[p.regime]
        got = measure(p, rows, t8) if rows or "-" not in p.quantity else {"value": None, "se": None, "n": 0}
        v = got["value"]
        digits = 2 if p.quantity == "targeted/novel" else 1
        t.add(
            p.text,
            "",
            None,
            claim=p.claim,
            regime=p.regime.upper(),
            predicted=_interval(p),
            measured="not run" if v is None else f"{v:.{digits}f}",
            **{"s.e.": "" if got["se"] is None else f"{got['se']:.{digits}f}"},
            n=got["n"],
            verdict=verdict(p, v),
        )
    t.notes += [
        "Differences: paired OOD success differences in points over the same 800 episodes per seed, mean over "
        "seeds (claims table). Table 8: failure rates in % pooled over CoDA's rounds 2+ and seeds, s.e. over "
        "seeds; the ratio is targeted over novel failure. 'inside': the measured mean lies in the predicted "
        "interval (no test; the s.e. says how firmly). Predictions as committed in 194c002, before any run.",
    ]
    t.write(out, check_order=False)
    return t
