"""The co-evolution loop (paper §3.2–3.5): one round = allocate → generate → roll out → diagnose →
validate/compile → train (critic + AWR + training programs) → measure progress → refine → snapshot.

Methods share this loop and differ only by a `Method` strategy: how environments are generated, how rollouts
are shaped, and which program stores the memory keeps. Every method gets the same environment budget per
round (``2 · envs_per_family`` per family), the same planner-demonstration budget and, under fixed
scheduling, the same number of policy updates.

| method | generation | shaping | memory keeps |
|---|---|---|---|
| sft | — (SFT policy only) | — | — |
| domain_rand | seed scenes, factors re-drawn | sparse | — |
| uniform | uniform over the generator space | sparse | — |
| sr_guided | success-rate guided (PLR-style) | sparse | — |
| critic_no_memory | success-rate guided | per-rollout diagnosis (Text2potential) | — |
| coda | memory-guided (modes, programs) | training programs | generation + training programs |
| gen_store_only | memory-guided | per-rollout diagnosis | generation programs |
| train_store_only | success-rate guided | training programs | training programs |

A run directory holds ``memory/round-NNNN/`` (memory snapshots), ``rounds/round-NNNN/`` (policy adapter,
rollout policy, critic, replay, demonstrations, state), ``rounds.json`` (per-round metrics, for
``dvc plots``) and ``metrics.json``. A round is complete when its ``rounds/round-NNNN`` directory exists
(written under a temporary name and renamed); re-running on the same directory resumes after the last
complete round, and because every random choice of a round is seeded from (seed, round), the result equals
an uninterrupted run's.

Example:
    >>> cfg = load_params("params.yaml", profile="smoke")
    >>> metrics = run_method(cfg, "coda", seed=0, data_dir="data", sft_dir="runs/sft", out="runs/coda-0")
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda.engine import generate as gen
from coda.engine.jobs import generate_job, rollout_job
from coda.evaluate import evaluation_items, evaluation_summary
from coda.learn.train import chunk_dataset, demo_batch, write_json
from coda.progress import progress

ROLLOUT_SPLITS = ("novel", "targeted", "replay", "mutation")  # splits whose failures are diagnosed


@dataclass(frozen=True)
class Method:
    """A co-evolution method as strategy choices over the shared loop."""

    name: str
    generation: str  # none | memory | sr_guided | uniform | domain_rand
    shaping: str  # sparse | per_rollout | programs
    store_generation: bool = False  # memory keeps (and generation uses) generation programs
    store_training: bool = False  # memory keeps (and training uses) training programs
    frozen: bool = False  # the memory comes from another run and is only read (cross-backbone reuse)

    @property
    def uses_memory(self) -> bool:
        return self.store_generation or self.store_training

    @property
    def writes_memory(self) -> bool:
        return self.uses_memory and not self.frozen


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("sft", "none", "sparse"),
        Method("domain_rand", "domain_rand", "sparse"),
        Method("uniform", "uniform", "sparse"),
        Method("sr_guided", "sr_guided", "sparse"),
        Method("critic_no_memory", "sr_guided", "per_rollout"),
        Method("coda", "memory", "programs", store_generation=True, store_training=True),
        Method("gen_store_only", "memory", "per_rollout", store_generation=True),
        Method("train_store_only", "sr_guided", "programs", store_training=True),
        # Table 7: another backbone trained on a frozen memory of a finished run, without new generation
        Method("memory_reuse", "frozen", "programs", store_training=True, frozen=True),
    )
}


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


def git_info() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        sha, dirty = None, None
    return {"git_sha": sha, "git_dirty": dirty}


def _round_dir(out: Path, r: int) -> Path:
    return out / "rounds" / f"round-{r:04d}"


def last_complete_round(out: Path) -> int:
    """The highest round whose directory and memory snapshot are both complete (0 when none)."""
    rounds = out / "rounds"
    if not rounds.is_dir():
        return 0
    done = [
        int(p.name[6:])
        for p in rounds.iterdir()
        if p.name.startswith("round-") and (p / "state.json").exists()
    ]
    return max(done, default=0)


class Run:
    """One method, one seed, one run directory."""

    def __init__(
        self,
        cfg,
        method: Method,
        seed: int,
        data_dir: Path,
        sft_dir: Path,
        out: Path,
        executor,
        memory_from: Path | None = None,
    ):
        from coda.engine.compile import make_compiler
        from coda.engine.diagnose import TrainingReference, make_diagnoser
        from coda.learn.text2potential import Text2Potential
        from coda.memory.store import Memory

        self.cfg, self.c, self.method, self.seed = cfg, cfg.coevolve, method, seed
        self.data_dir, self.sft_dir, self.out = Path(data_dir), Path(sft_dir), Path(out)
        self.ex = FailureLog(executor)
        self.families = tuple(cfg.data.families)
        self.memory_from = memory_from
        self.memory = Memory()
        self.diagnoser = make_diagnoser(self.c.diagnoser, seed=seed, **self._model_options("diagnoser"))
        self.compiler = make_compiler(self.c.compiler, **self._model_options("compiler"))
        self.t2p = Text2Potential(self.c.potential)
        from coda import data

        self.seeds = {f: data.seed_scenes(self.data_dir, f) for f in self.families}
        n_train = cfg.sft.demos_per_family
        self.bases = {f: [s.to_json() for s in self.seeds[f][:n_train]] for f in self.families}
        self.base_hashes = {f: [s.hash for s in self.seeds[f][:n_train]] for f in self.families}
        self.base_stats: dict[str, list[int]] = {}  # base scene hash -> [control successes, control trials]
        self.reference = TrainingReference.from_scenes(
            s for f in self.families for s in self.seeds[f][:n_train]
        )
        self.sr_buffer: list[gen.SceneStats] = []
        self.demos: list[dict[str, Any]] = []
        self.rehearsal: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self.program_progress: dict[str, list[float]] = defaultdict(list)
        self.pairs: dict[str, list[list[int]]] = defaultdict(list)  # candidate mode -> [targeted, control]
        self.updates = 0
        self.critic_updates = 0
        self.round_times: dict[str, float] = {}  # wall seconds per phase of the current round
        self.worker_cpu_s = 0.0  # simulator/rollout compute in the workers (this process's share: cpu_s)
        self.tokens = {"prompt": 0, "completion": 0, "invalid": 0}
        self.policy = None
        self.critic = None
        self.replay = None

    def _model_options(self, role: str) -> dict[str, Any]:
        c = self.c
        if role == "diagnoser":
            return {"model_path": c.vlm_model, "data_dir": str(self.data_dir)} if c.diagnoser == "vlm" else {}
        if c.compiler == "hf":
            return {"model_path_or_id": c.llm_model}
        if c.compiler == "openai":
            return {"base_url": c.llm_endpoint, "model": c.llm_model}
        return {}

    # -- state ------------------------------------------------------------------------------------------
    def _fresh(self) -> None:
        from coda.learn.critic import ChunkCritic, CriticConfig
        from coda.learn.policies import ChunkPolicy
        from coda.learn.replay import ChunkReplay

        self.policy = ChunkPolicy.from_pretrained(self.sft_dir / "policy")
        self.critic = ChunkCritic(CriticConfig(seed=self.seed))
        self.replay = ChunkReplay(capacity=200_000)

    def _frozen_memory(self):
        from coda.memory.store import load_snapshot, resolve_snapshot

        if self.memory_from is None:
            raise ValueError(f"method {self.method.name!r} needs a memory to reuse (--memory PATH)")
        return load_snapshot(resolve_snapshot(self.memory_from))

    def _load(self, r: int) -> None:
        from coda.engine.diagnose import TrainingReference
        from coda.learn.critic import ChunkCritic
        from coda.learn.policies import ChunkPolicy
        from coda.learn.policies.lora import load_adapter
        from coda.learn.replay import ChunkReplay
        from coda.memory.store import load_snapshot

        d = _round_dir(self.out, r)
        self._fresh()
        if (d / "adapter").exists():
            load_adapter(self.policy, d / "adapter")
        elif (d / "policy").exists():  # finetune "full": the round's whole policy
            self.policy = ChunkPolicy.from_pretrained(d / "policy")
        self.critic = ChunkCritic.from_pretrained(d / "critic")
        self.replay = ChunkReplay.load(d / "replay")
        self.memory = load_snapshot(self.out / "memory" / f"round-{r:04d}")
        state = json.loads((d / "state.json").read_text())
        self.updates, self.critic_updates = state["updates"], state["critic_updates"]
        self.tokens = state["tokens"]
        self.reference = TrainingReference.from_dict(state["reference"])
        self.sr_buffer = [gen.SceneStats(**s) for s in state["sr_buffer"]]
        self.program_progress = defaultdict(list, state["program_progress"])
        self.pairs = defaultdict(list, state["pairs"])
        self.base_stats = state["base_stats"]
        self.history = (
            json.loads((self.out / "rounds.json").read_text())[:r]
            if (self.out / "rounds.json").exists()
            else []
        )
        with np.load(d / "demos.npz", allow_pickle=False) as z:
            self.demos = _unpack_demos(z)
        with np.load(d / "rehearsal.npz", allow_pickle=False) as z:
            self.rehearsal = _unpack_demos(z)

    def _save(self, r: int, metrics: dict[str, Any]) -> None:
        from coda.memory.store import save_snapshot

        t0 = time.perf_counter()
        save_snapshot(
            self.memory,
            self.out / "memory" / f"round-{r:04d}",
            round=r,
            extra={"method": self.method.name, "seed": self.seed, "profile": self.cfg.profile},
            overwrite=True,
        )
        final = _round_dir(self.out, r)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.policy.lora is not None:
            self.policy.save_adapter(tmp / "adapter")
        elif self.updates:  # finetune "full": the whole policy
            self.policy.save_pretrained(tmp / "policy")
        self.critic.save_pretrained(tmp / "critic")
        self.replay.save(tmp / "replay")
        np.savez(tmp / "demos.npz", **_pack_demos(self.demos))
        np.savez(tmp / "rehearsal.npz", **_pack_demos(self.rehearsal))
        state = {
            "round": r,
            "updates": self.updates,
            "critic_updates": self.critic_updates,
            "tokens": self.tokens,
            "reference": self.reference.to_dict(),
            "sr_buffer": [s.__dict__ for s in self.sr_buffer],
            "program_progress": dict(self.program_progress),
            "pairs": dict(self.pairs),
            "base_stats": self.base_stats,
            "metrics": metrics,
        }
        metrics.setdefault("time_s", {})["snapshot"] = round(time.perf_counter() - t0, 2)
        (tmp / "state.json").write_text(json.dumps(state, sort_keys=True) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        write_json(self.out / "rounds.json", self.history)

    # -- the actor the workers load ---------------------------------------------------------------------
    def _publish(self, tag: str) -> dict[str, str]:
        """Write the current rollout policy (adapters merged) and critic for the workers, under a fresh
        directory name: workers cache the actor by path, so a new version must never reuse one."""
        from coda.learn.policies.lora import merged_copy

        shutil.rmtree(self.out / "actor", ignore_errors=True)
        where = self.out / "actor" / tag
        policy = merged_copy(self.policy) if self.policy.lora is not None else self.policy
        policy.save_pretrained(where / "policy")
        self.critic.save_pretrained(where / "critic")
        return {"policy": str((where / "policy").resolve()), "critic": str((where / "critic").resolve())}

    def _rollouts(
        self, actor: dict[str, str], scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list:
        from coda.learn.text import get_encoder
        from coda.sim.scene import SceneSpec

        # Each job carries its instruction's embedding, so that workers never load the text encoder's model
        # (seconds per worker). `run_method` runs on one thread, like the workers, so these are the bits a
        # worker would compute itself.
        instructions = [SceneSpec.from_json(s).task.instruction for s in scenes]
        embeddings = get_encoder().encode(instructions).numpy()
        jobs = [
            {
                **actor,
                "scene": s,
                "embedding": emb,
                "max_chunks": self.cfg.sim.max_chunks,
                "j": self.c.j,
                "temperature": self.c.temperature,
                "selection": self.c.selection,
                "seed": seed,
                "record": record,
            }
            for s, emb in zip(scenes, embeddings)
        ]
        results = self.ex.map(rollout_job, jobs, desc=desc)
        self.worker_cpu_s += sum(x.value.get("cpu_s", 0.0) for x in results if x.ok)
        return results

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "run.json").write_text(
            json.dumps(
                {
                    "method": self.method.name,
                    "seed": self.seed,
                    "profile": self.cfg.profile,
                    "coevolve": {k: v for k, v in self.c.__dict__.items()},
                    **git_info(),
                },
                indent=1,
                default=list,
            )
            + "\n"
        )
        if self.method.generation == "none":
            return self._run_sft_only()
        start = last_complete_round(self.out)
        if start:
            self._load(start)
        else:
            self._fresh()
            self._collect_rehearsal()
            if self.method.frozen:
                self.memory = self._frozen_memory()
        for r in range(start + 1, self.c.rounds + 1):
            metrics = self.round(r)
            self.history.append(metrics)
            self._save(r, metrics)
        final = dict(self.history[-1]) if self.history else {}
        final.update({"method": self.method.name, "seed": self.seed, "profile": self.cfg.profile})
        write_json(self.out / "metrics.json", final)
        return final

    def _run_sft_only(self) -> dict[str, Any]:
        from coda.learn.policies import ChunkPolicy

        actor = {"policy": str((self.sft_dir / "policy").resolve()), "critic": None}
        t0 = time.perf_counter()
        metrics = {
            "round": 0,
            "updates": 0,
            **self.evaluate(actor),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        ChunkPolicy.from_pretrained(self.sft_dir / "policy")  # fail loudly on a broken checkpoint
        self.history = [metrics]
        write_json(self.out / "rounds.json", self.history)
        final = {**metrics, "method": self.method.name, "seed": self.seed, "profile": self.cfg.profile}
        write_json(self.out / "metrics.json", final)
        return final

    def requests(self, r: int, rng: np.random.Generator) -> list[gen.EnvRequest]:
        c, m = self.c, self.method
        out: list[gen.EnvRequest] = []
        if m.generation == "memory" and c.transfer and r > 1:
            self._transfer_programs(r)
        for f in self.families:
            if m.generation == "memory":
                modes = self._mode_views(f)
                stored = self._stored_scenes(f)
                out += gen.memory_requests(
                    f,
                    c.envs_per_family,
                    modes,
                    self.bases[f],
                    stored,
                    seed=self.seed,
                    round_=r,
                    novel_share=c.novel_share,
                    replay_share=c.replay_share,
                    band=c.success_band,
                    rng=rng,
                    min_pairs=c.min_pairs,
                    base_weights=self._base_weights(f),
                )
            elif m.generation == "sr_guided":
                out += gen.sr_guided_requests(
                    f,
                    c.envs_per_family,
                    self.sr_buffer,
                    seed=self.seed,
                    round_=r,
                    novel_share=c.novel_share,
                    replay_share=c.replay_share,
                    rng=rng,
                )
            elif m.generation == "frozen":
                out += self._frozen_requests(f, r, rng)
            elif m.generation == "uniform":
                out += gen.uniform_requests(f, c.envs_per_family, seed=self.seed, round_=r)
            elif m.generation == "domain_rand":
                out += gen.domain_rand_requests(
                    f, c.envs_per_family, self.bases[f], seed=self.seed, round_=r, rng=rng
                )
        return out

    def _transfer_programs(self, r: int) -> None:
        """Appendix A: lift every validated generation program to the other families; a lifted program that
        binds to the family's base scenes opens a candidate mode there, kept only if its control experiment
        validates it with variant success inside the success band (see `validate`)."""
        from coda.engine.factors import PHASE_FACTORS
        from coda.memory.programs import bind_roles, transfer_program
        from coda.sim.scene import SceneSpec

        stored = self.memory.programs("generation")
        for mode in self.memory.modes("validated"):
            source = stored.get(mode.generation_program_id)
            if source is None or source.get("source") == "transfer":
                continue  # no chains of transfers
            for f in self.families:
                if f == mode.family:
                    continue
                lifted = transfer_program(source, f)
                if lifted is None or lifted["id"] in stored:
                    continue
                if not bind_roles(lifted, SceneSpec.from_json(self.bases[f][0]), max_bindings=3):
                    continue
                phases = [p for p, fs in PHASE_FACTORS[f].items() if lifted["perturbs"] in fs]
                phase = mode.phase if mode.phase in phases else (phases or list(PHASE_FACTORS[f]))[0]
                self.memory.add_mode(
                    f,
                    phase,
                    lifted["perturbs"],
                    f"transferred from {mode.mode_id}: {mode.cause}",
                    r,
                    generation_program_id=self.memory.add_program(lifted),
                )
                stored[lifted["id"]] = lifted

    def _base_weights(self, family: str) -> list[float]:
        """Estimated success of the policy on each base scene, (s + 1) / (n + 2) from earlier controls."""
        out = []
        for b in self.base_hashes[family]:
            s, n = self.base_stats.get(b, (0, 0))
            out.append((s + 1) / (n + 2))
        return out

    def _frozen_requests(self, family: str, r: int, rng: np.random.Generator) -> list[gen.EnvRequest]:
        """Cross-backbone reuse: replay the frozen memory's environments, no new generation. Targeted
        variants of validated modes are drawn in proportion to the modes' importance (+ a floor), the rest of
        the budget from the memory's other generated scenes."""
        scenes = [s for s in self.memory.rows("scenes") if s["family"] == family and s["split"] != "control"]
        if not scenes:
            return []
        by_program = {
            m.generation_program_id: m for m in self.memory.modes("validated") if m.generation_program_id
        }
        weights = np.array(
            [
                1.0 + 4.0 * (by_program[s["program_id"]].importance + 0.25)
                if s["program_id"] in by_program
                else 1.0
                for s in scenes
            ]
        )
        picks = rng.choice(len(scenes), size=2 * self.c.envs_per_family, p=weights / weights.sum())
        out = []
        for k, i in enumerate(picks.tolist()):
            s = scenes[i]
            mode = by_program.get(s["program_id"])
            out.append(
                gen.EnvRequest(
                    family,
                    "replay",
                    gen.seed_for(self.seed, r, family, "replay", k),
                    base=s["spec_json"],
                    mode_id=mode.mode_id if mode else None,
                    program_id=s["program_id"],
                )
            )
        return out

    def _mode_views(self, family: str) -> list[gen.ModeView]:
        views = []
        for mode in self.memory.modes():
            if mode.family != family or mode.status not in ("candidate", "validated"):
                continue
            if not mode.generation_program_id:
                continue
            views.append(
                gen.ModeView(
                    mode.mode_id,
                    family,
                    mode.status,
                    0.5 if mode.hardness is None else mode.hardness,  # untested: assume the middle
                    mode.learning_progress,
                    self.memory.program(mode.generation_program_id),
                    mode.factor,
                    mode.n_diagnoses,
                )
            )
        return views

    def _stored_scenes(self, family: str) -> list[str]:
        """Stored environments worth replaying: generated scenes on which the policy failed."""
        table = self.memory.table("rollouts")
        if table.empty:
            return []
        failed = set(
            table[(table.family == family) & (~table.success) & (table.split != "control")].scene_hash
        )
        scenes = self.memory.table("scenes")
        rows = scenes[scenes.scene_hash.isin(failed)].drop_duplicates("scene_hash")
        return sorted(rows.spec_json.tolist())

    def round(self, r: int) -> dict[str, Any]:
        from coda.sim.rollout import RolloutRecord
        from coda.sim.scene import SceneSpec

        c = self.c
        t0, cpu0 = time.perf_counter(), time.process_time()
        self.round_worker0 = self.worker_cpu_s
        rng = np.random.default_rng([self.seed, r, 0])
        clock = _Clock()
        # 1-2. allocate and generate
        requests = self.requests(r, rng)
        for slot, q in enumerate(requests):
            q.slot = slot
        built = self.ex.map(generate_job, [q.job() for q in requests], desc=f"round {r}: generate")
        self.worker_cpu_s += sum(x.value.get("cpu_s", 0.0) for x in built if x.ok)
        envs = []
        for q, res in zip(requests, built):
            value = res.value if res.ok else None
            if value is None:
                continue
            if self.method.writes_memory and value["scene"] is not None:
                if q.program is not None:  # lineage: the program that made the scene stays in memory
                    self.memory.add_program(q.program)
                self.memory.add_scene(
                    value["hash"],
                    q.family,
                    r,
                    q.split,
                    value["scene"],
                    program_id=q.program_id or (q.program or {}).get("id"),
                    base_hash=_hash_of(q.base),
                    validity=value["validity"],
                    repairs=value["repairs"],
                    trace=value["trace"],
                    certified=value["certified"],
                )
            envs.append((q, value))
        valid = [(q, v) for q, v in envs if v["scene"] is not None]
        clock.lap("generate_certify")
        # 3. roll out the current policy (critic-guided)
        actor = self._publish(f"round-{r:04d}-rollouts")
        results = self._rollouts(
            actor,
            [v["scene"] for _, v in valid],
            record=True,
            desc=f"round {r}: rollouts",
            seed=self.seed * 1000 + r,
        )
        rollouts = []
        for (q, v), res in zip(valid, results):
            if res.ok:
                rollouts.append((q, v, RolloutRecord.from_dict(res.value)))
        for q, v, rec in rollouts:
            if self.method.writes_memory:
                self.memory.add_rollout(
                    rec.scene_hash,
                    q.family,
                    r,
                    q.split,
                    rec.success,
                    rec.phase_reached,
                    rec.steps,
                    self.updates,
                    rollout_id=_rollout_id(r, q, rec),
                )
            if q.split == "control":
                stats = self.base_stats.setdefault(rec.scene_hash, [0, 0])
                stats[0] += int(rec.success)
                stats[1] += 1
            if self.method.generation == "sr_guided" and q.split != "control":
                self._sr_record(v["scene"], q.family, rec.success)
        clock.lap("rollouts")
        # 4. diagnose failures, cluster into modes, compile candidate programs
        diagnoses = self.diagnose(r, rollouts)
        # validate modes by their control experiments
        validation = self.validate(r, rollouts) if self.method.store_generation else {}
        if self.method.writes_memory and not self.method.store_generation:
            self._validate_by_recurrence(r)
        # 5. potentials -> replay
        for q, _, rec in rollouts:
            self.replay.add_record(rec, potential=self.potential_for(q, rec, diagnoses), gamma=c.gamma)
        # demonstrations: the same budget for every method
        self._collect_demos(rollouts)
        for _, v, _ in rollouts:  # what the policy is now trained on (the diagnoser's reference)
            self.reference.add(SceneSpec.from_json(v["scene"]))
        clock.lap("diagnose_validate")
        # 6. train: critic, then AWR (+ imitation) on the LoRA adapters or all weights
        round_updates, in_band_track = self.train(r, rollouts, clock)
        # 7. measure progress of training programs and refine the stalled ones
        refined = self.refine(r, rollouts)
        clock.lap("refine")
        actor = self._publish(f"round-{r:04d}-final")
        evaluation = self.evaluate(actor, final=r == c.rounds) if self.evaluates(r) else self.no_evaluation()
        clock.lap("evaluation")
        self.round_times = clock.laps
        return self._metrics(
            r,
            envs,
            rollouts,
            diagnoses,
            validation,
            round_updates,
            in_band_track,
            refined,
            evaluation,
            time.perf_counter() - t0,
            time.process_time() - cpu0,
        )

    def _sr_record(self, scene: str, family: str, success: bool) -> None:
        for s in self.sr_buffer:
            if s.scene == scene:
                s.successes += int(success)
                s.trials += 1
                s.history.append(int(success))
                return
        self.sr_buffer.append(gen.SceneStats(scene, family, int(success), 1, [int(success)]))
        self.sr_buffer.sort(key=lambda s: (s.family, s.scene))

    # -- diagnosis and modes ------------------------------------------------------------------------------
    def diagnose(self, r: int, rollouts: list) -> dict[str, dict]:
        """Diagnose every failed rollout (controls excluded); returns rollout key -> diagnosis dict."""
        from coda.sim.scene import SceneSpec

        out: dict[str, dict] = {}
        if self.method.frozen or (self.method.shaping == "sparse" and not self.method.uses_memory):
            return out
        touched: set[str] = set()
        for q, v, rec in progress(rollouts, desc=f"round {r}: diagnose"):
            if rec.success or q.split not in ROLLOUT_SPLITS:
                continue
            scene = SceneSpec.from_json(v["scene"])
            d = self.diagnoser.diagnose(rec, scene, v["trace"], self.reference)
            if d is None:
                continue
            d = d.to_dict()
            key = _key(q, rec)
            out[key] = d
            if not self.method.writes_memory:
                continue
            truth = q.truth_factor if q.split == "targeted" else None
            did = self.memory.add_diagnosis(
                _rollout_id(r, q, rec),
                rec.scene_hash,
                q.family,
                r,
                d["variant"],
                d["phase"],
                d["factor"],
                d["cause"],
                d["confidence"],
                evidence=list(d["evidence_steps"]),
                truth_factor=truth,
            )
            mode_id = self.memory.assign_mode(did)
            d["mode_id"] = mode_id
            mode = self.memory.mode(mode_id)
            compiled = mode.generation_program_id or mode.training_program_id
            if mode.status == "candidate" and not compiled:
                self._compile_mode(mode_id, d, scene)
            touched.add(mode_id)
        for mode_id in sorted(touched):  # a diagnosis joining an already decided mode is decided with it
            self._settle_diagnoses(mode_id)
        return out

    def _compile_mode(self, mode_id: str, diagnosis: dict, scene) -> None:
        """A new candidate mode gets its generation program: the hypothesis its control experiment tests.
        (Its training program is compiled only once the mode is validated, `_compile_training`.)"""
        if not self.method.store_generation:
            return
        res = self._compile(diagnosis, scene)
        if res.generation is None:
            self.memory.set_mode_status(
                mode_id, "rejected", {"reason": "no valid generation program", "errors": res.errors}
            )
            return
        self.memory.set_mode_programs(mode_id, generation_program_id=self.memory.add_program(res.generation))

    def _settle_diagnoses(self, mode_id: str) -> None:
        """Decide the open diagnoses of a decided mode: a rejected mode rejects them; a validated mode confirms
        those whose failing scene exhibits the validated difficulty (`generate.exhibits`) and rejects the
        others (their failure has another cause than the one the control experiment confirmed)."""
        from coda.sim.scene import SceneSpec

        mode = self.memory.mode(mode_id)
        if mode.status not in ("validated", "rejected"):
            return
        program = self.memory.program(mode.generation_program_id) if mode.generation_program_id else None
        scenes = (
            {row["scene_hash"]: row["spec_json"] for row in self.memory.rows("scenes")} if program else {}
        )
        specs = {}
        for d in self.memory.rows("diagnoses"):
            if d["mode_id"] != mode_id:
                continue
            if mode.status == "rejected":
                status = "rejected"
            elif program is None:
                status = "validated"
            else:
                if d["scene_hash"] not in specs:
                    specs[d["scene_hash"]] = SceneSpec.from_json(scenes[d["scene_hash"]])
                status = "validated" if gen.exhibits(program, specs[d["scene_hash"]]) else "rejected"
            if d["status"] != status:
                self.memory.set_diagnosis_status(d["diagnosis_id"], status)

    def _compile(self, diagnosis: dict, scene):
        res = self.compiler.compile(diagnosis, scene, potential_variant=self.c.potential)
        self.tokens["prompt"] += res.prompt_tokens
        self.tokens["completion"] += res.completion_tokens
        self.tokens["invalid"] = self.tokens.get("invalid", 0) + len(res.errors)
        return res

    def _compile_training(self, mode_id: str) -> None:
        """Compile a validated mode's training program from its first diagnosis and the failing scene."""
        from coda.sim.scene import SceneSpec

        if not self.method.store_training or self.memory.mode(mode_id).training_program_id:
            return
        rows = [d for d in self.memory.rows("diagnoses") if d["mode_id"] == mode_id]
        first = min(rows, key=lambda d: (d["round"], d["diagnosis_id"]))
        scene = next(s for s in self.memory.rows("scenes") if s["scene_hash"] == first["scene_hash"])
        diagnosis = {k: first[k] for k in ("family", "variant", "phase", "factor", "cause", "confidence")}
        diagnosis["evidence_steps"] = json.loads(first["evidence_json"]) if first["evidence_json"] else []
        res = self._compile(diagnosis, SceneSpec.from_json(scene["spec_json"]))
        if res.training is not None:
            self.memory.set_mode_programs(mode_id, training_program_id=self.memory.add_program(res.training))

    def validate(self, r: int, rollouts: list) -> dict[str, dict]:
        """Control experiments: per mode tested this round, paired targeted vs control outcomes."""
        pairs: dict[str, dict[int, dict[str, bool]]] = defaultdict(dict)
        for q, _, rec in rollouts:
            if q.split in ("targeted", "control"):
                pairs[q.mode_id].setdefault(q.pair, {})[q.split] = rec.success
        out = {}
        for mode_id in sorted(pairs):
            complete = [p for p in pairs[mode_id].values() if len(p) == 2]
            t = [p["targeted"] for p in complete]
            ctl = [p["control"] for p in complete]
            mode = self.memory.mode(mode_id)
            if mode.status == "candidate":  # a candidate's test accumulates its pairs over rounds
                self.pairs[mode_id] += [[int(a), int(b)] for a, b in zip(t, ctl)]
                history = self.pairs[mode_id]
            else:
                history = [[int(a), int(b)] for a, b in zip(t, ctl)]
            test = gen.validate_mode(
                [bool(x[0]) for x in history],
                [bool(x[1]) for x in history],
                margin=self.c.validate_margin,
                min_pairs=self.c.min_pairs,
                alpha=self.c.validate_alpha,
            )
            program = self.memory.program(mode.generation_program_id) if mode.generation_program_id else {}
            lo, hi = self.c.success_band
            if program.get("source") == "transfer" and test["decision"] == "validated":
                if not lo <= test["targeted_success"] <= hi:  # Appendix A: variants must stay in the band
                    test = {
                        **test,
                        "decision": "rejected",
                        "reason": "transferred variant success outside the band",
                    }
            if mode.status == "candidate" and test["decision"] != "undecided":
                self.memory.set_mode_status(mode_id, test["decision"], test)
                self._settle_diagnoses(mode_id)
                if test["decision"] == "validated":
                    self._compile_training(mode_id)
            if t:
                self.memory.update_mode(
                    mode_id,
                    success=float(np.mean(t)),
                    n=len(t),
                    policy_updates=self.updates,
                    round=r,
                    control_success=float(np.mean(ctl)),
                    n_control=len(ctl),
                    band=self.c.success_band,
                )
            out[mode_id] = test
        return out

    def _validate_by_recurrence(self, r: int) -> None:
        """Without generation programs there is no control experiment: a mode counts as validated once it
        recurs (at least `min_pairs` diagnoses)."""
        for mode in self.memory.modes():
            if mode.status == "candidate" and mode.n_diagnoses >= self.c.min_pairs:
                self.memory.set_mode_status(mode.mode_id, "validated", {"rule": "recurrence", "round": r})
                self._compile_training(mode.mode_id)

    # -- shaping ------------------------------------------------------------------------------------------
    def potential_for(self, q, rec, diagnoses: dict[str, dict]):
        from coda.learn.text2potential import compile_potential

        shaping = self.method.shaping
        if shaping == "sparse":
            return None
        ctx = rec.context()
        d = diagnoses.get(_key(q, rec))
        frag = None
        if shaping == "programs":
            mode_id = q.mode_id or (d or {}).get("mode_id")
            program = self._training_program(mode_id)
            if program is not None and program["potential"]["variant"] == rec.variant:
                frag = program["potential"]
        elif d is not None:  # per_rollout
            frag = self.t2p.compile(d, ctx)
        if frag is None:
            frag = self.t2p.compile(
                None, ctx, family=rec.family, task_variant=rec.variant, instruction=rec.instruction
            )
        return compile_potential(frag)

    def _training_program(self, mode_id: str | None) -> dict | None:
        if not mode_id or not self.method.store_training:
            return None
        mode = self.memory.mode(mode_id)
        if mode is None or mode.status != "validated" or not mode.training_program_id:
            return None
        return self.memory.program(mode.training_program_id)

    # -- demonstrations -------------------------------------------------------------------------------------
    def _collect_demos(self, rollouts: list) -> None:
        """`demos_per_family` planner demonstrations per family: scenes the policy failed first (targeted
        scenes of validated modes, weighted by their training programs' planner_demos), then the others."""
        for f in self.families:
            cands = [
                (q, v, rec)
                for q, v, rec in rollouts
                if q.family == f and v["demo"] is not None and q.split != "control"
            ]

            def priority(item):
                q, v, rec = item
                program = self._training_program(q.mode_id) if q.split == "targeted" else None
                extra = program["tools"]["planner_demos"] if program else 0
                return (rec.success, -extra, v["hash"])

            cands.sort(key=priority)
            for _q, v, _rec in cands[: self.c.demos_per_family]:
                self.demos.append(v["demo"])

    # -- training -------------------------------------------------------------------------------------------
    def _imitation_weight(self) -> float:
        if not self.method.store_training:
            return self.c.imitation_weight
        programs = [self._training_program(m.mode_id) for m in self.memory.modes()]
        tools = [p["tools"] for p in programs if p is not None]
        if not tools:
            return self.c.imitation_weight
        ratio = np.mean([t["imitation_weight"] / max(t["critic_weight"], 1e-3) for t in tools])
        return float(self.c.imitation_weight * ratio)

    def train(self, r: int, rollouts: list, clock: _Clock | None = None) -> tuple[int, list[dict]]:
        from coda.learn.awr import AWRConfig, PolicyUpdater, policy_candidates, train_critic
        from coda.learn.critic import CriticTD, TDConfig
        from coda.learn.text import get_encoder

        c = self.c
        torch.manual_seed(self.seed * 7919 + r)
        rng = np.random.default_rng([self.seed, r, 1])
        if r == 1:  # later rounds keep the first round's normaliser (saved with the critic's weights)
            self.critic.fit_normalizer(self.replay.gather(np.arange(len(self.replay)))["obs"])
        td = CriticTD(self.critic, TDConfig(gamma=c.gamma, temperature=c.temperature))
        gen_t = torch.Generator().manual_seed(self.seed * 7919 + r)
        self.policy.eval()
        losses = train_critic(
            td,
            self.replay,
            steps=c.critic_steps,
            batch_size=c.batch_size,
            rng=rng,
            candidates_fn=policy_candidates(self.policy, c.j, gen_t),
        )
        self.critic_updates += c.critic_steps
        self.critic.eval()
        if clock is not None:
            clock.lap("critic")
        updater = PolicyUpdater(
            self.policy,
            self.critic,
            AWRConfig(
                finetune=c.finetune,
                lora_rank=c.lora_rank,
                lr=c.lr,
                j=c.j,
                beta=c.beta,
                temperature=c.temperature,
                imitation_weight=self._imitation_weight(),
                awr_weight=c.awr_weight,
                normalize=c.normalize_advantages,
                seed=self.seed * 7919 + r,
            ),
        )
        sources = [
            (chunk_dataset(d), share)
            for d, share in ((self.rehearsal, c.rehearsal_share), (self.demos, 1 - c.rehearsal_share))
            if d and share > 0
        ]
        total = sum(share for _, share in sources)
        enc = get_encoder()
        adaptive = c.scheduling == "adaptive" and self.method.store_generation
        track: list[dict] = []
        done = 0
        bar = progress(range(c.policy_updates), desc=f"round {r}: policy updates")
        for _ in bar:
            sample = self.replay.sample(c.batch_size, rng)
            batch = {
                "obs": torch.as_tensor(sample["obs"]).float(),
                "instr": enc.encode(list(sample["instruction"])),
            }
            imitation = None
            if (
                sources
            ):  # rehearsal (seed scenes) and this run's demonstrations, `rehearsal_share` of the batch
                parts = [demo_batch(ds, round(c.batch_size * share / total), rng) for ds, share in sources]
                imitation = {
                    "obs": torch.cat([p["obs"] for p in parts]),
                    "instr": enc.encode([t for p in parts for t in p["instr"]]),
                    "chunk": torch.cat([p["chunk"] for p in parts]),
                }
            updater.update(batch, imitation=imitation)
            done += 1
            self.updates += 1
            if adaptive and done % c.check_every == 0 and done < c.policy_updates:
                track.append(self._in_band_check(r, rollouts, done))
                if self._round_over(track):
                    break
        self.policy.eval()
        self.critic_loss = float(np.mean(losses[-10:])) if losses else None
        if clock is not None:
            clock.lap("policy_updates")
        return done, track

    def _collect_rehearsal(self) -> None:
        """Planner demonstrations on the first `rehearsal_per_family` base seed scenes: imitation keeps
        rehearsing the SFT distribution, so that updates on new environments do not erase it (every method)."""
        jobs = [
            gen.EnvRequest(f, "replay", [self.seed, 0, k], base=b).job()
            for f in self.families
            for k, b in enumerate(self.bases[f][: self.c.rehearsal_per_family])
        ]
        results = self.ex.map(generate_job, jobs, desc="rehearsal demonstrations")
        self.rehearsal = [x.value["demo"] for x in results if x.ok and x.value["demo"] is not None]

    def _in_band_check(self, r: int, rollouts: list, done: int) -> dict:
        """Adaptive scheduling's measurement: success of the current policy on this round's targeted scenes
        of the modes whose success is in the band."""
        lo, hi = self.c.success_band
        per_mode: dict[str, list[tuple[str, bool]]] = defaultdict(list)
        for q, v, rec in rollouts:
            if q.split == "targeted":
                per_mode[q.mode_id].append((v["scene"], rec.success))
        in_band = {m: s for m, s in per_mode.items() if lo <= np.mean([x[1] for x in s]) <= hi}
        scenes = [s for m in sorted(in_band) for s, _ in in_band[m]][:16]
        if not scenes:
            return {"updates": done, "modes_in_band": 0, "in_band_success": None}
        actor = self._publish(f"round-{r:04d}-check-{done}")
        res = self._rollouts(
            actor, scenes, record=False, desc=f"round {r}: in-band check", seed=self.seed * 1000 + r
        )
        success = float(np.mean([x.value["success"] for x in res if x.ok])) if res else 0.0
        modes_now = 0
        k = 0
        for m in sorted(in_band):
            n = len(in_band[m])
            outcomes = [x.value["success"] for x in res[k : k + n] if x.ok]
            k += n
            if outcomes and lo <= np.mean(outcomes) <= hi:
                modes_now += 1
        return {"updates": done, "modes_in_band": modes_now, "in_band_success": success}

    def _round_over(self, track: list[dict]) -> bool:
        """Paper rule: a new round starts when fewer than `min_modes_in_band` modes remain in the band, or
        in-band success moved less than `plateau_points` over the last `plateau_updates` updates."""
        c = self.c
        last = track[-1]
        if last["modes_in_band"] < c.min_modes_in_band:
            return True
        window = [t for t in track if t["updates"] >= last["updates"] - c.plateau_updates]
        if len(window) >= 2 and last["updates"] - window[0]["updates"] >= c.plateau_updates:
            return abs(last["in_band_success"] - window[0]["in_band_success"]) < c.plateau_points
        return False

    # -- progress and refinement ----------------------------------------------------------------------------
    def refine(self, r: int, rollouts: list) -> int:
        """Measured progress of each training program (mean end-of-rollout Φ of its targeted rollouts, in the
        program's stage units); stalled programs are refined (Text2potential `refine`)."""
        from coda.learn.text2potential import compile_potential

        if not self.method.writes_memory or not self.method.store_training:
            return 0
        by_mode: dict[str, list] = defaultdict(list)
        for q, _, rec in rollouts:
            if q.split == "targeted":
                by_mode[q.mode_id].append(rec)
        refined = 0
        for mode_id in sorted(by_mode):
            program = self._training_program(mode_id)
            if program is None:
                continue
            pot = compile_potential(program["potential"])
            values = [
                float(pot.phi_along(rec)[-1])
                for rec in by_mode[mode_id]
                if rec.variant == program["potential"]["variant"]
            ]
            if not values:
                continue
            # progress is kept per mode, so a refined program continues its predecessor's history
            self.program_progress[mode_id].append(float(np.mean(values)))
            self.memory.add_program_stats(
                program["id"],
                r,
                self.updates,
                float(np.mean(values)),
                float(np.mean([rec.success for rec in by_mode[mode_id]])),
                len(values),
            )
            new = self.t2p.refine(program["potential"], self.program_progress[mode_id])
            if new != program["potential"]:
                doc = {k: v for k, v in program.items() if k != "id"}
                self.memory.set_mode_programs(
                    mode_id, training_program_id=self.memory.add_program({**doc, "potential": new})
                )
                refined += 1
        return refined

    # -- evaluation -----------------------------------------------------------------------------------------
    def evaluates(self, r: int) -> bool:
        """Whether round r ends with an evaluation: the last round, every `eval_every`-th, and every round
        of a run whose seed is in `curve_seeds` (the per-round curves of Figures 3 and 5)."""
        c = self.c
        return r == c.rounds or r % c.eval_every == 0 or self.seed in c.curve_seeds

    def no_evaluation(self) -> dict[str, Any]:
        keys = (
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
        return {**dict.fromkeys(keys), "n_id": 0, "n_ood": 0}

    def evaluate(self, actor: dict[str, str], final: bool = True) -> dict[str, Any]:
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
        res = self._rollouts(
            actor, [s.to_json() for _, _, s in items], record=False, desc="evaluation", seed=self.seed
        )
        return evaluation_summary(items, [bool(x.ok and x.value["success"]) for x in res])

    def _metrics(
        self,
        r,
        envs,
        rollouts,
        diagnoses,
        validation,
        round_updates,
        track,
        refined,
        evaluation,
        wall_s,
        cpu_s,
    ) -> dict[str, Any]:
        built = [v for _, v in envs]
        by_split: dict[str, list[bool]] = defaultdict(list)
        for q, _, rec in rollouts:
            by_split[q.split].append(rec.success)
        m = {
            "round": r,
            "updates": self.updates,
            "round_updates": round_updates,
            "critic_updates": self.critic_updates,
            "envs_requested": len(envs),
            "envs_accepted": sum(v["scene"] is not None for v in built),
            "validity_rate": round(float(np.mean([v["validity"] != "rejected" for v in built])), 4)
            if built
            else None,
            "validity_pass_first": round(float(np.mean([v["validity"] == "pass" for v in built])), 4)
            if built
            else None,
            "certified": sum(v["certified"] for v in built),
            # the paper's budgets are per family over a run: 320 accepted environments, 1,280 demonstrations
            "envs_accepted_total": sum(m["envs_accepted"] for m in self.history)
            + sum(v["scene"] is not None for v in built),
            "demos_total": len(self.demos),
            "rollouts": len(rollouts),
            "success_by_split": {k: round(float(np.mean(v)), 4) for k, v in sorted(by_split.items())},
            "diagnoses": len(diagnoses),
            "tokens_prompt": self.tokens["prompt"],
            "tokens_completion": self.tokens["completion"],
            "refined_programs": refined,
            "schedule_checks": track,
            "wall_s": round(wall_s, 1),
            "time_s": dict(self.round_times),
            "cpu_s": round(cpu_s, 1),
            **self.ex.report(),
            "worker_cpu_s": round(self.worker_cpu_s - self.round_worker0, 1),
            **evaluation,
        }
        if self.method.uses_memory:
            m.update(self.memory_metrics())
        return m

    def _transfer_counts(self) -> dict[str, int]:
        programs = self.memory.programs("generation")
        transferred = [
            m
            for m in self.memory.modes()
            if m.generation_program_id and programs[m.generation_program_id].get("source") == "transfer"
        ]
        return {
            "transferred_modes": len(transferred),
            "transferred_validated": sum(m.status == "validated" for m in transferred),
        }

    def memory_metrics(self) -> dict[str, Any]:
        from coda.memory.store import summarize

        info = summarize(self.memory)
        d = self.memory.table("diagnoses")
        scored = d[d.truth_factor.notna()] if not d.empty else d
        before = float((scored.factor == scored.truth_factor).mean()) if len(scored) else None
        kept = scored[scored.status == "validated"] if len(scored) else scored
        after = float((kept.factor == kept.truth_factor).mean()) if len(kept) else None
        lo, hi = self.c.success_band
        in_band = [
            m for m in self.memory.modes("validated") if m.hardness is not None and lo <= 1 - m.hardness <= hi
        ]
        return {
            **{
                k: info[k]
                for k in (
                    "modes",
                    "validated_modes",
                    "rejected_modes",
                    "generation_programs",
                    "training_programs",
                    "rejected_diagnoses",
                    "scenes",
                    "scenes_without_lineage",
                )
            },
            "modes_in_band": len(in_band),
            "agreement_before": None if before is None else round(before, 4),
            "agreement_after": None if after is None else round(after, 4),
            "n_scored_diagnoses": int(len(scored)),
            "n_validated_scored": int(len(kept)),
            **self._transfer_counts(),
        }


class _Clock:
    """Wall time per phase of a round (the `time_s` breakdown in rounds.json)."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.t, 2)
        self.t = now


def _rollout_id(r: int, q, rec) -> str:
    return f"r{r}-{q.slot}-{q.split}-{rec.scene_hash}"


def _key(q, rec) -> str:
    return f"{q.slot}-{q.split}-{rec.scene_hash}"


def _hash_of(scene_json: str | None) -> str | None:
    if scene_json is None:
        return None
    from coda.sim.scene import SceneSpec

    return SceneSpec.from_json(scene_json).hash


def _pack_demos(demos: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    lengths = np.array([len(d["obs"]) for d in demos], dtype=np.int64)
    return {
        "lengths": lengths,
        "obs": np.concatenate([d["obs"] for d in demos]) if demos else np.zeros((0, 50), np.float32),
        "labels": np.concatenate([d["labels"][: len(d["obs"])] for d in demos])
        if demos
        else np.zeros((0, 7), np.float32),
        "instruction": np.array([d["instruction"] for d in demos], dtype=str),
        "family": np.array([d["family"] for d in demos], dtype=str),
    }


def _unpack_demos(z) -> list[dict[str, Any]]:
    out, k = [], 0
    for i, n in enumerate(z["lengths"].tolist()):
        out.append(
            {
                "obs": z["obs"][k : k + n],
                "labels": z["labels"][k : k + n],
                "instruction": str(z["instruction"][i]),
                "family": str(z["family"][i]),
                "success": True,
            }
        )
        k += n
    return out


def run_method(
    cfg, method: str, *, seed: int, data_dir, sft_dir, out, executor, memory_from=None
) -> dict[str, Any]:
    """Run one method end to end (resuming in `out` when it holds complete rounds); returns final metrics."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
    if not (Path(sft_dir) / "policy").exists():
        raise FileNotFoundError(f"{sft_dir}/policy: no SFT policy; run `coda sft --out {sft_dir}` first")
    torch.set_num_threads(1)
    run = Run(
        cfg,
        METHODS[method],
        seed,
        Path(data_dir),
        Path(sft_dir),
        Path(out),
        executor,
        None if memory_from is None else Path(memory_from),
    )
    return run.run()
