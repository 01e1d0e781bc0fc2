"""Every snapshot is a self-describing Hugging Face dataset: its README.md card, and tables/programs.parquet."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from huggingface_hub import DatasetCard

from coda import maintenance
from coda.differences import compare, differences
from coda.maintenance import compare_runs
from coda.memory import card as card_module
from coda.memory import hub
from coda.memory import store as store_module
from coda.memory.card import COLUMN_DESCRIPTIONS, PROVENANCE_KEY, TABLE_DESCRIPTIONS, dataset_card
from coda.memory.store import (
    PROGRAMS_FILE,
    PROGRAMS_SCHEMA,
    SCHEMA,
    MemoryFormatError,
    code_state,
    load_snapshot,
    read_manifest,
    save_snapshot,
    snapshot_path,
    snapshot_provenance,
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


# -- provenance recorded at write time, and the card's loading example ---------------------------------------
PARAMS = {"coevolve": {"rounds": 5, "envs_per_family": 3, "curve_seeds": (0, 1)}}


def _git(root: Path, *args: str) -> str:
    cmd = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def _checkout(tmp_path: Path) -> Path:
    """A git checkout with coda/, params.yaml and another tracked file, all committed."""
    root = tmp_path / "checkout"
    (root / "coda").mkdir(parents=True)
    (root / "coda" / "x.py").write_text("x = 1\n")
    (root / "params.yaml").write_text("base: {}\n")
    (root / "notes.txt").write_text("notes\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "c")
    return root


def test_code_state_is_the_commit_and_whether_code_or_params_changed(tmp_path):
    root = _checkout(tmp_path)
    sha = _git(root, "rev-parse", "HEAD")
    assert code_state(root) == {"git_sha": sha, "git_dirty": False}
    (root / "notes.txt").write_text("other notes\n")  # not code, not params
    (root / "coda" / "new.py").write_text("")  # untracked
    assert code_state(root) == {"git_sha": sha, "git_dirty": False}
    (root / "params.yaml").write_text("base: {seed: 1}\n")
    assert code_state(root)["git_dirty"] is True
    _git(root, "checkout", "-q", "--", "params.yaml")
    (root / "coda" / "x.py").write_text("x = 2\n")
    assert code_state(root) == {"git_sha": sha, "git_dirty": True}
    (tmp_path / "plain").mkdir()
    assert code_state(tmp_path / "plain") == {"git_sha": None, "git_dirty": None}
    assert code_state(root / "coda") == {"git_sha": None, "git_dirty": None}  # inside another repository


def test_provenance_is_recorded_in_the_manifest_when_the_snapshot_is_written(tmp_path, monkeypatch):
    root = _checkout(tmp_path)
    prov = snapshot_provenance("smoke", PARAMS, root=root)
    snap = save_snapshot(
        build_memory(),
        tmp_path / "run" / "memory" / "round-0002",
        round=2,
        extra={**EXTRA, "provenance": prov},
    )
    recorded = read_manifest(snap)["extra"][PROVENANCE_KEY]
    assert recorded["git_sha"] == _git(root, "rev-parse", "HEAD") and recorded["git_dirty"] is False
    assert recorded["profile"] == "smoke"
    assert recorded["params"] == json.loads(json.dumps(PARAMS))  # tuples as lists
    canonical = json.dumps(recorded["params"], sort_keys=True, separators=(",", ":")).encode()
    assert recorded["params_sha256"] == hashlib.sha256(canonical).hexdigest()
    # the card shows what was recorded; rendering it later looks nothing up (the code changed meanwhile)
    (root / "coda" / "x.py").write_text("x = 3\n")
    assert snapshot_provenance("smoke", PARAMS, root=root)["git_dirty"] is True
    monkeypatch.setattr(store_module, "code_state", lambda *a, **k: pytest.fail("card recomputed provenance"))
    text = (snap / "README.md").read_text()
    assert text == dataset_card(read_manifest(snap))
    produced = text[text.index("## How it was produced") : text.index("## How to load it")]
    assert f'| `git_sha` | "{recorded["git_sha"]}" |' in produced
    assert "| `git_dirty` | false |" in produced
    assert f'| `params_sha256` | "{recorded["params_sha256"]}" |' in produced
    assert yaml.safe_load(produced.split("```yaml\n")[1].split("```")[0]) == recorded["params"]
    assert "No `extra.provenance` was recorded" not in produced


def test_a_card_without_recorded_provenance_says_so(tmp_path):
    text = (_snap(tmp_path) / "README.md").read_text()
    produced = text[text.index("## How it was produced") : text.index("## How to load it")]
    assert "No `extra.provenance` was recorded" in produced and "git_sha" not in produced


def _python_blocks(section: str) -> list[str]:
    return [block.split("```")[0] for block in section.split("```python\n")[1:]]


@pytest.mark.parametrize("round_", [1, 5])
def test_the_cards_loading_example_runs_against_its_snapshot(tmp_path, monkeypatch, round_):
    """The card's Python example, executed as written in the run directory (offline), loads this snapshot:
    it names the snapshot's own folder, and pandas, `datasets` and `load_snapshot` read the same rows."""
    datasets = pytest.importorskip("datasets")
    mem = build_memory()
    run = tmp_path / "run"
    snap = save_snapshot(mem, snapshot_path(run, round_), round=round_, extra=EXTRA)
    text = (snap / "README.md").read_text()
    section = text[text.index("## How to load it") : text.index("## License")]
    (code,) = _python_blocks(section)
    assert f'"memory/round-{round_:04d}"' in code and "round-0003" not in code.replace(f"{round_:04d}", "")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.chdir(run)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["memory"] == mem
    assert isinstance(scope["modes"], datasets.Dataset)
    assert scope["modes"].num_rows == len(mem.rows("modes")) > 0
    assert set(scope["modes"].column_names) == set(SCHEMA["modes"])


