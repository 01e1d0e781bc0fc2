"""Disk and memory: `coda prune` keeps the latest complete rounds, reports the bytes it frees, never touches a
run without a complete round, and a pruned run still resumes; the resource benchmark measures peak memory."""

import json
import shutil
import subprocess
import sys

import pytest
from rel_helpers import ROOT, without_timing

from coda.maintenance import compare_runs, prune, run_usage
from coda.memory.store import load_snapshot


def test_prune_keeps_the_latest_round_frees_bytes_and_the_run_resumes(coda, reference_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference_run, run, symlinks=True)
    before = run_usage(run)
    assert before["total_bytes"] == sum(before["by_kind"].values())
    assert before["by_kind"]["checkpoints"] > 0 and before["by_kind"]["memory"] > 0
    dry = json.loads(coda("prune", run, "--dry-run", "--json").stdout)
    assert dry["removed"] == ["rounds/round-0001", "memory/round-0001"] and run_usage(run) == before
    report = json.loads(coda("prune", run, "--json").stdout)  # default: keep the latest complete round
    after = run_usage(run)
    assert (report["complete_rounds"], report["kept_rounds"], report["pruned_rounds"]) == ([1, 2], [2], [1])
    assert report["freed_bytes"] == dry["freed_bytes"] == before["total_bytes"] - after["total_bytes"]
    assert (
        report["freed_bytes"] == before["per_round"][1]["checkpoint"] + before["per_round"][1]["memory"] > 0
    )
    assert not (run / "rounds" / "round-0001").exists() and not (run / "memory" / "round-0001").exists()
    load_snapshot(run / "memory" / "round-0002")
    again = json.loads(coda("prune", run, "--json").stdout)
    assert again["removed"] == [] and again["freed_bytes"] == 0
    # the pruned run still resumes: it loads round 2 (checkpoint and snapshot) and ends with the same metrics
    coda.run(run)
    final = json.loads((run / "metrics.json").read_text())
    assert without_timing(final) == without_timing(json.loads((reference_run / "metrics.json").read_text()))
    text = coda("prune", run, "--keep", "1", "--dry-run").stdout
    assert "nothing to prune (keeping rounds [2])" in text


def _fake_run(root, complete, extra=()):
    for r in complete:
        (root / "rounds" / f"round-{r:04d}").mkdir(parents=True)
        (root / "rounds" / f"round-{r:04d}" / "state.json").write_text("{}")
        (root / "memory" / f"round-{r:04d}").mkdir(parents=True)
        (root / "memory" / f"round-{r:04d}" / "manifest.json").write_text("x" * 100)
    for rel in extra:
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "f").write_text("y" * 10)
    (root / "rounds.json").write_text("[]")
    return root


def test_prune_rules(tmp_path):
    # a run with no complete round (interrupted in round 1) is never touched
    run = _fake_run(tmp_path / "a", [], ["memory/round-0001", "rounds/round-0001.tmp"])
    assert prune(run)["removed"] == [] and (run / "memory" / "round-0001").exists()
    # keep 2 of 3 complete rounds: round 1 goes, with what interrupted saves of round 1 left behind; an
    # incomplete round 4 (a resume will redo it) and the metrics stay
    stale = ["memory/.round-0001.tmp-999999-abcd", "rounds/round-0001.tmp", "memory/round-0004"]
    run = _fake_run(tmp_path / "b", [1, 2, 3], stale)
    report = prune(run, keep=2)
    assert report["pruned_rounds"] == [1] and report["kept_rounds"] == [2, 3]
    assert sorted(report["removed"]) == sorted(
        [
            "rounds/round-0001",
            "rounds/round-0001.tmp",
            "memory/round-0001",
            "memory/.round-0001.tmp-999999-abcd",
        ]
    )
    assert report["freed_bytes"] == 2 + 100 + 10 + 10
    assert sorted(p.name for p in (run / "memory").iterdir()) == ["round-0002", "round-0003", "round-0004"]
    assert (run / "rounds.json").exists()
    # keep more than there are: nothing to do; keep < 1 is refused
    assert prune(run, keep=5)["removed"] == []
    with pytest.raises(ValueError, match="--keep: expected an integer >= 1"):
        prune(run, keep=0)


