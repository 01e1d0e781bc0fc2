"""The control experiment (paper §3.3): is a diagnosed difficulty real?

A candidate difficulty mode is tested on *pairs*: its generation program applied to a base environment
(targeted) and the same base environment untouched (control), both rolled out by the same policy. The mode
is validated when the targeted success is clearly below the control's — by at least ``margin`` and by an
exact one-sided McNemar test on the discordant pairs — and rejected when the drop stays small. A
candidate's pairs accumulate over rounds until the test decides; a decided mode's later pairs only update
its hardness. The same experiment runs on every `Domain` (PyBullet scenes, LIBERO-Pro variants).

Example:
    >>> ce = ControlExperiment(margin=0.25, min_pairs=2, alpha=0.25)
    >>> ce.test("m1", [False, False], [True, True], candidate=True)["decision"]
    'validated'
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def mcnemar_p(targeted: Sequence[bool], control: Sequence[bool]) -> float:
    """One-sided exact McNemar p-value that targeted success is lower than control success (paired)."""
    b = sum(1 for t, c in zip(targeted, control) if c and not t)  # control succeeded, targeted failed
    c_ = sum(1 for t, c in zip(targeted, control) if t and not c)
    n = b + c_
    if n == 0:
        return 1.0
    return float(sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n)


def decide(
    targeted: Sequence[bool],
    control: Sequence[bool],
    *,
    margin: float,
    min_pairs: int,
    alpha: float = 0.25,
) -> dict[str, Any]:
    """Decide a candidate mode from its paired targeted/control outcomes.

    The test, on n pairs (a targeted variant and its control share a base environment):
    * n < `min_pairs`: undecided;
    * validated when control success − targeted success ≥ `margin` *and* the exact one-sided McNemar test
      (discordant pairs) gives p ≤ `alpha`: the generation program really recreates a difficulty;
    * rejected when the drop is below margin / 2, or when 2 · `min_pairs` pairs still do not validate it;
    * otherwise undecided (more pairs next round).
    """
    n = min(len(targeted), len(control))
    targeted, control = list(targeted[:n]), list(control[:n])
    t = float(np.mean(targeted)) if n else float("nan")
    c = float(np.mean(control)) if n else float("nan")
    p = mcnemar_p(targeted, control)
    decision = "undecided"
    if n >= min_pairs:
        if c - t >= margin and p <= alpha:
            decision = "validated"
        elif c - t < margin / 2 or n >= 2 * min_pairs:
            decision = "rejected"
    return {
        "decision": decision,
        "pairs": n,
        "targeted_success": round(t, 4) if n else None,
        "control_success": round(c, 4) if n else None,
        "drop": round(c - t, 4) if n else None,
        "mcnemar_p": round(p, 4),
        "margin": margin,
        "alpha": alpha,
    }


def round_pairs(outcomes: Iterable[tuple[str, str, int, bool]]) -> dict[str, tuple[list[bool], list[bool]]]:
    """A round's complete pairs per mode from (split, mode_id, pair, success) of its targeted and control
    rollouts: mode_id -> (targeted outcomes, control outcomes), in pair order of appearance."""
    pairs: dict[str, dict[int, dict[str, bool]]] = defaultdict(dict)
    for split, mode_id, pair, success in outcomes:
        if split in ("targeted", "control"):
            pairs[mode_id].setdefault(pair, {})[split] = success
    out = {}
    for mode_id in sorted(pairs):
        complete = [p for p in pairs[mode_id].values() if len(p) == 2]
        out[mode_id] = ([p["targeted"] for p in complete], [p["control"] for p in complete])
    return out


@dataclass
class ControlExperiment:
    """The paired test of candidate modes, with each candidate's pairs accumulated over rounds."""

    margin: float
    min_pairs: int
    alpha: float = 0.25
    band: tuple[float, float] = (0.0, 1.0)  # a transferred program's variants must keep success in it
    pairs: dict[str, list[list[int]]] = field(default_factory=lambda: defaultdict(list))

    def test(
        self,
        mode_id: str,
        targeted: Sequence[bool],
        control: Sequence[bool],
        *,
        candidate: bool,
        transferred: bool = False,
    ) -> dict[str, Any]:
        """The decision on `mode_id` after this round's pairs. A candidate's pairs join its earlier ones; a
        decided mode is judged on this round's pairs alone. A transferred program that validates with its
        variant success outside the band is rejected (Appendix A)."""
        now = [[int(a), int(b)] for a, b in zip(targeted, control)]
        if candidate:
            self.pairs[mode_id] += now
            history = self.pairs[mode_id]
        else:
            history = now
        result = decide(
            [bool(x[0]) for x in history],
            [bool(x[1]) for x in history],
            margin=self.margin,
            min_pairs=self.min_pairs,
            alpha=self.alpha,
        )
        lo, hi = self.band
        if transferred and result["decision"] == "validated" and not lo <= result["targeted_success"] <= hi:
            result = {
                **result,
                "decision": "rejected",
                "reason": "transferred variant success outside the band",
            }
        return result
