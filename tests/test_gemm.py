"""The opt-in GEMM backend of the numerics pin (`coda.gemm`, ``CODA_GEMM=openblas``): torch's float32
mm/addmm on OpenBLAS's Haswell kernels give correct products and gradients, and the same bits whatever the
environment tells the vector libraries. Each check runs in its own process (the backend replaces ATen's
kernels process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.test_numerics import OLDER_CPU, ON_LINUX, bare_environ, cpu_has_avx2, probe
except ImportError:  # pragma: no cover - depends on how pytest put tests/ on sys.path
    from test_numerics import OLDER_CPU, ON_LINUX, bare_environ, cpu_has_avx2, probe

ROOT = Path(__file__).resolve().parents[1]
needs_avx2 = pytest.mark.skipif(
    not (ON_LINUX and cpu_has_avx2()), reason="OpenBLAS's Haswell kernels need AVX2"
)

PRODUCTS = r"""
from coda import numerics
numerics.pin_process()
import json, torch
numerics.pin_torch(2)
from coda import gemm
g = torch.Generator().manual_seed(0)
errors = {}
for m, k, n in [(64, 512, 512), (7, 33, 5), (1, 9, 4), (130, 1, 17)]:
    a, b, bias = (torch.randn(s, generator=g) for s in ((m, k), (k, n), (n,)))
    want = a.double() @ b.double()
    for name, got in {
        "mm": a @ b,
        "mm_transposed": (a.T.contiguous().T) @ (b.T.contiguous().T),
        "addmm": torch.addmm(bias, a, b),
        "addmm_scaled": torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
    }.items():
        ref = {"addmm": want + bias.double(), "addmm_scaled": 0.5 * bias.double() + 2 * want}.get(name, want)
        errors[f"{name} {m}x{k}x{n}"] = float((got.double() - ref).abs().max() / (ref.abs().max() + 1))
lin = torch.nn.Linear(40, 24)
x = torch.randn(16, 40, generator=g, requires_grad=True)
lin(x).square().sum().backward()
xd, wd, bd = x.detach().double(), lin.weight.detach().double(), lin.bias.detach().double()
y = xd @ wd.T + bd
grad_ref = {"x": 2 * y @ wd, "weight": 2 * y.T @ xd}
grad_err = {k: float((t.grad.double() - grad_ref[k]).abs().max() / grad_ref[k].abs().max())
            for k, t in (("x", x), ("weight", lin.weight))}
f64 = torch.randn(3, 4, dtype=torch.float64, generator=g)
print(json.dumps({"errors": errors, "grad": grad_err, "float64": str((f64 @ f64.T).dtype),
                  "numerics": numerics.in_force()}))
"""


def run_products(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PRODUCTS], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_avx2
def test_openblas_products_and_gradients_are_right():
    got = run_products(bare_environ(CODA_GEMM="openblas"))
    assert got["numerics"]["gemm"] == {"backend": "openblas", "openblas_core": "Haswell"}
    assert max(got["errors"].values()) < 1e-5, got["errors"]
    assert max(got["grad"].values()) < 1e-5, got["grad"]
    assert got["float64"] == "torch.float64"  # other dtypes stay on torch's own kernels
    # NumPy keeps its own OpenBLAS at the pin's core type
    assert got["numerics"]["variables"]["OPENBLAS_CORETYPE"] == "Nehalem"


@needs_avx2
def test_openblas_bits_do_not_depend_on_the_environment_and_differ_from_mkl():
    """The numerics probe (training steps of the critic and the policy) under ``CODA_GEMM=openblas``: the same
    digest with an older CPU's environment as with the default one; a different one from MKL's (so the backend
    is what computed it)."""
    openblas = probe("pin", bare_environ(CODA_GEMM="openblas"))
    openblas_older = probe("pin", bare_environ(CODA_GEMM="openblas", **OLDER_CPU))
    mkl = probe("pin", bare_environ())
    assert openblas["numerics"]["gemm"]["backend"] == "openblas"
    assert openblas_older["numerics"]["gemm"]["backend"] == "openblas"
    assert openblas["digest"] == openblas_older["digest"]
    assert openblas["digest"] != mkl["digest"]


def test_an_unknown_backend_is_refused(monkeypatch):
    from coda import gemm

    monkeypatch.setenv(gemm.SWITCH, "cublas")
    with pytest.raises(ValueError, match="CODA_GEMM"):
        gemm.requested()
