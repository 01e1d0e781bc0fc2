"""Shared memory: difficulty modes, learning progress, lineage, and verified, atomic, byte-stable snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coda.memory import counts, modes, schema, shared_memory, snapshots, store
from coda.memory.store import (
    SCHEMA,
    Memory,
    MemoryFormatError,
    in_band,
    inspect,
    latest_snapshot,
    load_snapshot,
    save_snapshot,
    snapshot_path,
)

CAUSES = {
    "the cube slips out of the fingers": [1.0, 0.0, 0.0],
    "the cube slips from the fingers while lifting": [0.95, 0.31, 0.0],  # cosine 0.95 with the first
    "the gripper collides with the bowl rim": [0.0, 0.0, 1.0],
    "the cube is too heavy to lift": [0.6, 0.8, 0.0],  # cosine 0.6 with the first
}


class CountingEncoder:
    """Deterministic embeddings of the test causes; counts the texts it was asked to embed."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += texts
        return np.array([CAUSES[t] for t in texts])


def program(kind: str, k: int) -> dict:
    """A valid program document (canonicalised by coda.memory.programs when that module exists)."""
    if kind == "generation":
        doc = {
            "kind": "generation",
            "family": "pick_place",
            "operations": [
                {"op": "sample", "role": "target", "attribute": "mass", "range": [0.1 + 0.01 * k, 0.9]}
            ],
        }
    else:
        doc = {
            "kind": "training",
            "family": "pick_place",
            "potential": {"family": "pick_place", "variant": "bin", "potential": "zero", "subgoals": []},
            "tools": {"planner_demos": k},
        }
    try:
        from coda.memory.programs import validate_program
    except ImportError:
        return {**doc, "id": f"{kind[0]}p-test{k}"}
    return validate_program(doc)


def build_memory(reverse: bool = False) -> Memory:
    """A small memory with every table filled; ``reverse`` inserts the same rows in another order."""
    mem = Memory(encoder=CountingEncoder())
    gen = mem.add_program(program("generation", 0))
    mem.add_program(program("training", 1))
    rows = [
        ("seed0", 0, "seed", None, None),
        ("t1", 1, "targeted", gen, "seed0"),
        ("c1", 1, "control", gen, "seed0"),
        ("t2", 2, "targeted", gen, "t1"),
    ]
    for h, r, split, pid, base in reversed(rows) if reverse else rows:
        mem.add_scene(
            h, "pick_place", r, split, {"h": h}, program_id=pid, base_hash=base, trace=[{"op": "x"}]
        )
    order = [("t1", "r1"), ("c1", "r2"), ("t2", "r3")]
    for h, rid in reversed(order) if reverse else order:
        mem.add_rollout(h, "pick_place", 1, "targeted", h == "c1", 3, 50, 200, rollout_id=rid)
    d1 = mem.add_diagnosis(
        "r1",
        "t1",
        "pick_place",
        1,
        "default",
        "lift",
        "mass",
        "the cube is too heavy to lift",
        0.8,
        diagnosis_id="d1",
        truth_factor="mass",
    )
    d2 = mem.add_diagnosis(
        "r3",
        "t2",
        "pick_place",
        1,
        "default",
        "grasp",
        "scale",
        "the cube slips out of the fingers",
        0.5,
        diagnosis_id="d2",
    )
    m1, m2 = mem.assign_mode(d1), mem.assign_mode(d2)
    mem.set_mode_status(m1, "validated", validation={"targeted": 0.25, "control": 0.75})
    mem.set_mode_status(m2, "rejected", validation={"targeted": 0.7, "control": 0.7})
    mem.set_mode_programs(m1, generation_program_id=gen)
    for i, s in enumerate([0.25, 0.5]):
        mem.update_mode(m1, s, 16, 100 * (i + 1), 1, control_success=0.75, n_control=16)
    mem.add_program_stats(gen, 1, 200, 0.1, 0.5, 16)
    return mem


def test_rows_are_checked_against_the_schema():
    mem = Memory()
    with pytest.raises(ValueError, match="scenes.split"):
        mem.add_scene("h", "pick_place", 0, "bogus", "{}")
    with pytest.raises(ValueError, match="rollouts.steps"):
        mem.add_rollout("h", "pick_place", 0, "seed", True, 1, 2.5, 0)
    with pytest.raises(ValueError, match="diagnoses.confidence"):
        mem.add_diagnosis("r", "h", "pick_place", 0, "v", "grasp", "scale", "c", float("nan"))
    mem.add_scene("h", "pick_place", 0, "seed", "{}")
    mem.add_scene("h", "pick_place", 0, "seed", "{}")  # the same row again: a no-op
    with pytest.raises(ValueError, match="different values"):
        mem.add_scene("h", "pick_place", 0, "seed", '{"x": 1}')
    assert len(mem.table("scenes")) == 1 and list(mem.table("modes").columns) == list(SCHEMA["modes"])


