"""Interruption: `coda run` killed (SIGKILL) or interrupted (SIGINT, Ctrl-C) at some point of a round resumes
from the last complete round when re-run, and ends exactly where an uninterrupted run ends; a process killed in
the middle of writing a memory snapshot never leaves anything that is read as a complete snapshot."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rel_helpers import ROOT, without_timing

from coda.coevolve import last_complete_round
from coda.memory.store import MemoryFormatError, inspect, latest_snapshot, load_snapshot, save_snapshot

TESTS = ROOT / "tests"


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """A child in its own process group (with its simulator workers), like a command started in a terminal.

    SIGINT is reset to its default first: a test session started in the background (`cmd &` in a script)
    inherits SIGINT ignored, and Python then never raises KeyboardInterrupt in the child."""
    with open(log, "w") as err:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the process ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


def _manifests(run: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted((run / "memory").glob("round-*/manifest.json"))}


def test_killed_then_interrupted_run_resumes_to_the_uninterrupted_result(coda, reference_run, tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    args = ["-m", "coda", *coda.run_args(out)]
    # SIGKILL (no chance to clean up) while round 1 rolls out: nothing is complete yet
    proc = _start(args, log)
    _wait_for(out / "actor" / "round-0001-rollouts", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    assert last_complete_round(out) == 0 and latest_snapshot(out) is None
    # re-run; Ctrl-C (SIGINT to the process group) once round 2 rolls out (well before the round ends, so
    # that a loaded machine cannot let the run finish before the signal lands)
    proc = _start(args, log)
    _wait_for(out / "actor" / "round-0002-rollouts", proc)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(120) == 130
    stderr = log.read_text()
    # our one line, no KeyboardInterrupt traceback (multiprocessing's resource tracker may add its own
    # leaked-semaphore warning after it, which is not ours to silence)
    assert "KeyboardInterrupt" not in stderr
    assert any(line.startswith("interrupted; re-running") for line in stderr.splitlines())
    assert last_complete_round(out) == 1 and not (out / "rounds" / "round-0002").exists()
    # pruning an interrupted run keeps its last complete round and the interrupted one's partial files
    pruned = json.loads(coda("prune", out, "--json").stdout)
    assert pruned["kept_rounds"] == [1] and pruned["removed"] == []
    # re-run to the end: the same snapshots, checkpoints' metrics and final metrics as without interruption
    coda.run(out)
    assert _manifests(out) == _manifests(reference_run) and len(_manifests(out)) == 2
    ref_rounds = json.loads((reference_run / "rounds.json").read_text())
    rounds = json.loads((out / "rounds.json").read_text())
    assert [without_timing(m) for m in rounds] == [without_timing(m) for m in ref_rounds]
    final = json.loads((out / "metrics.json").read_text())
    assert without_timing(final) == without_timing(json.loads((reference_run / "metrics.json").read_text()))


# A child process that saves round 1, then starts round 2 (or re-saves round 2) and stops at `stage`, so that it
# can be killed exactly there.
SAVER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_hub import make_memory
from coda.memory import store

run, stage, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
store.save_snapshot(make_memory(1), store.snapshot_path(run, 1), round=1)
if stage == "replace":
    store.save_snapshot(make_memory(2), store.snapshot_path(run, 2), round=2)

def stop_here():
    ready.write_text("ready")
    time.sleep(600)

writes, real_write, real_replace = [], store._write_bytes, os.replace
def write(path, data):
    real_write(path, data)
    writes.append(path)
    if (stage == "files" and len(writes) == 3) or (stage == "manifest" and path.name == "manifest.json"):
        stop_here()
def replace(src, dst):
    real_replace(src, dst)
    if stage == "replace":  # the old snapshot has moved aside, the new one not yet into place
        stop_here()
store._write_bytes, store.os.replace = write, replace
store.save_snapshot(make_memory(3), store.snapshot_path(run, 2), round=2, overwrite=True)
"""


@pytest.mark.parametrize("stage", ["files", "manifest", "replace"])
def test_a_kill_mid_snapshot_never_leaves_a_partial_snapshot_read_as_complete(stage, tmp_path):
    run, ready = tmp_path / "run", tmp_path / "ready"
    proc = _start(["-c", SAVER.format(tests=str(TESTS)), str(run), stage, str(ready)], tmp_path / "log")
    _wait_for(ready, proc, timeout=120)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    leftovers = sorted(p.name for p in (run / "memory").iterdir() if p.name.startswith("."))
    assert leftovers, "the kill should have left the temporary directory of the interrupted save"
    # whatever was left, readers see round 1 as the latest complete snapshot, and it verifies
    assert not (run / "memory" / "round-0002").exists()
    assert latest_snapshot(run).name == "round-0001" and inspect(run)["round"] == 1
    load_snapshot(latest_snapshot(run))
    if stage == "files":
        with pytest.raises(MemoryFormatError, match=r"manifest\.json: missing"):
            load_snapshot(run / "memory" / leftovers[0])
    # the next save removes what the dead process left
    from test_hub import make_memory

    save_snapshot(make_memory(2), run / "memory" / "round-0002", round=2)
    assert sorted(p.name for p in (run / "memory").iterdir()) == ["round-0001", "round-0002"]
    assert json.loads((run / "memory" / "round-0002" / "manifest.json").read_text())["round"] == 2
