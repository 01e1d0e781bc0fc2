"""LIBERO episodes: the observation over a suite's objects, the worker job that runs one episode (a policy,
the critic-guided policy or the scripted planner, on a bundled initial state with a variant's perturbation),
and the evaluation on the standard, position (``_swap``) and instruction (``_lan``, ``_task``) suites.

* **Observation** (`SuiteObservation`): end-effector pose and fingers, then one slot per object instance of
  the suite (present flag, position relative to the end effector). The goal object is *not* marked: the
  policy must read it from the instruction, so instruction perturbations matter.
* **Evaluation**: the last ``eval_states`` bundled initial states of each task (`coda.sim.libero.heldout`;
  the per-round curve evaluates the first ``curve_states`` of them) in the standard suite and in
  three LIBERO-Pro versions of it: ``_swap`` (position: the goal object and one other object of the scene
  trade their initial regions; instruction and goal unchanged), ``_lan`` (instruction paraphrase: same
  scene, same goal, reworded instruction read from ``env.language_instruction``) and ``_task`` (new task:
  same scene and layout, the instruction and the BDDL goal name *another* object of the scene, e.g. "pick
  the cream cheese" in the alphabet-soup scene). ``_task`` is the instruction shift a policy that ignores
  language fails; a paraphrase it passes. Never used for training or generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.domains.libero import interpret as lp
from coda.domains.libero.diagnose import nearest_others
from coda.learn.awr import cached_actor
from coda.learn.demos import NoisyExpert
from coda.sim.libero import heldout
from coda.sim.libero.success import KINDS, OOD_KINDS, success_table  # noqa: F401  (re-exported API)

PROPRIO = 9  # ee position (3), ee quaternion (4), finger joints (2)


def suite_of(base: str, kind: str) -> str:
    return base + KINDS[kind]


# -- observation -------------------------------------------------------------------------------------------
def suite_objects(suite: str) -> tuple[str, ...]:
    """Every object instance name declared in the suite's BDDL files (sorted), e.g. 'alphabet_soup_1'."""
    from coda.sim.libero import get_task, n_tasks

    names: set[str] = set()
    for t in range(n_tasks(suite)):
        text = Path(get_task(suite, t).bddl_path).read_text()
        m = re.search(r"\(:objects(.*?)\)", text, re.S)
        if m:
            names.update(re.findall(r"(\S+)\s+-\s+\S+", m.group(1)))
    return tuple(sorted(names))


@dataclass(frozen=True)
class SuiteObservation:
    """Fixed-length observation over a suite's object vocabulary (see the module docstring)."""

    objects: tuple[str, ...]

    @property
    def dim(self) -> int:
        return PROPRIO + 4 * len(self.objects)

    def __call__(self, state: dict[str, Any]) -> np.ndarray:
        ee = np.asarray(state["ee_pos"], dtype=float)
        vec = np.zeros(self.dim, dtype=np.float32)
        vec[:PROPRIO] = np.concatenate([ee, state["ee_quat"], state["grip"]])
        positions = state["objects"]
        for i, name in enumerate(self.objects):
            if name in positions:
                k = PROPRIO + 4 * i
                vec[k] = 1.0
                vec[k + 1 : k + 4] = np.asarray(positions[name]) - ee
        return vec


# -- worker side -------------------------------------------------------------------------------------------
_ENVS: dict[tuple[str, int], Any] = {}
_OBS: dict[str, SuiteObservation] = {}
MAX_ENVS = 6  # environments a worker keeps open (creating one costs 1.5–3 s)


def _env(suite: str, task: int):
    from coda.sim.libero import LiberoEnv

    key = (suite, task)
    if key not in _ENVS:
        if len(_ENVS) >= MAX_ENVS:
            _ENVS.pop(next(iter(_ENVS))).close()
        _ENVS[key] = LiberoEnv(suite, task)
    return _ENVS[key]


