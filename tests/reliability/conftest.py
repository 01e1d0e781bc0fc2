"""Shared fixtures of the reliability suite: tiny params, one SFT policy and one uninterrupted reference run
per session, and a helper that runs ``python -m coda`` in a subprocess.

Budgets are the smallest that still exercise a whole round: two families, two rounds, two environments per
family, a handful of updates (about half a minute per run on 2 cores). `small_data` comes from
tests/conftest.py.
"""

from pathlib import Path

import pytest
from rel_helpers import Coda, tiny_params, write_params


@pytest.fixture(scope="session")
def rel_params(tmp_path_factory) -> Path:
    return write_params(tmp_path_factory.mktemp("rel-params") / "params.yaml", tiny_params())


@pytest.fixture(scope="session")
def coda(small_data, rel_params, tmp_path_factory) -> Coda:
    """The CLI runner with a trained SFT policy (one per session)."""
    sft = tmp_path_factory.mktemp("rel-sft")
    runner = Coda(rel_params, small_data)
    runner(
        "sft",
        "--params",
        rel_params,
        "--profile",
        "smoke",
        "--out",
        sft,
        "--data",
        small_data,
        "--workers",
        "2",
    )
    runner.sft = sft
    return runner


@pytest.fixture(scope="session")
def reference_run(coda, tmp_path_factory) -> Path:
    """An uninterrupted 2-round `coda` run with 2 workers: what interrupted, 1-worker and pruned runs must equal."""
    out = tmp_path_factory.mktemp("rel-reference") / "run"
    coda.run(out, workers=2)
    return out