def test_the_hub_cards_example_names_the_repository_and_the_pulled_copy(tmp_path):
    manifest = read_manifest(_snap(tmp_path))
    text = dataset_card(manifest, repo_id="me/coda-memory")
    section = text[text.index("## How to load it") : text.index("## License")]
    (code,) = _python_blocks(section)
    compile(code, "README.md", "exec")  # valid Python
    assert 'pull_memory("me/coda-memory"' in code and 'load_dataset("me/coda-memory", "modes"' in code
    assert "load_snapshot(snapshot)" in code and "path/to" not in code


def _two_runs(tmp_path: Path, edit=None) -> tuple[Path, Path]:
    """Two run folders holding the same memory, written by different code (other commit, params, dirty)."""
    runs = []
    for name, sha, dirty in (("a", "1" * 40, False), ("b", "2" * 40, True)):
        mem = build_memory()
        if edit is not None and name == "b":
            edit(mem)
        prov = {
            "git_sha": sha,
            "git_dirty": dirty,
            "profile": "smoke",
            "params_sha256": sha[:8],
            "params": {},
        }
        save_snapshot(mem, snapshot_path(tmp_path / name, 2), round=2, extra={**EXTRA, "provenance": prov})
        runs.append(tmp_path / name)
    return runs[0], runs[1]


def test_snapshots_written_by_other_code_compare_identical_without_their_provenance(tmp_path):
    a, b = _two_runs(tmp_path)
    assert (a / "memory/round-0002/manifest.json").read_bytes() != (
        b / "memory/round-0002/manifest.json"
    ).read_bytes()
    assert (a / "memory/round-0002/README.md").read_bytes() != (
        b / "memory/round-0002/README.md"
    ).read_bytes()
    report = compare_runs(a, b)
    assert report["different"] == [] and report["identical"] == report["files"]
    # a snapshot written before snapshots recorded provenance (a committed record) equals a new one
    old = tmp_path / "old"
    save_snapshot(build_memory(), snapshot_path(old, 2), round=2, extra=EXTRA)
    assert compare_runs(a, old)["different"] == []
    total, different, _ = compare([("a", a, b)])
    assert total == report["files"] and different == []


def test_a_different_memory_still_differs_and_is_explained_without_provenance(tmp_path):
    a, b = _two_runs(
        tmp_path, edit=lambda mem: mem.add_scene("ffff", "pick_place", 2, "seed", spec_json="{}")
    )
    different = compare_runs(a, b)["different"]
    assert "memory/round-0002/manifest.json" in different
    assert "memory/round-0002/tables/scenes.parquet" in different
    assert "memory/round-0002/README.md" in different  # its row count of scenes
    name = "run/memory/round-0002/manifest.json"
    found = list(differences(name, *((d / "memory/round-0002/manifest.json").read_bytes() for d in (a, b))))
    assert found and all("provenance" not in where for where, _, _ in found)
    card = list(
        differences(
            "run/memory/round-0002/README.md",
            *((d / "memory/round-0002/README.md").read_bytes() for d in (a, b)),
        )
    )
    assert card and all("git_sha" not in str(x) + str(y) for _, x, y in card)
    # the provenance key is the one the comparisons leave out, and the card's sections are the ones it writes
    assert maintenance.SNAPSHOT_PROVENANCE == PROVENANCE_KEY
    text = (a / "memory/round-0002/README.md").read_text()
    assert all(f"\n{s}\n" in text for s in maintenance.CARD_VOLATILE_SECTIONS)
