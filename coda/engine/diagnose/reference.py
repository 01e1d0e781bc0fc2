"""Factor values of a scene and the training reference that measures how novel a scene is.

`factor_values` reads the value of each of a scene's family factors (positions, yaws, object properties,
asset, distractor count, instruction template, goal offset, drawer part). `TrainingReference` collects
the values of the scenes a policy has trained on, per family, and scores a new scene's novelty per factor
in [0, 1] (nearest trained value over the factor's range width for numeric factors, seen / unseen for
categorical ones); it round-trips through JSON for memory snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.errors import ProgramError
from coda.memory.factors import FACTORS, PRIMARY_ROLE
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES
from coda.sim.scene import SceneSpec

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
    if key.endswith("_y") and key[: -len("_y")] in REGISTRY[family].mirrored:  # a magnitude on either side
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
