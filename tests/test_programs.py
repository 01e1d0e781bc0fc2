"""Generation/training program DSL: schema validation (errors name their field, `coda.memory.programs`), the
interpreter (`coda.engine.interpret`: generator space, family invariants, nothing held out ever produced,
determinism), role binding and cross-family transfer (`coda.engine.transfer`, Appendix A), and a property
test that arbitrary documents only ever raise ProgramError."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.engine import interpret, transfer
from coda.engine.factors import ATTRIBUTES, FACTORS
from coda.learn.text2potential import sparse_fragment
from coda.memory import programs as P
from coda.memory.programs import ProgramError
from coda.sim.families import REGISTRY
from coda.sim.families.base import is_heldout_instance
from coda.sim.families.naming import describe
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from coda.sim.scene import SceneSpec


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """The asset catalog: the repository's built data/ when present (0.5 s), else built here (~8 s)."""
    from coda.sim.assets import build_assets, load_catalog

    repo_data = Path(__file__).resolve().parents[1] / "data"
    if (repo_data / "assets" / "catalog.json").exists():
        return load_catalog(repo_data)
    return build_assets(tmp_path_factory.mktemp("assets"))


def seed_scene(catalog, family: str, seed: int = 0) -> SceneSpec:
    return REGISTRY[family].sample(np.random.default_rng(seed), catalog, "seed")


