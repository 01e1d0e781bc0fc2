"""Generative factors: how each family's factor names map onto roles and scene attributes.

Every family names its generative factors (``Family.factors``); a factor is an *attribute* (position, yaw,
scale, mass, friction, instance, distractors, instruction, goal_offset, part) of a *role* (or of the whole
scene). Generation programs are written against (role, attribute) pairs, which is what lets a program move
to another family (Appendix A); diagnoses and scores use the family's factor names.

`PHASE_FACTORS` is the prior a diagnoser and a compiler share: which factors can plausibly make a given
phase of a family fail, most plausible first. It is domain knowledge about the tasks, not about any program.
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

# family -> phase -> factors that can plausibly make that phase fail, most plausible first
PHASE_FACTORS: dict[str, dict[str, tuple[str, ...]]] = {
    "pick_place": {
        "reach": ("target_position", "distractors", "target_yaw", "instruction", "instance"),
        "grasp": ("target_yaw", "scale", "instance", "friction", "target_position"),
        "lift": ("mass", "friction", "scale", "instance"),
        "transport": ("container_position", "mass", "friction", "distractors"),
        "place": ("container_position", "scale", "instance", "target_yaw"),
    },
    "stack": {
        "reach": ("top_position", "distractors", "top_yaw", "instruction", "instance"),
        "grasp": ("top_yaw", "scale", "instance", "friction", "top_position"),
        "lift": ("mass", "friction", "scale", "instance"),
        "align": ("base_position", "base_yaw", "distractors", "top_yaw"),
        "place": ("base_yaw", "scale", "base_position", "instance"),
    },
    "push": {
        "reach": ("target_position", "target_yaw", "distractors", "instruction"),
        "contact": ("target_yaw", "scale", "instance", "target_position"),
        "push": ("goal_offset", "friction", "mass", "target_yaw"),
        "arrive": ("goal_offset", "friction", "mass", "scale"),
    },
    "drawer": {
        "reach": ("cabinet_position", "cabinet_yaw", "instruction", "instance"),
        "grasp": ("cabinet_yaw", "instance", "scale", "cabinet_position"),
        "pull": ("friction", "cabinet_yaw", "instance", "scale"),
        "open": ("friction", "cabinet_yaw", "scale"),
        "contact": ("cabinet_yaw", "instance", "cabinet_position"),
        "push": ("friction", "cabinet_yaw", "scale"),
        "close": ("friction", "cabinet_yaw", "scale"),
    },
}


def _check() -> None:
    for family, phases in PHASE_FACTORS.items():
        for phase, factors in phases.items():
            unknown = set(factors) - set(FACTORS[family])
            assert not unknown, (family, phase, unknown)


_check()
