"""pick_place: put the target object into a bin (or onto a flat goal region)."""

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
    grasp_yaw,
    slot,
    uniform,
    yaw_of,
)
from coda.sim.families.naming import describe
from coda.sim.scene import ObjectSpec, Pose, SceneSpec
from coda.sim.tasks import PICK_PLACE

LIFT = 0.04  # an object counts as lifted this far above its settled height
CARRY_Z = 0.2


def in_container(pos: np.ndarray, ctx: SceneContext, margin: float = 0.0) -> bool:
    c = ctx.bindings["container"]
    cx, cy, _ = ctx.init_pos[c]
    if c in ctx.inner:
        yaw = ctx.goal[0] if ctx.goal else 0.0
        dx, dy = pos[0] - cx, pos[1] - cy
        lx = math.cos(yaw) * dx + math.sin(yaw) * dy
        ly = -math.sin(yaw) * dx + math.cos(yaw) * dy
        ix, iy, _ = ctx.inner[c]
        return abs(lx) <= ix - margin and abs(ly) <= iy - margin
    return math.hypot(pos[0] - cx, pos[1] - cy) <= ctx.half_extents[c][0] - margin


def _grasped(st: State, i: int) -> bool:
    return bool(st["finger_contact"][i].all())


# reach / grasp / lift of the object bound to `role`; shared by the families that pick something up
def reach(st: State, ctx: SceneContext, role: str = "target") -> bool:
    i = ctx.bindings[role]
    d = st["ee_pos"] - st["obj_pos"][i]
    return math.hypot(d[0], d[1]) < 0.03 and d[2] < ctx.half_extents[i][2] + 0.03


def grasp(st: State, ctx: SceneContext, role: str = "target") -> bool:
    return _grasped(st, ctx.bindings[role])


def lift(st: State, ctx: SceneContext, role: str = "target") -> bool:
    i = ctx.bindings[role]
    return _grasped(st, i) and st["obj_pos"][i][2] > ctx.init_pos[i][2] + LIFT


def _transport(st: State, ctx: SceneContext) -> bool:
    i = ctx.bindings["target"]
    return in_container(st["obj_pos"][i], ctx) and st["obj_pos"][i][2] > ctx.half_extents[i][2]


def _placed(st: State, ctx: SceneContext) -> bool:
    i = ctx.bindings["target"]
    pos = st["obj_pos"][i]
    resting = pos[2] < ctx.half_extents[i][2] + 0.03 and exact_math.norm(st["obj_vel"][i]) < 0.05
    return in_container(pos, ctx) and resting and not st["robot_contact"][i]


