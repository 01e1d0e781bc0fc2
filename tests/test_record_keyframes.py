"""Keyframes stored with a record (`coda record`: ``RECORD/keyframes/``) and the memory report of a record that
shows them. Fast: synthetic memories and files; the re-simulation of a real run is tested in
tests/test_memory_report.py (its tiny run)."""

import base64
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from coda.maintenance import compare_runs, record
from coda.memory.shared_memory import Memory
from coda.memory.store import save_snapshot
from coda.report.keyframes import INDEX, read_index, record_candidates
from coda.report.memory_report import FAILURES_PER_MODE, build_report, sorted_modes


def _memory(missing_scene_family: str | None = None) -> Memory:
    """Modes of three families: pick_place has three (the last validated), push and stack one each, and a
    LIBERO task one; every mode has four diagnoses. The scenes of `missing_scene_family` are not in memory."""
    mem = Memory(encoder=lambda texts: np.ones((len(texts), 4)) / 2.0)
    plan = [("pick_place", "mass"), ("pick_place", "friction"), ("pick_place", "yaw"), ("push", "mass")]
    plan += [("stack", "mass"), ("libero_object_task0", "mass")]
    for k, (family, factor) in enumerate(plan):
        scene = f"{family}-{factor}"
        if family != missing_scene_family:
            mem.add_scene(scene, family, 1, "novel", {"family": family})
        for i in range(4):
            rid = mem.add_rollout(scene, family, 1, "novel", False, 0, 10, 0)
            did = mem.add_diagnosis(rid, scene, family, 1, "v", "reach", factor, f"{factor} {i}", 0.5)
            mode = mem.assign_mode(did)
        if k == 2:
            mem.set_mode_status(mode, "validated")
    return mem


def test_the_record_tries_one_failure_per_mode_family_by_family():
    """Modes in the report's order taken family by family in turn (the validated pick_place mode, then push's
    and stack's, then pick_place's others), each with the diagnoses the report lists for it; a mode whose
    scenes are not in memory and a LIBERO task's mode are left out; the limit cuts the list."""
    mem = _memory()
    order = [m.mode_id for m in sorted_modes(mem)]
    assert mem.modes("validated")[0].mode_id == order[0]
    assert any(m.family == "libero_object_task0" for m in mem.modes())
    got = record_candidates(mem)
    families = [m.family for m, _ in got]
    assert families == ["pick_place", "push", "stack", "pick_place", "pick_place"]
    assert [m.mode_id for m, _ in got if m.family == "pick_place"] == [
        m for m in order if m.startswith("pick_place")
    ]
    for m, diagnoses in got:
        listed = [d for d in mem.rows("diagnoses") if d["mode_id"] == m.mode_id][:FAILURES_PER_MODE]
        assert diagnoses == listed and len(diagnoses) == FAILURES_PER_MODE
    assert [m.mode_id for m, _ in record_candidates(mem, limit=2)] == [m.mode_id for m, _ in got[:2]]
    assert record_candidates(mem, per_mode=0) == []
    without_stack = record_candidates(_memory(missing_scene_family="stack"))
    assert [m.family for m, _ in without_stack] == ["pick_place", "push", "pick_place", "pick_place"]


def _finished_run(tmp_path, mem: Memory):
    run = tmp_path / "run"
    save_snapshot(mem, run / "memory" / "round-0001", round=1)
    (run / "run.json").write_text(json.dumps({"method": "coda", "seed": 0, "profile": "smoke"}))
    (run / "metrics.json").write_text(json.dumps({"ood_success": 0.5}))
    return run


def test_a_record_without_built_scenes_has_no_keyframes_and_says_why(tmp_path, monkeypatch):
    run = _finished_run(tmp_path, _memory())
    monkeypatch.chdir(tmp_path)  # no data/ nor scenes/ here
    made = record(run, tmp_path / "rec")
    assert made["keyframes"]["stored"] == 0 and "no built scenes" in made["keyframes"]["why"]
    assert not (tmp_path / "rec" / "keyframes").exists() and (tmp_path / "rec" / "memory").is_dir()
    made = record(run, tmp_path / "rec", data_dir=tmp_path / "nowhere")
    assert "holds no built scenes" in made["keyframes"]["why"]
    assert "keyframes" not in record(run, tmp_path / "rec", keyframes=False)


