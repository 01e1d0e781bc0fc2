"""Generation and training programs (paper §3.2, Appendix A): a declarative DSL, its validation and interpreter.

Programs are **data, never code**: JSON documents checked against a schema and interpreted here; nothing in
them is ever evaluated. A *generation program* recreates a difficulty on a base scene::

    {"kind": "generation", "version": 1, "family": "pick_place", "mode": "", "source": "template",
     "perturbs": "mass",                                   # the family factor its operations change
     "roles": {"target": {"requires": {"movable": true, "graspable": true}}},
     "operations": [{"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}],
     "constraints": [{"relation": "min_distance", "roles": ["target", "container"], "value": 0.15}]}

Operations by attribute (``OP_SHAPES``): ``position`` / ``goal_offset`` take [x, y] values, [[x0, x1], [y0, y1]]
ranges and [dx, dy] shifts; ``yaw``, ``scale``, ``mass``, ``friction`` numbers (``scale`` multiplies); a
sample range may be the string ``"generator"`` (the family's whole generator space: domain randomisation);
``instance`` is sampled from the family's *training* pool (optionally restricted to ``categories``);
``distractors`` is the number of clutter objects (0..3); ``instruction`` a training template id
(< ``TRAIN_TEMPLATES``). Every result is **clamped** to the family's generator space (``ranges.py``) and the
arena, so a program can never leave the space generated scenes are drawn from; held-out instances,
categories and instruction templates are never produced. Family invariants are kept as each sampler
builds scenes: a push goal keeps its offset when the target moves; a pick_place target is mirrored to the far
side when the bin changes sides; the drawer goal records the cabinet yaw and the top drawer of a new cabinet;
the instruction is re-rendered with the family's names when an instance or template changes.

A *training program* pairs a Text2potential fragment with learning tools (planner demonstrations,
imitation/critic weights, replay share). Transfer across families (Appendix A): `transfer_program` renames
roles by their object requirements and keeps the operations that are factors of the new family;
`bind_roles` finds up to three valid assignments of scene objects to roles.

Example:
    >>> prog = validate_generation({"family": "pick_place", "operations": [
    ...     {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}]})
    >>> prog["id"], prog["perturbs"]
    ('gp-…', 'mass')
    >>> scene = apply_generation(prog, base, np.random.default_rng(0), catalog)
    >>> 0.5 <= scene.objects[scene.role("target")].mass <= 0.8
    True
    >>> bind_roles(transfer_program(prog, "stack"), stack_scene, catalog)   # Appendix A
    [{'top': 0}]
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coda.engine.factors import ATTRIBUTES, FACTORS, SCENE_ATTRIBUTES, factor_name
from coda.learn.predicates import ProgramError
from coda.learn.text2potential import validate_fragment
from coda.sim.families import REGISTRY
from coda.sim.families.base import is_heldout_instance, uniform
from coda.sim.families.drawer import PART_NAMES
from coda.sim.families.naming import describe
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

__all__ = [
    "ProgramError",
    "validate_generation",
    "validate_training",
    "validate_program",
    "program_id",
    "apply_generation",
    "bind_roles",
    "bound_factors",
    "transfer_program",
    "dsl_spec",
    "generator_limits",
    "satisfies",
    "is_graspable",
    "is_movable",
]

VERSION = 1
MAX_OPERATIONS = 8
MAX_CONSTRAINTS = 8
MAX_DOC_CHARS = 16_000  # serialised size limit of a program (LLM output, memory pulled from the Hub)
MAX_DEPTH = 10
MAX_STRING = 256
NUM_BOUND = 100.0  # no number in a program may exceed this magnitude (values are clamped anyway)
MAX_DISTRACTORS = 3
MAX_TRIES = 20  # resampling attempts when a program's constraints fail
MAX_DISTANCE = 2.0  # metres: the largest distance a constraint may name
OPS = ("sample", "set", "scale", "shift")
RELATIONS = ("min_distance", "max_distance")
SOURCES = ("template", "hf", "openai", "transfer", "manual", "random")
GENERATOR = "generator"  # a sample range meaning "the family's whole generator space" (domain randomisation)
REQUIREMENTS = ("movable", "graspable", "articulated", "categories")
GRASP_WIDTH = 0.07  # graspable: narrower horizontal side at most this wide (Panda opening 0.08 m)
GRASP_MIN_HEIGHT = 0.01  # graspable: at least this tall (half height, m)
DISTRACTOR_BOX = ((0.32, 0.68), (-0.32, 0.32))  # where added distractors are placed (as the samplers do)
PUSH_GOAL_BOX = ((0.32, 0.7), (-0.32, 0.32))  # push goals are kept here (as push.sample does)
TOOLS_DEFAULTS = {"planner_demos": 2, "imitation_weight": 1.0, "critic_weight": 1.0, "replay_share": 0.25}
TOOLS_BOUNDS = {
    "planner_demos": (0, 16),  # planner-certified demonstrations per scene of the mode
    "imitation_weight": (0.0, 10.0),  # weight of imitation on those demonstrations
    "critic_weight": (0.0, 10.0),  # weight of the mode's rollouts in critic training
    "replay_share": (0.0, 1.0),  # share of the mode's stored environments replayed
}

# Object requirements of every family role (what Appendix A's matching compares): a program role keeps
# these unless it states its own.
ROLE_REQUIRES: dict[str, dict[str, dict[str, Any]]] = {
    "pick_place": {
        "target": {"movable": True, "graspable": True},
        "container": {"movable": False, "articulated": False},
    },
    "stack": {"top": {"movable": True, "graspable": True}, "base": {"movable": True}},
    "push": {"target": {"movable": True}, "goal": {"movable": False, "articulated": False}},
    "drawer": {"cabinet": {"articulated": True, "movable": False}},
}

# attribute -> op -> {field: kind}; a field name ending in "?" is optional
_NUMERIC = {
    "set": {"value": "number"},
    "sample": {"range": "range"},
    "shift": {"by": "number"},
    "scale": {"by": "factor"},
}
OP_SHAPES: dict[str, dict[str, dict[str, str]]] = {
    "position": {"set": {"value": "xy"}, "sample": {"range": "xy_range"}, "shift": {"by": "xy"}},
    "goal_offset": {
        "set": {"value": "xy"},
        "sample": {"range": "xy_range"},
        "shift": {"by": "xy"},
        "scale": {"by": "factor"},
    },
    "yaw": {k: v for k, v in _NUMERIC.items() if k != "scale"},
    "scale": _NUMERIC,
    "mass": _NUMERIC,
    "friction": _NUMERIC,
    "instance": {"sample": {"categories?": "categories"}},
    "distractors": {
        "set": {"value": "count"},
        "sample": {"range": "count_range"},
        "shift": {"by": "count_shift"},
    },
    "instruction": {"set": {"value": "template"}, "sample": {"values?": "templates"}},
}
UNSUPPORTED = {"part": "not supported by the interpreter (the scripted planners only handle the top drawer)"}


# ==================================================================================================
# schema validation
# ==================================================================================================
def _check_json(value: Any, path: str = "", depth: int = 0) -> int:
    """Only JSON types, bounded depth and string length; returns the number of nodes."""
    where = path or "program"
    if depth > MAX_DEPTH:
        raise ProgramError(where, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        n = 1
        for k, v in value.items():
            if not isinstance(k, str):
                raise ProgramError(where, f"object keys must be strings, got {k!r}")
            n += _check_json(v, f"{path}.{k}" if path else k, depth + 1)
        return n
    if isinstance(value, list | tuple):
        return 1 + sum(_check_json(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    if isinstance(value, str):
        if len(value) > MAX_DOC_CHARS:
            raise ProgramError(where, "string too long")
        return 1
    if value is None or isinstance(value, bool | int):
        return 1
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProgramError(where, f"expected a finite number, got {value!r}")
        return 1
    raise ProgramError(where, f"not a JSON value: {type(value).__name__}")


def _check_document(doc: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise ProgramError("program", f"expected a JSON object, got {type(doc).__name__}")
    _check_json(doc)
    if len(json.dumps(doc, default=str)) > MAX_DOC_CHARS:
        raise ProgramError("program", f"larger than {MAX_DOC_CHARS} characters")
    if doc.get("kind", kind) != kind:
        raise ProgramError("kind", f"expected {kind!r}, got {doc.get('kind')!r}")
    version = doc.get("version", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise ProgramError("version", f"unsupported version {version!r}; this code reads {VERSION}")
    return doc


def _keys(path: str, d: Any, allowed: set[str] | tuple[str, ...], required: tuple[str, ...] = ()) -> Mapping:
    if not isinstance(d, Mapping):
        raise ProgramError(path, f"expected an object, got {type(d).__name__}")
    for key in d:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            raise ProgramError(where, f"unknown field; allowed: {sorted(allowed)}")
    for key in required:
        if key not in d:
            raise ProgramError(f"{path}.{key}" if path else key, "missing required field")
    return d


def _string(path: str, value: Any, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > MAX_STRING:
        raise ProgramError(path, f"expected a string of at most {MAX_STRING} characters, got {value!r}")
    return value


def _number(path: str, value: Any, lo: float = -NUM_BOUND, hi: float = NUM_BOUND) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProgramError(path, f"expected a finite number, got {value!r}")
    if not lo <= value <= hi:
        raise ProgramError(path, f"expected a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _integer(path: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProgramError(path, f"expected an integer in {lo}..{hi}, got {value!r}")
    return int(value)


def _pair(path: str, value: Any, item) -> list:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ProgramError(path, f"expected a list of 2 items, got {value!r}")
    return [item(f"{path}[{k}]", v) for k, v in enumerate(value)]


def _interval(path: str, value: Any, item) -> list:
    lo, hi = _pair(path, value, item)
    if lo > hi:
        raise ProgramError(path, f"expected [lo, hi] with lo <= hi, got {value!r}")
    return [lo, hi]


def _categories(family: str, path: str, value: Any) -> list[str]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 16:
        raise ProgramError(path, f"expected a list of 1..16 category names, got {value!r}")
    out = [_string(f"{path}[{k}]", c) for k, c in enumerate(value)]
    for k, c in enumerate(out):
        if not c:
            raise ProgramError(f"{path}[{k}]", "expected a non-empty category name")
        if c in RANGES[family]["heldout_categories"]:
            raise ProgramError(f"{path}[{k}]", f"{c!r} is a held-out category of {family}")
    return sorted(set(out))


def _field(family: str, kind: str, path: str, value: Any) -> Any:
    """Parse one operation field of the given kind (see `OP_SHAPES`) into its canonical form."""
    if kind == "number":
        return _number(path, value)
    if kind == "factor":
        factor = _number(path, value, 0.0, NUM_BOUND)
        if factor <= 0:
            raise ProgramError(path, f"expected a positive factor, got {value!r}")
        return factor
    if kind == "xy":
        return _pair(path, value, _number)
    if kind in ("range", "xy_range", "count_range") and value == GENERATOR:
        return GENERATOR
    if kind == "range":
        return _interval(path, value, _number)
    if kind == "xy_range":
        return _pair(path, value, lambda p, v: _interval(p, v, _number))
    if kind == "count":
        return _integer(path, value, 0, MAX_DISTRACTORS)
    if kind == "count_range":
        return _interval(path, value, lambda p, v: _integer(p, v, 0, MAX_DISTRACTORS))
    if kind == "count_shift":
        return _integer(path, value, -MAX_DISTRACTORS, MAX_DISTRACTORS)
    if kind == "template":
        return _integer(path, value, 0, TRAIN_TEMPLATES - 1)
    if kind == "templates":
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= TRAIN_TEMPLATES:
            raise ProgramError(path, f"expected a list of 1..{TRAIN_TEMPLATES} training template ids")
        return sorted({_integer(f"{path}[{k}]", v, 0, TRAIN_TEMPLATES - 1) for k, v in enumerate(value)})
    if kind == "categories":
        return _categories(family, path, value)
    raise AssertionError(kind)


def _roles_with(family: str, attribute: str) -> list[str]:
    return sorted({r for r, a in FACTORS[family].values() if a == attribute and r is not None})


def _operation(family: str, path: str, op: Any) -> dict[str, Any]:
    _keys(path, op, {"op", "role", "attribute", "value", "range", "by", "categories", "values"})
    name, attribute = op.get("op"), op.get("attribute")
    if name not in OPS:
        raise ProgramError(f"{path}.op", f"unknown op {name!r}; expected one of {list(OPS)}")
    if attribute not in ATTRIBUTES:
        raise ProgramError(
            f"{path}.attribute", f"unknown attribute {attribute!r}; expected one of {list(ATTRIBUTES)}"
        )
    if attribute in UNSUPPORTED:
        raise ProgramError(f"{path}.attribute", f"{attribute!r} is {UNSUPPORTED[attribute]}")
    shapes = OP_SHAPES[attribute]
    if name not in shapes:
        raise ProgramError(
            f"{path}.op", f"{name!r} does not apply to {attribute!r}; expected one of {list(shapes)}"
        )
    role = _string(f"{path}.role", op.get("role"), default="") or None
    if attribute in SCENE_ATTRIBUTES:
        if role is not None:
            raise ProgramError(f"{path}.role", f"{attribute!r} is a scene attribute: leave role empty")
        if factor_name(family, None, attribute) is None:
            raise ProgramError(f"{path}.attribute", f"{attribute!r} is not a factor of {family}")
    else:
        holders = _roles_with(family, attribute)
        if not holders:
            raise ProgramError(f"{path}.attribute", f"{attribute!r} is not a factor of {family}")
        if role is None and len(holders) == 1:
            role = holders[0]
        if role is None:
            raise ProgramError(f"{path}.role", f"required for {attribute!r} in {family}; one of {holders}")
        if role not in REGISTRY[family].roles:
            raise ProgramError(
                f"{path}.role", f"unknown role {role!r} of {family}; expected {list(REGISTRY[family].roles)}"
            )
        if factor_name(family, role, attribute) is None:
            raise ProgramError(
                f"{path}.attribute",
                f"{attribute!r} of role {role!r} is not a factor of {family}; factors: {sorted(FACTORS[family])}",
            )
    fields = shapes[name]
    allowed = {"op", "role", "attribute", *(f.rstrip("?") for f in fields)}
    _keys(path, op, allowed)
    out: dict[str, Any] = {"op": name, "role": role, "attribute": attribute}
    for key, kind in fields.items():
        bare = key.rstrip("?")
        if bare not in op:
            if key.endswith("?"):
                continue
            raise ProgramError(f"{path}.{bare}", f"missing required field for {name!r} {attribute!r}")
        out[bare] = _field(family, kind, f"{path}.{bare}", op[bare])
    return out


def _requires(family: str, path: str, value: Any) -> dict[str, Any]:
    _keys(path, value, REQUIREMENTS)
    out: dict[str, Any] = {}
    for key in REQUIREMENTS:
        if key not in value:
            continue
        if key == "categories":
            out[key] = _categories(family, f"{path}.{key}", value[key])
        elif not isinstance(value[key], bool):
            raise ProgramError(f"{path}.{key}", f"expected true or false, got {value[key]!r}")
        else:
            out[key] = value[key]
    return out


def _constraint(family: str, path: str, c: Any) -> dict[str, Any]:
    _keys(path, c, {"relation", "roles", "value"}, ("relation", "roles", "value"))
    if c["relation"] not in RELATIONS:
        raise ProgramError(
            f"{path}.relation", f"unknown relation {c['relation']!r}; expected one of {list(RELATIONS)}"
        )
    roles = _pair(f"{path}.roles", c["roles"], lambda p, v: _string(p, v))
    for k, r in enumerate(roles):
        if r not in REGISTRY[family].roles:
            raise ProgramError(
                f"{path}.roles[{k}]",
                f"unknown role {r!r} of {family}; expected {list(REGISTRY[family].roles)}",
            )
    if roles[0] == roles[1]:
        raise ProgramError(f"{path}.roles", "a relation needs two different roles")
    value = _number(f"{path}.value", c["value"], 0.0, MAX_DISTANCE)
    if value <= 0:
        raise ProgramError(f"{path}.value", "expected a positive distance")
    return {"relation": c["relation"], "roles": roles, "value": value}


def _family(doc: Mapping[str, Any]) -> str:
    family = doc.get("family")
    if not isinstance(family, str) or family not in REGISTRY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
    return family


def _header(doc: Mapping[str, Any], kind: str, family: str) -> dict[str, Any]:
    source = doc.get("source", "manual")
    if source not in SOURCES:
        raise ProgramError("source", f"unknown source {source!r}; expected one of {list(SOURCES)}")
    _string("id", doc.get("id"))
    return {
        "kind": kind,
        "version": VERSION,
        "family": family,
        "mode": _string("mode", doc.get("mode")),
        "source": source,
        "parent": _string("parent", doc.get("parent")),
    }


GENERATION_KEYS = ("kind", "version", "id", "family", "mode", "source", "parent", "perturbs", "roles")
GENERATION_KEYS += ("operations", "constraints")
TRAINING_KEYS = ("kind", "version", "id", "family", "mode", "source", "parent", "potential", "tools")


def validate_generation(doc: Any) -> dict[str, Any]:
    """Canonical copy of a generation program (defaults filled, roles declared, ``id`` recomputed from the
    content). Raises `ProgramError` naming the offending field."""
    _keys("", _check_document(doc, "generation"), GENERATION_KEYS, ("family", "operations"))
    family = _family(doc)
    out = _header(doc, "generation", family)
    ops = doc["operations"]
    if not isinstance(ops, list) or not 1 <= len(ops) <= MAX_OPERATIONS:
        raise ProgramError("operations", f"expected a list of 1..{MAX_OPERATIONS} operations")
    operations = [_operation(family, f"operations[{i}]", op) for i, op in enumerate(ops)]
    cons = doc.get("constraints", [])
    if not isinstance(cons, list) or len(cons) > MAX_CONSTRAINTS:
        raise ProgramError("constraints", f"expected a list of at most {MAX_CONSTRAINTS} constraints")
    constraints = [_constraint(family, f"constraints[{i}]", c) for i, c in enumerate(cons)]
    declared = doc.get("roles", {})
    _keys("roles", declared, REGISTRY[family].roles)
    roles: dict[str, dict] = {}
    used = {op["role"] for op in operations} | {r for c in constraints for r in c["roles"]}
    for role in REGISTRY[family].roles:  # family order: canonical
        if role in declared:
            spec = _keys(f"roles.{role}", declared[role], {"requires"})
            given = spec.get("requires")
            requires = ROLE_REQUIRES[family][role] if given is None else given
            roles[role] = {"requires": _requires(family, f"roles.{role}.requires", requires)}
        elif role in used:
            roles[role] = {"requires": dict(ROLE_REQUIRES[family][role])}
    changed = [factor_name(family, op["role"], op["attribute"]) for op in operations]
    perturbs = _string("perturbs", doc.get("perturbs")) or changed[0]
    if perturbs not in changed:
        raise ProgramError(
            "perturbs", f"{perturbs!r} is not changed by any operation; they change {sorted(set(changed))}"
        )
    out.update(perturbs=perturbs, roles=roles, operations=operations, constraints=constraints)
    out["id"] = _content_id(out)
    return out


def validate_training(doc: Any) -> dict[str, Any]:
    """Canonical copy of a training program: a Text2potential fragment plus learning tools."""
    _keys("", _check_document(doc, "training"), TRAINING_KEYS, ("family", "potential"))
    family = _family(doc)
    out = _header(doc, "training", family)
    try:
        potential = validate_fragment(doc["potential"])
    except ProgramError as e:
        field = "potential" if e.field == "fragment" else f"potential.{e.field}"
        raise ProgramError(field, str(e)[len(e.field) + 2 :]) from None
    except TypeError as e:  # e.g. an unhashable value where a name belongs
        raise ProgramError("potential", f"malformed fragment ({e})") from None
    if potential["family"] != family:
        raise ProgramError(
            "potential.family", f"a {family} program needs a {family} potential, got {potential['family']!r}"
        )
    given = doc.get("tools", {})
    _keys("tools", given, tuple(TOOLS_DEFAULTS))
    tools = dict(TOOLS_DEFAULTS)
    for key, value in given.items():
        lo, hi = TOOLS_BOUNDS[key]
        path = f"tools.{key}"
        tools[key] = _integer(path, value, lo, hi) if key == "planner_demos" else _number(path, value, lo, hi)
    out.update(potential=potential, tools=tools)
    out["id"] = _content_id(out)
    return out


def validate_program(doc: Any) -> dict[str, Any]:
    """Validate a generation or training program, dispatching on ``kind`` (LIBERO suites' programs, whose
    family is ``libero_*``, have their own DSL: `coda.libero.programs`)."""
    if isinstance(doc, Mapping) and str(doc.get("family", "")).startswith("libero_"):
        from coda.libero import programs as libero_programs

        return libero_programs.validate_program(doc)
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    if kind == "generation":
        return validate_generation(doc)
    if kind == "training":
        return validate_training(doc)
    raise ProgramError("kind", f"expected 'generation' or 'training', got {kind!r}")


def _content_id(canonical: Mapping[str, Any]) -> str:
    body = {k: v for k, v in canonical.items() if k != "id"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    prefix = "gp-" if canonical["kind"] == "generation" else "tp-"
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:12]


def program_id(doc: Any) -> str:
    """Stable content hash of a program's canonical JSON (without ``id``): ``gp-…`` or ``tp-…`` + 12 hex.
    A document without ``kind`` is read as a generation program."""
    if isinstance(doc, Mapping) and doc.get("kind") == "training":
        return validate_training(doc)["id"]
    return validate_generation(doc)["id"]


def dsl_spec(family: str) -> dict[str, Any]:
    """What a program writer may use for a family (put in LLM prompts): roles, factors and op shapes."""
    factors = {}
    for factor, (role, attribute) in FACTORS[family].items():
        if attribute in UNSUPPORTED:
            continue
        factors[factor] = {"role": role, "attribute": attribute, "ops": OP_SHAPES[attribute]}
    return {
        "family": family,
        "roles": {r: {"requires": ROLE_REQUIRES[family][r]} for r in REGISTRY[family].roles},
        "factors": factors,
        "relations": list(RELATIONS),
        "max_operations": MAX_OPERATIONS,
        "training_templates": list(range(TRAIN_TEMPLATES)),
        "generator_space": {k: v for k, v in REGISTRY[family].space("generator").items() if k != "variants"},
    }


# ==================================================================================================
# the interpreter
# ==================================================================================================
@dataclass
class _Draft:
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
    def of(cls, scene: SceneSpec) -> _Draft:
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


def generator_limits(family: str, scene_role: str | None, attribute: str) -> list:
    """The generator-space range(s) a (role, attribute) result is clamped to: one entry per coordinate."""
    space = REGISTRY[family].space("generator")
    if attribute == "position":
        ys = space[f"{scene_role}_y"]
        if family == "pick_place" and scene_role == "container":  # the bin goes left or right of the robot
            ys = [(-ys[1], -ys[0]), tuple(ys)]
        return [space[f"{scene_role}_x"], ys]
    if attribute == "yaw":
        return [space[f"{scene_role}_yaw"]]
    if attribute == "goal_offset":
        return [space["goal_dx"], space["goal_dy"]]
    return [space[attribute]]


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


def _set_position(d: _Draft, i: int, role: str, xy: list[float]) -> None:
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


def _set_goal_offset(d: _Draft, offset: list[float]) -> None:
    t, g = d.bindings["target"], d.bindings["goal"]
    lim = generator_limits(d.family, "goal", "goal_offset")
    dx, dy = (_clamp(v, r) for v, r in zip(offset, lim))
    gx = round(_clamp(d.poses[t]["x"] + dx, PUSH_GOAL_BOX[0]), 4)
    gy = round(_clamp(d.poses[t]["y"] + dy, PUSH_GOAL_BOX[1]), 4)
    d.poses[g].update(x=gx, y=gy)
    d.goal[:2] = [gx, gy]


def _set_yaw(d: _Draft, i: int, role: str, yaw: float) -> None:
    (lim,) = generator_limits(d.family, role, "yaw")
    yaw = round(_clamp(yaw, lim), 4)
    d.poses[i]["yaw"] = yaw
    if d.family == "drawer":  # the drawer's goal records the cabinet yaw (validate_spec)
        d.goal[2] = yaw


def _sample_instance(d: _Draft, i: int, op: Mapping[str, Any], path: str, rng, catalog) -> None:
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


def _set_distractors(d: _Draft, count: int, bound: dict[str, int], path: str, rng, catalog) -> None:
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


def _free_spot(d: _Draft, path: str, rng: np.random.Generator, catalog) -> tuple[float, float]:
    occupied = [(p["x"], p["y"], _footprint(o, catalog)) for p, o in zip(d.poses, d.objects)]
    for _ in range(50):
        x, y = (round(float(rng.uniform(*r)), 4) for r in DISTRACTOR_BOX)
        if all(math.hypot(x - ox, y - oy) > r + 0.07 for ox, oy, r in occupied):
            return x, y
    raise ProgramError(path, "no free spot for another distractor")


def _remove(d: _Draft, drop: set[int], bound: dict[str, int] | None = None) -> None:
    keep = [i for i in range(len(d.objects)) if i not in drop]
    remap = {old: new for new, old in enumerate(keep)}
    d.objects = [d.objects[i] for i in keep]
    d.poses = [d.poses[i] for i in keep]
    d.bindings = {r: remap[i] for r, i in d.bindings.items()}
    if bound is not None:
        for r, i in bound.items():
            bound[r] = remap[i]


def _names(d: _Draft, catalog) -> dict[str, str]:
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


def _apply_op(d: _Draft, bound: dict[str, int], op: Mapping[str, Any], path: str, rng, catalog) -> None:
    attribute = op["attribute"]
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
    needed = [r for r in prog["roles"] if _role_used(prog, r)]
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


def _role_used(prog: Mapping[str, Any], role: str) -> bool:
    return any(op["role"] == role for op in prog["operations"]) or any(
        role in c["roles"] for c in prog["constraints"]
    )


def _violated(constraints: list[dict], d: _Draft, bound: dict[str, int]) -> int | None:
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
        draft, bound = _Draft.of(base), dict(binding)
        for i, op in enumerate(prog["operations"]):
            _apply_op(draft, bound, op, f"operations[{i}]", rng, catalog)
        if draft.rename:
            draft.instruction = REGISTRY[draft.family].instruction(draft.template_id, _names(draft, catalog))
        violated = _violated(prog["constraints"], draft, bound)
        if violated is None:
            return draft.build()
    c = prog["constraints"][violated]
    raise ProgramError(
        f"constraints[{violated}]",
        f"{c['relation']} {c['value']} of {c['roles']} not met after {tries} tries",
    )


# ==================================================================================================
# role binding and transfer across families (Appendix A)
# ==================================================================================================
def is_movable(obj: ObjectSpec) -> bool:
    return not obj.asset_id.startswith(("fixture/", "articulated/"))


def is_graspable(obj: ObjectSpec, catalog=None) -> bool:
    """A movable object whose narrower side fits the gripper (size test with the catalog; movable without)."""
    if not is_movable(obj):
        return False
    if catalog is None:
        return True
    try:
        half = np.asarray(catalog.by_id(obj.asset_id).half_extents) * obj.scale
    except (KeyError, AttributeError):
        return False
    return bool(2 * min(half[0], half[1]) <= GRASP_WIDTH and half[2] >= GRASP_MIN_HEIGHT)


def satisfies(obj: ObjectSpec, requires: Mapping[str, Any], catalog=None) -> bool:
    """Whether an object meets a role's requirements (movable, graspable, articulated, categories)."""
    if "movable" in requires and is_movable(obj) != requires["movable"]:
        return False
    if requires.get("graspable") and not is_graspable(obj, catalog):
        return False
    if "articulated" in requires and obj.asset_id.startswith("articulated/") != requires["articulated"]:
        return False
    return "categories" not in requires or obj.category in requires["categories"]


