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

Layout: `base` (results, protocol, errors), one module per backend (`inline`, `local`, `ray_backend`)
and `factory` (`make_executor`); this package re-exports their public names.
"""

from coda.sim.executor.base import Executor, JobResult, WorkerInitError
from coda.sim.executor.factory import make_executor
from coda.sim.executor.inline import InlineExecutor
from coda.sim.executor.local import LocalExecutor
from coda.sim.executor.ray_backend import RayExecutor

__all__ = [
    "Executor",
    "InlineExecutor",
    "JobResult",
    "LocalExecutor",
    "RayExecutor",
    "WorkerInitError",
    "make_executor",
]
