"""Simulation: scenes, assets, the Panda world, task families, validity checks, rollouts, executors."""

import os


def _import_pybullet_quietly() -> None:
    """pybullet prints its build time from C on import; keep user-facing output (one-line errors) clean."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import pybullet  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


_import_pybullet_quietly()
