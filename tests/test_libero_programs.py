"""LIBERO generation/training programs: validation names the field, interpretation stays in the generator
space, paraphrases keep the object and target, and the shared memory stores and reloads them.
(No simulator needed: these run without the [libero] extra.)"""

from __future__ import annotations

import numpy as np
import pytest

from coda.domains.libero import interpret as lp
from coda.memory.programs import ProgramError, validate_program
from coda.memory.store import Memory, load_snapshot, save_snapshot

OBJECT = "pick up the alphabet soup and place it in the basket"
SPATIAL = "pick up the black bowl between the plate and the ramekin and place it on the plate"


def position(**over):
    doc = {
        "kind": "generation",
        "family": "libero_object",
        "task": 3,
        "perturbs": "position",
        "shift": {"role": "object", "dx": [0.02, 0.04], "dy": [-0.01, 0.01]},
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    "change, field",
    [
        ({"family": "pick_place_x"}, "family"),
        ({"task": -1}, "task"),
        ({"perturbs": "lighting"}, "perturbs"),
        ({"shift": {"role": "robot", "dx": [0, 0], "dy": [0, 0]}}, "shift.role"),
        ({"shift": {"role": "object", "dx": [0.05, 0.01], "dy": [0, 0]}}, "shift.dx"),
        ({"shift": {"role": "object", "dx": "far", "dy": [0, 0]}}, "shift.dx"),
        ({"colour": "red"}, "colour"),
        ({"id": "gp-000000000000"}, "id"),
    ],
)
def test_malformed_generation_programs_name_the_field(change, field):
    with pytest.raises(ProgramError) as err:
        lp.validate_generation(position(**change))
    assert str(err.value).startswith(field), str(err.value)


def retarget(**over):
    doc = {"kind": "generation", "family": "libero_object", "task": 0, "perturbs": "instruction"}
    doc.update({"retarget": {"ranks": [3, 1, 3]}}, **over)
    return doc


def test_a_retarget_program_validates_like_a_swap():
    doc = lp.validate_generation(retarget())
    assert doc["retarget"] == {"ranks": [1, 3]} and doc["id"].startswith("gp-")
    assert lp.validate_generation({**retarget(), "id": doc["id"]}) == doc
    assert lp.validate_generation(retarget(retarget={"ranks": [lp.MAX_RETARGET_RANK]}))
    # programs written before retargeting keep their canonical form and content id
    old = {"kind": "generation", "family": "libero_object", "task": 3}
    assert lp.validate_generation(position())["id"] == "gp-2005d445ba9f"
    assert lp.validate_generation({**old, "perturbs": "position", "swap": {"ranks": [2, 0]}})["id"] == (
        "gp-5dc49d18e52a"
    )
    para = {**old, "perturbs": "instruction", "paraphrase": {"templates": [4, 1]}}
    assert lp.validate_generation(para)["id"] == "gp-bbf3e7ff7147"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"retarget": {"ranks": [lp.MAX_RETARGET_RANK + 1]}}, "retarget.ranks[0]"),
        ({"retarget": {"ranks": [True]}}, "retarget.ranks[0]"),
        ({"retarget": {"ranks": []}}, "retarget.ranks"),
        ({"retarget": {"ranks": "near"}}, "retarget.ranks"),
        ({"retarget": {"ranks": [0], "object": "milk_1"}}, "retarget.object"),
        ({"retarget": {}}, "retarget.ranks"),
        ({"retarget": [0]}, "retarget"),
        ({"paraphrase": {"templates": [1]}}, "paraphrase"),  # both paraphrase and retarget
        ({"swap": {"ranks": [0]}}, "swap"),
        ({"perturbs": "position", "shift": {"role": "object", "dx": [0, 0], "dy": [0, 0]}}, "retarget"),
    ],
)
def test_malformed_retarget_programs_name_the_field(change, field):
    with pytest.raises(ProgramError) as err:
        lp.validate_generation(retarget(**change))
    assert str(err.value).startswith(field), str(err.value)


