"""The shared heterogeneous memory of CoDA (§3.2): what generation and training know about each other.

A `Memory` holds six tables of plain rows with fixed columns (`SCHEMA`) and the programs (JSON documents,
keyed by their id):

* ``scenes``: every generated, seed or replayed scene with its construction trace (generation steps,
  validity checks, repairs) and its lineage: the program that made it and the base scene it came from;
* ``rollouts``: one summary row per policy rollout;
* ``diagnoses``: rollout-grounded failure diagnoses (phase, generative factor, cause text), each clustered
  into a difficulty mode;
* ``modes``: difficulty modes (`DifficultyMode`): recurring failures of one (family, phase, factor) with a
  similar cause, with `hardness`, `learning_progress` and `importance`, and the programs compiled for them;
* ``mode_stats`` / ``program_stats``: the measurement history behind learning progress.

Difficulty modes. `Memory.assign_mode` puts a diagnosis into the mode of the same (family, phase, factor)
whose representative cause (the cause of the mode's first diagnosis) has a sentence-embedding cosine
similarity >= ``similarity_threshold`` (0.8) with the diagnosis' cause, else opens a new mode
``family/phase/factor/k``. `Memory.update_mode` records a measured success rate of a mode's targeted
environments and updates two exponential moving averages of it, one per measurement: fast (α = 0.5) and slow
(α = 0.1). ``hardness = 1 − fast EMA``; ``learning_progress = |fast EMA − slow EMA|`` (the absolute learning
progress of teacher-student curriculum learning: large while success is changing, in either direction,
decaying to 0 while it is flat); ``importance`` is learning progress normalised to sum to 1 over the
family's validated modes (proportionally; uniform while all are 0; 0 for modes that are not validated).

Snapshots. `save_snapshot` writes ``tables/<name>.parquet`` (explicit Arrow schema, rows in a canonical
order), ``programs/<id>.json`` (sorted keys) and ``manifest.json`` (row counts, sha256 and size of every
file) into a temporary sibling directory and renames it into place, so a crash never leaves a partial
snapshot; two equal memories give byte-identical snapshots. `load_snapshot` trusts nothing it reads: it
checks the manifest's keys and version, the exact file set, every size and sha256, table schemas and row
values, and program documents, with size limits; files are parsed as Parquet and JSON, never unpickled. Any
problem raises `MemoryFormatError` naming the file and field. A run keeps one snapshot per round under
``<run_dir>/memory/round-0003/`` (`snapshot_path`, `latest_snapshot`).

Example:
    >>> mem = Memory()
    >>> mem.add_scene("a1b2", "pick_place", 0, "seed", spec_json="{}")
    'a1b2'
    >>> d = mem.add_diagnosis("r1", "a1b2", "pick_place", 1, "default", "grasp", "scale",
    ...                       "the gripper closes above the small cube", 0.7)
    >>> mem.assign_mode(d)
    'pick_place/grasp/scale/0'
    >>> mode = mem.update_mode("pick_place/grasp/scale/0", success=0.25, n=16, policy_updates=500, round=1)
    >>> mode.hardness, mode.learning_progress
    (0.75, 0.0)
    >>> path = save_snapshot(mem, "runs/x/memory/round-0001", round=1)
    >>> load_snapshot(path) == mem
    True
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# -- schema ----------------------------------------------------------------------------------------------
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

FAST_ALPHA = 0.5  # EMA step of the fast success estimate, per measurement
SLOW_ALPHA = 0.1  # EMA step of the slow success estimate, per measurement
SIMILARITY_THRESHOLD = 0.8
SUCCESS_BAND = (0.2, 0.8)

FORMAT = "coda-memory"
SCHEMA_VERSION = 1
MANIFEST_KEYS = ("extra", "files", "format", "round", "schema_version", "tables")
MAX_TABLE_BYTES = 64 * 2**20
MAX_PROGRAM_BYTES = 2**20
MAX_MANIFEST_BYTES = 16 * 2**20
MAX_FILES = 10_000
HUB_EXTRA_FILES = ("README.md", ".gitattributes")  # a Hub copy has these beside the snapshot
HUB_METADATA_DIR = ".cache"  # snapshot_download(local_dir=...) keeps its metadata here

_ID_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]*")
_ROUND_DIR = re.compile(r"round-(\d+)")
_SHA256 = re.compile(r"[0-9a-f]{64}")

Encoder = Callable[[list[str]], Any]  # list of n texts -> (n, d) embeddings (torch tensor or array)


class MemoryFormatError(ValueError):
    """A snapshot that is missing, corrupt, tampered with or of an unknown format; names file and field."""


def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema of one memory table (nullable only where `NULLABLE` says so)."""
    return pa.schema(
        [pa.field(col, typ, nullable=col in NULLABLE[table]) for col, typ in SCHEMA[table].items()]
    )


def in_band(success: float, band: tuple[float, float] = SUCCESS_BAND) -> bool:
    """Whether a success rate lies in the (inclusive) success band: failing often, yet learnable."""
    return band[0] <= success <= band[1]


