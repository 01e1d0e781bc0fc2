"""The schema of LIBERO programs: JSON documents that memory validates and stores (interpreted by
`coda.domains.libero.interpret`).

A LIBERO generation program recreates a difficulty of one source task by perturbing what LIBERO-Pro
perturbs, within our own generator space:

* ``"perturbs": "position"`` either translates the goal object or the goal target by an (x, y) offset
  drawn from ``"dx"``/``"dy"`` intervals (``"shift"``; metres, clamped to ±``SHIFT_MAX``), or places it at
  an absolute table position drawn from ``"x"``/``"y"`` intervals (``"place"``; metres in the table frame,
  clamped to ``TABLE``: positions the SFT demonstrations never use, farther than a shift reaches), or makes
  the goal object exchange places with another movable object of the scene, the ``rank``-th nearest one
  (``"swap": {"ranks": [...]}``, ranks 0..``MAX_RANK``: every other movable object of a ``libero_object``
  scene, so the goal can stand at any other object's place);
* ``"perturbs": "instruction"`` either rewrites the instruction with one of our paraphrase templates
  (``"paraphrase"``: ``TEMPLATES``, written offline for this project; an optional article drop), keeping the
  object and target phrases of the original instruction, or retargets it (``"retarget": {"ranks": [...]}``,
  ranks 0..``MAX_RETARGET_RANK``): a new task in the same scene, whose goal object and instruction name
  the goal's ``rank``-th nearest movable object instead (the ordering of ``swap``, less the object that
  LIBERO-Pro ``_task`` holds out as that task's new goal: `coda.sim.libero.heldout`).

A training program holds the per-phase weights of the shaping potential (subgoals) and the
planner-demonstration tool. Errors are `ProgramError`s naming the field.

Example:
    >>> doc = validate_generation({"kind": "generation", "family": "libero_object", "task": 3,
    ...     "perturbs": "position", "shift": {"role": "object", "dx": [0.02, 0.05], "dy": [0, 0]}})
    >>> doc["id"].startswith("gp-")
    True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.memory.program_fields import ProgramError, by_kind, content_id

__all__ = [
    "GENERATION_KEYS",
    "MAX_RETARGET_RANK",
    "PHASES",
    "TABLE",
    "TEMPLATES",
    "TRAINING_KEYS",
    "is_libero",
    "validate_generation",
    "validate_program",
    "validate_training",
]

VERSION = 1
SHIFT_MAX = 0.10  # metres: the largest offset a position program may apply on x or y
# metres, table frame: where a `place` program may put an object, (x low, x high), (y low, y high). The
# libero_object scenes' objects stand in x -0.21..0.15, y -0.25..0.27 (basket included); the box adds a
# margin the planner still reaches, inside the reset check's workspace (x -0.45..0.35, y -0.45..0.45)
TABLE = ((-0.30, 0.25), (-0.30, 0.30))
ROLES = ("object", "target")
PERTURBS = ("position", "instruction")
SOURCES = ("template", "random", "manual")
PHASES = ("reached", "grasped", "lifted", "above_target", "placed")  # coda.sim.libero.env.PHASES
# Paraphrase templates of a pick-and-place instruction ({obj}, {target}: the original phrases; {rel}: in/on).
TEMPLATES = (
    "pick up the {obj} and place it {rel} the {target}",
    "put the {obj} {rel} the {target}",
    "grab the {obj} and drop it {rel} the {target}",
    "move the {obj} {rel} the {target}",
    "take the {obj} and set it {rel} the {target}",
    "lift the {obj} and put it {rel} the {target}",
    "place the {obj} {rel} the {target}",
    "get the {obj} and leave it {rel} the {target}",
    "carry the {obj} over and lay it {rel} the {target}",
    "transfer the {obj} {rel} the {target}",
)
_HEADER_KEYS = ("kind", "version", "id", "family", "mode", "source", "task")
GENERATION_KEYS = _HEADER_KEYS + ("perturbs", "shift", "place", "swap", "paraphrase", "retarget")
POSITION_OPS = ("shift", "place", "swap")  # a position program has exactly one of these
# every other movable object of a libero_object scene (5 besides the goal and the basket): LIBERO-Pro's
# `_swap` partners are ranks 0..4 of the goal's neighbours (tasks 4 and 9: rank 4)
MAX_RANK = 4
# the same neighbours; a retarget never names the task's held-out `_task` goal, so ranks 0..3 name the four
# others and rank 4 wraps to rank 0 (kept so that programs written before the exclusion stay valid)
MAX_RETARGET_RANK = 4
TRAINING_KEYS = _HEADER_KEYS + ("phase_weights", "planner_demos")


def is_libero(doc: Any) -> bool:
    """Whether a program document belongs to a LIBERO suite (its family names one: ``libero_*``)."""
    return isinstance(doc, Mapping) and str(doc.get("family", "")).startswith("libero_")


# -- validation --------------------------------------------------------------------------------------------
def _keys(path: str, d: Any, allowed: tuple[str, ...], required: tuple[str, ...]) -> Mapping:
    if not isinstance(d, Mapping):
        raise ProgramError(path or "program", f"expected a JSON object, got {type(d).__name__}")
    for k in d:
        if k not in allowed:
            raise ProgramError(
                f"{path}.{k}" if path else str(k), f"unknown key; allowed: {', '.join(allowed)}"
            )
    for k in required:
        if k not in d:
            raise ProgramError(f"{path}.{k}" if path else k, "missing")
    return d


def _int(path: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProgramError(path, f"expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def _interval(path: str, value: Any, bounds: tuple[float, float] = (-SHIFT_MAX, SHIFT_MAX)) -> list[float]:
    """The canonical ``[low, high]`` of an interval, clamped to `bounds`."""
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v) for v in value)
    ):
        raise ProgramError(path, f"expected [low, high] numbers, got {value!r}")
    lo, hi = (float(np.clip(v, *bounds)) for v in value)
    if lo > hi:
        raise ProgramError(path, f"low {lo} > high {hi}")
    return [round(lo, 4), round(hi, 4)]


def _ranks(path: str, value: Any, hi: int) -> dict[str, list[int]]:
    """The canonical ``{"ranks": [...]}`` of a swap or retarget (sorted, unique, each in 0..`hi`)."""
    ranks = _keys(path, value, ("ranks",), ("ranks",))["ranks"]
    if not isinstance(ranks, list) or not ranks:
        raise ProgramError(f"{path}.ranks", f"expected a non-empty list of ranks, got {ranks!r}")
    return {"ranks": sorted({_int(f"{path}.ranks[{i}]", k, 0, hi) for i, k in enumerate(ranks)})}


def _region(
    path: str, value: Any, axes: tuple[str, str], bounds: tuple[tuple[float, float], ...]
) -> dict[str, Any]:
    """The canonical ``{"role", axes[0], axes[1]}`` of a shift (offsets) or a place (table positions)."""
    d = _keys(path, value, ("role", *axes), ("role", *axes))
    if d["role"] not in ROLES:
        raise ProgramError(f"{path}.role", f"expected one of {', '.join(ROLES)}, got {d['role']!r}")
    return {
        "role": d["role"],
        **{a: _interval(f"{path}.{a}", d[a], b) for a, b in zip(axes, bounds, strict=True)},
    }


def _header(doc: Any, kind: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    """The checked keys, kind and header fields of a program (the canonical form's first fields)."""
    _keys("", doc, allowed, required)
    if doc.get("kind", kind) != kind:
        raise ProgramError("kind", f"expected {kind!r}, got {doc.get('kind')!r}")
    family = doc.get("family")
    if not isinstance(family, str) or not re.fullmatch(r"libero_[a-z0-9_]+", family):
        raise ProgramError("family", f"expected a LIBERO suite name like 'libero_object', got {family!r}")
    if doc.get("version", VERSION) != VERSION:
        raise ProgramError("version", f"expected {VERSION}, got {doc.get('version')!r}")
    source = doc.get("source", "manual")
    if source not in SOURCES:
        raise ProgramError("source", f"expected one of {', '.join(SOURCES)}, got {source!r}")
    mode = doc.get("mode")
    if mode is not None and (not isinstance(mode, str) or len(mode) > 200):
        raise ProgramError("mode", f"expected a mode id string or null, got {mode!r}")
    return {
        "kind": kind,
        "version": VERSION,
        "family": family,
        "mode": mode,
        "source": source,
        "task": _int("task", doc.get("task"), 0, 999),
    }


def _with_id(canonical: dict[str, Any], given: Any) -> dict[str, Any]:
    canonical["id"] = content_id(canonical)
    if given is not None and given != canonical["id"]:
        raise ProgramError("id", f"{given!r} does not match the program's content id {canonical['id']!r}")
    return canonical


def validate_generation(doc: Any) -> dict[str, Any]:
    """The canonical form of a LIBERO generation program (with its content id); errors name the field."""
    out = _header(doc, "generation", GENERATION_KEYS, ("family", "task", "perturbs"))
    perturbs = doc["perturbs"]
    if perturbs not in PERTURBS:
        raise ProgramError("perturbs", f"expected one of {', '.join(PERTURBS)}, got {perturbs!r}")
    out["perturbs"] = perturbs
    if perturbs == "position":
        for key in ("paraphrase", "retarget"):
            if key in doc:
                raise ProgramError(key, f"a position program has no {key}")
        given = [k for k in POSITION_OPS if k in doc]
        if len(given) != 1:
            raise ProgramError(
                given[1] if len(given) > 1 else "shift",
                "a position program has exactly one of " + ", ".join(POSITION_OPS),
            )
        if "swap" in doc:
            out["swap"] = _ranks("swap", doc["swap"], MAX_RANK)
            return _with_id(out, doc.get("id"))
        if "place" in doc:
            out["place"] = _region("place", doc["place"], ("x", "y"), TABLE)
            return _with_id(out, doc.get("id"))
        out["shift"] = _region("shift", doc["shift"], ("dx", "dy"), ((-SHIFT_MAX, SHIFT_MAX),) * 2)
    else:
        for key in POSITION_OPS:
            if key in doc:
                raise ProgramError(key, f"an instruction program has no {key}")
        if ("paraphrase" in doc) == ("retarget" in doc):
            raise ProgramError(
                "paraphrase", "an instruction program has exactly one of paraphrase and retarget"
            )
        if "retarget" in doc:
            out["retarget"] = _ranks("retarget", doc["retarget"], MAX_RETARGET_RANK)
            return _with_id(out, doc.get("id"))
        para = _keys("paraphrase", doc.get("paraphrase"), ("templates", "drop_articles"), ("templates",))
        templates = para["templates"]
        if not isinstance(templates, list) or not templates or len(templates) > len(TEMPLATES):
            raise ProgramError(
                "paraphrase.templates", f"expected a non-empty list of template ids, got {templates!r}"
            )
        ids = sorted(
            {_int(f"paraphrase.templates[{i}]", t, 0, len(TEMPLATES) - 1) for i, t in enumerate(templates)}
        )
        drop = para.get("drop_articles", False)
        if not isinstance(drop, bool):
            raise ProgramError("paraphrase.drop_articles", f"expected true or false, got {drop!r}")
        out["paraphrase"] = {"templates": ids, "drop_articles": drop}
    return _with_id(out, doc.get("id"))


def validate_training(doc: Any) -> dict[str, Any]:
    """The canonical form of a LIBERO training program: phase weights of the potential + planner demos."""
    out = _header(doc, "training", TRAINING_KEYS, ("family", "task", "phase_weights"))
    weights = doc["phase_weights"]
    if not isinstance(weights, list) or len(weights) != len(PHASES):
        raise ProgramError(
            "phase_weights", f"expected {len(PHASES)} numbers (one per phase {PHASES}), got {weights!r}"
        )
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 10:
            raise ProgramError(f"phase_weights[{i}]", f"expected a number in [0, 10], got {w!r}")
    if sum(weights) <= 0:
        raise ProgramError("phase_weights", "at least one weight must be > 0")
    out["phase_weights"] = [round(float(w), 4) for w in weights]
    out["planner_demos"] = _int("planner_demos", doc.get("planner_demos", 1), 0, 8)
    return _with_id(out, doc.get("id"))


def validate_program(doc: Any) -> dict[str, Any]:
    return by_kind(doc, validate_generation, validate_training)
