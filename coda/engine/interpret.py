"""The interpreter of generation programs (paper §3.2): a validated program applied to a base scene.

Programs are data (schema and validation: `coda.memory.programs`); this module runs them. Operations run in
order on a mutable copy of the scene (`Draft`); every result is **clamped** to the family's generator space
(`generator_limits`, ``ranges.py``) and the arena, so a program can never leave the space generated scenes
are drawn from; held-out instances, categories and instruction templates are never produced. Family
invariants are kept as each sampler builds scenes: a push goal keeps its offset when the target moves; a
pick_place target is mirrored to the far side when the bin changes sides; the drawer goal records the
cabinet yaw and the top drawer of a new cabinet; the instruction is re-rendered with the family's names when
an instance, template or task variant changes. A ``variant`` operation changes the task component as the
family's sampler builds that variant: a pick_place container becomes a bin or a flat region, a push goal
offset is re-drawn (``sideways`` pushes run mostly along y), a drawer to close starts open. Role binding and
transfer across families: `coda.engine.transfer`.

Example:
    >>> prog = validate_generation({"family": "pick_place", "operations": [
    ...     {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}]})
    >>> scene = apply_generation(prog, base, np.random.default_rng(0), catalog)
    >>> 0.5 <= scene.objects[scene.role("target")].mass <= 0.8
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coda.memory.factors import SCENE_ATTRIBUTES, TASK_ATTRIBUTES, factor_name
from coda.memory.programs import (
    GENERATOR,
    ProgramError,
    generator_limits,
    validate_generation,
    variant_choices,
)
from coda.sim.families import REGISTRY
from coda.sim.families.base import DISTRACTOR_BOX, is_heldout_instance, uniform
from coda.sim.families.drawer import INIT_OPEN, PART_NAMES
from coda.sim.families.naming import describe
from coda.sim.families.pick_place import PickPlace
from coda.sim.families.push import Push
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from coda.sim.scene import (
    ARENA_X,
    ARENA_Y,
    ObjectSpec,
    Pose,
    SceneSpec,
    SceneSpecError,
    SpatialSpec,
    TaskSpec,
)

__all__ = ["Draft", "apply_generation", "first_violated", "role_used"]

MAX_TRIES = 20  # resampling attempts when a program's constraints fail


@dataclass
class Draft:
    """A mutable copy of a scene while a program runs (a SceneSpec is validated at every construction)."""

    family: str
    variant: str
    template_id: int
    instruction: str
    bindings: dict[str, int]
    goal: list[float]
    objects: list[dict[str, Any]]
    poses: list[dict[str, float]]
    rename: bool = False  # an operation changed what the instruction names: render it again

    @classmethod
    def of(cls, scene: SceneSpec) -> Draft:
        t = scene.task
        objects = [asdict(o) for o in scene.objects]
        poses = [asdict(p) for p in scene.spatial.poses]
        return cls(
            t.family, t.variant, t.template_id, t.instruction, dict(t.bindings), list(t.goal), objects, poses
        )

    def build(self) -> SceneSpec:
        task = TaskSpec(
            self.family,
            self.variant,
            self.template_id,
            self.instruction,
            dict(self.bindings),
            tuple(self.goal),
        )
        spatial = SpatialSpec(tuple(Pose(**p) for p in self.poses))
        try:
            return SceneSpec(task, spatial, tuple(ObjectSpec(**o) for o in self.objects))
        except SceneSpecError as e:
            raise ProgramError("scene", f"the program produced an invalid scene ({e})") from None

    def scene_role(self, index: int) -> str | None:
        return next((r for r, i in self.bindings.items() if i == index), None)

    def distractors(self) -> list[int]:
        bound = set(self.bindings.values())
        return [i for i in range(len(self.objects)) if i not in bound]


def _clamp(value: float, ranges: Any) -> float:
    """Clamp to a range (lo, hi) or to the nearest interval of a union [(lo, hi), ...]."""
    intervals = ranges if isinstance(ranges, list) else [ranges]
    best = min(
        intervals, key=lambda r: 0.0 if r[0] <= value <= r[1] else min(abs(value - r[0]), abs(value - r[1]))
    )
    return float(min(max(value, best[0]), best[1]))


def _draw(op: Mapping[str, Any], current: Any, rng: np.random.Generator, limits: list) -> Any:
    """New raw value of a numeric operation (scalars or [x, y] pairs), before clamping; `limits` is the
    generator space per coordinate, what ``"range": "generator"`` samples."""
    if op["op"] == "set":
        return op["value"]
    if op["op"] == "sample":
        ranges = limits if op["range"] == GENERATOR else op["range"]
        if not isinstance(current, list):
            ranges = [ranges]
        values = [uniform(rng, r if isinstance(r[0], list | tuple) else tuple(r)) for r in ranges]
        return values if isinstance(current, list) else values[0]
    if op["op"] == "shift":
        by = op["by"]
        return [c + b for c, b in zip(current, by)] if isinstance(by, list) else current + by
    return [c * op["by"] for c in current] if isinstance(current, list) else current * op["by"]


def _set_position(d: Draft, i: int, role: str, xy: list[float]) -> None:
    lim_x, lim_y = generator_limits(d.family, role, "position")
    x = round(_clamp(_clamp(xy[0], lim_x), ARENA_X), 4)
    y = round(_clamp(_clamp(xy[1], lim_y), ARENA_Y), 4)
    if d.family == "push" and role == "target":  # the goal keeps its offset (target and offset are factors)
        g = d.bindings["goal"]
        offset = [d.poses[g]["x"] - d.poses[i]["x"], d.poses[g]["y"] - d.poses[i]["y"]]
        d.poses[i].update(x=x, y=y)
        _set_goal_offset(d, offset)
        return
    if d.family == "pick_place" and role == "container" and (y > 0) != (d.poses[i]["y"] > 0):
        # the bin changed sides: the target goes to the far side, as pick_place.sample places it
        t = d.bindings["target"]
        (lim_ty,) = generator_limits(d.family, "target", "position")[1:]
        d.poses[t]["y"] = round(_clamp(-d.poses[t]["y"], lim_ty), 4)
    d.poses[i].update(x=x, y=y)


def _set_goal_offset(d: Draft, offset: list[float]) -> None:
    t, g = d.bindings["target"], d.bindings["goal"]
    lim = generator_limits(d.family, "goal", "goal_offset")
    dx, dy = (_clamp(v, r) for v, r in zip(offset, lim))
    gx = round(_clamp(d.poses[t]["x"] + dx, Push.goal_box[0]), 4)
    gy = round(_clamp(d.poses[t]["y"] + dy, Push.goal_box[1]), 4)
    d.poses[g].update(x=gx, y=gy)
    d.goal[:2] = [gx, gy]


def _set_yaw(d: Draft, i: int, role: str, yaw: float) -> None:
    (lim,) = generator_limits(d.family, role, "yaw")
    yaw = round(_clamp(yaw, lim), 4)
    d.poses[i]["yaw"] = yaw
    if d.family == "drawer":  # the drawer's goal records the cabinet yaw (validate_spec)
        d.goal[2] = yaw


def _set_variant(d: Draft, variant: str, rng: np.random.Generator) -> None:
    """Change the task variant, keeping what the family's sampler builds for it."""
    if variant == d.variant:
        return
    d.variant, d.rename = variant, True
    if d.family == "pick_place":
        asset_id, category, rgba = PickPlace.containers[variant]
        d.objects[d.bindings["container"]].update(asset_id=asset_id, category=category, rgba=rgba)
    elif d.family == "push":  # a new goal offset, drawn as push.sample draws it for the variant
        dx, dy = (uniform(rng, r) for r in generator_limits(d.family, "goal", "goal_offset"))
        if variant == "sideways":
            ty = d.poses[d.bindings["target"]]["y"]
            dx, dy = dy, math.copysign(max(abs(dx), 0.08), -ty if abs(ty) > 0.05 else dx)
        _set_goal_offset(d, [dx, dy])
    elif d.family == "drawer":  # goal = (part, initial opening, yaw): a drawer to close starts open
        d.goal[1] = round(float(rng.uniform(*INIT_OPEN)), 4) if variant == "close" else 0.0


