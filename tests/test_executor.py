"""Tests for coda.sim.executor (local process pool, inline, Ray)."""

from __future__ import annotations

import os
import time

import pytest

from coda.sim.executor import JobResult, LocalExecutor, WorkerInitError, make_executor

try:  # tests/ may or may not be a package
    from tests import _executor_jobs as J
except ImportError:  # pragma: no cover - depends on how pytest put tests/ on sys.path
    import _executor_jobs as J


@pytest.fixture(autouse=True)
def _no_progress(monkeypatch):
    monkeypatch.setenv("CODA_NO_PROGRESS", "1")


def _check_ordered_ok(results, values):
    assert [r.index for r in results] == list(range(len(values)))
    assert all(isinstance(r, JobResult) for r in results)
    assert all(r.ok and r.error is None and r.attempts == 1 for r in results), results
    assert [r.value for r in results] == values


# --------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("backend,workers", [("inline", 1), ("local", 1), ("local", 2)])
def test_results_in_input_order(backend, workers):
    jobs = list(range(25))
    with make_executor(backend, workers) as ex:
        _check_ordered_ok(ex.map(J.square_slow, jobs, desc="order"), [x * x for x in jobs])
        # a second map on the same executor reuses the pool
        _check_ordered_ok(ex.map(J.square, jobs[:3]), [0, 1, 4])
        assert ex.map(J.square, []) == []


def test_local_one_worker_is_a_subprocess():
    with make_executor("local", 1) as ex:
        pids = {r.value for r in ex.map(J.getpid, range(5))}
    assert len(pids) == 1 and os.getpid() not in pids


def test_inline_runs_in_caller():
    with make_executor("inline") as ex:
        assert [r.value for r in ex.map(J.getpid, range(3))] == [os.getpid()] * 3


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown executor backend"):
        make_executor("threads")


# --------------------------------------------------------------------------- crashes


def test_segfault_worker_replaced_and_reported():
    jobs = [(i, i == 3) for i in range(10)]
    t0 = time.monotonic()
    with make_executor("local", 2, retries=1) as ex:
        res = ex.map(J.segfault_on, jobs)
        # the pool still works after a crash
        assert [r.value for r in ex.map(J.square, [1, 2, 3])] == [1, 4, 9]
    assert time.monotonic() - t0 < 20
    bad = res[3]
    assert not bad.ok and bad.value is None
    assert bad.error == "crash: worker died (exit code -11)"
    assert bad.attempts == 2  # 1 + retries
    others = [r for r in res if r.index != 3]
    assert all(r.ok and r.attempts == 1 for r in others)
    assert [r.value for r in others] == [i for i in range(10) if i != 3]


def test_crash_with_no_retries_and_os_exit():
    with make_executor("local", 2, retries=0) as ex:
        res = ex.map(J.exit_hard, [1, -1, 2])
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error == "crash: worker died (exit code 3)" and res[1].attempts == 1


def test_segfault_first_attempt_succeeds_on_retry(tmp_path):
    markers = [str(tmp_path / f"m{i}") if i in (1, 4) else None for i in range(6)]
    with make_executor("local", 2, retries=1) as ex:
        res = ex.map(J.segfault_first_time, list(zip(range(6), markers)))
    assert all(r.ok for r in res), res
    assert [r.value for r in res] == list(range(6))
    assert [r.attempts for r in res] == [1, 2, 1, 1, 2, 1]
    assert os.path.exists(markers[1]) and os.path.exists(markers[4])


def test_single_worker_survives_crash():
    with make_executor("local", 1, retries=1) as ex:
        res = ex.map(J.segfault_on, [(0, False), (1, True), (2, False)])
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error.startswith("crash: worker died")


# --------------------------------------------------------------------------- timeouts


def test_hanging_job_times_out():
    jobs = [(i, i == 1) for i in range(6)]
    t0 = time.monotonic()
    with make_executor("local", 2, timeout_s=2, retries=0) as ex:
        res = ex.map(J.hang_on, jobs)
        elapsed = time.monotonic() - t0
        assert [r.value for r in ex.map(J.square, [5])] == [25]
    assert elapsed < 10, elapsed
    assert not res[1].ok and res[1].error == "timeout after 2.0s" and res[1].attempts == 1
    assert all(r.ok for r in res if r.index != 1)


# --------------------------------------------------------------------------- exceptions


@pytest.mark.parametrize("backend", ["local", "inline"])
def test_exception_reported_not_retried(backend):
    with make_executor(backend, 2, retries=3) as ex:
        res = ex.map(J.raise_on, [(i, i == 2) for i in range(5)])
    bad = res[2]
    assert not bad.ok and bad.attempts == 1
    assert bad.error == "exception: ValueError: bad job 2"
    assert "ValueError" in bad.traceback
    assert [r.ok for r in res] == [True, True, False, True, True]


def test_unpicklable_job_is_reported():
    with make_executor("local", 1) as ex:
        res = ex.map(J.square, [2, lambda: None, 3])
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error.startswith("exception: cannot pickle job")


# --------------------------------------------------------------------------- initializer


