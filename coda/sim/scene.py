"""Scene specification: a scene factored into task, spatial and object-attribute components.

The data engine varies the three components independently (paper §3.1). A `SceneSpec` is plain data:
it round-trips through JSON, has a stable content hash, and every field is validated with an error
that names it (``objects[1].mass: expected a number in (0, 20], got -1.0``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from coda.sim.tasks import RULES, SceneSpecError

SPEC_VERSION = 1
# Arena bounds (metres, robot base at the origin): anything outside cannot be on the table.
ARENA_X = (0.15, 0.95)
ARENA_Y = (-0.55, 0.55)


def _err(path: str, msg: str) -> SceneSpecError:
    return SceneSpecError(f"{path}: {msg}")


def _num(path: str, value: Any, lo: float, hi: float, *, lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _err(path, f"expected a finite number, got {value!r}")
    if (value <= lo if lo_open else value < lo) or value > hi:
        bracket = "(" if lo_open else "["
        raise _err(path, f"expected a number in {bracket}{lo}, {hi}], got {value!r}")
    return float(value)


def _str(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _err(path, f"expected a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class TaskSpec:
    family: str  # task-family registry key, e.g. "pick_place"
    variant: str  # family-specific task variant, e.g. "open" / "close" for drawers
    template_id: int  # index into the family's instruction templates (the task/language factor)
    instruction: str  # the rendered instruction text
    bindings: dict[str, int]  # symbolic role -> index into `objects`, e.g. {"target": 0, "container": 1}
    goal: tuple[float, ...] = ()  # family-specific goal parameters (push: goal x, y; drawer: part index)


@dataclass(frozen=True)
class Pose:
    x: float
    y: float
    yaw: float = 0.0


@dataclass(frozen=True)
class SpatialSpec:
    poses: tuple[Pose, ...]  # one pose per object, same order as `SceneSpec.objects`


@dataclass(frozen=True)
class ObjectSpec:
    asset_id: (
        str  # catalog id ("primitive/box_003", "articulated/drawer_single_012") or fixture ("fixture/bin")
    )
    category: str  # asset category, recorded so held-out splits can hold out whole categories
    scale: float = 1.0  # uniform geometric scale
    mass: float = 0.1  # kg (ignored by fixed-base articulated bodies and static fixtures)
    friction: float = 1.0  # lateral friction coefficient
    rgba: tuple[float, float, float, float] = (0.8, 0.3, 0.2, 1.0)


@dataclass(frozen=True)
class SceneSpec:
    task: TaskSpec
    spatial: SpatialSpec
    objects: tuple[ObjectSpec, ...]
    version: int = field(default=SPEC_VERSION)

    def __post_init__(self) -> None:
        validate(self)

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"]["goal"] = list(self.task.goal)
        return _canonical(d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Any) -> SceneSpec:
        return from_dict(d)

    @classmethod
    def from_json(cls, text: str) -> SceneSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SceneSpecError(f"<json>: not valid JSON ({e.msg} at line {e.lineno})") from None
        return from_dict(data)

    @property
    def hash(self) -> str:
        """Stable content hash (sha256 of the canonical JSON, floats rounded to 1e-6), 16 hex chars."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def family(self) -> str:
        return self.task.family

    def role(self, name: str) -> int:
        return self.task.bindings[name]

    def replace_object(self, index: int, **changes: Any) -> SceneSpec:
        objs = list(self.objects)
        objs[index] = ObjectSpec(**{**asdict(objs[index]), **changes})
        return SceneSpec(self.task, self.spatial, tuple(objs))

    def replace_pose(self, index: int, **changes: Any) -> SceneSpec:
        poses = list(self.spatial.poses)
        poses[index] = Pose(**{**asdict(poses[index]), **changes})
        return SceneSpec(self.task, SpatialSpec(tuple(poses)), self.objects)


