"""Generation/training program schema (`coda.memory.programs`): canonical round trips, content ids, and errors
that name their field."""

import copy
import json

import pytest

from coda.learn.text2potential import sparse_fragment
from coda.memory import programs as P
from coda.memory.factors import ATTRIBUTES
from coda.memory.programs import ProgramError
from coda.sim.families.ranges import TRAIN_TEMPLATES
from tests._program_helpers import RICH, gen


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


def _op(**fields):
    return gen(operations=[{"op": "set", "role": "target", "attribute": "mass", "value": 0.3, **fields}])


BAD_GENERATION = [
    ("family", gen(family="juggling")),
    ("kind", gen(kind="policy")),
    ("version", gen(version=2)),
    ("code", gen(code="import os")),
    ("mode", gen(mode=["x"])),
    ("source", gen(source="human")),
    ("operations", gen(operations=[])),
    ("operations", gen(operations=[RICH["operations"][0]] * 9)),
    ("operations[0].attribute", _op(attribute="colour")),
    ("operations[0].op", _op(op="multiply")),
    (
        "operations[0].op",
        gen(operations=[{"op": "scale", "role": "target", "attribute": "instance", "by": 2}]),
    ),
    ("operations[0].attribute", _op(role="container")),  # container mass is not a pick_place factor
    ("operations[0].attribute", gen(operations=[{"op": "set", "attribute": "part", "value": 1}])),
    (
        "operations[0].attribute",
        gen(operations=[{"op": "set", "attribute": "goal_offset", "value": [0.1, 0]}]),
    ),
    ("operations[0].role", _op(role="gripper")),
    ("operations[0].role", gen(operations=[{"op": "set", "attribute": "position", "value": [0.5, 0]}])),
    (
        "operations[0].role",
        gen(operations=[{"op": "set", "role": "target", "attribute": "distractors", "value": 1}]),
    ),
    ("operations[0].value", _op(value=float("nan"))),
    ("operations[0].value", _op(value="heavy")),
    ("operations[0].value", _op(value=True)),
    ("operations[0].value", _op(value=1e9)),
    (
        "operations[0].range",
        gen(operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.8, 0.5]}]),
    ),
    (
        "operations[0].range[1]",
        gen(
            operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.1, float("inf")]}]
        ),
    ),
    (
        "operations[0].range",
        gen(operations=[{"op": "sample", "role": "target", "attribute": "mass", "range": [0.1]}]),
    ),
    ("operations[0].by", gen(operations=[{"op": "scale", "role": "target", "attribute": "mass", "by": -2}])),
    (
        "operations[0].by[1]",
        gen(operations=[{"op": "shift", "role": "target", "attribute": "position", "by": [0.1, "x"]}]),
    ),
    (
        "operations[0].value",
        gen(operations=[{"op": "set", "attribute": "instruction", "value": TRAIN_TEMPLATES}]),
    ),
    (
        "operations[0].values[0]",
        gen(operations=[{"op": "sample", "attribute": "instruction", "values": [5]}]),
    ),
    ("operations[0].value", gen(operations=[{"op": "set", "attribute": "distractors", "value": 4}])),
    (
        "operations[0].categories[0]",
        gen(
            operations=[
                {"op": "sample", "role": "target", "attribute": "instance", "categories": ["blob_elongated"]}
            ]
        ),
    ),
    (
        "operations[0].range",
        gen(operations=[{"op": "set", "role": "target", "attribute": "mass", "range": [0, 1]}]),
    ),
    ("operations[0].value", gen(operations=[{"op": "set", "role": "target", "attribute": "mass"}])),
    ("operations[1]", gen(operations=[RICH["operations"][0], "mass"])),
    ("perturbs", gen(perturbs="friction")),
    ("roles.gripper", gen(roles={"gripper": {}})),
    ("roles.target.requires.graspable", gen(roles={"target": {"requires": {"graspable": "yes"}}})),
    ("roles.target.requires.heavy", gen(roles={"target": {"requires": {"heavy": True}}})),
    ("roles.target.wants", gen(roles={"target": {"wants": {}}})),
    (
        "constraints[0].relation",
        gen(constraints=[{"relation": "touching", "roles": ["target", "container"], "value": 0.1}]),
    ),
    (
        "constraints[0].roles",
        gen(constraints=[{"relation": "min_distance", "roles": ["target", "target"], "value": 0.1}]),
    ),
    (
        "constraints[0].roles[1]",
        gen(constraints=[{"relation": "min_distance", "roles": ["target", "shelf"], "value": 0.1}]),
    ),
    (
        "constraints[0].value",
        gen(constraints=[{"relation": "max_distance", "roles": ["target", "container"], "value": 0}]),
    ),
    (
        "constraints[0].value",
        gen(constraints=[{"relation": "max_distance", "roles": ["target", "container"]}]),
    ),
    ("program", gen(operations=RICH["operations"] * 300)),
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
