"""The numerics pin: every process that simulates, trains, samples or scores computes the same bits on any
x86-64 machine with AVX2 and FMA (x86-64-v3: every Intel CPU since Haswell, 2013, every AMD CPU since
Excavator, 2015).

Vendor libraries pick their kernels by CPU at run time, and kernels of different vector widths sum in
different orders, use fused multiply-adds or other approximations of `exp`, `sin`, ..., so the last bits of a
result depend on the machine, and a training run that parts by one bit parts for good. The pin fixes each
choice to one that every such CPU makes the same way:

| library | knob | pinned to |
|---|---|---|
| glibc's libm (PyBullet, `math`) | ``GLIBC_TUNABLES`` | plain `sin`, `cos`, `exp`, ... without FMA (read by ld.so at start) |
| ATen (torch's own kernels: elementwise, reductions, `torch.randn`, attention, AdamW) | ``ATEN_CPU_CAPABILITY`` | ``avx2``: the AVX2 kernels, also on AVX-512 CPUs |
| MKL (torch's float32 GEMM) | ``MKL_CBWR`` | ``COMPATIBLE``: the conditional-numerical-reproducibility branch that runs the same SSE2 code on Intel and non-Intel CPUs (MKL documents its AVX2/AVX-512 branches for Intel CPUs only; elsewhere it silently uses its own dispatch); ``MKL_DYNAMIC=FALSE`` |
| oneDNN | ``torch.backends.mkldnn.enabled = False`` (and ``ONEDNN_MAX_CPU_ISA=SSE41``) | not used: its JIT kernels choose their blocking by the CPU's cache sizes, so float32 `linear` goes to MKL |
| OpenMP / torch threads | ``OMP_DYNAMIC=FALSE``, `torch.set_num_threads` | a fixed count per process kind (`pin_torch`) |
| NumPy | ``NPY_DISABLE_CPU_FEATURES`` | every dispatched target off: the X86_V2 baseline kernels |
| OpenBLAS (NumPy's BLAS) | ``OPENBLAS_CORETYPE=Nehalem``, ``OPENBLAS_NUM_THREADS=1`` | SSE kernels, one thread |
| torch | `torch.use_deterministic_algorithms(True)`, float32 matmul precision ``"highest"`` | no nondeterministic or reduced-precision paths |

ATen is the one library pinned above the x86-64-v2 baseline: its non-vectorised ("default") kernels make an
AdamW step of the 1.8 M-parameter policy 6x slower (14 vs 2.3 ms on one thread, docs/MEASUREMENTS.md). On
a CPU without AVX2, torch falls back to those kernels and `pin_torch` warns that results will differ in the
last bits from runs on AVX2 machines. MKL's float32 GEMM in its SSE2 branch is the pin's main cost.

Environment variables take effect only if they are set before the library reads them: glibc's at process
start, NumPy's at its import, ATen's, MKL's and oneDNN's at their first operation. So:

* `pin_process()` runs first in every entry point (``coda`` and the benchmarks): when the process did not
  start under the pin it re-executes itself with it (`os.execve`, before anything heavy is imported);
* worker processes (the local pool, Ray) start with `pinned_env()` in their environment;
* ``import coda`` sets the variables in `os.environ` (`pin_environ`), which is enough for a notebook or a
  script that imports coda before it runs its first torch operation (libm and NumPy keep what they started
  with; `in_force` tells);
* `pin_torch(threads)` sets torch's flags and thread count where a process starts to train or act.

The pin overrides whatever the caller's environment says for these variables. ``CODA_NUMERICS=native`` turns
it off (for measuring what it costs; results then depend on the CPU). `in_force()` reports what is in force
in this process; every run records it in its run.json.
"""

from __future__ import annotations

import os
import sys
import warnings

from coda import gemm

PINNED_LIBM = "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"  # glibc's FMA libm needs both AVX2 and FMA
# NumPy 2.4's dispatch targets on x86-64 (numpy._core._multiarray_umath.__cpu_dispatch__; a test checks it)
NUMPY_DISPATCH = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
PINNED_VARIABLES = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
    "NPY_DISABLE_CPU_FEATURES": NUMPY_DISPATCH,
    "OPENBLAS_CORETYPE": "Nehalem",
    "OPENBLAS_NUM_THREADS": "1",
}
SWITCH = "CODA_NUMERICS"  # "native" turns the pin off
_MARKER = "_CODA_NUMERICS_REEXEC"  # set for the re-executed process only