def mass_program(**extra) -> dict:
    return {
        "kind": "generation",
        "family": "pick_place",
        "operations": [{"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}],
        **extra,
    }


RICH = {
    "kind": "generation",
    "version": 1,
    "family": "pick_place",
    "mode": "pick_place/lift/mass",
    "source": "template",
    "perturbs": "mass",
    "roles": {"target": {"requires": {"movable": True, "graspable": True}}},
    "operations": [
        {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]},
        {"op": "set", "role": "target", "attribute": "yaw", "value": 1.2},
        {"op": "scale", "role": "target", "attribute": "scale", "by": 1.3},
        {"op": "shift", "role": "target", "attribute": "position", "by": [0.05, -0.1]},
        {"op": "sample", "attribute": "instruction"},
    ],
    "constraints": [{"relation": "min_distance", "roles": ["target", "container"], "value": 0.15}],
}


# -- schema ---------------------------------------------------------------------------------------------------
def test_round_trip_is_canonical_and_ids_are_content_hashes():
    prog = P.validate_generation(RICH)
    assert P.validate_generation(prog) == prog
    assert P.validate_generation(json.loads(json.dumps(prog))) == prog
    assert prog["id"].startswith("gp-") and len(prog["id"]) == 15
    assert P.program_id(RICH) == prog["id"] == P.validate_program(prog)["id"]
    assert P.validate_generation({**RICH, "id": "whatever"})["id"] == prog["id"]  # derived, not trusted
    changed = copy.deepcopy(RICH)
    changed["operations"][0]["range"] = [0.5, 0.7]
    assert P.program_id(changed) != prog["id"]
    # defaults: the role of a single-role attribute, perturbs from the first operation, used roles declared
    small = P.validate_generation(
        {"family": "pick_place", "operations": [{"op": "set", "attribute": "mass", "value": 0.3}]}
    )
    assert small["operations"][0]["role"] == "target" and small["perturbs"] == "mass"
    assert small["roles"] == {"target": {"requires": {"movable": True, "graspable": True}}}
    assert small["source"] == "manual" and small["constraints"] == []
    assert prog["roles"]["container"] == {"requires": P.ROLE_REQUIRES["pick_place"]["container"]}


def test_training_program_round_trip():
    doc = {
        "kind": "training",
        "family": "push",
        "potential": sparse_fragment("push", "away"),
        "tools": {"planner_demos": 3, "replay_share": 0.5},
    }
    prog = P.validate_training(doc)
    assert prog["id"].startswith("tp-") and P.validate_program(prog) == prog
    assert prog["tools"] == {**P.TOOLS_DEFAULTS, "planner_demos": 3, "replay_share": 0.5}
    assert P.program_id(doc) == prog["id"]


def _gen(**patch):
    doc = copy.deepcopy(RICH)
    doc.update(patch)
    return doc


def _op(**fields):
    return _gen(operations=[{"op": "set", "role": "target", "attribute": "mass", "value": 0.3, **fields}])


BAD_GENERATION = [
    ("family", _gen(family="juggling")),
    ("kind", _gen(kind="policy")),
    ("version", _gen(version=2)),
    ("code", _gen(code="import os")),
    ("mode", _gen(mode=["x"])),
    ("source", _gen(source="human")),
    ("operations", _gen(operations=[])),
    ("operations", _gen(operations=[RICH["operations"][0]] * 9)),
    ("operations[0].attribute", _op(attribute="colour")),
    ("operations[0].op", _op(op="multiply")),
    (
        "operations[0].op",
        _gen(operations=[{"op": "scale", "role": "target", "attribute": "instance", "by": 2}]),
    ),
    ("operations[0].attribute", _op(role="container")),  # container mass is not a pick_place factor
    ("operations[0].attribute", _gen(operations=[{"op": "set", "attribute": "part", "value": 1}])),
    (
        "operations[0].attribute",
        _gen(operations=[{"op": "set", "attribute": "goal_offset", "value": [0.1, 0]}]),
    ),
    ("operations[0].role", _op(role="gripper")),
    ("operations[0].role", _gen(operations=[{"op": "set", "attribute": "position", "value": [0.5, 0]}])),
    (
        "operations[0].role",
        _gen(operations=[{"op": "set", "role": "target", "attribute": "distractors", "value": 1}]),
    ),
    ("operations[0].value", _op(value=float("nan"))),
    ("operations[0].value", _op(value="heavy")),
    ("operations[0].value", _op(value=True)),
    ("operations[0].value", _op(value=1e9)),
    (
        "operations[0].range",
        _gen(operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.8, 0.5]}]),
    ),
    (
        "operations[0].range[1]",
        _gen(
            operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.1, float("inf")]}]
        ),
    ),
    (
        "operations[0].range",
        _gen(operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.1]}]),
    ),
    ("operations[0].by", _gen(operations=[{"op": "scale", "role": "target", "attribute": "mass", "by": -2}])),
    (
        "operations[0].by[1]",
        _gen(operations=[{"op": "shift", "role": "target", "attribute": "position", "by": [0.1, "x"]}]),
    ),
    (
        "operations[0].value",
        _gen(operations=[{"op": "set", "attribute": "instruction", "value": TRAIN_TEMPLATES}]),
    ),
    (
        "operations[0].values[0]",
        _gen(operations=[{"op": "sample", "attribute": "instruction", "values": [5]}]),
    ),
    ("operations[0].value", _gen(operations=[{"op": "set", "attribute": "distractors", "value": 4}])),
    (
        "operations[0].categories[0]",
        _gen(
            operations=[
                {"op": "sample", "role": "target", "attribute": "instance", "categories": ["blob_elongated"]}
            ]
        ),
    ),
    (
        "operations[0].range",
        _gen(operations=[{"op": "set", "role": "target", "attribute": "mass", "range": [0, 1]}]),
    ),
    ("operations[0].value", _gen(operations=[{"op": "set", "role": "target", "attribute": "mass"}])),
    ("operations[1]", _gen(operations=[RICH["operations"][0], "mass"])),
    ("perturbs", _gen(perturbs="friction")),
    ("roles.gripper", _gen(roles={"gripper": {}})),
    ("roles.target.requires.graspable", _gen(roles={"target": {"requires": {"graspable": "yes"}}})),
    ("roles.target.requires.heavy", _gen(roles={"target": {"requires": {"heavy": True}}})),
    ("roles.target.wants", _gen(roles={"target": {"wants": {}}})),
    (
        "constraints[0].relation",
        _gen(constraints=[{"relation": "touching", "roles": ["target", "container"], "value": 0.1}]),
    ),
    (
        "constraints[0].roles",
        _gen(constraints=[{"relation": "min_distance", "roles": ["target", "target"], "value": 0.1}]),
    ),
    (
        "constraints[0].roles[1]",
        _gen(constraints=[{"relation": "min_distance", "roles": ["target", "shelf"], "value": 0.1}]),
    ),
    (
        "constraints[0].value",
        _gen(constraints=[{"relation": "max_distance", "roles": ["target", "container"], "value": 0}]),
    ),
    (
        "constraints[0].value",
        _gen(constraints=[{"relation": "max_distance", "roles": ["target", "container"]}]),
    ),
    ("program", _gen(operations=RICH["operations"] * 300)),
    ("program", ["not", "an", "object"]),
]


