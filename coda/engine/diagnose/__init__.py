"""Rollout-grounded failure diagnosis (paper §3.3): localise a failure to a phase and a generative factor.

A `Diagnoser` reads a failed `RolloutRecord`, the `SceneSpec` it ran on, the scene's construction trace
(optional) and a `TrainingReference` (what the policy has trained on), and returns a `Diagnosis`: the phase
that was not completed, the family factor most likely responsible, a short cause sentence quoting the
evidence, a confidence and the control steps the evidence sits at. Backends:

* ``sim`` (`SimDiagnoser`, default): phase = first cumulative phase predicate not reached; factor = argmax of
  a phase prior (`PHASE_FACTORS`, rank-weighted) + the scene's novelty w.r.t. the training scenes + rollout
  evidence (grasps lost in the air, grippers closed beside the object, distractors touched, pushes that
  overshoot or stop short, drawers that do not move). It never sees which factor a generation program
  perturbed: its inputs are the rollout and the scene only.
* ``noisy:<p>`` (`NoisyDiagnoser`): relabels the phase and/or the factor with probability p each (the
  critic-sensitivity study, Table 3); ``phase_only`` (`PhaseOnlyDiagnoser`): drops the factor.
* ``vlm`` (`VLMDiagnoser`): a transformers image-text-to-text model, loaded from a local path, shown
  re-rendered keyframes and the phase log; its JSON answer is parsed (never evaluated) and validated.

The package's modules: ``record`` (`Diagnosis`, the `Diagnoser` interface, the critics' shared entry point
`FailureCritic`), ``reference`` (`factor_values`, `TrainingReference`), ``evidence`` (the rollout
detectors, `collect_evidence`), ``sim`` (`SimDiagnoser` and the noisy / phase-only wrappers) and ``vlm``
(`VLMDiagnoser`); `make_diagnoser` builds any of them by name.

Example:
    >>> ref = TrainingReference.from_scenes(data.seed_scenes("data", "pick_place"))
    >>> rec = run_episode(world, scene, policy)
    >>> d = make_diagnoser("sim").diagnose(rec, scene, None, ref)
    >>> d.phase, d.factor
    ('transport', 'mass')
    >>> d.cause
    'transport not reached (last progress: lift at step 18); the object grasped at step 13 slipped from the
    closed gripper at step 20, 11.4 cm up and 22.1 cm from the container; attributed to mass (novelty 1.00).'
    >>> make_diagnoser("phase_only").diagnose(rec, scene, None, ref).factor
    ''
"""

from __future__ import annotations

from typing import Any

from coda.engine.diagnose.evidence import DETECTORS, GRIPPER_SPAN, Evidence, collect_evidence
from coda.engine.diagnose.record import (
    MAX_CAUSE_CHARS,
    Diagnoser,
    Diagnosis,
    Failure,
    FailureCritic,
    check_pair,
)
from coda.engine.diagnose.reference import FactorValue, TrainingReference, factor_values, range_widths
from coda.engine.diagnose.sim import (
    AFTER_CONTACT,
    CHUNK_STEPS,
    IMPLAUSIBLE_NOVELTY,
    LATE_EVIDENCE,
    MAX_EVIDENCE_STEPS,
    SOFTMAX_TEMPERATURE,
    W_EVIDENCE,
    W_NOVELTY,
    W_PRIOR,
    NoisyDiagnoser,
    PhaseOnlyDiagnoser,
    Relabeller,
    SimDiagnoser,
    failed_phase,
    phase_prior,
)
from coda.engine.diagnose.vlm import (
    VLMDiagnoser,
    extract_json_object,
    keyframe_steps,
    phase_log,
    render_keyframes,
    vlm_prompt,
)


def make_diagnoser(kind: str, *, seed: int = 0, **kw: Any) -> Diagnoser:
    """``"sim"``, ``"noisy:<p>"``, ``"phase_only"`` or ``"vlm"`` (kw: model_path, world_factory, ...).

    `seed` keys the noisy critic's draws and is ignored by the deterministic ones, so callers can pass it
    whatever the kind.
    """
    if kind == "vlm":
        return VLMDiagnoser(**kw)
    if kw:
        raise TypeError(f"diagnoser {kind!r} takes no options {sorted(kw)}")
    if kind == "sim":
        return SimDiagnoser()
    if kind.startswith("noisy:"):
        try:
            p = float(kind[6:])
        except ValueError:
            raise ValueError(f"noisy:<p> needs a number p, got {kind!r}") from None
        return NoisyDiagnoser(SimDiagnoser(), p, seed=seed)
    if kind == "phase_only":
        return PhaseOnlyDiagnoser(SimDiagnoser())
    raise ValueError(f"unknown diagnoser {kind!r}; expected 'sim', 'noisy:<p>', 'phase_only' or 'vlm'")


__all__ = [
    "AFTER_CONTACT",
    "CHUNK_STEPS",
    "DETECTORS",
    "GRIPPER_SPAN",
    "IMPLAUSIBLE_NOVELTY",
    "LATE_EVIDENCE",
    "MAX_CAUSE_CHARS",
    "MAX_EVIDENCE_STEPS",
    "SOFTMAX_TEMPERATURE",
    "W_EVIDENCE",
    "W_NOVELTY",
    "W_PRIOR",
    "Diagnoser",
    "Diagnosis",
    "Evidence",
    "FactorValue",
    "Failure",
    "FailureCritic",
    "NoisyDiagnoser",
    "PhaseOnlyDiagnoser",
    "Relabeller",
    "SimDiagnoser",
    "TrainingReference",
    "VLMDiagnoser",
    "check_pair",
    "collect_evidence",
    "extract_json_object",
    "factor_values",
    "failed_phase",
    "keyframe_steps",
    "make_diagnoser",
    "phase_log",
    "phase_prior",
    "range_widths",
    "render_keyframes",
    "vlm_prompt",
]
