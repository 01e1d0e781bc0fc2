"""Asset catalog: counts, determinism, validation, and that the assets behave in pybullet."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pybullet as p
import pybullet_data
import pytest

from coda.sim import assets as A

SEED = 0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    t0 = time.perf_counter()
    catalog = A.build_assets(data_dir, seed=SEED)
    print(f"\nbuild_assets: {time.perf_counter() - t0:.1f} s")
    return data_dir, catalog


@pytest.fixture()
def client():
    c = p.connect(p.DIRECT)
    p.setGravity(0, 0, -9.81, physicsClientId=c)
    p.setTimeStep(1 / 240, physicsClientId=c)
    p.loadURDF(str(Path(pybullet_data.getDataPath()) / "plane.urdf"), physicsClientId=c)
    yield c
    p.disconnect(c)
    A.clear_caches(c)


def _files(data_dir: Path) -> dict[str, bytes]:
    root = data_dir / "assets"
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def _pick(seq, n):
    """n deterministic, evenly spread elements of seq."""
    idx = np.linspace(0, len(seq) - 1, n).round().astype(int)
    return [seq[i] for i in sorted(set(idx))]


# ------------------------------------------------------------------------------------------------
# catalog contents
# ------------------------------------------------------------------------------------------------
def test_counts_and_categories(built):
    _, cat = built
    assert len(cat.rigid) >= 1200
    assert len(cat.articulated) >= 300
    rigid = Counter(a.category for a in cat.rigid)
    art = Counter(a.category for a in cat.articulated)
    for c in ("blob_compact", "blob_flat", "blob_elongated"):
        assert rigid[c] >= 100, rigid
    for c in ("cube", "cuboid", "cylinder", "sphere", "mug", "duck"):
        assert rigid[c] >= 1, rigid
    assert sum(rigid[c] for c in ("cube", "cuboid", "cylinder", "sphere")) >= 200
    assert set(art) == {
        "drawer_single",
        "drawer_double",
        "drawer_triple",
        "drawer_wide",
        "drawer_tall",
        "door_cabinet",
        "lid_box",
    }
    assert cat.categories() == {"articulated": sorted(art), "rigid": sorted(rigid)}
    assert Counter(a.source for a in cat.rigid)["random_urdfs"] >= 990
    assert all(a.category == c for c in ("mug", "cube") for a in cat.rigid_in(c))
    assert len(cat.rigid_in(["cube", "cuboid"])) == rigid["cube"] + rigid["cuboid"]
    assert cat.by_id("objects/mug").category == "mug"
    assert cat.by_id("articulated/drawer_single_000").n_movable == 1
    with pytest.raises(KeyError):
        cat.by_id("nope/none")


def test_rigid_geometry(built):
    _, cat = built
    for a in cat.rigid:
        assert a.default_mass > 0 and all(h > 0 for h in a.half_extents)
        if a.shape == "hull":
            v = np.asarray(a.hull_vertices)
            assert 4 <= len(v) <= A.MAX_HULL_VERTICES, a.asset_id
            # AABB-centred, and half_extents are the hull's half sizes
            np.testing.assert_allclose((v.max(0) + v.min(0)) / 2, 0, atol=2e-5, err_msg=a.asset_id)
            np.testing.assert_allclose(
                (v.max(0) - v.min(0)) / 2, a.half_extents, atol=2e-5, err_msg=a.asset_id
            )
            assert a.visual_mesh and (Path(pybullet_data.getDataPath()) / a.visual_mesh).is_file()
        else:
            assert a.visual_mesh is None and a.hull_vertices == ()
    # primitives are graspable by a Franka gripper (max opening 0.08 m) and 3-10 cm tall
    for a in cat.rigid:
        if a.source == "primitive":
            assert 2 * min(a.half_extents[:2]) <= 0.066, a
            assert 0.03 - 1e-9 <= 2 * a.half_extents[2] <= 0.10 + 1e-9, a


def test_visual_mesh_matches_hull(built):
    """The visual mesh, rotated and offset as stored, fills the hull's bounding box."""
    _, cat = built
    hulls = [a for a in cat.rigid if a.source == "random_urdfs"]
    for a in _pick(hulls, 25) + [cat.by_id("objects/mug"), cat.by_id("objects/duck")]:
        v = A._read_obj_vertices(Path(pybullet_data.getDataPath()) / a.visual_mesh) * a.visual_mesh_scale
        w = v @ A._matrix_from_quat(a.visual_orientation).T + np.asarray(a.visual_offset)
        tol = 1e-4 if a.source == "random_urdfs" else 1e-3  # objects/: visual and collision meshes differ
        np.testing.assert_allclose(w.max(0), a.half_extents, atol=tol, err_msg=a.asset_id)
        np.testing.assert_allclose(w.min(0), -np.asarray(a.half_extents), atol=tol, err_msg=a.asset_id)


