"""The snapshot format of the memory, and reading it back: `load_snapshot` trusts nothing it reads.

A snapshot directory holds ``tables/<name>.parquet`` (explicit Arrow schema, rows in a canonical order),
``programs/<id>.json`` (sorted keys), ``tables/programs.parquet`` (the same program documents as one table,
`PROGRAMS_SCHEMA`, sorted by id; absent from snapshots written before it existed), ``manifest.json`` (row
counts, sha256 and size of every file) and a dataset card, ``README.md`` (`coda.memory.card`; not in the
manifest, as a Hub push rewrites it); `coda.memory.store.save_snapshot` writes it atomically. `load_snapshot` checks the manifest's keys and
version, the exact file set, every size and sha256, table schemas and row values, and program documents,
with size limits; files are parsed as Parquet and JSON, never unpickled. Any problem raises
`MemoryFormatError` naming the file and field; ``tables/programs.parquet``, when present, must agree with
``programs/*.json`` (same ids, same document text, consistent kind, mode and family). A run keeps one snapshot per round under
``<run_dir>/memory/round-0003/`` (`snapshot_path`, `latest_snapshot`, `resolve_snapshot`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coda.memory.schema import SCHEMA, arrow_schema, check_program, check_program_id, make_row
from coda.memory.shared_memory import Memory

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "PROGRAMS_FILE",
    "PROGRAMS_SCHEMA",
    "MemoryFormatError",
    "latest_snapshot",
    "load_snapshot",
    "program_rows",
    "read_manifest",
    "resolve_snapshot",
    "snapshot_path",
]

FORMAT = "coda-memory"
SCHEMA_VERSION = 1
MANIFEST_KEYS = ("extra", "files", "format", "round", "schema_version", "tables")
MAX_TABLE_BYTES = 64 * 2**20
MAX_PROGRAM_BYTES = 2**20
MAX_MANIFEST_BYTES = 16 * 2**20
MAX_FILES = 10_000
HUB_EXTRA_FILES = ("README.md", ".gitattributes")  # a Hub copy has these beside the snapshot
HUB_METADATA_DIR = ".cache"  # snapshot_download(local_dir=...) keeps its metadata here

PROGRAMS_FILE = "tables/programs.parquet"
# one row per program document, sorted by program_id; `document` is the text of programs/<id>.json
PROGRAMS_SCHEMA = pa.schema(
    [
        pa.field("program_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("mode_id", pa.string(), nullable=True),
        pa.field("family", pa.string(), nullable=True),
        pa.field("document", pa.string(), nullable=False),
    ]
)

_ROUND_DIR = re.compile(r"round-(\d+)")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class MemoryFormatError(ValueError):
    """A snapshot that is missing, corrupt, tampered with or of an unknown format; names file and field."""


def program_rows(documents: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of ``tables/programs.parquet`` from program id -> canonical JSON text, sorted by id."""
    rows = []
    for pid in sorted(documents):
        doc = json.loads(documents[pid])
        mode, family = doc.get("mode"), doc.get("family")
        rows.append(
            {
                "program_id": pid,
                "kind": doc["kind"],
                "mode_id": mode if isinstance(mode, str) and mode else None,
                "family": family if isinstance(family, str) and family else None,
                "document": documents[pid],
            }
        )
    return rows


def snapshot_path(run_dir: str | Path, round: int) -> Path:
    """Where a run keeps its round-``round`` snapshot: ``run_dir/memory/round-0003``."""
    return Path(run_dir) / "memory" / f"round-{round:04d}"


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
        elif rel != PROGRAMS_FILE and rel not in {f"tables/{name}.parquet" for name in SCHEMA}:
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


# _ARROW_THREADS: tables are read on the calling thread. Arrow's CPU pool would decode a few kB no faster, and its
# workers can abort the interpreter at exit ("terminate called without an active exception", apache/arrow#34314):
# seen once in CI, after `coda memory pull` had printed its result.


def _parse_table(rel: str, name: str, data: bytes, n_rows: int) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(pa.BufferReader(data), use_threads=False)  # see _ARROW_THREADS
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
            rows[i] = make_row(name, r)
        except ValueError as err:
            raise _fail(rel, f"row {i}: {err}") from None
    return rows


def _parse_program(rel: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _fail(rel, f"invalid JSON ({err})") from None
    try:
        doc = check_program(doc, canonical=False)
    except Exception as err:  # the program validator's own error types
        raise _fail(rel, f"invalid program ({err})") from None
    if f"programs/{doc['id']}.json" != rel:
        raise _fail(rel, f"id {doc['id']!r} does not match the file name")
    return doc


def _check_programs_table(data: bytes, documents: dict[str, str]) -> None:
    """``tables/programs.parquet`` must hold exactly the rows `program_rows` derives from programs/*.json."""
    rel = PROGRAMS_FILE
    try:
        table = pq.read_table(pa.BufferReader(data), use_threads=False)  # see _ARROW_THREADS
    except (pa.ArrowException, OSError, ValueError) as err:
        raise _fail(rel, f"not a readable Parquet file ({err})") from None
    got = table.schema.remove_metadata()
    if not got.equals(PROGRAMS_SCHEMA):
        raise _fail(
            rel, f"schema {got.to_string()!r} differs from the expected {PROGRAMS_SCHEMA.to_string()!r}"
        )
    rows, want = table.to_pylist(), program_rows(documents)
    ids, want_ids = [r["program_id"] for r in rows], [r["program_id"] for r in want]
    if ids != want_ids:
        extra, missing = sorted(set(ids) - set(want_ids)), sorted(set(want_ids) - set(ids))
        raise _fail(
            rel,
            f"program_id: rows {extra} have no programs/<id>.json, programs {missing} have no row"
            if extra or missing
            else "program_id: rows are not sorted by program_id (or repeat one)",
        )
    for i, (row, expected) in enumerate(zip(rows, want, strict=True)):
        for col in PROGRAMS_SCHEMA.names:
            if row[col] != expected[col]:
                raise _fail(rel, f"row {i}: {col} differs from programs/{expected['program_id']}.json")


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
    texts: dict[str, str] = {}
    for rel in sorted(r for r in files if r.startswith("programs/")):
        data = _read_verified(root, rel, files[rel], max_program_bytes, "max_program_bytes")
        doc = _parse_program(rel, data)
        try:
            texts[doc["id"]] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(rel, "not UTF-8 text") from None
        programs[doc["id"]] = doc
    if PROGRAMS_FILE in files:  # snapshots written before it existed lack it
        data = _read_verified(root, PROGRAMS_FILE, files[PROGRAMS_FILE], max_table_bytes, "max_table_bytes")
        _check_programs_table(data, texts)
    try:
        return Memory._from_rows(tables, programs)
    except ValueError as err:
        raise _fail("tables", str(err)) from None


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The checked manifest of a snapshot (no file verification; see `load_snapshot`)."""
    return _read_manifest(Path(path))


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