def test_modes_cluster_by_factor_and_cause_similarity():
    enc = CountingEncoder()
    mem = Memory(encoder=enc)

    def diagnose(phase: str, factor: str, cause: str) -> str:
        d = mem.add_diagnosis("r", "h", "pick_place", 2, "default", phase, factor, cause, 0.9)
        return mem.assign_mode(d)

    first = diagnose("grasp", "scale", "the cube slips out of the fingers")
    assert first == "pick_place/grasp/scale/0"
    assert diagnose("grasp", "scale", "the cube slips from the fingers while lifting") == first  # cosine 0.95
    assert diagnose("grasp", "scale", "the gripper collides with the bowl rim") == "pick_place/grasp/scale/1"
    assert diagnose("grasp", "friction", "the cube slips out of the fingers") == "pick_place/grasp/friction/0"
    assert diagnose("lift", "scale", "the cube slips out of the fingers") == "pick_place/lift/scale/0"
    assert mem.mode(first).n_diagnoses == 2 and mem.mode(first).cause == "the cube slips out of the fingers"
    assert mem.table("diagnoses")["mode_id"].tolist()[:3] == [first, first, "pick_place/grasp/scale/1"]
    assert mem.assign_mode("d0002-000002") == "pick_place/grasp/scale/1"  # already assigned: unchanged
    assert len(enc.calls) == len(set(enc.calls))  # embeddings are cached per text
    # a cause at cosine 0.6 stays apart at the default threshold 0.8 and joins at 0.5
    row = {"family": "pick_place", "phase": "grasp", "factor": "scale", "round": 2}
    assert mem.assign_mode({**row, "cause": "the cube is too heavy to lift"}, threshold=0.5) == first
    assert mem.assign_mode({**row, "cause": "the cube is too heavy to lift"}) == "pick_place/grasp/scale/2"
    mem.set_mode_status(first, "retired")  # a mastered mode takes no new failures
    assert diagnose("grasp", "scale", "the cube slips out of the fingers") == "pick_place/grasp/scale/3"


def test_learning_progress_is_pooled_with_a_noise_floor_and_vanishes_when_flat():
    # pooled windows of >= 8 rollouts each, newest first; 0 below the floor
    assert modes.learning_progress([]) == 0.0 and modes.learning_progress([(1.0, 7), (0.0, 7)]) == 0.0
    assert modes.learning_progress([(0.0, 8), (1.0, 8)]) == 1.0
    assert (
        modes.learning_progress([(0.0, 4), (0.0, 4), (0.5, 4), (0.5, 4)]) == 0.5
    )  # 3-4 rollouts each: pooled
    assert modes.learning_progress([(0.0, 4), (0.25, 4), (0.5, 4), (0.75, 4)]) == 0.5
    mem = Memory(encoder=CountingEncoder())
    ids = [
        mem.assign_mode({"family": "push", "phase": "push", "factor": f, "cause": c, "round": 0})
        for f, c in [
            ("mass", "the cube slips out of the fingers"),
            ("friction", "the cube is too heavy to lift"),
        ]
    ]
    for m in ids:
        mem.set_mode_status(m, "validated")
    mode = mem.update_mode(ids[0], 0.1, 16, 0, 1)
    assert mode.learning_progress == 0.0 and mode.hardness == pytest.approx(0.9)
    lp = []
    for step, s in enumerate([0.3, 0.5, 0.7] + [0.7] * 30):
        lp.append(mem.update_mode(ids[0], s, 16, 100 * (step + 1), 1).learning_progress)
    assert lp[:3] == pytest.approx([0.2, 0.2, 0.2])  # success keeps changing: progress
    assert lp[3:] == [0.0] * 30  # flat: none
    # a few rollouts per measurement: no progress until both windows hold 8
    assert [mem.update_mode(ids[1], s, 3, 100 * k, 1).learning_progress for k, s in enumerate([0, 0, 1])] == [
        0.0
    ] * 3
    mode = mem.mode(ids[0])
    assert mode.hardness == pytest.approx(1 - mode.success_fast) and mode.n_updates_seen == 34
    # importance: learning progress normalised over the family's validated modes
    for k in range(4):
        mem.update_mode(ids[1], 1.0, 3, 400 + 100 * k, 1)
    imp = {m.mode_id: m.importance for m in mem.modes(status="validated")}
    assert sum(imp.values()) == pytest.approx(1.0) and imp[ids[1]] > imp[ids[0]]
    mem.set_mode_status(ids[1], "retired")
    assert mem.mode(ids[1]).importance == 0.0 and mem.mode(ids[0]).importance == pytest.approx(1.0)
    stats = mem.table("mode_stats")
    assert len(stats) == 41 and stats[stats.mode_id == ids[0]]["in_band"].tolist()[:2] == [False, True]
    assert in_band(0.2) and in_band(0.8) and not in_band(0.81)


