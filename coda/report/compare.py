"""`coda compare A B`: two runs' final metrics side by side (run directories or their records).

For each run's last evaluated row (its ``metrics.json``): OOD and ID success overall, OOD per suite and per
family, ID per family, each in points, and the difference A − B. When both rows were evaluated on the same
episodes (their ``eval_outcomes`` have the same length, so the same `coda.evaluate.evaluation_items`), the
difference is paired: the mean per-episode difference with its s.e. over those episodes
(`coda.evaluate.paired_diff`); otherwise it is the difference of two independent rates, with the s.e. of two
binomial rates. ``coda compare --bytes`` is the byte-for-byte check (`coda.maintenance.compare_runs`).

Example:
    $ coda compare records/regime_a/table1/coda-0 records/regime_a/table1/uniform-0
    >>> compare_metrics("records/regime_a/table1/coda-0", "records/regime_a/table1/uniform-0")["rows"][0]
    {'metric': 'ood_success', 'suite': '', 'family': '', 'a': 47.0, 'b': 47.63, 'diff': -0.62, 'se': 2.01, 'n': 800, 'paired': True}
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from coda.evaluate import paired_diff
from coda.report.runs import FAMILIES, SUITES, RunResult, _suite_cells, load_run, ood_outcomes
from coda.report.tidy import row_metrics

Key = tuple[str, str, str]  # metric, suite, family


def final_row(run: RunResult) -> dict[str, Any] | None:
    """The run's last evaluated row: its ``metrics.json`` or, failing that, the last row with an OOD success."""
    evaluated = [row for row in run.rounds if row.get("ood_success") is not None]
    return run.at(None) or (evaluated[-1] if evaluated else None)


def outcomes(row: dict[str, Any]) -> dict[Key, str]:
    """The episodes' outcomes ("1"/"0") behind each success rate of a row that `compare_metrics` shows; a
    breakdown is left out when the outcomes do not follow the evaluation's layout (checked against the row's
    own rates, as `coda.report.runs.ood_outcomes` does)."""
    out: dict[Key, str] = {}
    ood = ood_outcomes(row)
    if not ood:
        return out
    out["ood_success", "", ""] = ood
    cells = _suite_cells(row, ood)
    if cells is not None:
        for s in SUITES:
            out["ood_success", s, ""] = "".join(cells[f, s] for f in FAMILIES)
        for f in FAMILIES:
            out["ood_success", "", f] = "".join(cells[f, s] for s in SUITES)
    ind = row["eval_outcomes"][: row["n_id"]]
    if ind:
        out["id_success", "", ""] = ind
    k, rest = divmod(len(ind), len(FAMILIES))
    rates = row.get("id_by_family") or {}
    chunks = {f: ind[i * k : (i + 1) * k] for i, f in enumerate(FAMILIES)}
    if (
        k
        and not rest
        and all(
            rates.get(f) is not None and abs(c.count("1") / k - rates[f]) <= 1e-4 for f, c in chunks.items()
        )
    ):
        out.update({("id_success", "", f): c for f, c in chunks.items()})
    return out


def _rates(row: dict[str, Any]) -> dict[Key, tuple[float, int | None]]:
    """Every success rate shown (overall, per suite, per family; not per family and suite) with its episodes."""
    return {
        (metric, suite, family): (value, n)
        for suite, family, metric, value, n in row_metrics(row)
        if metric in ("ood_success", "id_success") and not (suite and family)
    }


def _independent_se(pa: float, na: int | None, pb: float, nb: int | None) -> float | None:
    if not na or not nb:
        return None
    return math.sqrt(pa * (1 - pa) / na + pb * (1 - pb) / nb)


def _points(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


def compare_metrics(a: str | Path, b: str | Path) -> dict[str, Any]:
    """Runs `a` and `b` (run directories or records) compared on their final metrics, in points.

    Returns ``a`` and ``b`` (path, method, seed, round), ``paired`` (whether the episodes are the same),
    ``episodes`` (each side's number of evaluation episodes) and ``rows``: per metric (``ood_success``,
    ``id_success``) and suite or family (empty for all), ``a``, ``b``, ``diff`` (A − B), its ``se`` (paired over
    episodes, or of two independent rates), ``n`` (A's episodes) and ``paired`` (how its s.e. was found)."""
    runs, rows = [], []
    for path in (a, b):
        run = load_run(path)
        if run is None:
            raise FileNotFoundError(
                f"{path}: not a finished run or record (run.json, rounds.json, metrics.json)"
            )
        row = final_row(run)
        if row is None:
            raise FileNotFoundError(f"{path}: no evaluated round")
        runs.append(run)
        rows.append(row)
    ra, rb = rows
    episodes = [len(r.get("eval_outcomes") or "") for r in rows]
    paired = episodes[0] == episodes[1] > 0 and ra.get("n_id") == rb.get("n_id")
    oa, ob = (outcomes(r) if paired else {} for r in rows)
    rates_a, rates_b = _rates(ra), _rates(rb)
    out = []
    for key, (pa, na) in rates_a.items():
        if key not in rates_b:
            continue
        pb, nb = rates_b[key]
        pairs = key in oa and key in ob and len(oa[key]) == len(ob[key])
        if pairs:
            diff, se = paired_diff(oa[key], ob[key])
        else:
            diff, se = pa - pb, _independent_se(pa, na, pb, nb)
        metric, suite, family = key
        out.append(
            {
                "metric": metric,
                "suite": suite,
                "family": family,
                "a": _points(pa),
                "b": _points(pb),
                "diff": _points(diff),
                "se": _points(se),
                "n": na,
                "paired": pairs,
            }
        )
    return {
        "a": _describe(a, runs[0], ra),
        "b": _describe(b, runs[1], rb),
        "paired": paired,
        "episodes": episodes,
        "rows": out,
    }


def _describe(path: str | Path, run: RunResult, row: dict[str, Any]) -> dict[str, Any]:
    return {"path": str(path), "method": run.method, "seed": run.seed, "round": row.get("round")}


def _label(row: dict[str, Any]) -> str:
    what = {"ood_success": "OOD", "id_success": "ID"}[row["metric"]]
    if row["suite"]:
        return f"{what} suite {row['suite']}"
    return f"{what} family {row['family']}" if row["family"] else f"{what} success"


def _cell(x: float | None, signed: bool = False) -> str:
    return "—" if x is None else f"{x:+.1f}" if signed else f"{x:.1f}"


def metrics_lines(report: dict[str, Any]) -> list[str]:
    """`compare_metrics` as a short table a person reads."""
    lines = [
        f"{side}: {d['path']} ({d['method']}, seed {d['seed']}, round {d['round']})"
        for side, d in (("A", report["a"]), ("B", report["b"]))
    ]
    na, nb = report["episodes"]
    lines.append(
        f"paired over the same {na} evaluation episodes: s.e. of the mean per-episode difference"
        if report["paired"]
        else f"not paired (A has {na} evaluation episodes, B {nb}): s.e. of two independent rates"
    )
    lines.append(f"{'success (%)':<24}{'A':>7}{'B':>7}{'A − B':>8}{'s.e.':>6}{'n':>6}")
    for r in report["rows"]:
        lines.append(
            f"{_label(r):<24}{_cell(r['a']):>7}{_cell(r['b']):>7}{_cell(r['diff'], True):>8}"
            f"{_cell(r['se']):>6}{'' if r['n'] is None else r['n']:>6}"
            + (
                "  (unpaired: outcomes not in the evaluation's layout)"
                if report["paired"] and not r["paired"]
                else ""
            )
        )
    return lines
