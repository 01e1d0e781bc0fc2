"""The co-evolution loop (paper §3.2–3.5), written once over a `Domain`.

One round, in the paper's order (each step names the unit that does it):

1. **allocate and generate** — the method's `Generation` strategy turns the budget into environment requests
   (`coda.coevolve.methods`); the domain builds, checks and certifies them (`Domain.build`);
2. **roll out** the current policy, critic-guided (`Domain.rollout`); rollouts and scenes enter the memory;
3. **diagnose** failures, cluster them into difficulty modes, compile candidate programs, and run the
   **control experiment** on targeted/control pairs (`coda.coevolve.mode_book`, `coda.engine.control`);
4. **shape**: each rollout enters the replay with its potential (`Domain.potential`: the mode's training
   program, the rollout's own diagnosis, or none); planner **demonstrations** join the imitation set (both
   recorded in the run's ``trained_on.json``: `coda.coevolve.trainer.TrainedOn`);
5. **train** the chunk critic (TD) and the policy (AWR + imitation), for a fixed number of updates or until
   the adaptive schedule ends the round (`coda.coevolve.trainer`, `coda.coevolve.schedule`);
6. **measure progress** of training programs and **refine** the stalled ones (`coda.coevolve.mode_book`);
7. **evaluate** (`Domain.evaluate`) and **snapshot** the memory and the checkpoint (`coda.coevolve.state`).

Example:
    >>> cfg = load_params("params.yaml", profile="smoke")
    >>> metrics = run_method(cfg, "coda", seed=0, data_dir="data", sft_dir="runs/sft", out="runs/coda-0",
    ...                      executor=make_executor("local", 2))
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from coda import numerics
from coda.coevolve.domain import Domain, Rollout
from coda.coevolve.methods import METHODS, GenerationInputs, Method
from coda.coevolve.mode_book import ModeBook
from coda.coevolve.schedule import RoundScheduler
from coda.coevolve.state import RunState, git_info, last_complete_round
from coda.coevolve.trainer import TrainedOn, Trainer
from coda.engine.control import ControlExperiment
from coda.files import write_json


class Clock:
    """Wall time per phase of a round (the `time_s` breakdown in rounds.json)."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.t, 2)
        self.t = now


