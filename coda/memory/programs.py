"""Generation and training programs (paper §3.2, Appendix A): a declarative DSL and its validation.

Programs are **data, never code**: JSON documents checked against a schema (here) and interpreted by the
data engine (`apply_generation` etc. in the engine's interpreter); nothing in them is ever evaluated. A
*generation program* recreates a difficulty on a base scene::

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
(< ``TRAIN_TEMPLATES``); ``variant`` (the task component, no role) one of the family's generator variants,
set or sampled among ``values``. Held-out categories and instruction templates are rejected here; the interpreter
clamps every result to the family's generator space (`generator_limits`, ``ranges.py``) and the arena.

A *training program* pairs a Text2potential fragment with learning tools (planner demonstrations,
imitation/critic weights, replay share). Programs of LIBERO suites (family ``libero_*``) have their own
schema, `coda.memory.libero_programs`; `validate_program` dispatches to it. Typed read-only views of the
validated documents: `coda.memory.program_views`.

Example:
    >>> prog = validate_generation({"family": "pick_place", "operations": [
    ...     {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}]})
    >>> prog["id"], prog["perturbs"]
    ('gp-…', 'mass')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coda.learn.text2potential import validate_fragment
from coda.memory import libero_programs
from coda.memory.factors import (
    ATTRIBUTES,
    FACTORS,
    SCENE_ATTRIBUTES,
    TASK_ATTRIBUTES,
    factor_name,
    operation_factor,
)
from coda.memory.program_fields import (  # noqa: F401  (limits: re-exported API)
    MAX_DEPTH,
    MAX_DOC_CHARS,
    MAX_STRING,
    NUM_BOUND,
    VERSION,
    ProgramError,
    by_kind,
    check_document,
    check_keys,
    content_id,
    parse_integer,
    parse_interval,
    parse_number,
    parse_pair,
    parse_string,
)
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES

__all__ = [
    "ProgramError",
    "validate_generation",
    "validate_training",
    "validate_program",
    "program_id",
    "dsl_spec",
    "generator_limits",
    "generator_variants",
    "variant_choices",
]

MAX_OPERATIONS = 8
MAX_CONSTRAINTS = 8
MAX_DISTRACTORS = 3
MAX_DISTANCE = 2.0  # metres: the largest distance a constraint may name
OPS = ("sample", "set", "scale", "shift")
RELATIONS = ("min_distance", "max_distance")
SOURCES = ("template", "hf", "openai", "transfer", "manual", "random")
GENERATOR = "generator"  # a sample range meaning "the family's whole generator space" (domain randomisation)
REQUIREMENTS = ("movable", "graspable", "articulated", "categories")
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
    "variant": {"set": {"value": "variant"}, "sample": {"values?": "variants"}},
}
UNSUPPORTED = {"part": "not supported by the interpreter (the scripted planners only handle the top drawer)"}


def _categories(family: str, path: str, value: Any) -> list[str]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 16:
        raise ProgramError(path, f"expected a list of 1..16 category names, got {value!r}")
    out = [parse_string(f"{path}[{k}]", c) for k, c in enumerate(value)]
    for k, c in enumerate(out):
        if not c:
            raise ProgramError(f"{path}[{k}]", "expected a non-empty category name")
        if c in RANGES[family]["heldout_categories"]:
            raise ProgramError(f"{path}[{k}]", f"{c!r} is a held-out category of {family}")
    return sorted(set(out))


def _field(family: str, kind: str, path: str, value: Any) -> Any:
    """Parse one operation field of the given kind (see `OP_SHAPES`) into its canonical form."""
    if kind == "number":
        return parse_number(path, value)
    if kind == "factor":
        factor = parse_number(path, value, 0.0, NUM_BOUND)
        if factor <= 0:
            raise ProgramError(path, f"expected a positive factor, got {value!r}")
        return factor
    if kind == "xy":
        return parse_pair(path, value, parse_number)
    if kind in ("range", "xy_range", "count_range") and value == GENERATOR:
        return GENERATOR
    if kind == "range":
        return parse_interval(path, value, parse_number)
    if kind == "xy_range":
        return parse_pair(path, value, lambda p, v: parse_interval(p, v, parse_number))
    if kind == "count":
        return parse_integer(path, value, 0, MAX_DISTRACTORS)
    if kind == "count_range":
        return parse_interval(path, value, lambda p, v: parse_integer(p, v, 0, MAX_DISTRACTORS))
    if kind == "count_shift":
        return parse_integer(path, value, -MAX_DISTRACTORS, MAX_DISTRACTORS)
    if kind == "template":
        return parse_integer(path, value, 0, TRAIN_TEMPLATES - 1)
    if kind == "templates":
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= TRAIN_TEMPLATES:
            raise ProgramError(path, f"expected a list of 1..{TRAIN_TEMPLATES} training template ids")
        return sorted({parse_integer(f"{path}[{k}]", v, 0, TRAIN_TEMPLATES - 1) for k, v in enumerate(value)})
    if kind == "categories":
        return _categories(family, path, value)
    if kind == "variant":
        return _variant(family, path, value)
    if kind == "variants":
        variants = generator_variants(family)
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= len(variants):
            raise ProgramError(path, f"expected a list of 1..{len(variants)} variants of {family}")
        return sorted({_variant(family, f"{path}[{k}]", v) for k, v in enumerate(value)})
    raise AssertionError(kind)


def _variant(family: str, path: str, value: Any) -> str:
    variants = generator_variants(family)
    if value not in variants:
        raise ProgramError(
            path, f"expected a generator variant of {family}, one of {list(variants)}, got {value!r}"
        )
    return str(value)


def _roles_with(family: str, attribute: str) -> list[str]:
    return sorted({r for r, a in FACTORS[family].values() if a == attribute and r is not None})


def _operation(family: str, path: str, op: Any) -> dict[str, Any]:
    check_keys(path, op, {"op", "role", "attribute", "value", "range", "by", "categories", "values"})
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
    role = parse_string(f"{path}.role", op.get("role"), default="") or None
    if attribute in TASK_ATTRIBUTES:
        if role is not None:
            raise ProgramError(f"{path}.role", f"{attribute!r} is the task component: leave role empty")
    elif attribute in SCENE_ATTRIBUTES:
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
    check_keys(path, op, allowed)
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
    check_keys(path, value, REQUIREMENTS)
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
    check_keys(path, c, {"relation", "roles", "value"}, ("relation", "roles", "value"))
    if c["relation"] not in RELATIONS:
        raise ProgramError(
            f"{path}.relation", f"unknown relation {c['relation']!r}; expected one of {list(RELATIONS)}"
        )
    roles = parse_pair(f"{path}.roles", c["roles"], lambda p, v: parse_string(p, v))
    for k, r in enumerate(roles):
        if r not in REGISTRY[family].roles:
            raise ProgramError(
                f"{path}.roles[{k}]",
                f"unknown role {r!r} of {family}; expected {list(REGISTRY[family].roles)}",
            )
    if roles[0] == roles[1]:
        raise ProgramError(f"{path}.roles", "a relation needs two different roles")
    value = parse_number(f"{path}.value", c["value"], 0.0, MAX_DISTANCE)
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
    parse_string("id", doc.get("id"))
    return {
        "kind": kind,
        "version": VERSION,
        "family": family,
        "mode": parse_string("mode", doc.get("mode")),
        "source": source,
        "parent": parse_string("parent", doc.get("parent")),
    }


GENERATION_KEYS = ("kind", "version", "id", "family", "mode", "source", "parent", "perturbs", "roles")
GENERATION_KEYS += ("operations", "constraints")
TRAINING_KEYS = ("kind", "version", "id", "family", "mode", "source", "parent", "potential", "tools")


def validate_generation(doc: Any) -> dict[str, Any]:
    """Canonical copy of a generation program (defaults filled, roles declared, ``id`` recomputed from the
    content). Raises `ProgramError` naming the offending field."""
    check_keys("", check_document(doc, "generation"), GENERATION_KEYS, ("family", "operations"))
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
    check_keys("roles", declared, REGISTRY[family].roles)
    roles: dict[str, dict] = {}
    used = {op["role"] for op in operations} | {r for c in constraints for r in c["roles"]}
    for role in REGISTRY[family].roles:  # family order: canonical
        if role in declared:
            spec = check_keys(f"roles.{role}", declared[role], {"requires"})
            given = spec.get("requires")
            requires = ROLE_REQUIRES[family][role] if given is None else given
            roles[role] = {"requires": _requires(family, f"roles.{role}.requires", requires)}
        elif role in used:
            roles[role] = {"requires": dict(ROLE_REQUIRES[family][role])}
    changed = [operation_factor(family, op["role"], op["attribute"]) for op in operations]
    # by default the first factor changed, the task variant only when nothing else is
    default = next((f for f in changed if f not in TASK_ATTRIBUTES), changed[0])
    perturbs = parse_string("perturbs", doc.get("perturbs")) or default
    if perturbs not in changed:
        raise ProgramError(
            "perturbs", f"{perturbs!r} is not changed by any operation; they change {sorted(set(changed))}"
        )
    out.update(perturbs=perturbs, roles=roles, operations=operations, constraints=constraints)
    out["id"] = content_id(out)
    return out


def validate_training(doc: Any) -> dict[str, Any]:
    """Canonical copy of a training program: a Text2potential fragment plus learning tools."""
    check_keys("", check_document(doc, "training"), TRAINING_KEYS, ("family", "potential"))
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
    check_keys("tools", given, tuple(TOOLS_DEFAULTS))
    tools = dict(TOOLS_DEFAULTS)
    for key, value in given.items():
        lo, hi = TOOLS_BOUNDS[key]
        path = f"tools.{key}"
        tools[key] = (
            parse_integer(path, value, lo, hi)
            if key == "planner_demos"
            else parse_number(path, value, lo, hi)
        )
    out.update(potential=potential, tools=tools)
    out["id"] = content_id(out)
    return out


def validate_program(doc: Any) -> dict[str, Any]:
    """Validate a generation or training program, dispatching on ``kind`` (LIBERO suites' programs, whose
    family is ``libero_*``, have their own DSL: `coda.memory.libero_programs`)."""
    if libero_programs.is_libero(doc):
        return libero_programs.validate_program(doc)
    return by_kind(doc, validate_generation, validate_training)


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
        "task": {"variant": {"values": list(generator_variants(family)), "ops": OP_SHAPES["variant"]}},
        "generator_space": {k: v for k, v in REGISTRY[family].space("generator").items() if k != "variants"},
    }


def generator_limits(family: str, scene_role: str | None, attribute: str) -> list:
    """The generator-space range(s) a (role, attribute) result is clamped to: one entry per coordinate (the
    family's own `Family.generator_limits`)."""
    return REGISTRY[family].generator_limits(scene_role, attribute)


def generator_variants(family: str) -> tuple[str, ...]:
    """The task variants of the family's generator space (what a ``variant`` operation may produce)."""
    return tuple(REGISTRY[family].space("generator")["variants"])


def variant_choices(family: str, op: Mapping[str, Any]) -> list[str]:
    """The variants a validated ``variant`` operation can produce: its value, its values, or every
    generator variant."""
    if op["op"] == "set":
        return [op["value"]]
    return list(op.get("values") or generator_variants(family))
