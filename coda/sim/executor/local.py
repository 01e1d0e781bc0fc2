"""The ``"local"`` backend: a spawn-started process pool with one pipe per worker, and a supervisor that
replaces workers that crash or overrun their deadline. The one module of coda that pickles (jobs and
results, between the parent and its own workers)."""

from __future__ import annotations

import collections
import faulthandler
import gc
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from coda import numerics
from coda.environ import scoped_environ
from coda.sim.executor.base import (
    JobResult,
    WorkerInitError,
    _default_workers,
    _ExecutorBase,
    _format_exception,
    _progress,
)

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


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
        self._set_limits(timeout_s, retries, initializer, initargs, init_timeout_s)
        self._ctx = multiprocessing.get_context(_MP_START_METHOD)
        self._env = {**numerics.pinned_env(), **(env or {})}
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
        with scoped_environ(self._env):  # a spawned interpreter reads it at start (e.g. GLIBC_TUNABLES)
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