def test_a_retarget_program_instantiates_a_retargeted_variant():
    doc = lp.validate_generation(retarget())
    rng = np.random.default_rng(0)
    variants = [lp.instantiate(doc, rng, OBJECT, 12) for _ in range(20)]
    assert {v.retarget for v in variants} == {1, 3}
    for v in variants:
        assert v.perturbed and v.swap is None and not v.shifts and v.init_index == 12
        assert v.program_id == doc["id"]
        assert v.instruction is None  # the episode names the new goal object (`retarget_instruction`)
        assert lp.Variant.from_dict(v.to_dict()) == v
    assert lp.retarget_instruction(OBJECT, "cream_cheese_1") == (
        "pick the cream cheese and place it in the basket"
    )


def test_named_object_reads_the_object_phrase():
    names = ("alphabet_soup_1", "basket_1", "cream_cheese_1")
    assert lp.named_object("Pick the cream cheese and place it in the basket", names) == "cream_cheese_1"
    assert lp.named_object("grab alphabet soup and put it into basket", names) == "alphabet_soup_1"
    assert lp.named_object("open the drawer", names) is None


def test_training_program_checks_phase_weights():
    doc = {"kind": "training", "family": "libero_object", "task": 0, "phase_weights": [1, 1, 3, 1]}
    with pytest.raises(ProgramError, match="^phase_weights"):
        lp.validate_training(doc)
    doc["phase_weights"] = [1, 1, 3, 1, 1]
    assert lp.validate_training(doc)["id"].startswith("tp-")


def test_content_id_is_stable_and_shifts_are_clamped():
    a = lp.validate_generation(position())
    assert lp.validate_generation({**position(), "id": a["id"]}) == a  # its own id is accepted
    wide = lp.validate_generation(position(shift={"role": "target", "dx": [-5, 5], "dy": [0, 9]}))
    assert wide["shift"]["dx"] == [-lp.SHIFT_MAX, lp.SHIFT_MAX] and wide["shift"]["dy"] == [0, lp.SHIFT_MAX]
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = lp.instantiate(wide, rng, OBJECT, 12)
        dx, dy = v.shifts["target"]
        assert abs(dx) <= lp.SHIFT_MAX and 0 <= dy <= lp.SHIFT_MAX and v.init_index == 12


@pytest.mark.parametrize("text", [OBJECT, SPATIAL])
def test_paraphrases_keep_object_and_target(text):
    obj, rel, target = lp.parse_instruction(text)
    for t in range(len(lp.TEMPLATES)):
        for drop in (False, True):
            out = lp.paraphrase(text, t, 1, drop)
            assert obj.replace("the ", "" if drop else "the ") in out and target.split()[-1] in out
    assert lp.paraphrase(text, 0) == text  # template 0 is the original form
    with pytest.raises(ProgramError, match="^instruction"):
        lp.parse_instruction("open the top drawer of the cabinet")


def test_random_programs_validate_and_vary():
    rng = np.random.default_rng(1)
    docs = [lp.random_program(rng, "libero_object", 2) for _ in range(20)]
    assert {d["perturbs"] for d in docs} == {"position", "instruction"}
    assert {"swap", "shift", "paraphrase", "retarget"} <= {k for d in docs for k in d}
    assert len({d["id"] for d in docs}) >= 15  # instruction programs come from a finite set of templates


