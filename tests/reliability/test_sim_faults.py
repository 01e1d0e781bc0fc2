"""Simulator faults inside a real `coda run`: a worker that segfaults or hangs on an episode is killed (after
`sim.episode_timeout_s` when it hangs) and replaced, the episode is retried once and then recorded as failed
with its reason; the run completes and reports it."""

import json

from rel_helpers import EPISODE_TIMEOUT_S

from coda.memory.store import load_snapshot


def test_the_run_completes_despite_crashing_and_hanging_workers(faulty_run):
    r = faulty_run.result
    assert r.returncode == 0, r.stderr[-3000:]
    assert (faulty_run.out / "rounds" / "round-0001" / "state.json").exists()
    load_snapshot(faulty_run.out / "memory" / "round-0001")
    final = json.loads((faulty_run.out / "metrics.json").read_text())
    assert final["round"] == 1 and final["method"] == "coda"


def test_failed_episodes_are_retried_once_then_reported_with_their_reason(faulty_run):
    (m,) = json.loads((faulty_run.out / "rounds.json").read_text())
    assert m["failure_reasons"] == {
        "evaluation: crash: worker died (exit code -11)": 1,
        f"evaluation: timeout after {EPISODE_TIMEOUT_S}s": 1,
    }
    assert m["failed_jobs"] == 2
    # the crashing episode ran twice (first attempt + one retry, each on a fresh worker), and each time the
    # dying worker's stack went to stderr
    assert faulty_run.result.stderr.count("Fatal Python error: Segmentation fault") == 2
    # the failed episodes count as failures in the evaluation; none is left out
    assert (m["n_id"], m["n_ood"]) == (2, 8)
    assert len(m["eval_outcomes"]) == 10
