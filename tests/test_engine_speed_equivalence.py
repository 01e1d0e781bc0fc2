"""The rollout engine's fast paths compute the same bits as the straightforward formulas they replace.

`World.state` gathers the robot's contacts with one query, `World.step` does the controller arithmetic on
Python floats, and `run_episode` computes most observations after the loop; each is checked here against
the plain reference (one contact query per body, NumPy's clip and products, one observation per state).
Evaluation episodes skip the record (`run_outcome`) and recorded ones travel as arrays; both are checked
against the recorded episode.
"""

import numpy as np
import pybullet as p
import pytest

from coda import data
from coda.sim import exact_math
from coda.sim.families import REGISTRY
from coda.sim.rollout import observation_vector, plan_episode
from coda.sim.world import ACTION_SCALE, EE_LINK, FINGER_JOINTS, MAX_LEAD, WORKSPACE_HI, WORKSPACE_LO


def _contacts_per_body(world) -> tuple[np.ndarray, np.ndarray]:
    finger, touch = np.zeros((len(world.bodies), 2)), np.zeros(len(world.bodies))
    for i, b in enumerate(world.bodies):
        contacts = p.getContactPoints(world.robot, b.uid, physicsClientId=world.client)
        if contacts:
            touch[i] = 1.0
            links = {ct[3] for ct in contacts}
            finger[i] = (FINGER_JOINTS[0] in links, FINGER_JOINTS[1] in links)
    return finger, touch


def _reference_target(world, action: np.ndarray) -> np.ndarray:
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0) * ACTION_SCALE
    ls = p.getLinkState(world.robot, EE_LINK, computeForwardKinematics=True, physicsClientId=world.client)
    ee = np.array(ls[4])
    target = np.clip(world.target_pos + a[:3], WORKSPACE_LO, WORKSPACE_HI)
    lead = target - ee
    dist = exact_math.norm(lead)
    return ee + lead * (MAX_LEAD / dist) if dist > MAX_LEAD else target


@pytest.mark.parametrize("family", data.FAMILIES)
def test_fast_state_step_and_observations_match_the_reference(family, small_data, world):
    scene = data.seed_scenes(small_data, family, 1)[0]
    rec = plan_episode(world, scene)
    assert rec.success
    # the record's observations: one per recorded state, however many were computed inside the loop
    states = [{k: v[t] for k, v in rec.states.items()} for t in range(rec.steps + 1)]
    ctx = rec.context()
    expected = np.stack([observation_vector(s, ctx) for s in states])
    assert expected.tobytes() == rec.obs.tobytes()
    # replay the episode: contacts (the gripper touches the object, so some flags are set) and targets
    world.load(scene)
    world.reset()
    touched = 0
    for t, a in enumerate(rec.actions):
        # out-of-range actions on every other step exercise the clipping and the lead limit
        act = a * 3.0 if t % 2 else a
        want = _reference_target(world, act)
        world.step(act)
        assert world.target_pos.tobytes() == want.tobytes()
        st = world.state()
        finger, touch = _contacts_per_body(world)
        assert st["finger_contact"].tobytes() == finger.tobytes()
        assert st["robot_contact"].tobytes() == touch.tobytes()
        touched += int(touch.any())
        if t > 40:
            break
    assert touched > 0, "the replay never touched an object: the contact check checked nothing"


class _Wobble:
    """A deterministic learned-policy stand-in: its chunk is a function of the observation vector."""

    def act(self, obs) -> np.ndarray:
        v = np.asarray(obs.vector, dtype=np.float64)
        return np.tanh(np.outer(np.arange(1, 9), v[:7]) + v[7:14])


@pytest.mark.parametrize("family", data.FAMILIES)
def test_run_outcome_is_run_episode_without_the_record(family, small_data, world):
    """Evaluation episodes (`run_outcome`) are the recorded episodes (`run_episode`) bit for bit."""
    from coda.sim.rollout import run_episode, run_outcome

    scene = data.seed_scenes(small_data, family, 1)[0]
    rec = run_episode(world, scene, _Wobble(), max_chunks=3)
    out = run_outcome(world, scene, _Wobble(), max_chunks=3)
    assert out["success"] == rec.success and out["success_step"] == rec.success_step
    assert out["steps"] == rec.steps and out["physics_steps"] == rec.physics_steps
    assert out["phase_reached"] == rec.phase_reached
    world.load(scene)
    planner_rec = run_episode(world, scene, REGISTRY[family].planner(world.ctx), max_chunks=14)
    world.load(scene)
    planner_out = run_outcome(world, scene, REGISTRY[family].planner(world.ctx), max_chunks=14)
    assert (
        planner_out["success"] == planner_rec.success
        and planner_out["steps"] == planner_rec.steps
        and planner_out["phase_reached"] == planner_rec.phase_reached
    )


def test_record_as_arrays_reads_back_as_the_json_record(small_data, world):
    """`rollout_job` returns records as arrays (pickled between processes): the same record as the lists."""
    import pickle

    from coda.sim.rollout import RolloutRecord

    scene = data.seed_scenes(small_data, "stack", 1)[0]
    rec = plan_episode(world, scene)
    a = RolloutRecord.from_dict(pickle.loads(pickle.dumps(rec.to_dict(arrays=True))))
    b = RolloutRecord.from_dict(rec.to_dict())
    for x in (a, b):
        assert x.obs.dtype == rec.obs.dtype and x.obs.tobytes() == rec.obs.tobytes()
        assert x.actions.tobytes() == rec.actions.tobytes() and x.phases.tobytes() == rec.phases.tobytes()
        assert all(x.states[k].tobytes() == v.tobytes() for k, v in rec.states.items())
        assert (x.success, x.success_step, x.chunk_starts) == (
            rec.success,
            rec.success_step,
            rec.chunk_starts,
        )
