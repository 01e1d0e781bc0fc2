"""The training-program fragment schema: `validate_fragment` and the refinement defaults.

A fragment is a plain JSON document (a diagnosis compiler or an LLM backend writes it): the family and
task variant, the potential kind (``staged`` or ``zero``), its source, the cumulative subgoals (library
predicates with bounded numeric parameters, each later subgoal of a predicate at least as hard as the
previous one), one positive weight per stage (every subgoal, then the verifier), the refinement settings
and the refinement log. `validate_fragment` checks untrusted input field by field and returns the
canonical copy every other module works on (defaults filled in, weights normalised).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from coda.errors import ProgramError
from coda.learn.predicates import library
from coda.sim.families import REGISTRY

SCHEMA_KEYS = {
    "family",
    "variant",
    "potential",
    "source",
    "subgoals",
    "weights",
    "refinement",
    "refinements",
    "diagnosis",
    "instruction",
}
DEFAULT_REFINEMENT = {"enabled": True, "window": 3, "epsilon": 0.05, "reweight": 1.5, "max_subgoals": 10}


def finite_number(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProgramError(path, f"expected a finite number, got {value!r}")
    return float(value)


def validate_fragment(fragment: Mapping[str, Any]) -> dict[str, Any]:
    """Check a fragment against the schema; return its canonical copy (defaults filled, weights normalised
    to sum to the number of stages). Raises `ProgramError` naming the offending field."""
    if not isinstance(fragment, Mapping):
        raise ProgramError("fragment", f"expected a JSON object, got {type(fragment).__name__}")
    unknown = sorted(set(fragment) - SCHEMA_KEYS)
    if unknown:
        raise ProgramError(unknown[0], f"unknown field; allowed: {sorted(SCHEMA_KEYS)}")
    for key in ("family", "variant", "subgoals"):
        if key not in fragment:
            raise ProgramError(key, "missing required field")
    family, variant = fragment["family"], fragment["variant"]
    if family not in REGISTRY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
    if variant not in REGISTRY[family].variants:
        raise ProgramError(
            "variant", f"{family} has variants {list(REGISTRY[family].variants)}, got {variant!r}"
        )
    kind = fragment.get("potential", "staged")
    if kind not in ("staged", "zero"):
        raise ProgramError("potential", f"expected 'staged' or 'zero', got {kind!r}")
    source = fragment.get("source", "diagnosis")
    if source not in ("diagnosis", "task_description", "sparse", "llm"):
        raise ProgramError("source", f"expected diagnosis, task_description, sparse or llm, got {source!r}")
    subgoals = fragment["subgoals"]
    if not isinstance(subgoals, list):
        raise ProgramError("subgoals", "expected a list")
    if kind == "zero" and subgoals:
        raise ProgramError("subgoals", "a 'zero' potential has no subgoals")
    preds = library(family, variant)
    out_subgoals = []
    for i, sg in enumerate(subgoals):
        path = f"subgoals[{i}]"
        if not isinstance(sg, Mapping):
            raise ProgramError(path, "expected an object with 'predicate' and 'params'")
        extra = sorted(set(sg) - {"predicate", "params"})
        if extra:
            raise ProgramError(f"{path}.{extra[0]}", "unknown field; allowed: predicate, params")
        name = sg.get("predicate")
        if name not in preds:
            raise ProgramError(
                f"{path}.predicate",
                f"unknown predicate {name!r} for {family}/{variant}; expected one of {sorted(preds)}",
            )
        params = sg.get("params", {})
        if not isinstance(params, Mapping):
            raise ProgramError(f"{path}.params", "expected an object")
        spec = preds[name]
        for key in params:
            if key not in spec.params:
                raise ProgramError(
                    f"{path}.params.{key}",
                    f"unknown parameter of {name!r}; expected one of {sorted(spec.params)}",
                )
        clean = {}
        for key, prm in spec.params.items():
            value = finite_number(f"{path}.params.{key}", params.get(key, prm.default))
            if not prm.lo <= value <= prm.hi:
                raise ProgramError(f"{path}.params.{key}", f"{value} is outside [{prm.lo}, {prm.hi}]")
            clean[key] = value
        key = spec.split_param
        earlier = [sg["params"][key] for sg in out_subgoals if key and sg["predicate"] == name]
        if earlier and abs(clean[key] - spec.params[key].easy) < abs(earlier[-1] - spec.params[key].easy):
            raise ProgramError(
                f"{path}.params.{key}",
                f"subgoals are cumulative: a later {name!r} must be at "
                f"least as hard as the previous one ({earlier[-1]})",
            )
        out_subgoals.append({"predicate": name, "params": clean})
    n = 0 if kind == "zero" else len(out_subgoals) + 1
    weights = fragment.get("weights", [1.0] * n)
    if not isinstance(weights, list) or len(weights) != n:
        raise ProgramError("weights", f"expected a list of {n} numbers (one per subgoal, then the verifier)")
    weights = [finite_number(f"weights[{i}]", w) for i, w in enumerate(weights)]
    for i, w in enumerate(weights):
        if w <= 0:
            raise ProgramError(f"weights[{i}]", f"must be positive, got {w}")
    total = sum(weights)
    if abs(total - n) > 1e-9:  # normalise (already-canonical weights are left bit-identical)
        weights = [w * n / total for w in weights]
    if not isinstance(fragment.get("refinements", []), list):
        raise ProgramError("refinements", "expected a list (the refinement log)")
    refinement = dict(DEFAULT_REFINEMENT)
    given = fragment.get("refinement", {})
    if not isinstance(given, Mapping):
        raise ProgramError("refinement", "expected an object")
    for key, value in given.items():
        if key not in DEFAULT_REFINEMENT:
            raise ProgramError(
                f"refinement.{key}", f"unknown setting; expected one of {sorted(DEFAULT_REFINEMENT)}"
            )
        if key == "enabled":
            if not isinstance(value, bool):
                raise ProgramError("refinement.enabled", f"expected true or false, got {value!r}")
        elif key in ("window", "max_subgoals"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 2:
                raise ProgramError(f"refinement.{key}", f"expected an integer >= 2, got {value!r}")
        elif finite_number(f"refinement.{key}", value) <= (1.0 if key == "reweight" else 0.0):
            raise ProgramError(f"refinement.{key}", f"out of range: {value!r}")
        refinement[key] = value
    out = {
        "family": family,
        "variant": variant,
        "potential": kind,
        "source": source,
        "subgoals": out_subgoals,
        "weights": weights,
        "refinement": refinement,
        "refinements": copy.deepcopy(list(fragment.get("refinements", []))),
    }
    for key in ("diagnosis", "instruction"):
        if key in fragment:
            out[key] = copy.deepcopy(fragment[key])
    return out
