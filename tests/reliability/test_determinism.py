"""Determinism: the same params and seed give identical scenes, memory snapshots, checkpoints and metrics
with one simulator worker or two (every job derives its randomness from the job alone)."""

import hashlib
import json

import pytest
from rel_helpers import without_timing

from coda.maintenance import compare_runs
from coda.memory.store import load_snapshot


@pytest.fixture(scope="module")
def one_worker_run(coda, tmp_path_factory):
    out = tmp_path_factory.mktemp("rel-one-worker") / "run"
    coda.run(out, workers=1)
    return out


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_one_and_two_workers_give_identical_runs(reference_run, one_worker_run):
    a, b = one_worker_run, reference_run
    for r in (1, 2):
        snap = f"memory/round-{r:04d}"
        # the manifest holds the sha256 of every table and program of the snapshot
        assert (a / snap / "manifest.json").read_bytes() == (b / snap / "manifest.json").read_bytes()
        scenes_a = [s["scene_hash"] for s in load_snapshot(a / snap).rows("scenes")]
        scenes_b = [s["scene_hash"] for s in load_snapshot(b / snap).rows("scenes")]
        assert scenes_a == scenes_b and len(scenes_a) > 0
    # the trained weights and the replay buffer of the last checkpoint
    ckpt = "rounds/round-0002"
    files = sorted(
        p.relative_to(b / ckpt) for p in (b / ckpt).rglob("*") if p.is_file() and p.name != "state.json"
    )
    assert any(f.suffix == ".safetensors" for f in files)
    assert {str(f): _digest(a / ckpt / f) for f in files} == {str(f): _digest(b / ckpt / f) for f in files}
    rounds_a = json.loads((a / "rounds.json").read_text())
    rounds_b = json.loads((b / "rounds.json").read_text())
    assert [without_timing(m) for m in rounds_a] == [without_timing(m) for m in rounds_b]
    assert all(m["eval_outcomes"] for m in rounds_a)  # per-episode evaluation outcomes, compared above
    final_a = json.loads((a / "metrics.json").read_text())
    final_b = json.loads((b / "metrics.json").read_text())
    assert without_timing(final_a) == without_timing(final_b)
    # and every other file of the two run directories (`coda compare`: timings and git provenance aside)
    report = compare_runs(a, b)
    assert report["different"] == [] and report["identical"] == report["files"] > 20