def enabled() -> bool:
    return os.environ.get(SWITCH, "pinned") != "native"


def pinned_libm_env() -> dict[str, str]:
    """GLIBC_TUNABLES for a new process: this one's tunables plus `PINNED_LIBM` (read by ld.so at start)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if PINNED_LIBM in tunables.split(":"):
        return {"GLIBC_TUNABLES": tunables}
    return {"GLIBC_TUNABLES": f"{tunables}:{PINNED_LIBM}" if tunables else PINNED_LIBM}


def pinned_env() -> dict[str, str]:
    """The environment variables a new process needs to start under the pin (empty when it is switched off),
    with the GEMM backend's switch (`coda.gemm`) when it is set."""
    if not enabled():
        return {}
    backend = {gemm.SWITCH: os.environ[gemm.SWITCH]} if gemm.SWITCH in os.environ else {}
    return {**pinned_libm_env(), **PINNED_VARIABLES, **backend}


def _startup_environ() -> dict[str, str] | None:
    """The environment this process started with (Linux), whatever it changed in `os.environ` since."""
    try:
        raw = open("/proc/self/environ", "rb").read()  # noqa: SIM115 - read at once
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def started_pinned() -> bool:
    """Whether this process started with every pinned variable (libm included) in its environment."""
    start = _startup_environ()
    if start is None:
        return False
    want = pinned_env()
    if PINNED_LIBM not in start.get("GLIBC_TUNABLES", "").split(":"):
        return False
    return all(start.get(k) == v for k, v in want.items() if k != "GLIBC_TUNABLES")


def pin_environ() -> None:
    """Set the pinned variables in `os.environ`: they reach this process's torch (before its first operation)
    and every process it starts."""
    os.environ.update(pinned_env())


def pin_process() -> None:
    """Make this process run under the pin: re-execute it with `pinned_env()` unless it started with it.

    Call it first, before NumPy or torch are imported. A no-op when the pin is switched off, on a platform
    without /proc (the variables are then only set for the processes this one starts), or when a re-execution
    did not bring the pin (a marker prevents a loop)."""
    reexecuted = os.environ.pop(_MARKER, None) == "1"  # not inherited by the processes this one starts
    if not enabled() or started_pinned() or reexecuted or _startup_environ() is None:
        pin_environ()
        return
    env = {**os.environ, **pinned_env(), _MARKER: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _deterministic_algorithms(torch) -> None:
    """`torch.use_deterministic_algorithms(True)` for eager execution, without its import of
    torch._inductor's config (which loads the torch.compile stack, ~2.3 s of CPU in every process that pins
    torch: each run, each simulator worker, each record) only to set a flag that torch.compile reads. This
    code never compiles; where inductor is already loaded, the public call sets both."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=False)


def pin_torch(threads: int) -> None:
    """torch's part of the pin, and a fixed thread count, for a process that trains, samples or scores."""
    import torch

    torch.set_num_threads(threads)
    if not enabled():
        return
    _deterministic_algorithms(torch)
    torch.set_float32_matmul_precision("highest")
    torch.backends.mkldnn.enabled = False
    if gemm.requested() == "openblas":
        gemm.enable()
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != PINNED_VARIABLES["ATEN_CPU_CAPABILITY"].upper():
        warnings.warn(
            f"torch runs its {capability} kernels, not the pinned AVX2 ones (this CPU lacks AVX2, or torch "
            "computed before the pin was set): results can differ in the last bits from other machines",
            RuntimeWarning,
            stacklevel=2,
        )


def in_force() -> dict[str, object]:
    """What of the pin is in force in this process: the switch, whether the process started under the pin
    (libm and NumPy need that), each variable as the process started with it, and torch's flags if loaded."""
    start = _startup_environ() or {}
    report: dict[str, object] = {
        "pin": "pinned" if enabled() else "native",
        "started_pinned": started_pinned(),
        "libm": PINNED_LIBM in start.get("GLIBC_TUNABLES", "").split(":"),
        "variables": {k: start.get(k, os.environ.get(k)) for k in PINNED_VARIABLES},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        report["torch"] = {
            "version": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "mkldnn": bool(torch.backends.mkldnn.enabled),
        }
    if gemm.SWITCH in os.environ or gemm.enabled():  # absent under the default backend, as in older records
        report["gemm"] = {
            "backend": "openblas" if gemm.enabled() else "mkl",
            "openblas_core": gemm.corename(),
        }
    return report
