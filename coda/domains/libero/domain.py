"""LIBERO-Pro source tasks as a co-evolution `Domain` (`coda.coevolve.domain`): the same loop, the same
control experiment and the same learning as on PyBullet, with LIBERO episodes underneath.

* **Families** are the source tasks (``libero_object_task3``): a task's bundled initial states between the
  SFT demonstration states and the evaluation states are its base environments (`heldout.round_states`).
* **Environments** are `coda.domains.libero.interpret.Variant`s (JSON): a base state, or a generation program
  (a position shift of the goal object or the target, a placement at a table position, a swap with a
  neighbour, an instruction paraphrase, or a retarget: a neighbour becomes the goal object and the
  instruction names it) instantiated on one. Novel environments come from random programs. The scripted
  planner certifies each one (and its episode, with the instruction the episode was given, is the planner
  demonstration: a retargeted one teaches instruction -> object); a shift that leaves an object off the
  table or inside another is rejected, and so is an episode that would pose a held-out combination
  (`heldout.is_held_out`: never the case by construction, checked all the same).
* **Rehearsal**: every round's imitation batches draw ``libero.rehearsal_share`` of their chunks from the SFT
  demonstrations (`rehearsal`; the loop's `coevolve.trainer`).
* **Coverage**: each round records how many of its accepted environments land in the region of each
  held-out suite (`coda.domains.libero.coverage`, from the certifying episodes), as the round's ``coverage``.
* **Diagnosis** is rollout-grounded (`coda.domains.libero.diagnose`); the compiler turns a diagnosis into a
  narrow generation program around the observed difficulty and a training program weighting the failed
  phase; the potential is the weighted share of subgoal phases reached (`PhasePotential`).
* **Evaluation** (Table 2): the standard, position (``_swap``), paraphrase (``_lan``) and new-task
  (``_task``) suites, after every round on the curve's evaluation states (`heldout.curve_states`) with the
  critic's decision rule, and after the last round on all evaluation states, also with the policy alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.domains.libero import coverage
from coda.domains.libero import interpret as lp
from coda.domains.libero.diagnose import LiberoDiagnoser, LiberoReference
from coda.domains.libero.episodes import (
    OOD_KINDS,
    Episode,
    demo_from,
    evaluate,
    run_episodes,
    suite_objects,
)
from coda.engine.compile import CompileResult
from coda.sim.libero import heldout


def task_family(suite: str, task: int) -> str:
    return f"{suite}_task{task}"


def family_task(family: str) -> int:
    return int(family.rsplit("_task", 1)[1])


@dataclass
class LiberoRollout:
    """A LIBERO rollout as the loop, `ChunkReplay.add_record` and the potentials read it."""

    obs: np.ndarray  # (T+1, obs_dim)
    actions: np.ndarray  # (T, 7)
    chunk_starts: list[int]
    phases: np.ndarray  # (T+1, P): row 0 after reset
    success: bool
    phase_reached: int
    instruction: str
    family: str
    scene_hash: str
    variant: str = "default"

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def success_step(self) -> int | None:
        return self.steps if self.success else None

    @classmethod
    def of(cls, result: dict[str, Any], family: str, scene_hash: str) -> LiberoRollout:
        rec = result["record"]  # the episode's record; its `meta` (the applied shifts) is never kept
        phases = np.asarray(rec["phases"], dtype=bool).reshape(-1, len(rec["phase_names"]))
        return cls(
            np.asarray(rec["obs"], dtype=np.float32),
            np.asarray(rec["actions"], dtype=np.float32).reshape(-1, 7),
            list(rec["chunk_starts"]),
            np.concatenate([np.zeros((1, phases.shape[1]), bool), phases]),
            bool(result["success"]),
            int(result.get("phase_reached", 0)),
            rec["instruction"],
            family,
            scene_hash,
        )


@dataclass(frozen=True)
class PhasePotential:
    """Φ(s) = weighted share of the subgoal phases reached (weights from a training program)."""

    weights: tuple[float, ...]

    def phi_along(self, view: LiberoRollout) -> np.ndarray:
        w = np.asarray(self.weights, dtype=float)
        ends = [*view.chunk_starts, view.steps]
        idx = np.minimum(ends, len(view.phases) - 1)
        return view.phases[idx].astype(float) @ w / w.sum()


class LiberoDomain:
    """LIBERO-Pro's source tasks of `cfg.libero` (see the module docstring)."""

    replay_capacity = 20_000

    def __init__(self, cfg, sft_dir: Path, seed: int, pool) -> None:
        from coda.learn.demos import unpack_demos
        from coda.sim.libero import PHASES, get_task
        from coda.sim.libero.env import instruction_of

        self.cfg, self.c, self.seed, self.pool = cfg, cfg.libero, seed, pool
        c = self.c
        self.families = tuple(task_family(c.suite, t) for t in c.tasks)
        self.instructions = {t: get_task(c.suite, t).language for t in c.tasks}
        self.objects = suite_objects(c.suite)
        self.states = list(heldout.round_states(c))
        goals = {t: heldout.held_out_goal(c.suite, t) for t in c.tasks}
        self.held_out_goals = {t: g for t, g in goals.items() if g is not None}
        self.held_out_texts = {t: heldout.held_out_instructions(c.suite, t) for t in c.tasks}
        self.diagnoser = LiberoDiagnoser(self.objects, self._roles(), tuple(PHASES), self.held_out_goals)
        self.phases = tuple(PHASES)
        with np.load(Path(sft_dir) / "demos.npz", allow_pickle=False) as z:
            self.sft_demos = unpack_demos(z)
        # the SFT demonstrations carry the instruction their episodes were given (the BDDL's), not the
        # file-name one of `self.instructions`
        task_of = {instruction_of(c.suite, t): t for t in c.tasks}
        self.reference = LiberoReference()
        for d in self.sft_demos:
            if d["instruction"] in task_of:
                self.reference.add(task_of[d["instruction"]], d["instruction"], d["obs"][0], self.objects)
        unseen = [t for t in c.tasks if t not in self.reference.instructions]
        if unseen:  # the diagnoser and the coverage would read every episode of them as shifted
            raise ValueError(f"{sft_dir}: no SFT demonstration of source task(s) {unseen} to compare with")
        self.worker_cpu_s = 0.0
        self._failures: list[str] = []
        self._coverage: dict[str, Any] | None = None  # the last build's (one per round), until evaluated

    def _roles(self) -> dict[int, tuple[str, str]]:
        """Task -> (goal object, target body), from the task's goal (the basket for its contain region)."""
        from coda.sim.libero import get_task
        from coda.sim.libero.env import owning_body

        goals = {t: get_task(self.c.suite, t).goal for t in self.c.tasks}
        return {t: (g.obj, owning_body(g.target, self.objects)) for t, g in goals.items()}

    # -- environments -----------------------------------------------------------------------------------
    def bases(self, family: str) -> list[str]:
        t = family_task(family)
        return [json.dumps(lp.Variant(t, i).to_dict(), sort_keys=True) for i in self.states]

    def base_hashes(self, family: str) -> list[str]:
        return [lp.Variant(family_task(family), i).key() for i in self.states]

    def scene_hash(self, scene: str) -> str:
        return lp.Variant.from_dict(json.loads(scene)).key()

    def _variant(self, q) -> lp.Variant:
        t = family_task(q.family)
        rng = np.random.default_rng(np.random.SeedSequence(q.seed))
        avoid = self.held_out_texts[t]
        if q.split == "novel":
            init = int(rng.choice(self.states))
            program = lp.random_program(rng, q.family, t)
            return lp.instantiate(program, rng, self.instructions[t], init, avoid)
        base = lp.Variant.from_dict(json.loads(q.base))
        if q.program is not None:
            return lp.instantiate(q.program, rng, self.instructions[t], base.init_index, avoid)
        return base

    def _episode(self, variant: lp.Variant, actor: str, critic: str | None, seed: int, **kw) -> Episode:
        co = self.cfg.coevolve
        return Episode(
            self.c.suite,
            variant,
            actor,
            self.c.suite,
            critic=critic,
            seed=seed,
            j=co.j,
            temperature=co.temperature,
            max_steps=self.c.max_steps,
            **kw,
        )

    def _run(self, episodes: list[Episode], desc: str) -> list[dict[str, Any]]:
        results = run_episodes(self.pool, episodes, desc)
        self._failures += [f"{desc}: {r['error']}" for r in results if "error" in r]
        self.worker_cpu_s += sum(float(r.get("seconds", 0.0)) for r in results)
        return results

    def build(self, requests, *, desc: str) -> list[dict[str, Any] | None]:
        """Each request's variant, certified by a planner episode (its demonstration when it succeeds); an
        environment whose episode would pose a held-out combination is rejected. Tallies the round's
        coverage of the held-out suites' regions (`coverage`)."""
        variants = []
        for q in requests:
            try:
                variants.append(self._variant(q))
            except ValueError as err:  # a program that does not apply to this task
                variants.append(err)
        eps = [
            self._episode(v, "planner", None, self.seed * 7919 + k, record=True)
            for k, v in enumerate(variants)
            if isinstance(v, lp.Variant)
        ]
        results = iter(self._run(eps, desc))
        out, landed = [], []
        for q, v in zip(requests, variants):
            if not isinstance(v, lp.Variant):
                out.append(_rejected(q, [{"op": "generate", "error": str(v)}]))
                continue
            res = next(results)
            if "error" in res:
                out.append(None)
                continue
            trace = [
                {"op": "generate", "program": v.program_id},
                {"op": "certify", "planner": bool(res["success"])},
            ]
            if not res.get("valid", True):
                out.append(_rejected(q, trace))
                continue
            why = self.held_out(v, res)
            if why is not None:
                out.append(_rejected(q, [*trace, {"op": "held_out", "error": why}]))
                continue
            landed.append((q.split, self.regions(v.task, res)))
            demo = demo_from(res)
            if demo is not None:
                demo["family"] = q.family
            out.append(
                {
                    "family": q.family,
                    "split": q.split,
                    "scene": json.dumps(v.to_dict(), sort_keys=True),
                    "hash": v.key(),
                    "validity": "pass",
                    "repairs": 0,
                    "trace": trace,
                    "certified": demo is not None,
                    "demo": demo,
                }
            )
        self._coverage = coverage.tally(landed)
        return out

    def held_out(self, v: lp.Variant, res: dict[str, Any]) -> str | None:
        """Why a certifying episode poses a held-out combination (`heldout.is_held_out`), or None."""
        return heldout.is_held_out(
            res.get("goal", ""),
            res.get("instruction", ""),
            v.init_index,
            held_goal=self.held_out_goals.get(v.task),
            held_texts=self.held_out_texts[v.task],
            states=heldout.round_states(self.c),
        )

    def regions(self, task: int, res: dict[str, Any]) -> tuple[str, ...]:
        """The held-out suites' regions a certifying episode lands in (`coverage.regions`)."""
        return coverage.regions(
            task,
            np.asarray(res["record"]["obs"][0], dtype=float),
            res["instruction"],
            res["goal"],
            source_goal=self.diagnoser.roles[task][0],
            reference=self.reference,
            objects=self.objects,
            threshold=self.diagnoser.threshold,
        )

    def rehearsal(self, per_family: int) -> list[dict[str, Any]]:
        """The SFT planner demonstrations (up to `per_family` per source task)."""
        count: dict[str, int] = {}
        out = []
        for d in self.sft_demos:
            if count.get(d["instruction"], 0) < per_family:
                count[d["instruction"]] = count.get(d["instruction"], 0) + 1
                out.append(d)
        return out

    # -- the policy in the environments ------------------------------------------------------------------
    def rollout(
        self, actor: dict[str, str], scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list:
        variants = [lp.Variant.from_dict(json.loads(s)) for s in scenes]
        eps = [self._episode(v, actor["policy"], actor["critic"], seed, record=record) for v in variants]
        results = self._run(eps, desc)
        out: list[Any] = []
        for v, res in zip(variants, results):
            if "error" in res:
                out.append(None)
            elif record:
                out.append(LiberoRollout.of(res, task_family(self.c.suite, v.task), v.key()))
            else:
                out.append(bool(res["success"]))
        return out

    def evaluate(self, actor: dict[str, str], *, final: bool) -> dict[str, Any]:
        """Table 2's suites, critic-guided: after every round on the curve's evaluation states, after the last
        on all of them and with the policy alone too. With the round's ``coverage`` (the evaluation keys are
        the round's measurements that the loop records)."""
        policy, critic = Path(actor["policy"]), Path(actor["critic"]) if actor.get("critic") else None
        states = heldout.eval_states(self.c) if final else heldout.curve_states(self.c)
        table = evaluate(self.pool, self.cfg, policy, critic, self.seed, "LIBERO evaluation", states)
        alone = (
            evaluate(self.pool, self.cfg, policy, None, self.seed, "LIBERO policy alone", states)
            if final
            else None
        )
        ood = [table[k]["mean"] for k in OOD_KINDS if k in table]
        return {
            "id_success": table["standard"]["mean"],
            "ood_success": round(float(np.mean(ood)), 4) if ood else None,
            "n_id": table["standard"]["n"],
            "n_ood": sum(table[k]["n"] for k in OOD_KINDS if k in table),
            "libero": table,
            "libero_policy_only": alone,
            "coverage": self._take_coverage(),
        }

    def no_evaluation(self) -> dict[str, Any]:
        return {
            "id_success": None,
            "ood_success": None,
            "n_id": 0,
            "n_ood": 0,
            "libero": None,
            "libero_policy_only": None,
            "coverage": self._take_coverage(),
        }

    def _take_coverage(self) -> dict[str, Any] | None:
        out, self._coverage = self._coverage, None
        return out

    def failures(self) -> dict[str, Any]:
        from collections import Counter

        reasons, self._failures = Counter(self._failures), []
        return {"failed_jobs": sum(reasons.values()), "failure_reasons": dict(sorted(reasons.items()))}

    # -- diagnosis, programs, shaping ----------------------------------------------------------------------
    def diagnose(self, record: LiberoRollout, env: dict[str, Any]) -> dict[str, Any] | None:
        """From the rollout alone: its first observation, its instruction and the phases it reached (the
        variant's perturbation is not passed on)."""
        d = self.diagnoser.diagnose(
            family_task(record.family),
            record.obs[0],
            record.instruction,
            record.phase_reached,
            self.reference,
        )
        return None if d is None else {"family": record.family, **d}

    def observe_trained(self, scene: str) -> None:
        return None  # the reference is the SFT demonstrations' initial states and instructions

    def compile(self, diagnosis: dict[str, Any], scene: str) -> CompileResult:
        """`coda.domains.libero.interpret.compile_diagnosis`: programs from the diagnosis alone."""
        try:
            generation, training = lp.compile_diagnosis(diagnosis, family_task(diagnosis["family"]))
        except ValueError as err:  # ProgramError: the recreated program is malformed
            return CompileResult(None, None, 0, 0, [str(err)])
        return CompileResult(generation, training, 0, 0)

    def exhibits(self, program: dict[str, Any], scene: str) -> bool:
        """Whether a variant shows the program's difficulty: its shift (offset) or its placement (table
        position) within the program's region (10% margin), its swap or its retarget among the ranks, or its
        instruction from one of the templates."""
        v = lp.Variant.from_dict(json.loads(scene))
        if program.get("task") != v.task:
            return False
        for key in ("swap", "retarget"):
            if key in program:
                return getattr(v, key) in program[key]["ranks"]
        for key, drawn, axes in (("shift", v.shifts, ("dx", "dy")), ("place", v.places, ("x", "y"))):
            if key in program:
                s = program[key]
                xy = drawn.get(s["role"])
                return xy is not None and all(
                    lo - 0.1 * (hi - lo) <= x <= hi + 0.1 * (hi - lo)
                    for (lo, hi), x in zip((s[a] for a in axes), xy)
                )
        return v.instruction is not None and any(
            lp.matches_template(v.instruction, t) for t in program["paraphrase"]["templates"]
        )

    def transfer(self, program: dict[str, Any], family: str, phase: str) -> None:
        return None  # LIBERO programs are per source task; transfer between tasks is not implemented

    def potential(
        self, record, *, program: dict | None = None, diagnosis: dict | None = None
    ) -> PhasePotential:
        if program is not None:
            return PhasePotential(tuple(program["phase_weights"]))
        weights = [1.0] * len(self.phases)
        if diagnosis is not None and diagnosis["phase"] in self.phases:
            weights[self.phases.index(diagnosis["phase"])] = 3.0
        return PhasePotential(tuple(weights))

    def progress(self, program: dict[str, Any], records: list) -> list[float]:
        pot = PhasePotential(tuple(program["phase_weights"]))
        return [float(pot.phi_along(rec)[-1]) for rec in records]

    def refine(self, program: dict[str, Any], history: list[float]) -> None:
        return None  # phase-weight programs are not refined

    # -- checkpointed state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"reference": self.reference.to_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.reference = LiberoReference.from_dict(state["reference"])


def _rejected(q, trace: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "family": q.family,
        "split": q.split,
        "scene": None,
        "hash": None,
        "validity": "rejected",
        "repairs": 0,
        "trace": trace,
        "certified": False,
        "demo": None,
    }
