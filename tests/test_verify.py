"""`coda verify`: the reference record re-made on this machine is identical to the committed one; a changed
digit is named (file, key, both values) in a few lines; an unknown stage is a user error; and the
first-difference finders on small documents."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coda.differences import (
    ABSENT,
    compare,
    csv_differences,
    differences,
    json_differences,
    report,
    table_differences,
)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "records" / "reference" / "smoke-coda-0"


# What the vector libraries are told on an older CPU (no AVX2: SSE4.1 at most, NumPy's and OpenBLAS's
# baselines). The reference was made with the default environment; re-made with this one, under the numerics
# pin it must come out the same bytes (issue #26).
OLDER_CPU = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3",
    "OPENBLAS_CORETYPE": "Nehalem",
}


def verify(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coda", "verify", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def older_cpu_environ() -> dict[str, str]:
    """A fresh shell's environment (none of the pin's variables) with `OLDER_CPU` set."""
    from coda import numerics

    env = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_VARIABLES}
    env.pop("GLIBC_TUNABLES", None)
    return {**env, **OLDER_CPU}


# -- the reference record ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    """`coda verify` of the reference record, re-made once (smoke profile: scenes, then `coda run`), with the
    environment an older CPU gives the vector libraries."""
    scratch = tmp_path_factory.mktemp("verify") / "scratch"
    return scratch, verify(
        str(REFERENCE.relative_to(ROOT)), "--scratch", str(scratch), env=older_cpu_environ()
    )


@pytest.mark.slow
@pytest.mark.integration
def test_the_reference_record_is_re_made_identically(rerun):
    _, res = rerun
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "identical: all" in res.stdout
    assert re.search(r"re-ran in .* \(scenes .*, run .*, record .*\)", res.stdout)


@pytest.mark.slow
@pytest.mark.integration
def test_a_changed_digit_is_named_with_its_file_key_and_both_values(rerun, tmp_path):
    scratch, first = rerun
    assert (scratch / "verify.json").is_file(), first.stderr[-3000:]
    copy = tmp_path / REFERENCE.name  # the same name: the same steps, so the re-run above is compared again
    shutil.copytree(REFERENCE, copy)
    metrics = copy / "metrics.json"
    text = metrics.read_text()
    m = re.search(r'"ood_success": (\d+\.\d*)(\d)', text)
    old = m.group(1) + m.group(2)
    new = m.group(1) + str((int(m.group(2)) + 1) % 10)
    metrics.write_text(text[: m.start()] + f'"ood_success": {new}' + text[m.end() :])
    res = verify(str(copy), "--scratch", str(scratch))
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]
    out = res.stdout
    assert "not re-running" in res.stderr  # compared again, in seconds
    assert f"first difference: {metrics}" in out
    assert "at:        ood_success" in out
    assert f"committed: {float(new)}" in out and f"re-run:    {float(old)}" in out
    assert "different: 1 of" in out
    assert len(out.splitlines()) <= 25


# -- user errors -------------------------------------------------------------------------------------------
def test_an_unknown_stage_is_a_user_error_with_a_suggestion():
    res = verify("table1@unifrom-1")
    assert res.returncode == 2
    assert "unknown stage 'table1@unifrom-1'" in res.stderr
    assert "table1@uniform-1" in res.stderr  # did you mean
    assert "Traceback" not in res.stderr


def test_a_group_of_stages_and_a_cached_only_stage_are_user_errors():
    res = verify("table1")
    assert res.returncode == 2 and "give one of them" in res.stderr
    res = verify("scenes")
    assert res.returncode == 2 and "nothing committed to compare" in res.stderr


@pytest.mark.integration
def test_a_stage_is_re_made_in_scratch_and_compared_with_git():
    """`summary` (seconds): its command runs unchanged in the scratch folder, on links to its inputs."""
    res = verify("summary")
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "identical: all" in res.stdout


# -- the first-difference finders --------------------------------------------------------------------------
def test_json_differences_name_the_key_path_and_both_values():
    a = {"id": 0.5, "by": {"push": [1, 2, 3]}, "gone": 1}
    b = {"id": 0.5, "by": {"push": [1, 4]}, "new": 2}
    assert list(json_differences(a, b)) == [
        ("by.push[1]", 2, 4),
        ("by.push (length)", 3, 2),
        ("gone", 1, ABSENT),
        ("new", ABSENT, 2),
    ]
    assert repr(ABSENT) == "(absent)"
    assert list(json_differences({"x": float("nan")}, {"x": float("nan")})) == []


def test_timings_and_provenance_are_not_differences_but_in_memory_snapshots_everything_is():
    a = json.dumps({"wall_s": 1.0, "git_sha": "a", "ood": 0.25}).encode()
    b = json.dumps({"wall_s": 2.0, "git_sha": "b", "ood": 0.5}).encode()
    assert list(differences("run/metrics.json", a, b)) == [("ood", 0.25, 0.5)]
    assert list(differences("run/memory/round-0001/manifest.json", a, b))[0] == ("wall_s", 1.0, 2.0)


def test_table_differences_name_the_table_row_and_column():
    a = pa.table({"rollout_id": ["r1", "r2"], "round": [1, 1], "success": [True, False]})
    b = pa.table({"rollout_id": ["r1", "r2"], "round": [1, 1], "success": [True, True]})
    assert list(table_differences(a, b, "rollouts")) == [
        ("table rollouts, row 1 (rollout_id=r2, round=1), column success", False, True)
    ]
    assert list(table_differences(a, a.slice(0, 1), "rollouts")) == [("table rollouts, number of rows", 2, 1)]
    buf = [pa.BufferOutputStream() for _ in range(2)]
    for t, sink in zip((a, b), buf):
        pq.write_table(t, sink)
    found = list(
        differences("memory/round-0001/tables/rollouts.parquet", *(s.getvalue().to_pybytes() for s in buf))
    )
    assert found == [("table rollouts, row 1 (rollout_id=r2, round=1), column success", False, True)]


def test_csv_differences_name_the_line_and_column():
    a = "round,kind,step,loss\n1,critic,1,0.5\n1,critic,2,0.4\n"
    b = "round,kind,step,loss\n1,critic,1,0.5\n1,critic,2,0.3\n"
    assert list(csv_differences(a, b)) == [
        ("line 3 (round=1, kind=critic, step=2), column loss", "0.4", "0.3")
    ]


def test_compare_orders_metrics_first_and_reports_in_a_few_lines(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, ood, rows in ((a, 0.25, "x\n1\n"), (b, 0.5, "x\n2\n")):
        (d / "memory" / "round-0001" / "tables").mkdir(parents=True)
        (d / "memory" / "round-0001" / "notes.txt").write_text(rows)
        (d / "metrics.json").write_text(json.dumps({"ood_success": ood, "wall_s": ood}))
        (d / "rounds.json").write_text(json.dumps([{"round": 1, "wall_s": ood}]))  # timings only: equal
        (d / "train_log.csv").write_text(rows)
    total, different, files = compare([("rec", a, b)])
    assert total == 4
    assert different == ["rec/metrics.json", "rec/train_log.csv", "rec/memory/round-0001/notes.txt"]
    lines = report(total, different, files)
    assert lines[:5] == [
        "different: 3 of 4 files differ (timings and git provenance aside)",
        "first difference: rec/metrics.json",
        "  at:        ood_success",
        "  committed: 0.25",
        "  re-run:    0.5",
    ]
    assert len(lines) <= 8
    (b / "extra.json").write_text("{}")
    assert compare([("rec", a, b)])[1][2] == "rec/extra.json"  # only in the re-run, before the memory
    assert report(*compare([("rec", a, a)])) == [
        "identical: all 4 files equal the committed ones (timings and git provenance aside)"
    ]
