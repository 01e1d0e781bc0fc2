"""`obs: rgb`: two TinyRenderer cameras, low-poly Panda visuals, images in the policy's observation."""

import numpy as np

from coda import data
from coda.sim.rollout import run_episode
from coda.sim.world import World


class Recorder:
    def __init__(self):
        self.images = []

    def act(self, obs):
        self.images.append(obs.images)
        return np.tile([0.5, 0, 0, 0, 0, 0, 1.0], (8, 1))


def test_two_cameras_in_the_observation(small_data):
    w = World(small_data, render=True, image_size=48)
    try:
        a, b = data.seed_scenes(small_data, "pick_place", 1)[0], data.seed_scenes(small_data, "drawer", 1)[0]
        pol = Recorder()
        rec = run_episode(w, a, pol, max_chunks=2)
        assert rec.steps == 16 and len(pol.images) == 2
        first = pol.images[0]
        assert first.shape == (2, 48, 48, 3) and first.dtype == np.uint8
        assert first.std() > 5  # not a blank frame
        assert not np.array_equal(pol.images[0], pol.images[1])  # the arm moved between the chunks
        w.load(b)
        assert np.abs(w.cameras().astype(int) - first.astype(int)).mean() > 1  # another scene looks different
    finally:
        w.close()


def test_lowpoly_panda_uses_collision_meshes():
    from coda.sim.world import _lowpoly_panda_urdf

    text = open(_lowpoly_panda_urdf()).read()
    assert "meshes/visual/" not in text and "meshes/collision/link1.obj" in text