def snapshot_path(run_dir: str | Path, round: int) -> Path:
    """Where a run keeps its round-``round`` snapshot: ``run_dir/memory/round-0003``."""
    return Path(run_dir) / "memory" / f"round-{round:04d}"


# -- row checks --------------------------------------------------------------------------------------------
def _coerce(table: str, col: str, value: Any) -> Any:
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


def _make_row(table: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """A checked row with exactly the table's columns, in schema order."""
    cols = SCHEMA[table]
    unknown = set(values) - set(cols)
    if unknown:
        raise ValueError(f"{table}: unknown column(s) {', '.join(sorted(unknown))}")
    missing = [c for c in cols if c not in values and c not in NULLABLE[table]]
    if missing:
        raise ValueError(f"{table}: missing column(s) {', '.join(missing)}")
    return {c: _coerce(table, c, values.get(c)) for c in cols}


def _to_json(value: Any) -> str:
    """Canonical JSON text of `value` (a string passes through after a parse check)."""
    if isinstance(value, str):
        json.loads(value)
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _sort_key(table: str, row: Mapping[str, Any]) -> tuple:
    key = tuple((row[c] is not None, row[c] if row[c] is not None else 0) for c in SORT_KEYS[table])
    return key + (json.dumps(row, sort_keys=True),)


def _mode_index(mode_id: str) -> int:
    return int(mode_id.rsplit("/", 1)[1])


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


def _check_program(doc: Any, canonical: bool = True) -> dict[str, Any]:
    """A program document as stored: a JSON object with a safe ``id`` and ``kind`` generation|training.

    When `coda.memory.programs.validate_program` exists, the document must pass it; with ``canonical``
    its canonical form (which carries the content-derived ``id``) is returned, else the document as given
    (a loaded snapshot keeps its documents byte for byte).
    """
    if not isinstance(doc, Mapping):
        raise ValueError(f"a program must be a JSON object, got {type(doc).__name__}")
    doc = json.loads(_to_json(dict(doc)))  # plain JSON types only, a private copy
    try:
        from coda.memory.programs import validate_program
    except ImportError:
        validate_program = None
    if validate_program is not None:
        validated = json.loads(_to_json(validate_program(doc)))
        doc = validated if canonical else doc
    check_program_id(doc.get("id"))
    if doc.get("kind") not in PROGRAM_KINDS:
        raise ValueError(f"program {doc['id']!r}: kind must be one of {', '.join(PROGRAM_KINDS)}")
    return doc


# -- difficulty modes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DifficultyMode:
    """A recurring failure: one (family, phase, factor) and a cluster of similar causes (a ``modes`` row)."""

    mode_id: str
    family: str
    phase: str
    factor: str
    cause: str  # representative cause text
    created_round: int
    status: str  # candidate | validated | rejected | retired
    n_diagnoses: int
    hardness: float | None  # 1 - success (fast EMA); None until measured
    learning_progress: float  # |fast EMA - slow EMA| of success
    importance: float  # learning progress normalised over the family's validated modes
    success_fast: float | None
    success_slow: float | None
    n_updates_seen: int
    generation_program_id: str | None
    training_program_id: str | None
    validation_json: str  # control-experiment evidence

    @property
    def validation(self) -> dict[str, Any]:
        return json.loads(self.validation_json)


# -- the memory ----------------------------------------------------------------------------------------------
class Memory:
    """The shared memory: six tables of rows (`SCHEMA`) and the programs, with difficulty-mode bookkeeping.

    Rows are checked against `SCHEMA` on insertion; `table` returns a DataFrame in canonical row order.
    ``encoder`` embeds cause texts for mode clustering (default: the offline MiniLM of `coda.learn.text`).
    """

    def __init__(self, encoder: Encoder | None = None, similarity_threshold: float = SIMILARITY_THRESHOLD):
        self.encoder = encoder
        self.similarity_threshold = similarity_threshold
        self._rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMA}
        self._programs: dict[str, dict[str, Any]] = {}
        self._modes: dict[str, dict[str, Any]] = {}  # mode_id -> its row in self._rows["modes"]
        self._diagnoses: dict[str, dict[str, Any]] = {}
        self._rollout_ids: set[str] = set()
        self._scene_keys: dict[tuple, dict[str, Any]] = {}
        self._embeddings: dict[str, np.ndarray] = {}
        self._embedding_encoder: Any = None

    # -- inserting rows ------------------------------------------------------------------------------
    def add_scene(
        self,
        scene_hash: str,
        family: str,
        round: int,
        split: str,
        spec_json: str | Mapping,
        *,
        program_id: str | None = None,
        base_hash: str | None = None,
        validity: str = "pass",
        repairs: int = 0,
        trace: Any = None,
        certified: bool = False,
    ) -> str:
        """Record a scene and its construction trace; adding the very same row twice is a no-op."""
        row = _make_row(
            "scenes",
            dict(
                scene_hash=scene_hash,
                family=family,
                round=round,
                split=split,
                program_id=program_id,
                base_hash=base_hash,
                spec_json=_to_json(spec_json),
                validity=validity,
                repairs=repairs,
                trace_json=_to_json(trace if trace is not None else []),
                certified=certified,
            ),
        )
        key = (scene_hash, row["round"], split, program_id)
        if key in self._scene_keys:
            if self._scene_keys[key] != row:
                raise ValueError(f"scenes: {key} is already stored with different values")
            return scene_hash
        self._scene_keys[key] = row
        self._rows["scenes"].append(row)
        return scene_hash

    def add_rollout(
        self,
        scene_hash: str,
        family: str,
        round: int,
        split: str,
        success: bool,
        phase_reached: int,
        steps: int,
        policy_updates: int,
        *,
        rollout_id: str | None = None,
    ) -> str:
        """Record a rollout summary; returns its id (``r0003-000017`` unless given)."""
        rollout_id = rollout_id or self._new_id("r", round, self._rollout_ids)
        if rollout_id in self._rollout_ids:
            raise ValueError(f"rollouts: rollout_id {rollout_id!r} already exists")
        row = _make_row(
            "rollouts",
            dict(
                rollout_id=rollout_id,
                scene_hash=scene_hash,
                family=family,
                round=round,
                split=split,
                success=success,
                phase_reached=phase_reached,
                steps=steps,
                policy_updates=policy_updates,
            ),
        )
        self._rollout_ids.add(rollout_id)
        self._rows["rollouts"].append(row)
        return rollout_id

    def add_diagnosis(
        self,
        rollout_id: str,
        scene_hash: str,
        family: str,
        round: int,
        variant: str,
        phase: str,
        factor: str,
        cause: str,
        confidence: float,
        *,
        evidence: Any = None,
        status: str = "candidate",
        truth_factor: str | None = None,
        diagnosis_id: str | None = None,
    ) -> str:
        """Record a failure diagnosis (not yet in a mode: see `assign_mode`); returns its id."""
        diagnosis_id = diagnosis_id or self._new_id("d", round, self._diagnoses)
        if diagnosis_id in self._diagnoses:
            raise ValueError(f"diagnoses: diagnosis_id {diagnosis_id!r} already exists")
        row = _make_row(
            "diagnoses",
            dict(
                diagnosis_id=diagnosis_id,
                rollout_id=rollout_id,
                scene_hash=scene_hash,
                family=family,
                round=round,
                variant=variant,
                phase=phase,
                factor=factor,
                cause=cause,
                confidence=confidence,
                evidence_json=_to_json(evidence if evidence is not None else {}),
                mode_id=None,
                status=status,
                truth_factor=truth_factor,
            ),
        )
        self._diagnoses[diagnosis_id] = row
        self._rows["diagnoses"].append(row)
        return diagnosis_id

    def set_diagnosis_status(self, diagnosis_id: str, status: str) -> None:
        self._diagnosis(diagnosis_id)["status"] = _coerce("diagnoses", "status", status)

    def add_program(self, doc: Mapping[str, Any]) -> str:
        """Store a program document (generation or training); returns its id.

        The id is ``doc["id"]``, or with `coda.memory.programs` present, that of the validated canonical form.
        """
        doc = _check_program(doc)
        old = self._programs.get(doc["id"])
        if old is not None and old != doc:
            raise ValueError(f"program {doc['id']!r} is already stored with a different document")
        self._programs[doc["id"]] = doc
        return doc["id"]

    def add_program_stats(
        self, program_id: str, round: int, policy_updates: int, progress: float, success: float, n: int
    ) -> None:
        """Record a measurement of a training or generation program's learning progress."""
        self._program(program_id)
        self._rows["program_stats"].append(
            _make_row(
                "program_stats",
                dict(
                    program_id=program_id,
                    round=round,
                    policy_updates=policy_updates,
                    progress=progress,
                    success=success,
                    n=n,
                ),
            )
        )

    @staticmethod
    def _new_id(prefix: str, round: int, taken: Mapping | set) -> str:
        k = len(taken)
        while f"{prefix}{round:04d}-{k:06d}" in taken:
            k += 1
        return f"{prefix}{round:04d}-{k:06d}"

    # -- difficulty modes ------------------------------------------------------------------------------
    def assign_mode(
        self,
        diagnosis: Mapping[str, Any] | str,
        encoder: Encoder | None = None,
        threshold: float | None = None,
    ) -> str:
        """Cluster a diagnosis (a row or a stored diagnosis id) into a difficulty mode; returns the mode id.

        The diagnosis joins the most similar mode of its (family, phase, factor) that is not retired when the
        cosine similarity of the cause embeddings is >= ``threshold``; otherwise it opens a new mode. A stored
        diagnosis gets the mode id in its row; assigning it again returns the same mode.
        """
        row = self._diagnosis(diagnosis) if isinstance(diagnosis, str) else dict(diagnosis)
        stored = self._diagnoses.get(row.get("diagnosis_id", ""))
        if stored is not None and stored["mode_id"] is not None:
            return stored["mode_id"]
        family, phase, factor, cause = (str(row[k]) for k in ("family", "phase", "factor", "cause"))
        threshold = self.similarity_threshold if threshold is None else threshold
        prefix = f"{family}/{phase}/{factor}/"
        same_key = sorted((m for m in self._modes if m.startswith(prefix)), key=_mode_index)
        open_modes = [m for m in same_key if self._modes[m]["status"] != "retired"]
        mode_id = None
        if open_modes:
            sims = self._similarities(cause, [self._modes[m]["cause"] for m in open_modes], encoder)
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                mode_id = open_modes[best]
        if mode_id is None:
            mode_id = f"{prefix}{len(same_key)}"
            self._add_mode(mode_id, family, phase, factor, cause, int(row["round"]))
        self._modes[mode_id]["n_diagnoses"] += 1
        if stored is not None:
            stored["mode_id"] = mode_id
        return mode_id

    def add_mode(
        self, family: str, phase: str, factor: str, cause: str, round: int, *, generation_program_id: str
    ) -> str:
        """Open a candidate mode for a program that did not come from a diagnosis of this family (a program
        transferred from another family, Appendix A); its control experiment decides it like any other."""
        prefix = f"{family}/{phase}/{factor}/"
        mode_id = f"{prefix}{sum(m.startswith(prefix) for m in self._modes)}"
        self._add_mode(mode_id, family, phase, factor, cause, round)
        self.set_mode_programs(mode_id, generation_program_id=generation_program_id)
        return mode_id

    def _add_mode(self, mode_id: str, family: str, phase: str, factor: str, cause: str, round: int) -> None:
        row = _make_row(
            "modes",
            dict(
                mode_id=mode_id,
                family=family,
                phase=phase,
                factor=factor,
                cause=cause,
                created_round=round,
                status="candidate",
                n_diagnoses=0,
                hardness=None,
                learning_progress=0.0,
                importance=0.0,
                success_fast=None,
                success_slow=None,
                n_updates_seen=0,
                generation_program_id=None,
                training_program_id=None,
                validation_json="{}",
            ),
        )
        self._modes[mode_id] = row
        self._rows["modes"].append(row)

    def _similarities(self, text: str, others: list[str], encoder: Encoder | None) -> np.ndarray:
        """Cosine similarity of `text` to each of `others` (embeddings cached per text and encoder)."""
        encoder = encoder or self.encoder or _default_encoder()
        if encoder != self._embedding_encoder:
            self._embeddings.clear()
            self._embedding_encoder = encoder
        texts = [text, *others]
        todo = sorted({t for t in texts if t not in self._embeddings})
        if todo:
            emb = encoder(todo)
            emb = np.asarray(emb.detach().cpu().numpy() if hasattr(emb, "detach") else emb, dtype=np.float64)
            for t, e in zip(todo, emb.reshape(len(todo), -1)):
                self._embeddings[t] = e / max(float(np.linalg.norm(e)), 1e-12)
        return np.array([float(self._embeddings[text] @ self._embeddings[o]) for o in others])

    def update_mode(
        self,
        mode_id: str,
        success: float,
        n: int,
        policy_updates: int,
        round: int,
        *,
        control_success: float | None = None,
        n_control: int = 0,
        band: tuple[float, float] = SUCCESS_BAND,
    ) -> DifficultyMode:
        """Fold a measured targeted success rate (over ``n`` episodes) into the mode's statistics.

        Updates the fast and slow EMAs (the first measurement initialises both), hardness, learning
        progress and the importance of every validated mode of the family, and appends a ``mode_stats`` row.
        """
        mode = self._mode(mode_id)
        success = _coerce("mode_stats", "targeted_success", success)
        if mode["success_fast"] is None:
            fast = slow = success
        else:
            fast = mode["success_fast"] + FAST_ALPHA * (success - mode["success_fast"])
            slow = mode["success_slow"] + SLOW_ALPHA * (success - mode["success_slow"])
        mode.update(
            success_fast=fast,
            success_slow=slow,
            hardness=1.0 - fast,
            learning_progress=abs(fast - slow),
            n_updates_seen=mode["n_updates_seen"] + 1,
        )
        self._rows["mode_stats"].append(
            _make_row(
                "mode_stats",
                dict(
                    mode_id=mode_id,
                    round=round,
                    policy_updates=policy_updates,
                    targeted_success=success,
                    control_success=control_success,
                    n_targeted=n,
                    n_control=n_control,
                    in_band=in_band(success, band),
                ),
            )
        )
        self._refresh_importance(mode["family"])
        return self.mode(mode_id)

    def _refresh_importance(self, family: str) -> None:
        modes = [m for m in self._modes.values() if m["family"] == family]
        validated = [m for m in modes if m["status"] == "validated"]
        total = sum(m["learning_progress"] for m in validated)
        for m in modes:
            if m["status"] != "validated":
                m["importance"] = 0.0
            else:
                m["importance"] = m["learning_progress"] / total if total > 0 else 1.0 / len(validated)

    def set_mode_status(self, mode_id: str, status: str, validation: Mapping[str, Any] | None = None) -> None:
        """Set a mode's status (and its control-experiment evidence).

        Validating a mode validates its candidate diagnoses; rejecting it rejects its diagnoses.
        """
        mode = self._mode(mode_id)
        mode["status"] = _coerce("modes", "status", status)
        if validation is not None:
            mode["validation_json"] = _to_json(dict(validation))
        if status in ("validated", "rejected"):
            for d in self._diagnoses.values():
                if d["mode_id"] == mode_id and (status == "rejected" or d["status"] == "candidate"):
                    d["status"] = status
        self._refresh_importance(mode["family"])

    def set_mode_programs(
        self,
        mode_id: str,
        *,
        generation_program_id: str | None = None,
        training_program_id: str | None = None,
    ) -> None:
        """Attach stored programs compiled for a mode (None leaves the current one)."""
        mode = self._mode(mode_id)
        for col, pid in (
            ("generation_program_id", generation_program_id),
            ("training_program_id", training_program_id),
        ):
            if pid is not None:
                kind = self._program(pid)["kind"]
                if col != f"{kind}_program_id":
                    raise ValueError(f"modes.{col}: program {pid!r} is a {kind} program")
                mode[col] = pid

    # -- reading ---------------------------------------------------------------------------------------
    def rows(self, name: str) -> list[dict[str, Any]]:
        """Copies of a table's rows in canonical order."""
        if name not in SCHEMA:
            raise KeyError(f"unknown table {name!r}; tables are {', '.join(SCHEMA)}")
        return [dict(r) for r in sorted(self._rows[name], key=lambda r: _sort_key(name, r))]

    def table(self, name: str) -> pd.DataFrame:
        """A table as a DataFrame (schema columns, canonical row order)."""
        return pa.Table.from_pylist(self.rows(name), schema=arrow_schema(name)).to_pandas()

    def mode(self, mode_id: str) -> DifficultyMode:
        return DifficultyMode(**self._mode(mode_id))

    def modes(self, status: str | None = None, family: str | None = None) -> list[DifficultyMode]:
        """Difficulty modes sorted by id, optionally only those of one status and/or family."""
        return [
            DifficultyMode(**m)
            for m in self.rows("modes")
            if (status is None or m["status"] == status) and (family is None or m["family"] == family)
        ]

    def programs(self, kind: Literal["generation", "training"] | None = None) -> dict[str, dict[str, Any]]:
        """Copies of the stored programs by id (sorted), optionally of one kind."""
        return {
            pid: copy.deepcopy(doc)
            for pid, doc in sorted(self._programs.items())
            if kind is None or doc["kind"] == kind
        }

    def program(self, program_id: str) -> dict[str, Any]:
        return copy.deepcopy(self._program(program_id))

    def lineage(self, scene_hash: str) -> list[dict[str, Any]]:
        """The chain scene -> base scene -> ... as scene rows, newest first.

        For a scene stored several times, the row that has a base scene is followed (earliest round first).
        The chain stops at a scene without a base (seed or novel) or at a base that is not stored.
        """
        by_hash: dict[str, dict[str, Any]] = {}
        for r in self.rows("scenes"):
            if r["scene_hash"] not in by_hash or (
                by_hash[r["scene_hash"]]["base_hash"] is None and r["base_hash"]
            ):
                by_hash[r["scene_hash"]] = r
        chain: list[dict[str, Any]] = []
        h: str | None = scene_hash
        while h is not None and h in by_hash and all(c["scene_hash"] != h for c in chain):
            chain.append(by_hash[h])
            h = by_hash[h]["base_hash"]
        if not chain:
            raise KeyError(f"scene {scene_hash!r} is not in memory")
        return chain

    def scenes_without_lineage(self) -> list[dict[str, Any]]:
        """Generated scenes (targeted, control, transfer) that lack their program id or base scene."""
        return [
            r
            for r in self.rows("scenes")
            if r["split"] in GENERATED_SPLITS and (r["program_id"] is None or r["base_hash"] is None)
        ]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Memory):
            return NotImplemented
        return self._programs == other._programs and all(self.rows(t) == other.rows(t) for t in SCHEMA)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={len(self._rows[t])}" for t in SCHEMA)
        return f"Memory({counts}, programs={len(self._programs)})"

    # -- internals -------------------------------------------------------------------------------------
    def _mode(self, mode_id: str) -> dict[str, Any]:
        if mode_id not in self._modes:
            raise KeyError(f"unknown difficulty mode {mode_id!r}")
        return self._modes[mode_id]

    def _diagnosis(self, diagnosis_id: str) -> dict[str, Any]:
        if diagnosis_id not in self._diagnoses:
            raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
        return self._diagnoses[diagnosis_id]

    def _program(self, program_id: str) -> dict[str, Any]:
        if program_id not in self._programs:
            raise KeyError(f"unknown program {program_id!r}")
        return self._programs[program_id]

    @classmethod
    def _from_rows(cls, tables: Mapping[str, list[dict]], programs: Mapping[str, dict]) -> Memory:
        """A memory from checked rows and programs (used by `load_snapshot`)."""
        mem = cls()
        mem._rows = {name: [dict(r) for r in tables[name]] for name in SCHEMA}
        mem._programs = {pid: dict(doc) for pid, doc in programs.items()}
        mem._modes = {r["mode_id"]: r for r in mem._rows["modes"]}
        mem._diagnoses = {r["diagnosis_id"]: r for r in mem._rows["diagnoses"]}
        mem._rollout_ids = {r["rollout_id"] for r in mem._rows["rollouts"]}
        mem._scene_keys = {
            (r["scene_hash"], r["round"], r["split"], r["program_id"]): r for r in mem._rows["scenes"]
        }
        for name, ids in (
            ("modes", mem._modes),
            ("diagnoses", mem._diagnoses),
            ("rollouts", mem._rollout_ids),
            ("scenes", mem._scene_keys),
        ):
            if len(ids) != len(mem._rows[name]):
                raise ValueError(f"{name}: duplicate ids")
        return mem


