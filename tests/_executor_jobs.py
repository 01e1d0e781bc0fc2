"""Module-level (hence picklable) job functions for tests/test_executor.py."""

from __future__ import annotations

import os
import signal
import time

_COUNTER = None  # per-process state created by init_counter


def square(x):
    return x * x


def square_slow(x):
    time.sleep(0.02)
    return x * x


def segfault_on(arg):
    """arg = (x, bad): segfault when bad, else return x."""
    x, bad = arg
    if bad:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)  # never reached
    return x


def segfault_first_time(arg):
    """arg = (x, marker_path): segfault unless the marker exists (created before dying)."""
    x, marker = arg
    if marker is not None and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("crashed once\n")
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
    return x


def exit_hard(x):
    if x < 0:
        os._exit(3)
    return x


def hang_on(arg):
    x, hang = arg
    if hang:
        time.sleep(1000)
    return x


def raise_on(arg):
    x, bad = arg
    if bad:
        raise ValueError(f"bad job {x}")
    return x


def init_counter(start):
    global _COUNTER
    _COUNTER = {"n": start, "pid": os.getpid()}


def count(_x):
    """Returns (pid, how many jobs this process ran so far); needs init_counter."""
    assert _COUNTER is not None, "initializer did not run"
    _COUNTER["n"] += 1
    time.sleep(0.01)
    return os.getpid(), _COUNTER["n"]


def init_fail():
    raise RuntimeError("no simulator for you")


def getpid(_x):
    return os.getpid()


def libm_probe(_):
    """The worker's GLIBC_TUNABLES and a libm result that glibc's FMA and plain variants round differently."""
    import hashlib
    import math

    values = repr([math.sin(i * 0.37) for i in range(200000)]).encode()
    return os.environ.get("GLIBC_TUNABLES"), hashlib.md5(values).hexdigest()


def numerics_probe(_):
    """What of the numerics pin is in force in the worker, once torch is set up as a rollout worker sets it."""
    from coda import numerics

    numerics.pin_torch(1)
    return numerics.in_force()
