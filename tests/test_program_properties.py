"""Property tests of the program DSL: arbitrary and mutated documents only ever raise ProgramError, and
well-formed programs either apply inside the generator space or raise ProgramError."""

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.engine import interpret, transfer
from coda.memory import programs as P
from coda.memory.factors import ATTRIBUTES, FACTORS
from coda.memory.programs import ProgramError
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from tests._program_helpers import RICH, seed_scene

# -- property test: arbitrary documents only ever raise ProgramError -------------------------------------------
WORDS = sorted(
    {
        *REGISTRY,
        *ATTRIBUTES,
        *P.OPS,
        *P.RELATIONS,
        *P.SOURCES,
        "generation",
        "training",
        "target",
        "container",
    }
    | {"top", "base", "goal", "cabinet", "cube", "generator", "blob_elongated"}
)
KEYS = sorted(
    {
        *P.GENERATION_KEYS,
        "op",
        "role",
        "attribute",
        "value",
        "range",
        "by",
        "categories",
        "values",
        "requires",
    }
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 10)
    | st.floats(-2, 2)
    | st.sampled_from([float("nan"), float("inf"), 1e12, -0.0])
    | st.sampled_from(WORDS)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=24,
)
VALID = [
    RICH,
    {
        "family": "push",
        "operations": [
            {"op": "sample", "attribute": "goal_offset", "range": "generator"},
            {"op": "shift", "role": "target", "attribute": "position", "by": [0.1, 0.1]},
        ],
    },
    {
        "family": "drawer",
        "operations": [
            {"op": "sample", "role": "cabinet", "attribute": "instance"},
            {"op": "scale", "attribute": "friction", "by": 2},
        ],
    },
    {
        "family": "stack",
        "operations": [
            {"op": "sample", "attribute": "distractors", "range": [0, 3]},
            {"op": "set", "role": "base", "attribute": "yaw", "value": 0.3},
        ],
        "constraints": [{"relation": "min_distance", "roles": ["top", "base"], "value": 0.1}],
    },
]


def _training_doc():
    from coda.learn.text2potential import compile_diagnosis

    diag = {"family": "stack", "phase": "grasp", "factor": "scale", "cause": "fingers too narrow"}
    return {
        "kind": "training",
        "family": "stack",
        "potential": compile_diagnosis(diag),
        "tools": dict(P.TOOLS_DEFAULTS),
    }


TRAINING_DOC = _training_doc()


def _keys_of(node):
    return sorted(node) if isinstance(node, dict) else list(range(len(node)))


def _mutate(data, doc):
    """Replace, delete or add one node somewhere in a copy of `doc`."""
    holder = {"root": copy.deepcopy(doc)}
    node, key = holder, "root"
    while isinstance(node[key], dict | list) and node[key] and data.draw(st.booleans()):
        node, key = node[key], data.draw(st.sampled_from(_keys_of(node[key])))
    target = node[key]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace" or not isinstance(target, dict | list):
        node[key] = data.draw(json_values)
    elif action == "delete" and target:
        del target[data.draw(st.sampled_from(_keys_of(target)))]
    elif isinstance(target, dict):
        target[data.draw(st.sampled_from(KEYS))] = data.draw(json_values)
    else:
        target.append(data.draw(json_values))
    return holder["root"]


def _exercise(doc, catalog, scenes, seed):
    try:
        prog = P.validate_generation(doc)
    except ProgramError:
        return
    for scene in scenes.values():
        for bindings in transfer.bind_roles(prog, scene, catalog)[:1] or [None]:
            try:
                interpret.apply_generation(prog, scene, np.random.default_rng(seed), catalog, bindings)
            except ProgramError:
                pass
    for family in REGISTRY:
        transfer.transfer_program(prog, family)


