"""Reward shaping as a strategy object, the way generation is one (`coda.coevolve.methods`).

A method's `ShapingRule` decides which potential Φ shapes a rollout's reward (F = γ^k Φ(s') − Φ(s), §3.4):

* `Sparse` — none: the reward is the task's sparse success;
* `PerRollout` — Text2potential on the rollout's own diagnosis (the critic without memory, gen-store-only);
* `TrainingPrograms` — the stored training program of the rollout's difficulty mode (CoDA, train-store-only,
  memory reuse); a rollout of no mode, or of a mode without a validated program, gets the domain's default.

A rule reads only what it is given: the rollout record, its diagnosis (None when it has none), the mode it was
generated for, where validated training programs come from (`TrainingProgramSource`, the run's `ModeBook`) and
the domain's shaping interface (`coda.coevolve.domain.Shaping`), which compiles a program or a diagnosis into
a potential.

Example:
    >>> Sparse().potential(None, None, None, None, None) is None
    True
    >>> [rule.name for rule in (Sparse(), PerRollout(), TrainingPrograms())]
    ['sparse', 'per_rollout', 'programs']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coda.coevolve.domain import DiagnosisDoc, Potential, ProgramDoc, RecordedRollout, Shaping


class TrainingProgramSource(Protocol):
    """Where a rule finds a mode's validated training program (`coda.coevolve.mode_book.ModeBook`)."""

    def training_program(self, mode_id: str | None) -> ProgramDoc | None: ...


class ShapingRule(Protocol):
    """Which potential shapes a rollout's reward."""

    name: str
    uses_diagnosis: bool  # whether the rule reads the rollout's diagnosis (failed rollouts are then diagnosed)

    def potential(
        self,
        record: RecordedRollout,
        diagnosis: DiagnosisDoc | None,
        mode_id: str | None,
        programs: TrainingProgramSource,
        domain: Shaping,
    ) -> Potential | None: ...


@dataclass(frozen=True)
class Sparse:
    """No shaping: the sparse task reward alone."""

    name: str = "sparse"
    uses_diagnosis: bool = False

    def potential(self, record, diagnosis, mode_id, programs, domain) -> None:
        return None


@dataclass(frozen=True)
class PerRollout:
    """Text2potential on the rollout's own diagnosis (the domain's default potential when it has none)."""

    name: str = "per_rollout"
    uses_diagnosis: bool = True

    def potential(self, record, diagnosis, mode_id, programs, domain):
        return domain.potential(record, diagnosis=diagnosis)


@dataclass(frozen=True)
class TrainingPrograms:
    """The stored training program of the rollout's mode: the mode it was generated for, else the mode its
    diagnosis was assigned to."""

    name: str = "programs"
    uses_diagnosis: bool = True

    def potential(self, record, diagnosis, mode_id, programs, domain):
        program = programs.training_program(mode_id or (diagnosis or {}).get("mode_id"))
        return domain.potential(record, program=program)
