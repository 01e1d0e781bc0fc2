"""The vocabulary generation programs are written in: each family's factors as (role, attribute) pairs.

Every family names its generative factors (``Family.factors``); a factor is an *attribute* (position, yaw,
scale, mass, friction, instance, distractors, instruction, goal_offset, part) of a *role* (or of the whole
scene). Generation programs are written against (role, attribute) pairs, which is what lets a program move
to another family (Appendix A); diagnoses and scores use the family's factor names.

The task variant is the *task component* of a scene (paper §3.1): a program may set it among the family's
generator variants (``TASK_ATTRIBUTES``). It is not a diagnosable factor (a diagnosis names a spatial or
object factor of the failing phase, and the variant is part of the phase's task); a mode's program sets the
variant its failing scenes had. Variant names are per family, so a transferred program drops it.

This table is part of the program schema (`coda.memory.programs` validates against it), so it lives beside
the schema. It is derived from what each family declares in `coda.sim.families` (``factors``,
``primary_role``), as is ``PHASE_FACTORS``, the prior a diagnoser and a compiler share: which factors can
plausibly make a given phase of a family fail, most plausible first (domain knowledge about the tasks, not
about any program).
"""

from __future__ import annotations

from coda.sim.families import REGISTRY

__all__ = [
    "ATTRIBUTES",
    "FACTORS",
    "PHASE_FACTORS",
    "PRIMARY_ROLE",
    "SCENE_ATTRIBUTES",
    "TASK_ATTRIBUTES",
    "VARIANT",
    "factor_name",
    "factor_target",
    "operation_factor",
]

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
    "variant",
)
SCENE_ATTRIBUTES = ("distractors", "instruction")  # attributes of the scene, not of one role
VARIANT = "variant"
TASK_ATTRIBUTES = (VARIANT,)  # the task component: one of the family's generator variants

# the role whose object attributes (scale, mass, friction, instance) a family's factors refer to
PRIMARY_ROLE = {family: cls.primary_role for family, cls in REGISTRY.items()}
# family -> phase -> factors that can plausibly make that phase fail, most plausible first (each family's
# `phase_factors`, checked against its factors when the family class is defined)
PHASE_FACTORS: dict[str, dict[str, tuple[str, ...]]] = {
    family: dict(cls.phase_factors) for family, cls in REGISTRY.items()
}

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


def operation_factor(family: str, role: str | None, attribute: str) -> str | None:
    """What an operation on (role, attribute) changes: the family factor, ``"variant"`` for the task
    component, or None when the family has no such factor."""
    return VARIANT if attribute in TASK_ATTRIBUTES else factor_name(family, role, attribute)
