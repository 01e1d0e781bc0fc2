"""The numerics pin (`coda.numerics`): a process computes the same bits whatever its environment tells the
vector libraries, its workers start under the pin, and ``coda`` re-executes itself under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coda import numerics
from coda.sim.executor import make_executor

try:  # tests/ may or may not be a package
    from tests import _executor_jobs as J
except ImportError:  # pragma: no cover - depends on how pytest put tests/ on sys.path
    import _executor_jobs as J

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "_numerics_probe.py"
# what the libraries would choose on an older CPU (no AVX2: SSE4.1 at most, NumPy's and OpenBLAS's baselines)
OLDER_CPU = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3",
    "OPENBLAS_CORETYPE": "Nehalem",
}
ON_LINUX = Path("/proc/self/environ").exists()


def bare_environ(**extra: str) -> dict[str, str]:
    """This process's environment without any of the pin's variables (a fresh shell), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_VARIABLES}
    env.pop("GLIBC_TUNABLES", None)
    env.pop(numerics.SWITCH, None)
    return {**env, **extra}


def probe(mode: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, str(PROBE), mode], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_has_avx2() -> bool:
    import torch

    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def test_numpy_dispatch_targets_are_the_pinned_list():
    """The pin turns off every target NumPy dispatches to (else it would not be NumPy's baseline)."""
    from numpy._core import _multiarray_umath as umath

    assert numerics.NUMPY_DISPATCH.split() == list(umath.__cpu_dispatch__)


@pytest.mark.skipif(not ON_LINUX, reason="re-execution reads /proc/self/environ")
def test_pinned_bits_do_not_depend_on_what_the_environment_says():
    """Under the pin, the environment of an older CPU gives the same bits as the default one; without it, it
    does not (so the probe does exercise the knobs)."""
    pinned = probe("pin", bare_environ())
    pinned_older = probe("pin", bare_environ(**OLDER_CPU))
    assert pinned["numerics"]["started_pinned"] and pinned_older["numerics"]["started_pinned"]
    assert pinned["numerics"]["libm"]
    assert pinned["numerics"]["variables"] == numerics.PINNED_VARIABLES
    assert pinned_older["numerics"]["variables"] == numerics.PINNED_VARIABLES
    torch_state = pinned["numerics"]["torch"]
    assert torch_state["deterministic"] and not torch_state["mkldnn"]
    assert torch_state["threads"] == 2 and torch_state["matmul_precision"] == "highest"
    assert pinned["digest"] == pinned_older["digest"]
    if cpu_has_avx2():
        assert torch_state["cpu_capability"] == "AVX2"
        plain = probe("plain", bare_environ())
        plain_older = probe("plain", bare_environ(**OLDER_CPU))
        assert plain["numerics"]["pin"] == "native" and not plain["numerics"]["started_pinned"]
        assert plain["digest"] != plain_older["digest"]


@pytest.mark.skipif(not ON_LINUX, reason="re-execution reads /proc/self/environ")
def test_the_coda_command_runs_under_the_pin():
    coda = [sys.executable, "-m", "coda", "numerics"]  # what the `coda` script runs
    report = json.loads(
        subprocess.run(coda, env=bare_environ(**OLDER_CPU), capture_output=True, text=True).stdout
    )
    assert report["started_pinned"] and report["libm"] and report["variables"] == numerics.PINNED_VARIABLES
    assert report["torch"]["deterministic"] and report["torch"]["threads"] == 2
    native = subprocess.run(coda, env=bare_environ(CODA_NUMERICS="native"), capture_output=True, text=True)
    assert json.loads(native.stdout)["pin"] == "native"


def test_pinning_torch_makes_it_deterministic_without_loading_the_compiler_stack():
    """`pin_torch` switches torch's deterministic algorithms on without `torch.use_deterministic_algorithms`'
    import of torch._inductor's config, which loads torch._dynamo (~2.3 s of CPU per worker and record)."""
    code = (
        "import sys, torch; from coda import numerics; numerics.pin_torch(1); "
        "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(), "
        "'torch._dynamo' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=bare_environ(), capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "False", "False"]


def test_pin_process_does_not_loop_and_children_do_not_inherit_the_marker():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from coda import numerics; numerics.pin_process(); "
            "print(os.environ.get('_CODA_NUMERICS_REEXEC'), numerics.started_pinned())",
        ],
        env=bare_environ(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["None", "True" if ON_LINUX else "False"]


def test_workers_start_under_the_pin():
    """Local workers get the pin's variables at start (libm included), whatever this process was given."""
    with make_executor("local", 1, env={"CODA_TEST": "1"}) as ex:
        (res,) = ex.map(J.numerics_probe, [0])
    report = res.value
    assert report["libm"] and report["variables"] == numerics.PINNED_VARIABLES
    assert report["torch"]["threads"] == 1 and report["torch"]["deterministic"]


def test_pinned_env_is_empty_when_switched_off(monkeypatch):
    monkeypatch.setenv(numerics.SWITCH, "native")
    assert numerics.pinned_env() == {}
    monkeypatch.setenv(numerics.SWITCH, "pinned")
    assert numerics.pinned_env()["MKL_CBWR"] == "COMPATIBLE"
