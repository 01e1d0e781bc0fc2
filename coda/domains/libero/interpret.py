"""The interpreter of LIBERO programs: a generation program drawn as a `Variant` of one source task.

The programs' schema (``perturbs``: an object/target ``shift``, a ``place`` at a table position or a
``swap`` with the rank-th nearest movable object; an instruction ``paraphrase`` with one of ``TEMPLATES`` or a
``retarget`` to the rank-th nearest movable object, a new task in the same scene), validation and training
programs are in `coda.memory.libero_programs`, re-exported here. `instantiate` draws a variant of a program
on a source task's initial state; `random_program` makes a novel one (exploration); `compile_diagnosis` is
the template compiler (it reads a diagnosis, never a variant). The LIBERO-Pro evaluation suites are never
read to build a variant; what they hold out (`coda.sim.libero.heldout`) is only avoided: `instantiate` never
draws a held-out instruction, and the episode never retargets to a held-out goal.

Example:
    >>> doc = validate_generation({"kind": "generation", "family": "libero_object", "task": 3,
    ...     "perturbs": "position", "shift": {"role": "object", "dx": [0.02, 0.05], "dy": [0, 0]}})
    >>> variant = instantiate(doc, np.random.default_rng(0), "pick up the milk and place it in the basket")
    >>> variant.shifts["object"][0] >= 0.02
    True
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.domains.libero.diagnose import named_object, object_phrase  # noqa: F401  (re-exported API)
from coda.memory.libero_programs import (  # noqa: F401  (the schema: re-exported API)
    GENERATION_KEYS,
    MAX_RANK,
    MAX_RETARGET_RANK,
    PERTURBS,
    PHASES,
    POSITION_OPS,
    ROLES,
    SHIFT_MAX,
    SOURCES,
    TABLE,
    TEMPLATES,
    TRAINING_KEYS,
    VERSION,
    is_libero,
    validate_generation,
    validate_program,
    validate_training,
)
from coda.memory.program_fields import ProgramError

_REL = {"in": ("in", "into", "inside"), "on": ("on", "onto", "on top of")}
_PARSE = re.compile(
    r"^(?:pick up|pick|lift|grab|take) (?:the )?(?P<obj>.+?) and (?:place|put|set) it "
    r"(?P<rel>in|on|into|onto) (?:the )?(?P<target>.+)$"
)


def parse_instruction(text: str) -> tuple[str, str, str]:
    """(object phrase, relation 'in'|'on', target phrase) of a LIBERO pick-and-place instruction."""
    m = _PARSE.match(text.strip().lower())
    if m is None:
        raise ProgramError("instruction", f"not a pick-and-place instruction: {text!r}")
    rel = "in" if m["rel"] in ("in", "into") else "on"
    return m["obj"], rel, m["target"]


def retarget_instruction(text: str, obj: str) -> str:
    """`text` with its object phrase replaced by BDDL object `obj`'s (same verb, relation and target), in
    LIBERO-Pro ``_task``'s wording: 'pick the cream cheese and place it in the basket'."""
    _, rel, target = parse_instruction(text)
    return f"pick the {object_phrase(obj)} and place it {_REL[rel][0]} the {target}"