class PickPlace(Family):
    rules = PICK_PLACE
    factors = (
        "target_position",
        "target_yaw",
        "scale",
        "mass",
        "friction",
        "container_position",
        "distractors",
        "instance",
        "instruction",
    )
    primary_role = "target"
    phase_factors = {
        "reach": ("target_position", "distractors", "target_yaw", "instruction", "instance"),
        "grasp": ("target_yaw", "scale", "instance", "friction", "target_position"),
        "lift": ("mass", "friction", "scale", "instance"),
        "transport": ("container_position", "mass", "friction", "distractors"),
        "place": ("container_position", "scale", "instance", "target_yaw"),
    }
    separation = (("target", "container"), 0.15)
    mirrored = ("container",)  # the container goes left or right of the robot
    # the container each variant builds: (asset id, category, colour)
    containers = {
        "bin": ("fixture/bin", "bin", (0.55, 0.45, 0.35, 1.0)),
        "region": ("fixture/region", "region", (0.2, 0.7, 0.3, 1.0)),
    }

    @classmethod
    def asset_ok(cls, asset) -> bool:
        he = asset.half_extents
        return min(he[0], he[1]) <= 0.032 and 0.012 <= he[2] <= 0.07 and max(he[0], he[1]) <= 0.09

    @classmethod
    def sample(cls, rng: np.random.Generator, catalog, split: str = "seed") -> SceneSpec:
        sp = cls.space(split)
        pool = cls.pool(catalog, split)
        asset = pool[int(rng.integers(len(pool)))]
        target = cls._object(rng, asset, sp)
        variant = str(rng.choice(sp["variants"]))
        side = str(rng.choice(sp["container_side"]))
        cx = uniform(rng, sp["container_x"])
        cy = uniform(rng, sp["container_y"]) * (1 if side == "left" else -1)
        tx, ty = uniform(rng, sp["target_x"]), uniform(rng, sp["target_y"])
        if side == "right" and split not in ("layouts",):
            ty = -ty  # keep the target on the far side from the container
        cyaw = round(float(rng.uniform(-0.2, 0.2)), 4) if split == "generator" else 0.0
        asset_id, category, rgba = cls.containers["bin" if variant == "bin" else "region"]
        container = ObjectSpec(
            asset_id,
            category,
            scale=round(float(rng.uniform(0.95, 1.1)), 4),
            mass=1.0,
            friction=1.0,
            rgba=rgba,
        )
        poses = [
            Pose(round(tx, 4), round(ty, 4), round(uniform(rng, sp["target_yaw"]), 4)),
            Pose(round(cx, 4), round(cy, 4), cyaw),
        ]
        occupied = [(tx, ty, 0.06), (cx, cy, 0.14)]
        dobj, dpose = cls._distractors(rng, catalog, split, sp, occupied)
        names = {"target": describe(target), "container": "bin" if variant == "bin" else "green target area"}
        task = cls._task(rng, split, variant, {"target": 0, "container": 1}, names, goal=(cyaw,))
        return cls._spec(task, [target, container, *dobj], poses + dpose)

    @classmethod
    def phases(cls, variant: str) -> list[Phase]:
        return [
            Phase("reach", reach),
            Phase("grasp", grasp),
            Phase("lift", lift),
            Phase("transport", _transport),
            Phase("place", _placed),
        ]

    @classmethod
    def success(cls, state: State, ctx: SceneContext) -> bool:
        return _placed(state, ctx)

    @classmethod
    def role_features(cls, state: State, ctx: SceneContext):
        i, c = ctx.bindings["target"], ctx.bindings["container"]
        inner = ctx.inner.get(c, np.array([ctx.half_extents[c][0]] * 2 + [0.0]))
        slots = [
            slot(state["obj_pos"][i], yaw_of(state["obj_quat"][i]), ctx.half_extents[i]),
            slot(state["obj_pos"][c], ctx.goal[0], inner),
        ]
        goal = np.array([*ctx.init_pos[c][:2], float(c in ctx.inner), 0.0])
        return slots, goal

    @classmethod
    def planner(cls, ctx: SceneContext) -> PickPlacePlanner:
        return PickPlacePlanner(ctx)


class PickPlacePlanner(WaypointPlanner):
    GRASP, LIFT_WP = 2, 3

    def plan(self, st: State) -> list[Waypoint]:
        ctx = self.ctx
        i, c = ctx.bindings["target"], ctx.bindings["container"]
        if self.GRASP < self.index < 6 and not _grasped(st, i):
            self.index, self.held, self.steps_on = 0, 0, 0  # dropped it: start over from the object
        pos, half = st["obj_pos"][i], ctx.half_extents[i]
        yaw = grasp_yaw(yaw_of(st["obj_quat"][i]), half)
        top = pos[2] + half[2]
        grasp_z = max(pos[2] + min(0.0, half[2] - 0.025), 0.012)
        cp = ctx.init_pos[c]
        floor = ctx.inner[c][2] if c in ctx.inner else 0.0
        place_z = floor + 2 * half[2] + 0.02
        over = np.array([pos[0], pos[1], top + 0.07])
        return [
            Waypoint(over, yaw, 1.0, tol=0.01),
            Waypoint(np.array([pos[0], pos[1], grasp_z]), yaw, 1.0, tol=0.003, hold=2),
            Waypoint(np.array([pos[0], pos[1], grasp_z]), yaw, -1.0, hold=3),
            Waypoint(np.array([pos[0], pos[1], CARRY_Z]), yaw, -1.0, tol=0.02),
            Waypoint(np.array([cp[0], cp[1], CARRY_Z]), yaw, -1.0, tol=0.01),
            Waypoint(np.array([cp[0], cp[1], place_z]), yaw, -1.0, tol=0.005, hold=1),
            Waypoint(np.array([cp[0], cp[1], place_z]), yaw, 1.0, hold=2),
            Waypoint(np.array([cp[0], cp[1], CARRY_Z]), yaw, 1.0, tol=0.02),
        ]
