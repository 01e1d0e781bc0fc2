"""LIBERO adapter and scripted planner (skipped cleanly without the optional 'libero' extra)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import coda.sim.libero as lib

pytestmark = pytest.mark.skipif(
    not lib.available(), reason=f"LIBERO not installed (optional extra: {lib.EXTRA_HINT})"
)


@pytest.fixture(scope="module")
def env():
    e = lib.LiberoEnv("libero_object", 0)
    yield e
    e.close()


def test_task_and_goal_parsing():
    task = lib.get_task("libero_object", 0)
    assert task.goal == lib.Goal("In", "alphabet_soup_1", "basket_1_contain_region")
    assert lib.n_tasks("libero_object") == 10
    assert lib.init_states("libero_object", 0).shape[0] == 50
    spatial = lib.get_task("libero_spatial", 0)
    assert spatial.goal.predicate == "On" and spatial.goal.target == "plate_1"


def test_reset_is_deterministic(env):
    a = env.reset(3)
    env.step(np.array([0.5, -0.3, 0.2, 0.0, 0.0, 0.1, 1.0]))
    b = env.reset(3)
    for key in ("ee_pos", "ee_quat", "grip", "obj_pos", "obj_quat", "target_pos"):
        np.testing.assert_allclose(a[key], b[key], atol=1e-6, err_msg=key)
    vec = lib.observation_vector(a)
    assert vec.shape == (lib.OBS_DIM,) and vec.dtype == np.float32


def test_shift_moves_object(env):
    base = env.reset(0)
    shifted = env.reset(0, {"alphabet_soup_1": (0.04, -0.03)})
    assert env.last_reset_valid, env.last_reset_problems
    np.testing.assert_allclose(shifted["obj_pos"][:2] - base["obj_pos"][:2], [0.04, -0.03], atol=0.01)
    env.reset(0, {"alphabet_soup_1": (5.0, 0.0)})  # far off the floor area
    assert not env.last_reset_valid


def test_program_roles_name_movable_objects_and_a_swap_never_moves_the_target(env):
    from coda.domains.libero.episodes import _role_object, swap_shifts

    assert _role_object(env, "object") == "alphabet_soup_1"
    target = _role_object(env, "target")
    assert target == "basket_1" and target in env.object_names  # a target shift moves the basket
    env.reset(0, {target: (0.03, 0.0)})
    for rank in range(3):
        moved = swap_shifts(env, 0, rank)
        assert "alphabet_soup_1" in moved and target not in moved and len(moved) == 2


def test_lan_suite_instruction_differs():
    task = lib.get_task("libero_object_lan", 0)
    e = lib.LiberoEnv("libero_object_lan", 0)
    try:
        assert isinstance(e.instruction, str) and e.instruction
        assert e.instruction != task.language  # task.language is the original, built from the file name
    finally:
        e.close()


def test_pro_suites_swap_the_layout_or_change_the_goal_object():
    """`_swap`: same goal and instruction, the goal object and one neighbour trade places; `_task`: same
    layout, the instruction and the BDDL goal name another object of the scene (here the cream cheese)."""
    std = env_positions("libero_object")
    swap, swap_goal, swap_text = env_positions("libero_object_swap", with_task=True)
    task, task_goal, task_text = env_positions("libero_object_task", with_task=True)
    assert swap_goal == "alphabet_soup_1" and "alphabet soup" in swap_text
    moved = {n for n in std if np.linalg.norm(swap[n] - std[n]) > 0.03}
    assert moved == {"alphabet_soup_1", "butter_1"}
    np.testing.assert_allclose(swap["alphabet_soup_1"], std["butter_1"], atol=0.03)
    assert task_goal == "cream_cheese_1" and "cream cheese" in task_text
    assert all(np.linalg.norm(task[n] - std[n]) < 0.03 for n in std)  # the layout is the standard one


def env_positions(suite, with_task=False):
    e = lib.LiberoEnv(suite, 0)
    try:
        pos = {n: p[:2] for n, p in e.reset(0)["objects"].items()}
        return (pos, e.task.goal.obj, e.instruction.lower()) if with_task else pos
    finally:
        e.close()


def test_retarget_makes_another_object_the_goal_and_restores(env):
    env.retarget("cream_cheese_1")
    try:
        assert env.task.goal.obj == "cream_cheese_1" and env.task.goal.target == "basket_1_contain_region"
        state = env.reset(0)
        np.testing.assert_allclose(state["obj_pos"], state["objects"]["cream_cheese_1"])
        assert env._env.env.parsed_problem["goal_state"] == [
            ["in", "cream_cheese_1", "basket_1_contain_region"]
        ]
        with pytest.raises(KeyError):
            env.retarget("basket_1")  # the goal target cannot be the goal object
    finally:
        env.retarget(None)
    assert env.task.goal.obj == "alphabet_soup_1"
    assert env._env.env.parsed_problem["goal_state"] == [["in", "alphabet_soup_1", "basket_1_contain_region"]]


@pytest.mark.slow
def test_planner_solves_a_retargeted_program_and_its_demo_names_the_new_object():
    """A retarget program (rank 3 in task 0, counted without the cream cheese: LIBERO-Pro `_task` 0's goal,
    which is held out) instantiated, certified by the planner; its demonstration carries the retargeted
    instruction, never the held-out one, and the diagnoser, reading only that rollout's first observation and
    instruction, recovers the same rank."""
    from coda.domains.libero import episodes as le
    from coda.domains.libero import interpret as lp
    from coda.domains.libero.diagnose import LiberoDiagnoser, LiberoReference
    from coda.sim.libero import heldout

    program = lp.validate_generation(
        {"family": "libero_object", "task": 0, "perturbs": "instruction", "retarget": {"ranks": [3]}}
    )
    v = lp.instantiate(program, np.random.default_rng(0), lib.get_task("libero_object", 0).language, 0)
    job = le.Episode("libero_object", v, "planner", "libero_object", max_steps=300, record=True).job()
    out = le.episode_job(job)
    env = le._env("libero_object", 0)
    held = heldout.held_out_goal("libero_object", 0)
    assert held == "cream_cheese_1" and le.neighbour(env, 0, 3) == held  # rank 3 of all neighbours ...
    new = le.neighbour(env, 0, 3, skip=(held,))  # ... so a retarget's rank 3 is the next one
    assert new != held and out["goal"] == new
    assert out["instruction"] == lp.retarget_instruction(env.task.language, new)
    assert out["instruction"] not in heldout.held_out_instructions("libero_object", 0)
    assert out["success"], out
    demo = le.demo_from(out)
    assert demo["instruction"] == f"pick the {lp.object_phrase(new)} and place it in the basket"
    objects = le.suite_objects("libero_object")
    reference = LiberoReference()
    reference.add(0, env.task.language, demo["obs"][0], objects)
    diagnoser = LiberoDiagnoser(objects, {0: ("alphabet_soup_1", "basket_1")}, tuple(lib.PHASES), {0: held})
    d = diagnoser.diagnose(0, demo["obs"][0], demo["instruction"], 0, reference)
    assert (d["factor"], d["role"], d["object"], d["rank"]) == ("instruction", "retarget", new, 3)
    assert (
        env.task.goal.obj == "alphabet_soup_1"
    )  # the next job on this environment starts from the BDDL goal
    plain = le.episode_job(le.Episode("libero_object", lp.Variant(0, 0), "planner", "libero_object").job())
    assert plain["instruction"] == env.instruction and plain["goal"] == "alphabet_soup_1"


@pytest.mark.slow
def test_planner_certifies_a_placement_and_a_fifth_neighbour_swap():
    """The new position operators reach the `_swap` region: the goal object placed at a free table position
    (off every SFT position) and swapped with its 5th nearest neighbour (rank 4, LIBERO-Pro `_swap` 4's and
    9's partner rank), both valid layouts the planner solves."""
    from coda.domains.libero import episodes as le
    from coda.domains.libero import interpret as lp

    for variant, moved in (
        (lp.Variant(4, 20, places={"object": [-0.02, 0.1]}), 0.1),
        (lp.Variant(4, 20, swap=4), 0.1),
    ):
        out = le.episode_job(
            le.Episode("libero_object", variant, "planner", "libero_object", record=True).job()
        )
        assert out["valid"] and out["success"], (variant, out)
        env = le._env("libero_object", 4)
        start = env.reset(20)["objects"][env.task.goal.obj][:2]
        first = lib.LiberoRecord.from_dict(out["record"]).meta["shifts"][env.task.goal.obj]
        assert np.linalg.norm(first) > moved, (variant, first, start)


@pytest.mark.slow
def test_planner_solves_object_task0_and_record_roundtrip(env):
    from coda.sim.libero.planner import LiberoPlanner, covers

    assert covers(env.task)
    rec = lib.run_episode(env, 0, LiberoPlanner(env.task, env), max_steps=300)
    assert rec.success and rec.success_held
    assert rec.steps == len(rec.actions) == len(rec.obs) - 1 == len(rec.phases)
    assert rec.chunk_starts[0] == 0 and rec.actions.shape[1] == 7
    assert rec.phases[-1][list(lib.PHASES).index("placed")], rec.phases[-1]
    assert rec.phases[-1].all()
    d = json.loads(json.dumps(rec.to_dict()))
    back = lib.LiberoRecord.from_dict(d)
    np.testing.assert_allclose(back.obs, rec.obs)
    np.testing.assert_allclose(back.actions, rec.actions)
    np.testing.assert_array_equal(back.phases, rec.phases)
    assert (back.success, back.success_held, back.steps, back.instruction, back.chunk_starts) == (
        rec.success,
        rec.success_held,
        rec.steps,
        rec.instruction,
        rec.chunk_starts,
    )