@pytest.mark.parametrize(
    "field,doc", BAD_GENERATION, ids=[f"{i}-{f}" for i, (f, _) in enumerate(BAD_GENERATION)]
)
def test_generation_errors_name_their_field(field, doc):
    with pytest.raises(ProgramError) as info:
        P.validate_generation(doc)
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ")


def test_unknown_attribute_message_lists_the_choices():
    with pytest.raises(
        ProgramError, match=r"operations\[0\].attribute: unknown attribute 'colour'; expected one of"
    ) as info:
        P.validate_generation(_op(attribute="colour"))
    assert all(a in str(info.value) for a in ATTRIBUTES)


def _training(**patch):
    doc = {"kind": "training", "family": "push", "potential": sparse_fragment("push", "away")}
    doc.update(patch)
    return doc


BAD_TRAINING = [
    ("tools.replay_share", _training(tools={"replay_share": 1.5})),
    ("tools.planner_demos", _training(tools={"planner_demos": 17})),
    ("tools.planner_demos", _training(tools={"planner_demos": 2.5})),
    ("tools.critic_weight", _training(tools={"critic_weight": -1})),
    ("tools.dagger", _training(tools={"dagger": 1})),
    ("potential.family", _training(potential=sparse_fragment("stack", "on"))),
    (
        "potential.subgoals[0].predicate",
        _training(potential={"family": "push", "variant": "away", "subgoals": [{"predicate": "fly"}]}),
    ),
    ("potential", _training(potential="staged")),
    ("kind", {**_training(), "kind": "generation_"}),
    ("operations", _training(operations=[])),
]


@pytest.mark.parametrize("field,doc", BAD_TRAINING, ids=[f"{i}-{f}" for i, (f, _) in enumerate(BAD_TRAINING)])
def test_training_errors_name_their_field(field, doc):
    with pytest.raises(ProgramError) as info:
        P.validate_training(doc)
    assert info.value.field == field, str(info.value)


def test_validate_program_dispatches_on_kind():
    assert P.validate_program(RICH)["kind"] == "generation"
    assert P.validate_program(_training())["kind"] == "training"
    with pytest.raises(ProgramError, match="^kind: "):
        P.validate_program({"family": "push"})


# -- interpreter ---------------------------------------------------------------------------------------------
def test_apply_samples_clamps_and_keeps_family_invariants(catalog):
    base = seed_scene(catalog, "pick_place")
    out = interpret.apply_generation(RICH, base, np.random.default_rng(0), catalog)
    t, c = out.role("target"), out.role("container")
    assert 0.5 <= out.objects[t].mass <= 0.8
    assert out.spatial.poses[t].yaw == 1.2
    assert out.objects[t].scale == pytest.approx(min(base.objects[t].scale * 1.3, 1.5), abs=1e-4)
    assert out.spatial.poses[t].x == pytest.approx(base.spatial.poses[t].x + 0.05, abs=1e-4)
    assert out.task.template_id < TRAIN_TEMPLATES and out.task.template_id != base.task.template_id
    names = {"target": describe(out.objects[t]), "container": "bin"}
    assert out.task.instruction == REGISTRY["pick_place"].instruction(out.task.template_id, names)
    assert (
        np.hypot(
            out.spatial.poses[t].x - out.spatial.poses[c].x, out.spatial.poses[t].y - out.spatial.poses[c].y
        )
        >= 0.15
    )
    # values outside the generator space are clamped to it
    space = REGISTRY["pick_place"].space("generator")
    far = _gen(
        operations=[
            {"op": "set", "role": "target", "attribute": "mass", "value": 50},
            {"op": "set", "role": "target", "attribute": "position", "value": [5, -5]},
            {"op": "set", "role": "container", "attribute": "position", "value": [0.0, 0.01]},
        ],
        perturbs="mass",
        constraints=[],
    )
    out = interpret.apply_generation(far, base, np.random.default_rng(0), catalog)
    assert out.objects[t].mass == space["mass"][1]
    assert (out.spatial.poses[t].x, out.spatial.poses[t].y) == (space["target_x"][1], space["target_y"][0])
    assert (out.spatial.poses[c].x, out.spatial.poses[c].y) == (
        space["container_x"][0],
        space["container_y"][0],
    )
    assert out.task.goal[0] == out.spatial.poses[c].yaw  # pick_place.validate_spec holds (SceneSpec built)