def test_handles_reachable_heights(built):
    data_dir, cat = built
    for a in cat.articulated:
        assert a.n_movable == len(a.movable_joints) == len(a.handle_links) == len(a.joint_limits)
        assert len(a.handle_local) == a.n_movable
        for lo, hi in a.joint_limits:
            assert lo == 0.0
            assert (0.15 <= hi <= 0.25) if a.joint_type == "prismatic" else (1.2 <= hi <= 1.6), a.asset_id
        assert (data_dir / a.urdf).is_file()


# ------------------------------------------------------------------------------------------------
# determinism and validation
# ------------------------------------------------------------------------------------------------
def test_build_is_byte_identical(built, tmp_path):
    data_dir, cat = built
    again = A.build_assets(tmp_path / "again", seed=SEED)
    assert again == cat
    a, b = _files(data_dir), _files(tmp_path / "again")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], k
    text = a["catalog.json"].decode()
    assert str(data_dir) not in text and str(Path.home()) not in text
    assert len([k for k in a if k.endswith(".urdf")]) == len(cat.articulated)
    # another seed varies the seeded parts, not the pybullet_data hulls
    other = A.build_assets(tmp_path / "other", seed=SEED + 1)
    assert other.by_id("primitive/cube_000") != cat.by_id("primitive/cube_000")
    assert other.by_id("random_urdfs/042") == cat.by_id("random_urdfs/042")
    assert (
        _files(tmp_path / "other")["articulated/drawer_single_000.urdf"]
        != a["articulated/drawer_single_000.urdf"]
    )


def test_rebuild_removes_stale_urdfs(built, tmp_path):
    data_dir = tmp_path / "d"
    A.build_assets(data_dir, seed=SEED)
    stale = data_dir / "assets" / "articulated" / "drawer_single_999.urdf"
    stale.write_text("<robot/>")
    A.build_assets(data_dir, seed=SEED)
    assert not stale.exists()


def test_hull_computation_is_deterministic(built):
    """Recompute some hulls from scratch (bypassing the per-process memo) and compare."""
    _, cat = built
    data = Path(pybullet_data.getDataPath())
    for aid in ("random_urdfs/000", "random_urdfs/042", "random_urdfs/517", "random_urdfs/999"):
        a = cat.by_id(aid)
        n = aid.split("/")[1]
        pts = A._read_obj_vertices(data / "random_urdfs" / n / f"{n}.obj") * A.RANDOM_URDF_SCALE
        fresh = A._hull_asset(aid, "random_urdfs", a.category, pts, a.visual_mesh, A.RANDOM_URDF_SCALE)
        assert fresh == a


def test_load_round_trip(built):
    data_dir, cat = built
    loaded = A.load_catalog(data_dir)
    assert loaded == cat
    assert loaded.by_id("random_urdfs/042") == cat.by_id("random_urdfs/042")
    assert isinstance(loaded.rigid[0].hull_vertices, tuple)
    assert isinstance(loaded.articulated[0].joint_limits[0], tuple)


def _tampered(data_dir: Path, tmp_path: Path, edit, keep=None) -> Path:
    """A copy of the catalog, optionally cut down to the entries `keep`, edited by `edit`."""
    doc = json.loads((data_dir / "assets" / "catalog.json").read_text())
    if keep is not None:
        for kind in ("rigid", "articulated"):
            doc[kind] = [e for e in doc[kind] if e["asset_id"] in keep]
    edit(doc)
    out = tmp_path / "t"
    (out / "assets").mkdir(parents=True)
    (out / "assets" / "catalog.json").write_text(json.dumps(doc))
    (out / "assets" / "articulated").symlink_to(data_dir / "assets" / "articulated")
    return out


def _entry(doc, aid):
    return next(e for e in doc["rigid"] + doc["articulated"] if e["asset_id"] == aid)


