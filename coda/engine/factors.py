"""Generative factors: how each family's factor names map onto roles and scene attributes.

Every family names its generative factors (``Family.factors``); a factor is an *attribute* (position, yaw,
scale, mass, friction, instance, distractors, instruction, goal_offset, part) of a *role* (or of the whole
scene). Generation programs are written against (role, attribute) pairs, which is what lets a program move
to another family (Appendix A); diagnoses and scores use the family's factor names.

`PHASE_FACTORS` is the prior a diagnoser and a compiler share: which factors can plausibly make a given
phase of a family fail, most plausible first. It is domain knowledge about the tasks, not about any program,
so each family declares it (`Family.phase_factors`, `coda.sim.families`); this is the table by family.
"""

from __future__ import annotations

# the factor vocabulary is part of the program schema: it lives in coda.memory.factors (re-exported here)
from coda.memory.factors import (  # noqa: F401
    ATTRIBUTES,
    FACTORS,
    PRIMARY_ROLE,
    SCENE_ATTRIBUTES,
    TASK_ATTRIBUTES,
    factor_name,
    factor_target,
)
from coda.sim.families import REGISTRY

# family -> phase -> factors that can plausibly make that phase fail, most plausible first (each family's
# `phase_factors`, checked against its factors when the family class is defined)
PHASE_FACTORS: dict[str, dict[str, tuple[str, ...]]] = {
    family: dict(cls.phase_factors) for family, cls in REGISTRY.items()
}
