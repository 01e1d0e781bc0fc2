"""Rigid assets: pybullet_data's random_urdfs meshes and toy objects as simplified, resting hulls, and
the seeded primitives (cubes, cuboids, cylinders, spheres)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np
import pybullet as p

from coda.sim import exact_math
from coda.sim.assets.catalog import RigidAsset, _r
from coda.sim.assets.geometry import (
    _matrix_from_quat,
    _quat_from_matrix,
    _read_obj_vertices,
    resting_rotation,
    simplify_hull,
)

HULL_GRID = 1e-7  # metres: hull vertices are simplified on this integer grid (exact distances and ties)
RANDOM_URDF_SCALE = 0.015
DENSITY = 500.0  # kg/m^3 applied to the (simplified) hull or primitive volume for `default_mass`
MASS_RANGE = (0.02, 1.0)
MIN_THICKNESS = 0.004  # random_urdfs meshes thinner than this (m, at scale 1) are excluded

# random_urdfs shape categories from the sorted AABB extents e1 >= e2 >= e3:
FLAT_RATIO = 0.5  # e3 / e2 < FLAT_RATIO            -> blob_flat
ELONGATED_RATIO = 1.2  # else e1 / e2 >= ELONGATED_RATIO -> blob_elongated, else blob_compact

# primitive counts per category
N_PRIMITIVES = {"cube": 70, "cuboid": 70, "cylinder": 70, "sphere": 30}

# pybullet_data objects: id suffix -> (category, collision mesh, visual mesh, mesh scale, upright pose as
# (roll, pitch, yaw) or None to find a resting pose like the random_urdfs)
PYBULLET_OBJECTS = {
    "mug": ("mug", "objects/mug_col.obj", "objects/mug.obj", 1.0, (0.0, 0.0, 0.0)),
    "duck": ("duck", "duck_vhacd.obj", "duck.obj", 0.05, (math.pi / 2, 0.0, 0.0)),
    "teddy": ("teddy", "teddy2_VHACD_CHs.obj", "teddy2_VHACD_CHs.obj", 0.1, None),
    "soccerball": ("ball", "soccerball.obj", "soccerball.obj", 0.06, (0.0, 0.0, 0.0)),
    "lego": ("lego", "lego/lego_vhacd.obj", "lego/lego.obj", 0.1, (math.pi / 2, 0.0, 0.0)),
    "domino": ("domino", "domino/domino.obj", "domino/domino.obj", 1.0, None),
    "toy_cube": ("toy_cube", "toys/cube.obj", "toys/cube.obj", 1.0, None),
    "toy_cylinder": ("toy_cylinder", "toys/cylinder.obj", "toys/cylinder.obj", 1.0, None),
    "toy_prism": ("toy_prism", "toys/prism.obj", "toys/prism.obj", 1.0, None),
}


_HULL_MEMO: dict[tuple, RigidAsset | str] = {}  # see _mesh_asset


def _mesh_asset(data: Path, asset_id, source, category, mesh, visual_mesh, vscale, upright=None):
    """`_hull_asset` for a mesh file under `data`, or a string saying why the mesh is unusable.

    Memoised per process on the file's identity: the result is a pure function of the file, so
    rebuilding the catalog in one process (tests, notebooks) reuses it.
    """
    path = data / mesh
    st = path.stat()
    key = (
        str(path),
        st.st_size,
        st.st_mtime_ns,
        float(vscale),
        upright,
        asset_id,
        source,
        category,
        visual_mesh,
    )
    a = _HULL_MEMO.get(key)
    if a is None:
        pts = _read_obj_vertices(path) * vscale
        thinnest = float(np.ptp(pts, axis=0).min()) if len(pts) >= 4 else 0.0
        if len(pts) < 4:
            a = "mesh has no finite vertices"
        elif thinnest < MIN_THICKNESS:
            a = f"degenerate: thinnest extent {thinnest:.4f} m"
        else:
            base = None if upright is None else _matrix_from_quat(p.getQuaternionFromEuler(upright))
            a = _hull_asset(asset_id, source, category, pts, visual_mesh, vscale, base)
        _HULL_MEMO[key] = a
    return a


def _hull_asset(asset_id, source, category, pts, visual_mesh, vscale, base=None) -> RigidAsset:
    """Simplified hull of `pts` (scaled mesh vertices), put in a resting pose and AABB-centred.

    The resting pose is found on the full convex hull; the simplified hull keeps that pose's AABB and
    support facet, so it rests the same way and the visual mesh fits its bounding box.
    """
    from scipy.spatial import ConvexHull

    pts = np.round(np.asarray(pts, dtype=np.float64), 7)  # quantise: ties resolve the same way
    hv = pts[np.sort(ConvexHull(pts).vertices)]
    quat = _quat_from_matrix(resting_rotation(hv - hv.mean(axis=0), base))
    grid = exact_math.quantize(exact_math.transform(_matrix_from_quat(quat), hv), HULL_GRID)
    support = grid[:, 2] <= grid[:, 2].min() + 10  # within 1 um of the lowest vertex
    red = simplify_hull(grid, keep=support) * HULL_GRID
    lo, hi = red.min(axis=0), red.max(axis=0)
    centre = (lo + hi) / 2.0
    verts = np.round(red - centre, 5)
    verts[verts == 0.0] = 0.0
    half = (verts.max(axis=0) - verts.min(axis=0)) / 2.0
    volume = ConvexHull(verts).volume
    mass = float(np.clip(DENSITY * volume, *MASS_RANGE))
    return RigidAsset(
        asset_id=asset_id,
        source=source,
        category=category,
        shape="hull",
        dims=(),
        hull_vertices=tuple(tuple(_r(c) for c in v) for v in verts),
        half_extents=tuple(_r(h) for h in half),
        visual_mesh=visual_mesh,
        visual_mesh_scale=float(vscale),
        visual_offset=tuple(_r(-c) for c in centre),
        default_mass=_r(mass, 4),
        visual_orientation=quat,
    )


def blob_category(half_extents: Sequence[float]) -> str:
    e = sorted((float(h) for h in half_extents), reverse=True)
    if e[2] < FLAT_RATIO * e[1]:
        return "blob_flat"
    if e[0] >= ELONGATED_RATIO * e[1]:
        return "blob_elongated"
    return "blob_compact"


def _random_urdf_assets(data: Path) -> tuple[list[RigidAsset], list[dict]]:
    out, excluded = [], []
    root = data / "random_urdfs"
    for d in sorted(x.name for x in root.iterdir() if x.is_dir() and x.name.isdigit()):
        obj = root / d / f"{d}.obj"
        aid = f"random_urdfs/{d}"
        if not obj.is_file():
            continue
        a = _mesh_asset(
            data,
            aid,
            "random_urdfs",
            "",
            f"random_urdfs/{d}/{d}.obj",
            f"random_urdfs/{d}/{d}.obj",
            RANDOM_URDF_SCALE,
        )
        if isinstance(a, str):
            excluded.append({"asset_id": aid, "reason": a})
            continue
        out.append(_replace(a, category=blob_category(a.half_extents)))
    return out, excluded


def _replace(a, **kw):
    vals = {f.name: getattr(a, f.name) for f in fields(a)}
    vals.update(kw)
    return type(a)(**vals)


def _pybullet_object_assets(data: Path) -> list[RigidAsset]:
    out = []
    for name, (cat, col, vis, sc, upright) in PYBULLET_OBJECTS.items():
        a = _mesh_asset(data, f"objects/{name}", "pybullet_objects", cat, col, vis, sc, upright)
        if isinstance(a, str):  # pragma: no cover - the listed meshes are fine
            raise RuntimeError(f"objects/{name}: {a}")
        out.append(a)
    return out


def _primitive_assets(rng: np.random.Generator) -> list[RigidAsset]:
    out = []

    def mk(cat, i, shape, dims, half, volume):
        return RigidAsset(
            asset_id=f"primitive/{cat}_{i:03d}",
            source="primitive",
            category=cat,
            shape=shape,
            dims=tuple(_r(x, 4) for x in dims),
            hull_vertices=(),
            half_extents=tuple(_r(x, 4) for x in half),
            visual_mesh=None,
            visual_mesh_scale=1.0,
            visual_offset=(0.0, 0.0, 0.0),
            default_mass=_r(np.clip(DENSITY * volume, *MASS_RANGE), 4),
        )

    for i in range(N_PRIMITIVES["cube"]):
        h = round(rng.uniform(0.015, 0.0325), 4)
        out.append(mk("cube", i, "box", (h, h, h), (h, h, h), 8 * h**3))
    for i in range(N_PRIMITIVES["cuboid"]):
        hy = round(rng.uniform(0.0125, 0.03), 4)
        hx = round(min(hy * rng.uniform(1.4, 2.5), 0.07), 4)
        hz = round(rng.uniform(0.015, 0.05), 4)
        out.append(mk("cuboid", i, "box", (hx, hy, hz), (hx, hy, hz), 8 * hx * hy * hz))
    for i in range(N_PRIMITIVES["cylinder"]):
        r = round(rng.uniform(0.015, 0.0325), 4)
        h = round(rng.uniform(0.03, 0.10), 4)
        out.append(mk("cylinder", i, "cylinder", (r, h), (r, r, h / 2), math.pi * r * r * h))
    for i in range(N_PRIMITIVES["sphere"]):
        r = round(rng.uniform(0.02, 0.0325), 4)
        out.append(mk("sphere", i, "sphere", (r,), (r, r, r), 4.0 / 3.0 * math.pi * r**3))
    return out
