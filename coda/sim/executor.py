"""Fault-tolerant episode executor.

Runs many independent jobs (typically one simulator episode each) and returns one
:class:`JobResult` per job, in input order.  Simulators such as pybullet can segfault
or hang, so every backend except ``"inline"`` isolates jobs in worker processes that
are killed and replaced when they die or overrun their deadline; the affected job is
retried a bounded number of times and the run always completes.

Backends (same :class:`Executor` interface, built by :func:`make_executor`):

``"local"``
    A hand-rolled process pool (``multiprocessing``, spawn start method) with one pipe
    per worker and a supervisor loop in the calling process that watches worker
    sentinels, result pipes and per-job deadlines.  Workers are long-lived: the
    ``initializer`` runs once per worker process and whatever state it creates (e.g. a
    pybullet client) is reused by every job that worker runs, across ``map`` calls.
``"ray"``
    One Ray actor per worker (initializer runs in the actor's ``__init__``).  A dead
    actor is recreated and its job retried; a job that overruns is ``ray.kill``-ed.
``"inline"``
    Runs jobs in the calling process, one after another.  No isolation and no
    timeouts; for debugging and profiling.

Example::

    def make_client(gui=False):          # module level, picklable
        global CLIENT
        CLIENT = bullet_client.BulletClient(...)

    def run_episode(seed):               # module level, picklable
        return rollout(CLIENT, seed)

    with make_executor("local", initializer=make_client) as ex:
        results = ex.map(run_episode, range(100), desc="eval")
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import gc
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from coda.sim import numerics

__all__ = [
    "Executor",
    "InlineExecutor",
    "JobResult",
    "LocalExecutor",
    "RayExecutor",
    "WorkerInitError",
    "make_executor",
]

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


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
    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# --------------------------------------------------------------------------- inline


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


# --------------------------------------------------------------------------- local pool
#
@contextlib.contextmanager
def _environ(extra: dict[str, str]):
    """`os.environ` with `extra` set, restored afterwards."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# Start method: "spawn".  `fork` is ruled out: pybullet clients, OpenGL contexts, torch
# (OpenMP/CUDA thread pools) and any locks held by other threads would be duplicated
# into the child in an inconsistent state.  Between the two safe methods we pick spawn
# over forkserver because (a) every worker is a fresh interpreter that shares nothing
# with the parent, on every OS (forkserver is POSIX-only and its server process is a
# process-global singleton that preloads `__main__`), and (b) its extra cost — a new
# interpreter plus imports, a few hundred ms with torch — is paid only when a worker is
# started: workers are long-lived and reused across jobs and `map` calls, and only
# replaced after a crash or timeout, which is rare and already costs far more.
_MP_START_METHOD = "spawn"

# Wire protocol.  Parent -> worker (conn.send): ("fn", generation, pickled_fn),
# ("job", index, pickled_arg), ("stop",).  Worker -> parent (send_bytes of a pickle):
# ("ready",), ("init_error", message, traceback), ("res", index, ok, value_or_msg, tb).
# Function and arguments travel as pre-pickled bytes so that an unpicklable/unloadable
# object becomes a per-job error instead of breaking the channel; the function is sent
# once per worker per `map`, not once per job.


def _worker_main(conn, initializer, initargs) -> None:
    """Entry point of a local worker process."""
    # Ctrl-C goes to the whole foreground process group; let the parent handle it and
    # tear the pool down, instead of every worker printing a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # On a segfault, dump the Python stack of the dying worker to its stderr: the
    # parent only learns the exit code, this tells where in the episode it crashed.
    faulthandler.enable()
    try:
        if initializer is not None:
            initializer(*initargs)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        try:
            conn.send_bytes(pickle.dumps(("init_error", _format_exception(exc), traceback.format_exc())))
        except OSError:
            pass
        return
    conn.send_bytes(pickle.dumps(("ready",)))

    fn: Callable[[Any], Any] | None = None
    fn_error: tuple[str, str] | None = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # parent went away
            return
        kind = msg[0]
        if kind == "job":
            _, index, payload = msg
            try:
                if fn_error is not None:
                    out = pickle.dumps(("res", index, False, fn_error[0], fn_error[1]), _PICKLE_PROTOCOL)
                else:
                    value = fn(pickle.loads(payload))  # type: ignore[misc]
                    out = pickle.dumps(("res", index, True, value, None), _PICKLE_PROTOCOL)
            except BaseException as exc:  # noqa: BLE001 - reported per job
                tb = traceback.format_exc()
                try:
                    out = pickle.dumps(("res", index, False, _format_exception(exc), tb), _PICKLE_PROTOCOL)
                except BaseException:  # noqa: BLE001 - e.g. a weird exception message
                    out = pickle.dumps(("res", index, False, type(exc).__name__, tb), _PICKLE_PROTOCOL)
            conn.send_bytes(out)
        elif kind == "fn":
            try:
                fn, fn_error = pickle.loads(msg[2]), None
            except BaseException as exc:  # noqa: BLE001
                fn, fn_error = (
                    None,
                    (f"cannot load function: {_format_exception(exc)}", traceback.format_exc()),
                )
        elif kind == "stop":
            gc.freeze()  # exit without a final garbage collection over torch & co. (~1 s per worker)
            return


