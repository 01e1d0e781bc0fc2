"""Rollout-grounded failure diagnosis (paper §3.3): localise a failure to a phase and a generative factor.

A `Diagnoser` reads a failed `RolloutRecord`, the `SceneSpec` it ran on, the scene's construction trace
(optional) and a `TrainingReference` (what the policy has trained on), and returns a `Diagnosis`: the phase
that was not completed, the family factor most likely responsible, a short cause sentence quoting the
evidence, a confidence and the control steps the evidence sits at. Backends:

* ``sim`` (`SimDiagnoser`, default): phase = first cumulative phase predicate not reached; factor = argmax of
  a phase prior (`PHASE_FACTORS`, rank-weighted) + the scene's novelty w.r.t. the training scenes + rollout
  evidence (grasps lost in the air, grippers closed beside the object, distractors touched, pushes that
  overshoot or stop short, drawers that do not move). It never sees which factor a generation program
  perturbed: its inputs are the rollout and the scene only.
* ``noisy:<p>`` (`NoisyDiagnoser`): relabels the phase and/or the factor with probability p each (the
  critic-sensitivity study, Table 3); ``phase_only`` (`PhaseOnlyDiagnoser`): drops the factor.
* ``vlm`` (`VLMDiagnoser`): a transformers image-text-to-text model, loaded from a local path, shown
  re-rendered keyframes and the phase log; its JSON answer is parsed (never evaluated) and validated.

Example:
    >>> ref = TrainingReference.from_scenes(data.seed_scenes("data", "pick_place"))
    >>> rec = run_episode(world, scene, policy)
    >>> d = make_diagnoser("sim").diagnose(rec, scene, None, ref)
    >>> d.phase, d.factor
    ('transport', 'mass')
    >>> d.cause
    'transport not reached (last progress: lift at step 18); the object grasped at step 13 slipped from the
    closed gripper at step 20, 11.4 cm up and 22.1 cm from the container; attributed to mass (novelty 1.00).'
    >>> make_diagnoser("phase_only").diagnose(rec, scene, None, ref).factor
    ''
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from coda.engine.factors import FACTORS, PHASE_FACTORS, PRIMARY_ROLE, factor_name
from coda.learn.predicates import ProgramError, _wrap_half, gripper_yaw
from coda.sim.families import REGISTRY
from coda.sim.families.base import SceneContext, grasp_yaw, yaw_of
from coda.sim.families.push import GOAL_TOL
from coda.sim.families.ranges import RANGES
from coda.sim.rollout import RolloutRecord
from coda.sim.scene import SceneSpec

MAX_CAUSE_CHARS = 400
W_PRIOR, W_NOVELTY, W_EVIDENCE = 1.0, 1.0, 2.0  # score = prior + novelty + evidence, each in [0, 1] first
IMPLAUSIBLE_NOVELTY = 0.3  # novelty of a factor the phase prior does not list counts this much
LATE_EVIDENCE = 0.6  # weight of an event that came more than a chunk after the first one
CHUNK_STEPS = 8
AFTER_CONTACT = ("lost_grasp", "dropped", "slip", "stuck", "landing", "goal_miss", "base_moved", "push")
SOFTMAX_TEMPERATURE = 0.5
MAX_EVIDENCE_STEPS = 8
GRIPPER_SPAN = 0.08  # widest object the open Panda fingers can straddle (m)


# -- the diagnosis ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Diagnosis:
    family: str
    variant: str
    phase: str  # the first phase the rollout did not complete
    factor: str  # the family factor held responsible; "" when unknown (phase-only diagnosis)
    cause: str  # one short sentence quoting the rollout evidence
    confidence: float  # in [0, 1]
    evidence_steps: tuple[int, ...] = ()  # control steps where the evidence sits

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "variant": self.variant,
            "phase": self.phase,
            "factor": self.factor,
            "cause": self.cause,
            "confidence": float(self.confidence),
            "evidence_steps": list(self.evidence_steps),
        }

    @classmethod
    def from_dict(cls, d: Any) -> Diagnosis:
        """Validate a JSON-like dict; a `ProgramError` names the offending field."""
        if not isinstance(d, dict):
            raise ProgramError("<root>", f"expected an object, got {type(d).__name__}")
        required = ("family", "variant", "phase", "factor", "cause", "confidence")
        for key in d:
            if key not in (*required, "evidence_steps"):
                raise ProgramError(key, "unknown field")
        for key in required:
            if key not in d:
                raise ProgramError(key, "missing field")
        for key in ("family", "variant", "phase", "factor", "cause"):
            if not isinstance(d[key], str):
                raise ProgramError(key, f"expected a string, got {type(d[key]).__name__}")
        family, variant = d["family"], d["variant"]
        if family not in REGISTRY:
            raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
        fam = REGISTRY[family]
        if variant not in fam.variants:
            raise ProgramError("variant", f"unknown variant {variant!r} of {family}; expected {fam.variants}")
        phases = [ph.name for ph in fam.phases(variant)]
        if d["phase"] not in phases:
            raise ProgramError("phase", f"{d['phase']!r} is not a phase of {family}/{variant}: {phases}")
        if d["factor"] != "" and d["factor"] not in FACTORS[family]:
            raise ProgramError(
                "factor", f"{d['factor']!r} is not a factor of {family}: {list(FACTORS[family])}"
            )
        cause = d["cause"]
        if not isinstance(cause, str) or not cause.strip() or len(cause) > MAX_CAUSE_CHARS:
            raise ProgramError(
                "cause", f"expected a non-empty string of at most {MAX_CAUSE_CHARS} characters"
            )
        conf = d["confidence"]
        if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.0 <= conf <= 1.0:
            raise ProgramError("confidence", f"expected a number in [0, 1], got {conf!r}")
        steps = d.get("evidence_steps", [])
        if not isinstance(steps, list | tuple) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps
        ):
            raise ProgramError("evidence_steps", f"expected a list of step indices >= 0, got {steps!r}")
        return cls(family, variant, d["phase"], d["factor"], cause, float(conf), tuple(steps))


class Diagnoser(Protocol):
    name: str

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None,
        reference: TrainingReference | None,
    ) -> Diagnosis | None: ...


# -- factor values and novelty ----------------------------------------------------------------------
FactorValue = float | int | tuple[float, ...] | str


def factor_values(scene: SceneSpec) -> dict[str, FactorValue]:
    """The value of each of the scene's family factors.

    ``<role>_position`` -> (x, y); ``<role>_yaw`` -> yaw; scale/mass/friction -> the primary role's object;
    instance -> its asset id; distractors -> number of objects bound to no role; instruction -> template id;
    goal_offset (push) -> goal minus target (dx, dy); part (drawer) -> drawer index.
    """
    family, task = scene.family, scene.task
    primary = scene.objects[task.bindings[PRIMARY_ROLE[family]]]
    out: dict[str, FactorValue] = {}
    for factor, (role, attr) in FACTORS[family].items():
        pose = scene.spatial.poses[task.bindings[role]] if role in task.bindings else None
        if attr == "position":
            out[factor] = (pose.x, pose.y)
        elif attr == "yaw":
            out[factor] = pose.yaw
        elif attr in ("scale", "mass", "friction"):
            out[factor] = float(getattr(primary, attr))
        elif attr == "instance":
            out[factor] = primary.asset_id
        elif attr == "distractors":
            out[factor] = float(len(scene.objects) - len(set(task.bindings.values())))
        elif attr == "instruction":
            out[factor] = task.template_id
        elif attr == "goal_offset":
            target = scene.spatial.poses[task.bindings["target"]]
            out[factor] = (task.goal[0] - target.x, task.goal[1] - target.y)
        elif attr == "part":
            out[factor] = int(task.goal[0])
        else:  # pragma: no cover - factors.py lists every attribute
            raise KeyError(attr)
    return out


def _envelope(family: str, key: str) -> tuple[float, float]:
    """Smallest interval holding a factor's seed, generator and held-out-layout ranges."""
    spaces = RANGES[family]
    lo, hi = math.inf, -math.inf
    for split in ("seed", "generator", "layouts"):
        r = spaces[split].get(key)
        for a, b in r if isinstance(r, list) else [r] if r is not None else []:
            lo, hi = min(lo, a), max(hi, b)
    if family == "pick_place" and key == "container_y":  # sampled as a magnitude on either side
        lo, hi = -hi, hi
    return lo, hi


