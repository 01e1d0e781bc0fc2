"""The diagnosis record, the diagnoser interface and the entry point the critics share.

A `Diagnosis` is what every critic returns for a failed rollout: the phase that was not completed, the
family factor held responsible ("" when unknown), a short cause sentence quoting the evidence, a confidence
and the control steps the evidence sits at; `from_dict` validates untrusted JSON (a memory snapshot, a
VLM's answer). `Diagnoser` is the interface every critic implements. `FailureCritic` is the base class
they share: its `diagnose` checks that the record was run on the scene and answers None for a success,
and hands a failure, bundled as a `Failure`, to the subclass's `judge`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from coda.engine.diagnose.reference import TrainingReference
from coda.errors import ProgramError
from coda.memory.factors import FACTORS
from coda.sim.families import REGISTRY
from coda.sim.rollout import RolloutRecord
from coda.sim.scene import SceneSpec

MAX_CAUSE_CHARS = 400


@dataclass(frozen=True)
class Diagnosis:
    family: str
    variant: str
    phase: str  # the first phase the rollout did not complete
    factor: str  # the family factor held responsible; "" when unknown (phase-only diagnosis)
    cause: str  # one short sentence quoting the rollout evidence
    confidence: float  # in [0, 1]
    evidence_steps: tuple[int, ...] = ()  # control steps where the evidence sits

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "variant": self.variant,
            "phase": self.phase,
            "factor": self.factor,
            "cause": self.cause,
            "confidence": float(self.confidence),
            "evidence_steps": list(self.evidence_steps),
        }

    @classmethod
    def from_dict(cls, d: Any) -> Diagnosis:
        """Validate a JSON-like dict; a `ProgramError` names the offending field."""
        if not isinstance(d, dict):
            raise ProgramError("<root>", f"expected an object, got {type(d).__name__}")
        required = ("family", "variant", "phase", "factor", "cause", "confidence")
        for key in d:
            if key not in (*required, "evidence_steps"):
                raise ProgramError(key, "unknown field")
        for key in required:
            if key not in d:
                raise ProgramError(key, "missing field")
        for key in ("family", "variant", "phase", "factor", "cause"):
            if not isinstance(d[key], str):
                raise ProgramError(key, f"expected a string, got {type(d[key]).__name__}")
        family, variant = d["family"], d["variant"]
        if family not in REGISTRY:
            raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
        fam = REGISTRY[family]
        if variant not in fam.variants:
            raise ProgramError("variant", f"unknown variant {variant!r} of {family}; expected {fam.variants}")
        phases = [ph.name for ph in fam.phases(variant)]
        if d["phase"] not in phases:
            raise ProgramError("phase", f"{d['phase']!r} is not a phase of {family}/{variant}: {phases}")
        if d["factor"] != "" and d["factor"] not in FACTORS[family]:
            raise ProgramError(
                "factor", f"{d['factor']!r} is not a factor of {family}: {list(FACTORS[family])}"
            )
        cause = d["cause"]
        if not isinstance(cause, str) or not cause.strip() or len(cause) > MAX_CAUSE_CHARS:
            raise ProgramError(
                "cause", f"expected a non-empty string of at most {MAX_CAUSE_CHARS} characters"
            )
        conf = d["confidence"]
        if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.0 <= conf <= 1.0:
            raise ProgramError("confidence", f"expected a number in [0, 1], got {conf!r}")
        steps = d.get("evidence_steps", [])
        if not isinstance(steps, list | tuple) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps
        ):
            raise ProgramError("evidence_steps", f"expected a list of step indices >= 0, got {steps!r}")
        return cls(family, variant, d["phase"], d["factor"], cause, float(conf), tuple(steps))


class Diagnoser(Protocol):
    name: str

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None,
        reference: TrainingReference | None,
    ) -> Diagnosis | None: ...


def check_pair(record: RolloutRecord, scene: SceneSpec) -> None:
    if record.scene_hash != scene.hash:
        raise ValueError(f"record of scene {record.scene_hash} diagnosed against scene {scene.hash}")


@dataclass(frozen=True)
class Failure:
    """A failed rollout as a critic is shown it: the record, the scene it ran on, the scene's construction
    trace and the reference of what the policy has trained on (the last two may be None)."""

    record: RolloutRecord
    scene: SceneSpec
    trace: list[dict] | None
    reference: TrainingReference | None


class FailureCritic:
    """Base of the critics: `diagnose` (the `Diagnoser` interface) checks that the record was run on the
    scene and answers None for a success; a failure goes to the subclass's `judge`."""

    name: str

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None = None,
        reference: TrainingReference | None = None,
    ) -> Diagnosis | None:
        check_pair(record, scene)
        if record.success:
            return None
        return self.judge(Failure(record, scene, trace, reference))

    def judge(self, failure: Failure) -> Diagnosis | None:
        """The diagnosis of a failed rollout, or None when the critic gives none."""
        raise NotImplementedError
