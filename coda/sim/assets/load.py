"""`load_catalog`: read catalog.json and validate every entry, with errors that name the entry and field."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pybullet_data

from coda.sim.assets.catalog import (
    CATALOG_SCHEMA,
    JOINT_TYPES,
    MAX_HULL_VERTICES,
    RIGID_SOURCES,
    SHAPES,
    ArticulatedAsset,
    Catalog,
    RigidAsset,
)


def _err(aid, fname, msg) -> ValueError:
    return ValueError(f"catalog entry {aid!r}: field {fname!r}: {msg}")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _vec(aid, fname, v, n=None, positive=False, nonneg=False) -> tuple:
    if not isinstance(v, list) or (n is not None and len(v) != n) or not all(_num(x) for x in v):
        raise _err(
            aid, fname, f"expected a list of {n if n is not None else 'some'} finite numbers, got {v!r}"
        )
    if positive and not all(x > 0 for x in v):
        raise _err(aid, fname, f"values must be > 0, got {v!r}")
    if nonneg and not all(x >= 0 for x in v):
        raise _err(aid, fname, f"values must be >= 0, got {v!r}")
    return tuple(float(x) for x in v)


def _relpath(aid, fname, v) -> str:
    if not isinstance(v, str) or not v or v.startswith(("/", "\\")) or ".." in Path(v).parts or ":" in v:
        raise _err(aid, fname, f"expected a relative path, got {v!r}")
    return v


def _check_keys(aid, d: dict, cls) -> None:
    expected = {f.name for f in fields(cls) if not f.name.startswith("_")}
    missing, extra = expected - set(d), set(d) - expected
    if missing:
        raise _err(aid, sorted(missing)[0], "missing")
    if extra:
        raise _err(aid, sorted(extra)[0], "unknown field")


def _parse_rigid(d) -> RigidAsset:
    aid = d.get("asset_id") if isinstance(d, dict) else None
    if not isinstance(d, dict) or not isinstance(aid, str) or not aid:
        raise ValueError(f"catalog rigid entry {d!r:.80}: field 'asset_id': missing or not a string")
    _check_keys(aid, d, RigidAsset)
    src = d["source"]
    if src not in RIGID_SOURCES:
        raise _err(aid, "source", f"unknown source {src!r}")
    if not isinstance(d["category"], str) or not d["category"]:
        raise _err(aid, "category", "expected a non-empty string")
    shape = d["shape"]
    if shape not in SHAPES:
        raise _err(aid, "shape", f"unknown shape {shape!r}")
    dims = _vec(
        aid, "dims", d["dims"], {"hull": 0, "box": 3, "cylinder": 2, "sphere": 1}[shape], positive=True
    )
    half = _vec(aid, "half_extents", d["half_extents"], 3, positive=True)
    hv = d["hull_vertices"]
    if not isinstance(hv, list):
        raise _err(aid, "hull_vertices", "expected a list")
    verts = tuple(_vec(aid, "hull_vertices", v, 3) for v in hv)
    if shape == "hull":
        if not 4 <= len(verts) <= MAX_HULL_VERTICES:
            raise _err(aid, "hull_vertices", f"expected 4..{MAX_HULL_VERTICES} vertices, got {len(verts)}")
        arr = np.asarray(verts)
        if np.any(np.abs(arr) > np.asarray(half) + 2e-5):
            raise _err(aid, "hull_vertices", "vertices exceed half_extents")
    elif verts:
        raise _err(aid, "hull_vertices", f"must be empty for shape {shape!r}")
    vm = d["visual_mesh"]
    if vm is not None:
        vm = _relpath(aid, "visual_mesh", vm)
        if not (Path(pybullet_data.getDataPath()) / vm).is_file():
            raise _err(aid, "visual_mesh", f"{vm!r} not found in pybullet_data")
    elif src != "primitive":
        raise _err(aid, "visual_mesh", "required for mesh sources")
    vs = d["visual_mesh_scale"]
    if not _num(vs) or vs <= 0:
        raise _err(aid, "visual_mesh_scale", f"expected a positive number, got {vs!r}")
    off = _vec(aid, "visual_offset", d["visual_offset"], 3)
    m = d["default_mass"]
    if not _num(m) or m <= 0:
        raise _err(aid, "default_mass", f"expected a positive number, got {m!r}")
    q = _vec(aid, "visual_orientation", d["visual_orientation"], 4)
    if abs(math.sqrt(sum(x * x for x in q)) - 1.0) > 1e-5:
        raise _err(aid, "visual_orientation", f"expected a unit quaternion, got {list(q)!r}")
    return RigidAsset(aid, src, d["category"], shape, dims, verts, half, vm, float(vs), off, float(m), q)


def _parse_articulated(d, data_dir: Path) -> ArticulatedAsset:
    aid = d.get("asset_id") if isinstance(d, dict) else None
    if not isinstance(d, dict) or not isinstance(aid, str) or not aid:
        raise ValueError(f"catalog articulated entry {d!r:.80}: field 'asset_id': missing or not a string")
    _check_keys(aid, d, ArticulatedAsset)
    if not isinstance(d["category"], str) or not d["category"]:
        raise _err(aid, "category", "expected a non-empty string")
    urdf = _relpath(aid, "urdf", d["urdf"])
    if not (data_dir / urdf).is_file():
        raise _err(aid, "urdf", f"file {urdf!r} not found under {data_dir}")
    jt = d["joint_type"]
    if jt not in JOINT_TYPES:
        raise _err(aid, "joint_type", f"unknown joint type {jt!r}")
    n = d["n_movable"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _err(aid, "n_movable", f"expected a positive integer, got {n!r}")
    names = {}
    for fname in ("movable_joints", "handle_links"):
        v = d[fname]
        if not isinstance(v, list) or len(v) != n or not all(isinstance(x, str) and x for x in v):
            raise _err(aid, fname, f"expected {n} non-empty names, got {v!r}")
        names[fname] = tuple(v)
    lims = d["joint_limits"]
    if not isinstance(lims, list) or len(lims) != n:
        raise _err(aid, "joint_limits", f"expected {n} (lower, upper) pairs")
    limits = tuple(_vec(aid, "joint_limits", x, 2) for x in lims)
    if any(lo >= hi for lo, hi in limits):
        raise _err(aid, "joint_limits", "lower must be < upper")
    hl = d["handle_local"]
    if not isinstance(hl, list) or len(hl) != n:
        raise _err(aid, "handle_local", f"expected {n} points")
    local = tuple(_vec(aid, "handle_local", x, 3) for x in hl)
    foot = _vec(aid, "footprint", d["footprint"], 3, positive=True)
    return ArticulatedAsset(
        aid, d["category"], urdf, jt, n, names["movable_joints"], names["handle_links"], limits, local, foot
    )


def load_catalog(data_dir: Path) -> Catalog:
    """Load and validate `data_dir`/assets/catalog.json (raises ValueError naming entry and field)."""
    data_dir = Path(data_dir)
    path = data_dir / "assets" / "catalog.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; build it with coda.sim.assets.build_assets")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    if doc.get("schema") != CATALOG_SCHEMA:
        raise ValueError(f"{path}: field 'schema': expected {CATALOG_SCHEMA}, got {doc.get('schema')!r}")
    for key in ("rigid", "articulated"):
        if not isinstance(doc.get(key), list):
            raise ValueError(f"{path}: field {key!r}: expected a list")
    rigid = tuple(_parse_rigid(d) for d in doc["rigid"])
    articulated = tuple(_parse_articulated(d, data_dir) for d in doc["articulated"])
    try:
        return Catalog(rigid=rigid, articulated=articulated)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
