"""`coda status`: `dvc status --json` grouped by reason in a few lines (a synthetic status), and one real call."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coda.pipeline_status import REASONS, read_times, stage_reasons, summarize, summary_lines

ROOT = Path(__file__).resolve().parent.parent

# a fresh clone's kind of status: outputs not in the cache, inputs missing, code and params changed
STATUS = {
    "data.dvc": [{"changed outs": {"data": "not in cache"}}],
    "scenes": [
        {"changed deps": {"coda/data.py": "modified", "params.yaml": {"profiles.cpu.data": "modified"}}},
        {"changed outs": {"scenes": "not in cache"}},
    ],
    "sft": [{"changed deps": {"scenes": "deleted"}}, {"changed outs": {"runs/sft": "not in cache"}}],
    **{
        f"table1@{m}-{s}": [
            {"changed deps": {"runs/sft/policy": "deleted", "coda/coevolve": "modified"}},
            {"changed outs": {f"runs/table1/{m}-{s}": "not in cache", f"records/table1/{m}-{s}": "deleted"}},
        ]
        for m in ("coda", "uniform")
        for s in range(3)
    },
    "summary": [{"changed outs": {"metrics/summary.json": "not in cache"}}],
    "nb04_main": [{"changed deps": {"notebooks/04_main_results.ipynb": "modified"}}, "changed command"],
    "figures_index": [{"changed outs": {"figures/README.md": "modified"}}, "always changed"],
}


def test_each_kind_of_change_has_its_reason():
    assert stage_reasons(STATUS["scenes"]) == {
        "code": ["coda/data.py"],
        "params": ["profiles.cpu.data"],
        "output not cached": ["scenes"],
    }
    assert stage_reasons(STATUS["sft"]) == {"input missing": ["scenes"], "output not cached": ["runs/sft"]}
    assert stage_reasons(STATUS["nb04_main"]) == {
        "code": ["notebooks/04_main_results.ipynb"],
        "definition": ["changed command"],
    }
    assert stage_reasons(STATUS["figures_index"]) == {
        "output changed": ["figures/README.md"],
        "always": ["always changed"],
    }
    assert stage_reasons([{"changed deps": {"metrics/a.json": "modified", "x.yaml": {"k": "new"}}}]) == {
        "input changed": ["metrics/a.json"],
        "params": ["x.yaml:k"],
    }


def test_stages_are_grouped_by_reason_with_counts_and_the_paths_behind_them():
    summary = summarize(STATUS, times={"sft": 816.0, "table1@coda-0": 681.0, "gone": 5.0})
    stages = [s for s in STATUS if not s.endswith(".dvc")]
    assert summary["stages"] == stages and list(summary["tracked"]) == ["data.dvc"]
    reasons = summary["reasons"]
    assert list(reasons) == [r for r in REASONS if r in reasons]  # the documented order
    assert len(reasons["input missing"]["stages"]) == 7  # sft and the six table1 runs
    assert reasons["input missing"]["paths"] == {"runs/sft/policy": 6, "scenes": 1}  # most frequent first
    assert list(reasons["input missing"]["paths"]) == ["runs/sft/policy", "scenes"]
    assert reasons["code"]["stages"] == [
        "scenes",
        *(s for s in stages if s.startswith("table1")),
        "nb04_main",
    ]
    assert reasons["output missing"]["paths"] == {
        f"records/table1/{m}-{s}": 1 for m in ("coda", "uniform") for s in range(3)
    }
    assert summary["only_outputs_missing"] == ["summary"]  # nothing it reads changed
    assert summary["timed"] == ["sft", "table1@coda-0"] and summary["seconds"] == 1497.0

    lines = summary_lines(summary)
    assert len(lines) <= 14, lines
    text = "\n".join(lines)
    assert lines[0].startswith("data.dvc: data is not here") and "coda data ensure" in lines[0]
    assert re.search(r"dvc status: 11 stages would re-run", text)
    counted = {
        reason: int(m.group(1))
        for reason, meaning in REASONS.items()
        if (m := re.search(rf"^ +(\d+) because {re.escape(meaning)}", text, re.M))
    }
    assert counted == {r: len(v["stages"]) for r, v in reasons.items()}
    assert "runs/sft/policy in 6, scenes" in text  # a path in one stage is named without a count
    assert "1 of them only lack outputs" in text
    assert re.search(r"^ +1 because their command .*: changed command \(nb04_main\)$", text, re.M)
    assert not re.search(r"because code .*\(", text)  # eight stages: not named on that line
    assert "table1 ×6" in text and "table1@" not in text
    assert "2 of the 11) took about 25 min" in text


def test_an_up_to_date_pipeline_says_so():
    assert summary_lines(summarize({})) == ["dvc status: up to date; `dvc repro` has no stage to re-run"]


def test_stage_times_are_the_last_successful_runs(tmp_path):
    log = tmp_path / "times.tsv"
    log.write_text(
        "a\t10\t0\tT\tran\na\t12\t0\tT\tran\nb\t1\t0\tT\tcached\nc\t5\t1\tT\tran\nd\tx\t0\tT\tran\n"
    )
    assert read_times(log) == {"a": 12.0}
    assert read_times(tmp_path / "absent.tsv") == {}


def _coda(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coda", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=600,
    )


def test_the_command_reads_a_saved_status_and_refuses_what_is_not_one(tmp_path):
    saved = tmp_path / "status.json"
    saved.write_text(json.dumps(STATUS))
    res = _coda("status", "--from", str(saved))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == summary_lines(
        summarize(STATUS, read_times(ROOT / "docs" / "pipeline_times.tsv"))
    )
    res = _coda("status", "--from", "-", "--json", stdin=json.dumps(STATUS))
    assert res.returncode == 0 and json.loads(res.stdout)["stages"] == [s for s in STATUS if s != "data.dvc"]
    saved.write_text('{"scenes": "changed"}')
    res = _coda("status", "--from", str(saved))
    assert res.returncode == 2 and "not the JSON of `dvc status --json`" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.integration
def test_the_command_summarizes_what_dvc_status_says_here():
    """One real call on two stages of this repository: the same stages as `dvc status` names, one line each
    reason at most."""
    targets = ["summary", "nb01_scenes"]
    dvc = Path(sys.executable).parent / "dvc"
    raw = subprocess.run(
        [str(dvc), "status", "--json", *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    expected = [s for s in json.loads(raw.stdout or "{}") if not s.endswith(".dvc")]
    res = _coda("status", *targets, "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["stages"] == expected
    assert set(summary["reasons"]) <= set(REASONS)
    res = _coda("status", *targets)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) <= 4 + len(REASONS)
    if expected:
        assert f"{len(expected)} stage" in res.stdout
    else:
        assert "up to date" in res.stdout