def bind_roles(
    program: Mapping[str, Any], scene: SceneSpec, catalog=None, max_bindings: int = 3
) -> list[dict[str, int]]:
    """Up to `max_bindings` assignments of distinct scene objects to the program's roles (Appendix A).

    An object can take a role when it meets the role's requirements and, for every attribute the
    operations change on that role, plays a role of the scene's family that has that factor. Scene-level
    attributes (distractors, instruction) must be factors of the scene's family. Deterministic: the scene's
    own binding of same-named roles first, then by ascending object index.
    """
    prog = validate_generation(program)
    for op in prog["operations"]:
        if op["role"] is None and factor_name(scene.family, None, op["attribute"]) is None:
            return []
    roles = [r for r in prog["roles"] if _role_used(prog, r)]
    inverse = {i: r for r, i in scene.task.bindings.items()}
    candidates = []
    for role in roles:
        attrs = {op["attribute"] for op in prog["operations"] if op["role"] == role}
        ok = [
            i
            for i, obj in enumerate(scene.objects)
            if satisfies(obj, prog["roles"][role]["requires"], catalog)
            and all(i in inverse and factor_name(scene.family, inverse[i], a) for a in attrs)
        ]
        default = scene.task.bindings.get(role)
        candidates.append(sorted(ok, key=lambda i: (i != default, i)))
    # without spatial operations the constraints are preconditions the scene itself must meet
    spatial = any(op["attribute"] in ("position", "goal_offset") for op in prog["operations"])
    draft = _Draft.of(scene)
    out = []
    for combo in itertools.product(*candidates):
        if len(out) >= max_bindings:
            break
        binding = dict(zip(roles, combo))
        if len(set(combo)) == len(combo) and (
            spatial or _violated(prog["constraints"], draft, binding) is None
        ):
            out.append(binding)
    return out