@pytest.mark.parametrize(
    ("aid", "field", "value"),
    [
        ("random_urdfs/042", "default_mass", -0.1),
        ("primitive/cube_003", "shape", "blob"),
        ("primitive/cube_003", "dims", [0.02, 0.02]),
        ("random_urdfs/042", "hull_vertices", [[0.0, 0.0, 0.0]] * 49),
        ("random_urdfs/042", "visual_mesh", "/etc/passwd"),
        ("random_urdfs/042", "visual_orientation", [0.0, 0.0, 0.0, 2.0]),
        ("random_urdfs/042", "source", "internet"),
        ("articulated/drawer_double_004", "joint_type", "spherical"),
        ("articulated/drawer_double_004", "movable_joints", ["drawer_0_slide"]),
        ("articulated/drawer_double_004", "joint_limits", [[0.2, 0.1], [0.0, 0.2]]),
        ("articulated/lid_box_001", "urdf", "assets/articulated/missing.urdf"),
        ("articulated/lid_box_001", "footprint", [0.1, -0.2, 0.1]),
    ],
)
def test_load_rejects_tampered_field(built, tmp_path, aid, field, value):
    data_dir, _ = built

    def edit(doc):
        _entry(doc, aid)[field] = value

    A.load_catalog(_tampered(data_dir, tmp_path / "ok", lambda doc: None, keep={aid, "primitive/cube_000"}))
    with pytest.raises(ValueError) as err:
        A.load_catalog(_tampered(data_dir, tmp_path, edit, keep={aid, "primitive/cube_000"}))
    assert aid in str(err.value) and field in str(err.value)


def test_load_rejects_schema_and_structure(built, tmp_path):
    data_dir, _ = built

    def wrong_schema(doc):
        doc["schema"] = A.CATALOG_SCHEMA + 1

    with pytest.raises(ValueError, match="schema"):
        A.load_catalog(_tampered(data_dir, tmp_path / "a", wrong_schema))

    def missing_field(doc):
        del _entry(doc, "primitive/sphere_001")["half_extents"]

    with pytest.raises(ValueError, match=r"primitive/sphere_001.*half_extents"):
        A.load_catalog(_tampered(data_dir, tmp_path / "b", missing_field))

    def duplicate(doc):
        doc["rigid"].append(doc["rigid"][0])

    with pytest.raises(ValueError, match="duplicate"):
        A.load_catalog(_tampered(data_dir, tmp_path / "c", duplicate))


