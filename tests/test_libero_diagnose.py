"""The rollout-grounded LIBERO diagnoser: it reads the rollout's first observation, the instruction it was
given and the phases it reached, compares them with the training reference, and never the variant's
perturbation."""

from __future__ import annotations

import json

import numpy as np

from coda.domains.libero import interpret as lp
from coda.domains.libero.diagnose import PROPRIO, LiberoDiagnoser, LiberoReference, initial_positions

OBJECTS = ("basket_1", "butter_1", "ketchup_1", "milk_1")
PHASES = ("reached", "grasped", "lifted", "above_target", "placed")
TRAIN = "pick up the milk and place it in the basket"
EE = np.array([0.0, 0.0, 1.0])


def obs0(positions: dict[str, tuple[float, float]]) -> np.ndarray:
    v = np.zeros(PROPRIO + 4 * len(OBJECTS), np.float32)
    v[:3] = EE
    for i, name in enumerate(OBJECTS):
        if name in positions:
            k = PROPRIO + 4 * i
            v[k] = 1.0
            v[k + 1 : k + 4] = np.array([*positions[name], 0.9]) - EE
    return v


HOME = {"basket_1": (0.0, 0.2), "milk_1": (0.1, -0.1), "ketchup_1": (-0.1, -0.1)}


def reference() -> LiberoReference:
    ref = LiberoReference()
    for jitter in (0.0, 0.005, -0.005):
        ref.add(0, TRAIN, obs0({n: (x + jitter, y) for n, (x, y) in HOME.items()}), OBJECTS)
    return ref


DIAG = LiberoDiagnoser(OBJECTS, {0: ("milk_1", "basket_1")}, PHASES)


def test_initial_positions_are_absolute():
    pos = initial_positions(obs0({"milk_1": (0.1, -0.1)}), OBJECTS)
    assert set(pos) == {"milk_1"}
    np.testing.assert_allclose(pos["milk_1"], [0.1, -0.1], atol=1e-6)


def test_a_moved_goal_object_is_a_position_difficulty_with_its_observed_offset():
    moved = {**HOME, "milk_1": (0.16, -0.05)}
    d = DIAG.diagnose(0, obs0(moved), TRAIN, 1, reference())
    assert d["factor"] == "position" and d["role"] == "object" and d["phase"] == "grasped"
    np.testing.assert_allclose(d["offset"], [0.06, 0.05], atol=1e-4)
    target = DIAG.diagnose(0, obs0({**HOME, "basket_1": (0.0, 0.28)}), TRAIN, 3, reference())
    assert target["role"] == "target" and target["phase"] == "above_target"


def test_a_swap_is_recognised_with_its_neighbour():
    swapped = {**HOME, "milk_1": HOME["ketchup_1"], "ketchup_1": HOME["milk_1"]}
    d = DIAG.diagnose(0, obs0(swapped), TRAIN, 0, reference())
    assert d["factor"] == "position" and d["role"] == "swap" and d["rank"] == 0
    assert "ketchup_1" in d["cause"]


def test_an_unfamiliar_instruction_and_an_unchanged_scene():
    d = DIAG.diagnose(0, obs0(HOME), "put milk into basket", 0, reference())
    assert d["factor"] == "instruction" and d["instruction"] == "put milk into basket"
    assert DIAG.diagnose(0, obs0({**HOME, "milk_1": (0.11, -0.1)}), TRAIN, 0, reference()) is None


def test_a_new_task_instruction_is_a_retarget_and_a_paraphrase_is_not():
    """LIBERO-Pro `_task` wording (another object of the scene is named) -> role retarget with the named
    object's rank among the goal's nearest movable objects at reset; `_lan`-style wording -> a paraphrase."""
    scene = {**HOME, "butter_1": (0.35, -0.1)}  # ketchup 0.2 m from the milk, butter 0.25 m
    ref = reference()
    for text, other, rank in (
        ("Pick the ketchup and place it in the basket", "ketchup_1", 0),
        ("pick the butter and place it in the basket", "butter_1", 1),
    ):
        d = DIAG.diagnose(0, obs0(scene), text, 1, ref)
        assert d["factor"] == "instruction" and d["role"] == "retarget" and d["phase"] == "grasped"
        assert (d["object"], d["rank"], d["instruction"]) == (other, rank, text)
        gen, _ = lp.compile_diagnosis({"family": "libero_object_task0", **d}, 0)
        assert gen["retarget"] == {"ranks": [rank]} and lp.validate_generation(gen) == gen
    for text in ("grab milk and put it into basket", lp.paraphrase(TRAIN, 3)):
        d = DIAG.diagnose(0, obs0(scene), text, 0, ref)
        assert d["factor"] == "instruction" and "role" not in d
        gen, _ = lp.compile_diagnosis({"family": "libero_object_task0", **d}, 0)
        assert "paraphrase" in gen and "retarget" not in gen
    # an object that is not in the scene is not a new task of this scene
    absent = DIAG.diagnose(0, obs0(HOME), "pick the butter and place it in the basket", 0, ref)
    assert "role" not in absent


def test_the_reference_round_trips():
    ref = reference()
    back = LiberoReference.from_dict(ref.to_dict())
    assert back == ref and back.distance(0, "milk_1", np.array([0.1, -0.1])) < 1e-6


class _Untouchable(dict):
    """An environment description that fails the test if anything reads it."""

    def __getitem__(self, key):
        raise AssertionError(f"the diagnoser read the environment's {key!r}")

    get = __getitem__


def test_the_domain_diagnoses_from_the_rollout_alone():
    """`LiberoDomain.diagnose` never reads the built environment (the variant JSON with its shifts, swap,
    paraphrase and program id), and the rollout view keeps no record `meta` (where the episode notes the
    shifts it applied)."""
    from coda.domains.libero.domain import LiberoDomain, LiberoRollout

    domain = LiberoDomain.__new__(LiberoDomain)
    domain.diagnoser, domain.reference = DIAG, reference()
    steps = 4
    record = {
        "obs": np.stack([obs0({**HOME, "milk_1": (0.16, -0.05)})] * (steps + 1)).tolist(),
        "actions": np.zeros((steps, 7)).tolist(),
        "chunk_starts": [0],
        "phases": np.zeros((steps, len(PHASES)), int).tolist(),
        "phase_names": list(PHASES),
        "instruction": TRAIN,
        "meta": {"shifts": {"milk_1": [0.06, 0.05]}},
    }
    rollout = LiberoRollout.of(
        {"record": record, "success": False, "phase_reached": 0}, "libero_object_task0", "h"
    )
    assert not hasattr(rollout, "meta")
    d = domain.diagnose(rollout, _Untouchable(scene='{"shifts": {"object": [0.06, 0.05]}}'))
    assert d["family"] == "libero_object_task0" and d["role"] == "object" and d["phase"] == "reached"
    record = {**record, "obs": np.stack([obs0(HOME)] * (steps + 1)).tolist()}
    record["instruction"] = "pick the ketchup and place it in the basket"
    told = LiberoRollout.of(
        {"record": record, "success": False, "phase_reached": 0}, "libero_object_task0", "h"
    )
    d = domain.diagnose(told, _Untouchable(scene='{"retarget": 0}'))
    assert d["factor"] == "instruction" and d["role"] == "retarget" and d["rank"] == 0
    program = domain.compile(d, '{"retarget": 0}').generation
    assert program["retarget"] == {"ranks": [0]}
    scene = json.dumps(lp.Variant(0, 12, retarget=0).to_dict())
    assert domain.exhibits(program, scene)
    assert not domain.exhibits(program, json.dumps(lp.Variant(0, 12, swap=0).to_dict()))