def _default_encoder() -> Encoder:
    # imported lazily: loading the sentence encoder takes a second and sets HF_HUB_OFFLINE for the process
    from coda.learn.text import get_encoder

    return get_encoder().encode


# -- snapshots -----------------------------------------------------------------------------------------------
def _write_bytes(path: Path, data: bytes) -> None:
    """Write and fsync one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _table_bytes(memory: Memory, name: str) -> bytes:
    table = pa.Table.from_pylist(memory.rows(name), schema=arrow_schema(name))
    buf = pa.BufferOutputStream()
    # no pandas metadata (built from Python rows); pyarrow writes no timestamps, so equal rows -> equal bytes
    pq.write_table(table, buf, compression="zstd", use_dictionary=False, store_schema=True)
    return buf.getvalue().to_pybytes()


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n").encode()


def _temp_dir_pid(name: str) -> int | None:
    m = re.fullmatch(r"\..+\.tmp-(\d+)-[0-9a-f]+(-old)?", name)
    return int(m.group(1)) if m else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def _clean_stale_temp_dirs(parent: Path) -> None:
    """Remove temporary snapshot directories left by processes that died mid-save."""
    for p in parent.iterdir():
        pid = _temp_dir_pid(p.name)
        if pid is not None and p.is_dir() and not p.is_symlink() and not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def save_snapshot(
    memory: Memory,
    directory: str | Path,
    *,
    round: int,
    extra: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `memory` as a snapshot at `directory`, atomically; returns `directory`.

    Saving an identical snapshot again is a no-op; a different existing snapshot is replaced only with
    ``overwrite=True`` (else FileExistsError). ``extra`` (JSON) goes into the manifest, e.g. params, git SHA.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_temp_dirs(directory.parent)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = directory.parent / f".{directory.name}.tmp-{token}"
    tmp.mkdir()
    try:
        files: dict[str, dict[str, Any]] = {}

        def put(rel: str, data: bytes) -> None:
            _write_bytes(tmp / rel, data)
            files[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

        for name in SCHEMA:
            put(f"tables/{name}.parquet", _table_bytes(memory, name))
        for pid, doc in memory.programs().items():
            put(f"programs/{pid}.json", _json_bytes(doc))
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "round": int(round),
            "tables": {name: len(memory._rows[name]) for name in SCHEMA},
            "files": files,
            "extra": json.loads(_to_json(dict(extra or {}))),
        }
        manifest_bytes = _json_bytes(manifest)
        _write_bytes(tmp / "manifest.json", manifest_bytes)
        for d in sorted({(tmp / rel).parent for rel in files} | {tmp}, reverse=True):
            _fsync_dir(d)
        _move_into_place(tmp, directory, manifest_bytes, overwrite, token)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _move_into_place(tmp: Path, directory: Path, manifest_bytes: bytes, overwrite: bool, token: str) -> None:
    if directory.exists() or directory.is_symlink():
        existing = directory / "manifest.json"
        if existing.is_file() and existing.read_bytes() == manifest_bytes:
            shutil.rmtree(tmp)
            return
        if not overwrite:
            raise FileExistsError(
                f"{directory}: a different snapshot exists; pass overwrite=True to replace it"
            )
        old = directory.parent / f".{directory.name}.tmp-{token}-old"
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, directory)
    _fsync_dir(directory.parent)


def latest_snapshot(run_dir: str | Path) -> Path | None:
    """The highest-round complete snapshot ``run_dir/memory/round-NNNN`` (or under `run_dir` itself)."""
    run_dir = Path(run_dir)
    base = run_dir / "memory" if (run_dir / "memory").is_dir() else run_dir
    if not base.is_dir():
        return None
    found = [
        (int(m.group(1)), p)
        for p in base.iterdir()
        if (m := _ROUND_DIR.fullmatch(p.name)) and (p / "manifest.json").is_file()
    ]
    return max(found)[1] if found else None


# -- loading -------------------------------------------------------------------------------------------------
def _fail(where: str, message: str) -> MemoryFormatError:
    return MemoryFormatError(f"{where}: {message}")


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    if not path.is_file():
        raise _fail("manifest.json", f"missing in {root} (not a complete memory snapshot)")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise _fail("manifest.json", f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _fail("manifest.json", f"invalid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise _fail("manifest.json", "expected a JSON object")
    missing = sorted(set(MANIFEST_KEYS) - set(manifest))
    unexpected = sorted(set(manifest) - set(MANIFEST_KEYS))
    if missing or unexpected:
        raise _fail("manifest.json", f"missing keys {missing}, unexpected keys {unexpected}")
    if manifest["format"] != FORMAT:
        raise _fail("manifest.json", f"format is {manifest['format']!r}, expected {FORMAT!r}")
    if manifest["schema_version"] != SCHEMA_VERSION or isinstance(manifest["schema_version"], bool):
        raise _fail(
            "manifest.json",
            f"unknown schema_version {manifest['schema_version']!r} (this code reads {SCHEMA_VERSION})",
        )
    if not isinstance(manifest["round"], int) or isinstance(manifest["round"], bool) or manifest["round"] < 0:
        raise _fail("manifest.json", f"round must be an integer >= 0, got {manifest['round']!r}")
    if not isinstance(manifest["extra"], dict):
        raise _fail("manifest.json", "extra must be a JSON object")
    tables = manifest["tables"]
    if (
        not isinstance(tables, dict)
        or set(tables) != set(SCHEMA)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in tables.values())
    ):
        raise _fail("manifest.json", f"tables must map exactly {', '.join(SCHEMA)} to row counts")
    return manifest


def _check_file_list(manifest: dict[str, Any], max_files: int) -> dict[str, dict[str, Any]]:
    files = manifest["files"]
    if not isinstance(files, dict):
        raise _fail("manifest.json", "files must be a JSON object")
    if len(files) > max_files:
        raise _fail("manifest.json", f"lists {len(files)} files, more than max_files={max_files}")
    for rel, info in files.items():
        if not (
            isinstance(info, dict)
            and set(info) == {"bytes", "sha256"}
            and isinstance(info["bytes"], int)
            and not isinstance(info["bytes"], bool)
            and info["bytes"] >= 0
            and isinstance(info["sha256"], str)
            and _SHA256.fullmatch(info["sha256"])
        ):
            raise _fail("manifest.json", f"files[{rel!r}] must be {{'bytes': int, 'sha256': hex}}")
        if rel.startswith("programs/") and rel.endswith(".json"):
            try:
                check_program_id(rel[len("programs/") : -len(".json")])
            except ValueError as err:
                raise _fail("manifest.json", f"files: {rel!r}: {err}") from None
        elif rel not in {f"tables/{name}.parquet" for name in SCHEMA}:
            raise _fail("manifest.json", f"files: unexpected path {rel!r}")
    for name in SCHEMA:
        if f"tables/{name}.parquet" not in files:
            raise _fail("manifest.json", f"files: tables/{name}.parquet is not listed")
    return files


def _present_files(root: Path, limit: int) -> set[str]:
    """Relative paths of the files under `root` that belong to the snapshot (Hub extras skipped)."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != HUB_METADATA_DIR]
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise _fail((rel_dir / d).as_posix(), "unexpected symlinked directory in the snapshot")
        for f in filenames:
            rel = (rel_dir / f).as_posix()
            if rel_dir == Path(".") and (f in HUB_EXTRA_FILES or f == "manifest.json"):
                continue
            found.add(rel)
            if len(found) > limit:
                raise _fail(str(root), f"more than {limit} files")
    return found