def range_widths(family: str, factor: str) -> tuple[float, ...] | None:
    """Width(s) of a numeric factor's range (one per coordinate); None for categorical factors."""
    role, attr = FACTORS[family][factor]
    keys = {
        "position": (f"{role}_x", f"{role}_y"),
        "yaw": (f"{role}_yaw",),
        "goal_offset": ("goal_dx", "goal_dy"),
        "scale": ("scale",),
        "mass": ("mass",),
        "friction": ("friction",),
        "distractors": ("distractors",),
    }.get(attr)
    if keys is None:
        return None
    return tuple(max(hi - lo, 1e-6) for lo, hi in (_envelope(family, k) for k in keys))


@dataclass
class _FamilyReference:
    n_scenes: int = 0
    numeric: dict[str, set[tuple[float, ...]]] = field(default_factory=dict)
    categorical: dict[str, set[str]] = field(default_factory=dict)
    categories: set[str] = field(default_factory=set)  # categories of the primary role's trained instances
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # numeric values as (n, d), rebuilt on add

    def values(self, factor: str) -> np.ndarray:
        if factor not in self.arrays:
            self.arrays[factor] = np.array(sorted(self.numeric.get(factor, ())), dtype=np.float64)
        return self.arrays[factor]


class TrainingReference:
    """Factor values of the scenes a policy has trained on, per family; measures how novel a scene is.

    Novelty of a numeric factor is the distance from the scene's value to the *nearest* trained value,
    divided by the width of the factor's range (`ranges.py`, per coordinate for positions and offsets; yaw
    differences wrapped), clipped to [0, 1]. Nearest-neighbour rather than a min/max envelope: a value in
    a gap between two trained clusters is novel too, and any trained value has novelty exactly 0.
    Instance: 0 trained asset, 0.5 unseen asset of a trained category, 1 unseen category. Instruction
    template and drawer part: 0 trained, 1 not. A family with no trained scene is novel in every factor.

    Example:
        >>> ref = TrainingReference.from_scenes(seed_scenes)
        >>> ref.novelty(scene.replace_object(0, mass=1.5))["mass"]
        1.0
    """

    VERSION = 1

    def __init__(self) -> None:
        self._families: dict[str, _FamilyReference] = {}

    @classmethod
    def from_scenes(cls, scenes: Iterable[SceneSpec]) -> TrainingReference:
        ref = cls()
        for scene in scenes:
            ref.add(scene)
        return ref

    def add(self, scene: SceneSpec) -> None:
        fam = self._families.setdefault(scene.family, _FamilyReference())
        fam.n_scenes += 1
        fam.arrays.clear()
        for factor, value in factor_values(scene).items():
            if range_widths(scene.family, factor) is None:
                fam.categorical.setdefault(factor, set()).add(str(value))
            else:
                fam.numeric.setdefault(factor, set()).add(_rounded(value))
        fam.categories.add(scene.objects[scene.task.bindings[PRIMARY_ROLE[scene.family]]].category)

    def n_scenes(self, family: str) -> int:
        return self._families[family].n_scenes if family in self._families else 0

    def novelty(self, scene: SceneSpec) -> dict[str, float]:
        """factor -> how far the scene's value lies from the trained values, in [0, 1]."""
        family = scene.family
        fam = self._families.get(family)
        values = factor_values(scene)
        if fam is None:
            return dict.fromkeys(values, 1.0)
        out = {}
        for factor, value in values.items():
            widths = range_widths(family, factor)
            if FACTORS[family][factor][1] == "instance":
                category = scene.objects[scene.task.bindings[PRIMARY_ROLE[family]]].category
                seen = value in fam.categorical.get(factor, ())
                out[factor] = 0.0 if seen else 0.5 if category in fam.categories else 1.0
            elif widths is None:
                out[factor] = 0.0 if str(value) in fam.categorical.get(factor, ()) else 1.0
            else:
                out[factor] = _nearest(family, factor, value, fam.values(factor), widths)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.VERSION,
            "families": {
                name: {
                    "n_scenes": f.n_scenes,
                    "numeric": {k: sorted(list(v) for v in vals) for k, vals in sorted(f.numeric.items())},
                    "categorical": {k: sorted(vals) for k, vals in sorted(f.categorical.items())},
                    "categories": sorted(f.categories),
                }
                for name, f in sorted(self._families.items())
            },
        }

    @classmethod
    def from_dict(cls, d: Any) -> TrainingReference:
        """Parse `to_dict` output (e.g. from a memory snapshot); a `ProgramError` names the bad field."""
        if not isinstance(d, dict) or d.get("version") != cls.VERSION:
            raise ProgramError("version", f"expected a training reference of version {cls.VERSION}")
        ref = cls()
        for name, f in d.get("families", {}).items():
            if name not in REGISTRY:
                raise ProgramError(f"families.{name}", "unknown family")
            try:
                ref._families[name] = _parse_family(name, f)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                if isinstance(e, ProgramError):
                    raise
                raise ProgramError(f"families.{name}", f"malformed entry ({e!r})") from None
        return ref


