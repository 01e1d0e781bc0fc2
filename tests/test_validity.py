"""Validity checks catch planted interpenetrating and unstable scenes; repairs are traced."""

import numpy as np

from coda import data
from coda.sim.validity import check_interpenetration, check_stability, validate_scene


def _two_object_scene(small_data):
    scene = data.seed_scenes(small_data, "stack", 1)[0]
    top, base = scene.role("top"), scene.role("base")
    b = scene.spatial.poses[base]
    return scene, top, base, b


def test_planted_interpenetration_is_caught_and_repaired(small_data, world):
    scene, top, base, b = _two_object_scene(small_data)
    planted = scene.replace_pose(top, x=b.x + 0.005, y=b.y)
    world.load(planted, settle_s=0.0)
    ok, detail, info = check_interpenetration(world)
    assert not ok and "interpenetrate" in detail
    report = validate_scene(world, planted, np.random.default_rng(0))
    assert report.status == "repaired"
    assert any(t["op"] == "repair" and t["name"] == "replace" for t in report.trace)
    assert any(t["op"] == "check" and t["name"] == "interpenetration" and not t["ok"] for t in report.trace)
    world.load(report.scene, settle_s=0.0)
    assert check_interpenetration(world)[0]


def test_planted_unstable_scene_is_caught(small_data, world):
    # an object spawned half over the bin's wall cannot stay where it was put
    scene = data.seed_scenes(small_data, "pick_place", 1)[0]
    c = scene.spatial.poses[scene.role("container")]
    from coda.sim.fixtures import BIN_INNER

    planted = scene.replace_pose(
        scene.role("target"), x=c.x, y=c.y + BIN_INNER[1] * scene.objects[1].scale + 0.012
    )
    world.load(planted, settle_s=0.0)
    st = world.state()
    world.settle(0.5)
    ok, detail, info = check_stability(world, st["obj_pos"], st["obj_quat"])
    assert not ok and info["object"] == scene.role("target") and "unstable" in detail


def test_valid_seed_scene_passes(small_data, world):
    scene = data.seed_scenes(small_data, "drawer", 1)[0]
    report = validate_scene(world, scene, np.random.default_rng(0))
    assert report.status == "pass" and report.scene == scene
    assert [t["name"] for t in report.trace] == ["scale", "reach", "interpenetration", "stability"]


def test_oversized_target_is_rescaled(small_data, world):
    scene = data.seed_scenes(small_data, "pick_place", 1)[0]
    big = scene.replace_object(scene.role("target"), scale=2.9)
    report = validate_scene(world, big, np.random.default_rng(0))
    assert report.scene is not None
    assert report.scene.objects[scene.role("target")].scale < 2.9
    assert any(t["name"] == "rescale" for t in report.trace)
