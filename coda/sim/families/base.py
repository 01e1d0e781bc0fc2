"""Task-family base class and the waypoint planner every scripted oracle builds on.

A family (Ravens-style) bundles: roles, task variants and instruction templates (the task factor, declared
with the family's spec checks and scene setup in `coda.sim.tasks`); a narrow seed distribution and a wide
generator space (`ranges.py`); held-out suite samplers; a sparse verifier `success(state, ctx)`; an ordered
list of cumulative phase predicates evaluated on simulator state; and a scripted closed-loop planner whose
trajectory is a demonstration in the policy's action format. `SceneContext` (from `coda.sim.context`) is
re-exported here for the predicates and planners that import it from this module.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pybullet as p

from coda.sim import exact_math
from coda.sim.context import SceneContext
from coda.sim.families.ranges import RANGES, SUITES, TRAIN_TEMPLATES
from coda.sim.scene import ObjectSpec, Pose, SceneSpec, SpatialSpec, TaskSpec
from coda.sim.tasks import TaskRules
from coda.sim.world import ACTION_SCALE, DOWN_QUAT

SPLITS = ("seed", "generator", *SUITES)
State = dict[str, np.ndarray]
DISTRACTOR_BOX = ((0.32, 0.68), (-0.32, 0.32))  # (x, y) ranges where every sampler places distractors


@dataclass(frozen=True)
class Phase:
    name: str
    predicate: Callable[[State, SceneContext], bool]


def yaw_of(quat: Sequence[float]) -> float:
    x, y, z, w = quat
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def is_heldout_instance(asset_id: str) -> bool:
    """20% of every category's instances are held out, chosen by a hash of the id (stable, seed-free)."""
    return int(hashlib.sha256(asset_id.encode()).hexdigest(), 16) % 5 == 0


def uniform(rng: np.random.Generator, r) -> float:
    """Sample a range (lo, hi) or a union of ranges [(lo, hi), ...] uniformly by length."""
    if isinstance(r, list):
        lengths = np.array([hi - lo for lo, hi in r])
        k = int(rng.choice(len(r), p=lengths / lengths.sum()))
        r = r[k]
    lo, hi = r
    return float(rng.uniform(lo, hi))


