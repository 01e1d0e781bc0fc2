"""Static scene fixtures built from primitives: open-top bins (containers) and flat goal regions."""

from __future__ import annotations

import numpy as np
import pybullet as p

from coda.sim.context import Body
from coda.sim.scene import ObjectSpec, Pose

BIN_INNER = (0.09, 0.11)  # inner half sizes (x, y) at scale 1
BIN_WALL = (0.006, 0.04)  # wall half thickness, wall height
REGION_RADIUS = 0.06  # goal-region radius at scale 1
FIXTURES = {"fixture/bin": "bin", "fixture/region": "region"}


def spawn(client: int, obj: ObjectSpec, pose: Pose, *, visual: bool):
    kind = FIXTURES.get(obj.asset_id)
    if kind is None:
        raise ValueError(f"unknown fixture {obj.asset_id!r}; expected one of {sorted(FIXTURES)}")
    quat = p.getQuaternionFromEuler([0, 0, pose.yaw])
    s = obj.scale
    if kind == "region":
        vis = -1
        if visual:
            vis = p.createVisualShape(
                p.GEOM_CYLINDER,
                radius=REGION_RADIUS * s,
                length=0.001,
                rgbaColor=obj.rgba,
                physicsClientId=client,
            )
        uid = p.createMultiBody(0, -1, vis, [pose.x, pose.y, 0.0005], quat, physicsClientId=client)
        return Body(uid, np.array([REGION_RADIUS * s, REGION_RADIUS * s, 0.0005]), fixed=True)
    ix, iy = BIN_INNER[0] * s, BIN_INNER[1] * s
    t, h = BIN_WALL[0], BIN_WALL[1]
    parts = [  # (half extents, centre) in the bin frame
        ((ix + 2 * t, iy + 2 * t, t), (0, 0, t)),
        ((t, iy + 2 * t, h / 2), (ix + t, 0, h / 2)),
        ((t, iy + 2 * t, h / 2), (-ix - t, 0, h / 2)),
        ((ix, t, h / 2), (0, iy + t, h / 2)),
        ((ix, t, h / 2), (0, -iy - t, h / 2)),
    ]
    cols = [p.createCollisionShape(p.GEOM_BOX, halfExtents=he, physicsClientId=client) for he, _ in parts]
    vis = [
        p.createVisualShape(p.GEOM_BOX, halfExtents=he, rgbaColor=obj.rgba, physicsClientId=client)
        if visual
        else -1
        for he, _ in parts
    ]
    n = len(parts) - 1
    uid = p.createMultiBody(
        baseMass=0,
        baseCollisionShapeIndex=cols[0],
        baseVisualShapeIndex=vis[0],
        basePosition=[pose.x, pose.y, t],
        baseOrientation=quat,
        linkMasses=[0] * n,
        linkCollisionShapeIndices=cols[1:],
        linkVisualShapeIndices=vis[1:],
        linkPositions=[(c[0], c[1], c[2] - t) for _, c in parts[1:]],
        linkOrientations=[[0, 0, 0, 1]] * n,
        linkInertialFramePositions=[[0, 0, 0]] * n,
        linkInertialFrameOrientations=[[0, 0, 0, 1]] * n,
        linkParentIndices=[0] * n,
        linkJointTypes=[p.JOINT_FIXED] * n,
        linkJointAxis=[[0, 0, 1]] * n,
        physicsClientId=client,
    )
    p.changeDynamics(uid, -1, lateralFriction=obj.friction, physicsClientId=client)
    body = Body(uid, np.array([ix + 2 * t, iy + 2 * t, h / 2]), fixed=True)
    body.inner = np.array([ix, iy, 2 * t])
    return body