def test_prune_keep_zero_is_a_one_line_error(coda, tmp_path):
    run = _fake_run(tmp_path / "run", [1, 2])
    r = coda("prune", run, "--keep", "0", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: --keep: expected an integer >= 1 (the latest complete round is always kept), got 0"
    ]
    assert (run / "rounds" / "round-0001").exists()


def test_resource_benchmark_measures_peak_memory():
    """`benchmarks/run_resources.py` reports the peak RSS of a command that holds 300 MB."""
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from run_resources import measure; "
        "cmd = [sys.executable, '-c', 'import time; b = bytearray(300 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(1)']; "
        "print(json.dumps(measure(cmd)))"
    )  # fmt: skip
    out = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    )
    assert out["exit_code"] == 0
    assert 300 <= out["peak_rss_largest_process_mb"] < 1000
    assert 250 <= out["peak_rss_process_tree_mb"] < 1000


def test_compare_runs_ignores_timings_only(tmp_path):
    a = tmp_path / "a"
    (a / "rounds" / "round-0001").mkdir(parents=True)
    (a / "rounds" / "round-0001" / "replay.npz").write_bytes(b"\x00\x01")
    (a / "rounds.json").write_text(
        json.dumps([{"round": 1, "ood_success": 0.5, "wall_s": 3.0, "time_s": {"x": 1}}])
    )
    (a / "run.json").write_text(json.dumps({"seed": 0, "git_sha": "abc", "git_dirty": False}))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "rounds.json").write_text(
        json.dumps([{"round": 1, "ood_success": 0.5, "wall_s": 9.0, "time_s": {"x": 2}}])
    )
    (b / "run.json").write_text(json.dumps({"seed": 0, "git_sha": "def", "git_dirty": True}))
    assert compare_runs(a, b) == {"files": 3, "identical": 3, "different": []}
    (b / "rounds.json").write_text(json.dumps([{"round": 1, "ood_success": 0.6, "wall_s": 9.0}]))
    (b / "rounds" / "round-0001" / "replay.npz").write_bytes(b"\x00\x02")
    (b / "metrics.json").write_text("{}")
    assert compare_runs(a, b)["different"] == ["metrics.json", "rounds.json", "rounds/round-0001/replay.npz"]
    out = subprocess.run(
        [sys.executable, "-m", "coda", "compare", "--bytes", str(a), str(b)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1 and json.loads(out.stdout)["identical"] == 1  # run.json


def test_record_keeps_the_results_without_checkpoints_and_reads_like_the_run(coda, reference_run, tmp_path):
    from coda.maintenance import record
    from coda.memory.store import resolve_snapshot
    from coda.report.runs import load_run

    rec = tmp_path / "records" / "coda-0"
    report = json.loads(coda("record", reference_run, rec).stdout)
    stored = ["keyframes"] if (rec / "keyframes").is_dir() else []  # a few failures' keyframes, when made
    assert sorted(p.name for p in rec.iterdir()) == sorted([*report["files"], "memory", *stored])
    assert {"run.json", "rounds.json", "metrics.json", "train_log.csv"} <= set(report["files"])
    assert report["snapshots"] == ["round-0001", "round-0002"]
    assert not (rec / "rounds").exists() and not (rec / "actor").exists()
    usage = run_usage(reference_run)
    assert report["bytes"] < usage["total_bytes"] - usage["by_kind"]["checkpoints"]
    # the report reads the record as it reads the run; the memory (for reuse) is the same snapshot, verified
    a, b = load_run(reference_run), load_run(rec)
    assert (a.run, a.rounds, a.metrics) == (b.run, b.rounds, b.metrics)
    assert compare_runs(resolve_snapshot(reference_run), resolve_snapshot(rec))["different"] == []
    load_snapshot(resolve_snapshot(rec))
    # replaced as a whole on a re-record; an unfinished run is refused by name and leaves the record alone
    (rec / "stale").write_text("x")
    (reference_run / "demos.npz").write_bytes(b"not a record")  # a top-level file that is not JSON or CSV
    try:
        record(reference_run, rec)
    finally:
        (reference_run / "demos.npz").unlink()
    assert not (rec / "stale").exists() and not (rec / "demos.npz").exists()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    res = coda("record", unfinished, rec, check=False)
    assert res.returncode == 2 and "not a finished run (no metrics.json)" in res.stderr
    assert (rec / "metrics.json").is_file()
