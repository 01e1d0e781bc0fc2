"""Difficulty modes (§3.2): recurring failures of one (family, phase, factor) with a similar cause.

`ModeTable.assign_mode` puts a diagnosis into the mode of the same (family, phase, factor) whose
representative cause (the cause of the mode's first diagnosis) has a sentence-embedding cosine similarity
>= ``similarity_threshold`` (0.8) with the diagnosis' cause, else opens a new mode ``family/phase/factor/k``.
`ModeTable.update_mode` records a measured success rate of a mode's targeted environments and updates two
exponential moving averages of it, one per measurement: fast (α = 0.5) and slow (α = 0.1).
``hardness = 1 − fast EMA``. ``learning_progress`` is the absolute learning progress of teacher-student
curriculum learning (large while success is changing, in either direction; 0 while it is flat), measured
from pooled counts with a noise floor (`learning_progress`): the success of the latest measurements pooled
until they hold ``LP_MIN_ROLLOUTS`` rollouts against that of the measurements before them, pooled alike; 0
until both windows hold that many. ``importance`` is learning progress normalised to sum to 1 over the
family's validated modes (proportionally; uniform while all are 0; 0 for modes that are not validated).

`ModeTable` is the part of `coda.memory.shared_memory.Memory` that keeps the ``modes`` and ``mode_stats`` tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coda.memory.schema import coerce, make_row, to_json

__all__ = [
    "FAST_ALPHA",
    "SIMILARITY_THRESHOLD",
    "SLOW_ALPHA",
    "LP_MIN_ROLLOUTS",
    "SUCCESS_BAND",
    "DifficultyMode",
    "Encoder",
    "ModeTable",
    "in_band",
    "learning_progress",
    "mode_index",
]

FAST_ALPHA = 0.5  # EMA step of the fast success estimate, per measurement
SLOW_ALPHA = 0.1  # EMA step of the slow success estimate, per measurement
SIMILARITY_THRESHOLD = 0.8
SUCCESS_BAND = (0.2, 0.8)
# noise floor of learning progress: a success rate pooled over fewer rollouts has a standard error of up to
# 0.5 / sqrt(n) > 0.18, about as large as the progress it would measure
LP_MIN_ROLLOUTS = 8

Encoder = Callable[[list[str]], Any]  # list of n texts -> (n, d) embeddings (torch tensor or array)


def in_band(success: float, band: tuple[float, float] = SUCCESS_BAND) -> bool:
    """Whether a success rate lies in the (inclusive) success band: failing often, yet learnable."""
    return band[0] <= success <= band[1]


def learning_progress(measurements: Sequence[tuple[float, int]]) -> float:
    """|recent − earlier| success from pooled counts. `measurements` are (success rate, rollouts), oldest
    first. The latest ones are pooled until they hold ``LP_MIN_ROLLOUTS`` rollouts (the recent window), the
    ones before them likewise (the earlier window); 0 while either window holds fewer.

    Example:
        >>> learning_progress([(0.0, 4), (0.25, 4), (0.5, 4), (0.75, 4)])
        0.5
    """
    rest = list(reversed(measurements))
    windows = []
    for _ in range(2):
        successes = trials = used = 0
        for rate, n in rest:
            successes, trials, used = successes + rate * n, trials + n, used + 1
            if trials >= LP_MIN_ROLLOUTS:
                break
        if trials < LP_MIN_ROLLOUTS:
            return 0.0
        windows.append(successes / trials)
        rest = rest[used:]
    return round(abs(windows[0] - windows[1]), 6)


def mode_index(mode_id: str) -> int:
    return int(mode_id.rsplit("/", 1)[1])


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


class ModeTable:
    """Difficulty-mode bookkeeping of `Memory`: clustering diagnoses into modes, their success statistics
    (hardness, learning progress, importance), status and compiled programs. It reads the rest of the
    memory through `Memory.rows`, `Memory._diagnosis` and `Memory._program`."""

    encoder: Encoder | None
    similarity_threshold: float
    _rows: dict[str, list[dict[str, Any]]]
    _modes: dict[str, dict[str, Any]]
    _diagnoses: dict[str, dict[str, Any]]
    _embeddings: dict[str, np.ndarray]
    _embedding_encoder: Any

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
        same_key = sorted((m for m in self._modes if m.startswith(prefix)), key=mode_index)
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
        row = make_row(
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

        Updates the fast and slow EMAs (the first measurement initialises both) and hardness, appends a
        ``mode_stats`` row, then updates learning progress (`learning_progress` of the mode's ``mode_stats``
        rows) and the importance of every validated mode of the family.
        """
        mode = self._mode(mode_id)
        success = coerce("mode_stats", "targeted_success", success)
        if mode["success_fast"] is None:
            fast = slow = success
        else:
            fast = mode["success_fast"] + FAST_ALPHA * (success - mode["success_fast"])
            slow = mode["success_slow"] + SLOW_ALPHA * (success - mode["success_slow"])
        mode.update(
            success_fast=fast,
            success_slow=slow,
            hardness=1.0 - fast,
            n_updates_seen=mode["n_updates_seen"] + 1,
        )
        self._rows["mode_stats"].append(
            make_row(
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
        rows = sorted(
            (r for r in self._rows["mode_stats"] if r["mode_id"] == mode_id),
            key=lambda r: (r["round"], r["policy_updates"]),
        )  # oldest first (one measurement per round)
        history = [(r["targeted_success"], r["n_targeted"]) for r in rows]
        mode["learning_progress"] = learning_progress(history)
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
        mode["status"] = coerce("modes", "status", status)
        if validation is not None:
            mode["validation_json"] = to_json(dict(validation))
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

    def mode(self, mode_id: str) -> DifficultyMode:
        return DifficultyMode(**self._mode(mode_id))

    def modes(self, status: str | None = None, family: str | None = None) -> list[DifficultyMode]:
        """Difficulty modes sorted by id, optionally only those of one status and/or family."""
        return [
            DifficultyMode(**m)
            for m in self.rows("modes")
            if (status is None or m["status"] == status) and (family is None or m["family"] == family)
        ]

    def _mode(self, mode_id: str) -> dict[str, Any]:
        if mode_id not in self._modes:
            raise KeyError(f"unknown difficulty mode {mode_id!r}")
        return self._modes[mode_id]


def _default_encoder() -> Encoder:
    # imported lazily: loading the sentence encoder takes a second and sets HF_HUB_OFFLINE for the process
    from coda.learn.text import get_encoder

    return get_encoder().encode