def _canonical(value: Any) -> Any:
    """Round floats so that the hash does not depend on the last bits of a computation."""
    if isinstance(value, float):
        r = round(value, 6)
        return 0.0 if r == 0 else r
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _keys(path: str, d: Any, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(d, dict):
        raise _err(path or "<root>", f"expected an object, got {type(d).__name__}")
    unknown = set(d) - required - set(optional)
    if unknown:
        raise _err(f"{path}.{sorted(unknown)[0]}".lstrip("."), "unknown field")
    missing = required - set(d)
    if missing:
        raise _err(f"{path}.{sorted(missing)[0]}".lstrip("."), "missing field")
    return d


def from_dict(d: Any) -> SceneSpec:
    """Parse a JSON-like dict into a validated `SceneSpec`; errors name the offending field."""
    _keys("", d, {"task", "spatial", "objects"}, {"version"})
    version = d.get("version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise _err("version", f"unsupported spec version {version!r} (this code reads {SPEC_VERSION})")
    t = _keys("task", d["task"], {"family", "variant", "template_id", "instruction", "bindings"}, {"goal"})
    if not isinstance(t["bindings"], dict):
        raise _err("task.bindings", "expected an object mapping role -> object index")
    goal = t.get("goal", [])
    if not isinstance(goal, list):
        raise _err("task.goal", "expected a list of numbers")
    task = TaskSpec(
        family=t["family"],
        variant=t["variant"],
        template_id=t["template_id"],
        instruction=t["instruction"],
        bindings=dict(t["bindings"]),
        goal=tuple(goal),
    )
    s = _keys("spatial", d["spatial"], {"poses"})
    if not isinstance(s["poses"], list):
        raise _err("spatial.poses", "expected a list")
    poses = []
    for i, p in enumerate(s["poses"]):
        _keys(f"spatial.poses[{i}]", p, {"x", "y"}, {"yaw"})
        poses.append(Pose(p["x"], p["y"], p.get("yaw", 0.0)))
    if not isinstance(d["objects"], list):
        raise _err("objects", "expected a list")
    objects = []
    for i, o in enumerate(d["objects"]):
        _keys(f"objects[{i}]", o, {"asset_id", "category"}, {"scale", "mass", "friction", "rgba"})
        rgba = o.get("rgba", [0.8, 0.3, 0.2, 1.0])
        if not isinstance(rgba, list):
            raise _err(f"objects[{i}].rgba", "expected a list of 4 numbers in [0, 1]")
        objects.append(
            ObjectSpec(
                o["asset_id"],
                o["category"],
                o.get("scale", 1.0),
                o.get("mass", 0.1),
                o.get("friction", 1.0),
                tuple(rgba),
            )
        )
    return SceneSpec(task, SpatialSpec(tuple(poses)), tuple(objects))


def validate(spec: SceneSpec) -> None:
    """Check every field; raises `SceneSpecError` naming the first bad one."""
    t = spec.task
    if t.family not in RULES:
        raise _err("task.family", f"unknown family {t.family!r}; expected one of {sorted(RULES)}")
    fam = RULES[t.family]
    if t.variant not in fam.variants:
        raise _err("task.variant", f"unknown variant {t.variant!r} for {t.family}; expected {fam.variants}")
    if isinstance(t.template_id, bool) or not isinstance(t.template_id, int):
        raise _err("task.template_id", f"expected an integer, got {t.template_id!r}")
    if not 0 <= t.template_id < len(fam.templates):
        raise _err("task.template_id", f"expected 0..{len(fam.templates) - 1}, got {t.template_id}")
    _str("task.instruction", t.instruction)
    n = len(spec.objects)
    if n == 0:
        raise _err("objects", "a scene needs at least one object")
    if n > 8:
        raise _err("objects", f"at most 8 objects are supported, got {n}")
    for role in fam.roles:
        if role not in t.bindings:
            raise _err(f"task.bindings.{role}", f"missing binding for role {role!r} of {t.family}")
    for role, idx in t.bindings.items():
        if role not in fam.roles:
            raise _err(f"task.bindings.{role}", f"unknown role for {t.family}; expected {fam.roles}")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < n:
            raise _err(f"task.bindings.{role}", f"expected an object index in 0..{n - 1}, got {idx!r}")
    if len(set(t.bindings.values())) != len(t.bindings):
        raise _err("task.bindings", "roles must bind distinct objects")
    for i, g in enumerate(t.goal):
        _num(f"task.goal[{i}]", g, -10.0, 10.0)
    if len(t.goal) != fam.goal_dim:
        raise _err("task.goal", f"expected {fam.goal_dim} numbers for {t.family}, got {len(t.goal)}")
    if len(spec.spatial.poses) != n:
        raise _err("spatial.poses", f"expected one pose per object ({n}), got {len(spec.spatial.poses)}")
    for i, p in enumerate(spec.spatial.poses):
        _num(f"spatial.poses[{i}].x", p.x, *ARENA_X)
        _num(f"spatial.poses[{i}].y", p.y, *ARENA_Y)
        _num(f"spatial.poses[{i}].yaw", p.yaw, -2 * math.pi, 2 * math.pi)
    for i, o in enumerate(spec.objects):
        _str(f"objects[{i}].asset_id", o.asset_id)
        _str(f"objects[{i}].category", o.category)
        _num(f"objects[{i}].scale", o.scale, 0.2, 3.0, lo_open=True)
        _num(f"objects[{i}].mass", o.mass, 0.0, 20.0, lo_open=True)
        _num(f"objects[{i}].friction", o.friction, 0.05, 5.0)
        if len(o.rgba) != 4:
            raise _err(f"objects[{i}].rgba", f"expected 4 numbers, got {len(o.rgba)}")
        for k, c in enumerate(o.rgba):
            _num(f"objects[{i}].rgba[{k}]", c, 0.0, 1.0)
    fam.check(spec)
