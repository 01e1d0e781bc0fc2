"""Shared fixtures and helpers of the test suite: a small data set (built once per session), tiny params and
the `coda` command line in a subprocess.

The helpers (`tiny_params`, `run_python`, `run_coda`, `Coda`) reach tests as fixtures (`make_params`,
`python_cli`, `coda_cli`, `make_coda`): tests/reliability has a conftest.py of its own, and whichever conftest
module pytest imported last is the one ``import conftest`` finds, so tests take these as fixtures rather than
importing them.
"""

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("CODA_NO_PROGRESS", "1")
if "CODA_TEXT_CACHE" not in os.environ:  # the session's own instruction-embedding cache, not the user's
    os.environ["CODA_TEXT_CACHE"] = tempfile.mkdtemp(prefix="coda-text-cache-")
    atexit.register(shutil.rmtree, os.environ["CODA_TEXT_CACHE"], ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (benchmarks/ holds scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_params(families=None, sft=None, sim=None, **coevolve) -> dict:
    """params.yaml (as a dict) with the smoke profile shrunk to the small data set: a few SFT demonstrations,
    two co-evolution rounds of two environments per family and a handful of updates. `families` replaces the
    profile's task families; `sft`, `sim` and the keyword arguments override keys of those sections."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    smoke = params["profiles"]["smoke"]
    if families is not None:
        smoke["data"]["families"] = list(families)
    smoke["sft"].update(
        {
            "demos_per_family": 2,
            "demo_repeats": 1,
            "epochs": 20,
            "eval_id_per_family": 1,
            "eval_ood_per_suite": 1,
            **(sft or {}),
        }
    )
    smoke["sim"].update(sim or {})
    smoke["coevolve"].update(
        {
            "rounds": 2,
            "envs_per_family": 2,
            "min_pairs": 1,
            "demos_per_family": 1,
            "critic_steps": 4,
            "policy_updates": 4,
            "batch_size": 16,
            "check_every": 2,
            "scheduling": "adaptive",
            "eval_id_per_family": 1,
            "eval_ood_per_suite": 1,
            **coevolve,
        }
    )
    return params


def run_python(*args, check=False, cwd=ROOT, env=None, timeout=600, **kw) -> subprocess.CompletedProcess:
    """``python ARGS...`` with this interpreter in a subprocess (in `cwd`, `env` added to the environment,
    text output captured); with `check`, asserts that it exited 0 (the end of its stderr as the message)."""
    r = subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        **kw,
    )
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def run_coda(*args, **kw) -> subprocess.CompletedProcess:
    """``python -m coda ARGS...`` in a subprocess; the keyword arguments are `run_python`'s."""
    return run_python("-m", "coda", *args, **kw)


class Coda:
    """`coda ...` in a subprocess (`run_coda`, checked by default) on the smoke profile of `params`, with the
    data of `data` and, for `run`, the SFT policy in `sft` (`train_sft` trains it)."""

    def __init__(self, params: Path, data: Path, sft: Path | None = None):
        self.params, self.data, self.sft = params, data, sft

    def __call__(self, *args, check=True, **kw) -> subprocess.CompletedProcess:
        return run_coda(*args, check=check, **kw)

    def _args(self, command: str, out: Path, workers: int, params: Path | None, *options) -> list[str]:
        head = [command, "--params", params or self.params, "--profile", "smoke", *options]
        return [str(a) for a in (*head, "--out", out, "--data", self.data, "--workers", workers)]

    def sft_args(self, out: Path, workers: int = 2) -> list[str]:
        return self._args("sft", out, workers, None)

    def run_args(
        self, out: Path, workers: int = 2, params: Path | None = None, method: str = "coda"
    ) -> list[str]:
        return self._args("run", out, workers, params, "--method", method, "--seed", 0, "--sft", self.sft)

    def train_sft(self, out: Path, workers: int = 2, **kw) -> subprocess.CompletedProcess:
        """`coda sft` into `out`, which then is the SFT policy of `run`."""
        result = self(*self.sft_args(out, workers), **kw)
        self.sft = out
        return result

    def run(self, out: Path, workers: int = 2, params: Path | None = None, method: str = "coda", **kw):
        return self(*self.run_args(out, workers, params, method), **kw)


@pytest.fixture(scope="session")
def make_params(tmp_path_factory):
    """``make_params(**overrides)``: `tiny_params` with those overrides, written to a new params.yaml; returns
    its path."""

    def make(**overrides) -> Path:
        path = tmp_path_factory.mktemp("params") / "params.yaml"
        path.write_text(yaml.safe_dump(tiny_params(**overrides)))
        return path

    return make


@pytest.fixture(scope="session")
def coda_cli():
    """`run_coda`: ``coda_cli("planner-check", "--json", check=True)`` runs ``python -m coda ...``."""
    return run_coda


@pytest.fixture(scope="session")
def make_coda():
    """`Coda`: ``make_coda(params, data)`` is a `coda` runner on those params and data."""
    return Coda


@pytest.fixture(scope="session")
def python_cli():
    """`run_python`: ``python_cli("-c", code, check=True)`` runs ``python ...``."""
    return run_python


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """A small but complete data/ (assets, 12 seed layouts, 2 scenes per held-out suite), built once."""
    from coda import data

    out = tmp_path_factory.mktemp("data") / "data"
    data.build(out, seed=0, n_seed_layouts=12, suite_size=2, workers=2)
    return out


@pytest.fixture(scope="session")
def catalog(small_data):
    from coda.sim.assets import load_catalog

    return load_catalog(small_data)


@pytest.fixture(scope="session")
def world(small_data):
    from coda.sim.world import World

    w = World(small_data)
    yield w
    w.close()


# -- running on two workers (`make test`: pytest-xdist) -----------------------------------------------------
# Each module is one unit of work, so that a module-scoped fixture (a smoke run, a fresh clone) is built once;
# the modules that run DVC or `coda verify`/`coda status` in the project's own folder are one unit together,
# since DVC locks the repository; and the longest modules come first (with --no-loadscope-reorder), so that the
# smoke pipeline starts at once and the rest of the suite runs beside it. xdist's own `--dist loadgroup` does
# not regroup items under pytest 9 (their node ids keep no group suffix), hence the scheduler hook.
LONGEST_FIRST = (
    "test_pipeline.py",
    "test_libero_run.py",
    "test_fresh_smoke_report.py",
    "test_verify.py",
    "reliability/test_bad_programs.py",
    "test_memory_report.py",
)
DVC_IN_THE_PROJECT = {
    "test_verify.py",
    "test_pipeline_status.py",
    "test_plots_offline.py",
    "test_pending_stages.py",
}


def _module(nodeid: str) -> str:
    """The test file of a node id, relative to tests/ (``tests/reliability/test_x.py::t[1]`` ->
    ``reliability/test_x.py``)."""
    return nodeid.split("::", 1)[0].removeprefix("tests/")


def unit_of_work(nodeid: str) -> str:
    module = _module(nodeid)
    return "dvc-project" if module in DVC_IN_THE_PROJECT else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return ByModule(config, log)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))  # stable: file order otherwise
