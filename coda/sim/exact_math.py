"""Floating-point arithmetic that gives the same bits on every x86-64 CPU.

NumPy picks its SIMD kernels at run time (AVX-512, AVX2 or SSE) and OpenBLAS its kernels by CPU model, so
reductions that multiply and add (`np.linalg.norm`, `np.dot`, `@`, `np.einsum`) and transcendental ufuncs
(`np.sin`, `np.cos`, `np.arctan2`) can differ in the last bit from one machine to the next. Elementwise
`+ - * /`, `sqrt`, `min`/`max`, `clip`, `rint` and pure sums are correctly rounded IEEE operations in every
kernel, so they agree everywhere. The data build (asset hulls, scene checks) and everything that feeds the
physics (controller targets, planners) use only those, and the helpers below, so that `data/` is
byte-identical whatever the CPU's vector extensions (`tests/test_data.py` builds it with NumPy's and
OpenBLAS's default and reduced kernels and compares the bytes).

Scalar transcendentals go through CPython's `math`, i.e. the C library's, and PyBullet calls the same
functions. glibc picks FMA variants of `sin`, `cos`, `atan2`, `exp` ... on CPUs that have FMA, and those round
differently from the plain ones, so every process that simulates starts with the plain variants on every CPU:
that is part of the process-wide numerics pin, `coda.numerics` (with torch's, MKL's and NumPy's knobs), which
every simulation worker (`coda.sim.executor`) and every ``coda`` command starts under. Simulation run in a
process that did not start under the pin (the `inline` executor in tests, a notebook's kernel) uses whichever
libm variant its CPU has.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def norm(v: Iterable[float]) -> float:
    """Euclidean length, correctly rounded sum of squares (`np.linalg.norm` goes through BLAS)."""
    return math.sqrt(math.fsum(float(x) * float(x) for x in np.ravel(v)))


def dot(a: Iterable[float], b: Iterable[float]) -> float:
    """Inner product of two vectors, correctly rounded sum of products."""
    return math.fsum(float(x) * float(y) for x, y in zip(np.ravel(a), np.ravel(b), strict=True))


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`a @ b` for small matrices (broadcast over leading axes), summed in a fixed order, never fused."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    out = a[..., :, 0:1] * b[..., 0:1, :]
    for j in range(1, a.shape[-1]):
        out = out + a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return out


def transform(rot: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Points `pts` (..., N, 3) rotated by `rot` (..., 3, 3): `pts @ rot.T`, summed in a fixed order."""
    return matmul(pts, np.swapaxes(np.asarray(rot, dtype=np.float64), -1, -2))


def _elementwise(fn, *arrays) -> np.ndarray:
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in arrays))
    flat = [fn(*(float(x) for x in vals)) for vals in zip(*(x.ravel() for x in arrays), strict=True)]
    return np.asarray(flat, dtype=np.float64).reshape(arrays[0].shape)


def sin(x) -> np.ndarray:
    return _elementwise(math.sin, x)


def cos(x) -> np.ndarray:
    return _elementwise(math.cos, x)


def atan2(y, x) -> np.ndarray:
    return _elementwise(math.atan2, y, x)


def hypot(x, y) -> np.ndarray:
    """sqrt(x*x + y*y), elementwise (correctly rounded steps, unlike the platform's `hypot`)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return np.sqrt(x * x + y * y)


def quantize(x: np.ndarray, step: float) -> np.ndarray:
    """Integer multiples of `step` nearest to `x` (int64): exact comparisons and ties from here on."""
    return np.rint(np.asarray(x, dtype=np.float64) / step).astype(np.int64)
