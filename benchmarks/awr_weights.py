"""How much the critic steers AWR in committed runs: the effective sample size of the AWR weights, per run.

AWR weighs each of the j candidate chunks of a state by exp(A/β) (capped, mean 1; `coda.learn.awr`). Every
policy update logs Kish's effective sample size of its B·j weights as a fraction of B·j (`ess_fraction` in
the run's ``train_log.csv``): 1.0 means uniform weights, i.e. the update regresses the policy onto its own
samples whatever the critic says; 1/(B·j) means one candidate takes all the weight. Reads run records (or run
directories) and prints, per run: the number of policy updates, the mean, 5th percentile and minimum of
``ess_fraction``, and the AWR and imitation losses averaged over the first and the last tenth of the updates
(a loss that grows while the weights stay uniform is the policy drifting on its own samples).

Usage:
    python benchmarks/awr_weights.py                               # every Table 1 and Table 7 record
    python benchmarks/awr_weights.py records/regime_b/table1/coda-0 --json
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

DEFAULT_GLOBS = ("records/regime_*/table1/*", "records/regime_*/backbone/*")
LOG = "train_log.csv"


def _floats(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def _tenths(values: list[float]) -> tuple[float | None, float | None]:
    """Means of the first and the last tenth (at least one value each) of `values`; None when empty."""
    if not values:
        return None, None
    k = max(1, len(values) // 10)
    return round(fmean(values[:k]), 4), round(fmean(values[-k:]), 4)


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarize(run: Path) -> dict[str, Any]:
    """One run's AWR weight and loss summary (raises FileNotFoundError without a train log)."""
    with (run / LOG).open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("kind") == "policy"]
    meta: dict[str, Any] = {}
    if (run / "run.json").is_file():
        meta = json.loads((run / "run.json").read_text())
    ess = _floats(rows, "ess_fraction")
    awr_first, awr_last = _tenths(_floats(rows, "awr_loss"))
    imi_first, imi_last = _tenths(_floats(rows, "imitation_loss"))
    return {
        "run": str(run),
        "method": meta.get("method"),
        "seed": meta.get("seed"),
        "policy_updates": len(rows),
        "ess_fraction_mean": round(fmean(ess), 4) if ess else None,
        "ess_fraction_p05": round(_quantile(ess, 0.05), 4) if ess else None,
        "ess_fraction_min": round(min(ess), 4) if ess else None,
        "awr_loss_first_tenth": awr_first,
        "awr_loss_last_tenth": awr_last,
        "imitation_loss_first_tenth": imi_first,
        "imitation_loss_last_tenth": imi_last,
    }


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def text(rows: list[dict[str, Any]]) -> str:
    keys = [
        "policy_updates",
        "ess_fraction_mean",
        "ess_fraction_p05",
        "ess_fraction_min",
        "awr_loss_first_tenth",
        "awr_loss_last_tenth",
        "imitation_loss_first_tenth",
        "imitation_loss_last_tenth",
    ]
    head = [
        "run",
        "updates",
        "ESS mean",
        "ESS p05",
        "ESS min",
        "AWR loss first",
        "last",
        "imit. first",
        "last",
    ]
    lines = ["\t".join(head)]
    lines += ["\t".join([r["run"]] + [_cell(r[k]) for k in keys]) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "runs", nargs="*", help=f"run records or directories (default: {', '.join(DEFAULT_GLOBS)})"
    )
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per run")
    args = p.parse_args(argv)
    runs = [Path(r) for r in args.runs] or sorted(
        d for g in DEFAULT_GLOBS for d in Path().glob(g) if (d / LOG).is_file()
    )
    if not runs:
        print("no run records with a train log found", file=sys.stderr)
        return 2
    rows = []
    for run in runs:
        try:
            rows.append(summarize(run))
        except FileNotFoundError:
            print(f"{run}: no {LOG} (not a run record or run directory)", file=sys.stderr)
            return 2
    print(json.dumps(rows, indent=1) if args.json else text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
