"""drawer: open or close one drawer of a procedurally generated cabinet (articulated, prismatic joint)."""

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
)
from coda.sim.scene import ObjectSpec, Pose, SceneSpec
from coda.sim.tasks import DRAWER, DRAWER_CLOSE_TEMPLATES

OPEN_FRAC = 0.6  # "open": the drawer is pulled out to at least this fraction of its travel
CLOSED_FRAC = 0.12  # "close": pushed back to at most this fraction
INIT_OPEN = (0.7, 0.9)  # "close" scenes start this far open
HOOK_RADIUS = 0.04  # a single finger in contact this close to the handle holds it (a hooked pull)
PART_NAMES = {
    1: ("",),
    2: ("bottom ", "top "),
    3: ("bottom ", "middle ", "top "),
    4: ("lowest ", "second ", "third ", "top "),
}


def _part(ctx: SceneContext) -> int:
    return int(round(ctx.goal[0]))


def _frac(st: State, ctx: SceneContext) -> float:
    k = _part(ctx)
    lo, hi = ctx.joint_limits[k]
    return float((st["art_q"][k] - lo) / max(hi - lo, 1e-9))


def _pull_dir(ctx: SceneContext) -> np.ndarray:
    """Unit vector (x, y) along which the drawer opens: the cabinet's local -x axis."""
    yaw = ctx.goal[2]
    return -np.array([math.cos(yaw), math.sin(yaw)])


# Each phase predicate holds in every state that a later phase's does, so a state the verifier accepts
# completes the whole phase chain at once: no success is ever recorded before the grasp (open) or the
# contact (close) phase (issue #15: successes had been recorded with phase_reached 0 or 1, drawers pulled
# open by one finger hooked on the handle, which the two-finger grasp predicate missed). Success requires
# the hand on the drawer: holding the handle when it opens (both fingers, or one hooked at the handle), in
# contact when it shuts; a drawer that slides on after the hand let go, or is pushed by the arm far from
# the handle, is not a success.
def _near_handle(st: State, ctx: SceneContext) -> bool:
    return exact_math.norm(st["ee_pos"] - st["handle_pos"][_part(ctx)]) < 0.03


def _grasp(st: State, ctx: SceneContext) -> bool:
    """The hand holds the handle: both fingers on the cabinet, or a finger hooked on it at the handle."""
    c = ctx.bindings["cabinet"]
    if st["finger_contact"][c].all():
        return True
    near = exact_math.norm(st["ee_pos"] - st["handle_pos"][_part(ctx)]) < HOOK_RADIUS
    return bool(st["finger_contact"][c].any()) and near


def _contact(st: State, ctx: SceneContext) -> bool:
    return bool(st["robot_contact"][ctx.bindings["cabinet"]])


def _reach_open(st: State, ctx: SceneContext) -> bool:
    return _near_handle(st, ctx) or _grasp(st, ctx)


def _reach_close(st: State, ctx: SceneContext) -> bool:
    return _near_handle(st, ctx) or _contact(st, ctx)


def _opened_some(st: State, ctx: SceneContext) -> bool:
    return _frac(st, ctx) >= 0.3


def _opened(st: State, ctx: SceneContext) -> bool:
    return _frac(st, ctx) >= OPEN_FRAC and _grasp(st, ctx)


def _closed_some(st: State, ctx: SceneContext) -> bool:
    k = _part(ctx)
    lo, hi = ctx.joint_limits[k]
    return _frac(st, ctx) <= max(0.5 * (ctx.init_art_q[k] - lo) / max(hi - lo, 1e-9), CLOSED_FRAC)


def _closed(st: State, ctx: SceneContext) -> bool:
    return _frac(st, ctx) <= CLOSED_FRAC and _contact(st, ctx)


def _wrap_half(a: float) -> float:
    return ((2 * a + math.pi) % (2 * math.pi) - math.pi) / 2