def _sample_instance(d: Draft, i: int, op: Mapping[str, Any], path: str, rng, catalog) -> None:
    family = REGISTRY[d.family]
    kind = "articulated" if d.objects[i]["asset_id"].startswith("articulated/") else "rigid"
    try:
        pool = family.pool(catalog, "generator", kind)
    except ValueError as e:
        raise ProgramError(path, str(e)) from None
    if "categories" in op:
        pool = [a for a in pool if a.category in op["categories"]]
    if not pool:
        raise ProgramError(f"{path}.categories", f"no training asset of {d.family} in {op.get('categories')}")
    others = [a for a in pool if a.asset_id != d.objects[i]["asset_id"]]
    pool = others or pool
    asset = pool[int(rng.integers(len(pool)))]
    d.objects[i].update(asset_id=asset.asset_id, category=asset.category)
    if d.family == "drawer":  # the planners handle the top drawer only (see drawer.sample)
        d.goal[0] = float(asset.n_movable - 1)
    d.rename = True


def _footprint(obj: Mapping[str, Any], catalog) -> float:
    """Approximate horizontal radius of an object, for placing distractors clear of it."""
    aid = obj["asset_id"]
    if aid == "fixture/bin":
        return 0.14 * obj["scale"]
    if aid == "fixture/region":
        return 0.08 * obj["scale"]
    try:
        asset = catalog.by_id(aid)
    except KeyError:
        return 0.2 if aid.startswith("articulated/") else 0.06
    half = getattr(asset, "half_extents", None) or getattr(asset, "footprint", (0.1, 0.1))
    return float(math.hypot(half[0], half[1])) * obj["scale"]


