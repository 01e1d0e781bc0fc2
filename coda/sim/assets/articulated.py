"""Procedurally generated articulated assets: cabinets with drawers, hinged doors and lidded boxes, each
written as a URDF of boxes with a handle link in front of every movable part."""

from __future__ import annotations

import numpy as np

from coda.sim.assets.catalog import ArticulatedAsset, _r
from coda.sim.assets.urdf import _Urdf

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