def bound_factors(program: Mapping[str, Any], scene: SceneSpec, binding: Mapping[str, int]) -> list[str]:
    """The factors of the scene's family that the program changes under `binding` (its ground truth there)."""
    prog = validate_generation(program)
    inverse = {i: r for r, i in scene.task.bindings.items()}
    out = []
    for op in prog["operations"]:
        role = None if op["role"] is None else inverse.get(binding.get(op["role"], -1))
        factor = factor_name(scene.family, role, op["attribute"])
        if factor is not None and factor not in out:
            out.append(factor)
    return out


def _match_role(requires: Mapping[str, Any], family: str, taken: set[str]) -> str | None:
    """The target family's role whose requirements agree best with `requires` (no contradiction)."""
    best, best_score = None, -1
    for role in REGISTRY[family].roles:
        theirs = ROLE_REQUIRES[family][role]
        shared = [k for k in theirs if k in requires and k != "categories"]
        if role in taken or any(theirs[k] != requires[k] for k in shared):
            continue
        if len(shared) > best_score:
            best, best_score = role, len(shared)
    return best


def transfer_program(program: Mapping[str, Any], family: str) -> dict[str, Any] | None:
    """Lift a generation program to another family: roles renamed by requirements, operations kept when
    their (role, attribute) is a factor there, held-out categories of the new family dropped.

    Returns the validated program (source "transfer", ``parent`` = the original's id), or None when no
    operation carries over. Whether the lifted difficulty is useful is decided by the loop's controls.
    """
    prog = validate_generation(program)
    if family not in REGISTRY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
    if family == prog["family"]:
        return prog
    heldout = set(RANGES[family]["heldout_categories"])
    rename: dict[str, str] = {}
    for role, spec in prog["roles"].items():
        new = _match_role(spec["requires"], family, set(rename.values()))
        if new is not None:
            rename[role] = new
    operations, old_factors = [], []
    for op in prog["operations"]:
        role = None if op["role"] is None else rename.get(op["role"])
        if (op["role"] is not None and role is None) or factor_name(family, role, op["attribute"]) is None:
            continue
        new_op = {**copy.deepcopy(op), "role": role}
        if "categories" in new_op:
            new_op["categories"] = [c for c in new_op["categories"] if c not in heldout]
            if not new_op["categories"]:
                del new_op["categories"]
        operations.append(new_op)
        old_factors.append(factor_name(prog["family"], op["role"], op["attribute"]))
    if not operations:
        return None
    roles = {}
    for old, new in rename.items():
        requires = dict(prog["roles"][old]["requires"])
        if "categories" in requires:
            requires["categories"] = [c for c in requires["categories"] if c not in heldout]
            if not requires["categories"]:
                del requires["categories"]
        roles[new] = {"requires": requires}
    constraints = [
        {**c, "roles": [rename[r] for r in c["roles"]]}
        for c in prog["constraints"]
        if all(r in rename for r in c["roles"])
    ]
    kept = prog["perturbs"] if prog["perturbs"] in old_factors else old_factors[0]
    op = operations[old_factors.index(kept)]
    lifted = {
        "kind": "generation",
        "family": family,
        "mode": prog["mode"],
        "source": "transfer",
        "parent": prog["id"],
        "perturbs": factor_name(family, op["role"], op["attribute"]),
        "roles": {
            r: roles[r]
            for r in roles
            if any(o["role"] == r for o in operations) or any(r in c["roles"] for c in constraints)
        },
        "operations": operations,
        "constraints": constraints,
    }
    return validate_generation(lifted)