def test_status_propagates_and_lineage_is_kept():
    mem = build_memory()
    diag = mem.table("diagnoses").set_index("diagnosis_id")["status"].to_dict()
    assert diag == {"d1": "validated", "d2": "rejected"}
    assert [r["scene_hash"] for r in mem.lineage("t2")] == ["t2", "t1", "seed0"]
    assert mem.scenes_without_lineage() == []
    mem.add_scene("orphan", "pick_place", 3, "transfer", "{}", program_id="gp-x")
    assert [r["scene_hash"] for r in mem.scenes_without_lineage()] == ["orphan"]
    with pytest.raises(ValueError, match="generation program"):
        mem.set_mode_programs(
            "pick_place/lift/mass/0", training_program_id=mem.modes("validated")[0].generation_program_id
        )


def test_snapshot_round_trip_is_byte_identical(tmp_path):
    mem = build_memory()
    a = save_snapshot(mem, tmp_path / "a", round=2, extra={"git_sha": "abc", "params": {"seed": 0}})
    loaded = load_snapshot(a)
    assert loaded == mem and loaded.programs() == mem.programs()
    b = save_snapshot(loaded, tmp_path / "b", round=2, extra={"git_sha": "abc", "params": {"seed": 0}})
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert {"manifest.json", "tables/modes.parquet"} <= set(files)
    manifest = json.loads((a / "manifest.json").read_text())
    assert sorted(manifest) == ["extra", "files", "format", "round", "schema_version", "tables"]
    assert manifest["tables"]["scenes"] == 4 and manifest["round"] == 2
    table = pq.read_table(a / "tables" / "scenes.parquet")
    assert table.schema.metadata is None or b"pandas" not in table.schema.metadata
    # the loaded memory keeps working: its modes carry on
    assert loaded.update_mode("pick_place/lift/mass/0", 0.75, 16, 300, 2).n_updates_seen == 3


def test_identical_memories_give_identical_snapshots(tmp_path):
    a = save_snapshot(build_memory(), tmp_path / "a", round=1)
    b = save_snapshot(build_memory(reverse=True), tmp_path / "b", round=1)  # same rows, other insertion order
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    digest = hashlib.sha256((a / "tables" / "scenes.parquet").read_bytes()).hexdigest()
    assert json.loads((a / "manifest.json").read_text())["files"]["tables/scenes.parquet"]["sha256"] == digest


def test_existing_snapshots_are_not_silently_replaced(tmp_path):
    mem = build_memory()
    path = save_snapshot(mem, tmp_path / "s", round=1)
    assert save_snapshot(mem, path, round=1) == path  # identical: a no-op
    mem.add_scene("new", "pick_place", 1, "novel", "{}")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_snapshot(mem, path, round=1)
    save_snapshot(mem, path, round=1, overwrite=True)
    assert load_snapshot(path) == mem
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no temporary directories left


def _rewrite(snap, rel: str, data: bytes) -> None:
    """Replace a file and make the manifest agree, as a careful attacker would."""
    (snap / rel).write_bytes(data)
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest["files"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snap / "manifest.json").write_text(json.dumps(manifest))


def _edit_manifest(snap, edit) -> None:
    manifest = json.loads((snap / "manifest.json").read_text())
    edit(manifest)
    (snap / "manifest.json").write_text(json.dumps(manifest))


