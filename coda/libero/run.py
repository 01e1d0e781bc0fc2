"""SFT, evaluation and co-evolution rounds on LIBERO (Table 2), reusing the PyBullet loop's learning stack.

The same components as on PyBullet, with LIBERO episodes underneath:

* **Observation** (`SuiteObservation`): end-effector pose and fingers, then one slot per object instance of
  the suite (present flag, position relative to the end effector). The goal object is *not* marked: the
  policy must read it from the instruction, so instruction perturbations matter.
* **SFT**: the scripted planner (`coda.sim.libero.planner`) demonstrates the first ``demo_states`` bundled
  initial states of each source task (one clean demonstration, the others with execution noise, labels
  clean); a `RegressionPolicy` is trained on h = 8 chunks. LIBERO runs its OSC controller at 20 Hz (a
  chunk is 0.4 s), the PyBullet families at 10 Hz; nothing else depends on the rate.
* **Evaluation**: the last ``eval_states`` bundled initial states of each task in the standard suite, its
  ``_swap`` version (LIBERO-Pro's position perturbation) and its ``_lan`` version (instruction
  perturbation, read from ``env.language_instruction``). Never used for training or generation.
* **Rounds** (CoDA): variants of the source tasks from memory-guided and novel generation programs
  (`coda.libero.programs`) on the remaining initial states, each rolled out with its control (same state,
  no perturbation); a targeted failure whose control succeeded is diagnosed (failed phase, perturbed
  factor) into the shared `Memory`'s difficulty modes; a candidate mode is tested on fresh pairs and
  validated when control − targeted success ≥ ``validate_margin``; validated modes get compiled programs,
  and the planner certifies and demonstrates their variants. Training: the chunk critic by TD on all
  rollouts with the phase potential of the mode's training program (Text2potential's subgoal shaping),
  then AWR + imitation (rehearsal of SFT demonstrations and the round's new ones) on LoRA adapters.

Layout of a run directory: ``sft/`` (policy, demos.npz, metrics.json with the planner's per-task success and
the evaluation), ``rounds/round-NNNN/`` (policy with adapters, critic, demos, replay, state.json),
``memory/round-NNNN/`` (snapshots), ``rounds.json`` and ``metrics.json`` (Table 2). A round is complete when
its directory exists; a re-run resumes after the last complete one.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda.learn.train import NoisyExpert, chunk_dataset, demo_batch, write_json
from coda.libero import programs as lp
from coda.progress import progress

KINDS = {"standard": "", "position": "_swap", "instruction": "_lan"}  # Table 2's columns -> suite suffix
N_INIT = 50  # bundled initial states per task
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
_ACTORS: dict[tuple, Any] = {}
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


def _learned_actor(policy_dir: str, critic_dir: str | None, j: int, temperature: float, seed: int):
    key = (policy_dir, critic_dir, j, temperature, seed)
    if key not in _ACTORS:
        from coda.learn.awr import CriticGuidedPolicy
        from coda.learn.critic import ChunkCritic
        from coda.learn.policies import ChunkPolicy

        torch.set_num_threads(1)
        _ACTORS.clear()
        policy = ChunkPolicy.from_pretrained(policy_dir).eval()
        if critic_dir is None:
            _ACTORS[key] = policy
        else:
            critic = ChunkCritic.from_pretrained(critic_dir)
            _ACTORS[key] = CriticGuidedPolicy(policy, critic, j=j, temperature=temperature, seed=seed)
    return _ACTORS[key]


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
    shifts = {_role_object(env, role): tuple(xy) for role, xy in variant.shifts.items()}
    if variant.swap is not None:
        shifts.update(swap_shifts(env, variant.init_index, variant.swap))
    expert = None
    if job["actor"] == "planner":
        from coda.sim.libero.planner import LiberoPlanner

        expert = NoisyExpert(LiberoPlanner(env.task, env), job["noise"], np.random.default_rng(job["seed"]))
        actor = expert
    else:
        actor = _learned_actor(job["actor"], job["critic"], job["j"], job["temperature"], job["seed"])
    rec = run_episode(
        env,
        variant.init_index,
        actor,
        shifts=shifts or None,
        max_steps=job["max_steps"],
        observe=observe,
        instruction=variant.instruction,
    )
    out = {
        "success": bool(rec.success),
        "success_held": bool(rec.success_held),
        "steps": int(rec.steps),
        "phase_reached": int(rec.phases[-1].sum()) if len(rec.phases) else 0,
        "valid": bool(env.last_reset_valid) if shifts else True,
        "instruction": rec.instruction,
        "seconds": round(rec.seconds, 3),
    }
    if job["record"]:
        out["record"] = rec.to_dict()
        if expert is not None:
            labels = np.concatenate(expert.labels)[: rec.steps] if expert.labels else np.zeros((0, 7))
            out["labels"] = labels.astype(float).tolist()
    return out


def swap_shifts(env, init_index: int, rank: int) -> dict[str, tuple[float, float]]:
    """x/y shifts that make the goal object and its `rank`-th nearest movable object (not the goal target)
    trade places, measured on the settled initial state."""
    rest = env.reset(init_index)["objects"]
    goal = env.task.goal.obj
    others = sorted(
        (n for n in env.object_names if n not in (goal, env.target_body) and n in rest),
        key=lambda n: float(np.linalg.norm(rest[n][:2] - rest[goal][:2])),
    )
    if not others:
        return {}
    other = others[rank % len(others)]
    dx, dy = (float(v) for v in rest[other][:2] - rest[goal][:2])
    return {goal: (dx, dy), other: (-dx, -dy)}


def _role_object(env, role: str) -> str:
    goal = env.task.goal
    if role == "object":
        return goal.obj
    return env.target_body


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


def success_table(rows: list[tuple[str, int, dict[str, Any]]]) -> dict[str, Any]:
    """{kind: {"mean", "n", "by_task"}} from (kind, task, result) rows."""
    table: dict[str, Any] = {}
    for kind in KINDS:
        mine = [(t, bool(r.get("success"))) for k, t, r in rows if k == kind]
        if not mine:
            continue
        by_task: dict[str, list[bool]] = {}
        for t, s in mine:
            by_task.setdefault(str(t), []).append(s)
        table[kind] = {
            "mean": round(float(np.mean([s for _, s in mine])), 4),
            "n": len(mine),
            "by_task": {
                t: round(float(np.mean(v)), 4) for t, v in sorted(by_task.items(), key=lambda x: int(x[0]))
            },
        }
    return table


def eval_states(cfg) -> list[int]:
    return list(range(N_INIT - cfg.libero.eval_states, N_INIT))


def evaluate(pool, cfg, policy_dir: Path, critic_dir: Path | None, seed: int, desc: str) -> dict[str, Any]:
    """Success on the evaluation states of every source task in the standard, position and instruction suites."""
    c = cfg.libero
    episodes, keys = [], []
    for kind in KINDS:
        for t in c.tasks:
            for i in eval_states(cfg):
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
                keys.append((kind, t))
    results = run_episodes(pool, episodes, desc)
    return success_table([(k, t, r) for (k, t), r in zip(keys, results, strict=True)])


# -- SFT ---------------------------------------------------------------------------------------------------
def run_sft(cfg, out: str | Path, *, seed: int = 0) -> dict[str, Any]:
    """Planner demonstrations → SFT → evaluation; writes ``out/policy``, ``out/demos.npz``, ``out/metrics.json``."""
    from coda.learn.policies import make_policy
    from coda.learn.train import train_sft
    from coda.sim.libero import get_task, require

    require()
    out = Path(out)
    c = cfg.libero
    obs = SuiteObservation(suite_objects(c.suite))
    episodes = [
        Episode(
            c.suite,
            lp.Variant(t, i),
            "planner",
            c.suite,
            noise=0.0 if r == 0 else c.noise,
            seed=seed * 100_003 + t * 1_009 + i * 31 + r,
            max_steps=c.max_steps,
            record=True,
        )
        for t in c.tasks
        for i in range(c.demo_states)
        for r in range(c.demo_repeats)
    ]
    t0 = time.perf_counter()
    with make_pool(cfg) as pool:
        results = run_episodes(pool, episodes, "LIBERO planner demonstrations")
        collect_s = time.perf_counter() - t0
        demos = [d for d in map(demo_from, results) if d is not None]
        if not demos:
            raise RuntimeError("libero sft: the planner solved none of the demonstration states")
        planner = {}
        for t in c.tasks:  # the clean demonstrations: the planner's own success on bundled initial states
            clean = [
                r for e, r in zip(episodes, results, strict=True) if e.variant.task == t and e.noise == 0
            ]
            planner[str(t)] = {
                "task": get_task(c.suite, t).language,
                "success": round(float(np.mean([bool(r.get("success")) for r in clean])), 4),
                "held": round(float(np.mean([bool(r.get("success_held")) for r in clean])), 4),
                "n": len(clean),
                "states": [0, c.demo_states - 1],
                "median_s": round(float(np.median([r.get("seconds", 0.0) for r in clean])), 2),
            }
        dataset = chunk_dataset(demos)
        torch.manual_seed(seed)
        policy = make_policy("regression", seed=seed, obs_dim=obs.dim)
        result = train_sft(
            policy, dataset, epochs=c.epochs, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=seed
        )
        policy.save_pretrained(out / "policy")
        np.savez_compressed(out / "demos.npz", **pack_demos(demos))
        evaluation = evaluate(pool, cfg, out / "policy", None, seed, "LIBERO SFT evaluation")
    metrics = {
        "profile": cfg.profile,
        "suite": c.suite,
        "tasks": list(c.tasks),
        "obs_dim": obs.dim,
        "planner": planner,
        "planner_success": round(float(np.mean([p["success"] for p in planner.values()])), 4),
        "demos": len(demos),
        "train_samples": len(dataset["obs"]),
        "updates": result.updates,
        "final_loss": round(result.losses[-1], 5),
        "collect_s": round(collect_s, 1),
        "train_s": round(result.train_s, 1),
        "eval": evaluation,
        "eval_states": eval_states(cfg),
    }
    write_json(out / "metrics.json", metrics)
    return metrics


# -- co-evolution rounds -----------------------------------------------------------------------------------
@dataclass
class _View:
    """A LIBERO record as `ChunkReplay.add_record` and the potential read it."""

    obs: np.ndarray  # (T+1, obs_dim)
    actions: np.ndarray
    chunk_starts: list[int]
    phases: np.ndarray  # (T+1, P): row 0 after reset
    success_step: int | None
    instruction: str
    family: str
    scene_hash: str

    @property
    def steps(self) -> int:
        return len(self.actions)

    @classmethod
    def of(cls, rec: dict[str, Any], family: str, scene_hash: str) -> _View:
        obs = np.asarray(rec["obs"], dtype=np.float32)
        steps = int(rec["steps"])
        phases = np.asarray(rec["phases"], dtype=bool).reshape(-1, len(lp.PHASES))
        phases = np.concatenate([np.zeros((1, len(lp.PHASES)), bool), phases])
        return cls(
            obs,
            np.asarray(rec["actions"], dtype=np.float32).reshape(-1, 7),
            list(rec["chunk_starts"]),
            phases,
            steps if rec["success"] else None,
            rec["instruction"],
            family,
            scene_hash,
        )


@dataclass(frozen=True)
class PhasePotential:
    """Φ(s) = weighted share of the subgoal phases reached (weights from a training program)."""

    weights: tuple[float, ...]

    def phi_along(self, view: _View) -> np.ndarray:
        w = np.asarray(self.weights, dtype=float)
        ends = [*view.chunk_starts, view.steps]
        idx = np.minimum(ends, len(view.phases) - 1)
        return view.phases[idx].astype(float) @ w / w.sum()


class LiberoRun:
    """CoDA rounds on LIBERO from an SFT directory (see the module docstring)."""

    def __init__(self, cfg, sft_dir: str | Path, out: str | Path, seed: int = 0) -> None:
        from coda.learn.critic import ChunkCritic, CriticConfig
        from coda.learn.policies import ChunkPolicy
        from coda.learn.replay import ChunkReplay
        from coda.memory.store import Memory

        self.cfg, self.c, self.seed = cfg, cfg.libero, seed
        self.sft_dir, self.out = Path(sft_dir), Path(out)
        self.policy = ChunkPolicy.from_pretrained(self.sft_dir / "policy")
        self.obs_dim = self.policy.config.obs_dim
        self.critic = ChunkCritic(CriticConfig(obs_dim=self.obs_dim, seed=seed))
        self.replay = ChunkReplay(20_000, obs_dim=self.obs_dim)
        self.memory = Memory()
        with np.load(self.sft_dir / "demos.npz") as z:
            self.rehearsal = unpack_demos(z)
        self.demos: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self.updates = 0
        self.instructions = {t: _task_language(self.c.suite, t) for t in self.c.tasks}
        self._resume()

    # -- persistence ------------------------------------------------------------------------------------
    def _round_dir(self, r: int) -> Path:
        return self.out / "rounds" / f"round-{r:04d}"

    def _resume(self) -> None:
        from coda.learn.critic import ChunkCritic
        from coda.learn.policies import ChunkPolicy
        from coda.learn.replay import ChunkReplay
        from coda.memory.store import load_snapshot

        done = sorted(
            int(p.name.split("-")[1]) for p in (self.out / "rounds").glob("round-[0-9][0-9][0-9][0-9]")
        )
        self.start = (done[-1] + 1) if done else 1
        if not done:
            return
        d = self._round_dir(done[-1])
        self.policy = ChunkPolicy.from_pretrained(d / "policy")
        self.critic = ChunkCritic.from_pretrained(d / "critic")
        self.replay = ChunkReplay.load(d / "replay")
        self.memory = load_snapshot(self.out / "memory" / f"round-{done[-1]:04d}")
        with np.load(d / "demos.npz") as z:
            self.demos = unpack_demos(z)
        state = json.loads((d / "state.json").read_text())
        self.history, self.updates = state["history"], state["updates"]

    def _save_round(self, r: int) -> None:
        from coda.memory.store import save_snapshot

        d = self._round_dir(r)
        tmp = d.with_name(d.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.policy.save_pretrained(tmp / "policy")
        self.critic.save_pretrained(tmp / "critic")
        self.replay.save(tmp / "replay")
        np.savez_compressed(tmp / "demos.npz", **pack_demos(self.demos))
        (tmp / "state.json").write_text(
            json.dumps({"history": self.history, "updates": self.updates}, indent=1)
        )
        save_snapshot(self.memory, self.out / "memory" / f"round-{r:04d}", round=r, overwrite=True)
        tmp.rename(d)

    def _rollout_policy_dir(self, r: int) -> Path:
        """The current policy (adapters merged) written for the workers."""
        from coda.learn.policies.lora import merged_copy

        where = self.out / "work" / f"round-{r:04d}"
        shutil.rmtree(where, ignore_errors=True)
        policy = merged_copy(self.policy) if self.policy.lora is not None else self.policy
        policy.save_pretrained(where / "policy")
        self.critic.save_pretrained(where / "critic")
        return where

    # -- one round -------------------------------------------------------------------------------------
    def _episode(
        self, variant: lp.Variant, actor: str, critic: str | None, r: int, record: bool = True, **kw
    ) -> Episode:
        return Episode(
            self.c.suite,
            variant,
            actor,
            self.c.suite,
            critic=critic,
            seed=self.seed * 7919 + r,
            j=self.cfg.coevolve.j,
            temperature=self.cfg.coevolve.temperature,
            max_steps=self.c.max_steps,
            record=record,
            **kw,
        )

    def _allocate(self, rng: np.random.Generator) -> list[lp.Variant]:
        """`envs_per_task` variants per task: validated modes' programs by importance, plus novel ones."""
        c, family = self.c, self.c.suite
        states = np.arange(c.demo_states, N_INIT - c.eval_states)
        variants = []
        for t in c.tasks:
            modes = [
                m
                for m in self.memory.modes(status="validated", family=family)
                if m.factor.startswith(f"task{t}:")
            ]
            n_novel = c.envs_per_task if not modes else max(1, round(c.novel_share * c.envs_per_task))
            for k in range(c.envs_per_task):
                if k < n_novel:
                    program = lp.random_program(rng, family, t)
                else:
                    p = np.array([m.importance for m in modes], dtype=float)
                    p = p / p.sum() if p.sum() > 0 else None
                    mode = modes[int(rng.choice(len(modes), p=p))]
                    program = self.memory.program(mode.generation_program_id)
                self.memory.add_program(program)
                variants.append(lp.instantiate(program, rng, self.instructions[t], int(rng.choice(states))))
        return variants

    def _pairs(self, pool, variants: list[lp.Variant], actor: str, critic: str, r: int, desc: str):
        """Targeted and control episodes of `variants` (controls shared per initial state)."""
        controls = sorted({(v.task, v.init_index) for v in variants})
        eps = [self._episode(v, actor, critic, r) for v in variants]
        eps += [self._episode(lp.Variant(t, i), actor, critic, r) for t, i in controls]
        results = run_episodes(pool, eps, desc)
        control = dict(zip(controls, results[len(variants) :], strict=True))
        return [
            (v, res, control[(v.task, v.init_index)])
            for v, res in zip(variants, results[: len(variants)], strict=True)
        ], results

    def _record(self, r: int, variant: lp.Variant, result: dict[str, Any], split: str) -> str | None:
        family = self.c.suite
        h = variant.key()
        self.memory.add_scene(
            h,
            family,
            r,
            split,
            variant.to_dict(),
            program_id=variant.program_id,
            validity="pass" if result.get("valid", True) else "rejected",
        )
        if "record" not in result:
            return None
        rid = self.memory.add_rollout(
            h,
            family,
            r,
            split,
            bool(result["success"]),
            int(result.get("phase_reached", 0)),
            int(result.get("steps", 0)),
            self.updates,
        )
        view = _View.of(result["record"], family, h)
        weights = self._phase_weights(variant)
        self.replay.add_record(view, PhasePotential(weights), gamma=self.cfg.coevolve.gamma)
        return rid

    def _split(self, variant: lp.Variant) -> str:
        """The memory's split of a generated variant: "novel" from a random program, else "targeted"."""
        source = self.memory.program(variant.program_id)["source"] if variant.program_id else "random"
        return "novel" if source == "random" else "targeted"

    def _phase_weights(self, variant: lp.Variant) -> tuple[float, ...]:
        if variant.program_id is not None:
            for m in self.memory.modes(status="validated", family=self.c.suite):
                if m.generation_program_id == variant.program_id and m.training_program_id:
                    return tuple(self.memory.program(m.training_program_id)["phase_weights"])
        return (1.0,) * len(lp.PHASES)

    def _diagnose(self, r: int, pairs, rollout_ids) -> list[tuple[str, lp.Variant]]:
        """A targeted failure whose control succeeded: the failed phase and the perturbed factor → a mode."""
        out = []
        for (v, res, ctrl), rid in zip(pairs, rollout_ids, strict=True):
            if rid is None or res.get("success") or not ctrl.get("success") or not res.get("valid", True):
                continue
            phase = lp.PHASES[min(int(res.get("phase_reached", 0)), len(lp.PHASES) - 1)]
            if v.swap is not None:
                factor = f"task{v.task}:position:swap"
                cause = (
                    f"fails to complete '{phase}' when the object trades places with its neighbour #{v.swap}"
                )
            elif v.shifts:
                role, (dx, dy) = next(iter(sorted(v.shifts.items())))
                factor = f"task{v.task}:position:{role}"
                cause = f"fails to complete '{phase}' when the {role} is moved by ({dx:+.2f}, {dy:+.2f}) m"
            else:
                factor = f"task{v.task}:instruction"
                cause = f"fails to complete '{phase}' when told: {v.instruction}"
            d = self.memory.add_diagnosis(
                rid,
                v.key(),
                self.c.suite,
                r,
                "default",
                phase,
                factor,
                cause,
                1.0,
                evidence={"variant": v.to_dict()},
            )
            mode = self.memory.assign_mode(d)
            out.append((mode, v))
        return out

    def run(self) -> dict[str, Any]:
        from coda.learn.awr import AWRConfig, PolicyUpdater, train_critic
        from coda.learn.text import get_encoder
        from coda.learn.train import UpdateCounter

        c, cc = self.c, self.cfg.coevolve
        self.out.mkdir(parents=True, exist_ok=True)
        enc = get_encoder()
        with make_pool(self.cfg) as pool:
            for r in progress(range(self.start, c.rounds + 1), desc="LIBERO rounds"):
                t0 = time.perf_counter()
                rng = np.random.default_rng([self.seed, r, 17])
                work = self._rollout_policy_dir(r)
                actor, critic = str((work / "policy").resolve()), str((work / "critic").resolve())
                critic = (
                    critic if r > 1 or self.start > 1 else None
                )  # an untrained critic would only add noise
                # 1–2. generate and roll out targeted variants with their controls
                variants = self._allocate(rng)
                pairs, _ = self._pairs(pool, variants, actor, critic, r, f"round {r}: rollouts")
                ids = [self._record(r, v, res, self._split(v)) for v, res, _ in pairs]
                for v, _, ctrl in pairs:
                    self._record(r, v.control(), ctrl, "control")
                # 3. diagnose; 4. test candidate modes on fresh pairs and validate or reject them
                diagnosed = self._diagnose(r, pairs, ids)
                candidates = {}
                for mode_id, v in diagnosed:
                    if self.memory.mode(mode_id).status == "candidate":
                        candidates.setdefault(mode_id, v)
                states = np.arange(c.demo_states, N_INIT - c.eval_states)
                tests, compiled = [], {}
                for mode_id, v in sorted(candidates.items()):
                    gen_doc, train_doc = lp.compile_for_failure(
                        v, c.suite, mode_id, self.memory.mode(mode_id).phase
                    )
                    compiled[mode_id] = (self.memory.add_program(gen_doc), self.memory.add_program(train_doc))
                    for _ in range(c.min_pairs):
                        tests.append(
                            (
                                mode_id,
                                lp.instantiate(
                                    gen_doc, rng, self.instructions[v.task], int(rng.choice(states))
                                ),
                            )
                        )
                test_pairs, _ = (
                    self._pairs(pool, [v for _, v in tests], actor, critic, r, f"round {r}: mode tests")
                    if tests
                    else ([], [])
                )
                validated = []
                for mode_id in sorted(candidates):
                    mine = [
                        (res, ctrl)
                        for (m, _), (_, res, ctrl) in zip(tests, test_pairs, strict=True)
                        if m == mode_id
                    ]
                    targeted = float(np.mean([bool(res.get("success")) for res, _ in mine]))
                    control = float(np.mean([bool(ctrl.get("success")) for _, ctrl in mine]))
                    ok = control - targeted >= c.validate_margin
                    gen_id, train_id = compiled[mode_id]
                    self.memory.set_mode_programs(
                        mode_id, generation_program_id=gen_id, training_program_id=train_id
                    )
                    self.memory.set_mode_status(
                        mode_id,
                        "validated" if ok else "rejected",
                        {"targeted": targeted, "control": control, "pairs": len(mine)},
                    )
                    self.memory.update_mode(
                        mode_id,
                        targeted,
                        len(mine),
                        self.updates,
                        r,
                        control_success=control,
                        n_control=len(mine),
                    )
                    if ok:
                        validated.append(mode_id)
                for (_m, v), (_, res, _) in zip(tests, test_pairs, strict=True):
                    self._record(r, v, res, "targeted")
                # 5. the planner certifies and demonstrates variants of the validated modes
                active = [m for m in self.memory.modes(status="validated", family=c.suite)]
                demo_eps = []
                for k in range(c.demos_per_round if active else 0):
                    m = active[k % len(active)]
                    v = lp.instantiate(
                        self.memory.program(m.generation_program_id),
                        rng,
                        self.instructions[_task_of(m.factor)],
                        int(rng.choice(states)),
                    )
                    demo_eps.append(self._episode(v, "planner", None, r, noise=c.noise if k % 2 else 0.0))
                demo_results = (
                    run_episodes(pool, demo_eps, f"round {r}: planner demonstrations") if demo_eps else []
                )
                new = [d for d in map(demo_from, demo_results) if d is not None]
                self.demos.extend(new)
                # 6. train the critic (TD) and the policy (AWR + imitation on LoRA)
                counter = UpdateCounter()
                torch.manual_seed(self.seed * 7919 + r)
                self.critic.fit_normalizer(
                    self.replay.data["obs"][: len(self.replay)]
                ) if r == 1 and self.start == 1 else None
                self.critic.train()
                losses = (
                    train_critic(
                        _td(self.critic, cc),
                        self.replay,
                        steps=c.critic_steps,
                        batch_size=c.batch_size,
                        rng=rng,
                    )
                    if len(self.replay)
                    else []
                )
                self.critic.eval()
                updater = PolicyUpdater(
                    self.policy,
                    self.critic,
                    AWRConfig(
                        lora_rank=cc.lora_rank,
                        lr=cc.lr,
                        j=cc.j,
                        beta=cc.beta,
                        temperature=cc.temperature,
                        imitation_weight=cc.imitation_weight,
                        normalize=cc.normalize_advantages,
                        seed=self.seed * 7919 + r,
                    ),
                    counter,
                )
                sources = [chunk_dataset(d) for d in (self.rehearsal, self.demos) if d]
                for _ in progress(
                    range(c.policy_updates if len(self.replay) else 0), desc=f"round {r}: policy updates"
                ):
                    sample = self.replay.sample(c.batch_size, rng)
                    batch = {
                        "obs": torch.as_tensor(sample["obs"]).float(),
                        "instr": enc.encode(list(sample["instruction"])),
                    }
                    parts = [demo_batch(ds, c.batch_size // len(sources), rng) for ds in sources]
                    imitation = {
                        "obs": torch.cat([p["obs"] for p in parts]),
                        "instr": enc.encode([t for p in parts for t in p["instr"]]),
                        "chunk": torch.cat([p["chunk"] for p in parts]),
                    }
                    updater.update(batch, imitation=imitation)
                self.policy.eval()
                self.updates += counter.value
                targeted = [bool(res.get("success")) for _, res, _ in pairs]
                controls = [bool(ctrl.get("success")) for _, _, ctrl in pairs]
                self.history.append(
                    {
                        "round": r,
                        "targeted_success": round(float(np.mean(targeted)), 4),
                        "control_success": round(float(np.mean(controls)), 4),
                        "diagnoses": len(diagnosed),
                        "modes_tested": len(candidates),
                        "modes_validated": len(validated),
                        "validated_total": len(active),
                        "new_demos": len(new),
                        "demo_attempts": len(demo_eps),
                        "policy_updates": counter.value,
                        "updates_total": self.updates,
                        "critic_loss": round(float(np.mean(losses[-10:])), 5) if losses else None,
                        "wall_s": round(time.perf_counter() - t0, 1),
                    }
                )
                self._save_round(r)
                shutil.rmtree(work, ignore_errors=True)
                write_json(self.out / "rounds.json", self.history)
            final = self._round_dir(c.rounds) if c.rounds else None
            if final is not None:
                work = self._rollout_policy_dir(c.rounds + 1)
                evaluation = evaluate(
                    pool, self.cfg, work / "policy", work / "critic", self.seed, "LIBERO final evaluation"
                )
                # the same policy without the critic's decision rule: what the updates alone did
                policy_only = evaluate(
                    pool, self.cfg, work / "policy", None, self.seed, "LIBERO policy alone"
                )
                shutil.rmtree(self.out / "work", ignore_errors=True)
            else:
                evaluation = policy_only = json.loads((self.sft_dir / "metrics.json").read_text())["eval"]
        sft = json.loads((self.sft_dir / "metrics.json").read_text())
        metrics = {
            "profile": self.cfg.profile,
            "suite": c.suite,
            "rounds": c.rounds,
            "before": sft["eval"],
            "after": evaluation,
            "after_policy_only": policy_only,
            "updates": self.updates,
            "demos": len(self.demos),
            "modes_validated": len(self.memory.modes(status="validated", family=c.suite)),
            "modes_rejected": len(self.memory.modes(status="rejected", family=c.suite)),
            "planner_success": sft["planner_success"],
        }
        write_json(self.out / "metrics.json", metrics)
        return metrics


def _td(critic, cc):
    from coda.learn.critic import CriticTD, TDConfig

    return CriticTD(critic, TDConfig(gamma=cc.gamma, temperature=cc.temperature))


def _task_of(factor: str) -> int:
    return int(factor.split(":")[0].removeprefix("task"))


def _task_language(suite: str, task: int) -> str:
    from coda.sim.libero import get_task

    return get_task(suite, task).language


def run_rounds(cfg, sft_dir: str | Path, out: str | Path, *, seed: int = 0) -> dict[str, Any]:
    from coda.sim.libero import require

    require()
    return LiberoRun(cfg, sft_dir, out, seed).run()