def _percent(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def progress_line(m: dict[str, Any], rounds: int, who: str = "") -> str:
    """One readable line of a round's metrics (`Loop._metrics`), for a person watching a run: success by split,
    difficulty modes, mean losses, the evaluation when there was one, and seconds. Printed on stderr; it only
    reads the metrics. ``rounds`` 0: a method that does not train (only evaluated)."""
    parts = [f"{who}round {m.get('round')}/{rounds}" if rounds else f"{who}evaluated, no training"]
    split = m.get("success_by_split") or {}
    if split:
        rates = ", ".join(f"{k} {_percent(v)}" for k, v in split.items())
        parts.append(f"success {rates} ({m.get('rollouts', 0)} rollouts)")
    if m.get("modes") is not None:
        parts.append(
            f"modes {m['modes']} ({m.get('validated_modes', 0)} validated, {m.get('modes_in_band', 0)} in band)"
        )
    losses = [
        f"{name} {m[key]:.3g}"
        for key, name in (("critic_loss", "critic"), ("policy_loss", "policy"), ("awr_loss", "AWR"))
        if m.get(key) is not None
    ]
    if m.get("imitation_loss") is not None:
        losses.append(f"imitation {m['imitation_loss']:.3g}")
    if losses:
        parts.append("loss " + ", ".join(losses))
    if m.get("ood_success") is not None or m.get("id_success") is not None:
        parts.append(
            f"eval OOD {_percent(m.get('ood_success'), 1)} (n={m.get('n_ood', 0)}), "
            f"ID {_percent(m.get('id_success'), 1)} (n={m.get('n_id', 0)})"
        )
    else:
        parts.append("no evaluation this round")
    parts.append(f"{m.get('round_updates', m.get('updates', 0))} updates, {m.get('wall_s', 0):.1f} s")
    return " | ".join(parts)


class Loop:
    """One method, one seed, one domain, one run directory."""

    def __init__(
        self,
        c,
        method: Method,
        seed: int,
        domain: Domain,
        sft_dir: Path,
        out: Path,
        *,
        profile: str,
        memory_from: Path | None = None,
    ):
        from coda.memory.store import Memory

        self.c, self.method, self.seed, self.domain, self.profile = c, method, seed, domain, profile
        self.sft_dir, self.out, self.memory_from = Path(sft_dir), Path(out), memory_from
        self.families = tuple(domain.families)
        self.bases = {f: domain.bases(f) for f in self.families}
        self.base_hashes = {f: domain.base_hashes(f) for f in self.families}
        self.state = RunState(memory=Memory())
        self.control = ControlExperiment(
            margin=c.validate_margin, min_pairs=c.min_pairs, alpha=c.validate_alpha, band=c.success_band
        )
        self.scheduler = RoundScheduler.from_config(c, adaptive_allowed=method.store_generation)
        self.modes = ModeBook(
            settings=c,
            method=method,
            domain=domain,
            state=self.state,
            control=self.control,
            bases=self.bases,
            base_hashes=self.base_hashes,
        )
        self.generation_inputs = GenerationInputs(
            settings=c,
            seed=seed,
            families=self.families,
            bases=self.bases,
            state=self.state,
            modes=self.modes,
        )
        self.trainer = Trainer(
            settings=c,
            seed=seed,
            method=method,
            state=self.state,
            modes=self.modes,
            scheduler=self.scheduler,
            domain=domain,
            publish=self.publish,
        )
        self.round_times: dict[str, float] = {}

    @property
    def memory(self):
        return self.state.memory

    # -- the actor the workers load ---------------------------------------------------------------------
    def publish(self, tag: str) -> dict[str, str]:
        """Write the current rollout policy (adapters merged) and critic for the workers, under a fresh
        directory name: workers cache the actor by path, so a new version must never reuse one."""
        from coda.learn.policies.lora import merged_copy

        s = self.state
        shutil.rmtree(self.out / "actor", ignore_errors=True)
        where = self.out / "actor" / tag
        policy = merged_copy(s.policy) if s.policy.lora is not None else s.policy
        policy.save_pretrained(where / "policy")
        s.critic.save_pretrained(where / "critic")
        return {"policy": str((where / "policy").resolve()), "critic": str((where / "critic").resolve())}

    # -- the run --------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "run.json").write_text(
            json.dumps(
                {
                    "method": self.method.name,
                    "seed": self.seed,
                    "profile": self.profile,
                    "coevolve": {k: v for k, v in self.c.__dict__.items()},
                    **git_info(),
                    "numerics": numerics.in_force(),  # what of the numerics pin was in force
                },
                indent=1,
                default=list,
            )
            + "\n"
        )
        if not self.method.trains:
            return self._evaluate_only()
        start = last_complete_round(self.out)
        s = self.state
        if start:
            state = s.load(self.out, start, self.sft_dir, self.seed, self.domain.replay_capacity)
            self.domain.load_state(state)
            self.control.pairs = defaultdict(list, state["pairs"])
            self.trainer.record = TrainedOn.from_state(state.get("trained_on"), start)
        else:
            s.fresh(self.sft_dir, self.seed, self.domain.replay_capacity)
            s.rehearsal = self.domain.rehearsal(self.c.rehearsal_per_family)
            if self.method.frozen:
                s.memory = self._frozen_memory()
        for r in range(start + 1, self.c.rounds + 1):
            metrics = self.round(r)
            s.history.append(metrics)
            s.save(
                self.out,
                r,
                metrics,
                train_log=self.trainer.log,
                pairs=self.control.pairs,
                extra_state={**self.domain.state(), "trained_on": self.trainer.record.to_state()},
                snapshot_extra=self._snapshot_extra(),
            )
            self._write_trained_on()
            print(progress_line(metrics, self.c.rounds, self._who()), file=sys.stderr, flush=True)
        self._write_trained_on()  # also when the run resumed after its last round
        final = dict(s.history[-1]) if s.history else {}
        final.update({"method": self.method.name, "seed": self.seed, "profile": self.profile})
        write_json(self.out / "metrics.json", final)
        return final

    def _who(self) -> str:
        return f"[{self.method.name} seed {self.seed}] "

    def _snapshot_extra(self) -> dict[str, Any]:
        """The manifest's ``extra`` of a snapshot written now: method, seed, profile, and the code and
        parameters that wrote it (`coda.memory.store.snapshot_provenance`, taken at write time)."""
        from coda.memory.store import PROVENANCE_KEY, snapshot_provenance

        extra: dict[str, Any] = {"method": self.method.name, "seed": self.seed, "profile": self.profile}
        extra[PROVENANCE_KEY] = snapshot_provenance(self.profile, {"coevolve": dict(self.c.__dict__)})
        return extra

    def _evaluate_only(self) -> dict[str, Any]:
        from coda.learn.policies import ChunkPolicy

        actor = {"policy": str((self.sft_dir / "policy").resolve()), "critic": None}
        t0 = time.perf_counter()
        metrics = {
            "round": 0,
            "updates": 0,
            **self.domain.evaluate(actor, final=True),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        ChunkPolicy.from_pretrained(self.sft_dir / "policy")  # fail loudly on a broken checkpoint
        self.state.history = [metrics]
        write_json(self.out / "rounds.json", self.state.history)
        self._write_trained_on(trains=False)
        print(progress_line(metrics, 0, self._who()), file=sys.stderr, flush=True)
        final = {**metrics, "method": self.method.name, "seed": self.seed, "profile": self.profile}
        write_json(self.out / "metrics.json", final)
        return final

    def _write_trained_on(self, trains: bool = True) -> None:
        """The run directory's trained_on.json (`coda.coevolve.trainer.TrainedOn`): its demonstrations and
        replay composition so far; a method that does not train records that it trained on nothing."""
        c = self.c
        header = {
            "method": self.method.name,
            "seed": self.seed,
            "profile": self.profile,
            "trains": trains,
            "families": list(self.families),
            "demo_selection": c.demo_selection,
            "demos_per_family": c.demos_per_family,
        }
        self.trainer.record.write(self.out, header)

    def _frozen_memory(self):
        from coda.memory.store import load_snapshot, resolve_snapshot

        if self.memory_from is None:
            raise ValueError(f"method {self.method.name!r} needs a memory to reuse (--memory PATH)")
        return load_snapshot(resolve_snapshot(self.memory_from))

    # -- one round ------------------------------------------------------------------------------------------
    def round(self, r: int) -> dict[str, Any]:
        c, s, domain, method = self.c, self.state, self.domain, self.method
        t0, cpu0 = time.perf_counter(), time.process_time()
        worker0 = domain.worker_cpu_s
        rng = np.random.default_rng([self.seed, r, 0])
        clock = Clock()
        # 1. allocate and generate
        requests = method.generation.requests(self.generation_inputs, r, rng)
        for slot, q in enumerate(requests):
            q.slot = slot
        envs = []
        for q, value in zip(requests, domain.build(requests, desc=f"round {r}: generate")):
            if value is None:
                continue
            if method.writes_memory and value["scene"] is not None:
                self.modes.add_scene(r, q, value)
            envs.append((q, value))
        valid = [(q, v) for q, v in envs if v["scene"] is not None]
        clock.lap("generate_certify")
        # 2. roll out the current policy (critic-guided)
        actor = self.publish(f"round-{r:04d}-rollouts")
        records = domain.rollout(
            actor,
            [v["scene"] for _, v in valid],
            record=True,
            desc=f"round {r}: rollouts",
            seed=self.seed * 1000 + r,
        )
        rollouts: list[Rollout] = [(q, v, rec) for (q, v), rec in zip(valid, records) if rec is not None]
        for q, v, rec in rollouts:
            if method.writes_memory:
                self.modes.add_rollout(r, q, rec)
            s.record_outcome(rec.scene_hash, rec.success)  # base scenes' weights, and which are solved
            method.generation.observe(self.generation_inputs, q.split, v["scene"], q.family, rec.success)
        clock.lap("rollouts")
        # 3. diagnose failures into modes; the control experiment validates or rejects candidates
        diagnoses = self.modes.diagnose(r, rollouts)
        if method.store_generation:
            self.modes.validate(r, rollouts)
        elif method.writes_memory:
            self.modes.validate_by_recurrence(r)
        # 4. potentials -> replay; demonstrations (the same budget and selection rule for every method)
        self._shape_and_demonstrate(r, rollouts, diagnoses)
        clock.lap("diagnose_validate")
        # 5. train: critic, then AWR (+ imitation) on the LoRA adapters or all weights
        round_updates, track = self.trainer.train(r, rollouts, clock)
        # 6. measure progress of training programs and refine the stalled ones
        refined = self.modes.refine(r, rollouts)
        clock.lap("refine")
        # 7. evaluate (the snapshot follows in `run`)
        actor = self.publish(f"round-{r:04d}-final")
        evaluation = (
            domain.evaluate(actor, final=r == c.rounds and c.final_eval == "full")
            if self.evaluates(r)
            else domain.no_evaluation()
        )
        clock.lap("evaluation")
        self.round_times = clock.laps
        return self._metrics(
            r,
            envs,
            rollouts,
            diagnoses,
            round_updates,
            track,
            refined,
            evaluation,
            time.perf_counter() - t0,
            time.process_time() - cpu0,
            domain.worker_cpu_s - worker0,
        )

    def _shape_and_demonstrate(self, r: int, rollouts: list[Rollout], diagnoses: Any) -> None:
        """Each rollout enters the replay with its potential; planner demonstrations join the imitation set
        (both recorded in ``trained_on.json``); the domain learns what the policy is now trained on."""
        s = self.state
        added = [
            (
                q.split,
                s.replay.add_record(
                    rec,
                    potential=self.modes.potential_for(q, rec, diagnoses),
                    gamma=self.c.gamma,
                    split=q.split,
                ),
            )
            for q, _, rec in rollouts
        ]
        self.trainer.record.add_replay(r, added, s.replay.composition())
        self.trainer.collect_demos(r, rollouts)
        for _, v, _ in rollouts:  # what the policy is now trained on (the diagnoser's reference)
            self.domain.observe_trained(v["scene"])

    def evaluates(self, r: int) -> bool:
        """Whether round r ends with an evaluation: the last round, every `eval_every`-th, and every round
        of a run whose seed is in `curve_seeds` (the per-round curves of Figures 3 and 5)."""
        c = self.c
        return r == c.rounds or r % c.eval_every == 0 or self.seed in c.curve_seeds

    def _metrics(
        self, r, envs, rollouts, diagnoses, round_updates, track, refined, evaluation, wall_s, cpu_s, worker_s
    ) -> dict[str, Any]:
        s = self.state
        built = [v for _, v in envs]
        by_split: dict[str, list[bool]] = defaultdict(list)
        for q, _, rec in rollouts:
            by_split[q.split].append(rec.success)
        m = {
            "round": r,
            "updates": s.updates,
            "round_updates": round_updates,
            "critic_updates": s.critic_updates,
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
            "envs_accepted_total": sum(m["envs_accepted"] for m in s.history)
            + sum(v["scene"] is not None for v in built),
            "demos_total": len(s.demos),
            "demos_by_split": dict(
                sorted(Counter(d["split"] for d in self.trainer.record.demos if d["round"] == r).items())
            ),
            "rollouts": len(rollouts),
            "success_by_split": {k: round(float(np.mean(v)), 4) for k, v in sorted(by_split.items())},
            "diagnoses": len(diagnoses),
            "tokens_prompt": s.tokens["prompt"],
            "tokens_completion": s.tokens["completion"],
            "refined_programs": refined,
            "schedule_checks": track,
            "wall_s": round(wall_s, 1),
            "time_s": dict(self.round_times),
            "cpu_s": round(cpu_s, 1),
            **self.domain.failures(),
            "worker_cpu_s": round(worker_s, 1),
            **{k: None if v is None else round(v, 5) for k, v in self.trainer.round_losses.items()},
            **evaluation,
        }
        if self.method.uses_memory:
            m.update(self.modes.metrics())
        return m


def run_method(
    cfg, method: str, *, seed: int, data_dir, sft_dir, out, executor, memory_from=None
) -> dict[str, Any]:
    """Run one method on the PyBullet families end to end (resuming in `out` when it holds complete
    rounds); returns the final metrics."""

    from coda.learn.updates import TRAIN_THREADS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
    if not (Path(sft_dir) / "policy").exists():
        raise FileNotFoundError(f"{sft_dir}/policy: no SFT policy; run `coda sft --out {sft_dir}` first")
    numerics.pin_torch(TRAIN_THREADS)
    return make_loop(cfg, method, seed, data_dir, sft_dir, out, executor, memory_from).run()


def make_loop(cfg, method: str, seed: int, data_dir, sft_dir, out, executor, memory_from=None) -> Loop:
    """The PyBullet loop of `method` (without running it); the domain comes from the registry."""
    from coda.domains import make_domain

    domain = make_domain("pybullet", cfg, Path(data_dir), seed, executor)
    return Loop(
        cfg.coevolve,
        METHODS[method],
        seed,
        domain,
        Path(sft_dir),
        Path(out),
        profile=cfg.profile,
        memory_from=None if memory_from is None else Path(memory_from),
    )
