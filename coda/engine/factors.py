"""Generative factors: how each family's factor names map onto roles and scene attributes.

Every family names its generative factors (``Family.factors``); a factor is an *attribute* (position, yaw,
scale, mass, friction, instance, distractors, instruction, goal_offset, part) of a *role* (or of the whole
scene). Generation programs are written against (role, attribute) pairs, which is what lets a program move
to another family (Appendix A); diagnoses and scores use the family's factor names.

`PHASE_FACTORS` is the prior a diagnoser and a compiler share: which factors can plausibly make a given
phase of a family fail, most plausible first. It is domain knowledge about the tasks, not about any program.
"""

from __future__ import annotations

from coda.sim.families import REGISTRY

ATTRIBUTES = (
    "position",
    "yaw",
    "scale",
    "mass",
    "friction",
    "instance",
    "distractors",
    "instruction",
    "goal_offset",
    "part",
)
SCENE_ATTRIBUTES = ("distractors", "instruction")  # attributes of the scene, not of one role

# the role whose object attributes (scale, mass, friction, instance) a family's factors refer to
PRIMARY_ROLE = {"pick_place": "target", "stack": "top", "push": "target", "drawer": "cabinet"}

# family -> factor -> (role or None, attribute)
FACTORS: dict[str, dict[str, tuple[str | None, str]]] = {}
for _family, _cls in REGISTRY.items():
    _table: dict[str, tuple[str | None, str]] = {}
    for _factor in _cls.factors:
        if _factor in SCENE_ATTRIBUTES:
            _table[_factor] = (None, _factor)
        elif _factor.endswith("_position") or _factor.endswith("_yaw"):
            _role, _attr = _factor.rsplit("_", 1)
            _table[_factor] = (_role, _attr)
        elif _factor == "goal_offset":
            _table[_factor] = ("goal", "goal_offset")
        else:
            _table[_factor] = (PRIMARY_ROLE[_family], _factor)
    FACTORS[_family] = _table


def factor_name(family: str, role: str | None, attribute: str) -> str | None:
    """The family's factor for (role, attribute), or None when the family has no such factor."""
    for factor, (r, a) in FACTORS[family].items():
        if a == attribute and (r == role or a in SCENE_ATTRIBUTES):
            return factor
    return None


def factor_target(family: str, factor: str) -> tuple[str | None, str]:
    """(role or None, attribute) of a family factor; KeyError for an unknown factor."""
    return FACTORS[family][factor]


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
