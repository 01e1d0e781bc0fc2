"""What every executor backend shares: `JobResult`, the `Executor` protocol, `WorkerInitError` and
small helpers (default worker count, one-line exception text, the progress bar)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class JobResult:
    """Outcome of one job.

    ``error`` is ``None`` when ``ok``; otherwise one of
    ``"crash: worker died (exit code -11)"``, ``"timeout after 60.0s"`` or
    ``"exception: ValueError: ..."``.  ``attempts`` counts how many times the job was
    started (``1 + retries`` at most).  ``traceback`` holds the worker-side traceback
    of an ``exception`` failure (not part of equality/repr).
    """

    index: int
    ok: bool
    value: Any | None
    error: str | None
    attempts: int
    traceback: str | None = field(default=None, repr=False, compare=False)


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, desc: str = "") -> list[JobResult]: ...

    def close(self) -> None: ...


class WorkerInitError(RuntimeError):
    """The ``initializer`` raised, or workers keep dying before becoming ready.

    Raised from ``map`` (rather than reported per job) because it is not specific to
    any job and retrying would only fail again.
    """


# --------------------------------------------------------------------------- helpers


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _format_exception(exc: BaseException) -> str:
    msg = str(exc)
    name = type(exc).__name__
    return f"{name}: {msg}" if msg else name


def _progress(total: int, desc: str):
    """tqdm bar over jobs (see coda.progress)."""
    from coda.progress import progress

    return progress(total=total, desc=desc, unit="job")


class _ExecutorBase:
    def _set_limits(self, timeout_s, retries, initializer, initargs, init_timeout_s) -> None:
        """Set the per-job timeout, the retries, and the initializer with its timeout (max(60, timeout_s))."""
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.init_timeout_s = (
            float(init_timeout_s) if init_timeout_s is not None else max(60.0, self.timeout_s)
        )
        self._initializer = initializer
        self._initargs = tuple(initargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