# ------------------------------------------------------------------------------------------------
# physics
# ------------------------------------------------------------------------------------------------
def test_rigid_assets_rest_on_a_plane(built, client):
    _, cat = built
    c = client
    hulls = _pick([a for a in cat.rigid if a.source == "random_urdfs"], 16)
    objs = [a for a in cat.rigid if a.source == "pybullet_objects"]
    prims = [a for k in ("cube", "cuboid", "cylinder", "sphere") for a in _pick(cat.rigid_in(k), 3)]
    for i, a in enumerate(hulls + objs + prims):
        x, y = 0.3 * (i % 8), 0.3 * (i // 8)
        b = A.spawn_rigid(
            c,
            a,
            position=(x, y, a.half_extents[2] + 0.05),
            orientation=(0, 0, 0, 1),
            scale=1.0,
            mass=a.default_mass,
            friction=0.8,
            rgba=None,
            visual=False,
        )
        for _ in range(240):
            p.stepSimulation(physicsClientId=c)
        pos, orn = p.getBasePositionAndOrientation(b, physicsClientId=c)
        vel, _ = p.getBaseVelocity(b, physicsClientId=c)
        assert abs(vel[2]) < 0.02, (a.asset_id, vel)
        if a.shape == "hull":
            rot = np.array(p.getMatrixFromQuaternion(orn)).reshape(3, 3)
            lowest = (np.asarray(a.hull_vertices) @ rot.T + pos)[:, 2].min()
            assert lowest > -0.003, (a.asset_id, lowest)
        else:
            assert pos[2] > min(a.half_extents) - 0.003, (a.asset_id, pos)
        p.removeBody(b, physicsClientId=c)


def test_hull_assets_placed_gently_stay_upright(built, client):
    """Hulls are stored in a resting pose: placed on a plane they stay (nearly) as they are."""
    _, cat = built
    c = client
    sample = _pick([a for a in cat.rigid if a.shape == "hull"], 40)
    tilted = []
    for a in sample:
        b = A.spawn_rigid(
            c,
            a,
            position=(0, 0, a.half_extents[2] + 0.002),
            orientation=(0, 0, 0, 1),
            scale=1.0,
            mass=a.default_mass,
            friction=0.8,
            rgba=None,
            visual=False,
        )
        for _ in range(120):
            p.stepSimulation(physicsClientId=c)
        _, orn = p.getBasePositionAndOrientation(b, physicsClientId=c)
        if np.degrees(np.arccos(np.clip(p.getMatrixFromQuaternion(orn)[8], -1, 1))) > 10:
            tilted.append(a.asset_id)
        p.removeBody(b, physicsClientId=c)
    assert len(tilted) <= 2, tilted


def test_spawn_rigid_scale_visual_and_cache(built, client):
    _, cat = built
    c = client
    box = cat.rigid_in("cuboid")[0]
    b = A.spawn_rigid(
        c,
        box,
        position=(0, 0, 0.5),
        orientation=(0, 0, 0),
        scale=1.5,
        mass=0.2,
        friction=0.6,
        rgba=(1, 0, 0, 1),
        visual=True,
    )
    lo, hi = p.getAABB(b, physicsClientId=c)
    np.testing.assert_allclose((np.array(hi) - lo) / 2, np.array(box.half_extents) * 1.5, atol=2e-3)
    assert p.getDynamicsInfo(b, -1, physicsClientId=c)[0] == pytest.approx(0.2)
    assert p.getDynamicsInfo(b, -1, physicsClientId=c)[1] == pytest.approx(0.6)
    assert p.getVisualShapeData(b, physicsClientId=c)[0][7] == pytest.approx((1, 0, 0, 1))
    mug = cat.by_id("objects/mug")
    m1 = A.spawn_rigid(
        c,
        mug,
        position=(1, 0, 0.5),
        orientation=(0, 0, 0, 1),
        scale=1.0,
        mass=0.3,
        friction=0.6,
        rgba=None,
        visual=False,
    )
    m2 = A.spawn_rigid(
        c,
        mug,
        position=(2, 0, 0.5),
        orientation=(0, 0, 0, 1),
        scale=1.0,
        mass=0.3,
        friction=0.6,
        rgba=None,
        visual=True,
    )
    # without a visual shape pybullet only reports its collision-geometry stand-in (no mesh file)
    assert all(v[4] == b"" for v in p.getVisualShapeData(m1, physicsClientId=c))
    assert p.getVisualShapeData(m2, physicsClientId=c)[0][4].endswith(b"objects/mug.obj")
    assert len([k for k in A._COLLISION_CACHE if k[0] == c and k[1] == mug.asset_id]) == 1
    # after resetSimulation the cache is stale; clear_caches makes spawning work again
    p.resetSimulation(physicsClientId=c)
    A.clear_caches(c)
    b = A.spawn_rigid(
        c,
        mug,
        position=(0, 0, 0.5),
        orientation=(0, 0, 0, 1),
        scale=1.0,
        mass=0.3,
        friction=0.6,
        rgba=None,
        visual=False,
    )
    assert p.getNumBodies(physicsClientId=c) == 1 and b == 0


def test_every_articulated_urdf_loads(built, client):
    data_dir, cat = built
    c = client
    for a in cat.articulated:
        b = A.spawn_articulated(c, a, data_dir, position=(0.7, 0, 0), yaw=0.0, scale=1.0)
        for name, (lo, hi) in zip(a.movable_joints, a.joint_limits):
            info = p.getJointInfo(b, A.link_index(c, b, name), physicsClientId=c)
            expected = p.JOINT_PRISMATIC if a.joint_type == "prismatic" else p.JOINT_REVOLUTE
            assert info[2] == expected and (info[8], info[9]) == pytest.approx((lo, hi)), a.asset_id
        # closed handles sit 6-40 cm above the carcass bottom, in front of the carcass (-x)
        for hname, hl in zip(a.handle_links, a.handle_local):
            ls = p.getLinkState(
                b, A.link_index(c, b, hname), computeForwardKinematics=True, physicsClientId=c
            )
            grasp = p.multiplyTransforms(ls[4], ls[5], hl, (0, 0, 0, 1))[0]
            assert 0.06 - 1e-6 <= grasp[2] <= 0.40 + 1e-6, (a.asset_id, grasp)
            assert grasp[0] < 0.7 - a.footprint[0] - 0.03, (a.asset_id, grasp)
        p.removeBody(b, physicsClientId=c)


def _handle_point(c, b, a, k):
    ls = p.getLinkState(
        b, A.link_index(c, b, a.handle_links[k]), computeForwardKinematics=True, physicsClientId=c
    )
    return np.array(p.multiplyTransforms(ls[4], ls[5], a.handle_local[k], (0, 0, 0, 1))[0])


@pytest.mark.parametrize("category", sorted(A.N_ARTICULATED))
def test_articulated_parts_move(built, client, category):
    data_dir, cat = built
    c = client
    for a in _pick([x for x in cat.articulated if x.category == category], 2):
        b = A.spawn_articulated(
            c, a, data_dir, position=(0.7, 0.1, 0), yaw=0.3, scale=1.0, rgba=(0.5, 0.5, 0.9, 1)
        )
        joints = [A.link_index(c, b, n) for n in a.movable_joints]
        # at rest nothing drifts
        for _ in range(240):
            p.stepSimulation(physicsClientId=c)
        for j in joints:
            assert abs(p.getJointState(b, j, physicsClientId=c)[0]) < 1e-3, a.asset_id
        # pulling the top handle away from the cabinet front opens its part
        k = a.n_movable - 1
        start = _handle_point(c, b, a, k)
        pull = np.array([-np.cos(0.3), -np.sin(0.3), 0.0]) * 20.0
        if category == "lid_box":
            pull = pull * 0.5 + np.array([0, 0, 20.0])
        for _ in range(120):
            p.applyExternalForce(
                b,
                A.link_index(c, b, a.handle_links[k]),
                pull.tolist(),
                _handle_point(c, b, a, k).tolist(),
                p.WORLD_FRAME,
                physicsClientId=c,
            )
            p.stepSimulation(physicsClientId=c)
        q = p.getJointState(b, joints[k], physicsClientId=c)[0]
        assert q > 0.05, (a.asset_id, q)
        assert np.linalg.norm(_handle_point(c, b, a, k) - start) > 0.03
        # position control reaches the open limit
        lo, hi = a.joint_limits[0]
        p.setJointMotorControl2(
            b, joints[0], p.POSITION_CONTROL, targetPosition=hi, force=100.0, physicsClientId=c
        )
        for _ in range(480):
            p.stepSimulation(physicsClientId=c)
        q = p.getJointState(b, joints[0], physicsClientId=c)[0]
        tol = 0.01 if a.joint_type == "prismatic" else 0.05
        assert abs(q - hi) < tol, (a.asset_id, q, hi)
        p.removeBody(b, physicsClientId=c)


def test_articulated_scaling(built, client):
    """globalScaling scales geometry and prismatic limits (the lead's World relies on it)."""
    data_dir, cat = built
    c = client
    a = cat.articulated[0]
    b = A.spawn_articulated(c, a, data_dir, position=(0.7, 0, 0), yaw=0.0, scale=1.5)
    info = p.getJointInfo(b, A.link_index(c, b, a.movable_joints[0]), physicsClientId=c)
    assert info[9] == pytest.approx(a.joint_limits[0][1] * 1.5)
    lo, hi = p.getAABB(b, -1, physicsClientId=c)
    assert (hi[2] - lo[2]) / 2 == pytest.approx(a.footprint[2] * 1.5, abs=3e-3)


def test_link_index(built, client):
    data_dir, cat = built
    c = client
    a = next(x for x in cat.articulated if x.category == "drawer_double")
    b = A.spawn_articulated(c, a, data_dir, position=(0.7, 0, 0), yaw=0.0, scale=1.0)
    assert A.link_index(c, b, "carcass") == -1
    assert A.link_index(c, b, "drawer_0_slide") == A.link_index(c, b, "drawer_0")
    assert A.link_index(c, b, "handle_1") == A.link_index(c, b, "handle_1_fixed")
    with pytest.raises(KeyError):
        A.link_index(c, b, "no_such_link")
    # a different body reusing the id gets a fresh map
    p.removeBody(b, physicsClientId=c)
    lid = next(x for x in cat.articulated if x.category == "lid_box")
    b2 = A.spawn_articulated(c, lid, data_dir, position=(0.7, 0, 0), yaw=0.0, scale=1.0)
    assert A.link_index(c, b2, "lid_hinge") >= 0
    with pytest.raises(KeyError):
        A.link_index(c, b2, "drawer_0_slide")