def same_text(a: str, b: str) -> bool:
    """Whether two instructions read the same (case and spacing aside)."""
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def paraphrase(text: str, template: int, relation: int = 0, drop_articles: bool = False) -> str:
    """`text` rewritten with ``TEMPLATES[template]`` and the ``relation``-th wording of in/on."""
    obj, rel, target = parse_instruction(text)
    words = _REL[rel]
    out = TEMPLATES[template].format(obj=obj, target=target, rel=words[relation % len(words)])
    if drop_articles:
        out = re.sub(r"\bthe ", "", out)
    return out


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
    # a new task in the same scene: the goal object's `retarget`-th nearest movable object (not the goal
    # target) becomes the goal, the instruction names it (`retarget_instruction`), success is checked on it
    retarget: int | None = None
    # role ('object'|'target') -> [x, y]: the table position the object is placed at (`place` programs)
    places: dict[str, list[float]] = field(default_factory=dict)

    @property
    def perturbed(self) -> bool:
        return (
            bool(self.shifts)
            or bool(self.places)
            or self.instruction is not None
            or self.swap is not None
            or self.retarget is not None
        )

    def control(self) -> Variant:
        """The same initial state without the perturbation (the control of the validation test)."""
        return Variant(self.task, self.init_index)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "task": self.task,
            "init_index": self.init_index,
            "shifts": {k: list(v) for k, v in sorted(self.shifts.items())},
            "instruction": self.instruction,
            "program_id": self.program_id,
            "swap": self.swap,
        }
        if self.retarget is not None:  # only when set: the keys (hashes) of other variants are unchanged
            out["retarget"] = self.retarget
        if self.places:
            out["places"] = {k: list(v) for k, v in sorted(self.places.items())}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Variant:
        swap, retarget = d.get("swap"), d.get("retarget")
        return cls(
            int(d["task"]),
            int(d["init_index"]),
            dict(d["shifts"]),
            d["instruction"],
            d["program_id"],
            None if swap is None else int(swap),
            None if retarget is None else int(retarget),
            {k: [float(x) for x in v] for k, v in d.get("places", {}).items()},
        )

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def instantiate(
    program: Mapping[str, Any],
    rng: np.random.Generator,
    instruction: str,
    init_index: int = 0,
    avoid: Iterable[str] = (),
) -> Variant:
    """Draw one variant of `program` (validated first) on the source task's initial state `init_index`; a
    paraphrase is never one of the instructions in `avoid` (the held-out ones: `ValueError` when every
    paraphrase of the program is)."""
    doc = validate_generation(program)
    if doc["perturbs"] == "position" and "swap" in doc:
        rank = int(rng.choice(doc["swap"]["ranks"]))
        return Variant(doc["task"], init_index, {}, None, doc["id"], rank)
    if "retarget" in doc:  # the new goal object and its instruction are settled by the episode
        rank = int(rng.choice(doc["retarget"]["ranks"]))
        return Variant(doc["task"], init_index, {}, None, doc["id"], retarget=rank)
    if "place" in doc:
        s = doc["place"]
        xy = [round(float(rng.uniform(*s["x"])), 4), round(float(rng.uniform(*s["y"])), 4)]
        return Variant(doc["task"], init_index, {}, None, doc["id"], places={s["role"]: xy})
    if doc["perturbs"] == "position":
        s = doc["shift"]
        offset = [round(float(rng.uniform(*s["dx"])), 4), round(float(rng.uniform(*s["dy"])), 4)]
        return Variant(doc["task"], init_index, {s["role"]: offset}, None, doc["id"])
    p = doc["paraphrase"]
    template = int(rng.choice(p["templates"]))
    text = paraphrase(instruction, template, int(rng.integers(3)), p["drop_articles"])
    avoid = list(avoid)
    if any(same_text(text, a) for a in avoid):  # redraw among the program's other wordings
        options = [
            paraphrase(instruction, t, k, p["drop_articles"]) for t in p["templates"] for k in range(3)
        ]
        options = [o for o in options if not any(same_text(o, a) for a in avoid)]
        if not options:
            raise ValueError(f"program {doc['id']}: every paraphrase is a held-out instruction")
        text = options[int(rng.integers(len(options)))]
    return Variant(doc["task"], init_index, {}, text, doc["id"])