def _stored_record(tmp_path):
    """A record whose keyframes/ holds one failure's PNG strip and GIF, and an index row that names a file
    outside the folder (ignored)."""
    mem = _memory()
    rec = _finished_run(tmp_path, mem)
    diagnosis = next(d for d in mem.rows("diagnoses") if d["mode_id"] == sorted_modes(mem)[0].mode_id)
    folder = rec / "keyframes"
    folder.mkdir()
    frames = [np.full((20, 40, 3), c, np.uint8) for c in (40, 120, 200)]
    Image.fromarray(np.concatenate(frames, axis=1)).save(folder / "x.png")
    first, *rest = [Image.fromarray(f) for f in frames]
    first.save(folder / "x.gif", save_all=True, append_images=rest, duration=800, loop=0)
    row = {
        "diagnosis_id": diagnosis["diagnosis_id"],
        "rollout_id": diagnosis["rollout_id"],
        "png": "x.png",
        "gif": "x.gif",
        "frames": ["start (step 0)", "step 8", "end (step 16)"],
        "views": ["front", "rear"],
        "matches": False,
        "differences": ["steps 16 recorded, 24 re-simulated"],
    }
    evil = {**row, "diagnosis_id": "d0001-000002", "png": "../run.json", "gif": "x.gif"}
    (folder / INDEX).write_text(json.dumps([row, evil]))
    return rec, diagnosis


def test_the_report_of_a_record_shows_its_stored_keyframes_without_data(tmp_path):
    """The record's stored strip is on the page (the same PNG bytes), labelled as stored and as differing
    from the recorded rollout, its GIF copied beside the page and linked relatively; a row naming a file
    outside the folder is ignored, and the record is left as it was."""
    rec, diagnosis = _stored_record(tmp_path)
    assert list(read_index(rec / "keyframes")) == [diagnosis["diagnosis_id"]]
    before = {p: p.read_bytes() for p in rec.rglob("*") if p.is_file()}
    out = build_report(rec, tmp_path / "page" / "r.html", data_dir=tmp_path / "missing", resimulate=False)
    html = out.read_text()
    strips = re.findall(r'<img class="keyframes" alt="[^"]*" src="data:image/png;base64,([^"]+)"', html)
    assert len(strips) == 1
    assert base64.b64decode(strips[0]) == (rec / "keyframes" / "x.png").read_bytes()
    assert Image.open(io.BytesIO(base64.b64decode(strips[0]))).size == (120, 20)
    assert "stored with the record: re-simulated (differs from the recorded rollout: steps 16" in html
    links = re.findall(r'<a class="gif" href="([^"]+)"', html)
    assert links == ["r_keyframes/x.gif"]
    assert (out.parent / links[0]).read_bytes() == (rec / "keyframes" / "x.gif").read_bytes()
    assert list(read_index(out.parent / "r_keyframes")) == [diagnosis["diagnosis_id"]]
    assert "data folder" in html and "is missing" in html  # why the other failures have no image
    assert {p: p.read_bytes() for p in rec.rglob("*") if p.is_file()} == before
    # the record's own folder as the keyframes folder: nothing copied over or removed there
    build_report(rec, rec / "r.html", data_dir=tmp_path / "missing", keyframes_dir=rec / "keyframes")
    assert (rec / "keyframes" / INDEX).read_bytes() == before[rec / "keyframes" / INDEX]
    assert 'href="keyframes/x.gif"' in (rec / "r.html").read_text()


def test_comparisons_check_the_keyframes_byte_for_byte(tmp_path):
    rec, _ = _stored_record(tmp_path)
    other = tmp_path / "other"
    record(rec, other, keyframes=False)
    # a record without keyframes (made before records stored them) compares on its results
    assert compare_runs(rec, other)["different"] == []
    import shutil

    shutil.copytree(rec / "keyframes", other / "keyframes")
    assert compare_runs(rec, other)["different"] == []
    with Image.open(rec / "keyframes" / "x.png") as im:
        im.save(other / "keyframes" / "x.png", compress_level=1)  # the same pixels, other bytes
    assert compare_runs(rec, other)["different"] == ["keyframes/x.png"]
    (other / "keyframes" / "x.gif").unlink()  # both have keyframes: one missing file differs
    assert "keyframes/x.gif" in compare_runs(rec, other)["different"]


@pytest.mark.parametrize("name", ["../x.png", "/abs.png", ".hidden.png", "x.gif"])
def test_the_index_ignores_names_that_are_not_plain_files_of_the_folder(tmp_path, name):
    (tmp_path / "x.gif").write_bytes(b"GIF89a")
    (tmp_path / "x.png").write_bytes(b"png")
    (tmp_path / INDEX).write_text(json.dumps([{"diagnosis_id": "d", "png": name, "gif": "x.gif"}]))
    assert read_index(tmp_path) == {}


def test_a_record_made_before_stored_keyframes_compares_on_its_results():
    from coda.maintenance import unmatched_keyframes

    old = {"records/x/run.json", "records/x/metrics.json"}
    new = old | {"records/x/keyframes/keyframes.json", "records/x/keyframes/d1.png"}
    assert unmatched_keyframes(old, new) == new - old  # only the re-run has keyframes: left out
    both = new | {"records/y/keyframes/keyframes.json"}
    assert unmatched_keyframes(new, both - {"records/x/keyframes/d1.png"}) == {
        "records/y/keyframes/keyframes.json"
    }
    assert unmatched_keyframes(new, new) == set()  # both have them: every file is compared
