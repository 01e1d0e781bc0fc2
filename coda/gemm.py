"""torch's float32 matrix products on OpenBLAS's Haswell kernels: the same bits on every x86-64-v3 CPU, Intel
or AMD, at AVX2 speed (an opt-in part of the numerics pin, `coda.numerics`; ``CODA_GEMM=openblas``).

Under the default pin torch's float32 GEMM runs in MKL's ``COMPATIBLE`` branch, SSE2 code, because MKL
documents its AVX2 and AVX-512 branches as reproducible on Intel CPUs only. OpenBLAS chooses its kernels by a
core type that can be forced (``OPENBLAS_CORETYPE``) rather than by vendor, and its Haswell kernels (AVX2 and
FMA) have fixed blocking, so forcing that core type gives one code path on every CPU with AVX2 and FMA, the
machines the pin already asks for (ATen runs its AVX2 kernels).

The OpenBLAS used is SciPy's bundled copy (``scipy.libs/libscipy_openblas-*.so``, 32-bit integers, symbols
prefixed ``scipy_``), loaded here through ctypes with the Haswell core type and one thread; NumPy's own
OpenBLAS (a separate library) keeps the pin's ``Nehalem`` core type, so NumPy's results in the simulator and
the data engine are those of the default pin. OpenBLAS reads its core type when it is loaded, so this module
loads it before anything else can (``import coda`` calls `load` when the switch is on) and checks the core
type it got.

`enable` replaces the CPU kernels of ``aten::mm`` and ``aten::addmm`` (what ``nn.Linear``, ``matmul`` on 2-D
operands and their backward passes call) for float32 operands with a call of ``cblas_sgemm``; other dtypes, and
the GEMMs inside ATen's own kernels (the attention kernel's, ``bmm``), stay on MKL under the pin.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import warnings
from pathlib import Path

from coda.environ import scoped_environ

SWITCH = "CODA_GEMM"  # "openblas" turns this backend on; default "mkl"
CORETYPE = "Haswell"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

_blas: ctypes.CDLL | None = None
_library = None  # the torch.library.Library that holds the replaced kernels while enabled


def requested() -> str:
    """The GEMM backend this process is asked for: "mkl" (default) or "openblas"."""
    value = os.environ.get(SWITCH, "mkl")
    if value not in ("mkl", "openblas"):
        raise ValueError(f"{SWITCH} must be 'mkl' or 'openblas', got {value!r}")
    return value


def library_path() -> Path:
    """SciPy's bundled OpenBLAS (found without importing SciPy, which could load it with another core type)."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{SWITCH}=openblas needs SciPy's bundled OpenBLAS; SciPy is not installed")
    libs = Path(next(iter(spec.submodule_search_locations))).parent / "scipy.libs"
    found = sorted(libs.glob("libscipy_openblas-*.so"))
    if not found:
        raise RuntimeError(f"{SWITCH}=openblas: no libscipy_openblas-*.so in {libs}")
    return found[0]


def load() -> ctypes.CDLL:
    """Load SciPy's OpenBLAS with the Haswell core type and one thread (once per process)."""
    global _blas
    if _blas is not None:
        return _blas
    with scoped_environ({"OPENBLAS_CORETYPE": CORETYPE, "OPENBLAS_NUM_THREADS": "1"}):
        blas = ctypes.CDLL(str(library_path()))
    blas.scipy_openblas_get_corename.restype = ctypes.c_char_p
    core = blas.scipy_openblas_get_corename().decode()
    if core.lower() != CORETYPE.lower():
        raise RuntimeError(
            f"{SWITCH}=openblas: SciPy's OpenBLAS runs its {core!r} kernels, not {CORETYPE!r}: it was loaded "
            "before coda (import coda before scipy), or this CPU lacks AVX2/FMA"
        )
    f = blas.scipy_cblas_sgemm
    f.restype = None
    # order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc
    scaled = [ctypes.c_float, ctypes.c_void_p, ctypes.c_int]  # alpha, a, lda / beta, c, ldc
    f.argtypes = [ctypes.c_int] * 6 + scaled + [ctypes.c_void_p, ctypes.c_int] + scaled
    _blas = blas
    return blas


def corename() -> str | None:
    """The core type of the loaded OpenBLAS (None before `load`)."""
    return None if _blas is None else _blas.scipy_openblas_get_corename().decode()


def _operand(t):
    """(tensor, transpose flag, leading dimension) of a 2-D float32 operand for row-major cblas."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if (s1 == 1 or cols == 1) and s0 >= max(1, cols):
        return t, _NO_TRANS, max(s0, 1)
    if (s0 == 1 or rows == 1) and s1 >= max(1, rows):
        return t, _TRANS, max(s1, 1)
    t = t.contiguous()
    return t, _NO_TRANS, max(cols, 1)


def sgemm(a, b, out, alpha: float = 1.0, beta: float = 0.0) -> None:
    """out (M, N, contiguous float32) = alpha · a (M, K) @ b (K, N) + beta · out, by OpenBLAS."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        out.mul_(beta)
        return
    a, ta, lda = _operand(a)
    b, tb, ldb = _operand(b)
    _blas.scipy_cblas_sgemm(
        _ROW_MAJOR,
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        a.data_ptr(),
        lda,
        b.data_ptr(),
        ldb,
        beta,
        out.data_ptr(),
        max(n, 1),
    )


def _plain(*tensors) -> bool:
    import torch

    return all(t.dtype == torch.float32 and t.dim() == 2 and not t.is_conj() for t in tensors)


def _mm(a, b):
    import torch

    if not _plain(a, b):
        return torch.ops.aten.mm.out(a, b, out=a.new_empty((a.shape[0], b.shape[1])))
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32)
    sgemm(a, b, out)
    return out


def _addmm(bias, a, b, *, beta=1, alpha=1):
    import torch

    if not (_plain(a, b) and bias.dtype == torch.float32):
        out = a.new_empty((a.shape[0], b.shape[1]))
        return torch.ops.aten.addmm.out(bias, a, b, beta=beta, alpha=alpha, out=out)
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32)
    if beta == 0:
        sgemm(a, b, out, float(alpha), 0.0)
    else:
        out.copy_(bias.expand_as(out))
        sgemm(a, b, out, float(alpha), float(beta))
    return out


def enable() -> None:
    """Route float32 ``aten::mm``/``aten::addmm`` on CPU to OpenBLAS's Haswell kernels in this process."""
    global _library
    if _library is not None:
        return
    import torch

    load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        library = torch.library.Library("aten", "IMPL")
        library.impl("mm", _mm, "CPU")
        library.impl("addmm", _addmm, "CPU")
    _library = library


def disable() -> None:
    """Give ``aten::mm``/``aten::addmm`` back to torch's own kernels."""
    global _library
    if _library is not None:
        _library._destroy()
        _library = None


def enabled() -> bool:
    return _library is not None