def test_apply_is_deterministic_given_the_generator(catalog):
    base = seed_scene(catalog, "pick_place", 3)
    prog = _gen(
        operations=[
            *RICH["operations"],
            {"op": "sample", "attribute": "distractors", "range": [2, 3]},
            {"op": "sample", "role": "target", "attribute": "instance"},
        ]
    )
    a = interpret.apply_generation(prog, base, np.random.default_rng(7), catalog)
    b = interpret.apply_generation(prog, base, np.random.default_rng(7), catalog)
    assert a.hash == b.hash and a != base


def test_push_goal_follows_the_target_and_goal_offset_moves_goal_and_region(catalog):
    base = seed_scene(catalog, "push", 1)
    t, g = base.role("target"), base.role("goal")
    offset = np.subtract(base.task.goal, [base.spatial.poses[t].x, base.spatial.poses[t].y])
    moved = interpret.apply_generation(
        {
            "family": "push",
            "operations": [{"op": "shift", "role": "target", "attribute": "position", "by": [0.03, 0.05]}],
        },
        base,
        np.random.default_rng(0),
        catalog,
    )
    new_offset = np.subtract(moved.task.goal, [moved.spatial.poses[t].x, moved.spatial.poses[t].y])
    assert np.allclose(new_offset, offset, atol=2e-4)
    prog = {
        "family": "push",
        "operations": [{"op": "set", "attribute": "goal_offset", "value": [-0.1, 0.12]}],
    }
    out = interpret.apply_generation(prog, base, np.random.default_rng(0), catalog)
    assert out.task.goal == (out.spatial.poses[g].x, out.spatial.poses[g].y)
    assert out.task.goal == pytest.approx(
        (base.spatial.poses[t].x - 0.1, base.spatial.poses[t].y + 0.12), abs=1e-4
    )
    far = interpret.apply_generation(
        {**prog, "operations": [{"op": "scale", "attribute": "goal_offset", "by": 10}]},
        base,
        np.random.default_rng(0),
        catalog,
    )
    dx, dy = np.subtract(far.task.goal, [far.spatial.poses[t].x, far.spatial.poses[t].y])
    assert abs(dx) <= 0.14 + 1e-9 and abs(dy) <= 0.14 + 1e-9


def test_drawer_yaw_and_instance_keep_the_goal_consistent(catalog):
    base = seed_scene(catalog, "drawer", 2)
    prog = {
        "family": "drawer",
        "operations": [
            {"op": "set", "role": "cabinet", "attribute": "yaw", "value": 2.0},
            {"op": "sample", "role": "cabinet", "attribute": "instance", "categories": ["drawer_triple"]},
        ],
    }
    out = interpret.apply_generation(prog, base, np.random.default_rng(0), catalog)
    cab = out.objects[out.role("cabinet")]
    assert out.spatial.poses[0].yaw == out.task.goal[2] == 0.45  # clamped to the generator's cabinet_yaw
    assert cab.category == "drawer_triple" and out.task.goal[0] == 2.0  # the top of three drawers
    assert "top drawer" in out.task.instruction


