"""Generation and training programs for LIBERO tasks: JSON data that our code validates and interprets.

A LIBERO generation program recreates a difficulty of one source task by perturbing what LIBERO-Pro
perturbs, within our own generator space:

* ``"perturbs": "position"`` either translates the goal object or the goal target by an (x, y) offset
  drawn from ``"dx"``/``"dy"`` intervals (``"shift"``; metres, clamped to ±``SHIFT_MAX``), or makes the goal
  object exchange places with another movable object of the scene, the ``rank``-th nearest one
  (``"swap": {"ranks": [...]}``, ranks 0..``MAX_RANK``);
* ``"perturbs": "instruction"`` rewrites the instruction with one of our paraphrase templates
  (``TEMPLATES``, written offline for this project; an optional article drop), keeping the object and
  target phrases of the original instruction.

The LIBERO-Pro evaluation suites (``*_swap``, ``*_lan``) are never read to build a variant. A training
program holds the per-phase weights of the shaping potential (subgoals) and the planner-demonstration tool.

Example:
    >>> doc = validate_generation({"kind": "generation", "family": "libero_object", "task": 3,
    ...     "perturbs": "position", "shift": {"role": "object", "dx": [0.02, 0.05], "dy": [0, 0]}})
    >>> doc["id"].startswith("gp-")
    True
    >>> variant = instantiate(doc, np.random.default_rng(0), "pick up the milk and place it in the basket")
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.memory.programs import ProgramError

VERSION = 1
SHIFT_MAX = 0.10  # metres: the largest offset a position program may apply on x or y
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
_REL = {"in": ("in", "into", "inside"), "on": ("on", "onto", "on top of")}
_PARSE = re.compile(
    r"^(?:pick up|pick|lift|grab|take) (?:the )?(?P<obj>.+?) and (?:place|put|set) it "
    r"(?P<rel>in|on|into|onto) (?:the )?(?P<target>.+)$"
)
GENERATION_KEYS = (
    "kind",
    "version",
    "id",
    "family",
    "mode",
    "source",
    "task",
    "perturbs",
    "shift",
    "swap",
    "paraphrase",
)
MAX_RANK = 3
TRAINING_KEYS = (
    "kind",
    "version",
    "id",
    "family",
    "mode",
    "source",
    "task",
    "phase_weights",
    "planner_demos",
)


def is_libero(doc: Any) -> bool:
    """Whether a program document belongs to a LIBERO suite (its family names one: ``libero_*``)."""
    return isinstance(doc, Mapping) and str(doc.get("family", "")).startswith("libero_")


def parse_instruction(text: str) -> tuple[str, str, str]:
    """(object phrase, relation 'in'|'on', target phrase) of a LIBERO pick-and-place instruction."""
    m = _PARSE.match(text.strip().lower())
    if m is None:
        raise ProgramError("instruction", f"not a pick-and-place instruction: {text!r}")
    rel = "in" if m["rel"] in ("in", "into") else "on"
    return m["obj"], rel, m["target"]


def paraphrase(text: str, template: int, relation: int = 0, drop_articles: bool = False) -> str:
    """`text` rewritten with ``TEMPLATES[template]`` and the ``relation``-th wording of in/on."""
    obj, rel, target = parse_instruction(text)
    words = _REL[rel]
    out = TEMPLATES[template].format(obj=obj, target=target, rel=words[relation % len(words)])
    if drop_articles:
        out = re.sub(r"\bthe ", "", out)
    return out


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


def _interval(path: str, value: Any) -> list[float]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v) for v in value)
    ):
        raise ProgramError(path, f"expected [low, high] numbers, got {value!r}")
    lo, hi = (float(np.clip(v, -SHIFT_MAX, SHIFT_MAX)) for v in value)
    if lo > hi:
        raise ProgramError(path, f"low {lo} > high {hi}")
    return [round(lo, 4), round(hi, 4)]


def _header(doc: Mapping[str, Any], kind: str) -> dict[str, Any]:
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
    body = {k: v for k, v in canonical.items() if k != "id"}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    prefix = "gp-" if canonical["kind"] == "generation" else "tp-"
    canonical["id"] = prefix + digest[:12]
    if given is not None and given != canonical["id"]:
        raise ProgramError("id", f"{given!r} does not match the program's content id {canonical['id']!r}")
    return canonical


def validate_generation(doc: Any) -> dict[str, Any]:
    """The canonical form of a LIBERO generation program (with its content id); errors name the field."""
    _keys("", doc, GENERATION_KEYS, ("family", "task", "perturbs"))
    if doc.get("kind", "generation") != "generation":
        raise ProgramError("kind", f"expected 'generation', got {doc.get('kind')!r}")
    out = _header(doc, "generation")
    perturbs = doc["perturbs"]
    if perturbs not in PERTURBS:
        raise ProgramError("perturbs", f"expected one of {', '.join(PERTURBS)}, got {perturbs!r}")
    out["perturbs"] = perturbs
    if perturbs == "position":
        if "paraphrase" in doc:
            raise ProgramError("paraphrase", "a position program has no paraphrase")
        if ("shift" in doc) == ("swap" in doc):
            raise ProgramError("shift", "a position program has exactly one of shift and swap")
        if "swap" in doc:
            swap = _keys("swap", doc["swap"], ("ranks",), ("ranks",))
            ranks = swap["ranks"]
            if not isinstance(ranks, list) or not ranks:
                raise ProgramError("swap.ranks", f"expected a non-empty list of ranks, got {ranks!r}")
            out["swap"] = {
                "ranks": sorted({_int(f"swap.ranks[{i}]", k, 0, MAX_RANK) for i, k in enumerate(ranks)})
            }
            return _with_id(out, doc.get("id"))
        shift = _keys("shift", doc.get("shift"), ("role", "dx", "dy"), ("role", "dx", "dy"))
        if shift["role"] not in ROLES:
            raise ProgramError("shift.role", f"expected one of {', '.join(ROLES)}, got {shift['role']!r}")
        out["shift"] = {
            "role": shift["role"],
            "dx": _interval("shift.dx", shift["dx"]),
            "dy": _interval("shift.dy", shift["dy"]),
        }
    else:
        for key in ("shift", "swap"):
            if key in doc:
                raise ProgramError(key, f"an instruction program has no {key}")
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
    _keys("", doc, TRAINING_KEYS, ("family", "task", "phase_weights"))
    if doc.get("kind", "training") != "training":
        raise ProgramError("kind", f"expected 'training', got {doc.get('kind')!r}")
    out = _header(doc, "training")
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
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    if kind == "generation":
        return validate_generation(doc)
    if kind == "training":
        return validate_training(doc)
    raise ProgramError("kind", f"expected 'generation' or 'training', got {kind!r}")


# -- interpretation ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One generated LIBERO environment: a source task's bundled initial state plus a perturbation."""

    task: int
    init_index: int
    shifts: dict[str, list[float]] = field(default_factory=dict)  # role ('object'|'target') -> [dx, dy]
    instruction: str | None = None  # a paraphrase, or None for the task's own instruction
    program_id: str | None = None
    swap: int | None = None  # the goal object exchanges places with its `swap`-th nearest movable object

    @property
    def perturbed(self) -> bool:
        return bool(self.shifts) or self.instruction is not None or self.swap is not None

    def control(self) -> Variant:
        """The same initial state without the perturbation (the control of the validation test)."""
        return Variant(self.task, self.init_index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "init_index": self.init_index,
            "shifts": {k: list(v) for k, v in sorted(self.shifts.items())},
            "instruction": self.instruction,
            "program_id": self.program_id,
            "swap": self.swap,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Variant:
        swap = d.get("swap")
        return cls(
            int(d["task"]),
            int(d["init_index"]),
            dict(d["shifts"]),
            d["instruction"],
            d["program_id"],
            None if swap is None else int(swap),
        )

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def instantiate(
    program: Mapping[str, Any], rng: np.random.Generator, instruction: str, init_index: int = 0
) -> Variant:
    """Draw one variant of `program` (validated first) on the source task's initial state `init_index`."""
    doc = validate_generation(program)
    if doc["perturbs"] == "position" and "swap" in doc:
        rank = int(rng.choice(doc["swap"]["ranks"]))
        return Variant(doc["task"], init_index, {}, None, doc["id"], rank)
    if doc["perturbs"] == "position":
        s = doc["shift"]
        offset = [round(float(rng.uniform(*s["dx"])), 4), round(float(rng.uniform(*s["dy"])), 4)]
        return Variant(doc["task"], init_index, {s["role"]: offset}, None, doc["id"])
    p = doc["paraphrase"]
    template = int(rng.choice(p["templates"]))
    text = paraphrase(instruction, template, int(rng.integers(3)), p["drop_articles"])
    return Variant(doc["task"], init_index, {}, text, doc["id"])


def random_program(rng: np.random.Generator, family: str, task: int) -> dict[str, Any]:
    """A novel program (exploration): a random swap, a random shift region or a random pair of paraphrase
    templates, each a third of the time."""
    u = rng.random()
    if u < 1 / 3:
        doc = {"perturbs": "position", "swap": {"ranks": [int(rng.integers(MAX_RANK + 1))]}}
    elif u < 2 / 3:
        role = str(rng.choice(ROLES))
        cx, cy = rng.uniform(-SHIFT_MAX * 0.8, SHIFT_MAX * 0.8, size=2)
        w = 0.02
        doc = {
            "perturbs": "position",
            "shift": {"role": role, "dx": [cx - w, cx + w], "dy": [cy - w, cy + w]},
        }
    else:
        templates = sorted(int(t) for t in rng.choice(len(TEMPLATES), size=2, replace=False))
        doc = {
            "perturbs": "instruction",
            "paraphrase": {"templates": templates, "drop_articles": bool(rng.random() < 0.5)},
        }
    return validate_generation(
        {"kind": "generation", "family": family, "task": task, "source": "random", **doc}
    )


def compile_for_failure(variant: Variant, family: str, mode_id: str, phase: str) -> tuple[dict, dict]:
    """The template compiler: a generation program that recreates `variant`'s perturbation (a narrow region
    around its shift, or its paraphrase family) and a training program weighting the failed phase."""
    if variant.swap is not None:
        gen = {"perturbs": "position", "swap": {"ranks": [variant.swap]}}
    elif variant.shifts:
        role, (dx, dy) = next(iter(sorted(variant.shifts.items())))
        w = 0.015
        gen = {
            "perturbs": "position",
            "shift": {"role": role, "dx": [dx - w, dx + w], "dy": [dy - w, dy + w]},
        }
    else:
        templates = [t for t in range(len(TEMPLATES)) if _matches(variant.instruction or "", t)] or [1]
        drop = " the " not in f" {variant.instruction} "
        gen = {"perturbs": "instruction", "paraphrase": {"templates": templates, "drop_articles": drop}}
    header = {"family": family, "task": variant.task, "mode": mode_id, "source": "template"}
    weights = [1.0] * len(PHASES)
    weights[PHASES.index(phase)] = 3.0
    train = {"kind": "training", **header, "phase_weights": weights, "planner_demos": 2}
    return validate_generation({"kind": "generation", **header, **gen}), validate_training(train)


def _matches(text: str, template: int) -> bool:
    head = TEMPLATES[template].split(" the {obj}")[0]  # the verb phrase; articles may have been dropped
    return text.startswith(head + " ")
