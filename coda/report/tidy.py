"""``metrics/tidy.csv``: every run record's metrics as one tidy long table, one value per row, for pandas.

A row is one metric of one evaluated or trained round of one run: its benchmark ``regime`` (a/b), ``experiment``
(table1, ablation, long, budget, backbone: where `Runs` found it), ``run`` (the record's folder name, e.g.
``coda-0``, ``adaptive``, ``uniform-8``), ``method``, ``seed``, ``round``, ``final`` (the run's last evaluated
row, i.e. its ``metrics.json``), ``suite`` and ``family`` (empty for all of them), ``metric``, ``value`` (a
float; success rates and their s.e. as fractions, as the records hold them) and ``n`` (the episodes the value
is over; empty for a value that is not a success rate, e.g. a loss or a count).

The success metrics are broken down as the records break them down: ``ood_success`` overall, per suite
(``ood_by_suite``), per family (``ood_by_family``) and per family and suite (``ood_by_family_suite``);
``id_success`` overall and per family (``id_by_family``); ``ood_se``/``id_se`` overall. Every other number a
round row holds (losses, counts; not its timings) follows with ``suite`` and ``family`` empty. Rows come in a fixed
order (regime, experiment, run, round, then the metrics as listed here), so the file is byte-identical for the
same records.

Example:
    >>> import pandas as pd
    >>> t = pd.read_csv("metrics/tidy.csv")  # empty suite/family cells read as NaN
    >>> overall = t.suite.isna() & t.family.isna() & (t.metric == "ood_success")
    >>> t[overall & t.final & (t.experiment == "table1")].groupby("method").value.mean()
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coda.report.runs import RunResult, Runs, regime_dirs

COLUMNS = (
    *("regime", "experiment", "run", "method", "seed", "round", "final"),
    *("suite", "family", "metric", "value", "n"),
)
EXPERIMENTS = ("table1", "ablation", "long", "budget", "backbone")  # `Runs` groups, in the table's order
# keys of a round row that are not metrics of their own: the episode counts (the `n` column), the run's
# identity, and the timings, which differ between identical runs (`coda.maintenance.VOLATILE_KEYS`), so that a
# re-made record leaves the table as it was
NOT_METRICS = frozenset(
    {"round", "n_id", "n_ood", "method", "seed", "profile", "wall_s", "cpu_s", "worker_cpu_s"}
)

Metric = tuple[str, str, str, float, int | None]  # suite, family, metric, value, n


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _share(n: Any, parts: int) -> int | None:
    """Episodes per part when `n` episodes split evenly into `parts` (the evaluation's layout), else None."""
    return n // parts if _number(n) and parts and n % parts == 0 else None


def row_metrics(row: dict[str, Any]) -> Iterator[Metric]:
    """The metrics of one round row (`RunResult.rounds`), broken down by suite and family as recorded.

    >>> next(row_metrics({"ood_success": 0.47, "n_ood": 800}))
    ('', '', 'ood_success', 0.47, 800)
    """
    n_ood, n_id = row.get("n_ood"), row.get("n_id")
    by_suite = row.get("ood_by_suite") or {}
    by_family = row.get("ood_by_family") or {}
    cells = row.get("ood_by_family_suite") or {}
    id_family = row.get("id_by_family") or {}
    for key, n in (("ood_success", n_ood), ("ood_se", n_ood), ("id_success", n_id), ("id_se", n_id)):
        if _number(row.get(key)):
            yield "", "", key, float(row[key]), n if _number(n) else None
    for suite, v in sorted(by_suite.items()):
        if _number(v):
            yield suite, "", "ood_success", float(v), _share(n_ood, len(by_suite))
    for family, v in sorted(by_family.items()):
        if _number(v):
            yield "", family, "ood_success", float(v), _share(n_ood, len(by_family))
    for family, suites in sorted(cells.items()):
        for suite, v in sorted((suites or {}).items()):
            if _number(v):
                yield suite, family, "ood_success", float(v), _share(n_ood, len(cells) * len(suites))
    for family, v in sorted(id_family.items()):
        if _number(v):
            yield "", family, "id_success", float(v), _share(n_id, len(id_family))
    done = {"ood_success", "ood_se", "id_success", "id_se"}
    for key, v in sorted(row.items()):
        if key not in done and key not in NOT_METRICS and _number(v):
            yield "", "", key, float(v), None


def final_round(run: RunResult) -> int | None:
    """The round of the run's last evaluated row (its ``metrics.json``); None when none was evaluated."""
    rows = [row for row in run.rounds if row.get("ood_success") is not None]
    return rows[-1].get("round") if rows else None


def run_rows(regime: str, experiment: str, run: RunResult) -> Iterator[tuple]:
    """The table's rows of one run, round by round (`COLUMNS`)."""
    last = final_round(run)
    for row in run.rounds:
        r = row.get("round")
        final = last is not None and r == last
        for suite, family, metric, value, n in row_metrics(row):
            yield (
                regime,
                experiment,
                run.name,
                run.method,
                run.seed,
                r,
                final,
                suite,
                family,
                metric,
                value,
                n,
            )


def regime_runs(runs: Runs) -> dict[str, Runs]:
    """Each benchmark regime's runs (`regime_dirs` of ``runs.root``; `runs` itself for its own regime)."""
    return {
        regime: runs if folder == runs.root else Runs.load(folder)
        for regime, folder in regime_dirs(runs.root).items()
    }


def tidy_rows(runs: Runs) -> list[tuple]:
    """Every row of the tidy table of both regimes' records, in the table's order."""
    rows: list[tuple] = []
    for regime, r in regime_runs(runs).items():
        for experiment in EXPERIMENTS:
            group = getattr(r, experiment)
            found = (
                [x for name in sorted(group) for x in group[name]]
                if experiment == "table1"
                else [group[name] for name in sorted(group)]
            )
            for run in found:
                rows.extend(run_rows(regime, experiment, run))
    return rows


def write_tidy(runs: Runs, path: Path) -> Path:
    """Write the tidy table (`tidy_rows`) as CSV: floats in Python's shortest round-trip form, empty cells for
    no suite, family or n."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(COLUMNS)
        for row in tidy_rows(runs):
            out.writerow(["" if c is None else repr(c) if isinstance(c, float) else c for c in row])
    return path