class Family:
    """Base class of a task family. Subclasses set `rules`, `factors`, `primary_role` and `phase_factors` and
    implement the hooks.

    `name`, `roles`, `variants`, `templates` and `goal_dim` are copied from the subclass's `rules`. What the
    data engine knows of a family lives here with it: its generative factors, the role whose object
    attributes (scale, mass, friction, instance) those factors refer to, which factors can plausibly make
    each phase fail (the prior a diagnoser and a compiler share) and the generator-space limits a program's
    results are clamped to (`generator_limits`).
    """

    rules: ClassVar[TaskRules]
    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    variants: ClassVar[tuple[str, ...]]
    templates: ClassVar[tuple[str, ...]]
    goal_dim: ClassVar[int] = 0
    factors: ClassVar[tuple[str, ...]]  # generative factors the engine varies and diagnoses attribute to
    primary_role: ClassVar[str]  # the role whose object attributes the factors scale, mass, ... refer to
    # phase -> the factors that can plausibly make that phase fail, most plausible first
    phase_factors: ClassVar[dict[str, tuple[str, ...]]]
    # two task roles the sampler keeps apart, and by how much (metres): a program that moves one keeps it too
    separation: ClassVar[tuple[tuple[str, str], float] | None] = None
    mirrored: ClassVar[tuple[str, ...]] = ()  # position ranges sampled as a magnitude on either side (y)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        r = cls.rules
        cls.name, cls.roles, cls.variants, cls.templates = r.name, r.roles, r.variants, r.templates
        cls.goal_dim = r.goal_dim
        if cls.primary_role not in cls.roles:
            raise TypeError(f"{cls.__name__}.primary_role {cls.primary_role!r} is not one of {cls.roles}")
        for phase, named in cls.phase_factors.items():
            unknown = sorted(set(named) - set(cls.factors))
            if unknown:
                raise TypeError(f"{cls.__name__}.phase_factors[{phase!r}] names unknown factors {unknown}")

    # -- spaces ----------------------------------------------------------------------------------
    @classmethod
    def space(cls, split: str) -> dict[str, Any]:
        """Factor ranges for a split: the seed ranges overridden by the split's own (see ranges.py)."""
        spaces = RANGES[cls.name]
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        out = dict(spaces["seed"])
        if split == "generator":
            out.update(spaces["generator"])
        elif split in SUITES:
            out.update(spaces[split])  # the suite's factor shifts (held-out geometry, layouts)
        if split == "tasks":
            out["variants"] = spaces["heldout_variants"]
        if split == "categories":
            out["categories"] = spaces["heldout_categories"]
        return out

    @classmethod
    def pool(cls, catalog, split: str, kind: str = "rigid") -> list:
        """Assets allowed for a split: training instances of training categories, or the held-out ones."""
        space = cls.space(split)
        cats = space["categories"]
        heldout_cats = set(RANGES[cls.name]["heldout_categories"])
        assets = catalog.rigid if kind == "rigid" else catalog.articulated
        if cats == "train":
            allowed = {a.category for a in assets} - heldout_cats
        else:
            allowed = set(cats)
        want_heldout_instance = split == "instances"
        out = [
            a
            for a in assets
            if a.category in allowed
            and (split == "categories" or is_heldout_instance(a.asset_id) == want_heldout_instance)
        ]
        out = [a for a in out if cls.asset_ok(a)]
        if not out:
            raise ValueError(f"{cls.name}: no assets for split {split!r} (categories {sorted(allowed)})")
        return sorted(out, key=lambda a: a.asset_id)

    @classmethod
    def asset_ok(cls, asset) -> bool:
        """Whether an asset is usable by this family at all (e.g. graspable). Override."""
        return True

    @classmethod
    def template_ids(cls, split: str) -> range:
        return range(TRAIN_TEMPLATES, len(cls.templates)) if split == "tasks" else range(TRAIN_TEMPLATES)

    @classmethod
    def instruction(cls, template_id: int, names: dict[str, str]) -> str:
        return cls.templates[template_id].format(**names)

    @classmethod
    def generator_limits(cls, role: str | None, attribute: str) -> list:
        """The generator-space range(s) a program's (role, attribute) result is clamped to: one entry per
        coordinate (x and y for a position, dx and dy for a goal offset), each a range or a union of ranges."""
        space = cls.space("generator")
        if attribute == "position":
            ys = space[f"{role}_y"]
            if role in cls.mirrored:  # a union of the range and its mirror image
                ys = [(-ys[1], -ys[0]), tuple(ys)]
            return [space[f"{role}_x"], ys]
        if attribute == "yaw":
            return [space[f"{role}_yaw"]]
        if attribute == "goal_offset":
            return [space["goal_dx"], space["goal_dy"]]
        return [space[attribute]]

    # -- sampling ---------------------------------------------------------------------------------
    @classmethod
    def sample(cls, rng: np.random.Generator, catalog, split: str = "seed") -> SceneSpec:
        """Draw a scene from a split's distribution (not yet validity-checked)."""
        raise NotImplementedError

    @classmethod
    def _object(cls, rng, asset, space, rgba=None) -> ObjectSpec:
        return ObjectSpec(
            asset.asset_id,
            asset.category,
            scale=round(uniform(rng, space["scale"]), 4),
            mass=round(uniform(rng, space["mass"]), 4) if "mass" in space else 0.1,
            friction=round(uniform(rng, space["friction"]), 4),
            rgba=tuple(rgba) if rgba is not None else _colour(rng),
        )

    @classmethod
    def _task(cls, rng, split, variant, bindings, names, goal=()) -> TaskSpec:
        tid = int(rng.choice(cls.template_ids(split)))
        return TaskSpec(cls.name, variant, tid, cls.instruction(tid, names), bindings, tuple(goal))

    @classmethod
    def _distractors(cls, rng, catalog, split, space, occupied: list[tuple[float, float, float]]):
        """Clutter objects placed away from the task objects (may be zero)."""
        lo, hi = space["distractors"]
        n = int(rng.integers(lo, hi + 1))
        pool = cls.pool(
            catalog, "seed" if split in ("instances", "tasks", "categories", "layouts") else split
        )
        objs, poses = [], []
        for _ in range(n):
            asset = pool[int(rng.integers(len(pool)))]
            for _attempt in range(20):
                x, y = rng.uniform(*DISTRACTOR_BOX[0]), rng.uniform(*DISTRACTOR_BOX[1])
                if all(math.hypot(x - ox, y - oy) > r + 0.07 for ox, oy, r in occupied):
                    occupied.append((x, y, 0.05))
                    objs.append(cls._object(rng, asset, cls.space("seed")))
                    poses.append(Pose(round(x, 4), round(y, 4), round(float(rng.uniform(-1, 1)), 4)))
                    break
        return objs, poses

    @staticmethod
    def _spec(task, objects, poses) -> SceneSpec:
        return SceneSpec(task, SpatialSpec(tuple(poses)), tuple(objects))

    # -- hooks ------------------------------------------------------------------------------------
    @classmethod
    def phases(cls, variant: str) -> list[Phase]:
        raise NotImplementedError

    @classmethod
    def success(cls, state: State, ctx: SceneContext) -> bool:
        raise NotImplementedError

    @classmethod
    def role_features(cls, state: State, ctx: SceneContext) -> tuple[list[np.ndarray], np.ndarray]:
        """Object-centric observation: up to 3 role slots (pos, sin/cos yaw, half extents) and a 4-D goal."""
        raise NotImplementedError

    @classmethod
    def planner(cls, ctx: SceneContext) -> WaypointPlanner:
        raise NotImplementedError

    @classmethod
    def progress(cls, states: Sequence[State], ctx: SceneContext) -> np.ndarray:
        """Cumulative phase progress per state: (T, P) booleans; phase k counts only after phase k-1."""
        phases = cls.phases(ctx.variant)
        out = np.zeros((len(states), len(phases)), dtype=bool)
        reached = 0
        for t, st in enumerate(states):
            while reached < len(phases) and phases[reached].predicate(st, ctx):
                reached += 1
            out[t, :reached] = True
        return out