class Drawer(Family):
    rules = DRAWER
    factors = ("cabinet_position", "cabinet_yaw", "scale", "friction", "part", "instance", "instruction")
    primary_role = "cabinet"
    phase_factors = {
        "reach": ("cabinet_position", "cabinet_yaw", "instruction", "instance"),
        "grasp": ("cabinet_yaw", "instance", "scale", "cabinet_position"),
        "pull": ("friction", "cabinet_yaw", "instance", "scale"),
        "open": ("friction", "cabinet_yaw", "scale"),
        "contact": ("cabinet_yaw", "instance", "cabinet_position"),
        "push": ("friction", "cabinet_yaw", "scale"),
        "close": ("friction", "cabinet_yaw", "scale"),
    }
    close_templates = DRAWER_CLOSE_TEMPLATES

    @classmethod
    def asset_ok(cls, asset) -> bool:
        return getattr(asset, "joint_type", None) == "prismatic"

    @classmethod
    def instruction(cls, template_id: int, names: dict[str, str]) -> str:
        table = cls.close_templates if names.get("variant") == "close" else cls.templates
        return table[template_id].format(part=names["part"])

    @classmethod
    def sample(cls, rng: np.random.Generator, catalog, split: str = "seed") -> SceneSpec:
        sp = cls.space(split)
        pool = cls.pool(catalog, split, kind="articulated")
        asset = pool[int(rng.integers(len(pool)))]
        cab = ObjectSpec(
            asset.asset_id,
            asset.category,
            scale=round(uniform(rng, sp["scale"]), 4),
            mass=5.0,
            friction=round(uniform(rng, sp["friction"]), 4),
            rgba=tuple(round(float(c), 3) for c in rng.uniform(0.3, 0.9, size=3)) + (1.0,),
        )
        # the top drawer: a top-down grasp of a lower handle is blocked by the handles above it
        part = asset.n_movable - 1
        variant = str(rng.choice(sp["variants"]))
        init = round(float(rng.uniform(*INIT_OPEN)), 4) if variant == "close" else 0.0
        yaw = round(uniform(rng, sp["cabinet_yaw"]), 4)
        pose = Pose(round(uniform(rng, sp["cabinet_x"]), 4), round(uniform(rng, sp["cabinet_y"]), 4), yaw)
        names = {"part": PART_NAMES[asset.n_movable][part], "variant": variant}
        task = cls._task(rng, split, variant, {"cabinet": 0}, names, goal=(float(part), init, yaw))
        return cls._spec(task, [cab], [pose])

    @classmethod
    def phases(cls, variant: str) -> list[Phase]:
        if variant == "open":
            return [
                Phase("reach", _reach_open),
                Phase("grasp", _grasp),
                Phase("pull", _opened_some),
                Phase("open", _opened),
            ]
        return [
            Phase("reach", _reach_close),
            Phase("contact", _contact),
            Phase("push", _closed_some),
            Phase("close", _closed),
        ]

    @classmethod
    def success(cls, state: State, ctx: SceneContext) -> bool:
        return _opened(state, ctx) if ctx.variant == "open" else _closed(state, ctx)

    @classmethod
    def role_features(cls, state: State, ctx: SceneContext):
        k, c = _part(ctx), ctx.bindings["cabinet"]
        slots = [
            slot(state["handle_pos"][k], ctx.goal[2], np.array([0.0, 0.0, 0.0])),
            slot(state["obj_pos"][c], ctx.goal[2], ctx.half_extents[c]),
        ]
        goal = np.array([_frac(state, ctx), float(ctx.variant == "open"), *_pull_dir(ctx)])
        return slots, goal

    @classmethod
    def planner(cls, ctx: SceneContext) -> DrawerPlanner:
        return DrawerPlanner(ctx)


class DrawerPlanner(WaypointPlanner):
    """Open: straddle the handle bar from above, close, pull along the slide axis, release.
    Close: put the closed fingers against the bar from the robot's side and push it home."""

    def plan(self, st: State) -> list[Waypoint]:
        ctx = self.ctx
        k = _part(ctx)
        h = st["handle_pos"][k]
        d = _pull_dir(ctx)
        lo, hi = ctx.joint_limits[k]
        travel = hi - lo
        # fingers close across the vertical bar, parallel to the drawer front (half-turn symmetric gripper)
        yaw = _wrap_half(math.atan2(d[1], d[0]))
        if ctx.variant == "open":
            if 2 < self.index < 4 and not _grasp(st, ctx):
                self.index, self.held, self.steps_on = 0, 0, 0
            remaining = (OPEN_FRAC + 0.15) * travel - (st["art_q"][k] - lo)
            pull_to = np.array([*(h[:2] + d * max(remaining, 0.0)), h[2]])
            return [
                Waypoint(np.array([h[0], h[1], h[2] + 0.08]), yaw, 1.0, tol=0.01),
                Waypoint(h.copy(), yaw, 1.0, tol=0.003, hold=2, speed=0.5),
                Waypoint(h.copy(), yaw, -1.0, hold=3),
                Waypoint(pull_to, yaw, -1.0, tol=0.004, speed=0.4, max_steps=60),
                Waypoint(pull_to, yaw, 1.0, hold=2),
                Waypoint(pull_to + np.array([0.0, 0.0, 0.08]), yaw, 1.0, tol=0.02),
            ]
        # close: closed fingers dropped just in front of the bar, then pushed along the slide axis
        touch = np.array([*(h[:2] + d * 0.025), h[2]])
        push_to = touch - np.array([*(d * ((st["art_q"][k] - lo) + 0.03)), 0.0])
        return [
            Waypoint(touch + np.array([0.0, 0.0, 0.08]), yaw, -1.0, tol=0.01),
            Waypoint(touch, yaw, -1.0, tol=0.004, hold=1, speed=0.5),
            Waypoint(push_to, yaw, -1.0, tol=0.004, speed=0.4, max_steps=60),
            Waypoint(push_to + np.array([0.0, 0.0, 0.08]), yaw, -1.0, tol=0.02),
        ]
