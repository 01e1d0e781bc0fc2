"""``metrics/tidy.csv`` (`coda.report.tidy`): one float per row, every record's final and per-round metrics, the
same numbers as the records; and `coda compare`'s metric comparison (`coda.report.compare`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from coda.report.compare import compare_metrics, metrics_lines
from coda.report.runs import RunResult, Runs
from coda.report.tidy import COLUMNS, row_metrics, tidy_rows, write_tidy

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "records" / "regime_a"


def _overall(t: pd.DataFrame, metric: str = "ood_success") -> pd.DataFrame:
    return t[t.suite.isna() & t.family.isna() & (t.metric == metric)]


def test_committed_tidy_table_has_every_table1_method_and_seed_as_floats():
    t = pd.read_csv(ROOT / "metrics" / "tidy.csv")
    assert list(t.columns) == list(COLUMNS)
    assert t.value.dtype == float and t.seed.dtype == int and t.final.dtype == bool
    final = _overall(t[(t.regime == "a") & (t.experiment == "table1") & t.final])
    found = set(zip(final.method, final.seed))
    records = {
        (d.name.rsplit("-", 1)[0], int(d.name.rsplit("-", 1)[1])) for d in (RECORDS / "table1").glob("*-*")
    }
    assert ("sft", 0) in records and found == records
    assert len(final) == len(records)  # one final row per run


def test_final_values_equal_each_records_metrics(tmp_path):
    """The table's final row of every record is that record's metrics.json, overall and per suite and family;
    and the summary stage writes the committed file byte for byte (deterministic, from the records)."""
    from coda.report.summary import summary

    runs = Runs.load(RECORDS)
    summary(runs, tmp_path)
    assert (tmp_path / "tidy.csv").read_bytes() == (ROOT / "metrics" / "tidy.csv").read_bytes()
    t = pd.read_csv(tmp_path / "tidy.csv")
    checked = 0
    for experiment in ("table1", "ablation", "long", "budget", "backbone"):
        for d in sorted((RECORDS / experiment).iterdir()):
            m = json.loads((d / "metrics.json").read_text())
            rows = t[(t.regime == "a") & (t.experiment == experiment) & (t.run == d.name) & t.final]
            assert set(rows["round"]) == {m["round"]}, d
            assert _overall(rows).value.tolist() == [m["ood_success"]], d
            assert _overall(rows).n.tolist() == [m["n_ood"]], d
            assert _overall(rows, "id_success").value.tolist() == [m["id_success"]], d
            tasks = rows[(rows.suite == "tasks") & rows.family.isna() & (rows.metric == "ood_success")]
            assert tasks.value.tolist() == [m["ood_by_suite"]["tasks"]], d
            cell = rows[(rows.suite == "layouts") & (rows.family == "drawer")]
            assert cell.value.tolist() == [m["ood_by_family_suite"]["drawer"]["layouts"]], d
            assert cell.n.tolist() == [m["n_ood"] / 16], d
            checked += 1
    assert checked >= 40


def test_rows_break_down_success_and_leave_out_timings(tmp_path):
    row = {
        "round": 2,
        "n_ood": 8,
        "n_id": 2,
        "ood_success": 0.5,
        "id_success": 1.0,
        "ood_by_suite": {"tasks": 0.25, "layouts": 0.75},
        "ood_by_family": {"stack": 0.5},
        "ood_by_family_suite": {"stack": {"tasks": 0.25, "layouts": 0.75}},
        "critic_loss": 0.3,
        "modes": 4,
        "wall_s": 9.0,
        "cpu_s": 3.0,
        "agreement_after": None,
        "refined": True,
    }
    got = list(row_metrics(row))
    assert got[:2] == [("", "", "ood_success", 0.5, 8), ("", "", "id_success", 1.0, 2)]
    assert ("tasks", "", "ood_success", 0.25, 4) in got and ("", "stack", "ood_success", 0.5, 8) in got
    assert ("layouts", "stack", "ood_success", 0.75, 4) in got
    assert ("", "", "modes", 4.0, None) in got and ("", "", "critic_loss", 0.3, None) in got
    assert not {m for _, _, m, _, _ in got} & {"wall_s", "cpu_s", "agreement_after", "refined", "round"}
    assert all(isinstance(v, float) for *_, v, _ in got)
    # `final` marks the last evaluated row, not the last row
    trained = {"round": 3, "critic_loss": 0.2, "ood_success": None}
    run = RunResult("coda-1", tmp_path, {"method": "coda", "seed": 1}, [row, trained], row)
    runs = Runs(tmp_path, table1={"coda": [run]})
    rows = tidy_rows(runs)
    assert {r[5] for r in rows if r[6]} == {2} and any(r[5] == 3 for r in rows)
    path = write_tidy(runs, tmp_path / "t" / "tidy.csv")
    t = pd.read_csv(path)
    assert t.value.dtype == float and set(t.experiment) == {"table1"} and set(t.regime) == {"a"}


def test_compare_pairs_the_same_episodes_and_reads_per_suite(tmp_path):
    a, b = RECORDS / "table1" / "coda-0", RECORDS / "table1" / "uniform-0"
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    report = compare_metrics(a, b)
    assert report["paired"] and report["episodes"] == [len(ma["eval_outcomes"])] * 2
    rows = {(r["metric"], r["suite"], r["family"]): r for r in report["rows"]}
    ood = rows["ood_success", "", ""]
    assert ood["a"] == round(100 * ma["ood_success"], 2) and ood["b"] == round(100 * mb["ood_success"], 2)
    # paired: the mean per-episode difference is the difference of the rates, its s.e. over the episodes
    oa, ob = (m["eval_outcomes"][m["n_id"] :] for m in (ma, mb))
    d = [int(x) - int(y) for x, y in zip(oa, ob)]
    mean = sum(d) / len(d)
    se = (sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) ** 0.5
    assert ood["diff"] == pytest.approx(100 * mean, abs=0.01) and ood["se"] == pytest.approx(
        100 * se, abs=0.01
    )
    tasks = rows["ood_success", "tasks", ""]
    suite_diff = 100 * (ma["ood_by_suite"]["tasks"] - mb["ood_by_suite"]["tasks"])
    assert tasks["paired"] and tasks["diff"] == pytest.approx(suite_diff, abs=0.01)
    for f in ("pick_place", "stack", "drawer", "push"):
        fam = rows["ood_success", "", f]
        assert fam["paired"] and fam["diff"] == pytest.approx(
            100 * (ma["ood_by_family"][f] - mb["ood_by_family"][f]), abs=0.01
        )
    # a run evaluated on other episodes is compared as two independent rates, and says so
    other = compare_metrics(a, RECORDS / "ablation" / "coda_ref")
    assert not other["paired"] and not any(r["paired"] for r in other["rows"])
    assert "not paired" in "\n".join(metrics_lines(other))


def test_compare_command_prints_metrics_json_and_keeps_the_byte_check(tmp_path):
    a, b = RECORDS / "table1" / "coda-0", RECORDS / "table1" / "sft-0"

    def coda(*args):
        return subprocess.run(
            [sys.executable, "-m", "coda", "compare", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    text = coda(a, b)
    assert text.returncode == 0 and "OOD suite tasks" in text.stdout and "paired over the same" in text.stdout
    report = json.loads(coda(a, b, "--json").stdout)
    assert report == json.loads(json.dumps(compare_metrics(a, b)))
    copy = tmp_path / "coda-0"
    shutil.copytree(a, copy)
    same = coda(a, copy, "--bytes")
    assert same.returncode == 0 and json.loads(same.stdout)["different"] == []
    differs = coda(a, b, "--bytes")
    assert differs.returncode == 1 and "metrics.json" in json.loads(differs.stdout)["different"]
    missing = coda(a, tmp_path / "nothing")
    assert missing.returncode != 0 and "not a finished run" in missing.stderr
