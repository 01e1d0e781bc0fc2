"""What differs between the committed and a re-made version of a result (`coda verify`): which files, and
where the first one first differs — the JSON key path, the table, row and column of a memory snapshot's Parquet
table, the CSV line and column, or the text line — with both values, in a few lines.

Files are equal by `coda.maintenance.same_result` (the rules of `coda compare --bytes`: timings and git provenance
aside); the finders below only explain a difference, on the same documents (JSON records without
`VOLATILE_KEYS`, snapshot manifests and cards without the provenance they record: `comparable_json`).

    >>> next(json_differences({"id_success": 0.52, "n": 4}, {"id_success": 0.5, "n": 4}))
    ('id_success', 0.52, 0.5)
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coda.maintenance import (
    card_without_provenance,
    comparable_json,
    same_result,
    snapshot_file,
    unmatched_keyframes,
)

ABSENT = type("Absent", (), {"__repr__": lambda self: "(absent)"})()
RANK = {"metrics.json": 0, "rounds.json": 1, "train_log.csv": 2, "run.json": 3}  # the numbers first
Difference = tuple[str, Any, Any]  # where, committed value, re-run value


# -- finders ----------------------------------------------------------------------------------
def _equal(a: Any, b: Any) -> bool:
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or a == b


def json_differences(a: Any, b: Any, where: str = "") -> Iterator[Difference]:
    """The differing leaves of two JSON documents, as (key path, a's value, b's value), in a's key order."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            sub = f"{where}.{k}" if where else str(k)
            if k in a and k in b:
                yield from json_differences(a[k], b[k], sub)
            else:
                yield sub, a.get(k, ABSENT), b.get(k, ABSENT)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from json_differences(x, y, f"{where}[{i}]")
        if len(a) != len(b):
            yield f"{where} (length)", len(a), len(b)
    elif not _equal(a, b):
        yield where or "(the document)", a, b


def table_differences(a, b, name: str = "table") -> Iterator[Difference]:
    """The differing cells of two Arrow tables, row by row (rows named by their first two columns)."""
    cols = a.schema.names
    if cols != b.schema.names:
        yield f"{name} columns", cols, b.schema.names
        return
    ra, rb = a.to_pylist(), b.to_pylist()
    for i, (x, y) in enumerate(zip(ra, rb)):
        for c in cols:
            if not _equal(x[c], y[c]):
                key = ", ".join(f"{k}={x[k]}" for k in cols[:2])
                yield f"table {name}, row {i} ({key}), column {c}", x[c], y[c]
    if len(ra) != len(rb):
        yield f"table {name}, number of rows", len(ra), len(rb)


def csv_differences(a: str, b: str) -> Iterator[Difference]:
    """The differing cells of two CSV texts, as (line (first three fields), column)."""
    ra, rb = list(csv.reader(io.StringIO(a))), list(csv.reader(io.StringIO(b)))
    head = ra[0] if ra else []
    for i, (x, y) in enumerate(zip(ra, rb)):
        for j in range(max(len(x), len(y))):
            u, v = (x[j] if j < len(x) else ABSENT), (y[j] if j < len(y) else ABSENT)
            if u != v:
                key = ", ".join(f"{h}={s}" for h, s in zip(head[:3], x[:3])) if i else "the header"
                yield f"line {i + 1} ({key}), column {head[j] if j < len(head) else j + 1}", u, v
    if len(ra) != len(rb):
        yield "number of lines", len(ra), len(rb)


def differences(name: str, a: bytes, b: bytes) -> Iterator[Difference]:
    """What differs between two versions of file `name`, by its kind (JSON, Parquet, CSV, text); nothing
    when it cannot be read as such (then only its bytes differ)."""
    try:
        if name.endswith((".json", ".ipynb")):
            ja, jb = (comparable_json(name, json.loads(x)) for x in (a, b))
            yield from json_differences(ja, jb)
        elif name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            ta, tb = (pq.read_table(pa.BufferReader(x)) for x in (a, b))
            yield from table_differences(ta, tb, Path(name).stem)
        elif name.endswith(".csv"):
            yield from csv_differences(a.decode(), b.decode())
        else:
            ta, tb = a.decode(), b.decode()
            if snapshot_file(name) == "README.md":
                ta, tb = card_without_provenance(ta), card_without_provenance(tb)
            la, lb = ta.splitlines(), tb.splitlines()
            yield from ((f"line {i + 1}", x, y) for i, (x, y) in enumerate(zip(la, lb)) if x != y)
            if len(la) != len(lb):
                yield "number of lines", len(la), len(lb)
    except (ValueError, UnicodeDecodeError, OSError):  # pyarrow's errors are ValueErrors or OSErrors
        return


