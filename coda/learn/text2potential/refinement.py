"""Refinement of a training program whose measured progress stalls: split or reweight the stalled stage.

`refine` reads the program's progress history (mean end-of-rollout Φ after successive training periods,
counting only entries measured since the fragment's last refinement); on a stall over the configured
window it splits the stage the mean rollout ends in, inserting an easier subgoal halfway from the previous
one (`_split`), or, when that is impossible or the fragment is full, multiplies the stage's weight. Every
change is appended to the fragment's refinement log; the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coda.learn.predicates import LIBRARY, VERIFIER_SPLIT
from coda.learn.text2potential.fragments import finite_number, validate_fragment


def refine(
    fragment: Mapping[str, Any], progress_history: Sequence[float], enabled: bool | None = None
) -> dict[str, Any]:
    """Refine a training program whose measured progress stalls; otherwise return it unchanged.

    `progress_history` holds the program's measured progress after successive training periods: the mean
    end-of-rollout Φ of its rollouts, in this fragment's stage units (``potential.phi_along(r)[-1]``).
    Entries measured before the fragment's last refinement are ignored (they scored another program).
    A stall is ``h[-1] - h[-window] < epsilon`` over the last `window` new entries. The stalled stage is
    the one the mean rollout ends in; it is split (an intermediate subgoal with the parameter interpolated
    halfway from the previous, easier subgoal of the same predicate, taking half the stage's weight) when
    its predicate has a numeric parameter and the fragment has room, else reweighted (its weight times
    `reweight`, all weights renormalised to sum to the number of stages). Deterministic. ``enabled``
    overrides the fragment's own switch (``refinement.enabled``).
    """
    frag = validate_fragment(fragment)
    settings = frag["refinement"]
    if not (settings["enabled"] if enabled is None else enabled) or frag["potential"] == "zero":
        return frag
    history = [finite_number(f"progress_history[{i}]", v) for i, v in enumerate(progress_history)]
    seen = frag["refinements"][-1]["history_len"] if frag["refinements"] else 0
    fresh = history[seen:]
    window = settings["window"]
    if len(fresh) < window or fresh[-1] - fresh[-window] >= settings["epsilon"]:
        return frag
    n = len(frag["subgoals"]) + 1
    offsets = np.concatenate([[0.0], np.cumsum(frag["weights"])])
    stage = int(np.clip(np.searchsorted(offsets, fresh[-1], side="right") - 1, 0, n - 1))
    inserted = _split(frag, stage) if len(frag["subgoals"]) < settings["max_subgoals"] else None
    weights = list(frag["weights"])
    if inserted is not None:
        frag["subgoals"].insert(stage, inserted)
        weights[stage : stage + 1] = [weights[stage] / 2, weights[stage] / 2]
        action = {"action": "split", "stage": stage, "inserted": inserted}
    else:
        weights[stage] *= settings["reweight"]
        action = {"action": "reweight", "stage": stage, "factor": settings["reweight"]}
    frag["weights"] = weights
    frag["refinements"].append(
        {**action, "history_len": len(history), "recent": [round(v, 6) for v in fresh[-window:]]}
    )
    return validate_fragment(frag)


def _split(frag: dict[str, Any], stage: int) -> dict[str, Any] | None:
    """An easier subgoal to insert before `stage`, or None when the stage cannot be split.

    A subgoal's stage: the same predicate with its parameter halfway between the previous subgoal of that
    predicate (or the parameter's easy end) and its own. The verifier's stage: the family's template
    (`VERIFIER_SPLIT`), or, past an earlier such subgoal, halfway from it toward the template's limit.
    """
    preds = LIBRARY[frag["family"]]
    subgoals = frag["subgoals"]
    if stage < len(subgoals):
        target, limit = subgoals[stage], None
    else:
        table = VERIFIER_SPLIT[frag["family"]]
        template = table.get(frag["variant"], table.get("*"))
        target, limit = {"predicate": template["predicate"], "params": template["params"]}, template["limit"]
    pred = preds[target["predicate"]]
    key = pred.split_param
    if key is None:
        return None
    spec = pred.params[key]
    previous = [sg["params"][key] for sg in subgoals[:stage] if sg["predicate"] == target["predicate"]]
    if limit is None:
        anchor, value = (
            target["params"][key],
            0.5 * ((previous[-1] if previous else spec.easy) + target["params"][key]),
        )
    elif previous:
        anchor, value = previous[-1], 0.5 * (previous[-1] + limit)
    else:
        anchor, value = None, target["params"][key]
    if anchor is not None and abs(value - anchor) < 0.02 * (spec.hi - spec.lo):
        return None  # too close to its neighbour to be a distinct milestone
    return {"predicate": target["predicate"], "params": {**target["params"], key: round(float(value), 6)}}