def _parse_family(name: str, f: dict) -> _FamilyReference:
    fam = _FamilyReference(int(f["n_scenes"]))
    for k, vals in f["numeric"].items():
        widths = range_widths(name, k) if k in FACTORS[name] else None
        if widths is None:
            raise ProgramError(f"families.{name}.numeric.{k}", "not a numeric factor of the family")
        fam.numeric[k] = {tuple(float(x) for x in v) for v in vals}
        if any(len(v) != len(widths) for v in fam.numeric[k]):
            raise ProgramError(f"families.{name}.numeric.{k}", f"expected {len(widths)} numbers per value")
    for k, vals in f["categorical"].items():
        if k not in FACTORS[name] or range_widths(name, k) is not None:
            raise ProgramError(f"families.{name}.categorical.{k}", "not a categorical factor of the family")
        fam.categorical[k] = {str(v) for v in vals}
    fam.categories = {str(c) for c in f["categories"]}
    return fam


def _rounded(value: FactorValue) -> tuple[float, ...]:
    """A numeric factor value as a tuple rounded to 1e-5 (how trained values are stored)."""
    return tuple(round(float(v), 5) for v in (value if isinstance(value, tuple) else (value,)))


def _nearest(
    family: str, factor: str, value: FactorValue, trained: np.ndarray, widths: tuple[float, ...]
) -> float:
    """Distance to the nearest trained value, per-coordinate normalised by the range widths, clipped to 1."""
    if not len(trained):
        return 1.0
    diff = trained - np.asarray(_rounded(value), dtype=np.float64)  # (n, d)
    if FACTORS[family][factor][1] == "yaw":
        diff = (diff + math.pi) % (2 * math.pi) - math.pi
    dist = np.linalg.norm(diff / np.asarray(widths), axis=1).min()
    return float(np.clip(dist, 0.0, 1.0))


# -- rollout evidence -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Evidence:
    """One observation in the rollout and the factors it supports (support in [0, 1])."""

    kind: str
    text: str
    steps: tuple[int, ...]  # control steps it refers to (empty for properties of the scene)
    support: dict[str, float]
    at: int | None = None  # when it happened, if not its first step

    @property
    def onset(self) -> int | None:
        return self.at if self.at is not None else (min(self.steps) if self.steps else None)