def _show(value: Any, width: int = 100) -> str:
    text = repr(value) if value is ABSENT else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def explain(name: str, a: bytes | None, b: bytes | None) -> list[str]:
    """A few lines: where file `name` first differs between the committed (`a`) and re-run (`b`) versions."""
    if a is None or b is None:
        return ["  only in the re-run" if a is None else "  committed, but the re-run did not write it"]
    found, more = None, 0
    for d in differences(name, a, b):
        if found is None:
            found = d
        else:
            more += 1
            if more >= 9999:
                break
    if found is None:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return [f"  bytes differ from byte {at} ({len(a)} bytes committed, {len(b)} re-run)"]
    where, x, y = found
    lines = [f"  at:        {where}", f"  committed: {_show(x)}", f"  re-run:    {_show(y)}"]
    return lines + (
        [f"  and {more}{'+' if more >= 9999 else ''} more differing values in this file"] if more else []
    )


def _order(name: str) -> tuple:
    """Files in the order a reader checks them: per record, its metrics, per-round metrics, training log and
    settings, then its memory snapshots by round (tables, programs, then manifests and cards)."""
    parts = name.split("/")
    if "memory" in parts[:-1]:
        i = parts.index("memory")
        return ("/".join(parts[:i]), 1, parts[i + 1], {"tables": 0, "programs": 1}.get(parts[-2], 2), name)
    return ("/".join(parts[:-1]), 0, "", RANK.get(parts[-1], 4), name)


def compare(pairs: list[tuple[str, Path, Path]]) -> tuple[int, list[str], dict[str, tuple]]:
    """Compare (shown name, committed path, re-run path) pairs of files or folders: the number of files, the
    differing ones (in `_order`) and, per file, its (committed, re-run) paths (None where absent)."""
    files: dict[str, list] = {}
    for shown, *bases in pairs:
        for side, base in enumerate(bases):
            found = {"": base} if base.is_file() else {}
            if base.is_dir():
                found = {p.relative_to(base).as_posix(): p for p in base.rglob("*") if p.is_file()}
            for rel, p in found.items():
                files.setdefault(f"{shown}/{rel}" if rel else shown, [None, None])[side] = p
    drop = unmatched_keyframes({n for n, v in files.items() if v[0]}, {n for n, v in files.items() if v[1]})
    files = {n: v for n, v in files.items() if n not in drop}
    different = [
        n
        for n, (a, b) in files.items()
        if a is None or b is None or not same_result(n, a.read_bytes(), b.read_bytes())
    ]
    return len(files), sorted(different, key=_order), {n: tuple(v) for n, v in files.items()}


def report(total: int, different: list[str], files: dict[str, tuple]) -> list[str]:
    """The verdict in at most a dozen lines."""
    if not different:
        return [f"identical: all {total} files equal the committed ones (timings and git provenance aside)"]
    first = different[0]
    a, b = (p.read_bytes() if p else None for p in files[first])
    lines = [f"different: {len(different)} of {total} files differ (timings and git provenance aside)"]
    lines += [f"first difference: {first}", *explain(first, a, b)]
    settings = next((n for n in different[1:] if n.endswith("run.json") and all(files[n])), None)
    if settings:  # the settings a record was made with (and the numerics in force) explain the rest
        where, x, y = next(differences(settings, *(p.read_bytes() for p in files[settings])), ("?", "?", "?"))
        lines.append(
            f"settings differ too: {settings} at {where}: committed {_show(x, 60)}, re-run {_show(y, 60)}"
        )
    if len(different) > 1:
        rest = different[1:5] + ([f"and {len(different) - 5} more"] if len(different) > 5 else [])
        lines.append("also different: " + ", ".join(rest))
    return lines
