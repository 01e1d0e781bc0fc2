"""`make_executor`: build an executor backend by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coda.sim.executor.base import Executor
from coda.sim.executor.inline import InlineExecutor
from coda.sim.executor.local import LocalExecutor
from coda.sim.executor.ray_backend import RayExecutor


def make_executor(
    backend: str = "local",
    workers: int | None = None,
    *,
    timeout_s: float = 60.0,
    retries: int = 1,
    ray_address: str | None = None,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    env: dict[str, str] | None = None,
) -> Executor:
    """Build an executor.

    backend: ``"local"`` (process pool, default), ``"ray"`` or ``"inline"``.
    workers: number of worker processes/actors; default one per available core
        (``"ray"`` with an address: one per cluster CPU).  Ignored by ``"inline"``.
    timeout_s: per-job wall-clock limit (not enforced by ``"inline"``).
    retries: extra attempts for a job whose worker crashed or timed out.  Python
        exceptions raised by ``fn`` are never retried.
    initializer, initargs: ``initializer(*initargs)`` runs once per worker process.
    env: environment variables set in each worker process before it starts, on top of the pinned libm
        (``coda.numerics.pinned_env``: libm, torch, MKL, NumPy) that every worker starts with; ``"inline"`` runs in this
        process and ignores both.
    """
    backend = backend.lower()
    if backend == "local":
        return LocalExecutor(
            workers, timeout_s=timeout_s, retries=retries, initializer=initializer, initargs=initargs, env=env
        )
    if backend == "inline":
        return InlineExecutor(initializer=initializer, initargs=initargs)
    if backend == "ray":
        return RayExecutor(
            workers,
            timeout_s=timeout_s,
            retries=retries,
            ray_address=ray_address,
            initializer=initializer,
            initargs=initargs,
            env=env,
        )
    raise ValueError(f"unknown executor backend {backend!r} (expected 'local', 'ray' or 'inline')")
