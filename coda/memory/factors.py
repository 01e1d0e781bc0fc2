"""The vocabulary generation programs are written in: each family's factors as (role, attribute) pairs.

Every family names its generative factors (``Family.factors``); a factor is an *attribute* (position, yaw,
scale, mass, friction, instance, distractors, instruction, goal_offset, part) of a *role* (or of the whole
scene). Generation programs are written against (role, attribute) pairs, which is what lets a program move
to another family (Appendix A); diagnoses and scores use the family's factor names.

This table is part of the program schema (`coda.memory.programs` validates against it), so it lives beside
the schema; the data engine's phase priors (``PHASE_FACTORS``) build on it.
"""

from __future__ import annotations

from coda.sim.families import REGISTRY

__all__ = ["ATTRIBUTES", "FACTORS", "PRIMARY_ROLE", "SCENE_ATTRIBUTES", "factor_name", "factor_target"]

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