def _read_verified(root: Path, rel: str, info: dict[str, Any], limit: int, limit_name: str) -> bytes:
    if info["bytes"] > limit:
        raise _fail(rel, f"{info['bytes']} bytes exceeds the limit {limit_name}={limit}")
    path = root / rel
    if not path.is_file():
        raise _fail(rel, "not a regular file")
    size = path.stat().st_size
    if size != info["bytes"]:
        raise _fail(
            rel,
            f"size mismatch: {size} bytes, manifest.json says {info['bytes']} (file changed or truncated)",
        )
    data = path.read_bytes()
    if len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise _fail(rel, "sha256 mismatch (file changed or truncated)")
    return data


def _parse_table(rel: str, name: str, data: bytes, n_rows: int) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        raise _fail(rel, f"not a readable Parquet file ({err})") from None
    want = arrow_schema(name)
    got = table.schema.remove_metadata()
    if not got.equals(want):
        raise _fail(rel, f"schema {got.to_string()!r} differs from the expected {want.to_string()!r}")
    if table.num_rows != n_rows:
        raise _fail(rel, f"{table.num_rows} rows, manifest.json says {n_rows}")
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        try:
            rows[i] = _make_row(name, r)
        except ValueError as err:
            raise _fail(rel, f"row {i}: {err}") from None
    return rows


