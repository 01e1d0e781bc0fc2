"""Deterministic asset catalog: rigid objects from pybullet_data plus primitives, and procedurally
generated articulated objects (cabinets with drawers, hinged doors, lidded boxes).

The paper uses 1,200 rigid and 300 articulated objects. Here:

* **rigid** (>= 1,200): the pybullet_data ``random_urdfs`` meshes (mesh scale 0.015 as in their URDFs;
  five unusable ones -- NaN or sub-4 mm thick -- are listed under ``excluded`` in catalog.json), each
  reduced to a simplified convex hull of at most 48 vertices (loading the stock multi-part meshes steps
  about 2x slower); seeded primitives (cubes, cuboids, cylinders, spheres) sized for a Franka gripper
  (max opening 0.08 m); and a handful of pybullet_data objects (mug, duck, teddy, ball, lego, domino,
  toy shapes), also as simplified hulls of their collision meshes.
  Hulls are stored in a **resting pose**: rotated so that, set down with identity or yaw-only
  orientation, they rest on a stable facet (flat blobs lie flat instead of standing on edge; the mug,
  duck, lego and ball keep their upright pose) with the footprint axis aligned, x the longer side.
  ``visual_orientation`` / ``visual_offset`` place the visual mesh accordingly. Every rigid asset's
  frame (and centre of mass) is the centre of its axis-aligned bounding box.
* **articulated** (>= 300): URDFs written here from boxes only (cheap to step). Cabinets face local -x
  (towards a robot at the origin when placed at +x with yaw 0). The base link ``carcass`` has its frame at
  the centre of the carcass's bottom face, so the cabinet stands on whatever surface ``position`` is on.
  Every movable part has a fixed child link ``handle_<i>`` in front of it: drawers carry a vertical bar
  (taken from above with the fingers closing along y), doors and lids a horizontal bar along the handle
  link's y axis, each held by two posts 3.5-5 cm in front of the part (lids: of the box front).
  ``handle_local`` is the grasp point in the handle link frame (drawers: near the bar's top; otherwise
  the bar centre); every grasp point is 0.06-0.40 m above the carcass bottom when closed, at scale 1.
  Closed = lower joint limit = 0. Doors and lids are inset in the carcass, so the closed assembly
  (handles excepted) lies within ``footprint``.

``build_assets`` writes ``<data_dir>/assets/catalog.json`` and ``<data_dir>/assets/articulated/*.urdf``,
byte-identical for the same seed. ``load_catalog`` validates it.

Spawning notes: collision (and visual) shapes are cached per (client, asset, scale). After
``p.resetSimulation`` on a client call :func:`clear_caches` for that client, since pybullet forgets the
shapes. ``spawn_articulated`` uses ``globalScaling``; pybullet scales prismatic joint limits with it
(revolute limits are angles and are unchanged).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pybullet as p
import pybullet_data

from coda.sim import numerics

CATALOG_SCHEMA = 1

MAX_HULL_VERTICES = 48
HULL_GRID = 1e-7  # metres: hull vertices are simplified on this integer grid (exact distances and ties)
RANDOM_URDF_SCALE = 0.015
DENSITY = 500.0  # kg/m^3 applied to the (simplified) hull or primitive volume for `default_mass`
MASS_RANGE = (0.02, 1.0)
MIN_THICKNESS = 0.004  # random_urdfs meshes thinner than this (m, at scale 1) are excluded
ROLLING_FRICTION = 0.001
SPINNING_FRICTION = 0.001

RIGID_SOURCES = ("random_urdfs", "primitive", "pybullet_objects")
SHAPES = ("hull", "box", "cylinder", "sphere")
JOINT_TYPES = ("prismatic", "revolute")

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

# articulated variants per category
N_ARTICULATED = {
    "drawer_single": 48,
    "drawer_double": 48,
    "drawer_triple": 48,
    "drawer_wide": 48,
    "drawer_tall": 48,
    "door_cabinet": 48,
    "lid_box": 48,
}
HANDLE_Z_RANGE = (0.06, 0.40)  # every handle bar's height above the carcass bottom, at scale 1


# ------------------------------------------------------------------------------------------------
# dataclasses
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RigidAsset:
    asset_id: str
    source: str
    category: str
    shape: str
    dims: tuple[float, ...]
    hull_vertices: tuple[tuple[float, float, float], ...]
    half_extents: tuple[float, float, float]
    visual_mesh: str | None
    visual_mesh_scale: float
    visual_offset: tuple[float, float, float]
    default_mass: float
    # Rotation (quaternion x, y, z, w) from the visual mesh's own frame to the object frame. Hull assets
    # are turned into a stable resting pose; the visual mesh is placed by this rotation, then offset.
    visual_orientation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True)
class ArticulatedAsset:
    asset_id: str
    category: str
    urdf: str
    joint_type: str
    n_movable: int
    movable_joints: tuple[str, ...]
    handle_links: tuple[str, ...]
    joint_limits: tuple[tuple[float, float], ...]
    handle_local: tuple[tuple[float, float, float], ...]
    footprint: tuple[float, float, float]


@dataclass(frozen=True)
class Catalog:
    rigid: tuple[RigidAsset, ...]
    articulated: tuple[ArticulatedAsset, ...]
    _index: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        index: dict[str, RigidAsset | ArticulatedAsset] = {}
        for a in (*self.rigid, *self.articulated):
            if a.asset_id in index:
                raise ValueError(f"{a.asset_id}: duplicate asset_id")
            index[a.asset_id] = a
        object.__setattr__(self, "_index", index)

    def by_id(self, asset_id: str) -> RigidAsset | ArticulatedAsset:
        try:
            return self._index[asset_id]
        except KeyError:
            raise KeyError(f"unknown asset id {asset_id!r}") from None

    def rigid_in(self, categories: str | Iterable[str]) -> tuple[RigidAsset, ...]:
        cats = {categories} if isinstance(categories, str) else set(categories)
        return tuple(a for a in self.rigid if a.category in cats)

    def categories(self) -> dict[str, list[str]]:
        return {
            "articulated": sorted({a.category for a in self.articulated}),
            "rigid": sorted({a.category for a in self.rigid}),
        }


# ------------------------------------------------------------------------------------------------
# geometry helpers
# ------------------------------------------------------------------------------------------------
def _r(x: float, nd: int = 5) -> float:
    """Round for storage; never emits -0.0."""
    v = round(float(x), nd)
    return 0.0 if v == 0.0 else v


def _read_obj_vertices(path: Path) -> np.ndarray:
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("v "):
                parts = line.split()
                rows.append((float(parts[1]), float(parts[2]), float(parts[3])))
    v = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    return v[np.isfinite(v).all(axis=1)]


def simplify_hull(
    points: np.ndarray, max_vertices: int = MAX_HULL_VERTICES, keep: np.ndarray | None = None
) -> np.ndarray:
    """Deterministically reduce the convex hull of `points` to at most `max_vertices` vertices.

    `points` are integer grid coordinates (`numerics.quantize`), so every distance below is exact and a
    tie is a true tie, broken by the lower index: the vertices kept never depend on rounding. Seeds with
    the hull's axis-extreme vertices (so the AABB is preserved exactly) and the hull vertices flagged in
    `keep` (a boolean mask over `points`, e.g. the support facet), then adds the hull vertex farthest from
    those already chosen until `max_vertices`.
    """
    from scipy.spatial import ConvexHull

    points = np.asarray(points)
    if not np.issubdtype(points.dtype, np.integer):
        raise TypeError(f"simplify_hull: integer grid coordinates expected, got {points.dtype}")
    order = np.sort(ConvexHull(points.astype(np.float64)).vertices)
    hv = points[order].astype(np.int64)
    if len(hv) <= max_vertices:
        return hv
    chosen: list[int] = []
    for axis in range(3):
        for idx in (int(np.argmin(hv[:, axis])), int(np.argmax(hv[:, axis]))):
            if idx not in chosen:
                chosen.append(idx)
    if keep is not None:
        for idx in np.nonzero(np.asarray(keep)[order])[0][: max_vertices // 2]:
            if int(idx) not in chosen:
                chosen.append(int(idx))
    d = np.min(((hv[:, None, :] - hv[chosen][None, :, :]) ** 2).sum(axis=2), axis=1)
    while len(chosen) < max_vertices:
        idx = int(np.argmax(d))  # farthest; ties -> lowest index
        if d[idx] <= 0:
            break
        chosen.append(idx)
        np.minimum(d, ((hv - hv[idx]) ** 2).sum(axis=1), out=d)
    return hv[chosen]


def _facet_edges(verts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Planar facets of the hull of `verts` (coplanar hull triangles merged).

    Returns the outward unit normals (F, 3), in qhull's order of first appearance, and the facet
    boundaries as edge arrays (facet id, start vertex, end vertex) sorted by facet id.
    """
    from scipy.spatial import ConvexHull

    hull = ConvexHull(verts)
    _, first, inverse = np.unique(np.round(hull.equations, 7), axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    gid = rank[inverse]
    normals = hull.equations[np.sort(first), :3]
    counts = np.bincount(gid, minlength=len(first))
    single = counts[gid] == 1
    tri = hull.simplices[single]
    fid = [np.repeat(gid[single], 3)]
    a_idx, b_idx = [tri.ravel()], [tri[:, [1, 2, 0]].ravel()]
    for g in np.nonzero(counts > 1)[0]:  # merged facets: order their vertices by angle in the plane
        idx = np.unique(hull.simplices[gid == g])
        n = normals[g]
        u = np.cross(n, [1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0])
        u /= numerics.norm(u)
        w = np.cross(n, u)
        rel = verts[idx] - verts[idx].mean(axis=0)
        planar = numerics.matmul(rel, np.stack([w, u], axis=1))  # in-plane coordinates (along w, along u)
        idx = idx[np.argsort(numerics.atan2(planar[:, 0], planar[:, 1]), kind="stable")]
        fid.append(np.full(len(idx), g))
        a_idx.append(idx)
        b_idx.append(np.roll(idx, -1))
    fid, a_idx, b_idx = np.concatenate(fid), np.concatenate(a_idx), np.concatenate(b_idx)
    order = np.argsort(fid, kind="stable")
    return normals, fid[order], a_idx[order], b_idx[order]


def _rots_to_down(normals: np.ndarray) -> np.ndarray:
    """Smallest rotations (F, 3, 3) taking each unit normal to -z (Rodrigues)."""
    F = len(normals)
    c = -normals[:, 2]
    vx, vy = -normals[:, 1], normals[:, 0]  # n x (0, 0, -1)
    k = np.zeros((F, 3, 3))
    k[:, 0, 2], k[:, 1, 2], k[:, 2, 0], k[:, 2, 1] = vy, -vx, -vy, vx
    denom = np.where(c < -1.0 + 1e-9, 1.0, 1.0 + c)
    R = np.eye(3)[None] + k + numerics.matmul(k, k) / denom[:, None, None]
    R[c < -1.0 + 1e-9] = np.diag([1.0, -1.0, -1.0])  # normal +z: 180 degrees about x
    return R


MIN_TIPPING_ANGLE = math.radians(10.0)


def _footprint_boxes(x: np.ndarray, y: np.ndarray, th: np.ndarray):
    """Footprint AABBs of points (F, N) rotated by -th (F, K): (x lo, x hi, y lo, y hi), each (F, K)."""
    c, s = numerics.cos(th)[:, :, None], numerics.sin(th)[:, :, None]
    rx, ry = x[:, None, :] * c + y[:, None, :] * s, y[:, None, :] * c - x[:, None, :] * s
    return rx.min(axis=2), rx.max(axis=2), ry.min(axis=2), ry.max(axis=2)


def _align_yaw(rv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Yaw alignment for hulls already resting on their bottom, `rv` (F, N, 3).

    For each of the F poses picks the yaw whose footprint AABB has the least area (5-degree grid, then
    1-degree steps around the best; first of near-ties), then a quarter turn if needed so x is the longer
    side. Returns the yaw rotations (F, 3, 3) and the footprint AABB centres after them expressed
    before them (F, 2).
    """
    F = np.arange(len(rv))
    x, y = rv[:, :, 0], rv[:, :, 1]
    coarse = np.broadcast_to(np.deg2rad(np.arange(0.0, 90.0, 5.0)), (len(rv), 18))
    xl, xh, yl, yh = _footprint_boxes(x, y, coarse)
    area = (xh - xl) * (yh - yl)
    k = np.argmax(area <= area.min(axis=1, keepdims=True) * (1 + 1e-6), axis=1)
    fine = coarse[F, k][:, None] + np.deg2rad(np.arange(-4.0, 5.0, 1.0))[None, :]
    fine = np.concatenate([np.zeros((len(rv), 1)), fine % (np.pi / 2)], axis=1)  # keep 0 a candidate
    xl, xh, yl, yh = _footprint_boxes(x, y, fine)
    area = (xh - xl) * (yh - yl)
    k = np.argmax(area <= area.min(axis=1, keepdims=True) * (1 + 1e-6), axis=1)
    th = fine[F, k]
    cx, cy = (xh[F, k] + xl[F, k]) / 2, (yh[F, k] + yl[F, k]) / 2
    ct, st = numerics.cos(th), numerics.sin(th)
    centre = np.stack([cx * ct - cy * st, cx * st + cy * ct], axis=1)
    Rz = np.zeros((len(rv), 3, 3))
    Rz[:, 0, 0], Rz[:, 0, 1], Rz[:, 1, 0], Rz[:, 1, 1], Rz[:, 2, 2] = ct, st, -st, ct, 1.0
    swap = (xh[F, k] - xl[F, k]) < (yh[F, k] - yl[F, k]) - 1e-9
    quarter = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    Rz[swap] = numerics.matmul(quarter, Rz[swap])
    return Rz, centre


def resting_rotation(verts: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Rotation matrix putting the hull `verts` into a resting pose, footprint axis aligned.

    With `base` (pybullet_data objects with a known upright pose) that rotation is used. Otherwise the
    hull is laid on the facet giving the lowest centre of mass among those it rests on with a tipping
    angle of at least MIN_TIPPING_ANGLE, else on the lowest facet it rests on at all, else on the
    lowest facet. The centre of mass is the AABB centre (as spawned), so the check uses each pose's own
    yaw alignment. In both cases the yaw makes the footprint's (near) minimum-area rectangle axis
    aligned, x being the longer side.
    """
    if base is not None:
        R = np.asarray(base, dtype=np.float64)[None]
        Rz, _ = _align_yaw(numerics.transform(R, verts))
        return numerics.matmul(Rz[0], R[0])
    normals, fid, a_idx, b_idx = _facet_edges(verts)
    F = len(normals)
    R = _rots_to_down(normals)
    z = numerics.transform(R, verts)[..., 2]
    height = np.round((z.max(axis=1) - z.min(axis=1)) / 2, 7)
    order = np.lexsort((np.arange(F), height))
    n_edges = np.bincount(fid, minlength=F)
    starts = np.concatenate([[0], np.cumsum(n_edges)[:-1]])
    fallback = None
    for lo in range(0, F, 8):  # lowest facets first, in chunks: most hulls stop in the first one
        chunk = order[lo : lo + 8]
        rv = numerics.transform(R[chunk], verts)
        Rz, centre = _align_yaw(rv)
        edges = np.concatenate([np.arange(starts[f], starts[f] + n_edges[f]) for f in chunk])
        local = np.repeat(np.arange(len(chunk)), n_edges[chunk])
        a, b = rv[local, a_idx[edges], :2], rv[local, b_idx[edges], :2]
        mid = np.zeros((len(chunk), 2))
        np.add.at(mid, local, a)
        mid = (mid / n_edges[chunk][:, None])[local]
        e = b - a
        length = np.maximum(numerics.hypot(e[:, 0], e[:, 1]), 1e-12)
        cross_c = e[:, 0] * (centre[local, 1] - a[:, 1]) - e[:, 1] * (centre[local, 0] - a[:, 0])
        cross_m = e[:, 0] * (mid[:, 1] - a[:, 1]) - e[:, 1] * (mid[:, 0] - a[:, 0])
        first = np.concatenate([[0], np.cumsum(n_edges[chunk])[:-1]])
        margin = np.minimum.reduceat(cross_c * np.sign(cross_m) / length, first)
        tipping = numerics.atan2(margin, np.maximum(height[chunk], 1e-9))
        good = np.nonzero(tipping >= MIN_TIPPING_ANGLE)[0]
        if len(good):
            return numerics.matmul(Rz[good[0]], R[chunk[good[0]]])
        if fallback is None or fallback[0] > 0:
            stable = np.nonzero(tipping >= 0.0)[0]
            if len(stable):
                fallback = (0, numerics.matmul(Rz[stable[0]], R[chunk[stable[0]]]))
            elif fallback is None:
                fallback = (1, numerics.matmul(Rz[0], R[chunk[0]]))
    return fallback[1]


def _quat_from_matrix(R: np.ndarray) -> tuple[float, float, float, float]:
    """Unit quaternion (x, y, z, w), w >= 0, of a rotation matrix, rounded for storage (Shepperd's method
    in scalar arithmetic)."""
    m = [[float(R[i][j]) for j in range(3)] for i in range(3)]
    diag = (m[0][0] + m[1][1] + m[2][2], m[0][0], m[1][1], m[2][2])
    k = max(range(4), key=lambda i: diag[i])  # first of ties
    if k == 0:
        w = math.sqrt(max(0.0, 1.0 + diag[0])) / 2.0
        q = [(m[2][1] - m[1][2]) / (4 * w), (m[0][2] - m[2][0]) / (4 * w), (m[1][0] - m[0][1]) / (4 * w), w]
    else:
        i = k - 1
        j, h = (i + 1) % 3, (i + 2) % 3
        r = math.sqrt(max(0.0, 1.0 + m[i][i] - m[j][j] - m[h][h]))
        q = [0.0, 0.0, 0.0, (m[h][j] - m[j][h]) / (2 * r)]
        q[i], q[j], q[h] = r / 2.0, (m[j][i] + m[i][j]) / (2 * r), (m[h][i] + m[i][h]) / (2 * r)
    if q[3] < 0 or (q[3] == 0 and next(x for x in q if x != 0) < 0):
        q = [-x for x in q]
    q = [round(x, 6) for x in q]
    n = numerics.norm(q)
    return tuple(_r(x / n, 8) for x in q)


def _matrix_from_quat(q: Sequence[float]) -> np.ndarray:
    """Rotation matrix of a quaternion (x, y, z, w), normalised first."""
    n = numerics.norm(q)
    x, y, z, w = (float(c) / n for c in q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


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
    grid = numerics.quantize(numerics.transform(_matrix_from_quat(quat), hv), HULL_GRID)
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


# ------------------------------------------------------------------------------------------------
# URDF generation
# ------------------------------------------------------------------------------------------------
def _f(x: float) -> str:
    s = f"{float(x):.5f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _v(xs: Sequence[float]) -> str:
    return " ".join(_f(x) for x in xs)


class _Urdf:
    """Tiny URDF writer for links made of boxes."""

    def __init__(self, name: str) -> None:
        self.lines = ['<?xml version="1.0"?>', f'<robot name="{name}">']
        self.materials: dict[str, tuple[float, ...]] = {}

    def material(self, name: str, rgba: Sequence[float]) -> None:
        self.materials[name] = tuple(rgba)
        self.lines.append(f'  <material name="{name}"><color rgba="{_v(rgba)}"/></material>')

    def link(self, name: str, mass: float, boxes: list[tuple[tuple, tuple, str]]) -> None:
        """boxes: (centre xyz, full size xyz, material name)."""
        lo = np.min([np.array(c) - np.array(s) / 2 for c, s, _ in boxes], axis=0)
        hi = np.max([np.array(c) + np.array(s) / 2 for c, s, _ in boxes], axis=0)
        com, size = (lo + hi) / 2, hi - lo
        ixx = mass * (size[1] ** 2 + size[2] ** 2) / 12
        iyy = mass * (size[0] ** 2 + size[2] ** 2) / 12
        izz = mass * (size[0] ** 2 + size[1] ** 2) / 12
        L = self.lines
        L.append(f'  <link name="{name}">')
        L.append("    <inertial>")
        L.append(f'      <origin xyz="{_v(com)}" rpy="0 0 0"/>')
        L.append(f'      <mass value="{_f(mass)}"/>')
        L.append(f'      <inertia ixx="{ixx:.6e}" ixy="0" ixz="0" iyy="{iyy:.6e}" iyz="0" izz="{izz:.6e}"/>')
        L.append("    </inertial>")
        for c, s, mat in boxes:
            geo = f'<origin xyz="{_v(c)}" rpy="0 0 0"/><geometry><box size="{_v(s)}"/></geometry>'
            L.append(f'    <visual>{geo}<material name="{mat}"/></visual>')
            L.append(f"    <collision>{geo}</collision>")
        L.append("  </link>")

    def joint(self, name, jtype, parent, child, xyz, axis=None, limits=None, damping=0.0, friction=0.0):
        L = self.lines
        L.append(f'  <joint name="{name}" type="{jtype}">')
        L.append(f'    <parent link="{parent}"/><child link="{child}"/>')
        L.append(f'    <origin xyz="{_v(xyz)}" rpy="0 0 0"/>')
        if axis is not None:
            L.append(f'    <axis xyz="{_v(axis)}"/>')
        if limits is not None:
            lo, hi, effort, vel = limits
            L.append(
                f'    <limit lower="{_f(lo)}" upper="{_f(hi)}" effort="{_f(effort)}" velocity="{_f(vel)}"/>'
            )
            L.append(f'    <dynamics damping="{_f(damping)}" friction="{_f(friction)}"/>')
        L.append("  </joint>")

    def text(self) -> str:
        return "\n".join([*self.lines, "</robot>", ""])


def _u(rng, lo, hi, nd=3) -> float:
    return round(float(rng.uniform(lo, hi)), nd)


def _colour(rng, lo=0.15, hi=0.95) -> tuple[float, ...]:
    return (*(round(float(c), 3) for c in rng.uniform(lo, hi, 3)), 1.0)


def _handle_params(rng, max_len: float) -> dict:
    bl = _u(rng, 0.06, min(0.14, max_len))
    bt = _u(rng, 0.010, 0.016)
    return {"len": bl, "thick": bt, "standoff": _u(rng, 0.035, 0.05), "post": round(min(bt, 0.01), 3)}


def _handle_boxes(h: dict) -> list[tuple[tuple, tuple, str]]:
    """Bar along y at x = -standoff (the handle link frame is on the part's front surface)."""
    s, bl, bt, post = h["standoff"], h["len"], h["thick"], h["post"]
    post_len = s - bt / 2
    py = bl / 2 - post / 2 - 0.004
    return [
        ((-s, 0.0, 0.0), (bt, bl, bt), "handle"),
        ((-post_len / 2, py, 0.0), (post_len, post, post), "handle"),
        ((-post_len / 2, -py, 0.0), (post_len, post, post), "handle"),
    ]


def _vertical_handle_boxes(h: dict) -> list[tuple[tuple, tuple, str]]:
    """Drawer handle: a vertical bar at x = -standoff held by two horizontal posts (top and bottom).

    A top-down parallel gripper takes it from above with its fingers closing along y, so the hand stays
    in front of the cabinet (a horizontal bar would have to be straddled along x, driving the hand into
    the carcass above the drawer).
    """
    s, bl, bt, post = h["standoff"], h["len"], h["thick"], h["post"]
    post_len = s - bt / 2
    pz = bl / 2 - post / 2 - 0.004
    return [
        ((-s, 0.0, 0.0), (bt, bt, bl), "handle"),
        ((-post_len / 2, 0.0, pz), (post_len, post, post), "handle"),
        ((-post_len / 2, 0.0, -pz), (post_len, post, post), "handle"),
    ]


def _carcass_common(u: _Urdf, rng, name: str, D, W, H, zb, t, open_top=False, extra=()) -> float:
    """Carcass panels: base block (plinth + bottom), top (unless open_top), sides, back, extra boxes."""
    inner_h = H - zb - (0.0 if open_top else t)
    boxes = [((0.0, 0.0, zb / 2), (D, W, zb), "carcass")]
    if not open_top:
        boxes.append(((0.0, 0.0, H - t / 2), (D, W, t), "carcass"))
    for sy in (-1, 1):
        boxes.append(((0.0, sy * (W / 2 - t / 2), zb + inner_h / 2), (D, t, inner_h), "carcass"))
    boxes.append(((D / 2 - t / 2, 0.0, zb + inner_h / 2), (t, W - 2 * t, inner_h), "carcass"))
    boxes.extend(extra)
    mass = _u(rng, 8.0, 25.0, 2)
    u.link(name, mass, boxes)
    return mass


def _gen_drawers(rng, category: str, name: str):
    n, (w_lo, w_hi), (hs_lo, hs_hi) = {
        "drawer_single": (1, (0.25, 0.45), (0.10, 0.18)),
        "drawer_double": (2, (0.28, 0.45), (0.092, 0.15)),
        "drawer_triple": (3, (0.28, 0.45), (0.092, 0.11)),
        "drawer_wide": (int(rng.integers(1, 3)), (0.50, 0.70), (0.092, 0.13)),
        "drawer_tall": (2, (0.22, 0.32), (0.15, 0.19)),
    }[category]
    g = 0.003  # clearance around each drawer front
    for _ in range(1000):
        W = _u(rng, w_lo, w_hi)
        D = _u(rng, 0.28, 0.42)
        t = _u(rng, 0.012, 0.02)
        plinth = _u(rng, 0.01, 0.05)
        zb = round(plinth + t, 3)
        hs = _u(rng, hs_lo, hs_hi)
        Wi = W - 2 * t
        h = _handle_params(rng, 0.8 * Wi)
        h["len"] = round(min(h["len"], 0.7 * (hs - 2 * g)), 3)  # the vertical bar fits on the drawer front
        grasp_dz = round(h["len"] / 2 - 0.012, 4)  # grasp near the bar's top
        grasp_z = [zb + i * (hs + t) + hs / 2 + grasp_dz for i in range(n)]
        if HANDLE_Z_RANGE[0] <= grasp_z[0] and grasp_z[-1] <= HANDLE_Z_RANGE[1]:
            break
    else:  # pragma: no cover - ranges above are feasible
        raise RuntimeError(f"{name}: no feasible drawer layout")
    H = round(zb + n * hs + (n - 1) * t + t, 4)
    tf = _u(rng, 0.012, 0.02)  # front panel thickness
    tw = _u(rng, 0.005, 0.009)  # drawer wall thickness
    Wd = Wi - 2 * g - 0.004
    Dd = round(D - t - tf - 0.01, 4)
    wall_frac = _u(rng, 0.6, 0.8, 2)
    max_open = round(min(_u(rng, 0.15, 0.25), 0.8 * Dd), 3)
    damping = _u(rng, 1.0, 5.0, 2)
    drawer_mass = _u(rng, 0.2, 0.55, 2)

    u = _Urdf(name)
    u.material("carcass", _colour(rng))
    u.material("front", _colour(rng))
    u.material("handle", (*(round(float(rng.uniform(0.05, 0.35)), 3),) * 3, 1.0))
    dividers = []
    for i in range(1, n):
        z = zb + i * hs + (i - 1) * t + t / 2
        dividers.append(((-t / 2, 0.0, z), (D - t, Wi, t), "carcass"))
    _carcass_common(u, rng, "carcass", D, W, H, zb, t, extra=dividers)
    hw = round(wall_frac * (hs - 2 * g), 4)
    joints, handles, limits, local = [], [], [], []
    for i in range(n):
        z_i = zb + i * (hs + t)
        boxes = [
            ((tf / 2, 0.0, hs / 2), (tf, Wi - 2 * g, hs - 2 * g), "front"),
            ((tf + Dd / 2, 0.0, g + tw / 2), (Dd, Wd, tw), "front"),
            ((tf + Dd - tw / 2, 0.0, g + hw / 2), (tw, Wd - 2 * tw, hw), "front"),
        ]
        for sy in (-1, 1):
            boxes.append(((tf + Dd / 2, sy * (Wd / 2 - tw / 2), g + hw / 2), (Dd, tw, hw), "front"))
        u.link(f"drawer_{i}", drawer_mass, boxes)
        u.joint(
            f"drawer_{i}_slide",
            "prismatic",
            "carcass",
            f"drawer_{i}",
            (-D / 2, 0.0, z_i),
            axis=(-1, 0, 0),
            limits=(0.0, max_open, 200.0, 1.0),
            damping=damping,
            friction=0.5,
        )
        u.link(f"handle_{i}", 0.03, _vertical_handle_boxes(h))
        u.joint(f"handle_{i}_fixed", "fixed", f"drawer_{i}", f"handle_{i}", (0.0, 0.0, hs / 2))
        joints.append(f"drawer_{i}_slide")
        handles.append(f"handle_{i}")
        limits.append((0.0, max_open))
        local.append((-h["standoff"], 0.0, grasp_dz))  # grasp near the bar's top
    return u.text(), "prismatic", joints, handles, limits, local, (D / 2, W / 2, H / 2)


def _gen_door(rng, name: str):
    for _ in range(1000):
        W = _u(rng, 0.28, 0.45)
        D = _u(rng, 0.25, 0.40)
        H = _u(rng, 0.25, 0.45)
        t = _u(rng, 0.012, 0.02)
        zb = round(_u(rng, 0.01, 0.04) + t, 3)
        hz = _u(rng, 0.5, 0.75, 2) * (H - zb - t)  # handle height above the opening's bottom
        if HANDLE_Z_RANGE[0] <= zb + hz <= HANDLE_Z_RANGE[1]:
            break
    g = 0.003
    td = _u(rng, 0.012, 0.02)
    Wi, Hi = W - 2 * t, H - zb - t
    side = int(rng.integers(0, 2))  # 0: hinge on the -y side, 1: on the +y side
    sgn = 1.0 if side == 0 else -1.0  # direction from the hinge to the free edge
    upper = _u(rng, 1.35, 1.6, 2)
    h = _handle_params(rng, min(0.14, 0.45 * Wi))

    u = _Urdf(name)
    u.material("carcass", _colour(rng))
    u.material("front", _colour(rng))
    u.material("handle", (*(round(float(rng.uniform(0.05, 0.35)), 3),) * 3, 1.0))
    shelf = []
    if rng.uniform() < 0.5:
        zs = zb + Hi / 2
        shelf.append((((0.025 - t) / 2, 0.0, zs), (D - t - 0.025, Wi, t), "carcass"))
    _carcass_common(u, rng, "carcass", D, W, H, zb, t, extra=shelf)
    dw = Wi - 2 * g
    u.link(
        "door", _u(rng, 0.3, 0.6, 2), [((td / 2, sgn * (g + dw / 2), Hi / 2), (td, dw, Hi - 2 * g), "front")]
    )
    u.joint(
        "door_hinge",
        "revolute",
        "carcass",
        "door",
        (-D / 2, -sgn * Wi / 2, zb),
        axis=(0, 0, sgn),
        limits=(0.0, upper, 50.0, 2.0),
        damping=_u(rng, 1.0, 5.0, 2),
        friction=0.5,
    )
    hy = sgn * (g + dw - 0.02 - h["len"] / 2)
    u.link("handle_0", 0.03, _handle_boxes(h))
    u.joint("handle_0_fixed", "fixed", "door", "handle_0", (0.0, hy, hz))
    return (
        u.text(),
        "revolute",
        ["door_hinge"],
        ["handle_0"],
        [(0.0, upper)],
        [(-h["standoff"], 0.0, 0.0)],
        (D / 2, W / 2, H / 2),
    )


def _gen_lid(rng, name: str):
    W = _u(rng, 0.25, 0.45)
    D = _u(rng, 0.20, 0.35)
    H = _u(rng, 0.10, 0.25)
    t = _u(rng, 0.010, 0.018)
    tl = _u(rng, 0.012, 0.02)
    g = 0.003
    upper = _u(rng, 1.35, 1.6, 2)
    h = _handle_params(rng, 0.5 * W)
    u = _Urdf(name)
    u.material("carcass", _colour(rng))
    u.material("front", _colour(rng))
    u.material("handle", (*(round(float(rng.uniform(0.05, 0.35)), 3),) * 3, 1.0))
    # open-top box: bottom, 4 walls (front wall added as extra); the lid is inset between the walls
    wall_h = H - t
    front = [((-D / 2 + t / 2, 0.0, t + wall_h / 2), (t, W - 2 * t, wall_h), "carcass")]
    _carcass_common(u, rng, "carcass", D, W, H, t, t, open_top=True, extra=front)
    Li, Wl = D - 2 * t - 2 * g, W - 2 * t - 2 * g
    # lid frame on the hinge line: back inner edge, at the lid's bottom face
    u.link("lid", _u(rng, 0.2, 0.6, 2), [((-g - Li / 2, 0.0, tl / 2), (Li, Wl, tl), "front")])
    u.joint(
        "lid_hinge",
        "revolute",
        "carcass",
        "lid",
        (D / 2 - t, 0.0, H - tl),
        axis=(0, 1, 0),
        limits=(0.0, upper, 50.0, 2.0),
        damping=_u(rng, 1.0, 5.0, 2),
        friction=0.5,
    )
    # handle link frame on the lid's front edge at mid-thickness; the bar is `standoff` in front of the
    # box's front face (the lid edge sits t + g behind that face)
    h = {**h, "standoff": round(h["standoff"] + t + g, 4)}
    u.link("handle_0", 0.03, _handle_boxes(h))
    u.joint("handle_0_fixed", "fixed", "lid", "handle_0", (-(g + Li), 0.0, tl / 2))
    return (
        u.text(),
        "revolute",
        ["lid_hinge"],
        ["handle_0"],
        [(0.0, upper)],
        [(-h["standoff"], 0.0, 0.0)],
        (D / 2, W / 2, H / 2),
    )


def _articulated_assets(rng: np.random.Generator) -> tuple[list[ArticulatedAsset], dict[str, str]]:
    assets, urdfs = [], {}
    for cat, count in N_ARTICULATED.items():
        for i in range(count):
            name = f"{cat}_{i:03d}"
            sub = np.random.default_rng(rng.integers(0, 2**63 - 1))
            if cat.startswith("drawer_"):
                res = _gen_drawers(sub, cat, name)
            elif cat == "door_cabinet":
                res = _gen_door(sub, name)
            else:
                res = _gen_lid(sub, name)
            text, jtype, joints, handles, limits, local, foot = res
            rel = f"assets/articulated/{name}.urdf"
            urdfs[rel] = text
            assets.append(
                ArticulatedAsset(
                    asset_id=f"articulated/{name}",
                    category=cat,
                    urdf=rel,
                    joint_type=jtype,
                    n_movable=len(joints),
                    movable_joints=tuple(joints),
                    handle_links=tuple(handles),
                    joint_limits=tuple((_r(lo), _r(hi)) for lo, hi in limits),
                    handle_local=tuple(tuple(_r(c) for c in v) for v in local),
                    footprint=tuple(_r(x) for x in foot),
                )
            )
    return assets, urdfs


# ------------------------------------------------------------------------------------------------
# build / serialise / load
# ------------------------------------------------------------------------------------------------
def _to_json(a) -> dict:
    d = {}
    for f in fields(a):
        if f.name.startswith("_"):
            continue
        v = getattr(a, f.name)
        d[f.name] = _listify(v)
    return d


def _listify(v):
    if isinstance(v, tuple):
        return [_listify(x) for x in v]
    return v


def _catalog_text(cat: Catalog, seed: int, excluded: list[dict]) -> str:
    dumps = lambda o: json.dumps(o, sort_keys=True, separators=(",", ":"), allow_nan=False)  # noqa: E731
    lines = [
        "{",
        '"articulated":[',
        ",\n".join(dumps(_to_json(a)) for a in cat.articulated),
        "],",
        f'"excluded":{dumps(excluded)},',
        '"rigid":[',
        ",\n".join(dumps(_to_json(a)) for a in cat.rigid),
        "],",
        f'"schema":{CATALOG_SCHEMA},',
        f'"seed":{int(seed)}',
        "}",
        "",
    ]
    return "\n".join(lines)


def build_assets(data_dir: Path, seed: int = 0) -> Catalog:
    """Build the catalog into `data_dir`/assets (catalog.json + articulated URDFs); deterministic in `seed`."""
    data_dir = Path(data_dir)
    pbd = Path(pybullet_data.getDataPath())
    rng = np.random.default_rng(seed)
    prim_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    art_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    rigid, excluded = _random_urdf_assets(pbd)
    rigid += _primitive_assets(prim_rng)
    rigid += _pybullet_object_assets(pbd)
    articulated, urdfs = _articulated_assets(art_rng)
    cat = Catalog(rigid=tuple(rigid), articulated=tuple(articulated))

    out = data_dir / "assets"
    art_dir = out / "articulated"
    art_dir.mkdir(parents=True, exist_ok=True)
    keep = set()
    for rel, text in urdfs.items():
        path = data_dir / rel
        keep.add(path.name)
        _write_if_changed(path, text)
    for stale in art_dir.glob("*.urdf"):
        if stale.name not in keep:
            stale.unlink()
    _write_if_changed(out / "catalog.json", _catalog_text(cat, seed, excluded))
    return cat


def _write_if_changed(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _err(aid, fname, msg) -> ValueError:
    return ValueError(f"catalog entry {aid!r}: field {fname!r}: {msg}")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _vec(aid, fname, v, n=None, positive=False, nonneg=False) -> tuple:
    if not isinstance(v, list) or (n is not None and len(v) != n) or not all(_num(x) for x in v):
        raise _err(
            aid, fname, f"expected a list of {n if n is not None else 'some'} finite numbers, got {v!r}"
        )
    if positive and not all(x > 0 for x in v):
        raise _err(aid, fname, f"values must be > 0, got {v!r}")
    if nonneg and not all(x >= 0 for x in v):
        raise _err(aid, fname, f"values must be >= 0, got {v!r}")
    return tuple(float(x) for x in v)


def _relpath(aid, fname, v) -> str:
    if not isinstance(v, str) or not v or v.startswith(("/", "\\")) or ".." in Path(v).parts or ":" in v:
        raise _err(aid, fname, f"expected a relative path, got {v!r}")
    return v


def _check_keys(aid, d: dict, cls) -> None:
    expected = {f.name for f in fields(cls) if not f.name.startswith("_")}
    missing, extra = expected - set(d), set(d) - expected
    if missing:
        raise _err(aid, sorted(missing)[0], "missing")
    if extra:
        raise _err(aid, sorted(extra)[0], "unknown field")


def _parse_rigid(d) -> RigidAsset:
    aid = d.get("asset_id") if isinstance(d, dict) else None
    if not isinstance(d, dict) or not isinstance(aid, str) or not aid:
        raise ValueError(f"catalog rigid entry {d!r:.80}: field 'asset_id': missing or not a string")
    _check_keys(aid, d, RigidAsset)
    src = d["source"]
    if src not in RIGID_SOURCES:
        raise _err(aid, "source", f"unknown source {src!r}")
    if not isinstance(d["category"], str) or not d["category"]:
        raise _err(aid, "category", "expected a non-empty string")
    shape = d["shape"]
    if shape not in SHAPES:
        raise _err(aid, "shape", f"unknown shape {shape!r}")
    dims = _vec(
        aid, "dims", d["dims"], {"hull": 0, "box": 3, "cylinder": 2, "sphere": 1}[shape], positive=True
    )
    half = _vec(aid, "half_extents", d["half_extents"], 3, positive=True)
    hv = d["hull_vertices"]
    if not isinstance(hv, list):
        raise _err(aid, "hull_vertices", "expected a list")
    verts = tuple(_vec(aid, "hull_vertices", v, 3) for v in hv)
    if shape == "hull":
        if not 4 <= len(verts) <= MAX_HULL_VERTICES:
            raise _err(aid, "hull_vertices", f"expected 4..{MAX_HULL_VERTICES} vertices, got {len(verts)}")
        arr = np.asarray(verts)
        if np.any(np.abs(arr) > np.asarray(half) + 2e-5):
            raise _err(aid, "hull_vertices", "vertices exceed half_extents")
    elif verts:
        raise _err(aid, "hull_vertices", f"must be empty for shape {shape!r}")
    vm = d["visual_mesh"]
    if vm is not None:
        vm = _relpath(aid, "visual_mesh", vm)
        if not (Path(pybullet_data.getDataPath()) / vm).is_file():
            raise _err(aid, "visual_mesh", f"{vm!r} not found in pybullet_data")
    elif src != "primitive":
        raise _err(aid, "visual_mesh", "required for mesh sources")
    vs = d["visual_mesh_scale"]
    if not _num(vs) or vs <= 0:
        raise _err(aid, "visual_mesh_scale", f"expected a positive number, got {vs!r}")
    off = _vec(aid, "visual_offset", d["visual_offset"], 3)
    m = d["default_mass"]
    if not _num(m) or m <= 0:
        raise _err(aid, "default_mass", f"expected a positive number, got {m!r}")
    q = _vec(aid, "visual_orientation", d["visual_orientation"], 4)
    if abs(math.sqrt(sum(x * x for x in q)) - 1.0) > 1e-5:
        raise _err(aid, "visual_orientation", f"expected a unit quaternion, got {list(q)!r}")
    return RigidAsset(aid, src, d["category"], shape, dims, verts, half, vm, float(vs), off, float(m), q)


def _parse_articulated(d, data_dir: Path) -> ArticulatedAsset:
    aid = d.get("asset_id") if isinstance(d, dict) else None
    if not isinstance(d, dict) or not isinstance(aid, str) or not aid:
        raise ValueError(f"catalog articulated entry {d!r:.80}: field 'asset_id': missing or not a string")
    _check_keys(aid, d, ArticulatedAsset)
    if not isinstance(d["category"], str) or not d["category"]:
        raise _err(aid, "category", "expected a non-empty string")
    urdf = _relpath(aid, "urdf", d["urdf"])
    if not (data_dir / urdf).is_file():
        raise _err(aid, "urdf", f"file {urdf!r} not found under {data_dir}")
    jt = d["joint_type"]
    if jt not in JOINT_TYPES:
        raise _err(aid, "joint_type", f"unknown joint type {jt!r}")
    n = d["n_movable"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _err(aid, "n_movable", f"expected a positive integer, got {n!r}")
    names = {}
    for fname in ("movable_joints", "handle_links"):
        v = d[fname]
        if not isinstance(v, list) or len(v) != n or not all(isinstance(x, str) and x for x in v):
            raise _err(aid, fname, f"expected {n} non-empty names, got {v!r}")
        names[fname] = tuple(v)
    lims = d["joint_limits"]
    if not isinstance(lims, list) or len(lims) != n:
        raise _err(aid, "joint_limits", f"expected {n} (lower, upper) pairs")
    limits = tuple(_vec(aid, "joint_limits", x, 2) for x in lims)
    if any(lo >= hi for lo, hi in limits):
        raise _err(aid, "joint_limits", "lower must be < upper")
    hl = d["handle_local"]
    if not isinstance(hl, list) or len(hl) != n:
        raise _err(aid, "handle_local", f"expected {n} points")
    local = tuple(_vec(aid, "handle_local", x, 3) for x in hl)
    foot = _vec(aid, "footprint", d["footprint"], 3, positive=True)
    return ArticulatedAsset(
        aid, d["category"], urdf, jt, n, names["movable_joints"], names["handle_links"], limits, local, foot
    )


def load_catalog(data_dir: Path) -> Catalog:
    """Load and validate `data_dir`/assets/catalog.json (raises ValueError naming entry and field)."""
    data_dir = Path(data_dir)
    path = data_dir / "assets" / "catalog.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; build it with coda.sim.assets.build_assets")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    if doc.get("schema") != CATALOG_SCHEMA:
        raise ValueError(f"{path}: field 'schema': expected {CATALOG_SCHEMA}, got {doc.get('schema')!r}")
    for key in ("rigid", "articulated"):
        if not isinstance(doc.get(key), list):
            raise ValueError(f"{path}: field {key!r}: expected a list")
    rigid = tuple(_parse_rigid(d) for d in doc["rigid"])
    articulated = tuple(_parse_articulated(d, data_dir) for d in doc["articulated"])
    try:
        return Catalog(rigid=rigid, articulated=articulated)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


# ------------------------------------------------------------------------------------------------
# spawning
# ------------------------------------------------------------------------------------------------
_COLLISION_CACHE: dict[tuple, int] = {}
_VISUAL_CACHE: dict[tuple, int] = {}
_LINK_CACHE: dict[tuple[int, int], tuple[tuple, dict[str, int]]] = {}


def clear_caches(client: int | None = None) -> None:
    """Forget cached shapes / link maps (for one client, or all). Call after p.resetSimulation."""
    for cache in (_COLLISION_CACHE, _VISUAL_CACHE, _LINK_CACHE):
        for k in [k for k in cache if client is None or k[0] == client]:
            del cache[k]


def _collision_shape(client: int, a: RigidAsset, scale: float) -> int:
    key = (client, a.asset_id, round(float(scale), 6))
    sid = _COLLISION_CACHE.get(key)
    if sid is not None:
        return sid
    s = float(scale)
    if a.shape == "hull":
        verts = (np.asarray(a.hull_vertices) * s).tolist()
        sid = p.createCollisionShape(p.GEOM_MESH, vertices=verts, physicsClientId=client)
    elif a.shape == "box":
        sid = p.createCollisionShape(p.GEOM_BOX, halfExtents=[d * s for d in a.dims], physicsClientId=client)
    elif a.shape == "cylinder":
        sid = p.createCollisionShape(
            p.GEOM_CYLINDER, radius=a.dims[0] * s, height=a.dims[1] * s, physicsClientId=client
        )
    elif a.shape == "sphere":
        sid = p.createCollisionShape(p.GEOM_SPHERE, radius=a.dims[0] * s, physicsClientId=client)
    else:
        raise ValueError(f"{a.asset_id}: unknown shape {a.shape!r}")
    if sid < 0:
        raise RuntimeError(f"{a.asset_id}: createCollisionShape failed")
    _COLLISION_CACHE[key] = sid
    return sid


def _visual_shape(client: int, a: RigidAsset, scale: float) -> int:
    key = (client, a.asset_id, round(float(scale), 6))
    vid = _VISUAL_CACHE.get(key)
    if vid is not None:
        return vid
    s = float(scale)
    if a.visual_mesh is not None:
        path = str(Path(pybullet_data.getDataPath()) / a.visual_mesh)
        vid = p.createVisualShape(
            p.GEOM_MESH,
            fileName=path,
            meshScale=[a.visual_mesh_scale * s] * 3,
            visualFramePosition=[o * s for o in a.visual_offset],
            visualFrameOrientation=list(a.visual_orientation),
            physicsClientId=client,
        )
    elif a.shape == "box":
        vid = p.createVisualShape(p.GEOM_BOX, halfExtents=[d * s for d in a.dims], physicsClientId=client)
    elif a.shape == "cylinder":
        vid = p.createVisualShape(
            p.GEOM_CYLINDER, radius=a.dims[0] * s, length=a.dims[1] * s, physicsClientId=client
        )
    elif a.shape == "sphere":
        vid = p.createVisualShape(p.GEOM_SPHERE, radius=a.dims[0] * s, physicsClientId=client)
    else:  # hull without a mesh: render the hull itself
        verts = (np.asarray(a.hull_vertices) * s).tolist()
        vid = p.createVisualShape(p.GEOM_MESH, vertices=verts, physicsClientId=client)
    if vid < 0:
        raise RuntimeError(f"{a.asset_id}: createVisualShape failed")
    _VISUAL_CACHE[key] = vid
    return vid


def spawn_rigid(
    client: int,
    asset: RigidAsset,
    *,
    position,
    orientation,
    scale: float,
    mass: float,
    friction: float,
    rgba,
    visual: bool,
    rolling_friction: float = ROLLING_FRICTION,
    spinning_friction: float = SPINNING_FRICTION,
) -> int:
    """Create `asset` as a single-link multibody; geometry multiplied by `scale`. Returns the body id.

    `position` is the object frame's origin (its AABB centre; it rests on a surface at height
    ``half_extents[2] * scale`` above it with identity or yaw-only `orientation`), `orientation` a
    quaternion (x, y, z, w) or Euler angles (roll, pitch, yaw). Without `visual` the body has no visual
    shape (cheaper). `rgba` (or None) tints the visual shape.

    Rolling/spinning friction keep round objects from rolling or spinning forever but are not free:
    measured with a Panda and 4 objects, 0.001 of both roughly halves stepping speed (see
    tests/test_assets.py); pass 0 to drop them.
    """
    if scale <= 0 or mass <= 0:
        raise ValueError(f"{asset.asset_id}: scale and mass must be positive (got {scale}, {mass})")
    orn = list(orientation)
    if len(orn) == 3:
        orn = list(p.getQuaternionFromEuler(orn))
    col = _collision_shape(client, asset, scale)
    vis = _visual_shape(client, asset, scale) if visual else -1
    try:
        body = p.createMultiBody(
            baseMass=float(mass),
            baseCollisionShapeIndex=col,
            baseVisualShapeIndex=vis,
            basePosition=list(position),
            baseOrientation=orn,
            physicsClientId=client,
        )
    except p.error:
        body = -1
    if body < 0:  # stale cache (e.g. after resetSimulation): rebuild the shapes once
        clear_caches(client)
        col = _collision_shape(client, asset, scale)
        vis = _visual_shape(client, asset, scale) if visual else -1
        body = p.createMultiBody(
            baseMass=float(mass),
            baseCollisionShapeIndex=col,
            baseVisualShapeIndex=vis,
            basePosition=list(position),
            baseOrientation=orn,
            physicsClientId=client,
        )
    p.changeDynamics(
        body,
        -1,
        lateralFriction=float(friction),
        rollingFriction=float(rolling_friction),
        spinningFriction=float(spinning_friction),
        physicsClientId=client,
    )
    if visual and rgba is not None:
        p.changeVisualShape(body, -1, rgbaColor=list(rgba), physicsClientId=client)
    return body


def spawn_articulated(
    client: int, asset: ArticulatedAsset, data_dir: Path, *, position, yaw: float, scale: float, rgba=None
) -> int:
    """Load the asset's URDF with a fixed base at `position` (carcass bottom centre) rotated by `yaw`.

    Each movable joint's default motor is replaced by a velocity motor with target 0 whose maximum
    force (torque) is the joint's URDF friction, which acts as Coulomb joint friction: parts stay put
    unless pushed. A controller driving a joint replaces that motor; restore it with
    ``p.setJointMotorControl2(body, j, p.VELOCITY_CONTROL, targetVelocity=0, force=friction)``.
    `rgba` (optional) recolours the carcass and moving panels (not the handles).
    """
    path = Path(data_dir) / asset.urdf
    if not path.is_file():
        raise FileNotFoundError(f"{asset.asset_id}: {path} not found")
    body = p.loadURDF(
        str(path),
        basePosition=list(position),
        baseOrientation=p.getQuaternionFromEuler([0.0, 0.0, float(yaw)]),
        useFixedBase=True,
        globalScaling=float(scale),
        flags=p.URDF_USE_INERTIA_FROM_FILE,
        physicsClientId=client,
    )
    for j in range(p.getNumJoints(body, physicsClientId=client)):
        info = p.getJointInfo(body, j, physicsClientId=client)
        if info[2] in (p.JOINT_PRISMATIC, p.JOINT_REVOLUTE):
            p.setJointMotorControl2(
                body, j, p.VELOCITY_CONTROL, targetVelocity=0.0, force=float(info[7]), physicsClientId=client
            )
        if rgba is not None and not info[12].decode().startswith("handle"):
            p.changeVisualShape(body, j, rgbaColor=list(rgba), physicsClientId=client)
    if rgba is not None:
        p.changeVisualShape(body, -1, rgbaColor=list(rgba), physicsClientId=client)
    return body


def link_index(client: int, body: int, name: str) -> int:
    """Index of the link or joint called `name` on `body` (the base link is -1); cached per body."""
    ident = p.getBodyInfo(body, physicsClientId=client)
    key = (client, body)
    cached = _LINK_CACHE.get(key)
    if cached is None or cached[0] != ident:
        names = {ident[0].decode(): -1}
        for j in range(p.getNumJoints(body, physicsClientId=client)):
            info = p.getJointInfo(body, j, physicsClientId=client)
            names[info[12].decode()] = j
            names[info[1].decode()] = j
        cached = (ident, names)
        _LINK_CACHE[key] = cached
    try:
        return cached[1][name]
    except KeyError:
        raise KeyError(f"body {body} has no link or joint named {name!r}") from None
