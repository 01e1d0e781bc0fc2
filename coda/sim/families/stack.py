"""stack: put one block on top of another."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from coda.sim import exact_math
from coda.sim.families.base import (
    Family,
    Phase,
    SceneContext,
    State,
    Waypoint,
    WaypointPlanner,
    grasp_yaw,
    slot,
    uniform,
    yaw_of,
)
from coda.sim.families.naming import describe
from coda.sim.families.pick_place import CARRY_Z, _grasped, grasp, lift, reach
from coda.sim.scene import Pose, SceneSpec
from coda.sim.tasks import STACK

CENTER_TOL = 0.012  # "on_center": the top block's centre within this of the base's


def _tops(st: State, ctx: SceneContext):
    t, b = ctx.bindings["top"], ctx.bindings["base"]
    return st["obj_pos"][t], st["obj_pos"][b], ctx.half_extents[t], ctx.half_extents[b]


def _xy_tol(ctx: SceneContext, hb: np.ndarray) -> float:
    return CENTER_TOL if ctx.variant == "on_center" else 0.8 * min(hb[0], hb[1])


def _align(st: State, ctx: SceneContext) -> bool:
    pt, pb, ht, hb = _tops(st, ctx)
    return math.hypot(*(pt[:2] - pb[:2])) < _xy_tol(ctx, hb) and pt[2] - ht[2] > pb[2] + hb[2] - 0.005


def _stacked(st: State, ctx: SceneContext) -> bool:
    pt, pb, ht, hb = _tops(st, ctx)
    t, b = ctx.bindings["top"], ctx.bindings["base"]
    on = abs(pt[2] - (pb[2] + hb[2] + ht[2])) < 0.012 and math.hypot(*(pt[:2] - pb[:2])) < _xy_tol(ctx, hb)
    base_upright = abs(pb[2] - ctx.init_pos[b][2]) < 0.01
    still = exact_math.norm(st["obj_vel"][t]) < 0.05
    return on and base_upright and still and not st["robot_contact"][t]


class Stack(Family):
    rules = STACK
    factors = (
        "top_position",
        "top_yaw",
        "base_position",
        "base_yaw",
        "scale",
        "mass",
        "friction",
        "distractors",
        "instance",
        "instruction",
    )
    primary_role = "top"
    separation = (("top", "base"), 0.1)
    phase_factors = {
        "reach": ("top_position", "distractors", "top_yaw", "instruction", "instance"),
        "grasp": ("top_yaw", "scale", "instance", "friction", "top_position"),
        "lift": ("mass", "friction", "scale", "instance"),
        "align": ("base_position", "base_yaw", "distractors", "top_yaw"),
        "place": ("base_yaw", "scale", "base_position", "instance"),
    }

    @classmethod
    def asset_ok(cls, asset) -> bool:
        he = asset.half_extents
        flat_top = asset.shape in ("box", "cylinder")
        return flat_top and max(he[0], he[1]) <= 0.032 and 0.012 <= he[2] <= 0.035

    @classmethod
    def sample(cls, rng: np.random.Generator, catalog, split: str = "seed") -> SceneSpec:
        sp = cls.space(split)
        pool = cls.pool(catalog, split)
        a_top, a_base = pool[int(rng.integers(len(pool)))], pool[int(rng.integers(len(pool)))]
        top, base = cls._object(rng, a_top, sp), cls._object(rng, a_base, sp)
        while True:
            tx, ty = uniform(rng, sp["top_x"]), uniform(rng, sp["top_y"])
            bx, by = uniform(rng, sp["base_x"]), uniform(rng, sp["base_y"])
            if math.hypot(tx - bx, ty - by) > 0.12:
                break
        poses = [
            Pose(round(tx, 4), round(ty, 4), round(uniform(rng, sp["top_yaw"]), 4)),
            Pose(round(bx, 4), round(by, 4), round(uniform(rng, sp["base_yaw"]), 4)),
        ]
        dobj, dpose = cls._distractors(rng, catalog, split, sp, [(tx, ty, 0.05), (bx, by, 0.05)])
        variant = str(rng.choice(sp["variants"]))
        names = {"top": describe(top), "base": describe(base)}
        if names["top"] == names["base"]:
            names["base"] = "other " + names["base"]
        task = cls._task(rng, split, variant, {"top": 0, "base": 1}, names)
        return cls._spec(task, [top, base, *dobj], poses + dpose)

    @classmethod
    def phases(cls, variant: str) -> list[Phase]:
        return [
            Phase("reach", partial(reach, role="top")),
            Phase("grasp", partial(grasp, role="top")),
            Phase("lift", partial(lift, role="top")),
            Phase("align", _align),
            Phase("place", _stacked),
        ]

    @classmethod
    def success(cls, state: State, ctx: SceneContext) -> bool:
        return _stacked(state, ctx)

    @classmethod
    def role_features(cls, state: State, ctx: SceneContext):
        t, b = ctx.bindings["top"], ctx.bindings["base"]
        slots = [slot(state["obj_pos"][i], yaw_of(state["obj_quat"][i]), ctx.half_extents[i]) for i in (t, b)]
        goal = np.array([0.0, 0.0, 0.0, float(ctx.variant == "on_center")])
        return slots, goal

    @classmethod
    def planner(cls, ctx: SceneContext) -> StackPlanner:
        return StackPlanner(ctx)


class StackPlanner(WaypointPlanner):
    def plan(self, st: State) -> list[Waypoint]:
        pt, pb, ht, hb = _tops(st, self.ctx)
        t = self.ctx.bindings["top"]
        if 2 < self.index < 6 and not _grasped(st, t):
            self.index, self.held, self.steps_on = 0, 0, 0
        yaw = grasp_yaw(yaw_of(st["obj_quat"][t]), ht)
        grasp_z = max(pt[2] + min(0.0, ht[2] - 0.02), 0.012)
        # while holding, the end effector sits (ee - obj) above the block's centre; keep that offset
        offset = st["ee_pos"][2] - pt[2] if _grasped(st, t) else grasp_z - pt[2]
        place_z = pb[2] + hb[2] + ht[2] + offset + 0.008
        # the block may sit off-centre between the fingers: aim the block, not the hand, at the base
        dest = st["ee_pos"][:2] + (pb[:2] - pt[:2]) if _grasped(st, t) else pb[:2]
        return [
            Waypoint(np.array([pt[0], pt[1], pt[2] + ht[2] + 0.07]), yaw, 1.0, tol=0.01),
            Waypoint(np.array([pt[0], pt[1], grasp_z]), yaw, 1.0, tol=0.003, hold=2),
            Waypoint(np.array([pt[0], pt[1], grasp_z]), yaw, -1.0, hold=3),
            Waypoint(np.array([pt[0], pt[1], CARRY_Z - 0.05]), yaw, -1.0, tol=0.02, speed=0.6),
            Waypoint(np.array([dest[0], dest[1], CARRY_Z - 0.05]), yaw, -1.0, tol=0.005, speed=0.6, hold=3),
            Waypoint(np.array([dest[0], dest[1], place_z]), yaw, -1.0, tol=0.003, speed=0.5, hold=2),
            Waypoint(np.array([dest[0], dest[1], place_z]), yaw, 1.0, hold=3),
            Waypoint(np.array([dest[0], dest[1], place_z + 0.1]), yaw, 1.0, tol=0.02),
        ]
