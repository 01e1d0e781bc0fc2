"""What the LIBERO-Pro evaluation holds out, in one place.

Each source task has ``N_INIT`` bundled initial states, split three ways by index (`LiberoConfig`):

* ``demo_states(c)`` — the first ``c.demo_states``: the planner demonstrates them for SFT (and rounds
  rehearse those demonstrations);
* ``round_states(c)`` — the ones between: the base states of every generated environment;
* ``eval_states(c)`` — the last ``c.eval_states``: the evaluation, in the standard suite and in each
  LIBERO-Pro version of it (``_swap``, ``_lan``, ``_task``), whose bundled states of these indices are never
  demonstrated, generated or trained on; the per-round curve evaluates their first ``c.curve_states``
  (`curve_states`), the last round all of them.

Besides the states, LIBERO-Pro's perturbed suites hold out, per source task, the *combinations* their
episodes pose: the ``_task`` suite's new goal object in the source scene (`held_out_goal`: a retarget never
makes it the goal) and the ``_lan``/``_task`` suites' instructions (`held_out_instructions`: a generated
instruction never reads as one). Both are read from the suites' BDDL files only to be avoided
(`is_held_out` is the check `coda.domains.libero.domain.LiberoDomain.build` applies to every generated
environment before it is rolled out or demonstrated).
"""

from __future__ import annotations

from functools import cache

N_INIT = 50  # bundled initial states per task


def demo_states(c) -> range:
    """The SFT demonstration states of each source task (`c`: a `LiberoConfig`)."""
    return range(c.demo_states)


def round_states(c) -> range:
    """The base states of generated environments: neither demonstrated for SFT nor evaluated."""
    return range(c.demo_states, N_INIT - c.eval_states)


def eval_states(c) -> range:
    """The evaluation states (the final evaluation's, and SFT's)."""
    return range(N_INIT - c.eval_states, N_INIT)


def curve_states(c) -> range:
    """The evaluation states of the per-round curve: the first ``c.curve_states`` of `eval_states`."""
    return eval_states(c)[: c.curve_states]


def _pro(suite: str, kind: str) -> str | None:
    from coda.sim.libero.env import SUITES

    return suite + kind if suite + kind in SUITES else None


@cache
def held_out_goal(suite: str, task: int) -> str | None:
    """The goal object LIBERO-Pro's ``_task`` suite gives source task `task` in its scene (None when the
    suite has no ``_task`` version)."""
    from coda.sim.libero.env import get_task

    name = _pro(suite, "_task")
    return None if name is None else get_task(name, task).goal.obj


@cache
def held_out_instructions(suite: str, task: int) -> frozenset[str]:
    """The instructions of source task `task`'s ``_lan`` and ``_task`` episodes (lower case, as given)."""
    from coda.sim.libero.env import instruction_of

    names = (_pro(suite, kind) for kind in ("_lan", "_task"))
    return frozenset(instruction_of(name, task) for name in names if name is not None)


def is_held_out(
    goal: str,
    instruction: str,
    init_index: int,
    *,
    held_goal: str | None,
    held_texts: frozenset[str],
    states: range,
) -> str | None:
    """Why an episode of a source task is held out (its goal is the task's ``_task`` goal, its instruction a
    held-out one, or its initial state not one of the round `states`), or None when it is not."""
    if held_goal is not None and goal == held_goal:
        return f"the goal {goal} is LIBERO-Pro _task's"
    if " ".join(instruction.lower().split()) in held_texts:
        return f"the instruction {instruction!r} is a held-out one"
    if init_index not in states:
        return f"initial state {init_index} is not a round state"
    return None
