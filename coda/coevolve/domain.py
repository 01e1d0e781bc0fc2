"""The `Domain` interface: what the co-evolution loop needs from a simulator.

The loop (`coda.coevolve.loop`) is written once; a domain supplies its environments and everything that
reads them. Two implementations: `coda.domains.pybullet.PyBulletDomain` (the four PyBullet task families) and
`coda.domains.libero.LiberoDomain` (LIBERO-Pro source tasks).

Environments travel as JSON strings (a PyBullet `SceneSpec`, a LIBERO variant) and requests as
`coda.engine.generate.EnvRequest`s; a built environment is a dict with ``scene`` (JSON, None when
rejected), ``hash``, ``validity``, ``repairs``, ``trace``, ``certified`` and ``demo`` (the planner's
demonstration, or None). A rollout record has at least ``success``, ``phase_reached``, ``steps``,
``scene_hash``, ``variant`` and ``family``, and is what `ChunkReplay.add_record` reads.
"""

from __future__ import annotations

from typing import Any, Protocol

from coda.engine.generate import EnvRequest

Rollout = tuple[EnvRequest, dict[str, Any], Any]  # (request, built environment, rollout record)


class Domain(Protocol):
    """A simulator as the co-evolution loop sees it."""

    families: tuple[str, ...]
    replay_capacity: int  # transitions the run's replay keeps
    worker_cpu_s: float  # compute spent in simulator workers so far
    # environments are scenes of one generator space that any generation program applies to: stored
    # generated scenes serve as bases too, and a mode's program is a region of factor values (`region`)
    generator_space: bool

    # -- environments -----------------------------------------------------------------------------------
    def bases(self, family: str) -> list[str]:
        """The seed base environments (JSON) that targeted/control pairs and domain randomisation start
        from (in a generator space, stored generated scenes join them: `ModeBook.bases`)."""
        ...

    def base_hashes(self, family: str) -> list[str]: ...

    def scene_hash(self, scene: str) -> str: ...

    def build(self, requests: list[EnvRequest], *, desc: str) -> list[dict[str, Any] | None]:
        """Build, check and certify every request (None where the job itself failed)."""
        ...

    def rehearsal(self, per_family: int) -> list[dict[str, Any]]:
        """Planner demonstrations of the SFT distribution that imitation keeps rehearsing."""
        ...

    # -- the policy in the environments ------------------------------------------------------------------
    def rollout(
        self, actor: dict[str, str], scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list[Any]:
        """Roll the published actor out on each scene: records (record=True) or success booleans; None
        where a job failed."""
        ...

    def evaluate(self, actor: dict[str, str], *, final: bool) -> dict[str, Any]:
        """The fixed evaluation episodes (the final set, or the per-round curve's subset)."""
        ...

    def no_evaluation(self) -> dict[str, Any]:
        """The evaluation keys of a round that is not evaluated."""
        ...

    def failures(self) -> dict[str, Any]:
        """Jobs that failed since the last call (`failed_jobs`, `failure_reasons`)."""
        ...

    # -- diagnosis, programs, shaping ----------------------------------------------------------------------
    def diagnose(self, record: Any, env: dict[str, Any]) -> dict[str, Any] | None:
        """A failed rollout's diagnosis (phase, factor, cause, ...), from the rollout and the scene only —
        never from the program that generated the scene."""
        ...

    def observe_trained(self, scene: str) -> None:
        """The policy is now trained on `scene` (the diagnoser's training reference)."""
        ...

    def compile(self, diagnosis: dict[str, Any], scene: str) -> Any:
        """Generation and training programs for a diagnosis (`.generation`, `.training`, `.errors`, token
        counts)."""
        ...

    def region(self, program: dict[str, Any], scenes: list[str]) -> dict[str, Any]:
        """A mode's generation program recompiled over the failing scenes of its diagnoses (the first
        diagnosis' scene first): the region of factor values they span. Only in a generator space."""
        ...

    def exhibits(self, program: dict[str, Any], scene: str) -> bool:
        """Whether `scene` shows the difficulty `program` recreates."""
        ...

    def transfer(self, program: dict[str, Any], family: str, phase: str) -> tuple[dict, str] | None:
        """A validated generation program lifted to another family, with the phase it targets there."""
        ...

    def potential(self, record: Any, *, program: dict | None = None, diagnosis: dict | None = None) -> Any:
        """The shaping potential of a rollout: a training program's, one compiled from the rollout's own
        diagnosis, or the task's default."""
        ...

    def progress(self, program: dict[str, Any], records: list[Any]) -> list[float]:
        """A training program's measured progress on its targeted rollouts (end-of-rollout Φ)."""
        ...

    def refine(self, program: dict[str, Any], history: list[float]) -> dict[str, Any] | None:
        """A refined training program when its progress stalled, else None."""
        ...

    # -- checkpointed state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


def in_generator_space(domain: Domain) -> bool:
    """Whether the domain's environments form one generator space (`Domain.generator_space`). A domain that
    does not say so (LIBERO-Pro: programs instantiate on bundled initial states) is not one."""
    return bool(getattr(domain, "generator_space", False))