def test_distractors_are_dropped_or_added_from_the_training_pool(catalog):
    base = seed_scene(catalog, "stack", 4)
    pool = {a.asset_id for a in REGISTRY["stack"].pool(catalog, "generator")}
    for n in (0, 3, 1):
        prog = {"family": "stack", "operations": [{"op": "set", "attribute": "distractors", "value": n}]}
        out = interpret.apply_generation(prog, base, np.random.default_rng(n), catalog)
        extra = [i for i in range(len(out.objects)) if i not in out.task.bindings.values()]
        assert len(extra) == n
        assert out.objects[out.role("top")] == base.objects[base.role("top")]
        assert all(out.objects[i].asset_id in pool or out.objects[i] in base.objects for i in extra)


def test_interpreter_never_produces_heldout_instances_categories_or_templates(catalog):
    for family in ("pick_place", "stack", "push", "drawer"):
        heldout = set(RANGES[family]["heldout_categories"])
        role = {"pick_place": "target", "stack": "top", "push": "target", "drawer": "cabinet"}[family]
        ops = [
            {"op": "sample", "role": role, "attribute": "instance"},
            {"op": "sample", "attribute": "instruction"},
        ]
        if "distractors" in FACTORS[family]:
            ops.append({"op": "sample", "attribute": "distractors", "range": [0, 2]})
        prog = {"family": family, "operations": ops}
        base = seed_scene(catalog, family, 5)
        rng = np.random.default_rng(0)
        seen = set()
        for _ in range(150):
            out = interpret.apply_generation(prog, base, rng, catalog)
            assert out.task.template_id < TRAIN_TEMPLATES
            for obj in out.objects:
                if not obj.asset_id.startswith("fixture/"):
                    assert obj.category not in heldout and not is_heldout_instance(obj.asset_id), obj
            seen.add(out.objects[out.role(role)].category)
        assert len(seen) >= 2  # it does sample across training categories
    # the held-out category cannot even be asked for, and a held-out base is refused
    with pytest.raises(ProgramError, match=r"^operations\[0\].categories\[0\]"):
        P.validate_generation(
            {
                "family": "stack",
                "operations": [{"op": "sample", "attribute": "instance", "categories": ["cylinder"]}],
            }
        )
    base = seed_scene(catalog, "stack")
    suite = REGISTRY["stack"].sample(np.random.default_rng(0), catalog, "tasks")
    with pytest.raises(ProgramError, match=r"^base\.task\.template_id"):
        interpret.apply_generation(
            {"family": "stack", "operations": [{"op": "set", "attribute": "mass", "value": 0.1}]},
            suite,
            np.random.default_rng(0),
            catalog,
        )
    assert base.task.template_id < TRAIN_TEMPLATES


def test_cannot_apply_errors(catalog):
    stack = seed_scene(catalog, "stack")
    with pytest.raises(ProgramError, match="^family: "):
        interpret.apply_generation(mass_program(), stack, np.random.default_rng(0), catalog)
    pp = seed_scene(catalog, "pick_place")
    with pytest.raises(ProgramError, match=r"^bindings\.target"):
        interpret.apply_generation(
            mass_program(), pp, np.random.default_rng(0), catalog, bindings={"target": 99}
        )
    with pytest.raises(
        ProgramError, match=r"^operations\[0\]\.role"
    ):  # the bin plays no role with a mass factor
        interpret.apply_generation(
            mass_program(), pp, np.random.default_rng(0), catalog, bindings={"target": pp.role("container")}
        )
    impossible = mass_program(
        constraints=[{"relation": "max_distance", "roles": ["target", "container"], "value": 0.01}]
    )
    with pytest.raises(ProgramError, match=r"^constraints\[0\]"):
        interpret.apply_generation(impossible, pp, np.random.default_rng(0), catalog)
    drawer = seed_scene(catalog, "drawer")
    prog = {"family": "pick_place", "operations": [{"op": "set", "attribute": "distractors", "value": 1}]}
    assert transfer.bind_roles(prog, drawer, catalog) == []  # drawer scenes have no distractors factor


