"""The Text2potential predicate library: parameterised subgoal predicates on simulator state, per family.

Each `Predicate` has a satisfaction test and a bounded in-stage progress function in [0, 1] on the ``state``
dicts of `coda.sim.rollout.RolloutRecord`, and validated parameters. `text2potential` builds cumulative
subgoals and staged potentials from them; `library_spec` is what an LLM program writer is shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.errors import ProgramError
from coda.sim.families import REGISTRY
from coda.sim.families.base import SceneContext, State, grasp_yaw, yaw_of
from coda.sim.families.drawer import CLOSED_FRAC, OPEN_FRAC, _frac, _part, _pull_dir
from coda.sim.families.push import GOAL_TOL, PUSH_Z, _radius

MAX_GRIP = 0.08  # Panda total finger opening (2 x GRIP_OPEN)
REACH_SCALE = 0.3  # distances (m) beyond which reach-type progress is zero


@dataclass(frozen=True)
class Param:
    default: float
    lo: float
    hi: float
    easy: float  # the value at which the predicate is (nearly) trivial: splits interpolate towards it


@dataclass(frozen=True)
class Predicate:
    """A parameterised subgoal: ``holds(state, ctx, params)`` and its progress in [0, 1] toward holding."""

    name: str
    holds: Callable[[State, SceneContext, dict], bool]
    progress: Callable[[State, SceneContext, dict], float]
    params: dict[str, Param] = field(default_factory=dict)
    split_param: str | None = None  # the parameter a refinement split interpolates (None: not splittable)
    variants: tuple[str, ...] | None = None  # task variants it applies to (None: all)
    doc: str = ""


def _close(excess: float, scale: float) -> float:
    """1 at zero excess, falling linearly to 0 at `scale`."""
    return float(np.clip(1.0 - max(excess, 0.0) / max(scale, 1e-9), 0.0, 1.0))


def _wrap_half(a: float) -> float:
    """Angle difference modulo a half turn (the gripper is symmetric), in [-pi/2, pi/2)."""
    return ((2 * a + math.pi) % (2 * math.pi) - math.pi) / 2


def gripper_yaw(ee_quat: Sequence[float]) -> float:
    """Yaw of a downward gripper: the angle `coda.sim.families.base.down_quat` was built with."""
    x, y, z, w = ee_quat
    r01, r11 = 2 * (x * y - w * z), 1 - 2 * (x * x + z * z)  # hand y axis (finger closing direction)
    return math.atan2(r01, -r11)


# -- pick_place and stack: a grasped object carried to a goal ----------------------------------------
def _obj(ctx: SceneContext) -> int:
    return ctx.bindings["target"] if "target" in ctx.bindings else ctx.bindings["top"]


def _obj_goal_xy(st: State, ctx: SceneContext) -> np.ndarray:
    if ctx.family == "stack":
        return st["obj_pos"][ctx.bindings["base"]][:2]
    return ctx.init_pos[ctx.bindings["container"]][:2]


def _support_z(st: State, ctx: SceneContext) -> float:
    """Height of the surface the object must come to rest on (container floor or the base's top)."""
    if ctx.family == "stack":
        b = ctx.bindings["base"]
        return float(st["obj_pos"][b][2] + ctx.half_extents[b][2])
    c = ctx.bindings["container"]
    if c in ctx.inner:
        return float(ctx.inner[c][2])
    return float(ctx.init_pos[c][2] + ctx.half_extents[c][2])


def _bottom(st: State, ctx: SceneContext) -> float:
    i = _obj(ctx)
    return float(st["obj_pos"][i][2] - ctx.half_extents[i][2])


def _grasped(st: State, ctx: SceneContext, i: int | None = None) -> bool:
    return bool(st["finger_contact"][_obj(ctx) if i is None else i].all())


def _obj_near(st: State, ctx: SceneContext) -> float:
    """How far the end effector is from the object: horizontally, or above the object's top."""
    i = _obj(ctx)
    rel = st["ee_pos"] - st["obj_pos"][i]
    return max(math.hypot(rel[0], rel[1]), rel[2] - ctx.half_extents[i][2])


def _reach_excess(st: State, ctx: SceneContext, dist: float) -> float:
    return max(0.0, _obj_near(st, ctx) - dist)


def _obj_reach(st, ctx, p):
    return _reach_excess(st, ctx, p["dist"]) == 0.0


def _obj_reach_progress(st, ctx, p):
    return _close(_reach_excess(st, ctx, p["dist"]), REACH_SCALE)


def _obj_pregrasp(st, ctx, p):
    return float(st["grip"][0]) >= p["width"] and _reach_excess(st, ctx, p["dist"]) == 0.0


def _obj_pregrasp_progress(st, ctx, p):
    return 0.5 * _close(_reach_excess(st, ctx, p["dist"]), REACH_SCALE) + 0.5 * min(
        1.0, st["grip"][0] / p["width"]
    )


def _obj_yaw_error(st, ctx) -> float:
    i = _obj(ctx)
    return abs(
        _wrap_half(gripper_yaw(st["ee_quat"]) - grasp_yaw(yaw_of(st["obj_quat"][i]), ctx.half_extents[i]))
    )


def _obj_grasp_progress(st, ctx, p):
    return 0.5 * _close(_reach_excess(st, ctx, 0.02), REACH_SCALE) + 0.5 * float(
        st["finger_contact"][_obj(ctx)].mean()
    )


def _lift_height(st, ctx) -> float:
    i = _obj(ctx)
    return float(st["obj_pos"][i][2] - ctx.init_pos[i][2])


def _obj_lift(st, ctx, p):
    return _grasped(st, ctx) and _lift_height(st, ctx) >= p["height"]


def _obj_lift_progress(st, ctx, p):
    return float(np.clip(_lift_height(st, ctx) / p["height"], 0.0, 1.0)) if _grasped(st, ctx) else 0.0


def _carried(st, ctx) -> bool:
    """Above the goal's support surface: held, or its bottom clear of the support."""
    if ctx.family == "stack":
        return _bottom(st, ctx) > _support_z(st, ctx) - 0.005
    return _grasped(st, ctx) or _bottom(st, ctx) > _support_z(st, ctx) + 0.01


def _xy_to_goal(st, ctx) -> float:
    return float(np.linalg.norm(st["obj_pos"][_obj(ctx)][:2] - _obj_goal_xy(st, ctx)))


def _obj_align_xy(st, ctx, p):
    return _xy_to_goal(st, ctx) <= p["radius"] and _carried(st, ctx)


def _obj_align_xy_progress(st, ctx, p):
    start = float(np.linalg.norm(ctx.init_pos[_obj(ctx)][:2] - _obj_goal_xy(st, ctx)))
    return _close(_xy_to_goal(st, ctx) - p["radius"], max(start - p["radius"], 0.05))


def _obj_lower(st, ctx, p):
    return _xy_to_goal(st, ctx) <= p["radius"] and _bottom(st, ctx) - _support_z(st, ctx) <= p["height"]


def _obj_lower_progress(st, ctx, p):
    return 0.5 * _close(_xy_to_goal(st, ctx) - p["radius"], 0.2) + 0.5 * _close(
        _bottom(st, ctx) - _support_z(st, ctx) - p["height"], 0.2
    )


def _obj_verifier_progress(st, ctx, p):
    """Toward resting on the support at the goal, released."""
    rest = np.array([*_obj_goal_xy(st, ctx), _support_z(st, ctx) + ctx.half_extents[_obj(ctx)][2]])
    settle = _close(float(np.linalg.norm(st["obj_pos"][_obj(ctx)] - rest)), REACH_SCALE)
    return 0.5 * settle + 0.5 * (1.0 - float(st["finger_contact"][_obj(ctx)].mean())) * settle


# -- drawer: a handle grasped (open) or pushed (close) along the slide axis ---------------------------
def _handle_dist(st, ctx) -> float:
    return float(np.linalg.norm(st["ee_pos"] - st["handle_pos"][_part(ctx)]))


def _handle_yaw_error(st, ctx) -> float:
    d = _pull_dir(ctx)
    return abs(_wrap_half(gripper_yaw(st["ee_quat"]) - math.atan2(d[1], d[0])))


def _cabinet(ctx) -> int:
    return ctx.bindings["cabinet"]


def _init_frac(ctx) -> float:
    k = _part(ctx)
    lo, hi = ctx.joint_limits[k]
    return float((ctx.init_art_q[k] - lo) / max(hi - lo, 1e-9))


def _touch_point(st, ctx) -> np.ndarray:
    h = st["handle_pos"][_part(ctx)]
    return np.array([*(h[:2] + _pull_dir(ctx) * 0.025), h[2]])


def _drawer_engaged(st, ctx, p) -> bool:
    # contact points are sampled at the last physics substep of a control step and can flicker while the
    # fingers push the bar; a drawer moved by >= 2% with the hand at its front counts as engaged too
    if st["robot_contact"][_cabinet(ctx)]:
        return True
    near = float(np.linalg.norm(st["ee_pos"] - _touch_point(st, ctx))) < 0.05
    return near and abs(_frac(st, ctx) - _init_frac(ctx)) >= 0.02


def _drawer_open_progress(st, ctx, target: float) -> float:
    start = _init_frac(ctx)
    return float(np.clip((_frac(st, ctx) - start) / max(target - start, 1e-3), 0.0, 1.0))


def _drawer_close_progress(st, ctx, target: float) -> float:
    start = _init_frac(ctx)
    return float(np.clip((start - _frac(st, ctx)) / max(start - target, 1e-3), 0.0, 1.0))


def _drawer_verifier_progress(st, ctx, p):
    if ctx.variant == "open":
        return _drawer_open_progress(st, ctx, OPEN_FRAC)
    return _drawer_close_progress(st, ctx, CLOSED_FRAC)


# -- push: non-prehensile, from behind the object along the object->goal line -------------------------
def _push_geometry(st, ctx):
    i = ctx.bindings["target"]
    obj = st["obj_pos"][i][:2]
    d = np.asarray(ctx.goal[:2]) - obj
    dist = float(np.linalg.norm(d))
    return obj, d / max(dist, 1e-9), dist


def _push_start_dist(ctx) -> float:
    return float(np.linalg.norm(ctx.init_pos[ctx.bindings["target"]][:2] - np.asarray(ctx.goal[:2])))


def _push_reach(st, ctx, p):
    obj, d, _ = _push_geometry(st, ctx)
    rel = st["ee_pos"][:2] - obj
    along, across = float(rel @ d), abs(float(rel[0] * d[1] - rel[1] * d[0]))
    return (
        along < 0 and -along <= _radius(ctx) + p["dist"] and across <= p["lateral"] and st["ee_pos"][2] < 0.05
    )


def _push_reach_progress(st, ctx, p):
    obj, d, _ = _push_geometry(st, ctx)
    pre = np.array([*(obj - d * (_radius(ctx) + 0.03)), PUSH_Z])
    return _close(float(np.linalg.norm(st["ee_pos"] - pre)), REACH_SCALE)


def _push_yaw_error(st, ctx) -> float:
    _, d, _ = _push_geometry(st, ctx)
    return abs(_wrap_half(gripper_yaw(st["ee_quat"]) - math.atan2(d[1], d[0])))


def _push_contact_progress(st, ctx, p):
    if st["robot_contact"][ctx.bindings["target"]]:
        return 1.0
    obj, d, _ = _push_geometry(st, ctx)
    face = np.array([*(obj - d * (_radius(ctx) + 0.008)), PUSH_Z])
    return _close(float(np.linalg.norm(st["ee_pos"] - face)), REACH_SCALE)


def _push_fraction(st, ctx) -> float:
    start = _push_start_dist(ctx)
    return (start - _push_geometry(st, ctx)[2]) / max(start, 1e-6)


def _push_to_radius_progress(st, ctx, radius: float) -> float:
    start = _push_start_dist(ctx)
    return float(np.clip((start - _push_geometry(st, ctx)[2]) / max(start - radius, 1e-3), 0.0, 1.0))


# -- shared constructors --------------------------------------------------------------------------------
def _yaw_predicate(
    error: Callable[[State, SceneContext], float], near: Callable[[State, SceneContext], float], doc: str
) -> Predicate:
    """Yaw within `tol` while within `dist` of the anchor (`near` gives the distance): aligned on approach."""
    return Predicate(
        "align_yaw",
        lambda st, ctx, p: error(st, ctx) <= p["tol"] and near(st, ctx) <= p["dist"],
        lambda st, ctx, p: (
            0.5 * _close(error(st, ctx) - p["tol"], math.pi / 2 - p["tol"])
            + 0.5 * _close(near(st, ctx) - p["dist"], REACH_SCALE)
        ),
        {"tol": Param(0.15, 0.02, math.pi / 2, math.pi / 2), "dist": Param(0.08, 0.005, 0.3, 0.3)},
        "tol",
        doc=doc,
    )


def _pre_push_dist(st, ctx) -> float:
    obj, d, _ = _push_geometry(st, ctx)
    return float(np.linalg.norm(st["ee_pos"] - np.array([*(obj - d * (_radius(ctx) + 0.03)), PUSH_Z])))


def _contact_predicate(index: Callable[[SceneContext], int], progress, doc: str) -> Predicate:
    return Predicate("contact", lambda st, ctx, p: bool(st["robot_contact"][index(ctx)]), progress, doc=doc)


_OBJECT_LIBRARY = (
    Predicate(
        "reach",
        _obj_reach,
        _obj_reach_progress,
        {"dist": Param(0.03, 0.005, 0.2, 0.2)},
        "dist",
        doc="end effector within `dist` of the object (horizontally, and at most `dist` above its top)",
    ),
    Predicate(
        "pregrasp_open",
        _obj_pregrasp,
        _obj_pregrasp_progress,
        {"width": Param(0.07, 0.01, MAX_GRIP, 0.0), "dist": Param(0.04, 0.005, 0.2, 0.2)},
        "width",
        doc="fingers opened to at least `width` while within `dist` of the object",
    ),
    _yaw_predicate(
        _obj_yaw_error,
        _obj_near,
        "gripper yaw within `tol` of the object's grasp yaw (narrow side), within reach `dist`",
    ),
    Predicate(
        "grasp",
        lambda st, ctx, p: _grasped(st, ctx),
        _obj_grasp_progress,
        doc="both fingers touch the object",
    ),
    Predicate(
        "lift",
        _obj_lift,
        _obj_lift_progress,
        {"height": Param(0.04, 0.005, 0.3, 0.0)},
        "height",
        doc="grasped and raised at least `height` above its settled height",
    ),
    Predicate(
        "align_xy",
        _obj_align_xy,
        _obj_align_xy_progress,
        {"radius": Param(0.05, 0.003, 0.4, 0.4)},
        "radius",
        doc="object centre within `radius` of the goal (container / base) and above its support",
    ),
    Predicate(
        "lower",
        _obj_lower,
        _obj_lower_progress,
        {"height": Param(0.02, 0.0, 0.2, 0.2), "radius": Param(0.05, 0.003, 0.4, 0.4)},
        "height",
        doc="object over the goal (`radius`) with its bottom at most `height` above the support",
    ),
)

LIBRARY: dict[str, dict[str, Predicate]] = {
    "pick_place": {p.name: p for p in _OBJECT_LIBRARY},
    "stack": {p.name: p for p in _OBJECT_LIBRARY},
    "drawer": {
        p.name: p
        for p in (
            Predicate(
                "reach",
                lambda st, ctx, p: _handle_dist(st, ctx) <= p["dist"],
                lambda st, ctx, p: _close(_handle_dist(st, ctx) - p["dist"], REACH_SCALE),
                {"dist": Param(0.03, 0.005, 0.2, 0.2)},
                "dist",
                doc="end effector within `dist` of the handle",
            ),
            _yaw_predicate(
                _handle_yaw_error,
                _handle_dist,
                "gripper yaw within `tol` of the handle's grasp yaw, within `dist` of the handle",
            ),
            Predicate(
                "pregrasp_open",
                lambda st, ctx, p: st["grip"][0] >= p["width"] and _handle_dist(st, ctx) <= p["dist"],
                lambda st, ctx, p: (
                    0.5 * _close(_handle_dist(st, ctx) - p["dist"], REACH_SCALE)
                    + 0.5 * min(1.0, st["grip"][0] / p["width"])
                ),
                {"width": Param(0.07, 0.01, MAX_GRIP, 0.0), "dist": Param(0.05, 0.005, 0.2, 0.2)},
                "width",
                variants=("open",),
                doc="fingers opened to at least `width` within `dist` of the handle",
            ),
            Predicate(
                "grasp",
                lambda st, ctx, p: _grasped(st, ctx, _cabinet(ctx)),
                lambda st, ctx, p: (
                    0.5 * _close(_handle_dist(st, ctx), REACH_SCALE)
                    + 0.5 * float(st["finger_contact"][_cabinet(ctx)].mean())
                ),
                variants=("open",),
                doc="both fingers touch the cabinet (the handle bar)",
            ),
            Predicate(
                "contact",
                _drawer_engaged,
                lambda st, ctx, p: _close(
                    float(np.linalg.norm(st["ee_pos"] - _touch_point(st, ctx))), REACH_SCALE
                ),
                doc="the robot touches the cabinet, or holds the drawer front having moved the drawer",
            ),
            Predicate(
                "drawer_open_frac",
                lambda st, ctx, p: _frac(st, ctx) >= p["frac"],
                lambda st, ctx, p: _drawer_open_progress(st, ctx, p["frac"]),
                {"frac": Param(0.3, 0.02, OPEN_FRAC, 0.0)},
                "frac",
                variants=("open",),
                doc="drawer pulled out to at least `frac` of its travel",
            ),
            Predicate(
                "drawer_close_frac",
                lambda st, ctx, p: _frac(st, ctx) <= p["frac"],
                lambda st, ctx, p: _drawer_close_progress(st, ctx, p["frac"]),
                {"frac": Param(0.4, CLOSED_FRAC, 1.0, 1.0)},
                "frac",
                variants=("close",),
                doc="drawer pushed in to at most `frac` of its travel",
            ),
        )
    },
    "push": {
        p.name: p
        for p in (
            Predicate(
                "reach",
                _push_reach,
                _push_reach_progress,
                {"dist": Param(0.04, 0.005, 0.2, 0.2), "lateral": Param(0.025, 0.005, 0.1, 0.1)},
                "lateral",
                doc="end effector low behind the object on the object->goal line (within `lateral` of it, "
                "at most `dist` behind the object's edge)",
            ),
            _yaw_predicate(
                _push_yaw_error,
                _pre_push_dist,
                "gripper yaw across the push direction within `tol` "
                "(a flat pushing face), within `dist` of the pre-push point",
            ),
            _contact_predicate(
                lambda ctx: ctx.bindings["target"], _push_contact_progress, "the robot touches the object"
            ),
            Predicate(
                "push_progress",
                lambda st, ctx, p: _push_fraction(st, ctx) >= p["frac"],
                lambda st, ctx, p: float(np.clip(_push_fraction(st, ctx) / p["frac"], 0.0, 1.0)),
                {"frac": Param(0.5, 0.02, 0.95, 0.0)},
                "frac",
                doc="object moved at least `frac` of its initial distance toward the goal",
            ),
            Predicate(
                "align_xy",
                lambda st, ctx, p: _push_geometry(st, ctx)[2] <= p["radius"],
                lambda st, ctx, p: _push_to_radius_progress(st, ctx, p["radius"]),
                {"radius": Param(0.08, GOAL_TOL, 0.4, 0.4)},
                "radius",
                doc="object centre within `radius` of the goal",
            ),
        )
    },
}

VERIFIER_PROGRESS: dict[str, Callable[[State, SceneContext, dict], float]] = {
    "pick_place": _obj_verifier_progress,
    "stack": _obj_verifier_progress,
    "drawer": _drawer_verifier_progress,
    "push": lambda st, ctx, p: _push_to_radius_progress(st, ctx, GOAL_TOL),
}

# The subgoal a refinement inserts when rollouts stall in the verifier's own stage (variant -> subgoal).
# `limit`: the hardest useful value, toward which repeated splits of the verifier's stage interpolate.
VERIFIER_SPLIT: dict[str, dict[str, dict]] = {
    "pick_place": {"*": {"predicate": "lower", "params": {"height": 0.04, "radius": 0.05}, "limit": 0.0}},
    "stack": {"*": {"predicate": "lower", "params": {"height": 0.03, "radius": 0.015}, "limit": 0.0}},
    "drawer": {
        "open": {"predicate": "drawer_open_frac", "params": {"frac": 0.45}, "limit": OPEN_FRAC},
        "close": {"predicate": "drawer_close_frac", "params": {"frac": 0.25}, "limit": CLOSED_FRAC},
    },
    "push": {"*": {"predicate": "push_progress", "params": {"frac": 0.75}, "limit": 0.9}},
}


def library(family: str, variant: str | None = None) -> dict[str, Predicate]:
    """The predicates available to a family (and task variant)."""
    if family not in LIBRARY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(LIBRARY)}")
    return {
        k: v
        for k, v in LIBRARY[family].items()
        if variant is None or v.variants is None or variant in v.variants
    }


def library_spec(family: str, variant: str | None = None) -> dict[str, Any]:
    """The predicate library as plain JSON (names, meanings, parameter defaults and bounds): what a program
    writer (template or LLM) may use, e.g. to put in a prompt."""
    return {
        name: {
            "doc": pred.doc,
            "params": {k: {"default": p.default, "min": p.lo, "max": p.hi} for k, p in pred.params.items()},
            "variants": list(pred.variants) if pred.variants else list(REGISTRY[family].variants),
        }
        for name, pred in library(family, variant).items()
    }