class _Worker:
    __slots__ = ("proc", "conn", "ready", "job", "deadline", "fn_gen")

    def __init__(self, proc, conn, init_deadline: float):
        self.proc = proc
        self.conn = conn
        self.ready = False
        self.job: int | None = None  # index of the job in flight
        self.deadline = init_deadline  # init deadline until ready, then job deadline
        self.fn_gen = -1  # generation of the function this worker holds


class LocalExecutor(_ExecutorBase):
    """Process pool with per-worker pipes, crash/timeout detection and replacement.

    Workers are started lazily (``min(workers, len(jobs))`` on a ``map``) and kept until
    :meth:`close`.  ``init_timeout_s`` bounds how long a worker may take to start and run
    the initializer (default ``max(60, timeout_s)``).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 1,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple = (),
        init_timeout_s: float | None = None,
        env: dict[str, str] | None = None,
    ):
        self.workers = _default_workers() if workers is None else int(workers)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.init_timeout_s = (
            float(init_timeout_s) if init_timeout_s is not None else max(60.0, self.timeout_s)
        )
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._ctx = multiprocessing.get_context(_MP_START_METHOD)
        self._env = {**numerics.pinned_libm_env(), **(env or {})}
        self._pool: list[_Worker] = []
        self._fn_gen = 0
        self._closed = False

    # -- worker lifecycle

    def _start_worker(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self._initializer, self._initargs),
            name="coda-executor-worker",
            daemon=True,  # never outlive the parent
        )
        with _environ(self._env):  # a spawned interpreter reads it at start (e.g. GLIBC_TUNABLES)
            proc.start()
        child_conn.close()  # so that the parent sees EOF if the child dies
        return _Worker(proc, parent_conn, time.monotonic() + self.init_timeout_s)

    @staticmethod
    def _kill(w: _Worker) -> int | None:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5.0)
        try:
            w.conn.close()
        except OSError:
            pass
        return w.proc.exitcode

    def _terminate_all(self) -> None:
        for w in self._pool:
            self._kill(w)
        self._pool = []

    # -- public API

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, desc: str = "") -> list[JobResult]:
        if self._closed:
            raise RuntimeError("executor is closed")
        jobs = list(jobs)
        n = len(jobs)
        if n == 0:
            return []
        fn_bytes = pickle.dumps(fn, _PICKLE_PROTOCOL)  # fails fast if fn is not picklable
        self._fn_gen += 1
        want = min(self.workers, n)
        while len(self._pool) < want:
            self._pool.append(self._start_worker())
        try:
            return self._run(fn_bytes, jobs, desc)
        except BaseException:
            # KeyboardInterrupt, WorkerInitError, ...: workers may be mid-job or in an
            # unknown state; kill them so that the next map starts from a clean pool.
            self._terminate_all()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in self._pool:
            try:
                w.conn.send(("stop",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for w in self._pool:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        self._terminate_all()

    def __del__(self):  # best effort; daemon workers die with the interpreter anyway
        try:
            if not self._closed and self._pool:
                self._terminate_all()
        except Exception:
            pass

    # -- supervisor

    def _run(self, fn_bytes: bytes, jobs: list[Any], desc: str) -> list[JobResult]:
        n = len(jobs)
        gen = self._fn_gen
        results: list[JobResult | None] = [None] * n
        attempts = [0] * n
        pending = collections.deque(range(n))
        remaining = n
        init_failures = 0
        max_init_failures = 3 * self.workers
        bar = _progress(n, desc)

        def finish(index: int, res: JobResult) -> None:
            nonlocal remaining
            if results[index] is None:
                results[index] = res
                remaining -= 1
                bar.update(1)

        def attempt_failed(index: int, reason: str) -> None:
            if attempts[index] <= self.retries:
                pending.appendleft(index)  # retry soon, on a fresh worker
            else:
                finish(index, JobResult(index, False, None, reason, attempts[index]))

        def replace(slot: int, reason: str) -> None:
            """Kill worker `slot`, account for its job, start a replacement."""
            nonlocal init_failures
            w = self._pool[slot]
            exitcode = self._kill(w)
            if not w.ready:
                init_failures += 1
                if init_failures > max_init_failures:
                    raise WorkerInitError(
                        f"{init_failures} workers died or timed out before finishing the initializer "
                        f"(last: {reason or f'exit code {exitcode}'}); see the workers' stderr. Note that "
                        f"with the spawn start method a script must guard its entry point with "
                        f'`if __name__ == "__main__":`'
                    )
            if w.job is not None:
                attempt_failed(w.job, reason or f"crash: worker died (exit code {exitcode})")
            self._pool[slot] = self._start_worker()

        def handle_message(w: _Worker, raw: bytes) -> None:
            try:
                msg = pickle.loads(raw)
            except BaseException as exc:  # noqa: BLE001 - e.g. result class not importable here
                if w.job is not None:
                    index, w.job = w.job, None
                    finish(
                        index,
                        JobResult(
                            index,
                            False,
                            None,
                            f"exception: cannot unpickle result: {_format_exception(exc)}",
                            attempts[index],
                        ),
                    )
                return
            kind = msg[0]
            if kind == "res":
                _, index, ok, payload, tb = msg
                if w.job == index:
                    w.job = None
                if ok:
                    finish(index, JobResult(index, True, payload, None, attempts[index]))
                else:
                    finish(
                        index,
                        JobResult(index, False, None, f"exception: {payload}", attempts[index], traceback=tb),
                    )
            elif kind == "ready":
                w.ready = True
            elif kind == "init_error":
                raise WorkerInitError(f"initializer failed: {msg[1]}\n{msg[2]}")

        try:
            while remaining > 0:
                # 1) dispatch to idle, ready workers
                for slot in range(len(self._pool)):
                    while pending:
                        w = self._pool[slot]
                        if not w.ready or w.job is not None:
                            break
                        index = pending.popleft()
                        try:
                            payload = pickle.dumps(jobs[index], _PICKLE_PROTOCOL)
                        except Exception as exc:
                            attempts[index] += 1
                            finish(
                                index,
                                JobResult(
                                    index,
                                    False,
                                    None,
                                    f"exception: cannot pickle job: {_format_exception(exc)}",
                                    attempts[index],
                                ),
                            )
                            continue  # this worker is still idle: try the next job
                        try:
                            if w.fn_gen != gen:
                                w.conn.send(("fn", gen, fn_bytes))
                                w.fn_gen = gen
                            w.conn.send(("job", index, payload))
                        except (OSError, ValueError):
                            # Worker died while idle: not this job's fault, do not charge it.
                            pending.appendleft(index)
                            replace(slot, "")
                            break
                        attempts[index] += 1
                        w.job = index
                        w.deadline = time.monotonic() + self.timeout_s
                if remaining == 0:
                    break

                # 2) wait for a result, a death, or the nearest deadline
                waitables: list[Any] = []
                nearest = float("inf")
                for w in self._pool:
                    waitables.append(w.conn)
                    waitables.append(w.proc.sentinel)
                    if w.job is not None or not w.ready:
                        nearest = min(nearest, w.deadline)
                # Deaths and results wake us up immediately; the 1 s cap is only a
                # safety net so that no bookkeeping slip can ever block forever.
                timeout = min(1.0, max(0.0, nearest - time.monotonic()))
                ready = set(multiprocessing.connection.wait(waitables, timeout))

                # 3) results first (a worker may have answered just before dying), then deaths
                for slot, w in enumerate(self._pool):
                    died = w.proc.sentinel in ready
                    if w.conn in ready or died:
                        try:
                            while w.conn.poll():
                                handle_message(w, w.conn.recv_bytes())
                        except (EOFError, OSError):
                            died = True
                    if died:
                        replace(slot, "")

                # 4) deadlines
                now = time.monotonic()
                for slot, w in enumerate(self._pool):
                    if w.job is not None and now >= w.deadline:
                        replace(slot, f"timeout after {self.timeout_s}s")
                    elif not w.ready and now >= w.deadline:
                        replace(slot, f"worker did not finish the initializer within {self.init_timeout_s}s")
        finally:
            bar.close()
        return results  # type: ignore[return-value]


# --------------------------------------------------------------------------- ray


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
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.init_timeout_s = (
            float(init_timeout_s) if init_timeout_s is not None else max(60.0, self.timeout_s)
        )
        self._initializer = initializer
        self._initargs = tuple(initargs)
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
        options["runtime_env"] = {"env_vars": {**numerics.pinned_libm_env(), **(env or {})}}
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


# --------------------------------------------------------------------------- factory


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
        (``coda.sim.numerics.pinned_libm_env``) that every worker starts with; ``"inline"`` runs in this
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
