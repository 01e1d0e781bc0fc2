"""Every run records what it trained on (issue 27): its demonstrations (never a scene twice) and its replay by
split, in trained_on.json, which benchmarks/trained_on.py reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from coda.coevolve.trainer import TRAINED_ON, TrainedOn, Trainer
from coda.config import CoevolveConfig, ConfigError, load_params
from coda.engine.generate import EnvRequest
from coda.learn.replay import ChunkReplay
from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("stack", "push")
SPLITS = ("novel", "targeted", "control", "replay")


def _trainer(selection: str, demos_per_family: int = 3, seed: int = 0) -> Trainer:
    """A trainer with what `Trainer.collect_demos` reads: settings, seed, state and the mode book."""
    return Trainer(
        settings=CoevolveConfig(demos_per_family=demos_per_family, demo_selection=selection),
        seed=seed,
        method=None,
        state=SimpleNamespace(demos=[]),
        modes=SimpleNamespace(training_program=lambda mode_id: None, families=FAMILIES),
        scheduler=None,
        domain=None,
        publish=None,
    )


def _rollouts(rng: np.random.Generator, per_family: int = 9, pool: int = 8) -> list:
    """A round's rollouts: scenes drawn from a small pool per family (so rounds repeat scenes, and a round
    can hold one scene twice), some uncertified (no planner demonstration), each a success or a failure."""
    out = []
    for f in FAMILIES:
        for _ in range(per_family):
            h = f"{f}-{rng.integers(pool)}"
            split = str(rng.choice(SPLITS))
            q = EnvRequest(family=f, split=split, seed=[0], mode_id="m-1" if split == "targeted" else None)
            v = {"hash": h, "scene": "{}", "demo": {"scene_hash": h} if rng.random() < 0.8 else None}
            out.append((q, v, SimpleNamespace(success=bool(rng.random() < 0.4))))
    return out


def _eligible(rollouts, family):
    return [
        (q, v, rec) for q, v, rec in rollouts if q.family == family and v["demo"] and q.split != "control"
    ]


@pytest.mark.parametrize("selection", ["failures_first", "random"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_scene_is_demonstrated_twice_and_the_record_is_the_imitation_set(selection, seed):
    rng = np.random.default_rng(seed)
    trainer = _trainer(selection, seed=seed)
    for r in range(1, 6):
        before = trainer.record.demonstrated
        rollouts = _rollouts(rng)
        trainer.collect_demos(r, rollouts)
        for f in FAMILIES:
            fresh = {v["hash"] for _, v, _ in _eligible(rollouts, f)} - before
            got = [d for d in trainer.record.demos if d["round"] == r and d["family"] == f]
            # as many as the budget allows from scenes not demonstrated before, and none other
            assert len(got) == min(trainer.c.demos_per_family, len(fresh))
            assert {d["scene_hash"] for d in got} <= fresh
            if selection == "failures_first" and any(d["success"] for d in got):
                failed = {v["hash"] for _, v, rec in _eligible(rollouts, f) if not rec.success} - before
                assert failed <= {d["scene_hash"] for d in got}  # a success only once no failure is left
            selection_row = trainer.record.rounds[-1]["selection"][f]
            assert selection_row["demos"] == len(got)
            assert selection_row["candidates"] == len(_eligible(rollouts, f))
    hashes = [d["scene_hash"] for d in trainer.record.demos]
    assert len(hashes) == len(set(hashes)) > 0
    # the record lists exactly the demonstrations that entered the imitation set, in order
    assert [d["scene_hash"] for d in trainer.state.demos] == hashes
    for d in trainer.record.demos:
        assert (d["mode_id"] is not None) == (d["split"] == "targeted")
        assert d["split"] != "control"


def test_random_selection_is_a_seeded_shuffle_that_also_takes_successes():
    rollouts = _rollouts(np.random.default_rng(7), per_family=20, pool=40)

    def picks(selection, seed):
        trainer = _trainer(selection, seed=seed)
        trainer.collect_demos(1, rollouts)
        return [(d["scene_hash"], d["success"]) for d in trainer.record.demos]

    assert picks("random", 0) == picks("random", 0)
    assert picks("random", 0) != picks("random", 1)
    first = picks("failures_first", 0)
    assert not any(success for _, success in first)  # enough failures to fill the budget
    assert any(success for seed in range(5) for _, success in picks("random", seed))


def test_bad_demo_selection_is_rejected_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as err:
        CoevolveConfig(demo_selection="hardest_first")
    assert err.value.key_path == "demo_selection" and "'failures_first', 'random'" in str(err.value)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in params["profiles"].values():  # a stated choice in every profile
        assert profile["coevolve"]["demo_selection"] in ("failures_first", "random")
    params["profiles"]["paper"]["coevolve"]["demo_selection"] = "hardest_first"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError) as err:
        load_params(path, profile="smoke")
    assert err.value.key_path == "profiles.paper.coevolve.demo_selection"
    assert load_params(ROOT / "params.yaml", profile="cpu").coevolve.demo_selection == "failures_first"


def _record(scene_hash: str, n_chunks: int, success: bool, h: int = 4):
    steps = n_chunks * h
    return SimpleNamespace(
        scene_hash=scene_hash,
        family="stack",
        instruction="stack the blocks",
        obs=np.zeros((steps + 1, 50), np.float32),
        actions=np.zeros((steps, 7), np.float32),
        chunk_starts=list(range(0, steps, h)),
        steps=steps,
        success_step=steps if success else None,
    )


def test_replay_composition_counts_what_the_store_holds_and_survives_a_reload(tmp_path):
    store = ChunkReplay(capacity=10, horizon=4)
    assert store.add_record(_record("a", 3, True), split="novel") == 3
    assert store.add_record(_record("b", 4, False), split="targeted") == 4
    assert store.composition() == {
        "chunks": {"novel": 3, "targeted": 4},
        "episodes": {"novel": 1, "targeted": 1},
    }
    # a ring of 10: the control episode overwrites the novel one's first 2 chunks, its last one stays
    store.add_record(_record("c", 5, False), split="control")
    held = store.composition()
    assert held == {
        "chunks": {"control": 5, "targeted": 4, "novel": 1},
        "episodes": {"control": 1, "targeted": 1, "novel": 1},
    }
    assert sum(held["chunks"].values()) == len(store)
    store.save(tmp_path / "replay")
    assert ChunkReplay.load(tmp_path / "replay").composition() == held
    # a checkpoint written before transitions kept their split still loads (its split left blank)
    with np.load(tmp_path / "replay" / "replay.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "split"}
    np.savez(tmp_path / "replay" / "replay.npz", **arrays)
    assert ChunkReplay.load(tmp_path / "replay").composition()["chunks"] == {"": 10}


def _written_record(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    trainer = _trainer("failures_first")
    store = ChunkReplay(capacity=10_000, horizon=4)
    for r in (1, 2, 3):
        rollouts = _rollouts(rng)
        added = [
            (q.split, store.add_record(_record(v["hash"], 2, rec.success), split=q.split))
            for q, v, rec in rollouts
        ]
        trainer.record.add_replay(r, added, store.composition())
        trainer.collect_demos(r, rollouts)
    run = tmp_path / "run"
    run.mkdir()
    header = {"method": "uniform", "seed": 0, "profile": "smoke", "trains": True, "demo_selection": "x"}
    trainer.record.write(run, header)
    return run


def test_script_totals_match_the_file(tmp_path, capsys):
    run = _written_record(tmp_path)
    doc = json.loads((run / TRAINED_ON).read_text())
    script = load_benchmark("trained_on")
    assert script.main([str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    total = out["demos"]["total"]
    assert total["n"] == len(doc["demos"]) == sum(r["n"] for r in out["demos"]["rounds"])
    for split, n in Counter(d["split"] for d in doc["demos"]).items():
        assert total["by_split"][split]["n"] == n
        success = np.mean([d["success"] for d in doc["demos"] if d["split"] == split])
        assert total["by_split"][split]["policy_success"] == pytest.approx(success, abs=1e-4)
    assert sum(c["share"] for c in total["by_split"].values()) == pytest.approx(1, abs=1e-3)
    assert out["repeats"]["demos_of_an_already_demonstrated_scene"] == 0
    assert out["repeats"]["unique_scenes"] == len(doc["demos"])
    added = out["replay"]["added"]["total"]
    assert sum(added["chunks"].values()) == 2 * sum(added["episodes"].values()) == 2 * 3 * 9 * len(FAMILIES)
    assert out["replay"]["held_after_last_round"] == doc["rounds"][-1]["replay_buffer"]
    assert script.main([str(run)]) == 0
    text = capsys.readouterr().out
    assert f"total: {len(doc['demos'])}:" in text and "replay held after the last round" in text


def test_script_says_an_old_record_predates_recording(tmp_path, capsys):
    old = tmp_path / "coda-0"
    old.mkdir()
    (old / "metrics.json").write_text("{}\n")
    assert load_benchmark("trained_on").main([str(old)]) == 2
    assert "predates" in capsys.readouterr().err
    assert load_benchmark("trained_on").main([str(tmp_path / "missing")]) == 2


def test_record_survives_a_checkpoint_round_trip():
    rng = np.random.default_rng(4)
    trainer = _trainer("random")
    trainer.collect_demos(1, _rollouts(rng))
    state = json.loads(json.dumps({"trained_on": trainer.record.to_state()}))  # as in state.json
    again = TrainedOn.from_state(state["trained_on"], 1)
    assert again == trainer.record
    assert TrainedOn.from_state(None, 2).unrecorded_rounds == [1, 2]


# -- a real run -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def coda(make_coda, make_params, small_data, tmp_path_factory):
    runner = make_coda(make_params(families=FAMILIES), small_data)
    runner.train_sft(tmp_path_factory.mktemp("sft"), timeout=600)
    return runner


@pytest.mark.slow
@pytest.mark.integration
def test_a_run_records_its_demonstrations_and_replay_across_a_resume(coda, make_params, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    coda.run(whole, timeout=900)
    one_round = make_params(families=FAMILIES, rounds=1)
    coda.run(resumed, params=one_round, timeout=900)  # round 1, then resumed for round 2
    coda.run(resumed, timeout=900)
    doc = TrainedOn.read(whole)
    metrics = json.loads((whole / "metrics.json").read_text())
    hashes = [d["scene_hash"] for d in doc["demos"]]
    assert len(hashes) == metrics["demos_total"] > 0 and len(set(hashes)) == len(hashes)
    for m in json.loads((whole / "rounds.json").read_text()):
        got = Counter(d["split"] for d in doc["demos"] if d["round"] == m["round"])
        assert m["demos_by_split"] == dict(got)
    replay = json.loads((whole / "rounds" / "round-0002" / "replay" / "replay.json").read_text())
    added = [sum(e["replay_added"]["chunks"].values()) for e in doc["rounds"]]
    assert sum(added) == replay["added"] and doc["unrecorded_rounds"] == []
    assert TrainedOn.read(resumed)["demos"] == doc["demos"]
    assert TrainedOn.read(resumed)["rounds"] == doc["rounds"]
    record = tmp_path / "record"
    coda("record", whole, record)
    assert (record / TRAINED_ON).read_bytes() == (whole / TRAINED_ON).read_bytes()
