"""The ``"inline"`` backend: jobs run one after another in the calling process (for debugging)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from typing import Any

from coda.sim.executor.base import (
    JobResult,
    WorkerInitError,
    _ExecutorBase,
    _format_exception,
    _progress,
)


class InlineExecutor(_ExecutorBase):
    """Runs jobs sequentially in the calling process (no isolation, no timeouts).

    ``initializer(*initargs)`` runs once, on the first ``map``.  A Python exception in
    ``fn`` is reported like in the other backends; a segfault takes the caller down.
    """

    def __init__(self, *, initializer: Callable[..., Any] | None = None, initargs: tuple = ()):
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._initialized = False

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, desc: str = "") -> list[JobResult]:
        jobs = list(jobs)
        if not self._initialized:
            if self._initializer is not None:
                try:
                    self._initializer(*self._initargs)
                except Exception as exc:
                    raise WorkerInitError(f"initializer failed: {_format_exception(exc)}") from exc
            self._initialized = True
        results: list[JobResult] = []
        bar = _progress(len(jobs), desc)
        try:
            for i, job in enumerate(jobs):
                try:
                    value = fn(job)
                except Exception as exc:
                    results.append(
                        JobResult(
                            i,
                            False,
                            None,
                            f"exception: {_format_exception(exc)}",
                            1,
                            traceback=traceback.format_exc(),
                        )
                    )
                else:
                    results.append(JobResult(i, True, value, None, 1))
                bar.update(1)
        finally:
            bar.close()
        return results

    def close(self) -> None:
        pass