class _Rollout:
    """Per-step quantities of a record the detectors share."""

    def __init__(self, record: RolloutRecord, scene: SceneSpec) -> None:
        self.rec, self.scene = record, scene
        self.family = record.family
        self.ctx: SceneContext = record.context()
        self.s = record.states
        self.T = record.steps
        self.role = PRIMARY_ROLE[self.family] if self.family != "stack" else "top"
        self.obj = self.ctx.bindings[self.role]
        # gripper command in force during the step that ended at t (t >= 1); open at t = 0
        self.closed_cmd = (
            np.concatenate([[False], record.actions[:, 6] <= 0]) if self.T else np.array([False])
        )
        # held: both fingers on the object while commanded closed (open fingers brushing it do not count)
        self.grasped = self.s["finger_contact"][:, self.obj].all(axis=1) & self.closed_cmd  # (T+1,)
        self.distractors = [i for i in range(len(scene.objects)) if i not in set(self.ctx.bindings.values())]

    def f(self, attr: str, role: str | None = None) -> str | None:
        """The family's factor for an attribute (of `role`, default the manipulated one), if any."""
        return factor_name(self.family, self.role if role is None else role, attr)

    def support(self, pairs: dict[tuple[str, str | None], float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for (attr, role), w in pairs.items():
            name = self.f(attr, role)
            if name is not None:
                out[name] = max(out.get(name, 0.0), w)
        return out

    def target_point(self, t: int) -> np.ndarray:
        """What the end effector must get to: the drawer's handle, else the manipulated object."""
        if self.family == "drawer":
            return self.s["handle_pos"][t][int(round(self.ctx.goal[0]))]
        return self.s["obj_pos"][t][self.obj]

    def goal_xy(self, t: int) -> np.ndarray:
        """Where pick_place / stack must bring the object: the container, or the base's current place."""
        if self.family == "pick_place":
            return self.ctx.init_pos[self.ctx.bindings["container"]][:2]
        return self.s["obj_pos"][t][self.ctx.bindings["base"]][:2]

    def losses(self) -> list[int]:
        """Steps at which a held object left the fingers (for at least two steps, or at the end)."""
        g = self.grasped
        return [t for t in range(1, self.T + 1) if g[t - 1] and not g[t] and (t == self.T or not g[t + 1])]

    def final_loss(self) -> int | None:
        """The step the object was lost for good (never grasped again), if it was."""
        losses = self.losses()
        return losses[-1] if losses and not self.grasped[losses[-1] :].any() else None

    def air_losses(self) -> list[int]:
        """Losses while the object was off the table (drops), pick_place and stack only."""
        if self.family not in ("pick_place", "stack"):
            return []
        return [t for t in self.losses() if self.lift(t - 1) >= 0.01]

    def lift(self, t: int) -> float:
        return float(self.s["obj_pos"][t][self.obj][2] - self.ctx.init_pos[self.obj][2])


def _cm(x: float) -> str:
    return f"{100 * x:.1f} cm"


def _lost_grasp(r: _Rollout) -> Evidence | None:
    """The object was held and then lost: dropped in the air, lost for good, or slipped and re-grasped."""
    if r.family == "push":  # pushing keeps the gripper closed: finger contacts are not grasps
        return None
    drops, final = r.air_losses(), r.final_loss()
    if not drops and final is None:
        return _slipped(r)  # lost on the table and grasped again: only slips tell anything
    t = drops[-1] if drops else final
    held = t - 1  # start of the grasp that ended at t
    while held > 0 and r.grasped[held - 1]:
        held -= 1
    slipped = bool(r.closed_cmd[t])
    how = "slipped from the closed gripper" if slipped else "was released (gripper commanded open)"
    w = 1.0 if slipped else 0.7
    if r.family == "drawer":
        frac = max(_drawer_frac(r, t), 0.0)
        text = f"the handle grasped at step {held} {how} at step {t} with the drawer {frac:.0%} open"
        sup = {("friction", None): w, ("yaw", "cabinet"): 0.6 * w, ("scale", None): 0.3 * w}
        return Evidence("lost_grasp", text, (held, t), r.support(sup), at=t)
    height = r.lift(t - 1)
    if height < 0.01:  # lost on the table: the grasp itself did not hold
        text = f"the object grasped at step {held} {how} at step {t} before it left the table"
        sup = {("friction", None): 0.8 * w, ("scale", None): 0.6 * w, ("yaw", r.role): 0.5 * w}
        return Evidence("lost_grasp", text, (held, t), r.support(sup), at=t)
    dest_role = "container" if r.family == "pick_place" else "base"
    start, goal = r.ctx.init_pos[r.obj][:2], r.goal_xy(t - 1)
    to_go = float(np.linalg.norm(r.s["obj_pos"][t - 1][r.obj][:2] - goal))
    covered = 1.0 - to_go / max(float(np.linalg.norm(goal - start)), 1e-9)
    where = f"{_cm(height)} up and {_cm(to_go)} from the {dest_role}"
    text = f"the object grasped at step {held} {how} at step {t}, {where}"
    if slipped or covered < 0.5:  # fell on the way: the grip could not hold the object
        sup = {
            ("mass", None): w,
            ("friction", None): 0.9 * w,
            ("scale", None): 0.3 * w,
            ("instance", None): 0.3 * w,
        }
    else:  # let go deliberately, but short of the goal: the goal was misjudged
        sup = {("position", dest_role): w, ("yaw", dest_role): 0.3 * w, ("mass", None): 0.4 * w}
    return Evidence("dropped", text, (held, t), r.support(sup), at=t)


def _slipped(r: _Rollout) -> Evidence | None:
    """The object slipped out of the closed fingers (and was grasped again later)."""
    slips = [t for t in r.losses() if r.closed_cmd[t]]
    if not slips:
        return None
    airborne = r.family != "drawer" and r.lift(slips[0] - 1) >= 0.01
    where = "in the air" if airborne else "while held"
    text = (
        f"the object slipped from the closed gripper {where} {len(slips)} time(s), first at step {slips[0]}"
    )
    sup = {("friction", None): 1.0, ("mass", None): 0.9 if airborne else 0.5, ("scale", None): 0.3}
    if r.family == "drawer":
        sup[("yaw", "cabinet")] = 0.5
    return Evidence("slip", text, tuple(slips[:3]), r.support(sup))


def _too_wide(r: _Rollout) -> Evidence | None:
    """pick_place / stack: the object's narrow side is close to (or over) the gripper's span."""
    if r.family not in ("pick_place", "stack"):
        return None
    half = r.ctx.half_extents[r.obj]
    width = 2 * float(min(half[0], half[1]))
    if width < GRIPPER_SPAN - 0.015:
        return None
    text = f"the object is {_cm(width)} across its narrow side for a {_cm(GRIPPER_SPAN)} gripper"
    tight = min(1.0, (width - (GRIPPER_SPAN - 0.015)) / 0.015)
    return Evidence(
        "too_wide", text, (), r.support({("scale", None): 0.5 + 0.5 * tight, ("instance", None): 0.5})
    )


def _closed_beside(r: _Rollout) -> Evidence | None:
    """The gripper closed without the fingers on the object: where it was, how it was turned, how wide."""
    if r.family == "push" or (r.family == "drawer" and r.ctx.variant == "close"):
        return None
    closes = [t for t in range(1, r.T + 1) if r.closed_cmd[t] and not r.closed_cmd[t - 1]]
    misses = [t for t in closes if not r.grasped[t : min(t + 4, r.T) + 1].any()]
    if not misses:
        return None
    t = misses[0] - 1  # the state in which the close was commanded
    after_loss = any(loss <= t for loss in r.losses())  # a retry after a slip or drop: partly a consequence
    rel = r.s["ee_pos"][t] - r.target_point(t)
    xy = float(math.hypot(rel[0], rel[1]))
    if r.family == "drawer":
        text = f"the gripper closed at step {t + 1} {_cm(xy)} beside the handle ({_cm(rel[2])} above it)"
        sup = {("position", "cabinet"): min(1.0, xy / 0.02), ("yaw", "cabinet"): 0.5, ("instance", None): 0.4}
        return Evidence("closed_beside", text, (t + 1,), r.support(sup))
    half = r.ctx.half_extents[r.obj]
    yaw_err = abs(
        _wrap_half(gripper_yaw(r.s["ee_quat"][t]) - grasp_yaw(yaw_of(r.s["obj_quat"][t][r.obj]), half))
    )
    width = 2 * float(min(half[0], half[1]))
    parts, sup = [], {}
    if width > GRIPPER_SPAN - 0.005:
        parts.append(f"the object is {_cm(width)} wide")
        sup.update({("scale", None): 1.0, ("instance", None): 0.6})
    if xy > 0.012:
        parts.append(f"{_cm(xy)} off the object centre")
        sup[("position", r.role)] = min(1.0, xy / 0.03)
    if yaw_err > 0.25:
        parts.append(f"turned {math.degrees(yaw_err):.0f} deg from the grasp yaw")
        sup[("yaw", r.role)] = min(1.0, yaw_err / 0.6)
    if not parts:
        parts.append(f"{_cm(rel[2])} above the object centre")
        sup.update({("position", r.role): 0.5, ("scale", None): 0.5, ("instance", None): 0.5})
    text = f"the gripper closed on nothing at step {t + 1}: " + ", ".join(parts)
    if after_loss:
        sup = {k: 0.5 * v for k, v in sup.items()}
    return Evidence("closed_beside", text, (t + 1,), r.support(sup))


def _touched_distractor(r: _Rollout) -> Evidence | None:
    """The robot touched, or something displaced, an object bound to no role."""
    if not r.distractors:
        return None
    idx = np.array(r.distractors)
    contact_steps = np.flatnonzero(r.s["robot_contact"][:, idx].any(axis=1))
    moved = np.linalg.norm(r.s["obj_pos"][-1][idx, :2] - r.s["obj_pos"][0][idx, :2], axis=1)
    if not len(contact_steps) and moved.max() < 0.02:
        return None
    if len(contact_steps):
        first, n = int(contact_steps[0]), len(contact_steps)
        text = f"the robot touched a distractor at step {first} ({n} steps in contact)"
        return Evidence(
            "distractor",
            text,
            (first, int(contact_steps[-1])),
            r.support({("distractors", None): 1.0}),
        )
    # knocked by something else (e.g. a dropped object rolling into it): a consequence more than a cause
    text = f"a distractor was knocked {_cm(float(moved.max()))} out of place"
    return Evidence("distractor", text, (r.T,), r.support({("distractors", None): 0.4}))


def _never_reached(r: _Rollout) -> Evidence | None:
    """The end effector never got to the object (or handle): how close it came, and whether it moved."""
    d = np.array([np.linalg.norm(r.s["ee_pos"][t] - r.target_point(t)) for t in range(r.T + 1)])
    t_min = int(np.argmin(d))
    if d[t_min] < 0.05:
        return None
    travel = float(np.linalg.norm(r.s["ee_pos"][-1] - r.s["ee_pos"][0]))
    if r.distractors:
        dd = np.linalg.norm(r.s["ee_pos"][:, None] - r.s["obj_pos"][:, r.distractors], axis=2).min()
        if dd < d[t_min] - 0.02:
            text = (
                f"the end effector went {_cm(float(dd))} from a distractor "
                f"but no closer than {_cm(d[t_min])} to the target"
            )
            sup = {("distractors", None): 1.0, ("instruction", None): 0.6}
            return Evidence("wrong_object", text, (t_min, r.T), r.support(sup))
    if travel < 0.02:
        text = f"the end effector stayed put ({_cm(travel)} of travel), {_cm(d[-1])} from the target"
        sup = {("position", r.role): 0.5, ("instruction", None): 0.3}
    else:
        text = f"the end effector came no closer than {_cm(d[t_min])} to the target (step {t_min})"
        sup = {("position", r.role): 0.9, ("yaw", r.role): 0.3}
    return Evidence("far", text, (t_min, r.T), r.support(sup))


def _push_outcome(r: _Rollout) -> Evidence | None:
    """Where the pushed object ended relative to the push line: short, past, off to the side, or unmoved."""
    if r.family != "push":
        return None
    p0, pT = r.s["obj_pos"][0][r.obj][:2], r.s["obj_pos"][-1][r.obj][:2]
    goal = np.array(r.ctx.goal[:2])
    full = float(np.linalg.norm(goal - p0))
    u = (goal - p0) / max(full, 1e-9)
    along = float((pT - p0) @ u)
    across = float(abs((pT - p0)[0] * u[1] - (pT - p0)[1] * u[0]))
    contact = np.flatnonzero(r.s["robot_contact"][:, r.obj])
    if not len(contact):
        return None
    steps = (int(contact[0]), int(contact[-1]))
    if along > full + GOAL_TOL:
        text = f"the object slid {_cm(along - full)} past the goal"
        sup = {("friction", None): 1.0, ("mass", None): 0.8, ("goal_offset", "goal"): 0.4}
    elif across > GOAL_TOL:
        text = f"the object drifted {_cm(across)} off the push line ({_cm(along)} along it)"
        sup = {("yaw", "target"): 0.9, ("scale", None): 0.5, ("goal_offset", "goal"): 0.5}
    elif along < 0.01:
        text = f"contact from step {steps[0]} moved the object only {_cm(max(along, 0.0))}"
        sup = {("mass", None): 1.0, ("friction", None): 0.8, ("yaw", "target"): 0.3}
    elif along < full - GOAL_TOL:
        text = f"the object stopped {_cm(full - along)} short of the goal after {_cm(along)} of {_cm(full)}"
        sup = {("friction", None): 0.9, ("mass", None): 0.8, ("goal_offset", "goal"): 0.7}
    else:
        return None
    return Evidence("push", text, steps, r.support(sup))


def _drawer_frac(r: _Rollout, t: int) -> float:
    k = int(round(r.ctx.goal[0]))
    lo, hi = r.ctx.joint_limits[k]
    return float((r.s["art_q"][t][k] - lo) / max(hi - lo, 1e-9))


def _drawer_stuck(r: _Rollout) -> Evidence | None:
    """The drawer was held (open) or touched (close) for a while yet hardly moved."""
    if r.family != "drawer":
        return None
    engaged = r.grasped if r.ctx.variant == "open" else r.s["robot_contact"][:, r.obj] > 0
    steps = np.flatnonzero(engaged)
    if len(steps) < 4:
        return None
    fracs = [_drawer_frac(r, t) for t in range(r.T + 1)]
    moved = abs(fracs[-1] - fracs[int(steps[0])])
    if moved > 0.3:
        return None
    text = f"the drawer moved only {moved:.0%} of its travel over {len(steps)} steps of contact"
    sup = {("friction", None): 1.0, ("yaw", "cabinet"): 0.5, ("scale", None): 0.3}
    return Evidence("stuck", text, (int(steps[0]), int(steps[-1])), r.support(sup))


def _goal_miss(r: _Rollout) -> Evidence | None:
    """pick_place / stack: the object was carried but ended away from the container or the base."""
    if r.family not in ("pick_place", "stack") or not r.grasped.any() or r.air_losses():
        return None
    if r.family == "pick_place":
        c = r.ctx.bindings["container"]
        dest_role, goal = "container", r.ctx.init_pos[c][:2]
        err = np.linalg.norm(r.s["obj_pos"][:, r.obj, :2] - goal, axis=1)
    else:
        b = r.ctx.bindings["base"]
        dest_role = "base"
        err = np.linalg.norm(r.s["obj_pos"][:, r.obj, :2] - r.s["obj_pos"][:, b, :2], axis=1)
        base_shift = float(np.linalg.norm(r.s["obj_pos"][-1][b] - r.ctx.init_pos[b]))
        if base_shift > 0.015:
            text = f"the base was pushed {_cm(base_shift)} out of place"
            sup = {("yaw", "base"): 0.7, ("scale", None): 0.6, ("position", "base"): 0.5}
            return Evidence("base_moved", text, (r.T,), r.support(sup))
    carried = np.flatnonzero(r.grasped & (r.s["obj_pos"][:, r.obj, 2] > r.ctx.init_pos[r.obj][2] + 0.02))
    if not len(carried):
        return None
    t_best = int(carried[np.argmin(err[carried])])
    if err[t_best] < 0.02 and err[-1] < 0.03:  # over the goal: the release or the landing went wrong
        text = f"the object reached the {dest_role} (step {t_best}) but did not come to rest there"
        sup = {
            ("scale", None): 0.7,
            ("instance", None): 0.6,
            ("yaw", dest_role): 0.5,
            ("friction", None): 0.4,
        }
        return Evidence("landing", text, (t_best, r.T), r.support(sup))
    text = (
        f"the carried object came no closer than {_cm(float(err[t_best]))} to the {dest_role} (step {t_best})"
    )
    sup = {("position", dest_role): min(1.0, float(err[t_best]) / 0.05), ("yaw", dest_role): 0.3}
    return Evidence("goal_miss", text, (t_best, r.T), r.support(sup))


def _trace_repairs(r: _Rollout, trace: list[dict] | None) -> Evidence | None:
    """Scene repairs recorded while the scene was built: a rescaled object, a moved or dropped distractor."""
    if not trace:
        return None
    repairs = [t for t in trace if isinstance(t, dict) and t.get("op") == "repair"]
    sup: dict[tuple[str, str | None], float] = {}
    for t in repairs:
        if t.get("name") == "rescale" and t.get("object") == r.obj:
            sup[("scale", None)] = 0.3
        elif t.get("name") in ("drop", "replace") and t.get("object") != r.obj:
            sup[("distractors", None)] = 0.3
    if not sup:
        return None
    return Evidence(
        "trace", f"the scene needed {len(repairs)} repair(s) when it was built", (), r.support(sup)
    )


DETECTORS: tuple[Callable[[_Rollout], Evidence | None], ...] = (
    _lost_grasp,
    _too_wide,
    _closed_beside,
    _touched_distractor,
    _never_reached,
    _push_outcome,
    _drawer_stuck,
    _goal_miss,
)


def collect_evidence(
    record: RolloutRecord, scene: SceneSpec, trace: list[dict] | None = None
) -> list[Evidence]:
    """Every detector's finding on a rollout (in detector order)."""
    r = _Rollout(record, scene)
    found = [det(r) for det in DETECTORS] + [_trace_repairs(r, trace)]
    return [e for e in found if e is not None]


# -- the simulator-grounded diagnoser ---------------------------------------------------------------
def failed_phase(record: RolloutRecord) -> tuple[int, int]:
    """(index of the first phase not reached, step at which the last reached phase was first reached)."""
    k = min(int(record.phases[-1].sum()), len(record.phase_names) - 1)
    last = int(np.argmax(record.phases[:, k - 1])) if k > 0 else 0
    return k, last


def phase_prior(family: str, phase: str) -> dict[str, float]:
    """Rank weight 1/(1 + rank) of each factor PHASE_FACTORS lists for the phase; 0 for the others."""
    ranked = PHASE_FACTORS[family].get(phase, ())
    return {f: (1.0 / (1 + ranked.index(f)) if f in ranked else 0.0) for f in FACTORS[family]}


def _softmax_margin(scores: np.ndarray) -> float:
    if len(scores) < 2:
        return 1.0
    z = np.exp((scores - scores.max()) / SOFTMAX_TEMPERATURE)
    p = np.sort(z / z.sum())[::-1]
    return float(p[0] - p[1])


def _late(evidence: list[Evidence]) -> list[bool]:
    """Whether each event happened more than a chunk after the first one (a consequence more than a cause)."""
    onsets = [e.onset for e in evidence if e.onset is not None]
    first = min(onsets, default=0)
    return [e.onset is not None and e.onset > first + CHUNK_STEPS for e in evidence]


def _check_pair(record: RolloutRecord, scene: SceneSpec) -> None:
    if record.scene_hash != scene.hash:
        raise ValueError(f"record of scene {record.scene_hash} diagnosed against scene {scene.hash}")


class SimDiagnoser:
    """Phase from the cumulative phase predicates; factor from prior + novelty + rollout evidence."""

    name = "sim"

    def scores(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None,
        reference: TrainingReference | None,
    ) -> tuple[str, dict[str, float], list[Evidence]]:
        """(failed phase, factor -> score, evidence): the quantities behind `diagnose`."""
        phase = record.phase_names[failed_phase(record)[0]]
        prior = phase_prior(record.family, phase)
        novelty = reference.novelty(scene) if reference is not None else dict.fromkeys(prior, 0.0)
        evidence = collect_evidence(record, scene, trace)
        support = dict.fromkeys(prior, 0.0)
        nothing_reached = not record.phases[-1].any()
        for e, late in zip(evidence, _late(evidence)):
            # an event that presupposes a grasp or contact cannot explain a failure to reach
            weak = late or (nothing_reached and e.kind in AFTER_CONTACT)
            for f, w in e.support.items():
                support[f] = max(support[f], w * (LATE_EVIDENCE if weak else 1.0))
        scores = {
            f: W_PRIOR * prior[f]
            + W_NOVELTY * novelty[f] * (1.0 if prior[f] > 0 else IMPLAUSIBLE_NOVELTY)
            + W_EVIDENCE * support[f]
            for f in prior
        }
        return phase, scores, evidence

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None = None,
        reference: TrainingReference | None = None,
    ) -> Diagnosis | None:
        _check_pair(record, scene)
        if record.success:
            return None
        phase, scores, evidence = self.scores(record, scene, trace, reference)
        names = list(scores)  # family factor order breaks ties deterministically
        values = np.array([scores[f] for f in names])
        factor = names[int(np.argmax(values))]
        k, last = failed_phase(record)
        backing = max(evidence, key=lambda e: e.support.get(factor, 0.0), default=None)
        if backing is None or backing.support.get(factor, 0.0) == 0.0:
            what = "; ".join(e.text for e in evidence[:1]) or f"no phase progress after step {last}"
            why = f"{what}; {factor} is the most plausible factor for this phase"
        else:
            why = backing.text
        novelty = reference.novelty(scene)[factor] if reference is not None else None
        since = f"last progress: {record.phase_names[k - 1]} at step {last}" if k > 0 else "no phase reached"
        cause = f"{phase} not reached ({since}); {why}; attributed to {factor}"
        cause += f" (novelty {novelty:.2f})." if novelty is not None else "."
        # the backing evidence's steps first, then where progress stopped and the end, then the rest
        ordered = [
            *(backing.steps if backing else ()),
            last,
            record.steps,
            *(s for e in evidence for s in e.steps),
        ]
        steps = list(dict.fromkeys(ordered))[:MAX_EVIDENCE_STEPS]
        return Diagnosis(
            record.family,
            record.variant,
            phase,
            factor,
            cause[:MAX_CAUSE_CHARS],
            round(_softmax_margin(values), 6),
            tuple(sorted(steps)),
        )


# -- wrappers: noisy and phase-only critics ----------------------------------------------------------
class NoisyDiagnoser:
    """A fallible critic: with probability p each, the phase and the factor are replaced by other ones.

    The draws come from an RNG keyed by (seed, scene hash), so a scene is always mislabelled the same way.
    """

    def __init__(self, base: Diagnoser, p: float, seed: int = 0) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.base, self.p, self.seed = base, float(p), int(seed)
        self.name = f"noisy:{self.p:g}"

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None = None,
        reference: TrainingReference | None = None,
    ) -> Diagnosis | None:
        d = self.base.diagnose(record, scene, trace, reference)
        if d is None or self.p == 0.0:
            return d
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(record.scene_hash, 16)]))
        flip_phase, flip_factor = rng.random() < self.p, rng.random() < self.p
        phases = [ph for ph in record.phase_names if ph != d.phase]
        factors = [f for f in FACTORS[d.family] if f != d.factor]
        phase = phases[int(rng.integers(len(phases)))] if flip_phase and phases else d.phase
        factor = factors[int(rng.integers(len(factors)))] if flip_factor and factors else d.factor
        if (phase, factor) == (d.phase, d.factor):
            return replace(d, confidence=round(d.confidence * (1.0 - 0.5 * self.p), 6))
        blamed = factor or "an unknown factor"
        cause = f"{phase} not reached; attributed to {blamed} (relabelled by a noisy critic)."
        return replace(d, phase=phase, factor=factor, cause=cause, confidence=round(0.5 * d.confidence, 6))


