"""The diagnosis compiler and the Table 4 front end: diagnoses and task descriptions -> fragments.

`compile_diagnosis` decomposes the diagnosed phase into finer subgoals whose form the cause and factor
select (a rule of `rules`, else the phase's generic expansion), keeps the other phases' default subgoals
and drops subgoals an earlier one implies, so that the sequence stays cumulative. `compile_task_description`
(the ablation) uses the family's default phases from the task alone; `sparse_fragment` is Φ ≡ 0.
`Text2Potential` picks among them, and refines, per Table 4 variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from coda.errors import ProgramError
from coda.learn.predicates import LIBRARY, Predicate
from coda.learn.text2potential.fragments import DEFAULT_REFINEMENT, validate_fragment
from coda.learn.text2potential.refinement import refine
from coda.learn.text2potential.rules import EXPANSIONS, default_phases, match_rule, scene_geometry
from coda.sim.families import REGISTRY
from coda.sim.families.base import SceneContext

Variant = Literal["sparse", "task_description", "no_refinement", "full"]  # Table 4 rows
VARIANTS: tuple[str, ...] = get_args(Variant)


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
    phases = default_phases(family, variant)
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
    geo = scene_geometry(family, variant, ctx)
    rule = match_rule(family, phase, factor, cause)
    subgoals: list[dict] = []
    for name, default in phases:
        if name != phase:
            subgoals += default(geo)
        else:
            subgoals += rule.build(geo) if rule else EXPANSIONS[family][name](geo)
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
    geo = scene_geometry(family, variant, ctx)
    subgoals = [sg for _, default in default_phases(family, variant) for sg in default(geo)]
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
