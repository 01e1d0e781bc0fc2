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

from pathlib import Path
from typing import Any

from coda.report import paper
from coda.report.claims import claims
from coda.report.main_results import table1_numbers
from coda.report.runs import Runs, fmt, paired, project_dir, regime_dirs, rows_at, stat
from coda.report.tables import Table
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


def _regimes_file(runs: Runs) -> dict[str, Any]:
    """metrics/regimes.json (`coda regimes`), {} when it is not there."""
    import json

    path = project_dir(runs.root) / "metrics" / "regimes.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.1f}"


def table1_regimes(runs: Runs, out: Path) -> Table:
    """Table 1 in both benchmark regimes side by side: each regime's SFT policy on uniform draws and on the
    suites, every method's OOD success, CoDA's paired differences and Table 8's targeting, with the paper's."""
    folders = regime_dirs(runs.root)
    by = {k: runs if f == runs.root else Runs.load(f) for k, f in folders.items()}
    measured = _regimes_file(runs)
    cols = {"a": "regime A (ours)", "b": "regime B (ours)"}
    t = Table(
        "table1_regimes",
        "Table 1 in both benchmark regimes: regime A (narrow SFT data) and regime B (the paper's regime)",
        runs.profile(),
        columns=["row", cols["a"], cols["b"], "paper"],
    )

    def add(row: str, values: dict[str, str], paper_value) -> None:
        t.add(row, "", paper_value, **{cols[k]: v for k, v in values.items()})

    def entry(k: str, key: str) -> Any:
        return (measured.get(k) or {}).get(key)

    add(
        "SFT policy: fails certified uniform generator draws",
        {k: f"{_pct(entry(k, 'sft_uniform_failure'))} (n={entry(k, 'n_uniform') or 0})" for k in cols},
        paper.TABLE8["precision_uniform"],
    )
    add(
        "SFT policy: OOD success on the held-out suites",
        {k: f"{_pct(entry(k, 'sft_ood'))} (n={entry(k, 'n_ood') or 0})" for k in cols},
        paper.TABLE1["sft"],
    )
    for method, label in paper.TABLE1_LABELS.items():
        add(
            label,
            {k: fmt(stat(rows_at(by[k].table1.get(method, []), None))) for k in cols},
            paper.TABLE1[method],
        )
    for other in ("uniform", "sr_guided"):
        diffs = {}
        for k, r in by.items():
            a, b = r.table1.get("coda", []), r.table1.get(other, [])
            diffs[k] = fmt(paired(a, b, None, None), signed=True) if a and b else "not run"
        add(
            f"CoDA − {paper.TABLE1_LABELS[other]} (paired, points)",
            diffs,
            round(paper.TABLE1["coda"] - paper.TABLE1[other], 1),
        )
    for key, label, paper_value in (
        (
            "coda_targeted_failure",
            "Table 8: the round's policy fails CoDA's targeted envs",
            paper.TABLE8["precision_coda"],
        ),
        (
            "coda_novel_failure",
            "Table 8: the round's policy fails CoDA's novel draws",
            paper.TABLE8["precision_uniform"],
        ),
        (
            "coda_replay_failure",
            "Table 8: the round's policy fails replays of scenes it failed before",
            None,
        ),
    ):
        vals = {}
        for k, r in by.items():
            got = targeting(r) if r.table1.get("coda") else {}
            vals[k] = _pct(got.get(key)) if got else "not run"
        add(label, vals, paper_value)
    t.notes += [
        "Regime A: the SFT policy learns from a narrow seed space (the benchmark as first built). Regime B: from "
        "the central 80% of every generator range, with the held-out suites in the generator's corners "
        "(docs/BENCHMARK.md, Regime B, and its pre-registration). The generator, the methods, the budget and "
        "the evaluation (800 OOD episodes per run) are the same in both.",
        "Uniform-draw failure: the SFT policy on the same certified uniform draws for both regimes (`coda "
        "regimes`, metrics/regimes.json). Methods: OOD success after the rounds, mean ± s.e. over seeds; paired "
        "differences over the same episodes per seed. Table 8's rates are pooled over CoDA's rounds 2+ and "
        "seeds (`coda.report.targeting`). 'not run': no record under that regime's folder yet.",
    ]
    t.write(out, check_order=False)
    return t
