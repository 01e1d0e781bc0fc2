"""Typed read-only views of program documents (`GenerationProgram`, `TrainingProgram`): attributes carry the
canonical values, ``.doc`` round-trips exactly, nothing is writable, malformed documents are rejected with
the validators' errors naming the field; LIBERO documents are views of the same classes."""

import copy
import dataclasses
from dataclasses import fields

import pytest

from coda.learn.text2potential import sparse_fragment
from coda.memory import libero_programs as LP
from coda.memory import programs as P
from coda.memory.program_views import GenerationProgram, TrainingProgram, program_view
from coda.memory.programs import ProgramError
from coda.memory.store import Memory

GENERATION = {
    "kind": "generation",
    "family": "pick_place",
    "mode": "pick_place/lift/mass/0",
    "source": "template",
    "perturbs": "mass",
    "operations": [
        {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]},
        {"op": "set", "role": "target", "attribute": "yaw", "value": 1.2},
    ],
    "constraints": [{"relation": "min_distance", "roles": ["target", "container"], "value": 0.15}],
}
TRAINING = {
    "kind": "training",
    "family": "push",
    "potential": sparse_fragment("push", "away"),
    "tools": {"planner_demos": 3, "replay_share": 0.5},
}
LIBERO_SHIFT = {
    "kind": "generation",
    "family": "libero_object",
    "task": 3,
    "perturbs": "position",
    "shift": {"role": "object", "dx": [0.02, 0.05], "dy": [0, 0]},
}
LIBERO_TRAINING = {
    "kind": "training",
    "family": "libero_object",
    "task": 3,
    "mode": "libero_object/3/grasped",
    "phase_weights": [1, 3, 1, 1, 1],
}


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)} - {"_doc"}


def test_generation_view_exposes_the_canonical_fields():
    view = GenerationProgram.from_doc(GENERATION)
    canonical = P.validate_generation(GENERATION)
    assert view.id == canonical["id"] and view.id.startswith("gp-") and len(view.id) == 15
    assert (view.kind, view.version, view.family) == ("generation", 1, "pick_place")
    assert (view.mode, view.source, view.perturbs, view.parent) == (
        "pick_place/lift/mass/0",
        "template",
        "mass",
        "",
    )
    assert dict(view.roles["target"]["requires"]) == {"movable": True, "graspable": True}
    assert set(view.roles) == {"target", "container"}  # used roles are declared with their requirements
    assert len(view.operations) == 2
    assert view.operations[0]["range"] == (0.5, 0.8) and view.operations[1]["value"] == 1.2
    assert view.constraints[0]["roles"] == ("target", "container") and view.constraints[0]["value"] == 0.15
    assert (view.task, view.shift, view.swap, view.paraphrase) == (None, None, None, None)
    assert not view.is_libero


def test_doc_round_trip_is_exact():
    canonical = P.validate_generation(GENERATION)
    view = GenerationProgram.from_doc(GENERATION)
    assert view.doc == canonical
    assert list(view.doc) == list(canonical)  # same key order as the validator's
    assert GenerationProgram.from_doc(view.doc) == view
    assert GenerationProgram.from_doc(canonical).doc == canonical
    training = P.validate_training(TRAINING)
    assert TrainingProgram.from_doc(training).doc == training
    assert TrainingProgram.from_doc(TrainingProgram.from_doc(TRAINING).doc) == TrainingProgram.from_doc(
        TRAINING
    )
    assert {view, GenerationProgram.from_doc(canonical)} == {view}  # hashable, equal by document


def test_views_are_read_only_and_detached_from_their_documents():
    doc = copy.deepcopy(GENERATION)
    view = GenerationProgram.from_doc(doc)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.perturbs = "friction"
    with pytest.raises(TypeError):
        view.roles["target"] = {}
    with pytest.raises(TypeError):
        view.operations[0]["range"] = (0.0, 1.0)
    doc["operations"][0]["range"] = [0.1, 0.2]  # neither the input ...
    out = view.doc
    out["operations"][0]["range"] = [0.3, 0.4]  # ... nor a returned copy changes the view
    assert view.operations[0]["range"] == (0.5, 0.8)
    assert view.doc["operations"][0]["range"] == [0.5, 0.8]


