"""Physical validity checks with repairs (paper §3.1): scale, reachability, spawn interpenetration, stability.

`certify_scene` loads a scene, runs the checks, applies repairs (rescale, re-place, drop a distractor)
until the scene passes or the repair budget is spent, and appends every check and repair to the scene's
construction trace. A valid scene is then certified by the family's scripted planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pybullet as p

from coda.sim import exact_math
from coda.sim.scene import ARENA_X, ARENA_Y, SceneSpec, SceneSpecError

GRIPPER_OPENING = 0.08
MAX_PENETRATION = 0.004  # metres of overlap tolerated at spawn
MAX_DRIFT = 0.02  # metres an object may move while settling
MAX_TILT = 0.35  # radians an object may tilt while settling
REACH = (0.28, 0.8)  # horizontal distance from the robot base the arm can work at


@dataclass
class ValidityReport:
    status: str  # "pass" | "repaired" | "rejected"
    scene: SceneSpec | None  # the final (possibly repaired) scene, None when rejected
    trace: list[dict[str, Any]] = field(default_factory=list)  # construction trace: checks and repairs
    certified: bool | None = None  # planner success (None: not attempted)

    @property
    def repairs(self) -> int:
        return sum(1 for t in self.trace if t["op"] == "repair")


def _movable(world) -> list[int]:
    return [i for i, b in enumerate(world.bodies) if not b.fixed]


def check_scale(spec: SceneSpec, world) -> tuple[bool, str, dict]:
    """Graspable roles fit the gripper; nothing is absurdly large."""
    grasp_roles = {"target", "top"} if spec.family in ("pick_place", "stack") else set()
    for role in grasp_roles & set(spec.task.bindings):
        i = spec.task.bindings[role]
        half = world.bodies[i].half_extents
        width = 2 * min(half[0], half[1])
        if width > GRIPPER_OPENING - 0.012:
            return (
                False,
                f"objects[{i}] is {width * 100:.1f} cm wide; the gripper opens 8 cm",
                {"object": i, "limit": 0.066 / width},
            )
    for i in _movable(world):
        if 2 * max(world.bodies[i].half_extents) > 0.2:
            return (
                False,
                f"objects[{i}] is larger than 20 cm",
                {"object": i, "limit": 0.19 / (2 * max(world.bodies[i].half_extents))},
            )
    return True, "ok", {}


def check_reach(spec: SceneSpec, world) -> tuple[bool, str, dict]:
    for role, i in spec.task.bindings.items():
        pose = spec.spatial.poses[i]
        r = math.hypot(pose.x, pose.y)
        if not REACH[0] <= r <= REACH[1]:
            return (
                False,
                f"{role} (objects[{i}]) is {r:.2f} m from the robot base; reach is {REACH}",
                {"object": i},
            )
    return True, "ok", {}


def check_interpenetration(world) -> tuple[bool, str, dict]:
    worst = max(world.collision_pairs(), key=lambda t: t[2], default=None)
    if worst is not None and worst[2] > MAX_PENETRATION:
        i, j, depth = worst
        other = "the robot" if j < 0 else f"objects[{j}]"
        return (
            False,
            f"objects[{i}] and {other} interpenetrate by {depth * 100:.1f} cm",
            {"object": i, "other": j},
        )
    return True, "ok", {}


def check_stability(world, spawn_pos: np.ndarray, spawn_quat: np.ndarray) -> tuple[bool, str, dict]:
    """After settling, movable objects have not drifted, toppled or left the table."""
    st = world.state()
    for i in _movable(world):
        pos, quat = st["obj_pos"][i], st["obj_quat"][i]
        if not (ARENA_X[0] <= pos[0] <= ARENA_X[1] and ARENA_Y[0] <= pos[1] <= ARENA_Y[1]) or pos[2] < -0.02:
            return False, f"objects[{i}] left the table", {"object": i, "kind": "off_table"}
        drift = exact_math.norm(pos[:2] - spawn_pos[i][:2])
        diff = p.getDifferenceQuaternion(spawn_quat[i].tolist(), quat.tolist())
        tilt_axis, tilt = p.getAxisAngleFromQuaternion(diff)
        tilt = abs(math.remainder(tilt, 2 * math.pi)) * math.hypot(tilt_axis[0], tilt_axis[1])
        if drift > MAX_DRIFT or tilt > MAX_TILT:
            return (
                False,
                f"objects[{i}] unstable: drifted {drift * 100:.1f} cm, tilted {tilt:.2f} rad",
                {"object": i, "kind": "unstable"},
            )
    return True, "ok", {}


def _spawned(world) -> tuple[np.ndarray, np.ndarray]:
    st = world.state()
    return st["obj_pos"].copy(), st["obj_quat"].copy()


def _replace(spec: SceneSpec, i: int, rng: np.random.Generator) -> SceneSpec:
    pose = spec.spatial.poses[i]
    for _ in range(10):
        x = float(np.clip(pose.x + rng.uniform(-0.08, 0.08), 0.3, 0.7))
        y = float(np.clip(pose.y + rng.uniform(-0.08, 0.08), -0.35, 0.35))
        if math.hypot(x - pose.x, y - pose.y) > 0.02:
            break
    return spec.replace_pose(i, x=round(x, 4), y=round(y, 4))


def _drop(spec: SceneSpec, i: int) -> SceneSpec:
    from coda.sim.scene import SpatialSpec

    keep = [k for k in range(len(spec.objects)) if k != i]
    remap = {old: new for new, old in enumerate(keep)}
    task = spec.task.__class__(
        **{**spec.task.__dict__, "bindings": {r: remap[k] for r, k in spec.task.bindings.items()}}
    )
    return SceneSpec(
        task, SpatialSpec(tuple(spec.spatial.poses[k] for k in keep)), tuple(spec.objects[k] for k in keep)
    )


def validate_scene(
    world, spec: SceneSpec, rng: np.random.Generator, *, max_repairs: int = 4
) -> ValidityReport:
    """Run the checks on `spec` in `world`, repairing until it passes or `max_repairs` is exhausted."""
    trace: list[dict[str, Any]] = []
    roles = set(spec.task.bindings.values())
    for _attempt in range(max_repairs + 1):
        try:
            world.load(spec, settle_s=0.0)
        except SceneSpecError as e:
            trace.append({"op": "check", "name": "load", "ok": False, "detail": str(e)})
            return ValidityReport("rejected", None, trace)
        failure = None
        checks = (
            ("scale", check_scale, (spec, world)),
            ("reach", check_reach, (spec, world)),
            ("interpenetration", check_interpenetration, (world,)),
        )
        for name, fn, fn_args in checks:
            ok, detail, info = fn(*fn_args)
            trace.append({"op": "check", "name": name, "ok": ok, "detail": detail})
            if not ok:
                failure = (name, info)
                break
        if failure is None:
            spawn_pos, spawn_quat = _spawned(world)
            world.settle(0.5)
            ok, detail, info = check_stability(world, spawn_pos, spawn_quat)
            trace.append({"op": "check", "name": "stability", "ok": ok, "detail": detail})
            if ok:
                world.load(spec)  # leave the world holding the settled, valid scene
                status = "repaired" if any(t["op"] == "repair" for t in trace) else "pass"
                return ValidityReport(status, spec, trace)
            failure = ("stability", info)
        name, info = failure
        i = info.get("object", 0)
        if name == "scale":
            new_scale = round(spec.objects[i].scale * min(info["limit"], 0.95), 4)
            spec = spec.replace_object(i, scale=max(new_scale, 0.21))
            trace.append({"op": "repair", "name": "rescale", "object": i, "detail": f"scale -> {new_scale}"})
        elif name == "reach":
            trace.append(
                {"op": "repair", "name": "reject", "object": i, "detail": "task object out of reach"}
            )
            break
        elif i not in roles and (name == "stability" or _attempt >= 1):
            spec = _drop(spec, i)
            roles = set(spec.task.bindings.values())
            trace.append({"op": "repair", "name": "drop", "object": i, "detail": "removed a distractor"})
        else:
            j = info.get("other", -1)
            k = j if (j >= 0 and j not in roles and spec.objects[j].asset_id[:8] != "fixture/") else i
            if spec.objects[k].asset_id.startswith("fixture/"):
                k = i
            spec = _replace(spec, k, rng)
            trace.append({"op": "repair", "name": "replace", "object": k, "detail": "moved to a free spot"})
    return ValidityReport("rejected", None, trace)


def certify_scene(
    world, spec: SceneSpec, rng: np.random.Generator, *, max_repairs: int = 4, plan: bool = True
) -> tuple[ValidityReport, Any]:
    """Validity checks and repairs, then the scripted planner; returns (report, demonstration or None)."""
    from coda.sim.rollout import plan_episode

    report = validate_scene(world, spec, rng, max_repairs=max_repairs)
    if report.scene is None or not plan:
        return report, None
    demo = plan_episode(world, report.scene)
    report.certified = demo.success
    report.trace.append(
        {
            "op": "check",
            "name": "planner",
            "ok": demo.success,
            "detail": f"planner {'succeeded' if demo.success else 'failed'} in {demo.steps} steps",
        }
    )
    return report, demo