@pytest.mark.parametrize("backend,workers", [("local", 2), ("local", 1), ("inline", 1)])
def test_initializer_state_reused(backend, workers):
    with make_executor(backend, workers, initializer=J.init_counter, initargs=(100,)) as ex:
        first = [r.value for r in ex.map(J.count, range(12))]
        second = [r.value for r in ex.map(J.count, range(4))]
    pids = {pid for pid, _ in first + second}
    assert 1 <= len(pids) <= workers  # no process per job
    for pid in pids:  # the counter of each process keeps growing: state is reused
        counts = [c for p, c in first + second if p == pid]
        assert counts == list(range(101, 101 + len(counts)))


def test_initializer_failure_raises():
    ex = LocalExecutor(2, initializer=J.init_fail)
    with pytest.raises(WorkerInitError, match="no simulator for you"):
        ex.map(J.square, range(4))
    ex.close()
    with pytest.raises(WorkerInitError):
        make_executor("inline", initializer=J.init_fail).map(J.square, [1])


def test_initializer_that_crashes_gives_up():
    # every replacement worker segfaults in its initializer: bounded, then an error
    with make_executor("local", 1, initializer=J.segfault_on, initargs=((0, True),)) as ex:
        with pytest.raises(WorkerInitError, match="before finishing the initializer"):
            ex.map(J.square, [1, 2])


# --------------------------------------------------------------------------- ray


# Starting Ray costs ~10-25 s on a 2-core machine, so the Ray tests share one Ray
# session and one executor (2 actors, initializer run once per actor).


@pytest.fixture(scope="module")
def ray_executor():
    ray = pytest.importorskip("ray", reason="ray is not installed (`pip install ray`)")
    # Ray workers must import this helper module under the name the driver used (`_executor_jobs` when
    # pytest runs without the repository root on sys.path)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    ray.init(
        num_cpus=4,
        ignore_reinit_error=True,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": tests_dir}},
    )
    ex = make_executor("ray", 2, timeout_s=3, retries=1, initializer=J.init_counter, initargs=(0,))
    try:
        yield ex
    finally:
        ex.close()
        ray.shutdown()


@pytest.mark.slow
def test_ray_results_in_order_and_state_reused(ray_executor):
    jobs = list(range(20))
    _check_ordered_ok(ray_executor.map(J.square_slow, jobs), [x * x for x in jobs])
    counts = [r.value for r in ray_executor.map(J.count, range(8))]
    pids = {p for p, _ in counts}
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    for pid in pids:  # per-actor counter keeps growing: one process, reused
        mine = [c for p, c in counts if p == pid]
        assert mine == list(range(mine[0], mine[0] + len(mine)))


@pytest.mark.slow
def test_ray_crash_and_exception(ray_executor):
    res = ray_executor.map(J.segfault_on, [(i, i == 2) for i in range(6)])
    bad = res[2]
    assert not bad.ok and bad.attempts == 2 and bad.error.startswith("crash: worker died"), bad
    assert [r.value for r in res if r.index != 2] == [0, 1, 3, 4, 5]
    assert all(r.ok and r.attempts == 1 for r in res if r.index != 2)

    exc = ray_executor.map(J.raise_on, [(0, True), (1, False)])
    assert exc[0].error == "exception: ValueError: bad job 0" and exc[0].attempts == 1
    assert exc[1].ok


@pytest.mark.slow
def test_ray_timeout(ray_executor, monkeypatch):
    monkeypatch.setattr(ray_executor, "retries", 0)
    t0 = time.monotonic()
    res = ray_executor.map(J.hang_on, [(0, False), (1, True), (2, False)])
    # the hung job sleeps 1000 s: far less means the 3 s timeout cut it (the bound leaves room for a busy machine)
    assert time.monotonic() - t0 < 120
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error == "timeout after 3.0s" and res[1].attempts == 1
    assert [r.value for r in ray_executor.map(J.square, [3])] == [9]  # replacement actor works


@pytest.mark.slow
def test_ray_initializer_failure(ray_executor):
    # num_cpus=4 (logical) leaves room for this executor's actor next to the shared one's
    ex = make_executor("ray", 1, initializer=J.init_fail)
    try:
        with pytest.raises(WorkerInitError, match="no simulator for you"):
            ex.map(J.square, [1, 2])
    finally:
        ex.close()


def test_ray_missing_gives_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pip install ray"):
        make_executor("ray")


def test_workers_start_with_the_pinned_libm():
    """Every local worker runs glibc's plain libm, whatever this process's CPU variant (physics and geometry
    are then the same bits on any x86-64 machine)."""
    import subprocess
    import sys

    from coda.numerics import PINNED_LIBM

    with make_executor("local", 1, env={"CODA_TEST": "1"}) as ex:
        (res,) = ex.map(J.libm_probe, [0])
    tunables, value = res.value
    assert PINNED_LIBM in tunables.split(":")
    code = (
        "import hashlib, math; "
        "print(hashlib.md5(repr([math.sin(i * 0.37) for i in range(200000)]).encode()).hexdigest())"
    )
    plain = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "GLIBC_TUNABLES": PINNED_LIBM},
        capture_output=True,
        text=True,
    )
    assert value == plain.stdout.strip()
