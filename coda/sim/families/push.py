"""push: push an object (non-prehensile, gripper closed) into a flat goal region."""

from __future__ import annotations

import math

import numpy as np

from coda.sim import exact_math
from coda.sim.families.base import (
    Family,
    Phase,
    SceneContext,
    State,
    Waypoint,
    WaypointPlanner,
    slot,
    uniform,
    yaw_of,
)
from coda.sim.families.naming import describe
from coda.sim.scene import ObjectSpec, Pose, SceneSpec
from coda.sim.tasks import PUSH

GOAL_TOL = 0.04  # success: object centre within this of the goal
PUSH_Z = 0.022


def _goal(ctx: SceneContext) -> np.ndarray:
    return np.array(ctx.goal[:2])


def _radius(ctx: SceneContext) -> float:
    h = ctx.half_extents[ctx.bindings["target"]]
    return float(math.hypot(h[0], h[1]))


def _dist(st: State, ctx: SceneContext) -> float:
    return exact_math.norm(st["obj_pos"][ctx.bindings["target"]][:2] - _goal(ctx))


def _behind(st: State, ctx: SceneContext) -> bool:
    i = ctx.bindings["target"]
    obj = ctx.init_pos[i][:2]
    d = _goal(ctx) - obj
    d /= max(exact_math.norm(d), 1e-9)
    rel = st["ee_pos"][:2] - st["obj_pos"][i][:2]
    along, across = exact_math.dot(rel, d), float(abs(rel[0] * d[1] - rel[1] * d[0]))
    return along < -_radius(ctx) + 0.005 and across < 0.025 and st["ee_pos"][2] < 0.05


def _contact(st: State, ctx: SceneContext) -> bool:
    return bool(st["robot_contact"][ctx.bindings["target"]])


def _halfway(st: State, ctx: SceneContext) -> bool:
    i = ctx.bindings["target"]
    return _dist(st, ctx) <= 0.5 * exact_math.norm(ctx.init_pos[i][:2] - _goal(ctx))


def _arrived(st: State, ctx: SceneContext) -> bool:
    return _dist(st, ctx) < GOAL_TOL


class Push(Family):
    rules = PUSH
    factors = (
        "target_position",
        "target_yaw",
        "goal_offset",
        "scale",
        "mass",
        "friction",
        "distractors",
        "instance",
        "instruction",
    )
    primary_role = "target"
    phase_factors = {
        "reach": ("target_position", "target_yaw", "distractors", "instruction"),
        "contact": ("target_yaw", "scale", "instance", "target_position"),
        "push": ("goal_offset", "friction", "mass", "target_yaw"),
        "arrive": ("goal_offset", "friction", "mass", "scale"),
    }
    goal_box = ((0.32, 0.7), (-0.32, 0.32))  # (x, y) ranges the goal region is kept in

    @classmethod
    def asset_ok(cls, asset) -> bool:
        he = asset.half_extents
        return asset.shape in ("box", "cylinder") and max(he[0], he[1]) <= 0.04 and 0.015 <= he[2] <= 0.05

    @classmethod
    def sample(cls, rng: np.random.Generator, catalog, split: str = "seed") -> SceneSpec:
        sp = cls.space(split)
        pool = cls.pool(catalog, split)
        target = cls._object(rng, pool[int(rng.integers(len(pool)))], sp)
        variant = str(rng.choice(sp["variants"]))
        tx, ty = uniform(rng, sp["target_x"]), uniform(rng, sp["target_y"])
        dx, dy = uniform(rng, sp["goal_dx"]), uniform(rng, sp["goal_dy"])
        if variant == "sideways":  # the push runs mostly along y
            dx, dy = dy, math.copysign(max(abs(dx), 0.08), -ty if abs(ty) > 0.05 else dx)
        (gx_lo, gx_hi), (gy_lo, gy_hi) = cls.goal_box
        gx, gy = min(max(tx + dx, gx_lo), gx_hi), min(max(ty + dy, gy_lo), gy_hi)
        region = ObjectSpec(
            "fixture/region", "region", scale=1.0, mass=1.0, friction=1.0, rgba=(0.2, 0.7, 0.3, 1.0)
        )
        poses = [
            Pose(round(tx, 4), round(ty, 4), round(uniform(rng, sp["target_yaw"]), 4)),
            Pose(round(gx, 4), round(gy, 4), 0.0),
        ]
        dobj, dpose = cls._distractors(rng, catalog, split, sp, [(tx, ty, 0.06), (gx, gy, 0.08)])
        names = {"target": describe(target), "goal": "green target area"}
        task = cls._task(
            rng, split, variant, {"target": 0, "goal": 1}, names, goal=(round(gx, 4), round(gy, 4))
        )
        return cls._spec(task, [target, region, *dobj], poses + dpose)

    @classmethod
    def phases(cls, variant: str) -> list[Phase]:
        return [
            Phase("reach", _behind),
            Phase("contact", _contact),
            Phase("push", _halfway),
            Phase("arrive", _arrived),
        ]

    @classmethod
    def success(cls, state: State, ctx: SceneContext) -> bool:
        return _arrived(state, ctx)

    @classmethod
    def role_features(cls, state: State, ctx: SceneContext):
        i, g = ctx.bindings["target"], ctx.bindings["goal"]
        slots = [
            slot(state["obj_pos"][i], yaw_of(state["obj_quat"][i]), ctx.half_extents[i]),
            slot(state["obj_pos"][g], 0.0, ctx.half_extents[g]),
        ]
        return slots, np.array([*_goal(ctx), GOAL_TOL, 0.0])

    @classmethod
    def planner(cls, ctx: SceneContext) -> PushPlanner:
        return PushPlanner(ctx)


class PushPlanner(WaypointPlanner):
    def plan(self, st: State) -> list[Waypoint]:
        ctx = self.ctx
        i = ctx.bindings["target"]
        obj, goal = st["obj_pos"][i][:2], _goal(ctx)
        d = goal - obj
        dist = exact_math.norm(d)
        d = d / max(dist, 1e-9)
        r = _radius(ctx)
        yaw = math.atan2(d[1], d[0])  # fingers across the push direction: a flat pushing face
        start = obj - d * (r + 0.03)
        if self.index == 2:
            rel = st["ee_pos"][:2] - obj
            if abs(rel[0] * d[1] - rel[1] * d[0]) > 0.015 or exact_math.dot(rel, d) > 0:
                self.index, self.held, self.steps_on = 0, 0, 0  # drifted off the push line: re-approach
        end = goal - d * (r + 0.008)
        return [
            Waypoint(np.array([*start, 0.1]), yaw, -1.0, tol=0.01),
            Waypoint(np.array([*start, PUSH_Z]), yaw, -1.0, tol=0.004),
            Waypoint(np.array([*end, PUSH_Z]), yaw, -1.0, tol=0.004, speed=0.35, max_steps=60),
            Waypoint(np.array([*(end - d * 0.04), 0.1]), yaw, -1.0, tol=0.02),
        ]
