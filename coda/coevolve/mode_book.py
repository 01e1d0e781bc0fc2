"""Difficulty modes through a round: diagnose → cluster → control experiment → compile → refine.

`ModeBook` is the loop's view of the memory (`coda.memory.store.Memory`): it writes a round's scenes,
rollouts and diagnoses, assigns diagnoses to difficulty modes, compiles a mode's generation program (the
hypothesis its control experiment tests: in a generator space, the region of factor values its diagnoses'
failing scenes span, recompiled as the mode gains diagnoses) and, once validated, its training program; it
decides the modes with the `ControlExperiment`, lifts validated programs to other families (Appendix A),
gives generation its base scenes and the novel and replay streams' learning progress, chooses each rollout's
potential, and measures and refines training programs. Everything simulator-specific goes through the
loop's `Domain`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.coevolve.domain import Domain, in_generator_space
from coda.engine import generate as gen
from coda.engine.control import round_pairs
from coda.memory.modes import learning_progress
from coda.progress import progress

if TYPE_CHECKING:
    from coda.coevolve.methods import Method
    from coda.coevolve.state import RunState
    from coda.engine.control import ControlExperiment

ROLLOUT_SPLITS = ("novel", "targeted", "replay", "mutation")  # splits whose failures are diagnosed
STREAMS = ("novel", "replay")  # the allocation arms besides the modes (`coda.engine.generate.allocate`)


def rollout_id(r: int, q, rec) -> str:
    return f"r{r}-{q.slot}-{q.split}-{rec.scene_hash}"


def rollout_key(q, rec) -> str:
    return f"{q.slot}-{q.split}-{rec.scene_hash}"


class ModeBook:
    """Modes, programs and lineage of one run (see the module docstring)."""

    def __init__(
        self,
        *,
        settings: Any,
        method: Method,
        domain: Domain,
        state: RunState,
        control: ControlExperiment,
        bases: dict[str, list[str]],
        base_hashes: dict[str, list[str]],
    ) -> None:
        """settings: the profile's ``coevolve`` section (success band, minimum pairs); state: the run's state,
        whose memory the book reads and writes; bases/base_hashes: the domain's seed bases per family."""
        self.c, self.method, self.domain, self.state, self.control = settings, method, domain, state, control
        self.seed_bases, self.seed_base_hashes = bases, base_hashes
        self.families = tuple(bases)

    @property
    def memory(self):
        return self.state.memory

    # -- lineage ----------------------------------------------------------------------------------------
    def add_scene(self, r: int, q, value: dict[str, Any]) -> None:
        if q.program is not None:  # lineage: the program that made the scene stays in memory
            self.memory.add_program(q.program)
        self.memory.add_scene(
            value["hash"],
            q.family,
            r,
            q.split,
            value["scene"],
            program_id=q.program_id or (q.program or {}).get("id"),
            base_hash=None if q.base is None else self.domain.scene_hash(q.base),
            validity=value["validity"],
            repairs=value["repairs"],
            trace=value["trace"],
            certified=value["certified"],
        )

    def add_rollout(self, r: int, q, rec) -> None:
        self.memory.add_rollout(
            rec.scene_hash,
            q.family,
            r,
            q.split,
            rec.success,
            rec.phase_reached,
            rec.steps,
            self.state.updates,
            rollout_id=rollout_id(r, q, rec),
        )

    # -- what generation reads ------------------------------------------------------------------------------
    def mode_views(self, family: str) -> list[gen.ModeView]:
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

    def bases(self, family: str) -> tuple[list[str], list[str]]:
        """Base scenes of the family's targeted/control pairs, and their hashes: the domain's seed bases and,
        in a generator space (`GeneratorSpace`), every stored non-control scene of earlier rounds on
        which the policy has succeeded (novel successes, solved variants and replays), so that bases reach the
        generator space as uniform draws do. Their weights are the policy's estimated success on them
        (`RunState.base_weights`)."""
        scenes, hashes = list(self.seed_bases[family]), list(self.seed_base_hashes[family])
        if not in_generator_space(self.domain):
            return scenes, hashes
        seen, stats = set(hashes), self.state.base_stats
        for row in self.memory.rows("scenes"):  # canonical order: round, split, hash
            h = row["scene_hash"]
            if row["family"] != family or row["split"] == "control" or h in seen:
                continue
            if stats.get(h, (0, 0))[0] > 0:
                seen.add(h)
                scenes.append(row["spec_json"])
                hashes.append(h)
        return scenes, hashes

    def stream_progress(self, family: str) -> dict[str, float]:
        """Measured learning progress of the family's novel and replay streams: `learning_progress` of their
        success per round (pooled counts, with its noise floor)."""
        outcomes: dict[tuple[str, int], list[bool]] = defaultdict(list)
        for row in self.memory.rows("rollouts"):
            if row["family"] == family and row["split"] in STREAMS:
                outcomes[(row["split"], row["round"])].append(bool(row["success"]))
        return {
            split: learning_progress(
                [(float(np.mean(v)), len(v)) for (s, _), v in sorted(outcomes.items()) if s == split]
            )
            for split in STREAMS
        }

    def stored_scenes(self, family: str) -> list[str]:
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

    def transfer_programs(self, r: int) -> None:
        """Appendix A: lift every validated generation program to the other families, once per mode and
        family (a mode's program is recompiled as it gains diagnoses); a lifted program that binds to the
        family's base scenes opens a candidate mode there, kept only if its control experiment validates it
        with variant success inside the success band (`ControlExperiment.band`)."""
        stored = self.memory.programs("generation")
        opened = {(m.family, m.cause.split(": ", 1)[0]) for m in self.memory.modes()}
        for mode in self.memory.modes("validated"):
            source = stored.get(mode.generation_program_id)
            if source is None or source.get("source") == "transfer":
                continue  # no chains of transfers
            for f in self.families:
                if f == mode.family or (f, f"transferred from {mode.mode_id}") in opened:
                    continue
                lifted = self.domain.transfer(source, f, mode.phase)
                if lifted is None or lifted[0]["id"] in stored:
                    continue
                program, phase = lifted
                self.memory.add_mode(
                    f,
                    phase,
                    program["perturbs"],
                    f"transferred from {mode.mode_id}: {mode.cause}",
                    r,
                    generation_program_id=self.memory.add_program(program),
                )
                stored[program["id"]] = program

    # -- diagnosis and compilation ------------------------------------------------------------------------
    def diagnose(self, r: int, rollouts: list) -> dict[str, dict]:
        """Diagnose every failed rollout (controls excluded); returns rollout key -> diagnosis dict."""
        out: dict[str, dict] = {}
        if not self.method.diagnoses:
            return out
        touched: set[str] = set()
        firsts: dict[str, tuple[dict, str]] = {}  # mode -> its first diagnosis of the round and the scene
        for q, v, rec in progress(rollouts, desc=f"round {r}: diagnose"):
            if rec.success or q.split not in ROLLOUT_SPLITS:
                continue
            d = self.domain.diagnose(rec, v)
            if d is None:
                continue
            out[rollout_key(q, rec)] = d
            if not self.method.writes_memory:
                continue
            truth = q.truth_factor if q.split == "targeted" else None
            did = self.memory.add_diagnosis(
                rollout_id(r, q, rec),
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
            touched.add(mode_id)
            firsts.setdefault(mode_id, (d, v["scene"]))
        for mode_id in sorted(touched):  # a diagnosis joining an already decided mode is decided with it
            self._settle_diagnoses(mode_id)
        if touched and self.method.store_generation:
            scenes = self._scene_index()
            for mode_id in sorted(touched):
                self._compile_mode(mode_id, scenes, firsts[mode_id])
        return out

    def _scene_index(self) -> dict[str, str]:
        """Stored scene hash -> scene JSON."""
        return {row["scene_hash"]: row["spec_json"] for row in self.memory.rows("scenes")}

    @staticmethod
    def _diagnosis(row: dict[str, Any]) -> dict[str, Any]:
        """A stored diagnosis row as the compiler reads a diagnosis."""
        diagnosis = {k: row[k] for k in ("family", "variant", "phase", "factor", "cause", "confidence")}
        diagnosis["evidence_steps"] = json.loads(row["evidence_json"]) if row["evidence_json"] else []
        return diagnosis

    def _compile(self, diagnosis: dict, scene: str):
        res = self.domain.compile(diagnosis, scene)
        tokens = self.state.tokens
        tokens["prompt"] += res.prompt_tokens
        tokens["completion"] += res.completion_tokens
        tokens["invalid"] = tokens.get("invalid", 0) + len(res.errors)
        return res

    def _compile_mode(self, mode_id: str, scenes: dict[str, str], first: tuple[dict, str]) -> None:
        """A mode's generation program, the hypothesis its control experiment tests: compiled from `first`
        (the mode's first diagnosis as the diagnoser gave it, with domain-specific fields the memory does not
        keep, and its scene) when the mode has none; then, in a generator space, recompiled over the failing
        scenes of all its open and confirmed diagnoses (`Domain.region`: the region of factor values they
        span), as the mode gains diagnoses. A transferred program stays as lifted. (The training program is
        compiled only once the mode is validated, `_compile_training`.)"""
        mode = self.memory.mode(mode_id)
        if mode.status not in ("candidate", "validated"):
            return
        rows = [
            d for d in self.memory.rows("diagnoses") if d["mode_id"] == mode_id and d["status"] != "rejected"
        ]
        if not rows:
            return
        failing = [scenes[d["scene_hash"]] for d in rows]  # the first diagnosis' scene first
        if mode.generation_program_id:
            program = self.memory.program(mode.generation_program_id)
        else:  # a mode opened this round: its first diagnosis is this round's first
            res = self._compile(*first)
            if res.generation is None:
                self.memory.set_mode_status(
                    mode_id, "rejected", {"reason": "no valid generation program", "errors": res.errors}
                )
                return
            program = res.generation
        if in_generator_space(self.domain) and program.get("source") != "transfer":
            program = self.domain.region(program, failing)
        if program["id"] != mode.generation_program_id:
            self.memory.set_mode_programs(mode_id, generation_program_id=self.memory.add_program(program))

    def _compile_training(self, mode_id: str) -> None:
        """Compile a validated mode's training program from its first diagnosis and the failing scene."""
        if not self.method.store_training or self.memory.mode(mode_id).training_program_id:
            return
        rows = [d for d in self.memory.rows("diagnoses") if d["mode_id"] == mode_id]
        first = min(rows, key=lambda d: (d["round"], d["diagnosis_id"]))
        scene = next(s for s in self.memory.rows("scenes") if s["scene_hash"] == first["scene_hash"])
        res = self._compile(self._diagnosis(first), scene["spec_json"])
        if res.training is not None:
            self.memory.set_mode_programs(mode_id, training_program_id=self.memory.add_program(res.training))

    def _settle_diagnoses(self, mode_id: str) -> None:
        """Decide the open diagnoses of a decided mode: a rejected mode rejects them; a validated mode confirms
        those whose failing scene exhibits the validated difficulty (`Domain.exhibits`) and rejects the
        others (their failure has another cause than the one the control experiment confirmed)."""
        mode = self.memory.mode(mode_id)
        if mode.status not in ("validated", "rejected"):
            return
        program = self.memory.program(mode.generation_program_id) if mode.generation_program_id else None
        scenes = (
            {row["scene_hash"]: row["spec_json"] for row in self.memory.rows("scenes")} if program else {}
        )
        for d in self.memory.rows("diagnoses"):
            if d["mode_id"] != mode_id:
                continue
            if mode.status == "rejected":
                status = "rejected"
            elif program is None:
                status = "validated"
            else:
                shows = self.domain.exhibits(program, scenes[d["scene_hash"]])
                status = "validated" if shows else "rejected"
            if d["status"] != status:
                self.memory.set_diagnosis_status(d["diagnosis_id"], status)

    # -- the control experiment -----------------------------------------------------------------------------
    def validate(self, r: int, rollouts: list) -> dict[str, dict]:
        """Control experiments: per mode tested this round, paired targeted vs control outcomes."""
        paired = gen_pairs(rollouts)
        out = {}
        for mode_id, (t, ctl) in paired.items():
            mode = self.memory.mode(mode_id)
            program = self.memory.program(mode.generation_program_id) if mode.generation_program_id else {}
            test = self.control.test(
                mode_id,
                t,
                ctl,
                candidate=mode.status == "candidate",
                transferred=program.get("source") == "transfer",
            )
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
                    policy_updates=self.state.updates,
                    round=r,
                    control_success=float(np.mean(ctl)),
                    n_control=len(ctl),
                    band=self.c.success_band,
                )
            out[mode_id] = test
        return out

    def validate_by_recurrence(self, r: int) -> None:
        """Without generation programs there is no control experiment: a mode counts as validated once it
        recurs (at least `min_pairs` diagnoses)."""
        for mode in self.memory.modes():
            if mode.status == "candidate" and mode.n_diagnoses >= self.c.min_pairs:
                self.memory.set_mode_status(mode.mode_id, "validated", {"rule": "recurrence", "round": r})
                self._compile_training(mode.mode_id)

    # -- shaping and training programs ------------------------------------------------------------------------
    def training_program(self, mode_id: str | None) -> dict | None:
        if not mode_id or not self.method.store_training:
            return None
        mode = self.memory.mode(mode_id)
        if mode is None or mode.status != "validated" or not mode.training_program_id:
            return None
        return self.memory.program(mode.training_program_id)

    def potential_for(self, q, rec, diagnoses: dict[str, dict]):
        """The rollout's potential under the method's shaping rule (`coda.coevolve.shaping`)."""
        d = diagnoses.get(rollout_key(q, rec))
        return self.method.shaping.potential(rec, d, q.mode_id, self, self.domain)

    def refine(self, r: int, rollouts: list) -> int:
        """Measured progress of each training program (mean end-of-rollout Φ of its targeted rollouts, in the
        program's stage units); stalled programs are refined (`Domain.refine`)."""
        if not self.method.writes_memory or not self.method.store_training:
            return 0
        by_mode: dict[str, list] = defaultdict(list)
        for q, _, rec in rollouts:
            if q.split == "targeted":
                by_mode[q.mode_id].append(rec)
        refined = 0
        history = self.state.program_progress
        for mode_id in sorted(by_mode):
            program = self.training_program(mode_id)
            if program is None:
                continue
            values = self.domain.progress(program, by_mode[mode_id])
            if not values:
                continue
            # progress is kept per mode, so a refined program continues its predecessor's history
            history[mode_id].append(float(np.mean(values)))
            self.memory.add_program_stats(
                program["id"],
                r,
                self.state.updates,
                float(np.mean(values)),
                float(np.mean([rec.success for rec in by_mode[mode_id]])),
                len(values),
            )
            new = self.domain.refine(program, history[mode_id])
            if new is not None:
                self.memory.set_mode_programs(mode_id, training_program_id=self.memory.add_program(new))
                refined += 1
        return refined

    # -- metrics ----------------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
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
        programs = self.memory.programs("generation")
        transferred = [
            m
            for m in self.memory.modes()
            if m.generation_program_id and programs[m.generation_program_id].get("source") == "transfer"
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
            "transferred_modes": len(transferred),
            "transferred_validated": sum(m.status == "validated" for m in transferred),
        }


def gen_pairs(rollouts: list) -> dict[str, tuple[list[bool], list[bool]]]:
    """The round's complete targeted/control pairs per mode (`coda.engine.control.round_pairs`)."""
    return round_pairs((q.split, q.mode_id, q.pair, rec.success) for q, _, rec in rollouts)
