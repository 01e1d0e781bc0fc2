"""benchmarks/pending_stages.py: on a machine without the DVC cache, a finished stage (its results in git) is done,
a stage that has not run or whose code changed is pending, and so is a finished stage whose lost output a pending
stage needs."""

from tests.conftest import ROOT, load_benchmark


def test_pending_stages_on_a_machine_without_the_cache():
    mod = load_benchmark("pending_stages")
    order = ["scenes", "sft", "table1@coda-0", "table1@uniform-0", "long@coda", "budget@coda-4", "summary"]
    status = {
        "scenes": [{"changed outs": {"scenes": "deleted"}}],
        "table1@coda-0": [  # finished elsewhere: only its checkpoints and the scenes it read are missing here
            {"changed deps": {"scenes": "deleted"}},
            {"changed outs": {"runs/table1/coda-0": "deleted"}},
        ],
        "table1@uniform-0": [  # never finished: its record is not in git either
            {"changed deps": {"scenes": "deleted"}},
            {"changed outs": {"runs/table1/uniform-0": "deleted", "records/table1/uniform-0": "deleted"}},
        ],
        "long@coda": [  # continues coda-0's checkpoints, which this machine lacks
            {"changed deps": {"runs/table1/coda-0": "deleted"}},
            {"changed outs": {"runs/long/coda": "deleted", "records/long/coda": "deleted"}},
        ],
        "budget@coda-4": [{"changed deps": {"coda/coevolve": "modified"}}, "changed command"],
        "summary": [{"changed deps": {"records/table1": "modified"}}],
    }
    ignored = {"scenes", "runs/table1/coda-0", "runs/table1/uniform-0", "runs/long/coda"}
    assert mod.pending(status, order, ignored) == [
        "scenes",  # needed again by the pending runs
        "table1@coda-0",
        "table1@uniform-0",
        "long@coda",
        "budget@coda-4",
        "summary",
    ]
    # nothing lost is needed: finished stages stay done, and an up-to-date pipeline has nothing pending
    del status["long@coda"]
    assert mod.pending(status, order, ignored) == ["scenes", "table1@uniform-0", "budget@coda-4", "summary"]
    del status["table1@uniform-0"]
    assert mod.pending(status, order, ignored) == ["budget@coda-4", "summary"]  # they need no lost output
    assert mod.pending({}, order, ignored) == []


def test_git_ignores_the_cached_outputs_and_keeps_the_records(monkeypatch):
    mod = load_benchmark("pending_stages")
    monkeypatch.chdir(ROOT)
    paths = ["runs/table1/coda-0", "scenes", "records/table1/coda-0", "runs/sft/policy", "metrics/sft.json"]
    assert mod._ignored(paths) == {"runs/table1/coda-0", "scenes"}


def test_an_empty_cache_reports_not_in_cache_and_the_stage_is_still_done():
    # a fresh clone's empty cache: dvc says "not in cache", not "deleted", for an output it cannot find anywhere
    mod = load_benchmark("pending_stages")
    order = ["table1@coda-0", "long@coda", "budget@coda-4"]
    status = {
        "table1@coda-0": [{"changed outs": {"runs/table1/coda-0": "not in cache"}}],
        "budget@coda-4": [{"changed outs": {"runs/budget/coda-4": "not in cache"}}],
    }
    ignored = {"runs/table1/coda-0", "runs/budget/coda-4"}
    assert mod.pending(status, order, ignored) == []
    # never finished (its record is missing too), and it continues coda-0's checkpoints: both run
    status["long@coda"] = [
        {"changed deps": {"runs/table1/coda-0": "not in cache"}},
        {"changed outs": {"runs/long/coda": "not in cache", "records/long/coda": "deleted"}},
    ]
    assert mod.pending(status, order, ignored | {"runs/long/coda"}) == ["table1@coda-0", "long@coda"]