def _set_distractors(d: Draft, count: int, bound: dict[str, int], path: str, rng, catalog) -> None:
    """Drop the last unbound distractors, or add training-pool objects at free spots (as the samplers do)."""
    lo, hi = REGISTRY[d.family].space("generator")["distractors"]
    count = int(min(max(count, lo), hi, 8 - len(d.bindings)))
    current = d.distractors()
    if len(current) > count:
        removable = [i for i in current if i not in bound.values()][::-1]
        drop = removable[: len(current) - count]
        if len(drop) < len(current) - count:
            raise ProgramError(path, "cannot drop distractors bound to program roles")
        _remove(d, set(drop), bound)
        return
    family = REGISTRY[d.family]
    try:
        pool = family.pool(catalog, "generator")
    except ValueError as e:
        raise ProgramError(path, str(e)) from None
    for _ in range(count - len(current)):
        asset = pool[int(rng.integers(len(pool)))]
        obj = asdict(family._object(rng, asset, family.space("seed")))
        x, y = _free_spot(d, path, rng, catalog)
        d.objects.append(obj)
        d.poses.append({"x": x, "y": y, "yaw": round(float(rng.uniform(-1, 1)), 4)})


def _free_spot(d: Draft, path: str, rng: np.random.Generator, catalog) -> tuple[float, float]:
    occupied = [(p["x"], p["y"], _footprint(o, catalog)) for p, o in zip(d.poses, d.objects)]
    for _ in range(50):
        x, y = (round(float(rng.uniform(*r)), 4) for r in DISTRACTOR_BOX)
        if all(math.hypot(x - ox, y - oy) > r + 0.07 for ox, oy, r in occupied):
            return x, y
    raise ProgramError(path, "no free spot for another distractor")


def _remove(d: Draft, drop: set[int], bound: dict[str, int] | None = None) -> None:
    keep = [i for i in range(len(d.objects)) if i not in drop]
    remap = {old: new for new, old in enumerate(keep)}
    d.objects = [d.objects[i] for i in keep]
    d.poses = [d.poses[i] for i in keep]
    d.bindings = {r: remap[i] for r, i in d.bindings.items()}
    if bound is not None:
        for r, i in bound.items():
            bound[r] = remap[i]


