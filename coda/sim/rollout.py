"""Rollout engine: run any chunking policy on a scene and record everything a diagnoser needs.

A policy is any object with ``act(obs: Observation) -> np.ndarray`` of shape (h, 7) (normalised
actions; see `coda.sim.world`). Learned policies read ``obs.vector`` and ``obs.instruction``; scripted
planners read the privileged ``obs.state``. The record keeps the per-control-step state trajectory,
actions, chunk boundaries, cumulative phase-predicate values, contacts and the verifier's verdict in
plain arrays (serialisable to JSON or ``.npz`` without pickle).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from coda.sim.context import SceneContext
from coda.sim.families import REGISTRY
from coda.sim.scene import SceneSpec
from coda.sim.world import N_ROLE_SLOTS, OBS_DIM, World

FAMILY_INDEX = {name: i for i, name in enumerate(("drawer", "pick_place", "push", "stack"))}
STATE_KEYS = (
    "ee_pos",
    "ee_quat",
    "grip",
    "q",
    "obj_pos",
    "obj_quat",
    "obj_vel",
    "finger_contact",
    "robot_contact",
    "art_q",
    "handle_pos",
    "target_pos",
    "target_quat",
)


@dataclass
class Observation:
    vector: np.ndarray  # (OBS_DIM,) proprioception + object-centric role slots + goal + family one-hot
    instruction: str
    state: dict[str, np.ndarray]  # privileged simulator state (planners, critics' ground truth)
    images: np.ndarray | None = None  # (2, H, W, 3) uint8 when obs == "rgb"


class Policy(Protocol):
    def act(self, obs: Observation) -> np.ndarray: ...


def observation_vector(state: dict[str, np.ndarray], ctx: SceneContext) -> np.ndarray:
    """Fixed-length state observation shared by every family (OBS_DIM floats).

    Role-slot positions are given relative to the end effector (egocentric), which is what a policy needs
    to act on; the absolute end-effector pose is in the proprioceptive part.
    """
    family = REGISTRY[ctx.family]
    slots, goal = family.role_features(state, ctx)
    slots = [np.concatenate([s[:3] - state["ee_pos"], s[3:]]) for s in list(slots)[:N_ROLE_SLOTS]]
    slots += [np.zeros(9)] * (N_ROLE_SLOTS - len(slots))
    onehot = np.zeros(len(FAMILY_INDEX))
    onehot[FAMILY_INDEX[ctx.family]] = 1.0
    vec = np.concatenate([state["ee_pos"], state["ee_quat"], state["grip"], state["q"], *slots, goal, onehot])
    assert vec.shape == (OBS_DIM,), vec.shape
    return vec.astype(np.float32)


@dataclass
class RolloutRecord:
    scene_hash: str
    family: str
    variant: str
    instruction: str
    ctx: dict[str, Any]
    states: dict[str, np.ndarray]  # each (T+1, ...) per control step, index 0 = after reset
    obs: np.ndarray  # (T+1, OBS_DIM)
    actions: np.ndarray  # (T, 7)
    chunk_starts: list[int]  # control-step indices at which a chunk began
    phase_names: list[str]
    phases: np.ndarray  # (T+1, P) cumulative phase flags
    success: bool
    success_step: int | None
    physics_steps: int
    wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def phase_reached(self) -> int:
        """Number of phases completed in order by the end of the episode."""
        return int(self.phases[-1].sum())

    def context(self) -> SceneContext:
        return SceneContext.from_dict(self.ctx)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """Plain data: lists (JSON), or with ``arrays`` the NumPy arrays themselves (for pickling between
        processes: `from_dict` reads both, to the same bits)."""
        d = {
            k: getattr(self, k)
            for k in (
                "scene_hash",
                "family",
                "variant",
                "instruction",
                "ctx",
                "chunk_starts",
                "phase_names",
                "success",
                "success_step",
                "physics_steps",
                "wall_s",
                "meta",
            )
        }
        if arrays:
            d["states"] = dict(self.states)
            d.update(obs=self.obs, actions=self.actions, phases=self.phases)
            return d
        d["states"] = {k: v.tolist() for k, v in self.states.items()}
        d["obs"] = self.obs.tolist()
        d["actions"] = self.actions.tolist()
        d["phases"] = self.phases.astype(int).tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RolloutRecord:
        return cls(
            d["scene_hash"],
            d["family"],
            d["variant"],
            d["instruction"],
            d["ctx"],
            {k: np.asarray(v, dtype=np.float64) for k, v in d["states"].items()},
            np.asarray(d["obs"], dtype=np.float32),
            np.asarray(d["actions"], dtype=np.float64).reshape(-1, 7),
            list(d["chunk_starts"]),
            list(d["phase_names"]),
            np.asarray(d["phases"], dtype=bool),
            bool(d["success"]),
            d["success_step"],
            int(d["physics_steps"]),
            float(d["wall_s"]),
            dict(d["meta"]),
        )


@dataclass
class _Rollout:
    """What the episode loop of `run_episode` / `run_outcome` leaves: the states and decisions."""

    ctx: SceneContext
    states: list[dict[str, np.ndarray]]
    obs: dict[int, np.ndarray]  # observation at each chunk start (the policy's input)
    actions: list[np.ndarray]
    chunk_starts: list[int]
    success_step: int | None
    physics_steps: int
    policy_s: float


def _roll(
    world: World, scene: SceneSpec, policy: Policy, max_chunks: int, stop_on_success: bool, reload: bool
) -> _Rollout:
    if reload or world.scene is None or world.scene.hash != scene.hash:
        world.load(scene)
    else:
        world.reset()
    family = REGISTRY[scene.family]
    success = family.success
    ctx = world.ctx
    steps0 = world.steps
    state = world.state()
    states = [state]
    # observations are needed during the episode only where a chunk starts (the policy's input); the rest
    # are computed from the recorded states after the loop when a record needs them
    obs: dict[int, np.ndarray] = {}
    actions: list[np.ndarray] = []
    chunk_starts: list[int] = []
    instruction = scene.task.instruction
    # a scene can start solved (e.g. the object already in the goal): the verifier decides at step 0
    success_step = 0 if success(state, ctx) else None
    policy_s = 0.0  # time spent inside policy.act (the policy's compute, not the engine's)
    for _ in range(0 if success_step == 0 and stop_on_success else max_chunks):
        chunk_starts.append(len(actions))
        images = world.cameras() if world.render else None
        obs[len(actions)] = vec = observation_vector(state, ctx)
        t_policy = time.perf_counter()
        chunk = np.asarray(policy.act(Observation(vec, instruction, state, images)), dtype=np.float64)
        policy_s += time.perf_counter() - t_policy
        if chunk.ndim != 2 or chunk.shape[1] != 7:
            raise ValueError(f"policy returned a chunk of shape {chunk.shape}; expected (h, 7)")
        for a in chunk:
            world.step(a)
            state = world.state()
            states.append(state)
            actions.append(a)
            if success_step is None and success(state, ctx):
                success_step = len(actions)
                if stop_on_success:
                    break
        if success_step is not None and stop_on_success:
            break
    return _Rollout(ctx, states, obs, actions, chunk_starts, success_step, world.steps - steps0, policy_s)


def run_episode(
    world: World,
    scene: SceneSpec,
    policy: Policy,
    *,
    max_chunks: int = 12,
    stop_on_success: bool = True,
    reload: bool = True,
) -> RolloutRecord:
    """Start `scene` in `world` and roll `policy` out.

    With ``reload`` (default) the physics world is rebuilt and the scene spawned afresh (`World.load`, ~25
    ms), which makes the record a function of the scene alone (bit-identical whatever the worker ran
    before); ``reload=False`` restores the settled snapshot instead when the world holds the scene
    (~0.02 ms; state the engine keeps outside the snapshot makes it equal only to ~1e-8 m), which is right
    only straight after `World.load` of that scene, as the certifying planner does.
    """
    t0 = time.perf_counter()
    r = _roll(world, scene, policy, max_chunks, stop_on_success, reload)
    family, ctx, states = REGISTRY[scene.family], r.ctx, r.states
    stacked = {k: np.stack([s[k] for s in states]) for k in STATE_KEYS}
    return RolloutRecord(
        scene_hash=scene.hash,
        family=scene.family,
        variant=scene.task.variant,
        instruction=scene.task.instruction,
        ctx=ctx.to_dict(),
        states=stacked,
        obs=np.stack([r.obs[t] if t in r.obs else observation_vector(s, ctx) for t, s in enumerate(states)]),
        actions=np.array(r.actions).reshape(-1, 7),
        chunk_starts=r.chunk_starts,
        phase_names=[ph.name for ph in family.phases(scene.task.variant)],
        phases=family.progress(states, ctx),
        success=r.success_step is not None,
        success_step=r.success_step,
        physics_steps=r.physics_steps,
        wall_s=time.perf_counter() - t0,
        meta={"policy_s": r.policy_s},
    )


def run_outcome(
    world: World, scene: SceneSpec, policy: Policy, *, max_chunks: int = 12, reload: bool = True
) -> dict[str, Any]:
    """`run_episode`'s outcome without its record: the same episode (the same states and actions, bit for
    bit), summarised as success, success_step, steps, phase_reached (phases completed in order by the end),
    physics_steps and policy_s; the per-step observations and the stacked arrays a record holds are never
    built (what an evaluation episode needs)."""
    r = _roll(world, scene, policy, max_chunks, True, reload)
    phases = REGISTRY[scene.family].phases(scene.task.variant)
    reached = 0  # `Family.progress` on the states, last row only
    for st in r.states:
        while reached < len(phases) and phases[reached].predicate(st, r.ctx):
            reached += 1
    return {
        "success": r.success_step is not None,
        "success_step": r.success_step,
        "steps": len(r.actions),
        "phase_reached": reached,
        "physics_steps": r.physics_steps,
        "policy_s": r.policy_s,
    }


def plan_episode(world: World, scene: SceneSpec, *, max_chunks: int = 14) -> RolloutRecord:
    """Run the family's scripted planner: a success certifies the scene and the record is a demonstration."""
    world.load(scene)
    planner = REGISTRY[scene.family].planner(world.ctx)
    return run_episode(world, scene, planner, max_chunks=max_chunks, reload=False)
