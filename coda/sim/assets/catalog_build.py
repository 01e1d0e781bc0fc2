"""`build_assets`: generate every asset and write catalog.json and the articulated URDFs (only files whose
bytes change are rewritten)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pybullet_data

from coda.sim.assets.articulated import _articulated_assets
from coda.sim.assets.catalog import CATALOG_SCHEMA, Catalog
from coda.sim.assets.rigid import _primitive_assets, _pybullet_object_assets, _random_urdf_assets


def _to_json(a) -> dict:
    d = {}
    for f in fields(a):
        if f.name.startswith("_"):
            continue
        v = getattr(a, f.name)
        d[f.name] = _listify(v)
    return d


def _listify(v):
    if isinstance(v, tuple):
        return [_listify(x) for x in v]
    return v


def _catalog_text(cat: Catalog, seed: int, excluded: list[dict]) -> str:
    dumps = lambda o: json.dumps(o, sort_keys=True, separators=(",", ":"), allow_nan=False)  # noqa: E731
    lines = [
        "{",
        '"articulated":[',
        ",\n".join(dumps(_to_json(a)) for a in cat.articulated),
        "],",
        f'"excluded":{dumps(excluded)},',
        '"rigid":[',
        ",\n".join(dumps(_to_json(a)) for a in cat.rigid),
        "],",
        f'"schema":{CATALOG_SCHEMA},',
        f'"seed":{int(seed)}',
        "}",
        "",
    ]
    return "\n".join(lines)


def build_assets(data_dir: Path, seed: int = 0) -> Catalog:
    """Build the catalog into `data_dir`/assets (catalog.json + articulated URDFs); deterministic in `seed`."""
    data_dir = Path(data_dir)
    pbd = Path(pybullet_data.getDataPath())
    rng = np.random.default_rng(seed)
    prim_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    art_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    rigid, excluded = _random_urdf_assets(pbd)
    rigid += _primitive_assets(prim_rng)
    rigid += _pybullet_object_assets(pbd)
    articulated, urdfs = _articulated_assets(art_rng)
    cat = Catalog(rigid=tuple(rigid), articulated=tuple(articulated))

    out = data_dir / "assets"
    art_dir = out / "articulated"
    art_dir.mkdir(parents=True, exist_ok=True)
    keep = set()
    for rel, text in urdfs.items():
        path = data_dir / rel
        keep.add(path.name)
        _write_if_changed(path, text)
    for stale in art_dir.glob("*.urdf"):
        if stale.name not in keep:
            stale.unlink()
    _write_if_changed(out / "catalog.json", _catalog_text(cat, seed, excluded))
    return cat


def _write_if_changed(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
