"""The ``"ray"`` backend: one Ray actor per worker, recreated when it dies or overruns (Ray is optional)."""

from __future__ import annotations

import collections
import re
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from coda import numerics
from coda.sim.executor.base import (
    JobResult,
    WorkerInitError,
    _default_workers,
    _ExecutorBase,
    _format_exception,
    _progress,
)


def _import_ray():
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            'The "ray" executor backend needs Ray, which is not installed: `pip install ray` '
            '(or use backend="local").'
        ) from exc
    return ray


class _RayWorker:
    """Body of the Ray actor (wrapped with ``ray.remote`` lazily, so ray stays optional)."""

    def __init__(self, initializer, initargs):
        self._init_error: tuple[str, str] | None = None
        if initializer is not None:
            try:
                initializer(*initargs)
            except Exception as exc:
                self._init_error = (_format_exception(exc), traceback.format_exc())

    def init_status(self):
        """None once the initializer has succeeded, else (message, traceback)."""
        return self._init_error

    def run(self, fn, arg):
        try:
            return ("ok", fn(arg), None)
        except Exception as exc:
            return ("err", _format_exception(exc), traceback.format_exc())


class RayExecutor(_ExecutorBase):
    """One Ray actor per worker; same semantics as :class:`LocalExecutor`.

    Connects with ``ray.init(address=ray_address, ...)``; with ``ray_address=None`` and
    no Ray running yet it starts a local Ray with ``num_cpus=workers`` (and shuts it
    down on :meth:`close`).  ``workers=None`` means one actor per CPU of the cluster.
    Each actor holds one job at a time, so ``timeout_s`` is a per-job limit; it starts
    once the actor is up and its initializer has finished (bounded by
    ``init_timeout_s``, default ``max(60, timeout_s)``).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 1,
        ray_address: str | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple = (),
        init_timeout_s: float | None = None,
        env: dict[str, str] | None = None,
    ):
        ray = _import_ray()
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if workers is not None and int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._ray = ray
        self._set_limits(timeout_s, retries, initializer, initargs, init_timeout_s)
        self._owns_ray = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(
                address=ray_address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False
            )
            if ray_address is None:
                kwargs["num_cpus"] = _default_workers() if workers is None else int(workers)
                self._owns_ray = True
            ray.init(**kwargs)
        if workers is None:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.workers = int(workers)
        options: dict[str, Any] = dict(num_cpus=1, max_restarts=0, max_task_retries=0)
        options["runtime_env"] = {"env_vars": {**numerics.pinned_env(), **(env or {})}}
        self._actor_cls = ray.remote(**options)(_RayWorker)
        self._actors: list[Any] = []
        self._actor_ready: list[bool] = []  # initializer known to have finished
        self._closed = False

    def _kill(self, actor) -> None:
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception:
            pass

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, desc: str = "") -> list[JobResult]:
        if self._closed:
            raise RuntimeError("executor is closed")
        ray = self._ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

        jobs = list(jobs)
        n = len(jobs)
        if n == 0:
            return []
        fn_ref = ray.put(fn)  # shipped to each actor once per map, not once per job

        results: list[JobResult | None] = [None] * n
        attempts = [0] * n
        pending = collections.deque(range(n))
        remaining = n
        busy: dict[Any, tuple[int, int, float]] = {}  # task ref -> (slot, job index, deadline)
        starting: dict[Any, tuple[int, float]] = {}  # readiness-probe ref -> (slot, deadline)
        idle: collections.deque[int] = collections.deque()
        init_failures = 0
        max_init_failures = 3 * self.workers
        bar = _progress(n, desc)

        def finish(index: int, res: JobResult) -> None:
            nonlocal remaining
            results[index] = res
            remaining -= 1
            bar.update(1)

        def attempt_failed(index: int, reason: str) -> None:
            if attempts[index] <= self.retries:
                pending.appendleft(index)
            else:
                finish(index, JobResult(index, False, None, reason, attempts[index]))

        def start(slot: int) -> None:
            """(Re)create the actor in `slot` and probe for the end of its initializer."""
            actor = self._actor_cls.remote(self._initializer, self._initargs)
            if slot == len(self._actors):
                self._actors.append(actor)
                self._actor_ready.append(False)
            else:
                self._kill(self._actors[slot])
                self._actors[slot] = actor
                self._actor_ready[slot] = False
            starting[actor.init_status.remote()] = (slot, time.monotonic() + self.init_timeout_s)

        def init_failed(slot: int, reason: str) -> None:
            nonlocal init_failures
            init_failures += 1
            if init_failures > max_init_failures:
                raise WorkerInitError(
                    f"{init_failures} Ray actors died or timed out in the initializer (last: {reason})"
                )
            start(slot)

        try:
            for slot in range(len(self._actors)):
                if self._actor_ready[slot]:
                    idle.append(slot)
                else:  # left unprobed by an interrupted map
                    start(slot)
            while len(self._actors) < min(self.workers, n):
                start(len(self._actors))

            while remaining > 0:
                while idle and pending:
                    slot, index = idle.popleft(), pending.popleft()
                    attempts[index] += 1
                    ref = self._actors[slot].run.remote(fn_ref, jobs[index])
                    busy[ref] = (slot, index, time.monotonic() + self.timeout_s)
                deadlines = [d for _, _, d in busy.values()] + [d for _, d in starting.values()]
                timeout = min(1.0, max(0.0, min(deadlines, default=time.monotonic()) - time.monotonic()))
                refs = list(busy) + list(starting)
                if not refs:  # cannot happen (an actor is always busy or starting); be safe
                    raise RuntimeError("executor bookkeeping error: no actor busy or starting")
                done, _ = ray.wait(refs, num_returns=1, timeout=timeout)

                for ref in done:
                    if ref in starting:
                        slot, _ = starting.pop(ref)
                        try:
                            init_error = ray.get(ref, timeout=30)
                        except RayError as exc:
                            if getattr(exc, "actor_init_failed", False):
                                # The actor's __init__ raised although it catches the
                                # initializer's exceptions: its arguments could not be
                                # unpickled there (module not importable on the workers).
                                detail = _ANSI_ESCAPE.sub("", str(exc)).strip()
                                raise WorkerInitError(
                                    "Ray actor could not be created (is the module of `fn`/`initializer` "
                                    f"importable on the Ray workers?): {detail}"
                                ) from exc
                            init_failed(slot, _first_line(exc))
                            continue
                        if init_error is not None:
                            raise WorkerInitError(f"initializer failed: {init_error[0]}\n{init_error[1]}")
                        self._actor_ready[slot] = True
                        idle.append(slot)
                        continue
                    slot, index, _ = busy.pop(ref)
                    try:
                        status, payload, tb = ray.get(ref, timeout=30)
                    except RayActorError as exc:
                        start(slot)
                        attempt_failed(index, f"crash: worker died (ray actor died: {_first_line(exc)})")
                        continue
                    except (RayTaskError, GetTimeoutError) as exc:
                        # fn's own exceptions are caught in the actor, so this is (un)pickling
                        # of fn, the job or the result (e.g. a module missing on the workers).
                        finish(
                            index,
                            JobResult(
                                index, False, None, f"exception: {_ray_error_text(exc)}", attempts[index]
                            ),
                        )
                    except RayError as exc:
                        # Anything else from Ray (object lost, worker OOM-killed, ...):
                        # treat like a crash, on a fresh actor.
                        start(slot)
                        attempt_failed(index, f"crash: worker died ({_ray_error_text(exc)})")
                        continue
                    else:
                        if status == "ok":
                            finish(index, JobResult(index, True, payload, None, attempts[index]))
                        else:
                            finish(
                                index,
                                JobResult(
                                    index, False, None, f"exception: {payload}", attempts[index], traceback=tb
                                ),
                            )
                    idle.append(slot)

                now = time.monotonic()
                for ref, (slot, index, deadline) in list(busy.items()):
                    if now >= deadline:
                        del busy[ref]
                        start(slot)  # kills the stuck actor
                        attempt_failed(index, f"timeout after {self.timeout_s}s")
                for ref, (slot, deadline) in list(starting.items()):
                    if now >= deadline:
                        del starting[ref]
                        init_failed(slot, f"initializer did not finish within {self.init_timeout_s}s")
        except BaseException:
            for actor in self._actors:
                self._kill(actor)
            self._actors, self._actor_ready = [], []
            raise
        finally:
            bar.close()
        return results  # type: ignore[return-value]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            self._kill(actor)
        self._actors, self._actor_ready = [], []
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    text = _ANSI_ESCAPE.sub("", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _ray_error_text(exc: BaseException) -> str:
    """Short text for a Ray error: its innermost cause, first line, without colours."""
    seen = 0
    while getattr(exc, "cause", None) is not None and isinstance(exc.cause, BaseException) and seen < 5:
        exc, seen = exc.cause, seen + 1
    return f"{type(exc).__name__}: {_first_line(exc)}"