@dataclass(frozen=True)
class Episode:
    """One episode to run in a worker: which suite/task/state, the perturbation, and who acts."""

    suite: str
    variant: lp.Variant
    actor: str  # "planner" or a policy directory
    base_suite: str  # whose object vocabulary the observation uses
    critic: str | None = None
    noise: float = 0.0
    seed: int = 0
    j: int = 8
    temperature: float = 0.5
    max_steps: int = 300
    record: bool = False

    def job(self) -> dict[str, Any]:
        return {**self.__dict__, "variant": self.variant.to_dict()}


def episode_job(job: dict[str, Any]) -> dict[str, Any]:
    """Worker job: one LIBERO episode (see `Episode`); returns its outcome, and the record when asked."""
    from coda.sim.libero import run_episode

    variant = lp.Variant.from_dict(job["variant"])
    env = _env(job["suite"], variant.task)
    if job["base_suite"] not in _OBS:
        _OBS[job["base_suite"]] = SuiteObservation(suite_objects(job["base_suite"]))
    observe = _OBS[job["base_suite"]]
    env.retarget(None)  # environments are reused: start from the BDDL's own goal
    shifts = {_role_object(env, role): tuple(xy) for role, xy in variant.shifts.items()}
    if variant.places:
        shifts.update(place_shifts(env, variant.init_index, variant.places))
    if variant.swap is not None:
        shifts.update(swap_shifts(env, variant.init_index, variant.swap))
    instruction = variant.instruction
    if variant.retarget is not None:  # a new task: another object of the scene is the goal
        skip = heldout.held_out_goal(job["suite"], variant.task)
        new = neighbour(env, variant.init_index, variant.retarget, skip=() if skip is None else (skip,))
        instruction = lp.retarget_instruction(instruction or env.task.language, new)
        env.retarget(new)
    goal = env.task.goal.obj
    expert = None
    if job["actor"] == "planner":
        from coda.sim.libero.planner import LiberoPlanner

        expert = NoisyExpert(LiberoPlanner(env.task, env), job["noise"], np.random.default_rng(job["seed"]))
        actor = expert
    else:
        actor = cached_actor(
            job["actor"], job["critic"], j=job["j"], temperature=job["temperature"], seed=job["seed"]
        )
    try:
        rec = run_episode(
            env,
            variant.init_index,
            actor,
            shifts=shifts or None,
            max_steps=job["max_steps"],
            observe=observe,
            instruction=instruction,
        )
    finally:
        env.retarget(None)
    out = {
        "success": bool(rec.success),
        "success_held": bool(rec.success_held),
        "steps": int(rec.steps),
        "phase_reached": int(rec.phases[-1].sum()) if len(rec.phases) else 0,
        "valid": bool(env.last_reset_valid) if shifts else True,
        "instruction": rec.instruction,
        "goal": goal,  # the object the episode had to pick (a retarget's new goal)
        "seconds": round(rec.seconds, 3),
    }
    if job["record"]:
        out["record"] = rec.to_dict()
        if expert is not None:
            labels = np.concatenate(expert.labels)[: rec.steps] if expert.labels else np.zeros((0, 7))
            out["labels"] = labels.astype(float).tolist()
    return out


def _neighbours(env, init_index: int, skip: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], list[str]]:
    """The settled initial positions and the movable objects other than the goal object, the goal target and
    `skip`, nearest to the goal object first (`nearest_others`)."""
    rest = env.reset(init_index)["objects"]
    return rest, nearest_others(rest, env.task.goal.obj, (env.target_body(), *skip))


def swap_shifts(env, init_index: int, rank: int) -> dict[str, tuple[float, float]]:
    """x/y shifts that make the goal object and its `rank`-th nearest movable object (not the goal target)
    trade places, measured on the settled initial state."""
    rest, others = _neighbours(env, init_index)
    if not others:
        return {}
    goal = env.task.goal.obj
    other = others[rank % len(others)]
    dx, dy = (float(v) for v in rest[other][:2] - rest[goal][:2])
    return {goal: (dx, dy), other: (-dx, -dy)}


