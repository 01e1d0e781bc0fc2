"""The simulated world: a Franka Panda on a table, 240 Hz physics, 10 Hz end-effector control.

One `World` lives per worker process and is reused across scenes: the robot and the table are loaded
once, a scene's objects are swapped in by `load`, and `reset` restores the settled scene from memory
(``restoreState`` costs ~0.02 ms against ~40 ms for a reload).

Actions are 7-D and normalised to [-1, 1]: Δ end-effector position (×4 cm), Δ orientation as roll,
pitch, yaw increments (×0.25 rad), and the gripper (> 0 open, ≤ 0 close). The controller integrates the
deltas into a target pose, solves closed-loop IK (enough iterations to be ~0.1 mm accurate; pybullet's
default is off by centimetres) and drives the arm with position control for 24 physics substeps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pybullet as p
import pybullet_data

from coda.sim import assets, fixtures
from coda.sim.context import Body, SceneContext
from coda.sim.scene import SceneSpec
from coda.sim.tasks import RULES

ARM_JOINTS = list(range(7))
FINGER_JOINTS = [9, 10]
EE_LINK = 11
HOME_Q = (0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785)
ARM_FORCES = [87.0] * 4 + [12.0] * 3
FINGER_FORCE = 40.0
ROUND_FRICTION = 0.001  # rolling and spinning friction of spheres and balls
GRIP_OPEN = 0.04  # per finger (total opening 8 cm)
ACTION_SCALE = np.array([0.04, 0.04, 0.04, 0.25, 0.25, 0.25, 1.0])
WORKSPACE_LO = np.array([0.15, -0.55, 0.005])
WORKSPACE_HI = np.array([0.85, 0.55, 0.55])
MAX_LEAD = 0.1  # target may lead the measured end effector by at most this much (no wind-up)
DOWN_QUAT = p.getQuaternionFromEuler([np.pi, 0.0, 0.0])
# (eye, target): over the robot's left shoulder, and from the right side
CAMERAS = (((0.05, 0.5, 0.7), (0.55, 0.0, 0.05)), ((0.55, -0.85, 0.55), (0.5, 0.0, 0.05)))
# (name, eye, target) of the views for figures (`World.figure_cameras`): from in front of the table on the
# robot's right, and from behind its left shoulder, both far enough to hold the whole arm and the workspace.
# For pictures only: the policy observes `CAMERAS`.
FIGURE_CAMERAS = (
    ("front", (1.3, -0.95, 1.25), (0.38, 0.0, 0.3)),
    ("rear", (-0.75, 0.95, 1.35), (0.55, -0.08, 0.12)),
)
FIGURE_FOV = 46  # degrees, vertical
_ACTION_SCALE = ACTION_SCALE.tolist()  # Python-float copies for the per-step controller arithmetic
_WORKSPACE_LO, _WORKSPACE_HI = WORKSPACE_LO.tolist(), WORKSPACE_HI.tolist()
_FINGER_FORCES = [FINGER_FORCE] * 2
OBS_DIM = 50  # 15 proprio + 3 role slots x 9 + 4 goal + 4 family one-hot
N_ROLE_SLOTS = 3
_STATE_JOINTS = ARM_JOINTS + FINGER_JOINTS


class World:
    """A Panda + table world holding one scene at a time."""

    def __init__(
        self,
        data_dir: str | Path = "data",
        *,
        physics_hz: int = 240,
        control_hz: int = 10,
        render: bool = False,
        image_size: int = 224,
        lowpoly: bool = True,
        ik_iterations: int = 100,
        ik_threshold: float = 1e-4,
    ) -> None:
        if physics_hz % control_hz:
            raise ValueError("physics_hz must be a multiple of control_hz")
        self.data_dir = Path(data_dir)
        self.substeps = physics_hz // control_hz
        self.render = render
        self.image_size = image_size
        self.ik_iterations = ik_iterations
        self.ik_threshold = ik_threshold
        self.physics_hz = physics_hz
        self._robot_urdf = (
            _panda_urdf("lowpoly" if lowpoly else "full") if render else _panda_urdf("collision")
        )
        self.client = p.connect(p.DIRECT)
        self._build_base()
        self._catalog = None
        self.bodies: list[Body] = []
        self.scene: SceneSpec | None = None
        self.ctx = None  # SceneContext of the loaded scene
        self._saved: int | None = None
        self.target_pos = np.zeros(3)
        self.target_quat = np.array(DOWN_QUAT)
        self.grip_cmd = 1.0
        self.steps = 0  # physics steps taken since construction (for throughput accounting)
        self.motor_log: list[tuple[list[float], float]] | None = None  # set to a list to record motor targets

    def _build_base(self) -> None:
        """Empty the physics world and build the robot, the floor and the engine settings afresh.

        Every `load` starts here, so that an episode is a function of its scene alone: stepping the arm
        leaves state in the engine that survives removing and re-adding bodies, so a scene loaded into a
        world that has already run episodes simulated differently, by ~1e-8 rad in the arm's joints after
        the settle, depending on which episodes came before (measured: `tests/test_world.py`). A load costs
        ~27 ms with it (16 ms before), most of it the robot's URDF: unrendered worlds load the Panda without
        visual meshes (`_panda_urdf`), 14 ms instead of 87.
        """
        c = self.client
        p.resetSimulation(physicsClientId=c)
        # shape ids are per world, and pybullet reuses the ids of disconnected clients: forget cached ones
        assets.clear_caches(c)
        p.setTimeStep(1.0 / self.physics_hz, physicsClientId=c)
        p.setGravity(0, 0, -9.81, physicsClientId=c)
        # sort contact pairs (a scene's contacts in one order whatever the broadphase's history)
        p.setPhysicsEngineParameter(deterministicOverlappingPairs=1, physicsClientId=c)
        p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=c)
        self.plane = p.loadURDF("plane.urdf", physicsClientId=c)
        self.robot = p.loadURDF(self._robot_urdf, useFixedBase=True, physicsClientId=c)
        for j in FINGER_JOINTS:
            p.changeDynamics(self.robot, j, lateralFriction=1.5, spinningFriction=0.5, physicsClientId=c)
        # couple the fingers like the real Panda's mimic joint; independent force-limited fingers let a
        # held object slide sideways between them as the arm accelerates
        gear = p.createConstraint(
            self.robot,
            FINGER_JOINTS[0],
            self.robot,
            FINGER_JOINTS[1],
            p.JOINT_GEAR,
            [1, 0, 0],
            [0, 0, 0],
            [0, 0, 0],
            physicsClientId=c,
        )
        p.changeConstraint(gear, gearRatio=-1, erp=0.1, maxForce=50, physicsClientId=c)

    # -- scene management --------------------------------------------------------------------------
    @property
    def catalog(self):
        if self._catalog is None:
            self._catalog = assets.load_catalog(self.data_dir)
        return self._catalog

    def load(self, scene: SceneSpec, settle_s: float = 0.25) -> None:
        """Swap in `scene`'s objects, settle them with the arm at home, and snapshot the result."""
        c = self.client
        self._build_base()  # also drops the bodies and the saved state of the previous scene
        self._saved = None
        self.bodies = []
        self.scene = scene
        self._home()
        for obj, pose in zip(scene.objects, scene.spatial.poses, strict=True):
            if obj.asset_id.startswith("fixture/"):
                body = fixtures.spawn(c, obj, pose, visual=self.render)
            else:
                body = self._spawn_asset(obj, pose)
            self.bodies.append(body)
        RULES[scene.family].setup(self, scene)
        n_settle = int(settle_s * self.substeps * 10)
        for _ in range(n_settle):
            p.stepSimulation(physicsClientId=c)
        self.steps += n_settle
        self._saved = p.saveState(physicsClientId=c)
        self.ctx = SceneContext.from_world(self)
        self._arm_controller()

    def settle(self, seconds: float) -> None:
        """Step the physics with the arm holding still (validity checks measure what moves)."""
        n = int(seconds * self.substeps * 10)
        for _ in range(n):
            p.stepSimulation(physicsClientId=self.client)
        self.steps += n

    def _spawn_asset(self, obj, pose) -> Body:
        c = self.client
        asset = self.catalog.by_id(obj.asset_id)
        if isinstance(asset, assets.ArticulatedAsset):
            uid = assets.spawn_articulated(
                c,
                asset,
                self.data_dir,
                position=(pose.x, pose.y, 0.0),
                yaw=pose.yaw,
                scale=obj.scale,
                rgba=obj.rgba,
            )
            return Body(
                uid,
                np.array(asset.footprint) * obj.scale,
                fixed=True,
                movable_joints=[assets.link_index(c, uid, n) for n in asset.movable_joints],
                joint_limits=[
                    (lo * obj.scale, hi * obj.scale) if asset.joint_type == "prismatic" else (lo, hi)
                    for lo, hi in asset.joint_limits
                ],
                handle_links=[assets.link_index(c, uid, n) for n in asset.handle_links],
                handle_local=[np.array(h) * obj.scale for h in asset.handle_local],
            )
        half = np.array(asset.half_extents) * obj.scale
        quat = p.getQuaternionFromEuler([0.0, 0.0, pose.yaw])
        uid = assets.spawn_rigid(
            c,
            asset,
            position=(pose.x, pose.y, half[2] + 0.002),
            orientation=quat,
            scale=obj.scale,
            mass=obj.mass,
            friction=obj.friction,
            rgba=obj.rgba,
            visual=self.render,
            # rolling/spinning friction makes stepping 2-3x slower; only round objects need it to come to rest
            rolling_friction=ROUND_FRICTION if asset.shape == "sphere" or asset.category == "ball" else 0.0,
            spinning_friction=ROUND_FRICTION if asset.shape == "sphere" or asset.category == "ball" else 0.0,
        )
        return Body(uid, half)

    def _home(self) -> None:
        c = self.client
        for j, q in zip(ARM_JOINTS, HOME_Q, strict=True):
            p.resetJointState(self.robot, j, q, physicsClientId=c)
        for j in FINGER_JOINTS:
            p.resetJointState(self.robot, j, GRIP_OPEN, physicsClientId=c)
        self._hold_home()

    def reset(self) -> None:
        """Restore the settled scene (cheap) and re-arm the controller at the current pose."""
        if self._saved is None:
            raise RuntimeError("World.reset() before World.load()")
        p.restoreState(self._saved, physicsClientId=self.client)
        self._arm_controller()

    def _hold_home(self) -> None:
        """Position-control the arm to the home posture and the fingers open."""
        c = self.client
        p.setJointMotorControlArray(
            self.robot,
            ARM_JOINTS,
            p.POSITION_CONTROL,
            targetPositions=HOME_Q,
            forces=ARM_FORCES,
            physicsClientId=c,
        )
        p.setJointMotorControlArray(
            self.robot,
            FINGER_JOINTS,
            p.POSITION_CONTROL,
            targetPositions=[GRIP_OPEN] * 2,
            forces=[FINGER_FORCE] * 2,
            physicsClientId=c,
        )

    def _arm_controller(self) -> None:
        c = self.client
        self._hold_home()  # motor targets are not part of the saved state; re-issue them
        ls = p.getLinkState(self.robot, EE_LINK, computeForwardKinematics=True, physicsClientId=c)
        self.target_pos = np.array(ls[4])
        self.target_quat = np.array(ls[5])
        self.grip_cmd = 1.0

    def close(self) -> None:
        if self.client is not None and p.isConnected(self.client):
            p.disconnect(self.client)
        self.client = None

    # -- control ----------------------------------------------------------------------------------
    def step(self, action: np.ndarray) -> None:
        """Apply one normalised 7-D action for one control period (24 physics substeps at 240/10 Hz).

        The target arithmetic runs on Python floats: the same IEEE operations as NumPy's `clip` and
        elementwise `*` `+` `-` (so the same bits), without NumPy's per-call overhead on 3-vectors.
        """
        c = self.client
        a = [min(max(float(x), -1.0), 1.0) * s for x, s in zip(np.ravel(action), _ACTION_SCALE, strict=True)]
        ee = p.getLinkState(self.robot, EE_LINK, computeForwardKinematics=True, physicsClientId=c)[4]
        target = [
            min(max(t + d, lo), hi)
            for t, d, lo, hi in zip(self.target_pos.tolist(), a[:3], _WORKSPACE_LO, _WORKSPACE_HI)
        ]
        lead = [t - e for t, e in zip(target, ee)]
        dist = math.sqrt(math.fsum([d * d for d in lead]))  # `numerics.norm` of Python floats, without NumPy
        if dist > MAX_LEAD:
            target = [e + d * (MAX_LEAD / dist) for e, d in zip(ee, lead)]
        self.target_pos = np.array(target)
        if any(x != 0.0 for x in a[3:6]):
            dq = p.getQuaternionFromEuler(a[3:6])
            self.target_quat = np.array(p.multiplyTransforms([0, 0, 0], dq, [0, 0, 0], self.target_quat)[1])
        self.grip_cmd = a[6]
        q = p.calculateInverseKinematics(
            self.robot,
            EE_LINK,
            self.target_pos.tolist(),
            self.target_quat.tolist(),
            maxNumIterations=self.ik_iterations,
            residualThreshold=self.ik_threshold,
            physicsClientId=c,
        )
        p.setJointMotorControlArray(
            self.robot,
            ARM_JOINTS,
            p.POSITION_CONTROL,
            targetPositions=q[:7],
            forces=ARM_FORCES,
            physicsClientId=c,
        )
        width = GRIP_OPEN if self.grip_cmd > 0 else 0.0
        if self.motor_log is not None:
            self.motor_log.append((list(q[:7]), width))
        p.setJointMotorControlArray(
            self.robot,
            FINGER_JOINTS,
            p.POSITION_CONTROL,
            targetPositions=[width, width],
            forces=_FINGER_FORCES,
            physicsClientId=c,
        )
        for _ in range(self.substeps):
            p.stepSimulation(physicsClientId=c)
        self.steps += self.substeps

    # -- state and observation ---------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        """Privileged simulator state: what predicates, verifiers, planners and diagnosers read.

        Per-object values are gathered as Python tuples and turned into one array per key (the values
        are copied, not computed, so this is the same bits as filling preallocated arrays).
        """
        c, r = self.client, self.robot
        ls = p.getLinkState(r, EE_LINK, computeForwardKinematics=True, physicsClientId=c)
        js = p.getJointStates(r, _STATE_JOINTS, physicsClientId=c)
        n = len(self.bodies)
        pose = [p.getBasePositionAndOrientation(b.uid, physicsClientId=c) for b in self.bodies]
        vel = [p.getBaseVelocity(b.uid, physicsClientId=c)[0] for b in self.bodies]
        # one query for all the robot's contacts (bodyA is the robot in each: ct[2] is the other body,
        # ct[3] the robot's link), grouped by body: the same link sets as one query per body
        links: dict[int, set[int]] = {}
        for ct in p.getContactPoints(r, physicsClientId=c):
            links.setdefault(ct[2], set()).add(ct[3])
        finger, robot_contact = [], []
        art_q, handle_pos = [], []
        for b in self.bodies:
            touching = links.get(b.uid)
            if touching:
                finger.append((float(FINGER_JOINTS[0] in touching), float(FINGER_JOINTS[1] in touching)))
                robot_contact.append(1.0)
            else:
                finger.append((0.0, 0.0))
                robot_contact.append(0.0)
            for j in b.movable_joints:
                art_q.append(p.getJointState(b.uid, j, physicsClientId=c)[0])
            for link, local in zip(b.handle_links, b.handle_local, strict=True):
                lpos, lquat = p.getLinkState(b.uid, link, computeForwardKinematics=True, physicsClientId=c)[
                    4:6
                ]
                handle_pos.append(p.multiplyTransforms(lpos, lquat, local.tolist(), [0, 0, 0, 1])[0])
        return {
            "ee_pos": np.array(ls[4]),
            "ee_quat": np.array(ls[5]),
            "grip": np.array([js[7][0] + js[8][0]]),
            "q": np.array([s[0] for s in js[:7]]),
            "obj_pos": np.array([x[0] for x in pose], dtype=np.float64).reshape(n, 3),
            "obj_quat": np.array([x[1] for x in pose], dtype=np.float64).reshape(n, 4),
            "obj_vel": np.array(vel, dtype=np.float64).reshape(n, 3),
            "finger_contact": np.array(finger, dtype=np.float64).reshape(n, 2),
            "robot_contact": np.array(robot_contact, dtype=np.float64),
            "art_q": np.array(art_q, dtype=np.float64),
            "handle_pos": np.array(handle_pos, dtype=np.float64).reshape(-1, 3),
            "target_pos": self.target_pos.copy(),  # the controller's integrated target (privileged)
            "target_quat": self.target_quat.copy(),
        }

    def cameras(self) -> np.ndarray:
        """Two RGB views (front and side) of the workspace: (2, H, W, 3) uint8, TinyRenderer (CPU)."""
        if not self.render:
            raise RuntimeError("World(render=True) is needed for camera images")
        out = []
        for eye, target in CAMERAS:
            view = p.computeViewMatrix(eye, target, [0, 0, 1], physicsClientId=self.client)
            proj = p.computeProjectionMatrixFOV(55, 1.0, 0.05, 3.0, physicsClientId=self.client)
            _, _, rgba, _, _ = p.getCameraImage(
                self.image_size,
                self.image_size,
                view,
                proj,
                renderer=p.ER_TINY_RENDERER,
                physicsClientId=self.client,
            )
            out.append(np.asarray(rgba, dtype=np.uint8).reshape(self.image_size, self.image_size, 4)[..., :3])
        return np.stack(out)

    def figure_cameras(self, image_size: int | None = None, segmentation: bool = False):
        """The `FIGURE_CAMERAS` views (front, rear) for pictures of the robot in its scene: (2, H, W, 3) uint8
        at `image_size` pixels (default: the world's), TinyRenderer (CPU); with `segmentation` also
        (2, H, W) int32, the body id seen at each pixel (-1: nothing). Reads the state, simulates nothing."""
        if not self.render:
            raise RuntimeError("World(render=True) is needed for camera images")
        size = image_size or self.image_size
        images, masks = [], []
        for _, eye, target in FIGURE_CAMERAS:
            view = p.computeViewMatrix(eye, target, [0, 0, 1], physicsClientId=self.client)
            proj = p.computeProjectionMatrixFOV(FIGURE_FOV, 1.0, 0.05, 5.0, physicsClientId=self.client)
            _, _, rgba, _, seg = p.getCameraImage(
                size, size, view, proj, renderer=p.ER_TINY_RENDERER, physicsClientId=self.client
            )
            images.append(np.asarray(rgba, dtype=np.uint8).reshape(size, size, 4)[..., :3])
            masks.append(np.asarray(seg, dtype=np.int32).reshape(size, size))
        return (np.stack(images), np.stack(masks)) if segmentation else np.stack(images)

    def collision_pairs(self) -> list[tuple[int, int, float]]:
        """Object-object and object-robot penetrations: (i, j, depth) with j = -1 for the robot."""
        c = self.client
        p.performCollisionDetection(physicsClientId=c)
        out = []
        for i, b in enumerate(self.bodies):
            for j in range(i + 1, len(self.bodies)):
                for ct in p.getContactPoints(b.uid, self.bodies[j].uid, physicsClientId=c):
                    out.append((i, j, -ct[8]))
            for ct in p.getContactPoints(b.uid, self.robot, physicsClientId=c):
                out.append((i, -1, -ct[8]))
        return out


def world_kwargs(cfg) -> dict:
    """World settings of a loaded `coda.config.Config` (what executors pass to their workers)."""
    return {
        "physics_hz": cfg.sim.physics_hz,
        "control_hz": cfg.sim.control_hz,
        "render": cfg.sim.obs == "rgb",
        "image_size": cfg.sim.image_size,
        "ik_iterations": cfg.planner.ik_iterations,
        "ik_threshold": cfg.planner.ik_threshold,
    }


def _panda_urdf(visuals: str) -> str:
    """pybullet_data's Panda with its visuals as they are ("full"), replaced by its collision meshes
    ("lowpoly", ~4x faster to render) or removed ("collision": nothing to render, and ~6x faster to load,
    which `World.load` does for every scene). The dynamics read only the collision shapes and inertials,
    which all three share (`tests/test_world.py` compares the trajectories)."""
    import os
    import re
    import tempfile

    src = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
    if visuals == "full":
        return "franka_panda/panda.urdf"
    out = Path(tempfile.gettempdir()) / f"coda_panda_{visuals}_{os.getuid()}.urdf"
    if not out.exists():
        text = src.read_text()
        if visuals == "lowpoly":
            text = text.replace("package://meshes/visual/", "package://meshes/collision/")
        elif visuals == "collision":
            text = re.sub(r"<visual>.*?</visual>", "", text, flags=re.S)
        else:
            raise ValueError(f"visuals must be full, lowpoly or collision; got {visuals!r}")
        text = text.replace("package://meshes/", str(src.parent / "meshes") + "/")
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, out)
    return str(out)