class Fixed:
    """Catalog and scenes for the property tests, with a short repr (hypothesis prints its arguments)."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.scenes = {f: seed_scene(catalog, f, 9) for f in REGISTRY}

    def __repr__(self) -> str:
        return "Fixed(catalog, seed scenes)"


@pytest.fixture(scope="module")
def fixed(catalog):
    return Fixed(catalog)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_programs_raise_only_program_errors(fixed, data):
    doc = _mutate(data, VALID[data.draw(st.integers(0, len(VALID) - 1))])
    _exercise(doc, fixed.catalog, fixed.scenes, data.draw(st.integers(0, 2**16)))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_mutated_training_programs_raise_only_program_errors(data):
    doc = _mutate(data, TRAINING_DOC)
    try:
        assert P.validate_training(doc)["kind"] == "training"
    except ProgramError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=json_values, seed=st.integers(0, 2**16))
def test_random_json_raises_only_program_errors(fixed, doc, seed):
    _exercise(doc, fixed.catalog, fixed.scenes, seed)
    try:
        P.validate_training(doc)
    except ProgramError:
        pass


# -- property test: well-formed programs either apply inside the generator space or raise ProgramError ----------
def _pair_of(elements, ordered=True):
    pair = st.lists(elements, min_size=2, max_size=2)
    return pair.map(sorted) if ordered else pair


NUMBERS = st.floats(-100, 100, allow_nan=False)
FIELD_VALUES = {
    "number": NUMBERS,
    "factor": st.floats(0.01, 100),
    "xy": _pair_of(NUMBERS, ordered=False),
    "range": _pair_of(NUMBERS) | st.just("generator"),
    "xy_range": _pair_of(_pair_of(st.floats(-1, 1)), ordered=False) | st.just("generator"),
    "count": st.integers(0, 3),
    "count_range": _pair_of(st.integers(0, 3)) | st.just("generator"),
    "count_shift": st.integers(-3, 3),
    "template": st.integers(0, TRAIN_TEMPLATES - 1),
    "templates": st.lists(st.integers(0, TRAIN_TEMPLATES - 1), min_size=1, max_size=3),
}


@st.composite
def well_formed(draw, family):
    factors = [f for f, (_, attr) in FACTORS[family].items() if attr not in P.UNSUPPORTED]
    training_cats = sorted(
        {"cube", "cuboid", "sphere", "drawer_single", "drawer_triple"}
        - set(RANGES[family]["heldout_categories"])
    )
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        role, attr = FACTORS[family][draw(st.sampled_from(factors))]
        name = draw(st.sampled_from(sorted(P.OP_SHAPES[attr])))
        op = {"op": name, "role": role, "attribute": attr}
        for key, kind in P.OP_SHAPES[attr][name].items():
            if key.endswith("?") and draw(st.booleans()):
                continue
            values = (
                st.lists(st.sampled_from(training_cats), min_size=1, max_size=2)
                if kind == "categories"
                else FIELD_VALUES[kind]
            )
            op[key.rstrip("?")] = draw(values)
        ops.append(op)
    roles = list(REGISTRY[family].roles)
    constraints = []
    if len(roles) == 2 and draw(st.booleans()):
        relation = draw(st.sampled_from(P.RELATIONS))
        constraints.append({"relation": relation, "roles": roles, "value": draw(st.floats(0.01, 0.5))})
    return {"family": family, "operations": ops, "constraints": constraints}


def _within(value, ranges, tol=1e-4):
    intervals = ranges if isinstance(ranges, list) else [ranges]
    return any(lo - tol <= value <= hi + tol for lo, hi in intervals)


def _check_in_generator_space(out, base, prog):
    family = out.family
    for op in prog["operations"]:
        role, attr = op["role"], op["attribute"]
        if attr in ("instance", "instruction", "distractors"):
            continue
        i = out.role(role)
        limits = P.generator_limits(family, role, attr)
        if attr == "position":
            values = [out.spatial.poses[i].x, out.spatial.poses[i].y]
        elif attr == "yaw":
            values = [out.spatial.poses[i].yaw]
        elif attr == "goal_offset":
            t = out.spatial.poses[out.role("target")]
            values = [out.spatial.poses[i].x - t.x, out.spatial.poses[i].y - t.y]
            limits = [(lo - 0.05, hi + 0.05) for lo, hi in limits]  # the goal is also kept on the table
        else:
            values = [getattr(out.objects[i], attr)]
        assert all(_within(v, lim) for v, lim in zip(values, limits)), (op, values, limits)
    assert len(out.objects) - len(out.task.bindings) <= 3


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_well_formed_programs_stay_in_the_generator_space(fixed, data):
    family = data.draw(st.sampled_from(sorted(REGISTRY)))
    prog = P.validate_generation(data.draw(well_formed(family)))
    base = fixed.scenes[family]
    try:
        out = interpret.apply_generation(
            prog, base, np.random.default_rng(data.draw(st.integers(0, 99))), fixed.catalog
        )
    except ProgramError as e:
        assert e.field.startswith(("constraints[", "operations[")), str(e)
        return
    _check_in_generator_space(out, base, prog)
    assert out.task.template_id < TRAIN_TEMPLATES