def _colour(rng: np.random.Generator) -> tuple[float, float, float, float]:
    return tuple(round(float(c), 3) for c in rng.uniform(0.1, 0.95, size=3)) + (1.0,)


def slot(pos, yaw, half) -> np.ndarray:
    return np.concatenate([pos, [math.sin(yaw), math.cos(yaw)], half, [1.0]])


# -- scripted planning ------------------------------------------------------------------------------
@dataclass
class Waypoint:
    """Move the end effector to `pos` (with yaw `yaw`) and set the gripper; `hold` extra control steps."""

    pos: np.ndarray
    yaw: float
    grip: float  # +1 open, -1 closed
    tol: float = 0.004
    hold: int = 0
    max_steps: int = 40
    speed: float = 1.0  # fraction of the maximum per-step displacement (slow for pushing and pulling)
    quat: np.ndarray | None = None  # full gripper orientation (x, y, z, w); overrides `yaw` when given


class WaypointPlanner:
    """Closed-loop scripted planner: a list of waypoints, recomputed by `replan(state)` at chunk starts.

    Subclasses implement `plan(state) -> list[Waypoint]` and `stage(state) -> int` (which waypoint to
    pursue given the state; lets the planner recover when e.g. an object is nudged).
    """

    def __init__(self, ctx: SceneContext, *, sync_to_controller: bool = False) -> None:
        self.ctx = ctx
        # re-read the controller's target at every chunk start (needed when the executed actions differ from
        # ours, e.g. noise injected for DART-style demonstrations); off by default
        self.sync_to_controller = sync_to_controller
        self.index = 0
        self.held = 0
        self.steps_on = 0
        self.waypoints: list[Waypoint] = []
        self.cmd_pos: np.ndarray | None = None
        self.cmd_quat: np.ndarray | None = None

    def plan(self, state: State) -> list[Waypoint]:
        raise NotImplementedError

    def act(self, obs) -> np.ndarray:
        """Policy interface: return a chunk of 8 normalised actions."""
        state = obs.state
        self.waypoints = self.plan(state)
        if self.sync_to_controller:
            self.cmd_pos = np.array(state["target_pos"])
            self.cmd_quat = np.array(state["target_quat"])
        elif self.cmd_pos is None or exact_math.norm(self.cmd_pos - state["ee_pos"]) > 0.03:
            # first call, or the controller clipped our target (arm blocked): re-sync to the measured pose
            self.cmd_pos = state["ee_pos"].copy()
            self.cmd_quat = np.array(state["ee_quat"])
        chunk = np.zeros((8, 7))
        for k in range(8):
            chunk[k] = self._step()
        return chunk

    def _step(self) -> np.ndarray:
        if self.index >= len(self.waypoints):
            return np.array([0, 0, 0, 0, 0, 0, self.waypoints[-1].grip if self.waypoints else 1.0])
        wp = self.waypoints[self.index]
        delta = np.clip((wp.pos - self.cmd_pos) / ACTION_SCALE[:3], -wp.speed, wp.speed)
        target_q = wp.quat if wp.quat is not None else down_quat(wp.yaw)
        # rotation still to go, as a world-frame rotation vector, limited to the per-step maximum
        diff = p.getDifferenceQuaternion(self.cmd_quat.tolist(), list(target_q))
        axis, angle = p.getAxisAngleFromQuaternion(diff)
        angle = _wrap(angle)
        rotvec = np.array(axis) * angle
        arot = rotvec / ACTION_SCALE[3:6]
        arot /= max(1.0, float(np.max(np.abs(arot))))
        # mirror the controller exactly (world-frame Euler increment), so our command tracks its target
        dq = p.getQuaternionFromEuler((arot * ACTION_SCALE[3:6]).tolist())
        self.cmd_quat = np.array(p.multiplyTransforms([0, 0, 0], dq, [0, 0, 0], self.cmd_quat.tolist())[1])
        self.cmd_pos = self.cmd_pos + delta * ACTION_SCALE[:3]
        self.steps_on += 1
        at = exact_math.norm(wp.pos - self.cmd_pos) < wp.tol and abs(angle) < 0.03
        if at or self.steps_on > wp.max_steps:
            self.held += 1
            if self.held > wp.hold:
                self.index += 1
                self.held = 0
                self.steps_on = 0
        return np.array([*delta, *arot, wp.grip])