def random_program(rng: np.random.Generator, family: str, task: int) -> dict[str, Any]:
    """A novel program (exploration), each kind a fifth of the time: a random swap, a random shift region, a
    random table region for the goal object (`place`), a retarget to a random pair of neighbour ranks or a
    random pair of paraphrase templates."""
    u = rng.random()
    if u < 1 / 5:
        doc = {"perturbs": "position", "swap": {"ranks": [int(rng.integers(MAX_RANK + 1))]}}
    elif u < 2 / 5:
        role = str(rng.choice(ROLES))
        cx, cy = rng.uniform(-SHIFT_MAX * 0.8, SHIFT_MAX * 0.8, size=2)
        w = 0.02
        doc = {
            "perturbs": "position",
            "shift": {"role": role, "dx": [cx - w, cx + w], "dy": [cy - w, cy + w]},
        }
    elif u < 3 / 5:  # the goal object only: the basket placed at random mostly lands on other objects
        (x0, x1), (y0, y1) = TABLE
        cx, cy = rng.uniform(x0, x1), rng.uniform(y0, y1)
        w = 0.015
        doc = {
            "perturbs": "position",
            "place": {"role": "object", "x": [cx - w, cx + w], "y": [cy - w, cy + w]},
        }
    elif u < 4 / 5:
        ranks = sorted(int(k) for k in rng.choice(MAX_RETARGET_RANK + 1, size=2, replace=False))
        doc = {"perturbs": "instruction", "retarget": {"ranks": ranks}}
    else:
        templates = sorted(int(t) for t in rng.choice(len(TEMPLATES), size=2, replace=False))
        doc = {
            "perturbs": "instruction",
            "paraphrase": {"templates": templates, "drop_articles": bool(rng.random() < 0.5)},
        }
    return validate_generation(
        {"kind": "generation", "family": family, "task": task, "source": "random", **doc}
    )


def compile_diagnosis(
    diagnosis: Mapping[str, Any], task: int
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The template compiler: from a rollout-grounded diagnosis (`coda.domains.libero.diagnose`), a generation
    program that recreates the observed difficulty — a narrow region around the observed offset of the goal
    object or the target (a ``shift``; a ``place`` around its observed table position when the offset is
    beyond ``SHIFT_MAX``), the swap with the observed neighbour's rank, the retarget to the rank of the object
    the instruction named, or the paraphrase templates the given instruction matches — (None when the
    diagnosis names none of these) and a training program weighting the failed phase. Raises `ProgramError` (naming the field) when the recreated program is malformed."""
    header = {"family": diagnosis["family"], "task": task, "source": "template"}
    if diagnosis.get("mode_id"):
        header["mode"] = diagnosis["mode_id"]
    gen: dict[str, Any] | None = None
    if diagnosis["factor"] == "instruction" and diagnosis.get("role") == "retarget":
        gen = {"perturbs": "instruction", "retarget": {"ranks": [int(diagnosis["rank"])]}}
    elif diagnosis["factor"] == "instruction":
        text = diagnosis.get("instruction", "")
        templates = [t for t in range(len(TEMPLATES)) if matches_template(text, t)] or [1]
        drop = " the " not in f" {text} "
        gen = {"perturbs": "instruction", "paraphrase": {"templates": templates, "drop_articles": drop}}
    elif diagnosis.get("role") == "swap":
        gen = {"perturbs": "position", "swap": {"ranks": [int(diagnosis["rank"])]}}
    elif diagnosis.get("role") in ROLES:
        dx, dy = diagnosis["offset"]
        w = 0.015
        if max(abs(dx), abs(dy)) > SHIFT_MAX and "position" in diagnosis:
            x, y = diagnosis["position"]
            gen = {
                "perturbs": "position",
                "place": {"role": diagnosis["role"], "x": [x - w, x + w], "y": [y - w, y + w]},
            }
        else:
            gen = {
                "perturbs": "position",
                "shift": {"role": diagnosis["role"], "dx": [dx - w, dx + w], "dy": [dy - w, dy + w]},
            }
    weights = [1.0] * len(PHASES)
    if diagnosis["phase"] in PHASES:
        weights[PHASES.index(diagnosis["phase"])] = 3.0
    train = {"kind": "training", **header, "phase_weights": weights, "planner_demos": 2}
    generation = None if gen is None else validate_generation({"kind": "generation", **header, **gen})
    return generation, validate_training(train)


def matches_template(text: str, template: int) -> bool:
    """Whether an instruction reads as paraphrase template `template` (articles may have been dropped)."""
    head = TEMPLATES[template].split(" the {obj}")[0]  # the verb phrase
    return text.startswith(head + " ")
