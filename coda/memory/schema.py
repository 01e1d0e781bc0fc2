"""The tables of the memory (`SCHEMA`): fixed columns, nullability, enumerations, canonical row order,
and the checks every stored row and program document passes.

Six tables of plain rows (see `coda.memory.store` for what each records): ``scenes``, ``rollouts``,
``diagnoses``, ``modes``, ``mode_stats`` and ``program_stats``. A row is checked on insertion and again when
a snapshot is loaded (`make_row`); rows are kept in a canonical order (`sort_key`) so that equal memories
give byte-identical snapshots.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "DIAGNOSIS_STATUS",
    "ENUMS",
    "GENERATED_SPLITS",
    "MODE_STATUS",
    "NULLABLE",
    "PROGRAM_KINDS",
    "SCHEMA",
    "SORT_KEYS",
    "SPLITS",
    "VALIDITY",
    "arrow_schema",
    "check_program",
    "check_program_id",
    "coerce",
    "make_row",
    "sort_key",
    "to_json",
]

_STR, _INT, _FLOAT, _BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()

SCHEMA: dict[str, dict[str, pa.DataType]] = {
    "scenes": {
        "scene_hash": _STR,
        "family": _STR,
        "round": _INT,
        "split": _STR,
        "program_id": _STR,
        "base_hash": _STR,
        "spec_json": _STR,
        "validity": _STR,
        "repairs": _INT,
        "trace_json": _STR,  # construction trace: generation steps, checks, repairs
        "certified": _BOOL,  # the scripted planner solved it (its trajectory is a demonstration)
    },
    "rollouts": {
        "rollout_id": _STR,
        "scene_hash": _STR,
        "family": _STR,
        "round": _INT,
        "split": _STR,
        "success": _BOOL,
        "phase_reached": _INT,
        "steps": _INT,
        "policy_updates": _INT,  # global policy-update counter when rolled out
    },
    "diagnoses": {
        "diagnosis_id": _STR,
        "rollout_id": _STR,
        "scene_hash": _STR,
        "family": _STR,
        "round": _INT,
        "variant": _STR,
        "phase": _STR,
        "factor": _STR,
        "cause": _STR,
        "confidence": _FLOAT,
        "evidence_json": _STR,
        "mode_id": _STR,
        "status": _STR,
        "truth_factor": _STR,  # the factor the generating program perturbed; for scoring only
    },
    "modes": {
        "mode_id": _STR,
        "family": _STR,
        "phase": _STR,
        "factor": _STR,
        "cause": _STR,  # representative cause: the cause of the mode's first diagnosis
        "created_round": _INT,
        "status": _STR,
        "n_diagnoses": _INT,
        "hardness": _FLOAT,  # 1 - fast EMA of success; null until measured
        "learning_progress": _FLOAT,
        "importance": _FLOAT,
        "success_fast": _FLOAT,
        "success_slow": _FLOAT,
        "n_updates_seen": _INT,  # number of success measurements folded into the EMAs
        "generation_program_id": _STR,
        "training_program_id": _STR,
        "validation_json": _STR,  # control-experiment evidence
    },
    "mode_stats": {
        "mode_id": _STR,
        "round": _INT,
        "policy_updates": _INT,
        "targeted_success": _FLOAT,
        "control_success": _FLOAT,
        "n_targeted": _INT,
        "n_control": _INT,
        "in_band": _BOOL,
    },
    "program_stats": {
        "program_id": _STR,
        "round": _INT,
        "policy_updates": _INT,
        "progress": _FLOAT,
        "success": _FLOAT,
        "n": _INT,
    },
}

NULLABLE: dict[str, frozenset[str]] = {
    "scenes": frozenset({"program_id", "base_hash"}),
    "rollouts": frozenset(),
    "diagnoses": frozenset({"mode_id", "truth_factor"}),
    "modes": frozenset(
        {"hardness", "success_fast", "success_slow", "generation_program_id", "training_program_id"}
    ),
    "mode_stats": frozenset({"control_success"}),
    "program_stats": frozenset(),
}

SPLITS = ("novel", "targeted", "control", "replay", "mutation", "seed", "transfer")
GENERATED_SPLITS = ("targeted", "control", "mutation", "transfer")
VALIDITY = ("pass", "repaired", "rejected")
DIAGNOSIS_STATUS = ("candidate", "validated", "rejected")
MODE_STATUS = ("candidate", "validated", "rejected", "retired")
PROGRAM_KINDS = ("generation", "training")

ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("scenes", "split"): SPLITS,
    ("scenes", "validity"): VALIDITY,
    ("rollouts", "split"): SPLITS,
    ("diagnoses", "status"): DIAGNOSIS_STATUS,
    ("modes", "status"): MODE_STATUS,
}

# canonical row order of each table (ties broken by the whole row), so that snapshots are byte-identical
SORT_KEYS: dict[str, tuple[str, ...]] = {
    "scenes": ("round", "split", "scene_hash", "program_id", "base_hash"),
    "rollouts": ("round", "rollout_id"),
    "diagnoses": ("round", "diagnosis_id"),
    "modes": ("mode_id",),
    "mode_stats": ("mode_id", "policy_updates", "round"),
    "program_stats": ("program_id", "policy_updates", "round"),
}

_ID_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]*")


def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema of one memory table (nullable only where `NULLABLE` says so)."""
    return pa.schema(
        [pa.field(col, typ, nullable=col in NULLABLE[table]) for col, typ in SCHEMA[table].items()]
    )