class PhaseOnlyDiagnoser:
    """Keeps the base critic's phase and cause, withholds the factor."""

    name = "phase_only"

    def __init__(self, base: Diagnoser) -> None:
        self.base = base

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None = None,
        reference: TrainingReference | None = None,
    ) -> Diagnosis | None:
        d = self.base.diagnose(record, scene, trace, reference)
        return None if d is None else replace(d, factor="")


# -- the VLM critic ---------------------------------------------------------------------------------
def extract_json_object(text: str) -> dict | None:
    """The first balanced ``{...}`` in `text` that parses as a JSON object (strings respected), else None;
    the same parser the program compilers use (`coda.engine.compile.extract_json`), never an evaluation."""
    from coda.engine.compile import extract_json

    return extract_json(text)


def phase_log(record: RolloutRecord) -> list[str]:
    """One line per phase: the step it was first completed at, or 'not reached'."""
    lines = []
    for j, name in enumerate(record.phase_names):
        col = record.phases[:, j]
        lines.append(
            f"{name}: completed at step {int(np.argmax(col))}" if col.any() else f"{name}: not reached"
        )
    return lines


def keyframe_steps(record: RolloutRecord, n: int) -> list[int]:
    """n control steps to show: the start, the phase advances, the end (evenly thinned or filled)."""
    T = record.steps
    cands = sorted(
        {0, T}
        | {
            int(np.argmax(record.phases[:, j]))
            for j in range(record.phases.shape[1])
            if record.phases[:, j].any()
        }
    )
    if len(cands) > n:
        return [cands[int(round(i))] for i in np.linspace(0, len(cands) - 1, n)]
    fill = [int(round(x)) for x in np.linspace(0, T, n + 2)[1:-1]]
    for s in fill:
        if len(cands) >= n:
            break
        if s not in cands:
            cands.append(s)
    return sorted(cands)