def _flip_byte(snap, rel: str) -> None:
    data = bytearray((snap / rel).read_bytes())
    data[len(data) // 2] ^= 0x01
    (snap / rel).write_bytes(bytes(data))


def _bad_schema_table(snap) -> None:
    rows = pq.read_table(snap / "tables" / "modes.parquet").drop_columns(["importance"])
    buf = pa.BufferOutputStream()
    pq.write_table(rows, buf)
    _rewrite(snap, "tables/modes.parquet", buf.getvalue().to_pybytes())


def _bad_enum_table(snap) -> None:
    table = pq.read_table(snap / "tables" / "scenes.parquet")
    splits = pa.array(["bogus"] * table.num_rows, pa.string())
    table = table.set_column(table.schema.get_field_index("split"), table.schema.field("split"), splits)
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    _rewrite(snap, "tables/scenes.parquet", buf.getvalue().to_pybytes())


def _program_rel(snap) -> str:
    return sorted(p.relative_to(snap).as_posix() for p in (snap / "programs").rglob("*.json"))[0]


CORRUPTIONS = {
    "flipped byte": (
        lambda s: _flip_byte(s, "tables/modes.parquet"),
        r"tables/modes\.parquet: sha256 mismatch",
    ),
    "truncated": (
        lambda s: (s / "tables/scenes.parquet").write_bytes((s / "tables/scenes.parquet").read_bytes()[:-9]),
        r"tables/scenes\.parquet: size mismatch.*truncated",
    ),
    "wrong sha": (
        lambda s: _edit_manifest(s, lambda m: m["files"]["tables/rollouts.parquet"].update(sha256="0" * 64)),
        r"tables/rollouts\.parquet: sha256 mismatch",
    ),
    "unknown schema_version": (
        lambda s: _edit_manifest(s, lambda m: m.update(schema_version=2)),
        r"manifest\.json: unknown schema_version 2",
    ),
    "unexpected file": (
        lambda s: (s / "tables" / "evil.pkl").write_bytes(b"x"),
        r"tables/evil\.pkl: unexpected file",
    ),
    "missing file": (
        lambda s: (s / "tables" / "diagnoses.parquet").unlink(),
        r"tables/diagnoses\.parquet: missing",
    ),
    "missing manifest": (lambda s: (s / "manifest.json").unlink(), r"manifest\.json: missing"),
    "manifest not JSON": (lambda s: (s / "manifest.json").write_text("{"), r"manifest\.json: invalid JSON"),
    "extra manifest key": (
        lambda s: _edit_manifest(s, lambda m: m.update(x=1)),
        r"manifest\.json:.*unexpected keys \['x'\]",
    ),
    "path outside": (
        lambda s: _edit_manifest(
            s, lambda m: m["files"].update({"../x.parquet": m["files"]["tables/modes.parquet"]})
        ),
        r"manifest\.json: files: unexpected path '\.\./x\.parquet'",
    ),
    "schema": (_bad_schema_table, r"tables/modes\.parquet: schema"),
    "enum": (_bad_enum_table, r"tables/scenes\.parquet: row 0: scenes\.split: 'bogus'"),
    "row count": (
        lambda s: _edit_manifest(s, lambda m: m["tables"].update(scenes=5)),
        r"tables/scenes\.parquet: 4 rows, manifest\.json says 5",
    ),
    "program": (
        lambda s: _rewrite(s, _program_rel(s), b'{"kind": "generation"}'),
        r"programs/.*\.json: invalid program",
    ),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupt_snapshots_are_rejected_naming_the_file(tmp_path, name):
    snap = save_snapshot(build_memory(), tmp_path / "s", round=1)
    corrupt, message = CORRUPTIONS[name]
    corrupt(snap)
    with pytest.raises(MemoryFormatError, match=message):
        load_snapshot(snap)


def test_size_limits(tmp_path):
    snap = save_snapshot(build_memory(), tmp_path / "s", round=1)
    with pytest.raises(
        MemoryFormatError, match=r"tables/scenes\.parquet: \d+ bytes exceeds the limit max_table_bytes=100"
    ):
        load_snapshot(snap, max_table_bytes=100)
    with pytest.raises(MemoryFormatError, match="max_files=1"):
        load_snapshot(snap, max_files=1)
    with pytest.raises(MemoryFormatError, match=r"programs/.*max_program_bytes=10"):
        load_snapshot(snap, max_program_bytes=10)


def test_hub_copy_extras_are_allowed(tmp_path):
    snap = save_snapshot(build_memory(), tmp_path / "s", round=1)
    (snap / "README.md").write_text("---\nlicense: mit\n---\n")
    (snap / ".gitattributes").write_text("*.parquet filter=lfs\n")
    (snap / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (snap / ".cache" / "huggingface" / "download" / "manifest.json.metadata").write_text("x")
    assert load_snapshot(snap) == build_memory()
    (snap / "tables" / "README.md").write_text("not at the root")
    with pytest.raises(MemoryFormatError, match=r"tables/README\.md: unexpected file"):
        load_snapshot(snap)


def test_crash_mid_save_leaves_the_previous_snapshot(tmp_path, monkeypatch):
    run = tmp_path / "run"
    first = save_snapshot(build_memory(), snapshot_path(run, 1), round=1)
    writes = []
    real_write = store._write_bytes

    def crashing_write(path, data):
        writes.append(path)
        if len(writes) == 4:
            raise OSError("disk full")
        real_write(path, data)

    monkeypatch.setattr(store, "_write_bytes", crashing_write)
    with pytest.raises(OSError, match="disk full"):
        save_snapshot(build_memory(), snapshot_path(run, 2), round=2)
    assert not snapshot_path(run, 2).exists() and latest_snapshot(run) == first
    monkeypatch.undo()
    # a process killed mid-save leaves its temporary directory: loaders ignore it, the next save removes it
    stale = run / "memory" / ".round-0002.tmp-999999999-abcd"
    (stale / "tables").mkdir(parents=True)
    (stale / "manifest.json").write_text("{}")
    assert latest_snapshot(run) == first
    second = save_snapshot(build_memory(), snapshot_path(run, 2), round=2)
    assert not stale.exists() and latest_snapshot(run) == second
    assert sorted(p.name for p in (run / "memory").iterdir()) == ["round-0001", "round-0002"]


def test_latest_snapshot_and_inspect(tmp_path):
    run = tmp_path / "run"
    assert latest_snapshot(run) is None
    for r in (1, 2, 10):
        save_snapshot(build_memory(), snapshot_path(run, r), round=r)
    (run / "memory" / "round-0011").mkdir()  # incomplete: no manifest
    assert latest_snapshot(run).name == "round-0010"
    summary = inspect(run)
    for key in (
        "modes",
        "validated_modes",
        "generation_programs",
        "training_programs",
        "rejected_diagnoses",
        "diagnoses",
        "scenes",
        "scenes_without_lineage",
        "round",
        "families",
    ):
        assert key in summary
    assert summary["round"] == 10 and summary["modes"] == 2 and summary["validated_modes"] == 1
    assert summary["rejected_diagnoses"] == 1 and summary["scenes"] == 4
    assert summary["generation_programs"] + summary["training_programs"] == 2
    assert summary["families"]["pick_place"]["diagnoses"] == 2
    assert inspect(snapshot_path(run, 2))["round"] == 2
    with pytest.raises(MemoryFormatError, match="no memory snapshot"):
        inspect(tmp_path / "nothing")


def test_cli_inspect(tmp_path, capsys):
    import argparse

    from coda.cli import UserError
    from coda.memory.commands import add_memory_commands, run_memory_command

    save_snapshot(build_memory(), snapshot_path(tmp_path / "run", 1), round=1)
    ap = argparse.ArgumentParser()
    add_memory_commands(ap.add_subparsers(dest="cmd"))
    assert run_memory_command(ap.parse_args(["memory", "inspect", str(tmp_path / "run"), "--json"])) == 0
    assert json.loads(capsys.readouterr().out)["validated_modes"] == 1
    run_memory_command(ap.parse_args(["memory", "inspect", str(tmp_path / "run")]))
    out = capsys.readouterr().out
    assert "modes 2 (1 validated)" in out and "pick_place" in out
    with pytest.raises(UserError, match="no memory snapshot"):
        run_memory_command(ap.parse_args(["memory", "inspect", str(tmp_path / "nowhere")]))


def test_loading_never_unpickles(tmp_path, monkeypatch):
    snap = save_snapshot(build_memory(), tmp_path / "s", round=1)

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used while loading a snapshot")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    assert load_snapshot(snap) == build_memory()
    for module in (store, snapshots, schema, shared_memory):
        assert "pickle" not in vars(module)


def test_snapshot_files_are_plain_after_save(tmp_path):
    snap = save_snapshot(build_memory(), tmp_path / "s", round=1)
    modes = pq.read_table(snap / "tables" / "modes.parquet").to_pylist()
    assert [m["mode_id"] for m in modes] == ["pick_place/grasp/scale/0", "pick_place/lift/mass/0"]
    assert all(os.stat(p).st_size > 0 for p in snap.rglob("*") if p.is_file())
    shutil.rmtree(snap / "programs")
    with pytest.raises(MemoryFormatError, match=r"programs/.*: missing"):
        load_snapshot(snap)


def test_store_keeps_the_import_paths_of_the_split_modules():
    assert store.Memory is shared_memory.Memory and store.DifficultyMode is modes.DifficultyMode
    assert store.SCHEMA is schema.SCHEMA and store.arrow_schema is schema.arrow_schema
    assert store.load_snapshot is snapshots.load_snapshot
    assert store.MemoryFormatError is snapshots.MemoryFormatError
    assert store.inspect is counts.inspect and store.summarize is counts.summarize
    assert store.in_band is modes.in_band and store.snapshot_path is snapshots.snapshot_path
    assert all(hasattr(store, name) for name in store.__all__)
