"""benchmarks/pipeline_times.py: a stage's cost is its last run, never a later up-to-date skip."""

from __future__ import annotations

import json

from tests.conftest import load_benchmark


def test_a_skipped_stage_keeps_its_last_run_and_a_never_run_one_reads_its_metrics(tmp_path):
    pt = load_benchmark("pipeline_times")
    log = tmp_path / "times.tsv"
    log.write_text(
        "scenes\t40\t0\t2026-12-01T10:00:00Z\n"  # an older row: no ran/cached column, counts
        "table1@coda-0\t500\t0\t2026-12-01T10:10:00Z\tran\n"
        "table1@coda-0\t1\t0\t2026-12-01T11:00:00Z\tcached\n"
        "table1@uniform-0\t9\t1\t2026-12-01T11:01:00Z\tran\n"  # failed: not a cost
        "sft\t1\t0\t2026-12-01T11:02:00Z\tcached\n"
    )
    ran, skipped = pt.from_log(log)
    assert ran == {"scenes": 40.0, "table1@coda-0": 500.0}
    assert skipped == {"sft"}
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "sft.json").write_text(
        json.dumps({"collect_s": 100.5, "train_s": 900, "n_ood": 800, "id_se": 0.03})
    )
    assert pt.from_metrics("sft", metrics) == 1000.5
    assert pt.from_metrics("absent", metrics) is None
