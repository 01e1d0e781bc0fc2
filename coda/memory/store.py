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

Snapshots. `save_snapshot` (here) writes ``tables/<name>.parquet`` (explicit Arrow schema, rows in a canonical
order), ``programs/<id>.json`` (sorted keys), ``tables/programs.parquet`` (the programs as one table, sorted
by id), ``manifest.json`` (row counts, sha256 and size of every file) and a dataset card ``README.md``
(`coda.memory.card`: a snapshot is a self-describing Hugging Face dataset) into a temporary sibling directory and renames it into place, so a crash never leaves a partial
snapshot; two equal memories give byte-identical snapshots. `load_snapshot` trusts nothing it reads: it
checks the manifest's keys and version, the exact file set, every size and sha256, table schemas and row
values, and program documents, with size limits; files are parsed as Parquet and JSON, never unpickled. Any
problem raises `MemoryFormatError` naming the file and field. A run keeps one snapshot per round under
``<run_dir>/memory/round-0003/`` (`snapshot_path`, `latest_snapshot`), and records in its manifest's
``extra["provenance"]`` what wrote it, taken at write time (`snapshot_provenance`: the git SHA, whether
tracked files under ``coda/`` or ``params.yaml`` had uncommitted changes, the profile and the resolved
parameters with their sha256); `coda.maintenance` compares results without it.

Where things live (all re-exported here): the tables' schema and row checks in `coda.memory.schema`,
`Memory` in `coda.memory.shared_memory`, difficulty modes in `coda.memory.modes`, reading and verifying snapshots
in `coda.memory.snapshots`, `summarize` / `inspect` in `coda.memory.counts`; this module writes snapshots.

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

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coda.memory.card import PROVENANCE_KEY, dataset_card
from coda.memory.counts import inspect, summarize
from coda.memory.modes import (  # noqa: F401  (re-exported API)
    FAST_ALPHA,
    SIMILARITY_THRESHOLD,
    SLOW_ALPHA,
    SUCCESS_BAND,
    DifficultyMode,
    Encoder,
    in_band,
)
from coda.memory.schema import (  # noqa: F401  (re-exported API)
    DIAGNOSIS_STATUS,
    ENUMS,
    GENERATED_SPLITS,
    MODE_STATUS,
    NULLABLE,
    PROGRAM_KINDS,
    SCHEMA,
    SORT_KEYS,
    SPLITS,
    VALIDITY,
    arrow_schema,
    check_program_id,
    to_json,
)
from coda.memory.shared_memory import Memory
from coda.memory.snapshots import (  # noqa: F401  (re-exported API)
    FORMAT,
    HUB_EXTRA_FILES,
    HUB_METADATA_DIR,
    MANIFEST_KEYS,
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    MAX_PROGRAM_BYTES,
    MAX_TABLE_BYTES,
    PROGRAMS_FILE,
    PROGRAMS_SCHEMA,
    SCHEMA_VERSION,
    MemoryFormatError,
    latest_snapshot,
    load_snapshot,
    program_rows,
    read_manifest,
    resolve_snapshot,
    snapshot_path,
)

# -- provenance -----------------------------------------------------------------------------------------------
# what `git_dirty` looks at: the code and the parameters file, not the results a run writes into the checkout
DIRTY_PATHS = ("coda", "params.yaml")


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `git status` must not take the index lock of a checkout
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=60, env=env
    ).stdout.strip()


def code_state(root: str | Path | None = None) -> dict[str, Any]:
    """The git commit of the checkout holding the `coda` package (``git_sha``) and whether tracked files under
    `DIRTY_PATHS` differ from it (``git_dirty``); both None when the code is not in a git checkout."""
    root = Path(root) if root is not None else Path(__file__).resolve().parents[2]
    try:
        if Path(_git(root, "rev-parse", "--show-toplevel")).resolve() != root.resolve():
            return {"git_sha": None, "git_dirty": None}  # installed inside some other repository
        sha = _git(root, "rev-parse", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *DIRTY_PATHS)
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": None, "git_dirty": None}
    return {"git_sha": sha, "git_dirty": bool(changed)}


def snapshot_provenance(profile: str, params: Mapping[str, Any], root: str | Path | None = None) -> dict:
    """What wrote a snapshot, taken now (at write time): the code's `code_state` and the parameters (profile,
    the resolved ``params`` and ``params_sha256``, the sha256 of their canonical JSON). A run passes it to
    `save_snapshot` as ``extra[PROVENANCE_KEY]``; `coda.maintenance` leaves it out of result comparisons."""
    resolved = json.loads(json.dumps(dict(params), sort_keys=True, default=list, allow_nan=False))
    digest = hashlib.sha256(to_json(resolved).encode()).hexdigest()
    return {**code_state(root), "profile": profile, "params_sha256": digest, "params": resolved}


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
    return _parquet_bytes(pa.Table.from_pylist(memory.rows(name), schema=arrow_schema(name)))


def _parquet_bytes(table: pa.Table) -> bytes:
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
    ``overwrite=True`` (else FileExistsError). ``extra`` (JSON) goes into the manifest: a run's method, seed
    and profile, and under ``extra[PROVENANCE_KEY]`` the `snapshot_provenance` taken when it wrote the snapshot
    (git SHA, dirty flag, parameters), which the card shows as recorded.
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
        texts = {pid: _json_bytes(doc).decode() for pid, doc in memory.programs().items()}
        for pid, text in texts.items():
            put(f"programs/{pid}.json", text.encode())
        put(PROGRAMS_FILE, _parquet_bytes(pa.Table.from_pylist(program_rows(texts), schema=PROGRAMS_SCHEMA)))
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "round": int(round),
            "tables": {name: len(memory._rows[name]) for name in SCHEMA},
            "files": files,
            "extra": json.loads(to_json(dict(extra or {}))),
        }
        manifest_bytes = _json_bytes(manifest)
        _write_bytes(tmp / "manifest.json", manifest_bytes)
        _write_bytes(
            tmp / "README.md", dataset_card(manifest).encode()
        )  # not in the manifest: push rewrites it
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


__all__ = [
    "SCHEMA",
    "DifficultyMode",
    "Memory",
    "MemoryFormatError",
    "PROVENANCE_KEY",
    "arrow_schema",
    "code_state",
    "in_band",
    "inspect",
    "latest_snapshot",
    "load_snapshot",
    "read_manifest",
    "resolve_snapshot",
    "save_snapshot",
    "snapshot_path",
    "snapshot_provenance",
    "summarize",
]
