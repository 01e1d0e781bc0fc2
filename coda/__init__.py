"""CoDA: co-evolution of data engines and action policies (a reproduction).

Importing the package sets the numerics pin's environment variables (`coda.numerics`), so that torch in this
process (before its first operation) and every process it starts compute the same bits on any x86-64 machine.
"""

from coda import numerics as _numerics

_numerics.pin_environ()
if _numerics.enabled() and _numerics.gemm.requested() == "openblas":
    _numerics.gemm.load()  # before SciPy can load the same OpenBLAS with the pin's NumPy core type