def _names(d: Draft, catalog) -> dict[str, str]:
    """The names a family's `instruction()` renders, rebuilt from the scene as each sampler builds them."""

    def name(role: str) -> str:
        o = d.objects[d.bindings[role]]
        return describe(ObjectSpec(o["asset_id"], o["category"], rgba=o["rgba"]))

    if d.family == "pick_place":
        return {"target": name("target"), "container": "bin" if d.variant == "bin" else "green target area"}
    if d.family == "stack":
        names = {"top": name("top"), "base": name("base")}
        if names["top"] == names["base"]:
            names["base"] = "other " + names["base"]
        return names
    if d.family == "push":
        return {"target": name("target"), "goal": "green target area"}
    if d.family == "drawer":
        try:
            n = catalog.by_id(d.objects[d.bindings["cabinet"]]["asset_id"]).n_movable
            return {"part": PART_NAMES[n][int(d.goal[0])], "variant": d.variant}
        except (KeyError, IndexError, AttributeError) as e:
            raise ProgramError("scene", f"cannot name the drawer part ({e})") from None
    raise ProgramError("family", f"no instruction naming for family {d.family!r}")


def _apply_op(d: Draft, bound: dict[str, int], op: Mapping[str, Any], path: str, rng, catalog) -> None:
    attribute = op["attribute"]
    if attribute in TASK_ATTRIBUTES:
        choices = variant_choices(d.family, op)
        _set_variant(d, choices[int(rng.integers(len(choices)))] if op["op"] == "sample" else choices[0], rng)
        return
    if attribute in SCENE_ATTRIBUTES:
        if factor_name(d.family, None, attribute) is None:
            raise ProgramError(f"{path}.attribute", f"{attribute!r} is not a factor of {d.family}")
        if attribute == "distractors":
            n = len(d.distractors())
            if op["op"] == "sample":
                lo, hi = (
                    REGISTRY[d.family].space("generator")["distractors"]
                    if op["range"] == GENERATOR
                    else op["range"]
                )
                count = int(rng.integers(lo, hi + 1))
            else:
                count = _draw(op, n, rng, [])
            _set_distractors(d, count, bound, path, rng, catalog)
            return
        if op["op"] == "set":
            d.template_id = op["value"]
        else:
            options = [t for t in op.get("values", range(TRAIN_TEMPLATES)) if t != d.template_id]
            d.template_id = int(rng.choice(options)) if options else d.template_id
        d.rename = True
        return
    i = bound[op["role"]]
    role = d.scene_role(i)
    if role is None or factor_name(d.family, role, attribute) is None:
        raise ProgramError(
            f"{path}.role",
            f"object {i} bound to {op['role']!r} plays no {d.family} role with a {attribute!r} factor",
        )
    if attribute == "instance":
        _sample_instance(d, i, op, path, rng, catalog)
        return
    limits = generator_limits(d.family, role, attribute)
    if attribute == "position":
        _set_position(d, i, role, _draw(op, [d.poses[i]["x"], d.poses[i]["y"]], rng, limits))
    elif attribute == "yaw":
        _set_yaw(d, i, role, _draw(op, d.poses[i]["yaw"], rng, limits))
    elif attribute == "goal_offset":
        t = d.bindings["target"]
        offset = [d.poses[i]["x"] - d.poses[t]["x"], d.poses[i]["y"] - d.poses[t]["y"]]
        _set_goal_offset(d, _draw(op, offset, rng, limits))
    else:  # scale, mass, friction
        value = _draw(op, d.objects[i][attribute], rng, limits)
        d.objects[i][attribute] = round(_clamp(value, limits[0]), 4)


