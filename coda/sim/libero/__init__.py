"""LIBERO / LIBERO-Pro adapter and scripted planner (optional extra: ``pip install -e '.[libero]'``)."""

from coda.sim.libero.env import (
    EXTRA_HINT,
    OBS_DIM,
    PHASES,
    Goal,
    LiberoEnv,
    LiberoRecord,
    LiberoTask,
    LiberoUnavailable,
    available,
    get_task,
    init_states,
    n_tasks,
    observation_vector,
    phase_values,
    require,
    run_episode,
)

__all__ = [
    "EXTRA_HINT",
    "OBS_DIM",
    "PHASES",
    "Goal",
    "LiberoEnv",
    "LiberoRecord",
    "LiberoTask",
    "LiberoUnavailable",
    "available",
    "get_task",
    "init_states",
    "n_tasks",
    "observation_vector",
    "phase_values",
    "require",
    "run_episode",
]
