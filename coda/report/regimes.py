"""The report's numbers for both benchmark regimes side by side (issue #27).

Regime A is the benchmark as first built; regime B is the paper's regime, a competent SFT policy (its data and
SFT policy are measured by `coda.regimes`). Their records have the same layout, ``records/regime_a/`` and
``records/regime_b/`` (``table1/<method>-<seed>``, ``budget``, ``ablation``, ``long``, ...), and the same code
reads both. `regime_results` gives, per regime, Table 1 (`table1_regimes`), Table 8's same-run, same-round
targeting numbers (`table8`, `coda.report.targeting`) and the tested claims (`claims_regimes`,
`coda.report.claims`). A regime without records is reported with a status saying where none were found, e.g.
``{"status": "no records under records/regime_b/table1"}``, never left out.

Example:
    >>> regime_results(Runs.load("records/regime_a"))["table8"]["b"]
    {'status': 'no records under records/regime_b/table1'}
"""

from __future__ import annotations

from typing import Any

from coda.report import paper
from coda.report.claims import claims
from coda.report.main_results import table1_numbers
from coda.report.runs import Runs, regime_dirs
from coda.report.targeting import targeting


def absent(runs: Runs) -> dict[str, str] | None:
    """The status of a regime without Table-1 records (None when it has some)."""
    return None if runs.table1 else {"status": f"no records under {runs.root.as_posix()}/table1"}


def table1_regime(runs: Runs) -> dict[str, Any]:
    """Every Table-1 method's numbers (`table1_numbers`), or its status when it has no records."""
    done = table1_numbers(runs)
    return {
        m: done.get(m) or {"status": f"no records under {runs.root.as_posix()}/table1/{m}-*"}
        for m in paper.TABLE1
    }


def regime_results(runs: Runs) -> dict[str, dict[str, Any]]:
    """``table1_regimes``, ``table8`` and ``claims_regimes``, each ``{"a": ..., "b": ...}``: the regimes'
    folders come from `regime_dirs` of ``runs.root`` (`runs` itself is read for its own regime)."""
    out: dict[str, dict[str, Any]] = {"table1_regimes": {}, "table8": {}, "claims_regimes": {}}
    for regime, folder in regime_dirs(runs.root).items():
        r = runs if folder == runs.root else Runs.load(folder)
        status = absent(r)
        out["table1_regimes"][regime] = status or table1_regime(r)
        out["table8"][regime] = status or targeting(r)
        out["claims_regimes"][regime] = status or claims(r)
    return out
