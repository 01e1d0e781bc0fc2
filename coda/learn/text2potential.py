"""Text2potential (paper §3.4): diagnoses -> cumulative subgoals -> staged potential Φ(s) -> chunk shaping.

A diagnosis ``{family, phase, factor, cause}`` is compiled into a *training-program fragment*, a plain
JSON document an LLM backend can also write::

    {"family": "pick_place", "variant": "bin", "potential": "staged", "source": "diagnosis",
     "subgoals": [{"predicate": "reach", "params": {"dist": 0.03}},
                  {"predicate": "pregrasp_open", "params": {"width": 0.062, "dist": 0.03}}, ...],
     "weights": [1.0, ...],                       # one per stage: every subgoal, then the verifier
     "refinement": {"enabled": true, "window": 3, "epsilon": 0.05, ...}, "refinements": [...]}

Subgoals come from a per-family library of parameterised predicates on simulator state (the ``state`` dicts
of `coda.sim.rollout.RolloutRecord`); each has a bounded in-stage progress function in [0, 1]. The task
verifier is always the final, implicit stage. Subgoals are *cumulative*: satisfying subgoal j certifies
subgoals 1..j-1 (a later subgoal is only reachable through the earlier ones), so the stage of a state is
the highest subgoal it satisfies, and along a trajectory the stage is latched at the highest reached so far.
With stage weights w (normalised to sum to the number of stages n; all 1 by default)::

    Φ(s) = Σ_{i<k} w_i + w_k · min(p_k(s), IN_STAGE_CAP)      k = stage, p_k = progress toward stage k+1
    Φ(s) = n                                                    when the verifier holds

Φ is evaluated only at chunk endpoints; the shaping term of a chunk is F = γ^h Φ(s_{t+h}) − Φ(s_t).

Example:
    >>> frag = compile_diagnosis({"family": "pick_place", "phase": "grasp", "factor": "scale",
    ...                           "cause": "fingers not opened wide enough"}, record.context())
    >>> pot = compile_potential(frag)
    >>> pot.phi_along(record)          # (n_chunks + 1,) at chunk starts and the final state
    >>> pot.shaping(record, gamma=0.99) # (n_chunks,)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from coda.learn.predicates import (  # noqa: F401  (ProgramError, library_spec: re-exported API)
    LIBRARY,
    VERIFIER_PROGRESS,
    VERIFIER_SPLIT,
    Predicate,
    ProgramError,
    _init_frac,
    _obj,
    _push_start_dist,
    library,
    library_spec,
)
from coda.sim.families import REGISTRY
from coda.sim.families.base import SceneContext, State
from coda.sim.families.drawer import CLOSED_FRAC
from coda.sim.families.push import GOAL_TOL

Variant = Literal["sparse", "task_description", "no_refinement", "full"]  # Table 4 rows
VARIANTS: tuple[str, ...] = get_args(Variant)
IN_STAGE_CAP = 0.9  # in-stage progress never exceeds this fraction of a stage: reaching a stage always pays
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


# ==================================================================================================
# schema validation
# ==================================================================================================
def _number(path: str, value: Any) -> float:
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
            value = _number(f"{path}.params.{key}", params.get(key, prm.default))
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
    weights = [_number(f"weights[{i}]", w) for i, w in enumerate(weights)]
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
        elif _number(f"refinement.{key}", value) <= (1.0 if key == "reweight" else 0.0):
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


# ==================================================================================================
# the staged potential
# ==================================================================================================
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


# ==================================================================================================
# compilation: phase -> decomposition, cause/factor -> potential construction
# ==================================================================================================
def _sg(predicate: str, **params: float) -> dict[str, Any]:
    return {"predicate": predicate, "params": params}


def _geometry(family: str, variant: str, ctx: SceneContext | None) -> dict[str, float]:
    """Scene-dependent parameter values (defaults when no scene is given)."""
    geo = {
        "width": 0.075,
        "radius": 0.05 if family == "pick_place" else (0.01 if variant == "on_center" else 0.015),
        "close_mid": 0.4,
        "close_start": 0.7,
        "push_full": 0.6,
    }
    if ctx is None:
        return geo
    if family in ("pick_place", "stack"):
        half = ctx.half_extents[_obj(ctx)]
        geo["width"] = float(np.clip(2 * min(half[0], half[1]) + 0.03, 0.04, 0.078))
    if family == "pick_place":
        c = ctx.bindings["container"]
        inner = ctx.inner[c][:2] if c in ctx.inner else ctx.half_extents[c][:1]
        geo["radius"] = float(np.clip(0.6 * float(np.min(inner)), 0.01, 0.1))
    elif family == "stack":
        hb = ctx.half_extents[ctx.bindings["base"]]
        tol = 0.012 if ctx.variant == "on_center" else 0.8 * min(hb[0], hb[1])
        geo["radius"] = float(np.clip(0.8 * tol, 0.005, 0.015))
    elif family == "drawer" and variant == "close":
        start = _init_frac(ctx)
        geo["close_mid"] = float(np.clip(0.5 * start, CLOSED_FRAC + 0.05, 0.95))
        geo["close_start"] = float(np.clip(start - 0.05, geo["close_mid"] + 0.02, 1.0))
    elif family == "push":
        # the fraction of the initial distance at which the verifier fires: push subgoals are fractions of it
        geo["push_full"] = float(np.clip(1 - GOAL_TOL / max(_push_start_dist(ctx), 1e-3), 0.2, 0.95))
    return geo


Build = Callable[[dict[str, float]], list[dict[str, Any]]]

# Each family's default decomposition: its phases in order, each with the subgoals that complete it. The
# last phase is completed by the verifier (no subgoal). Same for the task-description ablation.
DEFAULT_PHASES: dict[str, dict[str, list[tuple[str, Build]]]] = {
    "pick_place": {
        "*": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("grasp", lambda g: [_sg("grasp")]),
            ("lift", lambda g: [_sg("lift", height=0.04)]),
            ("transport", lambda g: [_sg("align_xy", radius=g["radius"])]),
            ("place", lambda g: []),
        ]
    },
    "stack": {
        "*": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("grasp", lambda g: [_sg("grasp")]),
            ("lift", lambda g: [_sg("lift", height=0.04)]),
            ("align", lambda g: [_sg("align_xy", radius=g["radius"])]),
            ("place", lambda g: []),
        ]
    },
    "drawer": {
        "open": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("grasp", lambda g: [_sg("grasp")]),
            ("pull", lambda g: [_sg("drawer_open_frac", frac=0.3)]),
            ("open", lambda g: []),
        ],
        "close": [
            ("reach", lambda g: [_sg("reach", dist=0.03)]),
            ("contact", lambda g: [_sg("contact")]),
            ("push", lambda g: [_sg("drawer_close_frac", frac=g["close_mid"])]),
            ("close", lambda g: []),
        ],
    },
    "push": {
        "*": [
            ("reach", lambda g: [_sg("reach", dist=0.04, lateral=0.025)]),
            ("contact", lambda g: [_sg("contact")]),
            ("push", lambda g: [_sg("push_progress", frac=0.5 * g["push_full"])]),
            ("arrive", lambda g: []),
        ]
    },
}


@dataclass(frozen=True)
class Rule:
    """Potential construction for a diagnosed phase: triggered by the factor or a cause keyword."""

    name: str
    phases: tuple[str, ...]
    factors: tuple[str, ...]  # tokens of the diagnosed factor name ("target_yaw" -> target, yaw)
    keywords: tuple[str, ...]  # substrings of the lower-cased cause text
    build: Build


YAW_WORDS = ("yaw", "orient", "rotat", "angle", "misalign", "twist")
REACH_WORDS = ("miss", "far", "short", "overshoot", "position", "offset", "approach")
WIDTH_WORDS = ("width", "wide", "open", "size", "large", "big", "scale", "narrow", "bulky")
SLIP_WORDS = ("slip", "friction", "loose", "heavy", "mass", "weight", "drop")
CLUTTER_WORDS = ("collid", "collision", "clutter", "distractor", "knock", "obstacle", "hit")
PRECISION_WORDS = ("offset", "align", "centre", "center", "tilt", "topple", "fell", "edge", "miss")
RELEASE_WORDS = ("drop", "bounce", "release", "roll", "throw")
STUCK_WORDS = ("stuck", "friction", "resist", "jam", "slip", "stall", "heavy")

_OBJECT_RULES = (
    Rule(
        "approach_with_yaw",
        ("reach",),
        ("yaw",),
        YAW_WORDS,
        lambda g: [_sg("reach", dist=0.08), _sg("align_yaw", tol=0.15), _sg("reach", dist=0.03)],
    ),
    Rule(
        "coarse_to_fine_reach",
        ("reach",),
        ("position", "distractors", "instance"),
        REACH_WORDS + CLUTTER_WORDS,
        lambda g: [_sg("reach", dist=0.1), _sg("reach", dist=0.05), _sg("reach", dist=0.02)],
    ),
    Rule(
        "wider_pregrasp",
        ("grasp",),
        ("scale", "instance"),
        WIDTH_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("pregrasp_open", width=g["width"], dist=0.03), _sg("grasp")],
    ),
    Rule(
        "grasp_yaw",
        ("grasp",),
        ("yaw",),
        YAW_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("align_yaw", tol=0.1, dist=0.03), _sg("grasp")],
    ),
    Rule(
        "secure_grasp",
        ("grasp",),
        ("friction", "mass"),
        SLIP_WORDS,
        lambda g: [_sg("reach", dist=0.03), _sg("grasp"), _sg("lift", height=0.01)],
    ),
    Rule(
        "precise_reach",
        ("grasp",),
        ("position",),
        REACH_WORDS,
        lambda g: [_sg("reach", dist=0.06), _sg("reach", dist=0.015), _sg("grasp")],
    ),
    Rule(
        "higher_lift",
        ("lift",),
        ("mass",),
        ("heavy", "mass", "weight", "drop"),
        lambda g: [_sg("lift", height=0.02), _sg("lift", height=0.08)],
    ),
    Rule(
        "gradual_lift",
        ("lift",),
        ("friction",),
        ("slip", "friction", "loose"),
        lambda g: [_sg("lift", height=0.01), _sg("lift", height=0.03), _sg("lift", height=0.06)],
    ),
    Rule(
        "high_carry",
        ("transport", "align"),
        ("distractors",),
        CLUTTER_WORDS,
        lambda g: [
            _sg("lift", height=0.1),
            _sg("align_xy", radius=0.15),
            _sg("align_xy", radius=g["radius"]),
        ],
    ),
    Rule(
        "coarse_to_fine_transport",
        ("transport", "align"),
        ("position", "yaw"),
        REACH_WORDS + PRECISION_WORDS,
        lambda g: [
            _sg("align_xy", radius=max(4 * g["radius"], 0.08)),
            _sg("align_xy", radius=2 * g["radius"]),
            _sg("align_xy", radius=g["radius"]),
        ],
    ),
    Rule(
        "precise_place",
        ("place",),
        ("position", "yaw", "scale"),
        PRECISION_WORDS,
        lambda g: [
            _sg("align_xy", radius=0.6 * g["radius"]),
            _sg("lower", height=0.03, radius=0.6 * g["radius"]),
        ],
    ),
    Rule(
        "gentle_release",
        ("place",),
        ("mass", "friction"),
        RELEASE_WORDS,
        lambda g: [_sg("lower", height=0.03, radius=g["radius"])],
    ),
)
_OBJECT_EXPANSION: dict[str, Build] = {
    "reach": lambda g: [_sg("reach", dist=0.08), _sg("reach", dist=0.03)],
    "grasp": lambda g: [_sg("reach", dist=0.03), _sg("pregrasp_open", width=0.07, dist=0.03), _sg("grasp")],
    "lift": lambda g: [_sg("lift", height=0.02), _sg("lift", height=0.04)],
    "transport": lambda g: [
        _sg("align_xy", radius=max(3 * g["radius"], 0.06)),
        _sg("align_xy", radius=g["radius"]),
    ],
    "align": lambda g: [
        _sg("align_xy", radius=max(3 * g["radius"], 0.06)),
        _sg("align_xy", radius=g["radius"]),
    ],
    "place": lambda g: [_sg("lower", height=0.04, radius=g["radius"])],
}

RULES: dict[str, tuple[Rule, ...]] = {
    "pick_place": _OBJECT_RULES,
    "stack": _OBJECT_RULES,
    "drawer": (
        Rule(
            "approach_with_yaw",
            ("reach",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("reach", dist=0.08), _sg("align_yaw", tol=0.15), _sg("reach", dist=0.03)],
        ),
        Rule(
            "coarse_to_fine_reach",
            ("reach",),
            ("position", "part", "scale"),
            REACH_WORDS,
            lambda g: [_sg("reach", dist=0.1), _sg("reach", dist=0.05), _sg("reach", dist=0.03)],
        ),
        Rule(
            "grasp_yaw",
            ("grasp",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.03), _sg("grasp")],
        ),
        Rule(
            "contact_yaw",
            ("contact",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.03), _sg("contact")],
        ),
        Rule(
            "wider_pregrasp",
            ("grasp",),
            ("scale", "instance", "part"),
            WIDTH_WORDS,
            lambda g: [_sg("pregrasp_open", width=0.075, dist=0.03), _sg("grasp")],
        ),
        Rule(
            "gradual_pull",
            ("pull",),
            ("friction", "scale"),
            STUCK_WORDS,
            lambda g: [
                _sg("drawer_open_frac", frac=0.1),
                _sg("drawer_open_frac", frac=0.2),
                _sg("drawer_open_frac", frac=0.3),
            ],
        ),
        Rule(
            "pull_further",
            ("open",),
            ("friction", "scale"),
            STUCK_WORDS + ("short", "partial", "not enough"),
            lambda g: [_sg("drawer_open_frac", frac=0.4), _sg("drawer_open_frac", frac=0.5)],
        ),
        Rule(
            "gradual_push",
            ("push",),
            ("friction", "scale"),
            STUCK_WORDS,
            lambda g: [
                _sg("drawer_close_frac", frac=g["close_start"]),
                _sg("drawer_close_frac", frac=0.5 * (g["close_start"] + g["close_mid"])),
                _sg("drawer_close_frac", frac=g["close_mid"]),
            ],
        ),
        Rule(
            "push_further",
            ("close",),
            ("friction", "scale"),
            STUCK_WORDS + ("short", "partial", "not enough"),
            lambda g: [_sg("drawer_close_frac", frac=0.5 * (g["close_mid"] + CLOSED_FRAC))],
        ),
    ),
    "push": (
        Rule(
            "approach_with_yaw",
            ("reach",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.2, dist=0.1), _sg("reach", dist=0.04, lateral=0.025)],
        ),
        Rule(
            "push_face_yaw",
            ("contact",),
            ("yaw",),
            YAW_WORDS,
            lambda g: [_sg("align_yaw", tol=0.1, dist=0.02), _sg("contact")],
        ),
        Rule(
            "line_up_behind",
            ("reach",),
            ("position", "goal", "distractors"),
            REACH_WORDS + CLUTTER_WORDS,
            lambda g: [
                _sg("reach", dist=0.1, lateral=0.06),
                _sg("reach", dist=0.06, lateral=0.04),
                _sg("reach", dist=0.04, lateral=0.02),
            ],
        ),
        Rule(
            "steady_push",
            ("push",),
            ("friction", "mass", "yaw", "scale"),
            SLIP_WORDS + ("drift", "veer", "rotat", "off the line", "lost contact"),
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.25, 0.5, 0.75)],
        ),
        Rule(
            "long_push",
            ("push",),
            ("goal", "position"),
            REACH_WORDS,
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.33, 0.66)],
        ),
        Rule(
            "final_approach",
            ("arrive",),
            ("goal", "friction", "mass", "position"),
            REACH_WORDS + ("stop", "past"),
            lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.7, 0.85)],
        ),
    ),
}
_EXPANSION: dict[str, dict[str, Build]] = {
    "pick_place": _OBJECT_EXPANSION,
    "stack": _OBJECT_EXPANSION,
    "drawer": {
        "reach": lambda g: [_sg("reach", dist=0.08), _sg("reach", dist=0.03)],
        "grasp": lambda g: [
            _sg("pregrasp_open", width=0.07, dist=0.03),
            _sg("align_yaw", tol=0.15, dist=0.03),
            _sg("grasp"),
        ],
        "pull": lambda g: [_sg("drawer_open_frac", frac=0.15), _sg("drawer_open_frac", frac=0.3)],
        "open": lambda g: [_sg("drawer_open_frac", frac=0.45)],
        "contact": lambda g: [
            _sg("align_yaw", tol=0.15, dist=0.03),
            _sg("contact"),
            _sg("drawer_close_frac", frac=g["close_start"]),
        ],
        "push": lambda g: [
            _sg("drawer_close_frac", frac=g["close_start"]),
            _sg("drawer_close_frac", frac=g["close_mid"]),
        ],
        "close": lambda g: [_sg("drawer_close_frac", frac=0.5 * (g["close_mid"] + CLOSED_FRAC))],
    },
    "push": {
        "reach": lambda g: [_sg("reach", dist=0.1, lateral=0.06), _sg("reach", dist=0.04, lateral=0.025)],
        "contact": lambda g: [_sg("reach", dist=0.04, lateral=0.015), _sg("contact")],
        "push": lambda g: [_sg("push_progress", frac=f * g["push_full"]) for f in (0.25, 0.5)],
        "arrive": lambda g: [_sg("push_progress", frac=0.8 * g["push_full"])],
    },
}


def _resolve_scene(scene_or_ctx: Any) -> tuple[SceneContext | None, str | None]:
    """(context, task variant) from a SceneContext, a SceneSpec, a RolloutRecord or None."""
    if scene_or_ctx is None:
        return None, None
    if isinstance(scene_or_ctx, SceneContext):
        return scene_or_ctx, scene_or_ctx.variant
    if hasattr(scene_or_ctx, "context"):  # a RolloutRecord
        ctx = scene_or_ctx.context()
        return ctx, ctx.variant
    if hasattr(scene_or_ctx, "task"):  # a SceneSpec: only the task variant, no settled geometry
        return None, scene_or_ctx.task.variant
    raise TypeError(
        f"expected a SceneContext, SceneSpec, RolloutRecord or None, got {type(scene_or_ctx).__name__}"
    )


def _phases(family: str, variant: str) -> list[tuple[str, Build]]:
    table = DEFAULT_PHASES[family]
    return table[variant] if variant in table else table["*"]


def _match_rule(family: str, phase: str, factor: str, cause: str) -> Rule | None:
    """The first rule for the phase whose factor matches; failing that, the first whose keyword is in the cause."""
    candidates = [r for r in RULES[family] if phase in r.phases]
    tokens = set(factor.lower().split("_"))
    for rule in candidates:
        if tokens & set(rule.factors):
            return rule
    text = cause.lower()
    for rule in candidates:
        if any(word in text for word in rule.keywords):
            return rule
    return None


def _fragment(family: str, variant: str, subgoals: list[dict], source: str, **extra: Any) -> dict[str, Any]:
    frag = {
        "family": family,
        "variant": variant,
        "potential": "staged",
        "source": source,
        "subgoals": subgoals,
        "weights": [1.0] * (len(subgoals) + 1),
        "refinement": dict(DEFAULT_REFINEMENT),
        "refinements": [],
    }
    frag.update(extra)
    return validate_fragment(frag)


def compile_diagnosis(diagnosis: Mapping[str, Any], scene_or_ctx: Any = None) -> dict[str, Any]:
    """Deterministic Text2potential: the diagnosed phase is decomposed into finer subgoals whose form the
    cause/factor selects (a `Rule`, else the phase's generic expansion); the other phases keep their
    default subgoals; the verifier completes the last stage. Parameters adapt to the scene when given."""
    if not isinstance(diagnosis, Mapping):
        raise ProgramError("diagnosis", f"expected an object, got {type(diagnosis).__name__}")
    family = diagnosis.get("family")
    if family not in REGISTRY:
        raise ProgramError(
            "diagnosis.family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}"
        )
    ctx, scene_variant = _resolve_scene(scene_or_ctx)
    if ctx is not None and ctx.family != family:
        raise ProgramError("diagnosis.family", f"{family!r} diagnosis for a {ctx.family!r} scene")
    variant = diagnosis.get("variant") or scene_variant or REGISTRY[family].variants[0]
    if variant not in REGISTRY[family].variants:
        raise ProgramError(
            "diagnosis.variant", f"{family} has variants {list(REGISTRY[family].variants)}, got {variant!r}"
        )
    phases = _phases(family, variant)
    phase = diagnosis.get("phase")
    if phase not in [name for name, _ in phases]:
        raise ProgramError(
            "diagnosis.phase", f"{family}/{variant} has phases {[n for n, _ in phases]}, got {phase!r}"
        )
    factor = diagnosis.get("factor") or ""
    if factor and factor not in REGISTRY[family].factors:
        raise ProgramError(
            "diagnosis.factor", f"{family} has factors {list(REGISTRY[family].factors)}, got {factor!r}"
        )
    cause = diagnosis.get("cause") or ""
    if not isinstance(cause, str):
        raise ProgramError("diagnosis.cause", f"expected text, got {type(cause).__name__}")
    geo = _geometry(family, variant, ctx)
    rule = _match_rule(family, phase, factor, cause)
    subgoals: list[dict] = []
    for name, default in phases:
        if name != phase:
            subgoals += default(geo)
        else:
            subgoals += rule.build(geo) if rule else _EXPANSION[family][name](geo)
    record = {
        "family": family,
        "variant": variant,
        "phase": phase,
        "factor": factor,
        "cause": cause,
        "construction": rule.name if rule else f"refine_{phase}",
    }
    return _fragment(family, variant, _merge(LIBRARY[family], subgoals), "diagnosis", diagnosis=record)


def _merge(preds: dict[str, Predicate], subgoals: list[dict]) -> list[dict]:
    """Drop subgoals implied by an earlier one of the same predicate (an expansion may restate or loosen the
    previous phase's subgoal): keeps the sequence cumulative."""
    out: list[dict] = []
    for sg in subgoals:
        key = preds[sg["predicate"]].split_param
        same = [o for o in out if o["predicate"] == sg["predicate"]]
        if same:
            if same[-1] == sg:
                continue
            easy = preds[sg["predicate"]].params[key].easy if key else None
            if key and abs(sg["params"][key] - easy) <= abs(same[-1]["params"][key] - easy):
                continue
        out.append(sg)
    return out


def compile_task_description(
    instruction: str, family: str, variant: str | None = None, scene_or_ctx: Any = None
) -> dict[str, Any]:
    """The Table 4 ablation: generic stages from the family's default phases, from the task alone."""
    if family not in REGISTRY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
    ctx, scene_variant = _resolve_scene(scene_or_ctx)
    if variant is None:
        variant = scene_variant or _variant_from_instruction(instruction, family)
    if variant not in REGISTRY[family].variants:
        raise ProgramError(
            "variant", f"{family} has variants {list(REGISTRY[family].variants)}, got {variant!r}"
        )
    geo = _geometry(family, variant, ctx)
    subgoals = [sg for _, default in _phases(family, variant) for sg in default(geo)]
    return _fragment(family, variant, subgoals, "task_description", instruction=instruction)


def _variant_from_instruction(instruction: str, family: str) -> str:
    if family == "drawer":
        words = instruction.lower()
        closing = ("close", "shut it", "drawer shut", "push", "drawer in")
        return "close" if any(w in words for w in closing) else "open"
    return REGISTRY[family].variants[0]


def sparse_fragment(family: str, variant: str) -> dict[str, Any]:
    """Φ ≡ 0: the sparse-reward row of Table 4."""
    return validate_fragment(
        {
            "family": family,
            "variant": variant,
            "potential": "zero",
            "source": "sparse",
            "subgoals": [],
            "weights": [],
        }
    )


# ==================================================================================================
# refinement
# ==================================================================================================
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
    history = [_number(f"progress_history[{i}]", v) for i, v in enumerate(progress_history)]
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


# ==================================================================================================
# front end: the Table 4 variants
# ==================================================================================================
@dataclass(frozen=True)
class Text2Potential:
    """Compiles diagnoses into training-program fragments and refines them, per Table 4 variant.

    ``sparse``: Φ ≡ 0. ``task_description``: generic family stages from the instruction alone (refined like
    ``full``). ``no_refinement``: diagnosis-compiled, never refined. ``full``: diagnosis-compiled and refined.
    """

    variant: Variant = "full"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")

    def compile(
        self,
        diagnosis: Mapping[str, Any] | None,
        scene_or_ctx: Any = None,
        *,
        family: str | None = None,
        task_variant: str | None = None,
        instruction: str = "",
    ) -> dict[str, Any]:
        """A fragment for this variant; without a diagnosis, diagnosis-based variants fall back to the task."""
        ctx, scene_variant = _resolve_scene(scene_or_ctx)
        family = family or (diagnosis or {}).get("family") or (ctx.family if ctx else None)
        if family not in REGISTRY:
            raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
        task_variant = task_variant or (diagnosis or {}).get("variant") or scene_variant
        if self.variant == "sparse":
            return sparse_fragment(family, task_variant or REGISTRY[family].variants[0])
        if self.variant == "task_description" or diagnosis is None:
            frag = compile_task_description(instruction, family, task_variant, scene_or_ctx)
        else:
            frag = compile_diagnosis(diagnosis, scene_or_ctx)
        if self.variant == "no_refinement":
            frag["refinement"]["enabled"] = False
        return frag

    def refine(self, fragment: Mapping[str, Any], progress_history: Sequence[float]) -> dict[str, Any]:
        """No-op for ``sparse`` and ``no_refinement``; otherwise `refine` under the fragment's own switch."""
        enabled = False if self.variant in ("sparse", "no_refinement") else None
        return refine(fragment, progress_history, enabled=enabled)