def test_memory_stores_libero_programs(tmp_path):
    shifted = {
        "family": "libero_object_task1",
        "factor": "position",
        "role": "object",
        "offset": [0.03, -0.02],
    }
    gen, train = lp.compile_diagnosis({**shifted, "phase": "grasped", "mode_id": "m/0"}, 1)
    assert gen["shift"] == {"role": "object", "dx": [0.015, 0.045], "dy": [-0.035, -0.005]}
    assert validate_program(gen) == gen  # the shared validator dispatches on the LIBERO family
    assert train["phase_weights"][lp.PHASES.index("grasped")] == 3.0
    mem = Memory()
    assert mem.add_program(gen) == gen["id"] and mem.add_program(train) == train["id"]
    path = save_snapshot(mem, tmp_path / "round-0001", round=1)
    assert load_snapshot(path).program(gen["id"]) == gen
    told = {"family": "libero_object_task1", "factor": "instruction", "phase": "reached"}
    para = lp.compile_diagnosis({**told, "instruction": lp.paraphrase(OBJECT, 2, 0, True)}, 1)[0]
    assert para["paraphrase"] == {"templates": [2], "drop_articles": True}
    swap = lp.compile_diagnosis({**told, "factor": "position", "role": "swap", "rank": 2}, 1)[0]
    assert swap["swap"] == {"ranks": [2]}
    task = {**told, "role": "retarget", "object": "milk_1", "rank": 4}
    retargeted = lp.compile_diagnosis({**task, "instruction": "pick the milk and place it in the basket"}, 1)[
        0
    ]
    assert retargeted["retarget"] == {"ranks": [4]} and "paraphrase" not in retargeted
    assert validate_program(retargeted) == retargeted and mem.add_program(retargeted) == retargeted["id"]
    nothing, train = lp.compile_diagnosis({**told, "factor": "position"}, 1)
    assert nothing is None and train["phase_weights"][0] == 3.0


def test_the_schema_is_memory_s_and_re_exported_here():
    from coda.memory import libero_programs

    assert lp.validate_generation is libero_programs.validate_generation
    assert lp.validate_training is libero_programs.validate_training
    assert lp.TEMPLATES is libero_programs.TEMPLATES
    doc = lp.validate_generation(position())
    assert validate_program(doc) == libero_programs.validate_program(doc) == doc


# -- reaching the held-out shifts: placements anywhere on the table, swaps with every neighbour ------------
def place(**over):
    doc = {
        "kind": "generation",
        "family": "libero_object",
        "task": 3,
        "perturbs": "position",
        "place": {"role": "object", "x": [-0.2, -0.17], "y": [0.05, 0.08]},
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    "change, field",
    [
        ({"place": {"role": "robot", "x": [0, 0.01], "y": [0, 0.01]}}, "place.role"),
        ({"place": {"role": "object", "x": [0.1, 0.0], "y": [0, 0.01]}}, "place.x"),
        ({"place": {"role": "object", "x": [0, 0.01], "y": "anywhere"}}, "place.y"),
        ({"place": {"role": "object", "x": [0, 0.01]}}, "place.y"),
        ({"place": {"role": "object", "x": [0, 0.01], "y": [0, 0.01], "z": [0, 1]}}, "place.z"),
        ({"place": [0.0, 0.1]}, "place"),
        ({"shift": {"role": "object", "dx": [0, 0], "dy": [0, 0]}}, "place"),  # two position operators
        ({"swap": {"ranks": [0]}}, "swap"),
        ({"perturbs": "instruction", "retarget": {"ranks": [0]}}, "place"),
    ],
)
def test_malformed_place_programs_name_the_field(change, field):
    with pytest.raises(ProgramError) as err:
        lp.validate_generation(place(**change))
    assert str(err.value).startswith(field), str(err.value)


