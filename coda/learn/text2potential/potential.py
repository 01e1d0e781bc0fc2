"""The staged potential Φ(s) compiled from a fragment, and the chunk-level shaping term.

`Potential` evaluates a validated fragment on simulator states: the stage of a state is the highest
cumulative subgoal it satisfies (the verifier completes the last stage), latched along a trajectory, and
Φ adds the completed stages' weights to the current stage's weight times its bounded in-stage progress
(capped at `IN_STAGE_CAP`, so that reaching a stage always pays). Φ is evaluated at chunk endpoints only;
`shaping_term` is the potential-based shaping F = γ^k Φ(s') − Φ(s) of a chunk of k steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.learn.predicates import LIBRARY, VERIFIER_PROGRESS
from coda.learn.text2potential.fragments import validate_fragment
from coda.sim.families import REGISTRY
from coda.sim.families.base import SceneContext, State

IN_STAGE_CAP = 0.9  # in-stage progress never exceeds this fraction of a stage: reaching a stage always pays


class Potential:
    """Φ compiled from a fragment: stage index (highest cumulative subgoal satisfied, latched along a
    trajectory) + bounded in-stage progress; the verifier completes the last stage (Φ = n_stages)."""

    def __init__(self, fragment: Mapping[str, Any]) -> None:
        self.fragment = validate_fragment(fragment)
        self.family = self.fragment["family"]
        self.variant = self.fragment["variant"]
        self.zero = self.fragment["potential"] == "zero"
        preds = LIBRARY[self.family]
        self.subgoals = [(preds[sg["predicate"]], sg["params"]) for sg in self.fragment["subgoals"]]
        self.weights = np.array(self.fragment["weights"], dtype=np.float64)
        self.offsets = np.concatenate([[0.0], np.cumsum(self.weights)])  # Φ at the start of each stage

    @property
    def n_stages(self) -> int:
        return 0 if self.zero else len(self.subgoals) + 1

    def _check(self, ctx: SceneContext) -> None:
        if ctx.family != self.family:
            raise ValueError(f"potential for {self.family!r} evaluated on a {ctx.family!r} scene")
        if ctx.variant != self.variant and any(p.variants for p, _ in self.subgoals):
            raise ValueError(f"potential for variant {self.variant!r} evaluated on a {ctx.variant!r} scene")

    def stage(self, state: State, ctx: SceneContext) -> int:
        """Stages completed at `state`: n_stages if the verifier holds, else the highest subgoal satisfied."""
        if self.zero:
            return 0
        if REGISTRY[self.family].success(state, ctx):
            return self.n_stages
        for j in range(len(self.subgoals), 0, -1):
            pred, params = self.subgoals[j - 1]
            if pred.holds(state, ctx, params):
                return j
        return 0

    def in_stage_progress(self, state: State, ctx: SceneContext, stage: int) -> float:
        """Progress in [0, 1] toward completing `stage` (the next subgoal, or the verifier for the last)."""
        if stage < len(self.subgoals):
            pred, params = self.subgoals[stage]
            return float(pred.progress(state, ctx, params))
        return float(VERIFIER_PROGRESS[self.family](state, ctx, {}))

    def phi_at_stage(self, stage: int, state: State, ctx: SceneContext) -> float:
        """Φ of `state` counted as having completed `stage` stages."""
        if self.zero:
            return 0.0
        if stage >= self.n_stages:
            return float(self.n_stages)
        progress = min(self.in_stage_progress(state, ctx, stage), IN_STAGE_CAP)
        return float(self.offsets[stage] + self.weights[stage] * progress)

    def phi(self, state: State, ctx: SceneContext) -> float:
        """Φ of a single state (Markov: no latching)."""
        self._check(ctx)
        return self.phi_at_stage(self.stage(state, ctx), state, ctx)

    def phi_along(self, record, latch: bool = True) -> np.ndarray:
        """Φ at the chunk endpoints of a `RolloutRecord` (chunk starts, then the final state): (n_chunks + 1,).

        With ``latch`` the stage is the highest reached at any endpoint so far (a dropped object keeps its
        grasp stage; its in-stage progress still reads the current state). Endpoints at or after the
        verifier's first success are worth n_stages."""
        ctx = record.context()
        self._check(ctx)
        ends = chunk_endpoints(record)
        out = np.zeros(len(ends))
        reached = 0
        for n, t in enumerate(ends):
            state = {k: v[t] for k, v in record.states.items()}
            # the verifier's first success is absorbing, whatever a record kept after it
            solved = record.success_step is not None and t >= record.success_step
            now = self.n_stages if solved else self.stage(state, ctx)
            reached = max(reached, now) if latch else now
            out[n] = self.phi_at_stage(reached, state, ctx)
        return out

    def shaping(self, record, gamma: float, h: int = 8, latch: bool = True) -> np.ndarray:
        """Per-chunk shaping F = γ^k Φ(s_{t+k}) − Φ(s_t), k = the chunk's length (h except a cut-short last chunk)."""
        phi = self.phi_along(record, latch=latch)
        lengths = np.diff(chunk_endpoints(record))
        if (lengths > h).any():
            raise ValueError(f"record has chunks longer than h={h}: {lengths.tolist()}")
        return shaping_term(phi[:-1], phi[1:], gamma**lengths)


def chunk_endpoints(record) -> list[int]:
    """Control-step indices where Φ is evaluated: every chunk start, then the final state."""
    return [*record.chunk_starts, record.steps]


def shaping_term(phi_now, phi_next, discount):
    """Potential-based shaping F = discount · Φ(s') − Φ(s) (Ng et al., 1999); arrays or scalars."""
    return np.asarray(discount) * np.asarray(phi_next) - np.asarray(phi_now)


def compile_potential(fragment: Mapping[str, Any]) -> Potential:
    return Potential(fragment)
