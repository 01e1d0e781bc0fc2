"""`World`: an episode is a function of its scene and its actions alone, whatever the world ran before.

PyBullet keeps state that survives removing and re-adding bodies: after an episode that stepped the arm
through its inverse kinematics, the same scene loaded again settled ~1e-5 rad differently in the fingers and
parted by ~1e-8 rad in the arm within one control step. Which scenes a worker has run depends on scheduling,
so evaluation outcomes moved between runs of the same command (one of 800 episodes in
`table1_regime_b@critic_no_memory-0`). `World.load` now rebuilds the physics world, and these tests hold it
to that.
"""

from __future__ import annotations

import numpy as np

from coda import data
from coda.sim.rollout import run_episode
from coda.sim.world import World


class FixedChunks:
    """A policy that plays a fixed sequence of random action chunks, gripper commands included."""

    def __init__(self, seed: int, n: int = 6, horizon: int = 8) -> None:
        self.chunks = list(np.random.default_rng(seed).uniform(-1.0, 1.0, (n, horizon, 7)))
        self.i = 0

    def act(self, obs) -> np.ndarray:
        chunk = self.chunks[self.i % len(self.chunks)]
        self.i += 1
        return chunk


def _trajectory(world: World, scene, seed: int = 0) -> dict[str, np.ndarray]:
    rec = run_episode(world, scene, FixedChunks(seed), max_chunks=6, stop_on_success=False)
    return {**rec.states, "actions": rec.actions, "obs": rec.obs}


def _assert_same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes(), k


# regime B's evaluation scene `categories` 6 of the drawer family (episode 656 of a final evaluation): the arm,
# driven through the inverse kinematics, touches the drawer; the scene that exposed the old `load`
HISTORY_SCENE = '{"objects":[{"asset_id":"articulated/drawer_wide_001","category":"drawer_wide","friction":1.4826,"mass":5.0,"rgba":[0.615,0.577,0.615,1.0],"scale":1.1295}],"spatial":{"poses":[{"x":0.6101,"y":0.1958,"yaw":-0.3621}]},"task":{"bindings":{"cabinet":0},"family":"drawer","goal":[0.0,0.7895,-0.3621],"instruction":"slide the drawer in","template_id":2,"variant":"close"},"version":1}'


def _arm_after(world: World, scene, actions: np.ndarray) -> tuple[str, bytes]:
    """The robot's full joint states (positions, velocities, reaction forces, motor torques) right after
    `load`, and the arm's trajectory under `actions`."""
    import pybullet as p

    world.load(scene)
    joints = range(p.getNumJoints(world.robot, physicsClientId=world.client))
    settled = repr(p.getJointStates(world.robot, list(joints), physicsClientId=world.client))
    trajectory = []
    for a in actions:
        world.step(a)
        trajectory.append(world.state()["ee_pos"])
    return settled, np.asarray(trajectory).tobytes()


def test_an_episode_does_not_depend_on_what_the_world_ran_before(small_data):
    """The same scene in a fresh world and in one that has just run it, or another scene, under the same
    actions: the same bits, from the settle on (the old `load` parted at the second run of this scene)."""
    from coda.sim.scene import SceneSpec

    scene = SceneSpec.from_json(HISTORY_SCENE)
    other = data.seed_scenes(small_data, "pick_place", 1)[0]
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, (40, 7))
    fresh = World(small_data)
    used = World(small_data)
    try:
        reference = _arm_after(fresh, scene, actions)
        for _ in range(2):
            assert _arm_after(used, scene, actions) == reference
        _arm_after(used, other, actions[::-1])
        assert _arm_after(used, scene, actions) == reference
        drawer = data.seed_scenes(small_data, "drawer", 1)[0]  # and through `run_episode`, records included
        _assert_same_bits(_trajectory(fresh, drawer), _trajectory(used, drawer))
    finally:
        fresh.close()
        used.close()


def test_load_leaves_only_the_scene_and_the_robot(small_data, world):
    scenes = data.seed_scenes(small_data, "stack", 2)
    world.load(scenes[0])
    world.load(scenes[1])
    import pybullet as p

    n = p.getNumBodies(physicsClientId=world.client)
    assert n == 2 + len(world.bodies)  # the floor, the robot and the scene's objects
    assert [b.uid for b in world.bodies] == list(range(2, n))


def test_the_unrendered_robot_moves_as_the_full_one(small_data):
    """Without rendering the Panda is loaded without its visual meshes (~6x faster, and `load` loads it for
    every scene); its dynamics are those of pybullet_data's full model, bit for bit."""
    from coda.sim.world import _panda_urdf

    scene = data.seed_scenes(small_data, "push", 1)[0]
    bare, full = World(small_data), World(small_data)
    try:
        assert bare._robot_urdf == _panda_urdf("collision")
        full._robot_urdf = _panda_urdf("full")
        _assert_same_bits(_trajectory(bare, scene), _trajectory(full, scene))
    finally:
        bare.close()
        full.close()