def render_keyframes(world, scene: SceneSpec, record: RolloutRecord, steps: list[int]) -> list[np.ndarray]:
    """Re-render recorded states (arm and finger joints, object poses, drawer joints); no physics is stepped.

    `world` must render (``World(..., render=True)``); each frame is the two camera views side by side,
    (H, 2W, 3) uint8. Setting poses from the record is exact and deterministic; replaying actions is not.
    """
    import pybullet as p

    from coda.sim.world import ARM_JOINTS, FINGER_JOINTS

    world.load(scene)
    c, s = world.client, record.states
    frames = []
    for t in steps:
        for j, q in zip(ARM_JOINTS, s["q"][t]):
            p.resetJointState(world.robot, j, float(q), physicsClientId=c)
        for j in FINGER_JOINTS:
            p.resetJointState(world.robot, j, float(s["grip"][t][0]) / 2, physicsClientId=c)
        k = 0
        for i, body in enumerate(world.bodies):
            p.resetBasePositionAndOrientation(
                body.uid, s["obj_pos"][t][i].tolist(), s["obj_quat"][t][i].tolist(), physicsClientId=c
            )
            for j in body.movable_joints:
                p.resetJointState(body.uid, j, float(s["art_q"][t][k]), physicsClientId=c)
                k += 1
        views = world.cameras()
        frames.append(np.concatenate(list(views), axis=1))
    return frames