def _check_training_scene(scene: SceneSpec) -> None:
    """Generated scenes are training scenes: a base carrying held-out material would leak it."""
    if scene.task.template_id >= TRAIN_TEMPLATES:
        raise ProgramError("base.task.template_id", f"template {scene.task.template_id} is held out")
    heldout = set(RANGES[scene.family]["heldout_categories"])
    for i, o in enumerate(scene.objects):
        if o.asset_id.startswith("fixture/"):
            continue
        if o.category in heldout or is_heldout_instance(o.asset_id):
            raise ProgramError(f"base.objects[{i}]", f"{o.asset_id!r} is a held-out instance or category")


def _resolve_bindings(prog: Mapping[str, Any], base: SceneSpec, bindings: Any) -> dict[str, int]:
    needed = [r for r in prog["roles"] if role_used(prog, r)]
    if bindings is None:
        if prog["family"] != base.family:
            raise ProgramError(
                "family",
                f"a {prog['family']} program needs bindings for a {base.family} scene (see bind_roles)",
            )
        return {r: base.task.bindings[r] for r in needed}
    if not isinstance(bindings, Mapping):
        raise ProgramError("bindings", "expected an object mapping program role -> object index")
    n = len(base.objects)
    out = {}
    for role, idx in bindings.items():
        if role not in prog["roles"]:
            raise ProgramError(f"bindings.{role}", f"not a role of the program; roles: {list(prog['roles'])}")
        if isinstance(idx, bool) or not isinstance(idx, int | np.integer) or not 0 <= idx < n:
            raise ProgramError(f"bindings.{role}", f"expected an object index in 0..{n - 1}, got {idx!r}")
        out[role] = int(idx)
    for role in needed:
        if role not in out:
            raise ProgramError(f"bindings.{role}", "role unbound")
    if len(set(out.values())) != len(out):
        raise ProgramError("bindings", "roles must bind distinct objects")
    return out


def role_used(prog: Mapping[str, Any], role: str) -> bool:
    return any(op["role"] == role for op in prog["operations"]) or any(
        role in c["roles"] for c in prog["constraints"]
    )


def first_violated(constraints: list[dict], d: Draft, bound: dict[str, int]) -> int | None:
    for k, c in enumerate(constraints):
        a, b = (d.poses[bound[r]] for r in c["roles"])
        dist = math.hypot(a["x"] - b["x"], a["y"] - b["y"])
        if (c["relation"] == "min_distance" and dist < c["value"]) or (
            c["relation"] == "max_distance" and dist > c["value"]
        ):
            return k
    return None


def apply_generation(
    program: Mapping[str, Any],
    base: SceneSpec,
    rng: np.random.Generator,
    catalog,
    bindings: Mapping[str, int] | None = None,
) -> SceneSpec:
    """Run a generation program on `base`: operations in order, results clamped to the generator space.

    `bindings` maps program roles to object indices of `base` (default: the base's own bindings of the
    same-named roles; required when the program's family differs, see `bind_roles`). Deterministic given
    `rng`. When the constraints fail, the whole program is re-run (fresh draws of its "sample" operations)
    up to `MAX_TRIES` times. Raises `ProgramError` when the program cannot apply; the physical validity
    checks (`coda.sim.validity`) are the caller's next step.
    """
    prog = validate_generation(program)
    if not isinstance(base, SceneSpec):
        raise ProgramError("base", f"expected a SceneSpec, got {type(base).__name__}")
    _check_training_scene(base)
    binding = _resolve_bindings(prog, base, bindings)
    tries = MAX_TRIES if any(op["op"] == "sample" for op in prog["operations"]) else 1
    violated = None
    for _ in range(tries):
        draft, bound = Draft.of(base), dict(binding)
        for i, op in enumerate(prog["operations"]):
            _apply_op(draft, bound, op, f"operations[{i}]", rng, catalog)
        if draft.rename:
            draft.instruction = REGISTRY[draft.family].instruction(draft.template_id, _names(draft, catalog))
        violated = first_violated(prog["constraints"], draft, bound)
        if violated is None:
            return draft.build()
    c = prog["constraints"][violated]
    raise ProgramError(
        f"constraints[{violated}]",
        f"{c['relation']} {c['value']} of {c['roles']} not met after {tries} tries",
    )
