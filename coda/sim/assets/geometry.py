"""Hull geometry of the rigid assets: OBJ vertices, deterministic hull simplification, the resting pose
(stable facet, footprint-aligned yaw) and quaternion <-> matrix conversions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coda.sim import exact_math
from coda.sim.assets.catalog import MAX_HULL_VERTICES, _r


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

    `points` are integer grid coordinates (`exact_math.quantize`), so every distance below is exact and a
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
        u /= exact_math.norm(u)
        w = np.cross(n, u)
        rel = verts[idx] - verts[idx].mean(axis=0)
        planar = exact_math.matmul(rel, np.stack([w, u], axis=1))  # in-plane coordinates (along w, along u)
        idx = idx[np.argsort(exact_math.atan2(planar[:, 0], planar[:, 1]), kind="stable")]
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
    R = np.eye(3)[None] + k + exact_math.matmul(k, k) / denom[:, None, None]
    R[c < -1.0 + 1e-9] = np.diag([1.0, -1.0, -1.0])  # normal +z: 180 degrees about x
    return R


MIN_TIPPING_ANGLE = math.radians(10.0)


def _footprint_boxes(x: np.ndarray, y: np.ndarray, th: np.ndarray):
    """Footprint AABBs of points (F, N) rotated by -th (F, K): (x lo, x hi, y lo, y hi), each (F, K)."""
    c, s = exact_math.cos(th)[:, :, None], exact_math.sin(th)[:, :, None]
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
    ct, st = exact_math.cos(th), exact_math.sin(th)
    centre = np.stack([cx * ct - cy * st, cx * st + cy * ct], axis=1)
    Rz = np.zeros((len(rv), 3, 3))
    Rz[:, 0, 0], Rz[:, 0, 1], Rz[:, 1, 0], Rz[:, 1, 1], Rz[:, 2, 2] = ct, st, -st, ct, 1.0
    swap = (xh[F, k] - xl[F, k]) < (yh[F, k] - yl[F, k]) - 1e-9
    quarter = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    Rz[swap] = exact_math.matmul(quarter, Rz[swap])
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
        Rz, _ = _align_yaw(exact_math.transform(R, verts))
        return exact_math.matmul(Rz[0], R[0])
    normals, fid, a_idx, b_idx = _facet_edges(verts)
    F = len(normals)
    R = _rots_to_down(normals)
    z = exact_math.transform(R, verts)[..., 2]
    height = np.round((z.max(axis=1) - z.min(axis=1)) / 2, 7)
    order = np.lexsort((np.arange(F), height))
    n_edges = np.bincount(fid, minlength=F)
    starts = np.concatenate([[0], np.cumsum(n_edges)[:-1]])
    fallback = None
    for lo in range(0, F, 8):  # lowest facets first, in chunks: most hulls stop in the first one
        chunk = order[lo : lo + 8]
        rv = exact_math.transform(R[chunk], verts)
        Rz, centre = _align_yaw(rv)
        edges = np.concatenate([np.arange(starts[f], starts[f] + n_edges[f]) for f in chunk])
        local = np.repeat(np.arange(len(chunk)), n_edges[chunk])
        a, b = rv[local, a_idx[edges], :2], rv[local, b_idx[edges], :2]
        mid = np.zeros((len(chunk), 2))
        np.add.at(mid, local, a)
        mid = (mid / n_edges[chunk][:, None])[local]
        e = b - a
        length = np.maximum(exact_math.hypot(e[:, 0], e[:, 1]), 1e-12)
        cross_c = e[:, 0] * (centre[local, 1] - a[:, 1]) - e[:, 1] * (centre[local, 0] - a[:, 0])
        cross_m = e[:, 0] * (mid[:, 1] - a[:, 1]) - e[:, 1] * (mid[:, 0] - a[:, 0])
        first = np.concatenate([[0], np.cumsum(n_edges[chunk])[:-1]])
        margin = np.minimum.reduceat(cross_c * np.sign(cross_m) / length, first)
        tipping = exact_math.atan2(margin, np.maximum(height[chunk], 1e-9))
        good = np.nonzero(tipping >= MIN_TIPPING_ANGLE)[0]
        if len(good):
            return exact_math.matmul(Rz[good[0]], R[chunk[good[0]]])
        if fallback is None or fallback[0] > 0:
            stable = np.nonzero(tipping >= 0.0)[0]
            if len(stable):
                fallback = (0, exact_math.matmul(Rz[stable[0]], R[chunk[stable[0]]]))
            elif fallback is None:
                fallback = (1, exact_math.matmul(Rz[0], R[chunk[0]]))
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
    n = exact_math.norm(q)
    return tuple(_r(x / n, 8) for x in q)


def _matrix_from_quat(q: Sequence[float]) -> np.ndarray:
    """Rotation matrix of a quaternion (x, y, z, w), normalised first."""
    n = exact_math.norm(q)
    x, y, z, w = (float(c) / n for c in q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
