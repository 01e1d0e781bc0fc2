"""A rollout-grounded diagnoser for LIBERO-Pro variants.

It reads what a rollout shows — the observation at reset (every object's position), the instruction the
policy was given and the phases it reached — and compares it with the training reference: the initial
object positions and the instructions of the planner demonstrations the policy was trained on, per source
task. It never reads the variant's perturbation (its shifts, swap, paraphrase, retarget or program): those are what
the control experiment must confirm.

* the given instruction is not one the task was trained with → factor ``instruction``: role ``retarget``
  (with the named object and its rank among the goal's nearest movable objects at reset, less the task's
  held-out ``_task`` goal) when its object phrase names another object of the scene (a new task,
  LIBERO-Pro ``_task``), otherwise a paraphrase;
* the goal object sits where training put another object, and that object where the goal was → factor
  ``position``, role ``swap`` (with the neighbour's rank);
* otherwise the goal object or the target moved beyond ``threshold`` from every training position →
  factor ``position``, role ``object`` or ``target``, with the observed offset and table position;
* nothing observable differs from training → no diagnosis (a failure the generator cannot recreate).

The failed phase is the first subgoal phase (`coda.sim.libero.PHASES`) the rollout did not reach.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROPRIO = 9  # ee position (3), ee quaternion (4), finger joints (2): `SuiteObservation`'s first entries


def initial_positions(obs0: np.ndarray, objects: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Absolute x/y of every present object in an observation row of `SuiteObservation`."""
    obs0 = np.asarray(obs0, dtype=float)
    ee = obs0[:3]
    out = {}
    for i, name in enumerate(objects):
        k = PROPRIO + 4 * i
        if obs0[k] > 0.5:
            out[name] = (obs0[k + 1 : k + 4] + ee)[:2]
    return out


def nearest_others(positions: Mapping[str, Any], goal: str, skip: Iterable[str] = ()) -> list[str]:
    """The objects of `positions` other than `goal` and `skip`, nearest to `goal` (x/y) first: the ordering of
    swap and retarget ranks, in the episode (`coda.domains.libero.episodes`) and in the diagnosis alike."""
    skip = {goal, *skip}
    home = np.asarray(positions[goal], dtype=float)[:2]
    return sorted(
        (n for n in positions if n not in skip),
        key=lambda n: float(np.linalg.norm(np.asarray(positions[n], dtype=float)[:2] - home)),
    )


def object_phrase(name: str) -> str:
    """The instruction phrase of a BDDL object instance: 'cream_cheese_1' -> 'cream cheese'."""
    return re.sub(r"_\d+$", "", name).replace("_", " ")


def named_object(text: str, names: Iterable[str]) -> str | None:
    """The object of `names` (BDDL instances) an instruction names first — its object phrase in a
    pick-and-place instruction — matched on whole words, case-insensitively; None when it names none."""
    low = f" {re.sub(r'[^a-z0-9]+', ' ', text.lower())} "
    found = [(low.find(f" {object_phrase(n)} "), n) for n in names]
    found = [(i, n) for i, n in found if i >= 0]
    return min(found)[1] if found else None


