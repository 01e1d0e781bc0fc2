"""The decomposition tables: each family's default phases, the rules that refine a diagnosed phase.

Every family's phases come with the subgoals that complete them (`DEFAULT_PHASES`, per task variant where
the variants differ). A diagnosis refines its phase: the first `Rule` for that phase whose factor tokens
match the diagnosed factor, else the first whose keyword appears in the cause, builds finer subgoals
(`match_rule`); without a matching rule the phase's generic expansion applies (`EXPANSIONS`). Subgoal
parameters adapt to the scene's settled geometry when one is given (`scene_geometry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from coda.learn.predicates import _init_frac, _obj, _push_start_dist
from coda.sim.families.base import SceneContext
from coda.sim.families.drawer import CLOSED_FRAC
from coda.sim.families.push import GOAL_TOL


def _sg(predicate: str, **params: float) -> dict[str, Any]:
    return {"predicate": predicate, "params": params}


def scene_geometry(family: str, variant: str, ctx: SceneContext | None) -> dict[str, float]:
    """Scene-dependent parameter values (defaults when no scene is given)."""
    geo = {
        "width": 0.075,
        "radius": 0.05 if family == "pick_place" else (0.01 if variant == "on_center" else 0.015),
        "close_mid": 0.4,
        "close_start": 0.7,
        "push_full": 0.6,
    }
    if ctx is None:
        return geo
    if family in ("pick_place", "stack"):
        half = ctx.half_extents[_obj(ctx)]
        geo["width"] = float(np.clip(2 * min(half[0], half[1]) + 0.03, 0.04, 0.078))
    if family == "pick_place":
        c = ctx.bindings["container"]
        inner = ctx.inner[c][:2] if c in ctx.inner else ctx.half_extents[c][:1]
        geo["radius"] = float(np.clip(0.6 * float(np.min(inner)), 0.01, 0.1))
    elif family == "stack":
        hb = ctx.half_extents[ctx.bindings["base"]]
        tol = 0.012 if ctx.variant == "on_center" else 0.8 * min(hb[0], hb[1])
        geo["radius"] = float(np.clip(0.8 * tol, 0.005, 0.015))
    elif family == "drawer" and variant == "close":
        start = _init_frac(ctx)
        geo["close_mid"] = float(np.clip(0.5 * start, CLOSED_FRAC + 0.05, 0.95))
        geo["close_start"] = float(np.clip(start - 0.05, geo["close_mid"] + 0.02, 1.0))
    elif family == "push":
        # the fraction of the initial distance at which the verifier fires: push subgoals are fractions of it
        geo["push_full"] = float(np.clip(1 - GOAL_TOL / max(_push_start_dist(ctx), 1e-3), 0.2, 0.95))
    return geo


Build = Callable[[dict[str, float]], list[dict[str, Any]]]


def _object_phases(carry: str) -> list[tuple[str, Build]]:
    """pick_place and stack: reach, grasp, lift, carry over the goal (the phase named `carry`), place."""
    return [
        ("reach", lambda g: [_sg("reach", dist=0.03)]),
        ("grasp", lambda g: [_sg("grasp")]),
        ("lift", lambda g: [_sg("lift", height=0.04)]),
        (carry, lambda g: [_sg("align_xy", radius=g["radius"])]),
        ("place", lambda g: []),
    ]


# Each family's default decomposition: its phases in order, each with the subgoals that complete it. The
# last phase is completed by the verifier (no subgoal). Same for the task-description ablation.
DEFAULT_PHASES: dict[str, dict[str, list[tuple[str, Build]]]] = {
    "pick_place": {"*": _object_phases("transport")},
    "stack": {"*": _object_phases("align")},
    "drawer": {
        "open": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("grasp", lambda g: [_sg("grasp")]),
            ("pull", lambda g: [_sg("drawer_open_frac", frac=0.3)]),
            ("open", lambda g: []),
        ],
        "close": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("contact", lambda g: [_sg("contact")]),
            ("push", lambda g: [_sg("drawer_close_frac", frac=g["close_mid"])]),
            ("close", lambda g: []),
        ],
    },
    "push": {
        "*": [
            ("reach", lambda g: [_sg("reach", dist=0.04, lateral=0.025)]),
            ("contact", lambda g: [_sg("contact")]),
            ("push", lambda g: [_sg("push_progress", frac=0.5 * g["push_full"])]),
            ("arrive", lambda g: []),
        ]
    },
}


@dataclass(frozen=True)
class Rule:
    """Potential construction for a diagnosed phase: triggered by the factor or a cause keyword."""

    name: str
    phases: tuple[str, ...]
    factors: tuple[str, ...]  # tokens of the diagnosed factor name ("target_yaw" -> target, yaw)
    keywords: tuple[str, ...]  # substrings of the lower-cased cause text
    build: Build


YAW_WORDS = ("yaw", "orient", "rotat", "angle", "misalign", "twist")
REACH_WORDS = ("miss", "far", "short", "overshoot", "position", "offset", "approach")
WIDTH_WORDS = ("width", "wide", "open", "size", "large", "big", "scale", "narrow", "bulky")
SLIP_WORDS = ("slip", "friction", "loose", "heavy", "mass", "weight", "drop")
CLUTTER_WORDS = ("collid", "collision", "clutter", "distractor", "knock", "obstacle", "hit")
PRECISION_WORDS = ("offset", "align", "centre", "center", "tilt", "topple", "fell", "edge", "miss")
RELEASE_WORDS = ("drop", "bounce", "release", "roll", "throw")
STUCK_WORDS = ("stuck", "friction", "resist", "jam", "slip", "stall", "heavy")

# the same for an object and a drawer handle: approach from further out, turn the gripper, then close in
_APPROACH_WITH_YAW = Rule(
    "approach_with_yaw",
    ("reach",),
    ("yaw",),
    YAW_WORDS,
    lambda g: [_sg("reach", dist=0.08), _sg("align_yaw", tol=0.15), _sg("reach", dist=0.03)],
)

_OBJECT_RULES = (
    _APPROACH_WITH_YAW,
    Rule(
        "coarse_to_fine_reach",
        ("reach",),
        ("position", "distractors", "instance"),
        REACH_WORDS + CLUTTER_WORDS,
        lambda g: [_sg("reach", dist=0.1), _sg("reach", dist=0.05), _sg("reach", dist=0.02)],
    ),
    Rule(
        "wider_pregrasp",
        ("grasp",),
        ("scale", "instance"),
        WIDTH_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("pregrasp_open", width=g["width"], dist=0.03), _sg("grasp")],
    ),
    Rule(
        "grasp_yaw",
        ("grasp",),
        ("yaw",),
        YAW_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("align_yaw", tol=0.1, dist=0.03), _sg("grasp")],
    ),
    Rule(
        "secure_grasp",
        ("grasp",),
        ("friction", "mass"),
        SLIP_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("grasp"), _sg("lift", height=0.01)],
    ),
    Rule(
        "precise_reach",
        ("grasp",),
        ("position",),
        REACH_WORDS,
        lambda g: [_sg("reach", dist=0.06), _sg("reach", dist=0.015), _sg("grasp")],
    ),
    Rule(
        "higher_lift",
        ("lift",),
        ("mass",),
        ("heavy", "mass", "weight", "drop"),
        lambda g: [_sg("lift", height=0.02), _sg("lift", height=0.08)],
    ),
    Rule(
        "gradual_lift",
        ("lift",),
        ("friction",),
        ("slip", "friction", "loose"),
        lambda g: [_sg("lift", height=0.01), _sg("lift", height=0.03), _sg("lift", height=0.06)],
    ),
    Rule(
        "high_carry",
        ("transport", "align"),
        ("distractors",),
        CLUTTER_WORDS,
        lambda g: [
            _sg("lift", height=0.1),
            _sg("align_xy", radius=0.15),
            _sg("align_xy", radius=g["radius"]),
        ],
    ),
    Rule(
        "coarse_to_fine_transport",
        ("transport", "align"),
        ("position", "yaw"),
        REACH_WORDS + PRECISION_WORDS,
        lambda g: [
            _sg("align_xy", radius=max(4 * g["radius"], 0.08)),
            _sg("align_xy", radius=2 * g["radius"]),
            _sg("align_xy", radius=g["radius"]),
        ],
    ),
    Rule(
        "precise_place",
        ("place",),
        ("position", "yaw", "scale"),
        PRECISION_WORDS,
        lambda g: [
            _sg("align_xy", radius=0.6 * g["radius"]),
            _sg("lower", height=0.03, radius=0.6 * g["radius"]),
        ],
    ),
    Rule(
        "gentle_release",
        ("place",),
        ("mass", "friction"),
        RELEASE_WORDS,
        lambda g: [_sg("lower", height=0.03, radius=g["radius"])],
    ),
)


def _carry_expansion(g: dict[str, float]) -> list[dict[str, Any]]:
    """The generic expansion of carrying the object over its goal (pick_place transport, stack align)."""
    return [_sg("align_xy", radius=max(3 * g["radius"], 0.06)), _sg("align_xy", radius=g["radius"])]


_OBJECT_EXPANSION: dict[str, Build] = {
    "reach": lambda g: [_sg("reach", dist=0.08), _sg("reach", dist=0.03)],
    "grasp": lambda g: [_sg("reach", dist=0.03), _sg("pregrasp_open", width=0.07, dist=0.03), _sg("grasp")],
    "lift": lambda g: [_sg("lift", height=0.02), _sg("lift", height=0.04)],
    "transport": _carry_expansion,
    "align": _carry_expansion,
    "place": lambda g: [_sg("lower", height=0.04, radius=g["radius"])],
}

RULES: dict[str, tuple[Rule, ...]] = {
    "pick_place": _OBJECT_RULES,
    "stack": _OBJECT_RULES,
    "drawer": (
        _APPROACH_WITH_YAW,
        Rule(
            "coarse_to_fine_reach",
            ("reach",),
            ("position", "part", "scale"),
            REACH_WORDS,
            lambda g: [_sg("reach", dist=0.1), _sg("reach", dist=0.05), _sg("reach", dist=0.03)],
        ),
        Rule(
            "grasp_yaw",
            ("grasp",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.03), _sg("grasp")],
        ),
        Rule(
            "contact_yaw",
            ("contact",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.03), _sg("contact")],
        ),
        Rule(
            "wider_pregrasp",
            ("grasp",),
            ("scale", "instance", "part"),
            WIDTH_WORDS,
            lambda g: [_sg("pregrasp_open", width=0.075, dist=0.03), _sg("grasp")],
        ),
        Rule(
            "gradual_pull",
            ("pull",),
            ("friction", "scale"),
            STUCK_WORDS,
            lambda g: [
                _sg("drawer_open_frac", frac=0.1),
                _sg("drawer_open_frac", frac=0.2),
                _sg("drawer_open_frac", frac=0.3),
            ],
        ),
        Rule(
            "pull_further",
            ("open",),
            ("friction", "scale"),
            STUCK_WORDS + ("short", "partial", "not enough"),
            lambda g: [_sg("drawer_open_frac", frac=0.4), _sg("drawer_open_frac", frac=0.5)],
        ),
        Rule(
            "gradual_push",
            ("push",),
            ("friction", "scale"),
            STUCK_WORDS,
            lambda g: [
                _sg("drawer_close_frac", frac=g["close_start"]),
                _sg("drawer_close_frac", frac=0.5 * (g["close_start"] + g["close_mid"])),
                _sg("drawer_close_frac", frac=g["close_mid"]),
            ],
        ),
        Rule(
            "push_further",
            ("close",),
            ("friction", "scale"),
            STUCK_WORDS + ("short", "partial", "not enough"),
            lambda g: [_sg("drawer_close_frac", frac=0.5 * (g["close_mid"] + CLOSED_FRAC))],
        ),
    ),
    "push": (
        Rule(
            "approach_with_yaw",
            ("reach",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.2, dist=0.1), _sg("reach", dist=0.04, lateral=0.025)],
        ),
        Rule(
            "push_face_yaw",
            ("contact",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.02), _sg("contact")],
        ),
        Rule(
            "line_up_behind",
            ("reach",),
            ("position", "goal", "distractors"),
            REACH_WORDS + CLUTTER_WORDS,
            lambda g: [
                _sg("reach", dist=0.1, lateral=0.06),
                _sg("reach", dist=0.06, lateral=0.04),
                _sg("reach", dist=0.04, lateral=0.02),
            ],
        ),
        Rule(
            "steady_push",
            ("push",),
            ("friction", "mass", "yaw", "scale"),
            SLIP_WORDS + ("drift", "veer", "rotat", "off the line", "lost contact"),
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.25, 0.5, 0.75)],
        ),
        Rule(
            "long_push",
            ("push",),
            ("goal", "position"),
            REACH_WORDS,
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.33, 0.66)],
        ),
        Rule(
            "final_approach",
            ("arrive",),
            ("goal", "friction", "mass", "position"),
            REACH_WORDS + ("stop", "past"),
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.7, 0.85)],
        ),
    ),
}
EXPANSIONS: dict[str, dict[str, Build]] = {
    "pick_place": _OBJECT_EXPANSION,
    "stack": _OBJECT_EXPANSION,
    "drawer": {
        "reach": lambda g: [_sg("reach", dist=0.08), _sg("reach", dist=0.03)],
        "grasp": lambda g: [
            _sg("pregrasp_open", width=0.07, dist=0.03),
            _sg("align_yaw", tol=0.15, dist=0.03),
            _sg("grasp"),
        ],
        "pull": lambda g: [_sg("drawer_open_frac", frac=0.15), _sg("drawer_open_frac", frac=0.3)],
        "open": lambda g: [_sg("drawer_open_frac", frac=0.45)],
        "contact": lambda g: [
            _sg("align_yaw", tol=0.15, dist=0.03),
            _sg("contact"),
            _sg("drawer_close_frac", frac=g["close_start"]),
        ],
        "push": lambda g: [
            _sg("drawer_close_frac", frac=g["close_start"]),
            _sg("drawer_close_frac", frac=g["close_mid"]),
        ],
        "close": lambda g: [_sg("drawer_close_frac", frac=0.5 * (g["close_mid"] + CLOSED_FRAC))],
    },
    "push": {
        "reach": lambda g: [_sg("reach", dist=0.1, lateral=0.06), _sg("reach", dist=0.04, lateral=0.025)],
        "contact": lambda g: [_sg("reach", dist=0.04, lateral=0.015), _sg("contact")],
        "push": lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.25, 0.5)],
        "arrive": lambda g: [_sg("push_progress", frac=0.8 * g["push_full"])],
    },
}


def default_phases(family: str, variant: str) -> list[tuple[str, Build]]:
    table = DEFAULT_PHASES[family]
    return table[variant] if variant in table else table["*"]


def match_rule(family: str, phase: str, factor: str, cause: str) -> Rule | None:
    """The first rule for the phase whose factor matches; failing that, the first whose keyword is in the cause."""
    candidates = [r for r in RULES[family] if phase in r.phases]
    tokens = set(factor.lower().split("_"))
    for rule in candidates:
        if tokens & set(rule.factors):
            return rule
    text = cause.lower()
    for rule in candidates:
        if any(word in text for word in rule.keywords):
            return rule
    return None
