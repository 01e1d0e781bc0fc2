"""Chunk-level replay store for the critic: one transition per executed action chunk of a rollout.

Each transition holds the observation at the chunk start, the instruction, the chunk's actions padded to
(h, 7) with a validity mask, the sparse chunk reward (1 for the chunk in which the verifier first holds,
else 0), the Text2potential shaping term F, the observation at the chunk end, the dataset's next chunk (a
default candidate for bootstrapping), the number of control steps k, ``done``: the episode ended at
the chunk end, by the verifier's success or by the step limit, and the ``split`` of the environment the
rollout ran in (novel, targeted, control, replay, ...; `composition` counts the store by it). Rollouts are always judged under their step
limit, so running out of steps is a failure and ends the episode: no bootstrap past it.

Shaping: F = γ^k Φ(s_{t+k}) − Φ(s_t) (0 without a potential). A failed episode's final state is an
absorbing failure with Φ = 0, so its last chunk gets F = −Φ(s_t) and the shaped return of every episode is
its sparse return minus Φ(s_0) (plus the scaled verifier bonus of a success): shaping only moves reward in
time and leaves the optimal policy unchanged (see tests/test_text2potential.py).

The store has a fixed capacity (oldest transitions are overwritten first), samples with an explicit
`numpy.random.Generator`, and saves to ``replay.npz`` (plain arrays, read with ``allow_pickle=False``)
plus ``replay.json`` (configuration and counters).

Example:
    >>> store = ChunkReplay(capacity=10_000)
    >>> store.add_record(record, potential=compile_potential(fragment), gamma=0.99, split="novel")
    >>> batch = store.sample(64, np.random.default_rng(0))   # dict of arrays, batch["obs"]: (64, 50)
    >>> store.composition()   # {"chunks": {"novel": 9}, "episodes": {"novel": 1}}
    >>> store.save("runs/replay"); ChunkReplay.load("runs/replay")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from coda.sim.world import OBS_DIM

FORMAT_VERSION = 1
ACTION_DIM = 7
NUMERIC_FIELDS = (
    "obs",
    "actions",
    "mask",
    "reward",
    "shaping",
    "next_obs",
    "next_actions",
    "next_mask",
    "steps",
    "done",
    "success",
    "phi",
    "next_phi",
)
TEXT_FIELDS = ("instruction", "family", "scene_hash", "split")


class ChunkReplay:
    """Fixed-capacity ring buffer of chunk transitions built from `RolloutRecord`s."""

    def __init__(self, capacity: int, horizon: int = 8, obs_dim: int = OBS_DIM) -> None:
        if capacity < 1 or horizon < 1 or obs_dim < 1:
            raise ValueError(
                f"capacity, horizon and obs_dim must be >= 1, got {capacity}, {horizon}, {obs_dim}"
            )
        self.capacity, self.horizon, self.obs_dim = int(capacity), int(horizon), int(obs_dim)
        c, h = self.capacity, self.horizon
        self.data: dict[str, np.ndarray] = {
            "obs": np.zeros((c, obs_dim), np.float32),  # observation at the chunk start
            "actions": np.zeros((c, h, ACTION_DIM), np.float32),  # executed chunk, zero-padded
            "mask": np.zeros((c, h), bool),  # which of the h actions were executed
            "reward": np.zeros(c, np.float32),  # sparse verifier reward of the chunk
            "shaping": np.zeros(c, np.float32),  # F = γ^k Φ(s_{t+k}) − Φ(s_t)
            "next_obs": np.zeros((c, obs_dim), np.float32),  # observation at the chunk end
            "next_actions": np.zeros(
                (c, h, ACTION_DIM), np.float32
            ),  # the dataset's next chunk (bootstrap candidate)
            "next_mask": np.zeros((c, h), bool),
            "steps": np.zeros(c, np.int16),  # k: control steps executed in the chunk
            "done": np.zeros(c, bool),  # the episode ended at the chunk end (verifier success or step limit)
            "success": np.zeros(c, bool),  # the episode this chunk belongs to succeeded
            "phi": np.zeros(c, np.float32),  # Φ at the chunk start (0 without a potential)
            "next_phi": np.zeros(c, np.float32),  # Φ at the chunk end
        }
        self.text: dict[str, list[str]] = {k: [""] * c for k in TEXT_FIELDS}
        self.size = 0  # number of valid transitions
        self.cursor = 0  # next slot to write
        self.added = 0  # transitions ever added

    def __len__(self) -> int:
        return self.size

    # ----------------------------------------------------------------------------------------------
    def add_record(self, record, potential=None, gamma: float = 0.99, split: str = "") -> int:
        """Append every chunk of a rollout up to (and including) the verifier's first success; returns the
        number of transitions added. `potential` (a `coda.learn.text2potential.Potential`) supplies Φ;
        `split` names the kind of environment the rollout ran in (kept per transition)."""
        ends = [*record.chunk_starts, record.steps]
        if record.success_step is not None:  # success is absorbing: drop chunks a record kept after it
            if record.success_step == 0:
                return 0
            ends = ends[: next(i for i, e in enumerate(ends) if e >= record.success_step) + 1]
        n = len(ends) - 1
        if n <= 0:
            return 0
        if potential is not None:
            phi_all = potential.phi_along(record)
            if len(phi_all) < len(ends):
                raise ValueError("potential returned fewer endpoints than the record has chunks")
            phi = phi_all[: len(ends)]
        else:
            phi = np.zeros(len(ends))
        lengths = np.diff(ends)
        if (lengths > self.horizon).any() or (lengths < 1).any():
            raise ValueError(f"chunk lengths {lengths.tolist()} must lie in [1, {self.horizon}]")
        success = record.success_step is not None
        phi_end = phi[1:].copy()
        if not success:
            phi_end[-1] = 0.0  # the absorbing failure state
        shaping = gamma**lengths * phi_end - phi[:-1]
        for i in range(n):
            start, end = ends[i], ends[i + 1]
            last = i == n - 1
            row = {
                "obs": record.obs[start],
                "actions": self._pad(record.actions[start:end]),
                "mask": np.arange(self.horizon) < end - start,
                "reward": 1.0 if success and last else 0.0,
                "shaping": shaping[i],
                "next_obs": record.obs[end],
                "steps": end - start,
                "done": last,
                "success": success,
                "phi": phi[i],
                "next_phi": phi[i + 1],
                # the next executed chunk; after the last one, a placeholder that is never bootstrapped
                "next_actions": self._pad(record.actions[end : ends[i + 2]])
                if not last
                else self._pad(np.zeros((0, 7))),
                "next_mask": np.arange(self.horizon) < ends[i + 2] - end
                if not last
                else np.ones(self.horizon, bool),
            }
            self._write(
                row,
                {
                    "instruction": record.instruction,
                    "family": record.family,
                    "scene_hash": record.scene_hash,
                    "split": split,
                },
            )
        return n

    def _pad(self, actions: np.ndarray) -> np.ndarray:
        out = np.zeros((self.horizon, ACTION_DIM), np.float32)
        out[: len(actions)] = actions
        return out

    def _write(self, row: dict[str, Any], text: dict[str, str]) -> None:
        k = self.cursor
        for key, value in row.items():
            self.data[key][k] = value
        for key, value in text.items():
            self.text[key][k] = value
        self.cursor = (k + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.added += 1

    # ----------------------------------------------------------------------------------------------
    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, Any]:
        """`batch_size` transitions drawn uniformly with replacement; text fields come back as lists."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay store")
        return self.gather(rng.integers(0, self.size, size=batch_size))

    def gather(self, index: np.ndarray) -> dict[str, Any]:
        """The transitions at slots `index` (0 <= index < len(self))."""
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.size):
            raise IndexError(f"replay indices must lie in [0, {self.size})")
        out: dict[str, Any] = {k: v[index] for k, v in self.data.items()}
        for key, values in self.text.items():
            out[key] = [values[i] for i in index]
        return out

    def composition(self) -> dict[str, dict[str, int]]:
        """What the store holds now, by split: ``chunks`` (transitions) and ``episodes`` (episodes whose last
        chunk is still held); a split of "" is a transition added without one."""
        split = np.array(self.text["split"][: self.size], dtype=str)
        done = self.data["done"][: self.size]
        return {
            "chunks": _counts(split),
            "episodes": _counts(split[done]),
        }

    # ----------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``replay.npz`` (the valid slots, in slot order) and ``replay.json``; returns the directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {k: v[: self.size] for k, v in self.data.items()}
        for key, values in self.text.items():
            arrays[key] = np.array(values[: self.size], dtype=str)
        np.savez(directory / "replay.npz", **arrays)
        meta = {
            "format_version": FORMAT_VERSION,
            "capacity": self.capacity,
            "horizon": self.horizon,
            "obs_dim": self.obs_dim,
            "size": self.size,
            "cursor": self.cursor,
            "added": self.added,
        }
        (directory / "replay.json").write_text(json.dumps(meta, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> ChunkReplay:
        directory = Path(directory)
        meta = json.loads((directory / "replay.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: unsupported replay format {meta.get('format_version')!r}")
        store = cls(meta["capacity"], meta["horizon"], meta["obs_dim"])
        with np.load(directory / "replay.npz", allow_pickle=False) as arrays:
            size = int(meta["size"])
            for key in NUMERIC_FIELDS:
                store.data[key][:size] = arrays[key]
            for key in TEXT_FIELDS:
                if key in arrays:  # a checkpoint written before the field existed keeps it blank
                    store.text[key][:size] = [str(s) for s in arrays[key]]
        store.size, store.cursor, store.added = size, int(meta["cursor"]), int(meta["added"])
        return store


def _counts(values: np.ndarray) -> dict[str, int]:
    keys, counts = np.unique(values, return_counts=True)
    return {str(k): int(n) for k, n in zip(keys, counts)}
