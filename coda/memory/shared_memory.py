"""`Memory`: the shared heterogeneous memory of CoDA (§3.2) as six tables of rows and the programs.

Rows are checked against `coda.memory.schema.SCHEMA` on insertion; programs are validated JSON documents
keyed by their content id. Difficulty-mode bookkeeping (`assign_mode`, `update_mode`, ...) comes from
`coda.memory.modes.ModeTable`; snapshots are written by `coda.memory.store.save_snapshot` and read by
`coda.memory.snapshots.load_snapshot`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from coda.memory.modes import SIMILARITY_THRESHOLD, Encoder, ModeTable
from coda.memory.schema import (
    GENERATED_SPLITS,
    SCHEMA,
    arrow_schema,
    check_program,
    coerce,
    make_row,
    sort_key,
    to_json,
)

# pandas takes ~0.5 s to import and only `Memory.table` returns it (pyarrow's to_pandas imports it then)
if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Memory"]


class Memory(ModeTable):
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
        row = make_row(
            "scenes",
            dict(
                scene_hash=scene_hash,
                family=family,
                round=round,
                split=split,
                program_id=program_id,
                base_hash=base_hash,
                spec_json=to_json(spec_json),
                validity=validity,
                repairs=repairs,
                trace_json=to_json(trace if trace is not None else []),
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
        row = make_row(
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
        row = make_row(
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
                evidence_json=to_json(evidence if evidence is not None else {}),
                mode_id=None,
                status=status,
                truth_factor=truth_factor,
            ),
        )
        self._diagnoses[diagnosis_id] = row
        self._rows["diagnoses"].append(row)
        return diagnosis_id

    def set_diagnosis_status(self, diagnosis_id: str, status: str) -> None:
        self._diagnosis(diagnosis_id)["status"] = coerce("diagnoses", "status", status)

    def add_program(self, doc: Mapping[str, Any]) -> str:
        """Store a program document (generation or training); returns its id.

        The id is ``doc["id"]``, or with `coda.memory.programs` present, that of the validated canonical form.
        """
        doc = check_program(doc)
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
            make_row(
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

    # -- reading ---------------------------------------------------------------------------------------
    def rows(self, name: str) -> list[dict[str, Any]]:
        """Copies of a table's rows in canonical order."""
        if name not in SCHEMA:
            raise KeyError(f"unknown table {name!r}; tables are {', '.join(SCHEMA)}")
        return [dict(r) for r in sorted(self._rows[name], key=lambda r: sort_key(name, r))]

    def table(self, name: str) -> pd.DataFrame:
        """A table as a DataFrame (schema columns, canonical row order)."""
        return pa.Table.from_pylist(self.rows(name), schema=arrow_schema(name)).to_pandas()

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
