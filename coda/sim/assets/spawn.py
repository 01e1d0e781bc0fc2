"""Spawning assets into a pybullet client: rigid bodies from cached collision / visual shapes, articulated
URDFs with friction motors on their joints, and link lookup by name (see the package notes on caches)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pybullet as p
import pybullet_data

from coda.sim.assets.catalog import ArticulatedAsset, RigidAsset

ROLLING_FRICTION = 0.001
SPINNING_FRICTION = 0.001

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


def _multibody(client: int, col: int, vis: int, mass: float, position, orn) -> int:
    return p.createMultiBody(
        baseMass=float(mass),
        baseCollisionShapeIndex=col,
        baseVisualShapeIndex=vis,
        basePosition=list(position),
        baseOrientation=orn,
        physicsClientId=client,
    )


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
        body = _multibody(client, col, vis, mass, position, orn)
    except p.error:
        body = -1
    if body < 0:  # stale cache (e.g. after resetSimulation): rebuild the shapes once
        clear_caches(client)
        col = _collision_shape(client, asset, scale)
        vis = _visual_shape(client, asset, scale) if visual else -1
        body = _multibody(client, col, vis, mass, position, orn)
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
