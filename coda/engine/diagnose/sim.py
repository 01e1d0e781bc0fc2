"""The simulator-grounded critic and its degraded variants (the critic-sensitivity study, Table 3).

`SimDiagnoser` takes the phase from the cumulative phase predicates (the first one the rollout did not
reach) and the factor from a score per family factor: a rank-weighted phase prior (`PHASE_FACTORS`), plus
the scene's novelty with respect to the training scenes, plus the rollout evidence (`collect_evidence`),
later events counting less. It never sees which factor a generation program perturbed. `NoisyDiagnoser`
relabels the phase and/or the factor of a base critic's diagnosis with probability p each, keyed by the
scene; `PhaseOnlyDiagnoser` withholds the factor.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from coda.engine.diagnose.evidence import Evidence, collect_evidence
from coda.engine.diagnose.record import MAX_CAUSE_CHARS, Diagnoser, Diagnosis, Failure, FailureCritic
from coda.engine.diagnose.reference import TrainingReference
from coda.memory.factors import FACTORS, PHASE_FACTORS
from coda.sim.rollout import RolloutRecord
from coda.sim.scene import SceneSpec

W_PRIOR, W_NOVELTY, W_EVIDENCE = 1.0, 1.0, 2.0  # score = prior + novelty + evidence, each in [0, 1] first
IMPLAUSIBLE_NOVELTY = 0.3  # novelty of a factor the phase prior does not list counts this much
LATE_EVIDENCE = 0.6  # weight of an event that came more than a chunk after the first one
CHUNK_STEPS = 8
AFTER_CONTACT = ("lost_grasp", "dropped", "slip", "stuck", "landing", "goal_miss", "base_moved", "push")
SOFTMAX_TEMPERATURE = 0.5
MAX_EVIDENCE_STEPS = 8


def failed_phase(record: RolloutRecord) -> tuple[int, int]:
    """(index of the first phase not reached, step at which the last reached phase was first reached)."""
    k = min(int(record.phases[-1].sum()), len(record.phase_names) - 1)
    last = int(np.argmax(record.phases[:, k - 1])) if k > 0 else 0
    return k, last


def phase_prior(family: str, phase: str) -> dict[str, float]:
    """Rank weight 1/(1 + rank) of each factor PHASE_FACTORS lists for the phase; 0 for the others."""
    ranked = PHASE_FACTORS[family].get(phase, ())
    return {f: (1.0 / (1 + ranked.index(f)) if f in ranked else 0.0) for f in FACTORS[family]}


def _softmax_margin(scores: np.ndarray) -> float:
    if len(scores) < 2:
        return 1.0
    z = np.exp((scores - scores.max()) / SOFTMAX_TEMPERATURE)
    p = np.sort(z / z.sum())[::-1]
    return float(p[0] - p[1])


def _late(evidence: list[Evidence]) -> list[bool]:
    """Whether each event happened more than a chunk after the first one (a consequence more than a cause)."""
    onsets = [e.onset for e in evidence if e.onset is not None]
    first = min(onsets, default=0)
    return [e.onset is not None and e.onset > first + CHUNK_STEPS for e in evidence]


class SimDiagnoser(FailureCritic):
    """Phase from the cumulative phase predicates; factor from prior + novelty + rollout evidence."""

    name = "sim"

    def scores(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None,
        reference: TrainingReference | None,
    ) -> tuple[str, dict[str, float], list[Evidence]]:
        """(failed phase, factor -> score, evidence): the quantities behind `diagnose`."""
        phase = record.phase_names[failed_phase(record)[0]]
        prior = phase_prior(record.family, phase)
        novelty = reference.novelty(scene) if reference is not None else dict.fromkeys(prior, 0.0)
        evidence = collect_evidence(record, scene, trace)
        support = dict.fromkeys(prior, 0.0)
        nothing_reached = not record.phases[-1].any()
        for e, late in zip(evidence, _late(evidence)):
            # an event that presupposes a grasp or contact cannot explain a failure to reach
            weak = late or (nothing_reached and e.kind in AFTER_CONTACT)
            for f, w in e.support.items():
                support[f] = max(support[f], w * (LATE_EVIDENCE if weak else 1.0))
        scores = {
            f: W_PRIOR * prior[f]
            + W_NOVELTY * novelty[f] * (1.0 if prior[f] > 0 else IMPLAUSIBLE_NOVELTY)
            + W_EVIDENCE * support[f]
            for f in prior
        }
        return phase, scores, evidence

    def judge(self, failure: Failure) -> Diagnosis:
        record, scene, reference = failure.record, failure.scene, failure.reference
        phase, scores, evidence = self.scores(record, scene, failure.trace, reference)
        names = list(scores)  # family factor order breaks ties deterministically
        values = np.array([scores[f] for f in names])
        factor = names[int(np.argmax(values))]
        k, last = failed_phase(record)
        backing = max(evidence, key=lambda e: e.support.get(factor, 0.0), default=None)
        if backing is None or backing.support.get(factor, 0.0) == 0.0:
            what = "; ".join(e.text for e in evidence[:1]) or f"no phase progress after step {last}"
            why = f"{what}; {factor} is the most plausible factor for this phase"
        else:
            why = backing.text
        novelty = reference.novelty(scene)[factor] if reference is not None else None
        since = f"last progress: {record.phase_names[k - 1]} at step {last}" if k > 0 else "no phase reached"
        cause = f"{phase} not reached ({since}); {why}; attributed to {factor}"
        cause += f" (novelty {novelty:.2f})." if novelty is not None else "."
        # the backing evidence's steps first, then where progress stopped and the end, then the rest
        ordered = [
            *(backing.steps if backing else ()),
            last,
            record.steps,
            *(s for e in evidence for s in e.steps),
        ]
        steps = list(dict.fromkeys(ordered))[:MAX_EVIDENCE_STEPS]
        return Diagnosis(
            record.family,
            record.variant,
            phase,
            factor,
            cause[:MAX_CAUSE_CHARS],
            round(_softmax_margin(values), 6),
            tuple(sorted(steps)),
        )


class Relabeller(FailureCritic):
    """A critic that edits the diagnoses of another one (`base`): `relabel` says how."""

    def __init__(self, base: Diagnoser) -> None:
        self.base = base

    def judge(self, failure: Failure) -> Diagnosis | None:
        d = self.base.diagnose(failure.record, failure.scene, failure.trace, failure.reference)
        return None if d is None else self.relabel(d, failure.record)

    def relabel(self, d: Diagnosis, record: RolloutRecord) -> Diagnosis:
        raise NotImplementedError


class NoisyDiagnoser(Relabeller):
    """A fallible critic: with probability p each, the phase and the factor are replaced by other ones.

    The draws come from an RNG keyed by (seed, scene hash), so a scene is always mislabelled the same way.
    """

    def __init__(self, base: Diagnoser, p: float, seed: int = 0) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        super().__init__(base)
        self.p, self.seed = float(p), int(seed)
        self.name = f"noisy:{self.p:g}"

    def relabel(self, d: Diagnosis, record: RolloutRecord) -> Diagnosis:
        if self.p == 0.0:
            return d
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(record.scene_hash, 16)]))
        flip_phase, flip_factor = rng.random() < self.p, rng.random() < self.p
        phases = [ph for ph in record.phase_names if ph != d.phase]
        factors = [f for f in FACTORS[d.family] if f != d.factor]
        phase = phases[int(rng.integers(len(phases)))] if flip_phase and phases else d.phase
        factor = factors[int(rng.integers(len(factors)))] if flip_factor and factors else d.factor
        if (phase, factor) == (d.phase, d.factor):
            return replace(d, confidence=round(d.confidence * (1.0 - 0.5 * self.p), 6))
        blamed = factor or "an unknown factor"
        cause = f"{phase} not reached; attributed to {blamed} (relabelled by a noisy critic)."
        return replace(d, phase=phase, factor=factor, cause=cause, confidence=round(0.5 * d.confidence, 6))


class PhaseOnlyDiagnoser(Relabeller):
    """Keeps the base critic's phase and cause, withholds the factor."""

    name = "phase_only"

    def relabel(self, d: Diagnosis, record: RolloutRecord) -> Diagnosis:
        return replace(d, factor="")