# -- row checks --------------------------------------------------------------------------------------------
def coerce(table: str, col: str, value: Any) -> Any:
    """`value` as the plain Python type of column `col`; ValueError when it does not fit."""
    where = f"{table}.{col}"
    if value is None:
        if col in NULLABLE[table]:
            return None
        raise ValueError(f"{where}: must not be null")
    typ = SCHEMA[table][col]
    if typ == _STR:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r} ({type(value).__name__})")
        if (table, col) in ENUMS and value not in ENUMS[table, col]:
            raise ValueError(f"{where}: {value!r} is not one of {', '.join(ENUMS[table, col])}")
        return value
    if typ == _BOOL:
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{where}: expected a bool, got {value!r} ({type(value).__name__})")
        return bool(value)
    if typ == _INT:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise ValueError(f"{where}: expected an integer, got {value!r} ({type(value).__name__})")
        return int(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{where}: expected a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return value


def make_row(table: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """A checked row with exactly the table's columns, in schema order."""
    cols = SCHEMA[table]
    unknown = set(values) - set(cols)
    if unknown:
        raise ValueError(f"{table}: unknown column(s) {', '.join(sorted(unknown))}")
    missing = [c for c in cols if c not in values and c not in NULLABLE[table]]
    if missing:
        raise ValueError(f"{table}: missing column(s) {', '.join(missing)}")
    return {c: coerce(table, c, values.get(c)) for c in cols}


def to_json(value: Any) -> str:
    """Canonical JSON text of `value` (a string passes through after a parse check)."""
    if isinstance(value, str):
        json.loads(value)
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def sort_key(table: str, row: Mapping[str, Any]) -> tuple:
    key = tuple((row[c] is not None, row[c] if row[c] is not None else 0) for c in SORT_KEYS[table])
    return key + (json.dumps(row, sort_keys=True),)


# -- programs ----------------------------------------------------------------------------------------------
def check_program_id(program_id: Any) -> str:
    """A program id is also its file name: '/'-separated segments of letters, digits and ``_.+=-``."""
    if not isinstance(program_id, str) or not program_id or len(program_id) > 200:
        raise ValueError(
            f"program id must be a non-empty string of at most 200 characters, got {program_id!r}"
        )
    for seg in program_id.split("/"):
        if not _ID_SEGMENT.fullmatch(seg) or seg in (".", ".."):
            raise ValueError(f"program id {program_id!r}: segment {seg!r} is not a safe file name")
    return program_id


def check_program(doc: Any, canonical: bool = True) -> dict[str, Any]:
    """A program document as stored: a JSON object with a safe ``id`` and ``kind`` generation|training.

    When `coda.memory.programs.validate_program` exists, the document must pass it; with ``canonical``
    its canonical form (which carries the content-derived ``id``) is returned, else the document as given
    (a loaded snapshot keeps its documents byte for byte).
    """
    if not isinstance(doc, Mapping):
        raise ValueError(f"a program must be a JSON object, got {type(doc).__name__}")
    doc = json.loads(to_json(dict(doc)))  # plain JSON types only, a private copy
    try:
        from coda.memory.programs import validate_program
    except ImportError:
        validate_program = None
    if validate_program is not None:
        validated = json.loads(to_json(validate_program(doc)))
        doc = validated if canonical else doc
    check_program_id(doc.get("id"))
    if doc.get("kind") not in PROGRAM_KINDS:
        raise ValueError(f"program {doc['id']!r}: kind must be one of {', '.join(PROGRAM_KINDS)}")
    return doc