def vlm_prompt(record: RolloutRecord) -> str:
    """Instruction, phase log, the family's phases and factors and the answer schema."""
    family = record.family
    schema = {
        "phase": f"one of {record.phase_names}",
        "factor": f"one of {list(FACTORS[family])}",
        "cause": "one short sentence",
        "confidence": "number in [0, 1]",
    }
    return "\n".join(
        [
            "You are checking a failed robot manipulation rollout of a Franka Panda arm.",
            f"Task family: {family} ({record.variant}). Instruction: {record.instruction!r}.",
            f"The images are keyframes in time order, each two camera views side by side; "
            f"the episode lasted {record.steps} control steps.",
            "Phase log (cumulative subgoals):",
            *phase_log(record),
            f"Phases of the task, in order: {', '.join(record.phase_names)}.",
            f"Generative factors of the scene: {', '.join(FACTORS[family])}.",
            "Say which phase failed, which factor most likely caused it and why.",
            "Answer with one JSON object and nothing else, following this schema:",
            json.dumps(schema),
        ]
    )


class VLMDiagnoser:
    """A transformers image-text-to-text model, loaded from a local path, as the failure critic.

    Output that is not a JSON object naming a phase and a factor of the family is rejected (returns None)
    and counted in ``invalid``; ``calls``, ``prompt_tokens`` and ``completion_tokens`` count usage.
    """

    name = "vlm"

    def __init__(
        self,
        model_path: str,
        *,
        world_factory: Callable[[], Any] | None = None,
        data_dir: str = "data",
        keyframes: int = 3,
        max_new_tokens: int = 128,
    ) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=False
        )
        self.model = AutoModelForImageTextToText.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=False
        ).eval()
        self.world_factory = world_factory or (lambda: _render_world(data_dir))
        self._world = None
        self.keyframes, self.max_new_tokens = int(keyframes), int(max_new_tokens)
        self.invalid = self.calls = self.prompt_tokens = self.completion_tokens = 0

    def _images(self, record: RolloutRecord, scene: SceneSpec) -> tuple[list, list[int]]:
        from PIL import Image

        if self._world is None:
            self._world = self.world_factory()
        steps = keyframe_steps(record, self.keyframes)
        return [Image.fromarray(f) for f in render_keyframes(self._world, scene, record, steps)], steps

    def _inputs(self, prompt: str, images: list) -> dict:
        proc = self.processor
        if getattr(proc, "chat_template", None):
            content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt}]
            messages = [{"role": "user", "content": content}]
            text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = getattr(proc, "image_token", "<image>") * len(images) + "\n" + prompt
        return proc(text=text, images=images, return_tensors="pt")

    def generate(self, prompt: str, images: list) -> str:
        """Greedy decoding; counts prompt and completion tokens."""
        import torch

        inputs = self._inputs(prompt, images).to(self.model.device)
        n_in = int(inputs["input_ids"].shape[1])
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        new = out[0, n_in:]
        self.prompt_tokens += n_in
        self.completion_tokens += int(new.shape[0])
        return self.processor.decode(new, skip_special_tokens=True)

    def parse(self, text: str, record: RolloutRecord, default_steps: list[int]) -> Diagnosis | None:
        """Validate a model answer into a Diagnosis of the record's family, or None."""
        obj = extract_json_object(text)
        if obj is None:
            return None
        cause = obj.get("cause")
        d = {
            "family": record.family,
            "variant": record.variant,
            "phase": obj.get("phase"),
            "factor": obj.get("factor"),
            "cause": cause[:MAX_CAUSE_CHARS] if isinstance(cause, str) else cause,
            "confidence": obj.get("confidence", 0.5),
            "evidence_steps": obj.get("evidence_steps", default_steps),
        }
        try:
            diag = Diagnosis.from_dict(d)
        except ProgramError:
            return None
        if diag.factor == "" or any(s > record.steps for s in diag.evidence_steps):
            return None
        return diag

    def diagnose(
        self,
        record: RolloutRecord,
        scene: SceneSpec,
        trace: list[dict] | None = None,
        reference: TrainingReference | None = None,
    ) -> Diagnosis | None:
        _check_pair(record, scene)
        if record.success:
            return None
        images, steps = self._images(record, scene)
        self.calls += 1
        diag = self.parse(self.generate(vlm_prompt(record), images), record, steps)
        if diag is None:
            self.invalid += 1
        return diag

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
            self._world = None


def _render_world(data_dir: str):
    from coda.sim.world import World

    return World(data_dir, render=True)


# -- factory ---------------------------------------------------------------------------------------
def make_diagnoser(kind: str, *, seed: int = 0, **kw: Any) -> Diagnoser:
    """``"sim"``, ``"noisy:<p>"``, ``"phase_only"`` or ``"vlm"`` (kw: model_path, world_factory, ...).

    `seed` keys the noisy critic's draws and is ignored by the deterministic ones, so callers can pass it
    whatever the kind.
    """
    if kind == "vlm":
        return VLMDiagnoser(**kw)
    if kw:
        raise TypeError(f"diagnoser {kind!r} takes no options {sorted(kw)}")
    if kind == "sim":
        return SimDiagnoser()
    if kind.startswith("noisy:"):
        try:
            p = float(kind[6:])
        except ValueError:
            raise ValueError(f"noisy:<p> needs a number p, got {kind!r}") from None
        return NoisyDiagnoser(SimDiagnoser(), p, seed=seed)
    if kind == "phase_only":
        return PhaseOnlyDiagnoser(SimDiagnoser())
    raise ValueError(f"unknown diagnoser {kind!r}; expected 'sim', 'noisy:<p>', 'phase_only' or 'vlm'")
