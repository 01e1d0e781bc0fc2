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


def test_coda_render_writes_both_views_of_a_seed_scene(small_data, tmp_path):
    """`coda render FAMILY/N --out x.png`: a PNG of the front and side views side by side; a spec file and a
    scene hash name the same scene; an unknown name is a one-line error."""
    import subprocess
    import sys

    from matplotlib import image

    from coda import data
    from coda.report.render import render_scene, resolve_scene

    out = tmp_path / "x.png"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "coda",
            "render",
            "pick_place/0",
            "--out",
            str(out),
            "--data",
            str(small_data),
            "--size",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    img = image.imread(out)
    assert img.shape[:2] == (64, 128) and img.std() > 0.01  # two views, not blank
    scene = data.seed_scenes(small_data, "pick_place")[0]
    spec = tmp_path / "scene.json"
    spec.write_text(scene.to_json())
    assert (
        resolve_scene(str(spec), small_data).hash == scene.hash == resolve_scene(scene.hash, small_data).hash
    )
    render_scene(scene.hash, tmp_path / "y.png", small_data, 64)
    assert (tmp_path / "y.png").read_bytes() == out.read_bytes()  # deterministic
    bad = subprocess.run(
        [sys.executable, "-m", "coda", "render", "nope", "--out", str(out), "--data", str(small_data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "no such scene" in bad.stderr
