"""The co-evolution methods as strategy objects over the one loop (`coda.coevolve.loop`).

A `Method` is three choices:

* **generation** — a `Generation` strategy: which environment requests a round makes per family
  (`requests`) and what it learns from each rollout (`observe`, the success-rate buffer of sr_guided);
* **shaping** — a `ShapingRule` (`coda.coevolve.shaping`): which potential shapes a rollout's reward, ``sparse``
  (none), ``per_rollout`` (Text2potential on the rollout's own diagnosis) or ``programs`` (the stored training
  program of the rollout's mode);
* **what the memory keeps** — generation programs, training programs, or nothing; ``frozen`` reads another
  run's memory without writing (cross-backbone reuse, Table 7).

Every method gets the same environment budget per round (``2 · envs_per_family`` per family), the same
planner-demonstration budget and, under fixed scheduling, the same number of policy updates.

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
| memory_reuse | a frozen memory's environments | training programs | (reads training programs) |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from coda.coevolve.shaping import PerRollout, ShapingRule, Sparse, TrainingPrograms
from coda.engine import generate as gen

if TYPE_CHECKING:
    from coda.coevolve.state import RunState

class Modes(Protocol):
    """What memory-guided generation reads of the run's modes (`coda.coevolve.mode_book.ModeBook`)."""

    def bases(self, family: str) -> tuple[list[str], list[str]]: ...

    def mode_views(self, family: str) -> list[gen.ModeView]: ...

    def stored_scenes(self, family: str) -> list[str]: ...

    def stream_progress(self, family: str) -> dict[str, float]: ...

    def transfer_programs(self, r: int) -> None: ...


@dataclass(frozen=True)
class GenerationInputs:
    """What a generation strategy reads: the run's settings (the profile's ``coevolve`` section), seed,
    families and seed bases, its state (sr_guided's success-rate buffer, the bases' success statistics) and
    its mode book (CoDA's modes, programs and streams)."""

    settings: Any
    seed: int
    families: tuple[str, ...]
    bases: dict[str, list[str]]
    state: RunState
    modes: Modes

    @property
    def memory(self):
        return self.state.memory


class Generation(Protocol):
    """How a method generates a round's environments."""

    name: str

    def requests(self, run: GenerationInputs, r: int, rng: np.random.Generator) -> list[gen.EnvRequest]: ...

    def observe(self, run: GenerationInputs, split: str, scene: str, family: str, success: bool) -> None: ...


class _PerFamily:
    """A generation strategy that makes its requests family by family (`family_requests`)."""

    name = ""

    def requests(self, run: GenerationInputs, r: int, rng: np.random.Generator) -> list[gen.EnvRequest]:
        out: list[gen.EnvRequest] = []
        for f in run.families:
            out += self.family_requests(run, f, r, rng)
        return out

    def family_requests(self, run: GenerationInputs, family: str, r: int, rng) -> list[gen.EnvRequest]:
        raise NotImplementedError

    def observe(self, run: GenerationInputs, split: str, scene: str, family: str, success: bool) -> None:
        return None


class NoGeneration(_PerFamily):
    """SFT: the policy is only evaluated."""

    name = "none"

    def family_requests(self, run, family, r, rng):
        return []


class DomainRandomization(_PerFamily):
    """Seed scenes with several factors re-drawn (open loop)."""

    name = "domain_rand"

    def family_requests(self, run, family, r, rng):
        c = run.settings
        return gen.domain_rand_requests(
            family, c.envs_per_family, run.bases[family], seed=run.seed, round_=r, rng=rng
        )


class Uniform(_PerFamily):
    """Uniform draws from the generator space (open loop)."""

    name = "uniform"

    def family_requests(self, run, family, r, rng):
        return gen.uniform_requests(family, run.settings.envs_per_family, seed=run.seed, round_=r)


class SRGuided(_PerFamily):
    """Success-rate guided (PLR-style): intermediate-success environments are mutated or replayed."""

    name = "sr_guided"

    def family_requests(self, run, family, r, rng):
        c = run.settings
        return gen.sr_guided_requests(
            family,
            c.envs_per_family,
            run.state.sr_buffer,
            seed=run.seed,
            round_=r,
            novel_share=c.novel_share,
            replay_share=c.replay_share,
            rng=rng,
        )

    def observe(self, run, split, scene, family, success):
        if split != "control":
            run.state.sr_record(scene, family, success)


