"""Rollout evidence: detectors that read a failed rollout and say which factors its events point to.

Each detector looks at the per-step quantities of a `RolloutRecord` (`_Rollout`: grasps, losses, lift,
distances) for one kind of event: a grasp lost in the air or on the table, a slip, an object too wide for
the gripper, a gripper closed beside the object, a distractor touched, a target never reached, a push that
overshoots or stops short, a drawer that does not move, a carried object that misses its goal, and scene
repairs in the construction trace. Each finding is an `Evidence`: a sentence quoting the rollout, the
steps it refers to and the factors it supports, with a weight in [0, 1]. `collect_evidence` runs them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coda.learn.predicates import _wrap_half, gripper_yaw
from coda.memory.factors import PRIMARY_ROLE, factor_name
from coda.sim.families.base import SceneContext, grasp_yaw, yaw_of
from coda.sim.families.push import GOAL_TOL
from coda.sim.rollout import RolloutRecord
from coda.sim.scene import SceneSpec

GRIPPER_SPAN = 0.08  # widest object the open Panda fingers can straddle (m)


@dataclass(frozen=True)
class Evidence:
    """One observation in the rollout and the factors it supports (support in [0, 1])."""

    kind: str
    text: str
    steps: tuple[int, ...]  # control steps it refers to (empty for properties of the scene)
    support: dict[str, float]
    at: int | None = None  # when it happened, if not its first step

    @property
    def onset(self) -> int | None:
        return self.at if self.at is not None else (min(self.steps) if self.steps else None)


class _Rollout:
    """Per-step quantities of a record the detectors share."""

    def __init__(self, record: RolloutRecord, scene: SceneSpec) -> None:
        self.rec, self.scene = record, scene
        self.family = record.family
        self.ctx: SceneContext = record.context()
        self.s = record.states
        self.T = record.steps
        self.role = PRIMARY_ROLE[self.family]
        self.obj = self.ctx.bindings[self.role]
        # gripper command in force during the step that ended at t (t >= 1); open at t = 0
        self.closed_cmd = (
            np.concatenate([[False], record.actions[:, 6] <= 0]) if self.T else np.array([False])
        )
        # held: both fingers on the object while commanded closed (open fingers brushing it do not count)
        self.grasped = self.s["finger_contact"][:, self.obj].all(axis=1) & self.closed_cmd  # (T+1,)
        self.distractors = [i for i in range(len(scene.objects)) if i not in set(self.ctx.bindings.values())]

    def f(self, attr: str, role: str | None = None) -> str | None:
        """The family's factor for an attribute (of `role`, default the manipulated one), if any."""
        return factor_name(self.family, self.role if role is None else role, attr)

    def support(self, pairs: dict[tuple[str, str | None], float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for (attr, role), w in pairs.items():
            name = self.f(attr, role)
            if name is not None:
                out[name] = max(out.get(name, 0.0), w)
        return out

    def target_point(self, t: int) -> np.ndarray:
        """What the end effector must get to: the drawer's handle, else the manipulated object."""
        if self.family == "drawer":
            return self.s["handle_pos"][t][int(round(self.ctx.goal[0]))]
        return self.s["obj_pos"][t][self.obj]

    def goal_xy(self, t: int) -> np.ndarray:
        """Where pick_place / stack must bring the object: the container, or the base's current place."""
        if self.family == "pick_place":
            return self.ctx.init_pos[self.ctx.bindings["container"]][:2]
        return self.s["obj_pos"][t][self.ctx.bindings["base"]][:2]

    def losses(self) -> list[int]:
        """Steps at which a held object left the fingers (for at least two steps, or at the end)."""
        g = self.grasped
        return [t for t in range(1, self.T + 1) if g[t - 1] and not g[t] and (t == self.T or not g[t + 1])]

    def final_loss(self) -> int | None:
        """The step the object was lost for good (never grasped again), if it was."""
        losses = self.losses()
        return losses[-1] if losses and not self.grasped[losses[-1] :].any() else None

    def air_losses(self) -> list[int]:
        """Losses while the object was off the table (drops), pick_place and stack only."""
        if self.family not in ("pick_place", "stack"):
            return []
        return [t for t in self.losses() if self.lift(t - 1) >= 0.01]

    def lift(self, t: int) -> float:
        return float(self.s["obj_pos"][t][self.obj][2] - self.ctx.init_pos[self.obj][2])


def _cm(x: float) -> str:
    return f"{100 * x:.1f} cm"


def _lost_grasp(r: _Rollout) -> Evidence | None:
    """The object was held and then lost: dropped in the air, lost for good, or slipped and re-grasped."""
    if r.family == "push":  # pushing keeps the gripper closed: finger contacts are not grasps
        return None
    drops, final = r.air_losses(), r.final_loss()
    if not drops and final is None:
        return _slipped(r)  # lost on the table and grasped again: only slips tell anything
    t = drops[-1] if drops else final
    held = t - 1  # start of the grasp that ended at t
    while held > 0 and r.grasped[held - 1]:
        held -= 1
    slipped = bool(r.closed_cmd[t])
    how = "slipped from the closed gripper" if slipped else "was released (gripper commanded open)"
    w = 1.0 if slipped else 0.7
    if r.family == "drawer":
        frac = max(_drawer_frac(r, t), 0.0)
        text = f"the handle grasped at step {held} {how} at step {t} with the drawer {frac:.0%} open"
        sup = {("friction", None): w, ("yaw", "cabinet"): 0.6 * w, ("scale", None): 0.3 * w}
        return Evidence("lost_grasp", text, (held, t), r.support(sup), at=t)
    height = r.lift(t - 1)
    if height < 0.01:  # lost on the table: the grasp itself did not hold
        text = f"the object grasped at step {held} {how} at step {t} before it left the table"
        sup = {("friction", None): 0.8 * w, ("scale", None): 0.6 * w, ("yaw", r.role): 0.5 * w}
        return Evidence("lost_grasp", text, (held, t), r.support(sup), at=t)
    dest_role = "container" if r.family == "pick_place" else "base"
    start, goal = r.ctx.init_pos[r.obj][:2], r.goal_xy(t - 1)
    to_go = float(np.linalg.norm(r.s["obj_pos"][t - 1][r.obj][:2] - goal))
    covered = 1.0 - to_go / max(float(np.linalg.norm(goal - start)), 1e-9)
    where = f"{_cm(height)} up and {_cm(to_go)} from the {dest_role}"
    text = f"the object grasped at step {held} {how} at step {t}, {where}"
    if slipped or covered < 0.5:  # fell on the way: the grip could not hold the object
        sup = {
            ("mass", None): w,
            ("friction", None): 0.9 * w,
            ("scale", None): 0.3 * w,
            ("instance", None): 0.3 * w,
        }
    else:  # let go deliberately, but short of the goal: the goal was misjudged
        sup = {("position", dest_role): w, ("yaw", dest_role): 0.3 * w, ("mass", None): 0.4 * w}
    return Evidence("dropped", text, (held, t), r.support(sup), at=t)


def _slipped(r: _Rollout) -> Evidence | None:
    """The object slipped out of the closed fingers (and was grasped again later)."""
    slips = [t for t in r.losses() if r.closed_cmd[t]]
    if not slips:
        return None
    airborne = r.family != "drawer" and r.lift(slips[0] - 1) >= 0.01
    where = "in the air" if airborne else "while held"
    text = (
        f"the object slipped from the closed gripper {where} {len(slips)} time(s), first at step {slips[0]}"
    )
    sup = {("friction", None): 1.0, ("mass", None): 0.9 if airborne else 0.5, ("scale", None): 0.3}
    if r.family == "drawer":
        sup[("yaw", "cabinet")] = 0.5
    return Evidence("slip", text, tuple(slips[:3]), r.support(sup))


def _too_wide(r: _Rollout) -> Evidence | None:
    """pick_place / stack: the object's narrow side is close to (or over) the gripper's span."""
    if r.family not in ("pick_place", "stack"):
        return None
    half = r.ctx.half_extents[r.obj]
    width = 2 * float(min(half[0], half[1]))
    if width < GRIPPER_SPAN - 0.015:
        return None
    text = f"the object is {_cm(width)} across its narrow side for a {_cm(GRIPPER_SPAN)} gripper"
    tight = min(1.0, (width - (GRIPPER_SPAN - 0.015)) / 0.015)
    return Evidence(
        "too_wide", text, (), r.support({("scale", None): 0.5 + 0.5 * tight, ("instance", None): 0.5})
    )


def _closed_beside(r: _Rollout) -> Evidence | None:
    """The gripper closed without the fingers on the object: where it was, how it was turned, how wide."""
    if r.family == "push" or (r.family == "drawer" and r.ctx.variant == "close"):
        return None
    closes = [t for t in range(1, r.T + 1) if r.closed_cmd[t] and not r.closed_cmd[t - 1]]
    misses = [t for t in closes if not r.grasped[t : min(t + 4, r.T) + 1].any()]
    if not misses:
        return None
    t = misses[0] - 1  # the state in which the close was commanded
    after_loss = any(loss <= t for loss in r.losses())  # a retry after a slip or drop: partly a consequence
    rel = r.s["ee_pos"][t] - r.target_point(t)
    xy = float(math.hypot(rel[0], rel[1]))
    if r.family == "drawer":
        text = f"the gripper closed at step {t + 1} {_cm(xy)} beside the handle ({_cm(rel[2])} above it)"
        sup = {("position", "cabinet"): min(1.0, xy / 0.02), ("yaw", "cabinet"): 0.5, ("instance", None): 0.4}
        return Evidence("closed_beside", text, (t + 1,), r.support(sup))
    half = r.ctx.half_extents[r.obj]
    yaw_err = abs(
        _wrap_half(gripper_yaw(r.s["ee_quat"][t]) - grasp_yaw(yaw_of(r.s["obj_quat"][t][r.obj]), half))
    )
    width = 2 * float(min(half[0], half[1]))
    parts, sup = [], {}
    if width > GRIPPER_SPAN - 0.005:
        parts.append(f"the object is {_cm(width)} wide")
        sup.update({("scale", None): 1.0, ("instance", None): 0.6})
    if xy > 0.012:
        parts.append(f"{_cm(xy)} off the object centre")
        sup[("position", r.role)] = min(1.0, xy / 0.03)
    if yaw_err > 0.25:
        parts.append(f"turned {math.degrees(yaw_err):.0f} deg from the grasp yaw")
        sup[("yaw", r.role)] = min(1.0, yaw_err / 0.6)
    if not parts:
        parts.append(f"{_cm(rel[2])} above the object centre")
        sup.update({("position", r.role): 0.5, ("scale", None): 0.5, ("instance", None): 0.5})
    text = f"the gripper closed on nothing at step {t + 1}: " + ", ".join(parts)
    if after_loss:
        sup = {k: 0.5 * v for k, v in sup.items()}
    return Evidence("closed_beside", text, (t + 1,), r.support(sup))


def _touched_distractor(r: _Rollout) -> Evidence | None:
    """The robot touched, or something displaced, an object bound to no role."""
    if not r.distractors:
        return None
    idx = np.array(r.distractors)
    contact_steps = np.flatnonzero(r.s["robot_contact"][:, idx].any(axis=1))
    moved = np.linalg.norm(r.s["obj_pos"][-1][idx, :2] - r.s["obj_pos"][0][idx, :2], axis=1)
    if not len(contact_steps) and moved.max() < 0.02:
        return None
    if len(contact_steps):
        first, n = int(contact_steps[0]), len(contact_steps)
        text = f"the robot touched a distractor at step {first} ({n} steps in contact)"
        return Evidence(
            "distractor",
            text,
            (first, int(contact_steps[-1])),
            r.support({("distractors", None): 1.0}),
        )
    # knocked by something else (e.g. a dropped object rolling into it): a consequence more than a cause
    text = f"a distractor was knocked {_cm(float(moved.max()))} out of place"
    return Evidence("distractor", text, (r.T,), r.support({("distractors", None): 0.4}))


def _never_reached(r: _Rollout) -> Evidence | None:
    """The end effector never got to the object (or handle): how close it came, and whether it moved."""
    d = np.array([np.linalg.norm(r.s["ee_pos"][t] - r.target_point(t)) for t in range(r.T + 1)])
    t_min = int(np.argmin(d))
    if d[t_min] < 0.05:
        return None
    travel = float(np.linalg.norm(r.s["ee_pos"][-1] - r.s["ee_pos"][0]))
    if r.distractors:
        dd = np.linalg.norm(r.s["ee_pos"][:, None] - r.s["obj_pos"][:, r.distractors], axis=2).min()
        if dd < d[t_min] - 0.02:
            text = (
                f"the end effector went {_cm(float(dd))} from a distractor "
                f"but no closer than {_cm(d[t_min])} to the target"
            )
            sup = {("distractors", None): 1.0, ("instruction", None): 0.6}
            return Evidence("wrong_object", text, (t_min, r.T), r.support(sup))
    if travel < 0.02:
        text = f"the end effector stayed put ({_cm(travel)} of travel), {_cm(d[-1])} from the target"
        sup = {("position", r.role): 0.5, ("instruction", None): 0.3}
    else:
        text = f"the end effector came no closer than {_cm(d[t_min])} to the target (step {t_min})"
        sup = {("position", r.role): 0.9, ("yaw", r.role): 0.3}
    return Evidence("far", text, (t_min, r.T), r.support(sup))


def _push_outcome(r: _Rollout) -> Evidence | None:
    """Where the pushed object ended relative to the push line: short, past, off to the side, or unmoved."""
    if r.family != "push":
        return None
    p0, pT = r.s["obj_pos"][0][r.obj][:2], r.s["obj_pos"][-1][r.obj][:2]
    goal = np.array(r.ctx.goal[:2])
    full = float(np.linalg.norm(goal - p0))
    u = (goal - p0) / max(full, 1e-9)
    along = float((pT - p0) @ u)
    across = float(abs((pT - p0)[0] * u[1] - (pT - p0)[1] * u[0]))
    contact = np.flatnonzero(r.s["robot_contact"][:, r.obj])
    if not len(contact):
        return None
    steps = (int(contact[0]), int(contact[-1]))
    if along > full + GOAL_TOL:
        text = f"the object slid {_cm(along - full)} past the goal"
        sup = {("friction", None): 1.0, ("mass", None): 0.8, ("goal_offset", "goal"): 0.4}
    elif across > GOAL_TOL:
        text = f"the object drifted {_cm(across)} off the push line ({_cm(along)} along it)"
        sup = {("yaw", "target"): 0.9, ("scale", None): 0.5, ("goal_offset", "goal"): 0.5}
    elif along < 0.01:
        text = f"contact from step {steps[0]} moved the object only {_cm(max(along, 0.0))}"
        sup = {("mass", None): 1.0, ("friction", None): 0.8, ("yaw", "target"): 0.3}
    elif along < full - GOAL_TOL:
        text = f"the object stopped {_cm(full - along)} short of the goal after {_cm(along)} of {_cm(full)}"
        sup = {("friction", None): 0.9, ("mass", None): 0.8, ("goal_offset", "goal"): 0.7}
    else:
        return None
    return Evidence("push", text, steps, r.support(sup))


def _drawer_frac(r: _Rollout, t: int) -> float:
    k = int(round(r.ctx.goal[0]))
    lo, hi = r.ctx.joint_limits[k]
    return float((r.s["art_q"][t][k] - lo) / max(hi - lo, 1e-9))


def _drawer_stuck(r: _Rollout) -> Evidence | None:
    """The drawer was held (open) or touched (close) for a while yet hardly moved."""
    if r.family != "drawer":
        return None
    engaged = r.grasped if r.ctx.variant == "open" else r.s["robot_contact"][:, r.obj] > 0
    steps = np.flatnonzero(engaged)
    if len(steps) < 4:
        return None
    fracs = [_drawer_frac(r, t) for t in range(r.T + 1)]
    moved = abs(fracs[-1] - fracs[int(steps[0])])
    if moved > 0.3:
        return None
    text = f"the drawer moved only {moved:.0%} of its travel over {len(steps)} steps of contact"
    sup = {("friction", None): 1.0, ("yaw", "cabinet"): 0.5, ("scale", None): 0.3}
    return Evidence("stuck", text, (int(steps[0]), int(steps[-1])), r.support(sup))


def _goal_miss(r: _Rollout) -> Evidence | None:
    """pick_place / stack: the object was carried but ended away from the container or the base."""
    if r.family not in ("pick_place", "stack") or not r.grasped.any() or r.air_losses():
        return None
    if r.family == "pick_place":
        c = r.ctx.bindings["container"]
        dest_role, goal = "container", r.ctx.init_pos[c][:2]
        err = np.linalg.norm(r.s["obj_pos"][:, r.obj, :2] - goal, axis=1)
    else:
        b = r.ctx.bindings["base"]
        dest_role = "base"
        err = np.linalg.norm(r.s["obj_pos"][:, r.obj, :2] - r.s["obj_pos"][:, b, :2], axis=1)
        base_shift = float(np.linalg.norm(r.s["obj_pos"][-1][b] - r.ctx.init_pos[b]))
        if base_shift > 0.015:
            text = f"the base was pushed {_cm(base_shift)} out of place"
            sup = {("yaw", "base"): 0.7, ("scale", None): 0.6, ("position", "base"): 0.5}
            return Evidence("base_moved", text, (r.T,), r.support(sup))
    carried = np.flatnonzero(r.grasped & (r.s["obj_pos"][:, r.obj, 2] > r.ctx.init_pos[r.obj][2] + 0.02))
    if not len(carried):
        return None
    t_best = int(carried[np.argmin(err[carried])])
    if err[t_best] < 0.02 and err[-1] < 0.03:  # over the goal: the release or the landing went wrong
        text = f"the object reached the {dest_role} (step {t_best}) but did not come to rest there"
        sup = {
            ("scale", None): 0.7,
            ("instance", None): 0.6,
            ("yaw", dest_role): 0.5,
            ("friction", None): 0.4,
        }
        return Evidence("landing", text, (t_best, r.T), r.support(sup))
    text = (
        f"the carried object came no closer than {_cm(float(err[t_best]))} to the {dest_role} (step {t_best})"
    )
    sup = {("position", dest_role): min(1.0, float(err[t_best]) / 0.05), ("yaw", dest_role): 0.3}
    return Evidence("goal_miss", text, (t_best, r.T), r.support(sup))


def _trace_repairs(r: _Rollout, trace: list[dict] | None) -> Evidence | None:
    """Scene repairs recorded while the scene was built: a rescaled object, a moved or dropped distractor."""
    if not trace:
        return None
    repairs = [t for t in trace if isinstance(t, dict) and t.get("op") == "repair"]
    sup: dict[tuple[str, str | None], float] = {}
    for t in repairs:
        if t.get("name") == "rescale" and t.get("object") == r.obj:
            sup[("scale", None)] = 0.3
        elif t.get("name") in ("drop", "replace") and t.get("object") != r.obj:
            sup[("distractors", None)] = 0.3
    if not sup:
        return None
    return Evidence(
        "trace", f"the scene needed {len(repairs)} repair(s) when it was built", (), r.support(sup)
    )


DETECTORS: tuple[Callable[[_Rollout], Evidence | None], ...] = (
    _lost_grasp,
    _too_wide,
    _closed_beside,
    _touched_distractor,
    _never_reached,
    _push_outcome,
    _drawer_stuck,
    _goal_miss,
)


def collect_evidence(
    record: RolloutRecord, scene: SceneSpec, trace: list[dict] | None = None
) -> list[Evidence]:
    """Every detector's finding on a rollout (in detector order)."""
    r = _Rollout(record, scene)
    found = [det(r) for det in DETECTORS] + [_trace_repairs(r, trace)]
    return [e for e in found if e is not None]
