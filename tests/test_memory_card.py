"""Every snapshot is a self-describing Hugging Face dataset: its README.md card, and tables/programs.parquet."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from huggingface_hub import DatasetCard

from coda.memory import card as card_module
from coda.memory import hub
from coda.memory.card import COLUMN_DESCRIPTIONS, TABLE_DESCRIPTIONS, dataset_card
from coda.memory.store import (
    PROGRAMS_FILE,
    PROGRAMS_SCHEMA,
    SCHEMA,
    MemoryFormatError,
    load_snapshot,
    read_manifest,
    save_snapshot,
)
from tests.test_memory import build_memory

ROOT = Path(__file__).resolve().parent.parent
EXTRA = {"method": "coda", "seed": 3, "profile": "smoke"}


def _snap(tmp_path, name="s", memory=None):
    return save_snapshot(memory or build_memory(), tmp_path / name, round=2, extra=EXTRA)


def _front(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_card_is_written_and_parses_as_a_dataset_card(tmp_path):
    snap = _snap(tmp_path)
    text = (snap / "README.md").read_text()
    card = DatasetCard(text)
    data = card.data.to_dict()
    assert data["task_categories"] == ["robotics"] and "robotics" in data["tags"]
    assert data["pretty_name"] and "round 2" in data["pretty_name"]
    configs = data["configs"]
    assert [c["config_name"] for c in configs] == [*SCHEMA, "programs"]
    assert [c["config_name"] for c in configs if c.get("default")] == ["modes"]
    for c in configs:
        assert (snap / c["data_files"]).is_file()
    assert DatasetCard.load(snap / "README.md").data.to_dict() == data
    assert _front(text) == data
    assert text == dataset_card(read_manifest(snap))  # a pure function of the manifest
    for value in EXTRA.values():
        assert json.dumps(value) in text
    assert "arXiv:2610.22362" in text and "CoDA: Co-Evolution" in text.replace("{CoDA}", "CoDA")
    assert "pd.read_parquet" in text and "datasets.load_dataset" in text and "load_snapshot" in text
    manifest = read_manifest(snap)
    for name in SCHEMA:
        assert f"| `{name}` | {manifest['tables'][name]} |" in text
    assert "| `programs` | 2 |" in text
    assert "README.md" not in manifest["files"]


def test_card_license_matches_the_license_file(tmp_path):
    text = (_snap(tmp_path) / "README.md").read_text()
    license_file = (ROOT / "LICENSE").read_text()
    assert license_file.splitlines()[0] == "MIT License"
    assert "Copyright (c) 2026 the CoDA reproduction authors" in license_file
    assert DatasetCard(text).data.license == "mit" == license_file.split()[0].lower()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"


def test_every_column_has_a_description():
    assert set(TABLE_DESCRIPTIONS) == {*SCHEMA, "programs"}
    for name, cols in SCHEMA.items():
        assert list(COLUMN_DESCRIPTIONS[name]) == list(cols), name
    assert list(COLUMN_DESCRIPTIONS["programs"]) == PROGRAMS_SCHEMA.names
    assert all(d.strip() for cols in COLUMN_DESCRIPTIONS.values() for d in cols.values())


def test_hub_uses_the_card_module():
    assert hub.dataset_card is card_module.dataset_card and hub.TAGS is card_module.TAGS
    assert hub.LICENSE is card_module.LICENSE and hub.TABLE_DESCRIPTIONS is card_module.TABLE_DESCRIPTIONS


def test_equal_memories_give_byte_identical_snapshots_with_the_card(tmp_path):
    a = _snap(tmp_path, "a", build_memory())
    b = _snap(tmp_path, "b", build_memory(reverse=True))
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert {"README.md", PROGRAMS_FILE} <= set(files)
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_programs_table_round_trips(tmp_path):
    mem = build_memory()
    snap = _snap(tmp_path, memory=mem)
    rows = pq.read_table(snap / PROGRAMS_FILE).to_pylist()
    assert [r["program_id"] for r in rows] == sorted(mem.programs())
    for r in rows:
        assert r["document"] == (snap / "programs" / f"{r['program_id']}.json").read_text()
        doc = json.loads(r["document"])
        assert r["kind"] == doc["kind"] in ("generation", "training") and r["family"] == "pick_place"
        assert r["mode_id"] == (doc.get("mode") or None)
    manifest = read_manifest(snap)
    assert PROGRAMS_FILE in manifest["files"]
    loaded = load_snapshot(snap)
    assert loaded == mem and loaded.programs() == mem.programs()


def test_parquet_files_load_with_plain_pandas(tmp_path):
    snap = _snap(tmp_path)
    manifest = read_manifest(snap)
    for name in SCHEMA:
        df = pd.read_parquet(snap / "tables" / f"{name}.parquet")
        assert list(df.columns) == list(SCHEMA[name]) and len(df) == manifest["tables"][name]
    df = pd.read_parquet(snap / PROGRAMS_FILE)
    assert list(df.columns) == PROGRAMS_SCHEMA.names and len(df) == 2


def _rewrite_programs_table(snap: Path, edit) -> None:
    rows = pq.read_table(snap / PROGRAMS_FILE).to_pylist()
    edit(rows)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=PROGRAMS_SCHEMA), buf)
    data = buf.getvalue().to_pybytes()
    (snap / PROGRAMS_FILE).write_bytes(data)
    manifest = json.loads((snap / "manifest.json").read_text())

    manifest["files"][PROGRAMS_FILE] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snap / "manifest.json").write_text(json.dumps(manifest))


def _other_document(rows):
    rows[0]["document"] = rows[0]["document"].replace("\n", " ", 1)


def _other_kind(rows):
    rows[0]["kind"] = "training" if rows[0]["kind"] == "generation" else "generation"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_other_document, r"tables/programs\.parquet: row 0: document differs"),
        (_other_kind, r"tables/programs\.parquet: row 0: kind differs"),
        (lambda rows: rows.pop(), r"tables/programs\.parquet: program_id: .*have no row"),
        (lambda rows: rows.reverse(), r"tables/programs\.parquet: program_id: rows are not sorted"),
    ],
)
def test_tampered_programs_table_is_rejected(tmp_path, edit, message):
    snap = _snap(tmp_path)
    _rewrite_programs_table(snap, edit)
    with pytest.raises(MemoryFormatError, match=message):
        load_snapshot(snap)


def test_tampered_programs_table_without_manifest_update_fails_its_checksum(tmp_path):
    snap = _snap(tmp_path)
    (snap / PROGRAMS_FILE).write_bytes((snap / PROGRAMS_FILE).read_bytes()[:-1])
    with pytest.raises(MemoryFormatError, match=r"tables/programs\.parquet: size mismatch"):
        load_snapshot(snap)


def test_snapshots_without_programs_table_or_card_still_load(tmp_path):
    mem = build_memory()
    snap = _snap(tmp_path, memory=mem)
    (snap / PROGRAMS_FILE).unlink()
    (snap / "README.md").unlink()
    manifest = json.loads((snap / "manifest.json").read_text())
    del manifest["files"][PROGRAMS_FILE]
    (snap / "manifest.json").write_text(json.dumps(manifest))
    assert load_snapshot(snap) == mem
    configs = DatasetCard(dataset_card(read_manifest(snap))).data.to_dict()["configs"]
    assert "programs" not in [c["config_name"] for c in configs]  # only files that exist
    shutil.rmtree(snap / "programs")
    with pytest.raises(MemoryFormatError, match=r"programs/.*: missing"):
        load_snapshot(snap)


def test_datasets_load_dataset_reads_the_default_config_offline(tmp_path, monkeypatch):
    """`datasets.load_dataset(<snapshot dir>)` with no network: the card's default config (`modes`) loads with
    every row, and each other config loads its table."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snap = _snap(tmp_path)
    mem = load_snapshot(snap)
    default = datasets.load_dataset(str(snap), split="train", cache_dir=str(tmp_path / "cache"))
    assert default.num_rows == len(mem.rows("modes")) > 0
    assert set(default.column_names) == set(SCHEMA["modes"])
    scenes = datasets.load_dataset(str(snap), "scenes", split="train", cache_dir=str(tmp_path / "cache"))
    assert scenes.num_rows == len(mem.rows("scenes"))
    programs = datasets.load_dataset(str(snap), "programs", split="train", cache_dir=str(tmp_path / "cache"))
    assert sorted(programs["program_id"]) == sorted(mem.programs())