def test_a_place_program_puts_the_object_on_the_table_and_round_trips():
    doc = lp.validate_generation(place())
    assert doc["place"] == {"role": "object", "x": [-0.2, -0.17], "y": [0.05, 0.08]}
    assert (
        lp.validate_generation({**place(), "id": doc["id"]}) == doc
        and doc["id"] != (lp.validate_generation(position())["id"])
    )
    wide = lp.validate_generation(place(place={"role": "target", "x": [-5, 5], "y": [0.2, 9]}))
    (x0, x1), (y0, y1) = lp.TABLE
    assert wide["place"]["x"] == [x0, x1] and wide["place"]["y"] == [0.2, y1]  # clamped to the table
    rng = np.random.default_rng(0)
    for _ in range(30):
        v = lp.instantiate(doc, rng, OBJECT, 17)
        ((x, y),) = v.places.values()
        assert -0.2 <= x <= -0.17 and 0.05 <= y <= 0.08 and not v.shifts and v.init_index == 17
        assert v.perturbed and not v.control().perturbed
        assert lp.Variant.from_dict(v.to_dict()) == v and v.key() != v.control().key()
    assert "places" not in lp.Variant(3, 17, {"object": [0.01, 0.0]}).to_dict()  # other keys unchanged


def test_a_swap_reaches_every_neighbour():
    """LIBERO-Pro `_swap` partners are up to the goal's 5th nearest movable object (tasks 4 and 9)."""
    assert lp.MAX_RANK == 4
    swap = {"family": "libero_object", "task": 4, "perturbs": "position", "swap": {"ranks": [4, 0]}}
    assert lp.validate_generation(swap)["swap"] == {"ranks": [0, 4]}
    with pytest.raises(ProgramError, match=r"^swap\.ranks\[0\]"):
        lp.validate_generation({**swap, "swap": {"ranks": [5]}})


def test_a_far_moved_object_compiles_to_a_placement_and_a_near_one_to_a_shift():
    moved = {"family": "libero_object_task1", "factor": "position", "role": "object", "phase": "reached"}
    far, _ = lp.compile_diagnosis({**moved, "offset": [-0.18, 0.02], "position": [-0.2, -0.08]}, 1)
    assert far["place"] == {"role": "object", "x": [-0.215, -0.185], "y": [-0.095, -0.065]}
    assert lp.validate_generation(far) == far
    near, _ = lp.compile_diagnosis({**moved, "offset": [0.05, 0.02], "position": [0.1, -0.1]}, 1)
    assert "shift" in near and "place" not in near


def test_random_programs_include_placements():
    rng = np.random.default_rng(3)
    docs = [lp.random_program(rng, "libero_object", 2) for _ in range(60)]
    placed = [d["place"] for d in docs if "place" in d]
    assert placed and all(p["role"] == "object" for p in placed)
    (x0, x1), (y0, y1) = lp.TABLE
    assert all(x0 <= p["x"][0] <= p["x"][1] <= x1 and y0 <= p["y"][0] <= p["y"][1] <= y1 for p in placed)


def test_a_placed_variant_exhibits_its_placement_program_only():
    """The control experiment confirms a diagnosis only when its failing variant shows the validated
    difficulty (`LiberoDomain.exhibits`): a placement in the program's table region (10% margin), not a
    shift by the same numbers, nor a placement elsewhere."""
    import json

    from coda.domains.libero.domain import LiberoDomain

    domain = LiberoDomain.__new__(LiberoDomain)
    doc = lp.validate_generation(place())
    placed = lp.instantiate(doc, np.random.default_rng(1), OBJECT, 12)
    assert domain.exhibits(doc, json.dumps(placed.to_dict()))
    shifted = lp.Variant(3, 12, dict(placed.places))
    assert not domain.exhibits(doc, json.dumps(shifted.to_dict()))
    elsewhere = lp.Variant(3, 12, places={"object": [0.1, -0.2]})
    assert not domain.exhibits(doc, json.dumps(elsewhere.to_dict()))
    assert not domain.exhibits(doc, json.dumps(lp.Variant(2, 12, places=dict(placed.places)).to_dict()))
    shift_doc = lp.validate_generation(position())
    assert domain.exhibits(shift_doc, json.dumps(lp.Variant(3, 12, {"object": [0.03, 0.0]}).to_dict()))
    assert not domain.exhibits(shift_doc, json.dumps(placed.to_dict()))
