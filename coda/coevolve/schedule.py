"""Round scheduling (paper §3.5): when does a round's policy training stop?

``fixed``: every round runs `policy_updates` updates. ``adaptive`` (methods with generation programs): every
`check_every` updates the current policy is rolled out again on the round's targeted environments of the
modes whose success lies in the success band, and the round ends early when fewer than
`min_modes_in_band` of them remain in the band, or when the in-band success moved less than
`plateau_points` over the last `plateau_updates` updates.

Example:
    >>> s = RoundScheduler("adaptive", check_every=50, min_modes_in_band=1, plateau_updates=100,
    ...                    plateau_points=0.05, band=(0.2, 0.8))
    >>> s.over([{"updates": 50, "modes_in_band": 0, "in_band_success": 0.5}])
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np


@dataclass(frozen=True)
class RoundScheduler:
    """The stopping rule of a round's policy updates."""

    kind: Literal["fixed", "adaptive"]
    check_every: int
    min_modes_in_band: int
    plateau_updates: int
    plateau_points: float
    band: tuple[float, float]

    @classmethod
    def from_config(cls, c, *, adaptive_allowed: bool) -> RoundScheduler:
        """The schedule of a `CoevolveConfig`; adaptive only for methods that keep generation programs."""
        kind = "adaptive" if c.scheduling == "adaptive" and adaptive_allowed else "fixed"
        return cls(
            kind, c.check_every, c.min_modes_in_band, c.plateau_updates, c.plateau_points, c.success_band
        )

    def checks_at(self, done: int, total: int) -> bool:
        """Whether the in-band measurement runs after `done` of `total` updates."""
        return self.kind == "adaptive" and done % self.check_every == 0 and done < total

    def in_band(self, targeted: Sequence[tuple[str, str, bool]]) -> dict[str, list[tuple[str, bool]]]:
        """The round's targeted (mode_id, scene, success) outcomes of the modes whose success is in the band."""
        lo, hi = self.band
        per_mode: dict[str, list[tuple[str, bool]]] = defaultdict(list)
        for mode_id, scene, success in targeted:
            per_mode[mode_id].append((scene, success))
        return {m: s for m, s in per_mode.items() if lo <= np.mean([x[1] for x in s]) <= hi}

    def measure(
        self,
        targeted: Sequence[tuple[str, str, bool]],
        done: int,
        rollout: Callable[[list[str]], list[bool | None]],
    ) -> dict[str, Any]:
        """One check: the current policy's success (`rollout` of scenes → outcomes, None for a failed job) on
        up to 16 in-band scenes, and how many of those modes are still in the band."""
        lo, hi = self.band
        in_band = self.in_band(targeted)
        scenes = [s for m in sorted(in_band) for s, _ in in_band[m]][:16]
        if not scenes:
            return {"updates": done, "modes_in_band": 0, "in_band_success": None}
        res = rollout(scenes)
        ok = [x for x in res if x is not None]
        success = float(np.mean(ok)) if res else 0.0
        modes_now = 0
        k = 0
        for m in sorted(in_band):
            n = len(in_band[m])
            outcomes = [x for x in res[k : k + n] if x is not None]
            k += n
            if outcomes and lo <= np.mean(outcomes) <= hi:
                modes_now += 1
        return {"updates": done, "modes_in_band": modes_now, "in_band_success": success}

    def over(self, track: list[dict[str, Any]]) -> bool:
        """Paper rule: a new round starts when fewer than `min_modes_in_band` modes remain in the band, or
        in-band success moved less than `plateau_points` over the last `plateau_updates` updates."""
        last = track[-1]
        if last["modes_in_band"] < self.min_modes_in_band:
            return True
        window = [t for t in track if t["updates"] >= last["updates"] - self.plateau_updates]
        if len(window) >= 2 and last["updates"] - window[0]["updates"] >= self.plateau_updates:
            return abs(last["in_band_success"] - window[0]["in_band_success"]) < self.plateau_points
        return False
