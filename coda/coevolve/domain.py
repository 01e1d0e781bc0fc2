"""The `Domain` interface: what the co-evolution loop needs from a simulator.

The loop (`coda.coevolve.loop`) is written once; a domain supplies its environments and everything that
reads them. Two implementations: `coda.domains.pybullet.PyBulletDomain` (the four PyBullet task families) and
`coda.domains.libero.domain.LiberoDomain` (LIBERO-Pro source tasks).

Environments travel as JSON strings (a PyBullet `SceneSpec`, a LIBERO variant) and requests as
`coda.engine.generate.EnvRequest`s; a built environment is a `BuiltEnv` (``scene``, None when rejected,
``hash``, ``validity``, ``repairs``, ``trace``, ``certified`` and ``demo``), a rollout record a
`RecordedRollout` (what `ChunkReplay.add_record` reads), programs and diagnoses JSON documents. `Domain` is
four small interfaces (`Environments`, `Episodes`, `Diagnosis`, `Shaping`) and its checkpointed state; a
domain whose environments form one generator space is a `GeneratorSpace` too (it recompiles a mode's program as
a region). Every signature is typed by these names (no ``Any``, no bare ``dict``: a test). The names are for
readers and type checkers: at run time the loop passes the same dicts and records as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypedDict

import numpy as np

from coda.engine.compile import CompileResult
from coda.engine.generate import EnvRequest

# A JSON value as the loop passes it on (programs, diagnoses, metrics, checkpointed state).
JSON = str | int | float | bool | None | Sequence["JSON"] | Mapping[str, "JSON"]
JSONObject = Mapping[str, JSON]
ProgramDoc = JSONObject  # a generation or training program document (`coda.memory.programs`)
DiagnosisDoc = JSONObject  # a failure diagnosis (phase, factor, cause, ...; `coda.engine.diagnose`)
Metrics = Mapping[str, JSON]  # evaluation keys and job-failure counts merged into a round's metrics
Actor = Mapping[str, str]  # a published actor: where workers load the policy and the critic from
# a planner demonstration (arrays and its labels)
Demonstration = Mapping[str, np.ndarray | str | int | float]


class BuiltEnv(TypedDict):
    """An environment as `Domain.build` returns it (``scene`` is None when it was rejected)."""

    scene: str | None  # JSON: a PyBullet `SceneSpec` or a LIBERO variant
    hash: str | None
    validity: str  # "pass" | "repaired" | "rejected"
    repairs: int
    trace: Sequence[JSONObject]  # the construction trace (memory's construction table)
    certified: bool  # the planner solved it
    demo: Demonstration | None


class RecordedRollout(Protocol):
    """A rollout record as the loop, the modes and `ChunkReplay.add_record` read it
    (`coda.sim.rollout.RolloutRecord`, `coda.domains.libero.domain.LiberoRollout`)."""

    success: bool
    phase_reached: int
    steps: int
    scene_hash: str
    family: str
    success_step: int | None
    chunk_starts: Sequence[int]


class Potential(Protocol):
    """A shaping potential Φ (`coda.learn.text2potential.Potential`, LIBERO's `PhasePotential`)."""

    def phi_along(self, record: RecordedRollout) -> np.ndarray: ...


Rollout = tuple[EnvRequest, BuiltEnv, RecordedRollout]  # (request, built environment, rollout record)


class Environments(Protocol):
    """The environments of a domain: bases, building and certifying requests, rehearsal demonstrations."""

    families: tuple[str, ...]

    def bases(self, family: str) -> list[str]:
        """The seed base environments (JSON) that targeted/control pairs and domain randomisation start
        from (in a generator space, stored generated scenes join them: `ModeBook.bases`)."""
        ...

    def base_hashes(self, family: str) -> list[str]: ...

    def scene_hash(self, scene: str) -> str: ...

    def build(self, requests: list[EnvRequest], *, desc: str) -> list[BuiltEnv | None]:
        """Build, check and certify every request (None where the job itself failed)."""
        ...

    def rehearsal(self, per_family: int) -> list[Demonstration]:
        """Planner demonstrations of the SFT distribution that imitation keeps rehearsing."""
        ...


class Episodes(Protocol):
    """The policy in the environments: rollouts, the fixed evaluation episodes, failed jobs."""

    replay_capacity: int  # transitions the run's replay keeps
    worker_cpu_s: float  # compute spent in simulator workers so far

    def rollout(
        self, actor: Actor, scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list[RecordedRollout | bool | None]:
        """Roll the published actor out on each scene: records (record=True) or success booleans; None
        where a job failed."""
        ...

    def evaluate(self, actor: Actor, *, final: bool) -> Metrics:
        """The fixed evaluation episodes (the final set, or the per-round curve's subset)."""
        ...

    def no_evaluation(self) -> Metrics:
        """The evaluation keys of a round that is not evaluated."""
        ...

    def failures(self) -> Metrics:
        """Jobs that failed since the last call (`failed_jobs`, `failure_reasons`)."""
        ...


class Diagnosis(Protocol):
    """Diagnosis and programs: what a failure was, and the programs that recreate it elsewhere."""

    def diagnose(self, record: RecordedRollout, env: BuiltEnv) -> DiagnosisDoc | None:
        """A failed rollout's diagnosis (phase, factor, cause, ...), from the rollout and the scene only —
        never from the program that generated the scene."""
        ...

    def observe_trained(self, scene: str) -> None:
        """The policy is now trained on `scene` (the diagnoser's training reference)."""
        ...

    def compile(self, diagnosis: DiagnosisDoc, scene: str) -> CompileResult:
        """Generation and training programs for a diagnosis (`.generation`, `.training`, `.errors`, token
        counts)."""
        ...

    def exhibits(self, program: ProgramDoc, scene: str) -> bool:
        """Whether `scene` shows the difficulty `program` recreates."""
        ...

    def transfer(self, program: ProgramDoc, family: str, phase: str) -> tuple[ProgramDoc, str] | None:
        """A validated generation program lifted to another family, with the phase it targets there."""
        ...


class Shaping(Protocol):
    """Shaping: potentials from training programs or diagnoses, their measured progress and refinement."""

    def potential(
        self,
        record: RecordedRollout,
        *,
        program: ProgramDoc | None = None,
        diagnosis: DiagnosisDoc | None = None,
    ) -> Potential | None:
        """The shaping potential of a rollout: a training program's, one compiled from the rollout's own
        diagnosis, or the task's default."""
        ...

    def progress(self, program: ProgramDoc, records: list[RecordedRollout]) -> list[float]:
        """A training program's measured progress on its targeted rollouts (end-of-rollout Φ)."""
        ...

    def refine(self, program: ProgramDoc, history: list[float]) -> ProgramDoc | None:
        """A refined training program when its progress stalled, else None."""
        ...


class GeneratorSpace(Protocol):
    """A domain whose environments are scenes of one generator space that any generation program applies to
    (PyBullet): stored generated scenes serve as bases too, and a mode's program is a region of factor
    values. A domain without it (LIBERO-Pro: programs instantiate on bundled initial states) lacks both."""

    generator_space: bool

    def region(self, program: ProgramDoc, scenes: list[str]) -> ProgramDoc:
        """A mode's generation program recompiled over the failing scenes of its diagnoses (the first
        diagnosis' scene first): the region of factor values they span. Only in a generator space."""
        ...


class Domain(Environments, Episodes, Diagnosis, Shaping, Protocol):
    """A simulator as the co-evolution loop sees it: its environments, episodes, diagnosis and programs,
    shaping, and checkpointed state."""

    def state(self) -> JSONObject: ...

    def load_state(self, state: JSONObject) -> None: ...


def in_generator_space(domain: Domain) -> bool:
    """Whether the domain's environments form one generator space (`GeneratorSpace`). A domain that does not
    say so (LIBERO-Pro: programs instantiate on bundled initial states) is not one."""
    return bool(getattr(domain, "generator_space", False))
