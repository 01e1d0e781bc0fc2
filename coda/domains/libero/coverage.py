"""Coverage: how much of a round's generated LIBERO environments lands in the region of each held-out suite.

A generated environment is read as its certifying planner episode shows it — the first observation (every
object's x/y after the reset settled), the instruction the episode was given and the object it had to pick —
against the SFT demonstrations of its source task t (`LiberoReference`: every object's initial x/y over the
demonstrated states, and the instructions trained with), never from the program that made it. With g the
task's own goal object, G the episode's goal object and r the diagnoser's threshold (3 cm: 2.3x the largest
natural spread of a bundled state's object from the SFT states'), the environment lands in the region of

* ``standard``: G = g, the instruction is one t was trained with, and every object stands within r of a
  training position of its own;
* ``position`` (LIBERO-Pro ``_swap``: the goal object trades places with another object): G stands farther
  than r from every training position of G and within r of another object's mean training position — where
  the SFT demonstrations had another object;
* ``instruction`` (``_lan``): G = g and the instruction is not one t was trained with (a rewording);
* ``new_task`` (``_task``): G ≠ g — another object of the source scene is the goal (the held-out
  combinations themselves are never generated: `coda.sim.libero.heldout`);

and, not a suite of its own, ``goal_moved``: G stands farther than r from every training position of G
(anywhere off its training positions; ``position`` is the part of it at another object's place). An
environment may land in several regions (a swap with a paraphrase would be both ``position`` and
``instruction``) or in none (a shifted basket). `tests/test_libero_coverage.py` checks that every held-out
suite's own evaluation episodes land in its region by this definition.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from coda.domains.libero.diagnose import LiberoReference, initial_positions

REGIONS = ("standard", "position", "instruction", "new_task", "goal_moved")


def regions(
    task: int,
    obs0: np.ndarray,
    instruction: str,
    goal: str,
    *,
    source_goal: str,
    reference: LiberoReference,
    objects: tuple[str, ...],
    threshold: float,
) -> tuple[str, ...]:
    """The `REGIONS` an episode of source task `task` lands in (see the module docstring)."""
    now = initial_positions(obs0, objects)
    trained = instruction in reference.instructions.get(task, [])
    out = []
    at = now.get(goal)
    away = at is not None and reference.distance(task, goal, at) > threshold
    if (
        goal == source_goal
        and trained
        and all(reference.distance(task, n, xy) <= threshold for n, xy in now.items())
    ):
        out.append("standard")
    if away:
        others = (reference.mean(task, n) for n in reference.positions.get(task, {}) if n != goal)
        if any(m is not None and np.linalg.norm(at - m) <= threshold for m in others):
            out.append("position")
    if goal == source_goal and not trained:
        out.append("instruction")
    if goal != source_goal:
        out.append("new_task")
    if away:
        out.append("goal_moved")
    return tuple(out)


def tally(rows: list[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    """A round's coverage from (split, regions) per accepted environment: ``n`` and the count per region, in
    all and per split (``by_split``)."""

    def count(found: list[tuple[str, ...]]) -> dict[str, int]:
        c = Counter(r for regs in found for r in regs)
        return {"n": len(found), **{r: c[r] for r in REGIONS}}

    splits = sorted({s for s, _ in rows})
    return {
        **count([regs for _, regs in rows]),
        "by_split": {s: count([regs for q, regs in rows if q == s]) for s in splits},
    }
