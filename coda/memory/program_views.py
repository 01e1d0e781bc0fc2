"""Typed, read-only views of validated program documents: `GenerationProgram` and `TrainingProgram`.

Memory stores programs as canonical JSON documents (`coda.memory.programs`, and
`coda.memory.libero_programs` for LIBERO suites, whose family is ``libero_*``). A view is built from a
document by validating it with the same validators (so errors are the same `ProgramError`, naming the
field) and exposes the canonical fields as attributes; nested objects are read-only (mappings become
`types.MappingProxyType`, lists tuples). ``view.doc`` gives back the canonical document, a fresh copy each
time, so ``GenerationProgram.from_doc(view.doc) == view``.

Both program dialects share one view class per kind: the fields of the other dialect are None (a LIBERO
generation program has ``task`` and ``shift``/``place``/``swap``/``paraphrase``/``retarget`` but no ``roles``; ``is_libero`` says
which).

Example:
    >>> prog = GenerationProgram.from_doc({"family": "pick_place", "operations": [
    ...     {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}]})
    >>> prog.perturbs, prog.operations[0]["range"], prog.doc["id"] == prog.id
    ('mass', (0.5, 0.8), True)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Self

from coda.memory import libero_programs, programs

__all__ = ["GenerationProgram", "TrainingProgram", "program_view"]


def _freeze(value: Any) -> Any:
    """A read-only copy of a JSON value: objects as mapping proxies, arrays as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True, eq=False)
class _ProgramView:
    """Fields shared by every program; equal views have equal canonical documents."""

    # (validator of scene-family programs, validator of LIBERO programs) of the view's kind
    VALIDATORS: ClassVar[tuple[Callable[[Any], dict], Callable[[Any], dict]]]

    id: str
    kind: str
    version: int
    family: str
    mode: str | None  # the difficulty mode the program was compiled for ("" or None: none)
    source: str
    _doc: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_doc(cls, doc: Any) -> Self:
        """The view of `doc` after validation (raises `ProgramError` naming the offending field)."""
        scene, libero = cls.VALIDATORS
        return cls._of(libero(doc) if libero_programs.is_libero(doc) else scene(doc))

    @classmethod
    def _of(cls, canonical: Mapping[str, Any]) -> Self:
        canonical = copy.deepcopy(dict(canonical))
        values = {f.name: _freeze(canonical.get(f.name)) for f in fields(cls) if f.name != "_doc"}
        return cls(**values, _doc=canonical)

    @property
    def doc(self) -> dict[str, Any]:
        """The canonical JSON document (a fresh copy)."""
        return copy.deepcopy(dict(self._doc))

    @property
    def is_libero(self) -> bool:
        return libero_programs.is_libero(self._doc)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ProgramView):
            return NotImplemented
        return type(self) is type(other) and self._doc == other._doc

    def __hash__(self) -> int:
        return hash((self.kind, self.id))


@dataclass(frozen=True, eq=False)
class GenerationProgram(_ProgramView):
    """A generation program (paper §3.2): recreates a difficulty on a base scene or a LIBERO task."""

    VALIDATORS = (programs.validate_generation, libero_programs.validate_generation)

    perturbs: str = ""  # the family factor (LIBERO: "position" | "instruction") the program changes
    # scene families (coda.memory.programs)
    parent: str | None = None  # id of the program this one was transferred from ("" when none)
    roles: Mapping[str, Mapping[str, Any]] | None = None
    operations: tuple[Mapping[str, Any], ...] | None = None
    constraints: tuple[Mapping[str, Any], ...] | None = None
    # LIBERO suites (coda.memory.libero_programs)
    task: int | None = None
    shift: Mapping[str, Any] | None = None
    place: Mapping[str, Any] | None = None  # LIBERO: an absolute table position for the object
    swap: Mapping[str, Any] | None = None
    paraphrase: Mapping[str, Any] | None = None
    retarget: Mapping[str, Any] | None = None  # LIBERO: the instruction names another object of the scene


@dataclass(frozen=True, eq=False)
class TrainingProgram(_ProgramView):
    """A training program (paper §3.2): a shaping potential plus learning tools."""

    VALIDATORS = (programs.validate_training, libero_programs.validate_training)

    # scene families (coda.memory.programs)
    parent: str | None = None
    potential: Mapping[str, Any] | None = None  # a Text2potential fragment
    tools: Mapping[str, Any] | None = None  # planner_demos, imitation/critic weights, replay share
    # LIBERO suites (coda.memory.libero_programs)
    task: int | None = None
    phase_weights: tuple[float, ...] | None = None
    planner_demos: int | None = None

    @property
    def demos(self) -> int:
        """Planner demonstrations the program asks for on its targeted environments (either dialect)."""
        return int(self.tools["planner_demos"] if self.tools is not None else self.planner_demos or 0)

    @property
    def imitation_ratio(self) -> float:
        """The imitation term's weight relative to the critic's (1 for LIBERO programs, which set neither)."""
        if self.tools is None:
            return 1.0
        return self.tools["imitation_weight"] / max(self.tools["critic_weight"], 1e-3)


def program_view(doc: Any) -> GenerationProgram | TrainingProgram:
    """The view of a generation or training program, by its ``kind`` (validated as `validate_program`)."""
    canonical = programs.validate_program(doc)
    cls = GenerationProgram if canonical["kind"] == "generation" else TrainingProgram
    return cls._of(canonical)
