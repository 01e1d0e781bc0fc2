"""Errors that ``coda`` reports to the user as one line (``error: ...``, exit status 2), never a traceback.

`UserError` is raised for problems the user can fix from the command line: a missing data directory, an
unknown family or method, a corrupt memory snapshot, a run directory that does not exist. It lives in this
small module, which imports nothing from ``coda``, so that the subcommand modules (`coda.memory.commands`,
`coda.libero_pro.commands`, `coda.maintenance`, ...) and the entry point `coda.cli`, which imports them, can all raise
it without importing each other. `coda.cli.main` also prints `coda.config.ConfigError` (a bad
``params.yaml``) and `coda.sim.scene.SceneSpecError` (a bad scene file) this way. `ProgramError` (a program,
potential fragment or diagnosis that fails validation, naming the field) lives here too: the memory's schemas,
the engine and Text2potential all raise it, and none of them is below the others.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit status 2, no traceback."""


class ProgramError(ValueError):
    """An invalid program document, training-program fragment or diagnosis; ``field`` locates the problem
    (``subgoals[2].params.width``). Generated programs are data: every validator raises this, naming the field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")