# -- binding and transfer (Appendix A) ------------------------------------------------------------------------
def test_transfer_pick_place_to_stack_and_push_binds_and_applies(catalog):
    prog = P.validate_generation(
        _gen(
            operations=[
                {"op": "sample", "role": "target", "attribute": "mass", "range": [0.3, 0.4]},
                {
                    "op": "sample",
                    "role": "container",
                    "attribute": "position",
                    "range": [[0.5, 0.55], [0.2, 0.25]],
                },
                {"op": "set", "attribute": "distractors", "value": 2},
            ],
            constraints=[],
        )
    )
    for family, role in (("stack", "top"), ("push", "target")):
        lifted = transfer.transfer_program(prog, family)
        assert (
            lifted["family"] == family and lifted["source"] == "transfer" and lifted["parent"] == prog["id"]
        )
        assert lifted["perturbs"] == "mass"
        assert [(op["role"], op["attribute"]) for op in lifted["operations"]] == [
            (role, "mass"),
            (None, "distractors"),
        ]
        scene = seed_scene(catalog, family, 6)
        bindings = transfer.bind_roles(lifted, scene, catalog)
        assert bindings and bindings[0] == {role: scene.role(role)}
        out = interpret.apply_generation(lifted, scene, np.random.default_rng(0), catalog, bindings[0])
        assert 0.3 <= out.objects[out.role(role)].mass <= 0.4
        assert len(out.objects) == len(out.task.bindings) + 2
        assert transfer.bound_factors(lifted, scene, bindings[0]) == ["mass", "distractors"]
    # the bin's position has no counterpart in stack; instruction carries over to drawers
    only_bin = _gen(operations=[prog["operations"][1]], constraints=[], perturbs="container_position")
    assert transfer.transfer_program(only_bin, "stack") is None
    assert transfer.transfer_program(RICH, "drawer")["operations"] == [
        {"op": "sample", "role": None, "attribute": "instruction"}
    ]
    # held-out categories of the new family are dropped (cylinder is held out for stack)
    inst = {
        "family": "pick_place",
        "operations": [{"op": "sample", "attribute": "instance", "categories": ["cube", "cylinder"]}],
    }
    assert transfer.transfer_program(inst, "stack")["operations"][0]["categories"] == ["cube"]


def test_bind_roles_returns_at_most_three_distinct_bindings(catalog):
    scene = REGISTRY["stack"].sample(np.random.default_rng(11), catalog, "generator")
    scene = interpret.apply_generation(
        {"family": "stack", "operations": [{"op": "set", "attribute": "distractors", "value": 3}]},
        scene,
        np.random.default_rng(0),
        catalog,
    )
    # constraint-only roles: any movable graspable objects qualify, so there are many assignments
    prog = {
        "family": "stack",
        "operations": [{"op": "sample", "attribute": "instruction"}],
        "constraints": [{"relation": "max_distance", "roles": ["top", "base"], "value": 2.0}],
    }
    bindings = transfer.bind_roles(prog, scene, catalog)
    assert len(bindings) == 3 and bindings[0] == {"top": scene.role("top"), "base": scene.role("base")}
    assert (
        all(len(set(b.values())) == len(b) for b in bindings)
        and len({tuple(sorted(b.items())) for b in bindings}) == 3
    )
    assert len(transfer.bind_roles(prog, scene, catalog, max_bindings=1)) == 1
    # a position operation on "top" may bind the top or the base block (both have a position factor), never a distractor
    pos = {
        "family": "stack",
        "operations": [{"op": "set", "role": "top", "attribute": "position", "value": [0.4, 0.25]}],
    }
    assert transfer.bind_roles(pos, scene, catalog) == [
        {"top": scene.role("top")},
        {"top": scene.role("base")},
    ]
    for b in transfer.bind_roles(pos, scene, catalog):
        out = interpret.apply_generation(pos, scene, np.random.default_rng(0), catalog, b)
        moved = [i for i, (p, q) in enumerate(zip(out.spatial.poses, scene.spatial.poses)) if p != q]
        assert moved == [b["top"]] and (out.spatial.poses[b["top"]].x, out.spatial.poses[b["top"]].y) == (
            0.4,
            0.25,
        )


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