def down_quat(yaw: float) -> np.ndarray:
    """Gripper pointing straight down, turned by `yaw` about world z."""
    zq = p.getQuaternionFromEuler([0.0, 0.0, yaw])
    return np.array(p.multiplyTransforms([0, 0, 0], zq, [0, 0, 0], DOWN_QUAT)[1])


def horizontal_quat(direction: np.ndarray) -> np.ndarray:
    """Gripper pointing horizontally along `direction` (x, y), fingers closing vertically."""
    z = np.array([direction[0], direction[1], 0.0])
    z /= exact_math.norm(z)
    y = np.array([0.0, 0.0, 1.0])
    x = np.cross(y, z)
    m = np.stack([x, y, z], axis=1)
    # rotation matrix -> quaternion (x, y, z, w)
    w = math.sqrt(max(0.0, 1 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    if w > 1e-6:
        q = [(m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w), (m[1, 0] - m[0, 1]) / (4 * w), w]
    else:  # 180-degree rotation: use the largest diagonal
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        r = math.sqrt(max(0.0, 1 + m[i, i] - m[j, j] - m[k, k]))
        q = [0.0, 0.0, 0.0, (m[k, j] - m[j, k]) / (2 * r)]
        q[i], q[j], q[k] = r / 2, (m[j, i] + m[i, j]) / (2 * r), (m[k, i] + m[i, k]) / (2 * r)
    return np.array(p.getQuaternionFromAxisAngle(*p.getAxisAngleFromQuaternion(q)))


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def grasp_yaw(obj_yaw: float, half: np.ndarray) -> float:
    """Gripper yaw that closes the fingers across the object's narrower horizontal side.

    The Panda's fingers close along the hand's y axis, which points along world -y at gripper yaw 0.
    The gripper is symmetric under a half turn, so the representative in [-pi/2, pi/2) is returned.
    """
    base = obj_yaw + math.pi / 2 if half[0] <= half[1] else obj_yaw
    return _wrap(2 * base) / 2
