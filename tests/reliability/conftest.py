"""Shared fixtures of the reliability suite: tiny params, one SFT policy and one uninterrupted reference run
per session, and a helper that runs ``python -m coda`` in a subprocess.

Budgets are the smallest that still exercise a whole round: two families, two rounds, two environments per
family, a handful of updates (about half a minute per run on 2 cores). `small_data` comes from
tests/conftest.py.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
from rel_helpers import EPISODE_TIMEOUT_S, TINY, GarbageLLM


@pytest.fixture(scope="session")
def rel_params(make_params) -> Path:
    return make_params(**TINY)


@pytest.fixture(scope="session")
def coda(make_coda, small_data, rel_params, tmp_path_factory):
    """The CLI runner with a trained SFT policy (one per session)."""
    runner = make_coda(rel_params, small_data)
    runner.train_sft(tmp_path_factory.mktemp("rel-sft"))
    return runner


@pytest.fixture(scope="session")
def reference_run(coda, tmp_path_factory) -> Path:
    """An uninterrupted 2-round `coda` run with 2 workers: what interrupted, 1-worker and pruned runs must equal."""
    out = tmp_path_factory.mktemp("rel-reference") / "run"
    coda.run(out, workers=2)
    return out


@pytest.fixture(scope="session")
def faulty_run(coda, make_params, small_data):
    """One round of `coda run` in a faulty world: the program writer is an LLM endpoint that returns only
    garbage, one evaluation episode segfaults its worker and another hangs it (`CODA_FAULT_INJECT`)."""
    from coda import data
    from coda.sim.families.ranges import SUITES

    llm = GarbageLLM()
    path = make_params(
        **TINY,
        sim={"episode_timeout_s": EPISODE_TIMEOUT_S, "retries": 1},
        rounds=1,
        compiler="openai",
        llm_model="stub-writer",
        llm_endpoint=llm.url,
    )
    hang = data.suite_scenes(small_data, "pick_place", SUITES[0], 1)[0].hash
    crash = data.suite_scenes(small_data, "push", SUITES[-1], 1)[0].hash
    out = path.parent / "run"
    try:
        result = coda.run(
            out,
            params=path,
            check=False,
            env={"CODA_FAULT_INJECT": f"rollout:segfault:{crash[:16]},rollout:hang:{hang[:16]}"},
        )
    finally:
        llm.close()
    return SimpleNamespace(out=out, result=result, llm_requests=llm.requests, crash=crash, hang=hang)