def _parse_program(rel: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _fail(rel, f"invalid JSON ({err})") from None
    try:
        doc = _check_program(doc, canonical=False)
    except Exception as err:  # the program validator's own error types
        raise _fail(rel, f"invalid program ({err})") from None
    if f"programs/{doc['id']}.json" != rel:
        raise _fail(rel, f"id {doc['id']!r} does not match the file name")
    return doc


def load_snapshot(
    path: str | Path,
    *,
    max_table_bytes: int = MAX_TABLE_BYTES,
    max_files: int = MAX_FILES,
    max_program_bytes: int = MAX_PROGRAM_BYTES,
) -> Memory:
    """Read and verify a snapshot directory (or a Hub copy of one); raises `MemoryFormatError`."""
    root = Path(path)
    if not root.is_dir():
        raise _fail(str(root), "not a directory")
    manifest = _read_manifest(root)
    files = _check_file_list(manifest, max_files)
    present = _present_files(root, max_files)
    unexpected, missing = sorted(present - set(files)), sorted(set(files) - present)
    if unexpected:
        raise _fail(unexpected[0], "unexpected file (not listed in manifest.json)")
    if missing:
        raise _fail(missing[0], "missing (listed in manifest.json)")
    tables: dict[str, list[dict]] = {}
    for name in SCHEMA:
        rel = f"tables/{name}.parquet"
        data = _read_verified(root, rel, files[rel], max_table_bytes, "max_table_bytes")
        tables[name] = _parse_table(rel, name, data, manifest["tables"][name])
    programs: dict[str, dict] = {}
    for rel in sorted(r for r in files if r.startswith("programs/")):
        doc = _parse_program(
            rel, _read_verified(root, rel, files[rel], max_program_bytes, "max_program_bytes")
        )
        programs[doc["id"]] = doc
    try:
        return Memory._from_rows(tables, programs)
    except ValueError as err:
        raise _fail("tables", str(err)) from None


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The checked manifest of a snapshot (no file verification; see `load_snapshot`)."""
    return _read_manifest(Path(path))


# -- inspection ----------------------------------------------------------------------------------------------
def resolve_snapshot(path: str | Path) -> Path:
    """A snapshot directory from a snapshot, a run directory or its ``memory/`` folder (latest round)."""
    path = Path(path)
    if (path / "manifest.json").is_file():
        return path
    latest = latest_snapshot(path)
    if latest is None:
        raise MemoryFormatError(
            f"{path}: no memory snapshot here (expected manifest.json or memory/round-NNNN/)"
        )
    return latest


def inspect(path: str | Path) -> dict[str, Any]:
    """Verified summary of a snapshot (counts overall and per family); `path` as in `resolve_snapshot`."""
    snap = resolve_snapshot(path)
    manifest = _read_manifest(snap)
    return {
        "path": str(snap),
        "round": manifest["round"],
        **summarize(load_snapshot(snap)),
        "extra": manifest["extra"],
    }


def summarize(mem: Memory) -> dict[str, Any]:
    """Counts overall and per family of an in-memory `Memory` (what `inspect` reports for a snapshot)."""
    scenes, diags, modes = mem.rows("scenes"), mem.rows("diagnoses"), mem.rows("modes")
    programs = mem.programs()
    families = sorted(
        {r["family"] for t in ("scenes", "rollouts", "diagnoses", "modes") for r in mem.rows(t)}
    )
    per_family = {
        f: {
            "scenes": sum(r["family"] == f for r in scenes),
            "rollouts": sum(r["family"] == f for r in mem.rows("rollouts")),
            "diagnoses": sum(r["family"] == f for r in diags),
            "rejected_diagnoses": sum(r["family"] == f and r["status"] == "rejected" for r in diags),
            "modes": sum(r["family"] == f for r in modes),
            "validated_modes": sum(r["family"] == f and r["status"] == "validated" for r in modes),
        }
        for f in families
    }
    return {
        "scenes": len(scenes),
        "rollouts": len(mem.rows("rollouts")),
        "diagnoses": len(diags),
        "rejected_diagnoses": sum(r["status"] == "rejected" for r in diags),
        "modes": len(modes),
        "validated_modes": sum(r["status"] == "validated" for r in modes),
        "rejected_modes": sum(r["status"] == "rejected" for r in modes),
        "generation_programs": sum(d["kind"] == "generation" for d in programs.values()),
        "training_programs": sum(d["kind"] == "training" for d in programs.values()),
        "scenes_without_lineage": len(mem.scenes_without_lineage()),
        "families": per_family,
    }


__all__ = [
    "SCHEMA",
    "DifficultyMode",
    "Memory",
    "MemoryFormatError",
    "arrow_schema",
    "in_band",
    "inspect",
    "latest_snapshot",
    "load_snapshot",
    "read_manifest",
    "resolve_snapshot",
    "save_snapshot",
    "snapshot_path",
    "summarize",
]
