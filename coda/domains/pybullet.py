"""The PyBullet task families as a co-evolution `Domain` (`coda.coevolve.domain`).

Environments are `SceneSpec` JSON strings. Workers build them (`coda.engine.jobs.generate_job`: sample,
apply a generation program or take a stored scene, check, repair, certify with the scripted planner) and roll
policies out on them (`rollout_job`). Failures are diagnosed from the rollout and the scene against the
training reference (the scenes the policy has been trained on); programs are compiled by the configured
compiler; shaping potentials come from Text2potential. This module is the one place where the loop meets
PyBullet.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from coda.engine import generate as gen
from coda.engine.jobs import generate_job, rollout_job
from coda.evaluate import evaluation_items, evaluation_summary

EVALUATION_KEYS = (
    "id_success",
    "ood_success",
    "id_se",
    "ood_se",
    "id_by_family",
    "ood_by_family",
    "ood_by_suite",
    "ood_by_family_suite",
    "eval_outcomes",
)


class FailureLog:
    """The run's executor, keeping the jobs that failed after the executor's retries (a worker that crashed
    or hung twice, an exception) with their reason until the round's metrics report them."""

    def __init__(self, executor):
        self.executor, self.failures = executor, []

    def map(self, fn, jobs, *, desc: str = "") -> list:
        results = self.executor.map(fn, jobs, desc=desc)
        self.failures += [f"{desc}: {r.error}" for r in results if not r.ok]
        return results

    def report(self) -> dict[str, Any]:
        """`failed_jobs` and `failure_reasons` (reason -> count) since the last report."""
        reasons, self.failures = Counter(self.failures), []
        return {"failed_jobs": sum(reasons.values()), "failure_reasons": dict(sorted(reasons.items()))}


def model_options(c, role: str, data_dir: Path) -> dict[str, Any]:
    """Keyword arguments of the diagnoser's or compiler's backend (`coevolve.diagnoser` / `compiler`)."""
    if role == "diagnoser":
        return {"model_path": c.vlm_model, "data_dir": str(data_dir)} if c.diagnoser == "vlm" else {}
    if c.compiler == "hf":
        return {"model_path_or_id": c.llm_model}
    if c.compiler == "openai":
        return {"base_url": c.llm_endpoint, "model": c.llm_model}
    return {}


