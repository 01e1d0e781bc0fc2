"""Field checks shared by the program schemas (`coda.memory.programs`, `coda.memory.libero_programs`).

Programs are JSON documents; these helpers check that a document holds only bounded JSON values, parse
single fields into their canonical form, and derive a program's content id. Every error is a
`ProgramError` naming the offending field (``operations[0].range[1]``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from coda.errors import ProgramError

__all__ = [
    "ProgramError",
    "by_kind",
    "check_document",
    "check_json",
    "check_keys",
    "content_id",
    "parse_integer",
    "parse_interval",
    "parse_number",
    "parse_pair",
    "parse_string",
]

VERSION = 1
MAX_DOC_CHARS = 16_000  # serialised size limit of a program (LLM output, memory pulled from the Hub)
MAX_DEPTH = 10
MAX_STRING = 256
NUM_BOUND = 100.0  # no number in a program may exceed this magnitude (values are clamped anyway)


def check_json(value: Any, path: str = "", depth: int = 0) -> int:
    """Only JSON types, bounded depth and string length; returns the number of nodes."""
    where = path or "program"
    if depth > MAX_DEPTH:
        raise ProgramError(where, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        n = 1
        for k, v in value.items():
            if not isinstance(k, str):
                raise ProgramError(where, f"object keys must be strings, got {k!r}")
            n += check_json(v, f"{path}.{k}" if path else k, depth + 1)
        return n
    if isinstance(value, list | tuple):
        return 1 + sum(check_json(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    if isinstance(value, str):
        if len(value) > MAX_DOC_CHARS:
            raise ProgramError(where, "string too long")
        return 1
    if value is None or isinstance(value, bool | int):
        return 1
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProgramError(where, f"expected a finite number, got {value!r}")
        return 1
    raise ProgramError(where, f"not a JSON value: {type(value).__name__}")


def check_document(doc: Any, kind: str) -> Mapping[str, Any]:
    """A JSON object within the size limits whose ``kind`` and ``version`` (when given) are the expected."""
    if not isinstance(doc, Mapping):
        raise ProgramError("program", f"expected a JSON object, got {type(doc).__name__}")
    check_json(doc)
    if len(json.dumps(doc, default=str)) > MAX_DOC_CHARS:
        raise ProgramError("program", f"larger than {MAX_DOC_CHARS} characters")
    if doc.get("kind", kind) != kind:
        raise ProgramError("kind", f"expected {kind!r}, got {doc.get('kind')!r}")
    version = doc.get("version", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise ProgramError("version", f"unsupported version {version!r}; this code reads {VERSION}")
    return doc


def check_keys(
    path: str, d: Any, allowed: set[str] | tuple[str, ...], required: tuple[str, ...] = ()
) -> Mapping:
    if not isinstance(d, Mapping):
        raise ProgramError(path, f"expected an object, got {type(d).__name__}")
    for key in d:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            raise ProgramError(where, f"unknown field; allowed: {sorted(allowed)}")
    for key in required:
        if key not in d:
            raise ProgramError(f"{path}.{key}" if path else key, "missing required field")
    return d


def parse_string(path: str, value: Any, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > MAX_STRING:
        raise ProgramError(path, f"expected a string of at most {MAX_STRING} characters, got {value!r}")
    return value


def parse_number(path: str, value: Any, lo: float = -NUM_BOUND, hi: float = NUM_BOUND) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProgramError(path, f"expected a finite number, got {value!r}")
    if not lo <= value <= hi:
        raise ProgramError(path, f"expected a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def parse_integer(path: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProgramError(path, f"expected an integer in {lo}..{hi}, got {value!r}")
    return int(value)


def parse_pair(path: str, value: Any, item) -> list:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ProgramError(path, f"expected a list of 2 items, got {value!r}")
    return [item(f"{path}[{k}]", v) for k, v in enumerate(value)]


def parse_interval(path: str, value: Any, item) -> list:
    lo, hi = parse_pair(path, value, item)
    if lo > hi:
        raise ProgramError(path, f"expected [lo, hi] with lo <= hi, got {value!r}")
    return [lo, hi]


def content_id(canonical: Mapping[str, Any]) -> str:
    """``gp-`` (generation) or ``tp-`` (training) + the first 12 hex digits of the sha256 of the canonical
    JSON without ``id`` (sorted keys, no spaces)."""
    body = {k: v for k, v in canonical.items() if k != "id"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    prefix = "gp-" if canonical["kind"] == "generation" else "tp-"
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:12]


def by_kind(doc: Any, generation: Callable[[Any], dict], training: Callable[[Any], dict]) -> dict[str, Any]:
    """``generation(doc)`` or ``training(doc)`` by the document's ``kind`` (which must be one of the two)."""
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    if kind == "generation":
        return generation(doc)
    if kind == "training":
        return training(doc)
    raise ProgramError("kind", f"expected 'generation' or 'training', got {kind!r}")