def place_shifts(env, init_index: int, places: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """x/y shifts that put each role's object at its table position (`place` programs), measured from the
    settled initial state."""
    rest = env.reset(init_index)["objects"]
    out = {}
    for role, (x, y) in places.items():
        name = _role_object(env, role)
        out[name] = (float(x - rest[name][0]), float(y - rest[name][1]))
    return out


def neighbour(env, init_index: int, rank: int, skip: tuple[str, ...] = ()) -> str:
    """The goal object's `rank`-th nearest movable object (not the goal target, nor one of `skip`: the
    held-out `_task` goal) on the settled initial state: the new goal object of a ``retarget`` variant."""
    _, others = _neighbours(env, init_index, skip)
    if not others:
        raise ValueError(f"{env.task.name}: no other movable object to retarget to")
    return others[rank % len(others)]


def _role_object(env, role: str) -> str:
    goal = env.task.goal
    if role == "object":
        return goal.obj
    return env.target_body()


# -- orchestration helpers ---------------------------------------------------------------------------------
def make_pool(cfg):
    from coda.sim.executor import make_executor

    return make_executor(
        cfg.sim.backend,
        cfg.libero.workers,
        timeout_s=max(120.0, cfg.libero.max_steps * 0.5),
        retries=cfg.sim.retries,
        ray_address=cfg.sim.ray_address,
    )


def run_episodes(pool, episodes: list[Episode], desc: str) -> list[dict[str, Any]]:
    """Run episodes (sorted by environment so that workers reuse them), results in input order."""
    order = sorted(range(len(episodes)), key=lambda i: (episodes[i].suite, episodes[i].variant.task))
    results = pool.map(episode_job, [episodes[i].job() for i in order], desc=desc)
    out: list[dict[str, Any]] = [{} for _ in episodes]
    for i, res in zip(order, results, strict=True):
        out[i] = res.value if res.ok else {"success": False, "error": res.error, "valid": False}
    return out


def demo_from(result: dict[str, Any]) -> dict[str, Any] | None:
    """A demonstration (for `chunk_dataset`) from a planner episode's result; None when it failed."""
    if not result.get("success") or "record" not in result:
        return None
    rec = result["record"]
    steps = int(rec["steps"])
    return {
        "success": True,
        "instruction": rec["instruction"],
        "obs": np.asarray(rec["obs"], dtype=np.float32)[:steps],
        "labels": np.asarray(result["labels"], dtype=np.float32).reshape(-1, 7)[:steps],
    }


def pack_demos(demos: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    lengths = np.array([len(d["obs"]) for d in demos], dtype=np.int64)
    return {
        "lengths": lengths,
        "obs": np.concatenate([d["obs"] for d in demos]) if demos else np.zeros((0, 1), np.float32),
        "labels": np.concatenate([d["labels"] for d in demos]) if demos else np.zeros((0, 7), np.float32),
        "instruction": np.array([d["instruction"] for d in demos], dtype=str),
    }


def unpack_demos(z) -> list[dict[str, Any]]:
    out, k = [], 0
    for n, instr in zip(z["lengths"].tolist(), z["instruction"].tolist(), strict=True):
        out.append(
            {
                "success": True,
                "instruction": instr,
                "obs": z["obs"][k : k + n],
                "labels": z["labels"][k : k + n],
            }
        )
        k += n
    return out


def evaluate(
    pool, cfg, policy_dir: Path, critic_dir: Path | None, seed: int, desc: str, states=None
) -> dict[str, Any]:
    """Success on the evaluation states of every source task (`states`; default all of
    `heldout.eval_states`) in the standard suite and its `_swap`, `_lan` and `_task` versions (`KINDS`)."""
    c = cfg.libero
    states = heldout.eval_states(c) if states is None else states
    episodes, keys = [], []
    for kind in KINDS:
        for t in c.tasks:
            for i in states:
                episodes.append(
                    Episode(
                        suite_of(c.suite, kind),
                        lp.Variant(t, i),
                        str(policy_dir.resolve()),
                        c.suite,
                        critic=str(critic_dir.resolve()) if critic_dir else None,
                        seed=seed,
                        j=cfg.coevolve.j,
                        temperature=cfg.coevolve.temperature,
                        max_steps=c.max_steps,
                    )
                )
                keys.append((kind, t, i))
    results = run_episodes(pool, episodes, desc)
    return success_table([(*key, r) for key, r in zip(keys, results, strict=True)])