class PyBulletDomain:
    """The PyBullet families of `cfg.data.families` over the data directory's seed scenes and suites."""

    replay_capacity = 200_000
    generator_space = True  # any program applies to any scene: generated scenes are bases, programs regions

    def __init__(self, cfg, data_dir: Path, seed: int, executor) -> None:
        from coda import data
        from coda.engine.compile import make_compiler
        from coda.engine.diagnose import TrainingReference, make_diagnoser
        from coda.learn.text2potential import Text2Potential

        self.cfg, self.c, self.seed, self.data_dir = cfg, cfg.coevolve, seed, Path(data_dir)
        c = self.c
        self.ex = FailureLog(executor)
        self.families = tuple(cfg.data.families)
        self.diagnoser = make_diagnoser(
            c.diagnoser, seed=seed, **model_options(c, "diagnoser", self.data_dir)
        )
        self.compiler = make_compiler(c.compiler, **model_options(c, "compiler", self.data_dir))
        self.t2p = Text2Potential(c.potential)
        seeds = {f: data.seed_scenes(self.data_dir, f) for f in self.families}
        n_train = cfg.sft.demos_per_family
        self._bases = {f: [s.to_json() for s in seeds[f][:n_train]] for f in self.families}
        self._base_hashes = {f: [s.hash for s in seeds[f][:n_train]] for f in self.families}
        self.reference = TrainingReference.from_scenes(s for f in self.families for s in seeds[f][:n_train])
        self.worker_cpu_s = 0.0

    # -- environments -----------------------------------------------------------------------------------
    def bases(self, family: str) -> list[str]:
        """The SFT seed scenes of the family (the first `sft.demos_per_family`); the loop adds the generated
        scenes the policy has solved (`ModeBook.bases`)."""
        return self._bases[family]

    def base_hashes(self, family: str) -> list[str]:
        return self._base_hashes[family]

    def scene_hash(self, scene: str) -> str:
        from coda.sim.scene import SceneSpec

        return SceneSpec.from_json(scene).hash

    def build(self, requests: list[gen.EnvRequest], *, desc: str) -> list[dict[str, Any] | None]:
        built = self.ex.map(generate_job, [q.job() for q in requests], desc=desc)
        self.worker_cpu_s += sum(x.value.get("cpu_s", 0.0) for x in built if x.ok)
        return [x.value if x.ok else None for x in built]

    def rehearsal(self, per_family: int) -> list[dict[str, Any]]:
        """Planner demonstrations on the first `per_family` base seed scenes: imitation keeps rehearsing the
        SFT distribution, so that updates on new environments do not erase it (every method)."""
        jobs = [
            gen.EnvRequest(f, "replay", [self.seed, 0, k], base=b).job()
            for f in self.families
            for k, b in enumerate(self._bases[f][:per_family])
        ]
        results = self.ex.map(generate_job, jobs, desc="rehearsal demonstrations")
        return [x.value["demo"] for x in results if x.ok and x.value["demo"] is not None]

    # -- the policy in the environments ------------------------------------------------------------------
    def rollout(
        self, actor: dict[str, str], scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list:
        from coda.learn.text import get_encoder
        from coda.sim.rollout import RolloutRecord
        from coda.sim.scene import SceneSpec

        # Each job carries its instruction's embedding, so that workers never load the text encoder's model
        # (seconds per worker). The loop runs on one thread, like the workers, so these are the bits a
        # worker would compute itself.
        instructions = [SceneSpec.from_json(s).task.instruction for s in scenes]
        embeddings = get_encoder().encode(instructions).numpy()
        c = self.c
        jobs = [
            {
                **actor,
                "scene": s,
                "embedding": emb,
                "max_chunks": self.cfg.sim.max_chunks,
                "j": c.j,
                "temperature": c.temperature,
                "selection": c.selection,
                "seed": seed,
                "record": record,
            }
            for s, emb in zip(scenes, embeddings)
        ]
        results = self.ex.map(rollout_job, jobs, desc=desc)
        self.worker_cpu_s += sum(x.value.get("cpu_s", 0.0) for x in results if x.ok)
        if record:
            return [RolloutRecord.from_dict(x.value) if x.ok else None for x in results]
        return [bool(x.value["success"]) if x.ok else None for x in results]

    def evaluate(self, actor: dict[str, str], *, final: bool) -> dict[str, Any]:
        """ID success on held-back seed scenes and OOD success on the four held-out suites (fixed scenes):
        the final evaluation on `eval_*` scenes per family (and suite), the other rounds' on the first
        `curve_*` of the same scenes."""
        c = self.c
        items = evaluation_items(
            self.data_dir,
            self.families,
            c.eval_id_per_family if final else c.curve_id_per_family,
            c.eval_ood_per_suite if final else c.curve_ood_per_suite,
            held_back=c.eval_id_per_family,
        )
        res = self.rollout(
            actor, [s.to_json() for _, _, s in items], record=False, desc="evaluation", seed=self.seed
        )
        return evaluation_summary(items, [bool(x) for x in res])

    def no_evaluation(self) -> dict[str, Any]:
        return {**dict.fromkeys(EVALUATION_KEYS), "n_id": 0, "n_ood": 0}

    def failures(self) -> dict[str, Any]:
        return self.ex.report()

    # -- diagnosis, programs, shaping ----------------------------------------------------------------------
    def diagnose(self, record, env: dict[str, Any]) -> dict[str, Any] | None:
        from coda.sim.scene import SceneSpec

        d = self.diagnoser.diagnose(record, SceneSpec.from_json(env["scene"]), env["trace"], self.reference)
        return None if d is None else d.to_dict()

    def observe_trained(self, scene: str) -> None:
        from coda.sim.scene import SceneSpec

        self.reference.add(SceneSpec.from_json(scene))

    def compile(self, diagnosis: dict[str, Any], scene: str):
        from coda.sim.scene import SceneSpec

        return self.compiler.compile(
            diagnosis, SceneSpec.from_json(scene), potential_variant=self.c.potential
        )

    def region(self, program: dict[str, Any], scenes: list[str]) -> dict[str, Any]:
        from coda.engine.compile import region
        from coda.sim.scene import SceneSpec

        return region(program, [SceneSpec.from_json(s) for s in scenes])

    def exhibits(self, program: dict[str, Any], scene: str) -> bool:
        from coda.sim.scene import SceneSpec

        return gen.exhibits(program, SceneSpec.from_json(scene))

    def transfer(self, program: dict[str, Any], family: str, phase: str) -> tuple[dict, str] | None:
        """Appendix A: the program lifted to `family` when it binds to the family's first base scene, and
        the mode's phase there (the mode's own when the family has it for the perturbed factor)."""
        from coda.engine.transfer import bind_roles, transfer_program
        from coda.memory.factors import PHASE_FACTORS
        from coda.sim.scene import SceneSpec

        lifted = transfer_program(program, family)
        if lifted is None or not bind_roles(
            lifted, SceneSpec.from_json(self._bases[family][0]), max_bindings=3
        ):
            return None
        phases = [p for p, fs in PHASE_FACTORS[family].items() if lifted["perturbs"] in fs]
        return lifted, phase if phase in phases else (phases or list(PHASE_FACTORS[family]))[0]

    def potential(self, record, *, program: dict | None = None, diagnosis: dict | None = None):
        from coda.learn.text2potential import compile_potential

        ctx = record.context()
        frag = None
        if program is not None and program["potential"]["variant"] == record.variant:
            frag = program["potential"]
        elif program is None and diagnosis is not None:
            frag = self.t2p.compile(diagnosis, ctx)
        if frag is None:
            frag = self.t2p.compile(
                None, ctx, family=record.family, task_variant=record.variant, instruction=record.instruction
            )
        return compile_potential(frag)

    def progress(self, program: dict[str, Any], records: list) -> list[float]:
        from coda.learn.text2potential import compile_potential

        pot = compile_potential(program["potential"])
        return [
            float(pot.phi_along(rec)[-1]) for rec in records if rec.variant == program["potential"]["variant"]
        ]

    def refine(self, program: dict[str, Any], history: list[float]) -> dict[str, Any] | None:
        new = self.t2p.refine(program["potential"], history)
        if new == program["potential"]:
            return None
        return {**{k: v for k, v in program.items() if k != "id"}, "potential": new}

    # -- checkpointed state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"reference": self.reference.to_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        from coda.engine.diagnose import TrainingReference

        self.reference = TrainingReference.from_dict(state["reference"])
