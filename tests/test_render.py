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


def test_the_figure_cameras_hold_the_whole_robot_and_the_scene(small_data):
    """In each figure view of a seed scene of every family the robot covers a good part of the image and lies
    wholly inside it (no robot pixel on the border), the scene's objects are seen too, and taking the views
    changes no state; the policy's front observation camera, by contrast, cuts the robot at the border."""
    w = World(small_data, render=True, image_size=64)
    try:
        for family in data.FAMILIES:
            w.load(data.seed_scenes(small_data, family, 1)[0])
            before = w.state()
            views, masks = w.figure_cameras(96, segmentation=True)
            assert views.shape == (2, 96, 96, 3) and masks.shape == (2, 96, 96)
            for view, mask in zip(views, masks):
                robot = mask == w.robot
                assert robot.mean() > 0.05, (family, robot.mean())
                border = np.concatenate([robot[0], robot[-1], robot[:, 0], robot[:, -1]])
                assert not border.any(), f"{family}: the robot leaves the figure view"
                assert np.isin(mask, [b.uid for b in w.bodies]).sum() > 10  # the objects are in view
                assert view[robot].std() > 5  # shaded, not blank
            after = w.state()
            assert all(np.array_equal(before[k], after[k]) for k in before)
        import pybullet as p

        from coda.sim.world import CAMERAS

        eye, target = CAMERAS[0]  # the observation camera: the gripper and a sliver of arm at the border
        view = p.computeViewMatrix(eye, target, [0, 0, 1], physicsClientId=w.client)
        proj = p.computeProjectionMatrixFOV(55, 1.0, 0.05, 3.0, physicsClientId=w.client)
        seg = np.asarray(p.getCameraImage(96, 96, view, proj, physicsClientId=w.client)[4]).reshape(96, 96)
        robot = seg == w.robot
        assert np.concatenate([robot[0], robot[-1], robot[:, 0], robot[:, -1]]).any()
    finally:
        w.close()


def test_lowpoly_panda_uses_collision_meshes_and_the_unrendered_one_has_no_visuals():
    from coda.sim.world import _panda_urdf

    text = open(_panda_urdf("lowpoly")).read()
    assert "meshes/visual/" not in text and "meshes/collision/link1.obj" in text
    bare = open(_panda_urdf("collision")).read()
    assert "<visual" not in bare and bare.count("<collision") == text.count("<collision") > 0


def test_coda_render_writes_both_views_of_a_seed_scene(small_data, tmp_path):
    """`coda render FAMILY/N --out x.png`: a PNG of the front and rear figure views side by side, each under a
    label; a spec file and a scene hash name the same scene; an unknown name is a one-line error."""
    import subprocess
    import sys

    from matplotlib import image

    from coda import data
    from coda.report.render import band_height, render_scene, resolve_scene

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
    band = band_height(64)
    assert img.shape[:2] == (64 + band, 128) and img[band:].std() > 0.01  # two views under labels, not blank
    for label in (img[:band, :64], img[:band, 64:]):  # a light band with dark text over each view
        assert np.median(label) > 0.85 and (label[..., :3].mean(axis=-1) < 0.4).sum() > 10
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