@dataclass
class LiberoReference:
    """Per source task: the instructions and every object's initial x/y in the training demonstrations."""

    instructions: dict[int, list[str]] = field(default_factory=dict)
    positions: dict[int, dict[str, list[list[float]]]] = field(default_factory=dict)

    def add(self, task: int, instruction: str, obs0: np.ndarray, objects: tuple[str, ...]) -> None:
        texts = self.instructions.setdefault(task, [])
        if instruction not in texts:
            texts.append(instruction)
        slots = self.positions.setdefault(task, {})
        for name, xy in initial_positions(obs0, objects).items():
            slots.setdefault(name, []).append([round(float(v), 4) for v in xy])

    def mean(self, task: int, name: str) -> np.ndarray | None:
        pts = self.positions.get(task, {}).get(name)
        return None if not pts else np.mean(np.asarray(pts, dtype=float), axis=0)

    def distance(self, task: int, name: str, xy: np.ndarray) -> float:
        """Distance from `xy` to the nearest training position of object `name` (inf when never seen)."""
        pts = self.positions.get(task, {}).get(name)
        if not pts:
            return float("inf")
        return float(np.min(np.linalg.norm(np.asarray(pts, dtype=float) - xy, axis=1)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "instructions": {str(t): v for t, v in sorted(self.instructions.items())},
            "positions": {str(t): v for t, v in sorted(self.positions.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiberoReference:
        return cls(
            {int(t): list(v) for t, v in d["instructions"].items()},
            {int(t): {n: [list(p) for p in pts] for n, pts in v.items()} for t, v in d["positions"].items()},
        )


@dataclass(frozen=True)
class LiberoDiagnoser:
    """Diagnoses failed LIBERO rollouts against a `LiberoReference` (see the module docstring)."""

    objects: tuple[str, ...]  # the observation's object slots (`SuiteObservation.objects`)
    roles: dict[int, tuple[str, str]]  # task -> (goal object, target body)
    phases: tuple[str, ...]
    # task -> LIBERO-Pro `_task`'s goal object for it, which retarget ranks skip (`coda.sim.libero.heldout`)
    held_out: dict[int, str] = field(default_factory=dict)
    # metres beyond every training position that count as moved: 2.3x the largest natural offset of a
    # round state's object from the SFT states' (1.3 cm over 2,450 positions of the 10 libero_object tasks,
    # `benchmarks/libero_init_spread.py`, 2026-12-01)
    threshold: float = 0.03

    def diagnose(
        self, task: int, obs0: np.ndarray, instruction: str, phase_reached: int, reference: LiberoReference
    ) -> dict[str, Any] | None:
        """The diagnosis of a failed rollout of source task `task` from its first observation row, the
        instruction it was given and the number of phases it reached; None when nothing differs."""
        phase = self.phases[min(int(phase_reached), len(self.phases) - 1)]
        base = {"variant": "default", "phase": phase, "confidence": 1.0, "evidence_steps": [0]}
        goal, target = self.roles[task]
        now = initial_positions(obs0, self.objects)
        if instruction not in reference.instructions.get(task, []):
            retarget = self._retarget(instruction, goal, target, now, self.held_out.get(task))
            if retarget is not None:
                other, rank = retarget
                return {
                    **base,
                    "factor": "instruction",
                    "role": "retarget",
                    "object": other,
                    "rank": rank,
                    "cause": f"fails to complete '{phase}' when told to pick {other} instead of {goal}: "
                    f"{instruction}",
                    "instruction": instruction,
                }
            return {
                **base,
                "factor": "instruction",
                "cause": f"fails to complete '{phase}' when told an unfamiliar instruction: {instruction}",
                "instruction": instruction,
            }
        distance = {n: reference.distance(task, n, xy) for n, xy in now.items()}
        moved = {n for n, d in distance.items() if d > self.threshold}
        swap = self._swap(task, goal, target, now, moved, reference)
        if swap is not None:
            other, rank = swap
            return {
                **base,
                "factor": "position",
                "role": "swap",
                "rank": rank,
                "cause": f"fails to complete '{phase}' when the goal object stands where {other} was trained",
            }
        for role, name in (("object", goal), ("target", target)):
            if name in moved:
                offset = now[name] - reference.mean(task, name)
                dx, dy = (round(float(v), 4) for v in offset)
                return {
                    **base,
                    "factor": "position",
                    "role": role,
                    "offset": [dx, dy],
                    "position": [round(float(v), 4) for v in now[name]],
                    "cause": f"fails to complete '{phase}' when the {role} is ({dx:+.2f}, {dy:+.2f}) m from "
                    "where training put it",
                }
        return None

    @staticmethod
    def _retarget(instruction, goal, target, now, held_out=None) -> tuple[str, int] | None:
        """(the other object of the scene the instruction names as its object, that object's rank among the
        goal's nearest movable objects at reset less the held-out `_task` goal,
        `coda.domains.libero.episodes.neighbour`'s ordering) — None when the instruction names the goal object
        first, no object of the scene, or the held-out goal (no retarget program recreates that)."""
        named = named_object(instruction, [n for n in now if n != target])
        if named is None or named in (goal, held_out) or goal not in now:
            return None
        return named, nearest_others(now, goal, (target, held_out)).index(named)

    def _swap(self, task, goal, target, now, moved, reference) -> tuple[str, int] | None:
        """(the object the goal traded places with, its rank among the goal's nearest movable objects in
        training) when the goal stands at another object's training position and that object at the goal's."""
        if goal not in moved or goal not in now:
            return None
        home = reference.mean(task, goal)
        if home is None:
            return None
        others = sorted(
            (n for n in now if n not in (goal, target) and reference.mean(task, n) is not None),
            key=lambda n: float(np.linalg.norm(reference.mean(task, n) - home)),
        )
        for rank, n in enumerate(others):
            there = reference.mean(task, n)
            if (
                np.linalg.norm(now[goal] - there) <= self.threshold
                and np.linalg.norm(now[n] - home) <= self.threshold
            ):
                return n, rank
        return None