def test_training_view():
    view = TrainingProgram.from_doc(TRAINING)
    assert view.id == P.validate_training(TRAINING)["id"] and view.id.startswith("tp-")
    assert (view.kind, view.family, view.source, view.mode) == ("training", "push", "manual", "")
    assert dict(view.tools) == {**P.TOOLS_DEFAULTS, "planner_demos": 3, "replay_share": 0.5}
    assert view.tools["planner_demos"] == 3 and view.tools["imitation_weight"] == 1.0
    assert view.potential["family"] == "push"
    assert (view.task, view.phase_weights, view.planner_demos) == (None, None, None)
    assert view.demos == 3 and view.imitation_ratio == 1.0 / P.TOOLS_DEFAULTS["critic_weight"]


@pytest.mark.parametrize(
    "cls, doc, field",
    [
        (GenerationProgram, {"family": "pick_place"}, "operations"),
        (GenerationProgram, {**GENERATION, "family": "juggling"}, "family"),
        (
            GenerationProgram,
            {
                **GENERATION,
                "operations": [{"op": "sample", "role": "target", "attribute": "mass", "range": [0.8, 0.5]}],
            },
            "operations[0].range",
        ),
        (GenerationProgram, {**GENERATION, "perturbs": "friction"}, "perturbs"),
        (GenerationProgram, TRAINING, "kind"),
        (TrainingProgram, {**TRAINING, "tools": {"planner_demos": 99}}, "tools.planner_demos"),
        (TrainingProgram, GENERATION, "kind"),
        (
            GenerationProgram,
            {**LIBERO_SHIFT, "shift": {"role": "gripper", "dx": [0, 0], "dy": [0, 0]}},
            "shift.role",
        ),
        (TrainingProgram, {**LIBERO_TRAINING, "phase_weights": [1, 2]}, "phase_weights"),
    ],
)
def test_malformed_documents_are_rejected_naming_the_field(cls, doc, field):
    with pytest.raises(ProgramError) as err:
        cls.from_doc(doc)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_libero_documents_are_views_too():
    gen = GenerationProgram.from_doc(LIBERO_SHIFT)
    assert isinstance(gen, GenerationProgram) and gen.is_libero
    assert gen.doc == LP.validate_generation(LIBERO_SHIFT) and gen.id.startswith("gp-")
    assert (gen.family, gen.task, gen.perturbs, gen.source, gen.mode) == (
        "libero_object",
        3,
        "position",
        "manual",
        None,
    )
    assert gen.shift["role"] == "object" and gen.shift["dx"] == (0.02, 0.05) and gen.shift["dy"] == (0.0, 0.0)
    assert (gen.roles, gen.operations, gen.swap, gen.paraphrase, gen.parent) == (None, None, None, None, None)
    train = TrainingProgram.from_doc(LIBERO_TRAINING)
    assert train.is_libero and train.phase_weights == (1.0, 3.0, 1.0, 1.0, 1.0) and train.planner_demos == 1
    assert train.mode == "libero_object/3/grasped" and train.tools is None
    assert train.demos == 1 and train.imitation_ratio == 1.0  # the loop reads both dialects alike
    assert TrainingProgram.from_doc(train.doc) == train


def test_view_fields_cover_both_schemas():
    assert _names(GenerationProgram) == set(P.GENERATION_KEYS) | set(LP.GENERATION_KEYS)
    assert _names(TrainingProgram) == set(P.TRAINING_KEYS) | set(LP.TRAINING_KEYS)


def test_program_view_dispatches_on_kind_and_reads_stored_programs():
    mem = Memory()
    ids = [mem.add_program(P.validate_program(d)) for d in (GENERATION, TRAINING)]
    ids += [mem.add_program(LP.validate_program(d)) for d in (LIBERO_SHIFT, LIBERO_TRAINING)]
    views = [program_view(mem.program(pid)) for pid in ids]
    assert [type(v) for v in views] == [
        GenerationProgram,
        TrainingProgram,
        GenerationProgram,
        TrainingProgram,
    ]
    assert [v.id for v in views] == ids
    assert all(v.doc == mem.program(v.id) for v in views)
    with pytest.raises(ProgramError) as err:
        program_view({"kind": "policy", "family": "push"})
    assert err.value.field == "kind"