class MemoryGuided(_PerFamily):
    """CoDA: slots to difficulty modes (targeted/control pairs on seed and solved generated scenes), novel
    and stored environments, by measured learning progress (`coda.engine.generate.allocate`)."""

    name = "memory"

    def requests(self, run, r, rng):
        if run.settings.transfer and r > 1:
            run.modes.transfer_programs(r)
        return super().requests(run, r, rng)

    def family_requests(self, run, family, r, rng):
        c = run.settings
        bases, hashes = run.modes.bases(family)
        return gen.memory_requests(
            family,
            c.envs_per_family,
            run.modes.mode_views(family),
            bases,
            run.modes.stored_scenes(family),
            seed=run.seed,
            round_=r,
            novel_share=c.novel_share,
            replay_share=c.replay_share,
            band=c.success_band,
            rng=rng,
            min_pairs=c.min_pairs,
            base_weights=run.state.base_weights(hashes),
            progress=run.modes.stream_progress(family),
        )


class FrozenMemory(_PerFamily):
    """Cross-backbone reuse: replay the frozen memory's environments, no new generation. Targeted variants
    of validated modes are drawn in proportion to the modes' importance (+ a floor), the rest of the budget
    from the memory's other generated scenes."""

    name = "frozen"

    def family_requests(self, run, family, r, rng):
        memory = run.memory
        scenes = [s for s in memory.rows("scenes") if s["family"] == family and s["split"] != "control"]
        if not scenes:
            return []
        by_program = {
            m.generation_program_id: m for m in memory.modes("validated") if m.generation_program_id
        }
        weights = np.array(
            [
                1.0 + 4.0 * (by_program[s["program_id"]].importance + 0.25)
                if s["program_id"] in by_program
                else 1.0
                for s in scenes
            ]
        )
        picks = rng.choice(len(scenes), size=2 * run.settings.envs_per_family, p=weights / weights.sum())
        out = []
        for k, i in enumerate(picks.tolist()):
            s = scenes[i]
            mode = by_program.get(s["program_id"])
            out.append(
                gen.EnvRequest(
                    family,
                    "replay",
                    gen.seed_for(run.seed, r, family, "replay", k),
                    base=s["spec_json"],
                    mode_id=mode.mode_id if mode else None,
                    program_id=s["program_id"],
                )
            )
        return out


@dataclass(frozen=True)
class Method:
    """A co-evolution method: a generation strategy, a shaping rule and what the memory keeps."""

    name: str
    generation: Generation
    shaping: ShapingRule
    store_generation: bool = False  # memory keeps (and generation uses) generation programs
    store_training: bool = False  # memory keeps (and training uses) training programs
    frozen: bool = False  # the memory comes from another run and is only read (cross-backbone reuse)

    @property
    def trains(self) -> bool:
        """Whether the method runs rounds at all (SFT is only evaluated)."""
        return self.generation.name != "none"

    @property
    def uses_memory(self) -> bool:
        return self.store_generation or self.store_training

    @property
    def writes_memory(self) -> bool:
        return self.uses_memory and not self.frozen

    @property
    def diagnoses(self) -> bool:
        """Whether failed rollouts are diagnosed: for shaping or for the memory (a frozen memory learns
        nothing new)."""
        return not self.frozen and (self.shaping.uses_diagnosis or self.uses_memory)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("sft", NoGeneration(), Sparse()),
        Method("domain_rand", DomainRandomization(), Sparse()),
        Method("uniform", Uniform(), Sparse()),
        Method("sr_guided", SRGuided(), Sparse()),
        Method("critic_no_memory", SRGuided(), PerRollout()),
        Method("coda", MemoryGuided(), TrainingPrograms(), store_generation=True, store_training=True),
        Method("gen_store_only", MemoryGuided(), PerRollout(), store_generation=True),
        Method("train_store_only", SRGuided(), TrainingPrograms(), store_training=True),
        # Table 7: another backbone trained on a frozen memory of a finished run, without new generation
        Method("memory_reuse", FrozenMemory(), TrainingPrograms(), store_training=True, frozen=True),
    )
}
