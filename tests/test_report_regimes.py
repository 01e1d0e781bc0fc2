"""Both regimes in the report (issue #27): the t-test against the paper's effect, per-suite paired differences,
Table 8's same-run, same-round targeting numbers, and a regime without records reported with a status."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coda.evaluate import mean_se
from coda.report.claims import STRONGEST_BASELINE, claims, strongest_baseline, t_test
from coda.report.regime_tables import regime_results
from coda.report.runs import FAMILIES, SUITES, RunResult, Runs, paired, regime_dirs
from coda.report.targeting import count_splits, pool, targeting

ROOT = Path(__file__).resolve().parent.parent


def _row(cells: dict[tuple[str, str], str]) -> dict:
    """An evaluated metrics row whose OOD outcomes follow the FAMILIES x SUITES layout, one ID episode."""
    ood = "".join(cells[(f, s)] for f in FAMILIES for s in SUITES)
    return {
        "round": 1,
        "n_id": 1,
        "id_success": 1.0,
        "ood_success": ood.count("1") / len(ood),
        "ood_by_family_suite": {
            f: {s: cells[(f, s)].count("1") / len(cells[(f, s)]) for s in SUITES} for f in FAMILIES
        },
        "eval_outcomes": "1" + ood,
    }


def _run(path: Path, method: str, seed: int, row: dict) -> RunResult:
    return RunResult(f"{method}-{seed}", path, {"method": method, "seed": seed, "profile": "t"}, [row], row)


def _cells(k: int, successes: dict[str, int]) -> dict[tuple[str, str], str]:
    """k episodes per (family, suite) cell; `successes[suite]` of them succeed in every family."""
    return {
        (f, s): "1" * successes.get(s, 0) + "0" * (k - successes.get(s, 0)) for f in FAMILIES for s in SUITES
    }


def test_t_test_against_the_papers_effect():
    m, se = mean_se([1.0, 2.0, 3.0])
    assert t_test(m, se, 3, mu=2.0) == pytest.approx(1.0)  # t = 0
    assert t_test(m, se, 3) == pytest.approx(0.0742, abs=1e-4)  # t = 2 / (1 / sqrt 3) = 3.46, df = 2
    assert t_test(0.0, 1.0, 3, mu=4.303) == pytest.approx(0.05, abs=1e-3)  # the df = 2 critical value
    assert t_test(m, None, 1, mu=2.0) is None and t_test(None, None, 0) is None
    assert t_test(2.0, 0.0, 3, mu=2.0) == 1.0 and t_test(2.0, 0.0, 3, mu=1.0) == 0.0


def test_claims_test_against_the_paper_for_the_same_pair_and_fix_the_strongest_baseline(tmp_path):
    """CoDA − SR-guided is +8.5, +9.5, +10.5 points on seeds 0-2 (400 OOD episodes, 34/38/42 more successes,
    all in the `tasks` suite): the paper's +9.5 exactly, so p against the paper is 1 while p against 0 is small."""
    k = 25  # episodes per (family, suite) cell: 400 OOD episodes
    base = _cells(k, {})
    runs = Runs(tmp_path)
    runs.table1["sr_guided"] = [_run(tmp_path, "sr_guided", s, _row(base)) for s in range(3)]
    runs.table1["uniform"] = [_run(tmp_path, "uniform", s, _row(_cells(k, {"layouts": 5}))) for s in range(3)]
    extra = (34, 38, 42)
    runs.table1["coda"] = []
    for seed, x in enumerate(extra):
        cells = dict(base)
        for i, f in enumerate(FAMILIES):
            n = x // 4 + (i < x % 4)
            cells[(f, "tasks")] = "1" * n + "0" * (k - n)
        runs.table1["coda"].append(_run(tmp_path, "coda", seed, _row(cells)))
    # sr_guided is the strongest baseline by the stated rule, although uniform scores higher here
    assert strongest_baseline(runs) == STRONGEST_BASELINE == "sr_guided"
    rows = {r["text"]: r for r in claims(runs)}
    strongest = rows["CoDA beats the strongest baseline"]
    assert strongest["b"] == "sr_guided" and strongest["paper_diff"] == 9.5  # 27.6 − 18.1: the same pair
    assert strongest["diff"] == pytest.approx(9.5) and strongest["se"] == pytest.approx(0.58, abs=0.01)
    assert strongest["p_vs_paper"] == 1.0 and strongest["p"] < 0.01 and strongest["verdict"] == "holds"
    uniform = rows["CoDA beats uniform generation"]
    assert uniform["b"] == "uniform" and uniform["paper_diff"] == 19.1  # 27.6 − 8.5
    m, se = mean_se([100 * (x - 20) / 400 for x in extra])  # uniform has 20 more successes (layouts)
    assert uniform["diff"] == pytest.approx(m) and uniform["p_vs_paper"] == pytest.approx(
        t_test(m, se, 3, 19.1), abs=1e-4
    )
    # per suite: the whole difference is in `tasks` (x of its 100 episodes), none elsewhere
    assert strongest["per_suite"]["tasks"] == {"diff": 38.0, "se": 2.31, "n": 3}
    assert all(strongest["per_suite"][s] == {"diff": 0.0, "se": 0.0, "n": 3} for s in SUITES if s != "tasks")
    assert uniform["per_suite"]["layouts"]["diff"] == -20.0  # 5 of 25 in each family's layouts cell


def test_a_suite_is_read_only_when_the_outcomes_follow_the_suite_layout(tmp_path):
    row = _row(_cells(2, {"layouts": 1}))
    a = [_run(tmp_path, "coda", 0, row)]
    b = [_run(tmp_path, "uniform", 0, _row(_cells(2, {})))]
    assert paired(a, b, None, None, "layouts")["mean"] == pytest.approx(50.0)
    assert paired(a, b, None, None, "tasks")["mean"] == 0.0
    shuffled = dict(row, eval_outcomes="1" + row["eval_outcomes"][:0:-1])  # the same outcomes, other order
    assert paired([_run(tmp_path, "coda", 0, shuffled)], b, None, None, "layouts")["n"] == 0  # not guessed
    assert paired([_run(tmp_path, "coda", 0, shuffled)], b, None, None)["n"] == 1  # all OOD: still paired


def _rollout(rid, rnd, split, ok, scene):
    return {"rollout_id": rid, "round": rnd, "split": split, "success": ok, "scene_hash": scene}


def test_table8_pools_targeted_and_novel_rollouts_of_the_same_rounds():
    rollouts = [
        _rollout("n1", 1, "novel", False, "u1"),  # round 1: no targeted rollouts, so not counted
        _rollout("n2", 1, "novel", False, "u2"),
        *(_rollout(f"t2{i}", 2, "targeted", i == 3, f"s{i}") for i in range(4)),  # 3 of 4 fail
        _rollout("n3", 2, "novel", False, "u3"),
        _rollout("c2", 2, "control", False, "s0"),  # a control counterpart: counted on its own
        _rollout("r2", 2, "replay", False, "u1"),  # a replay of round 1's failed u1: fails again
        _rollout("r3", 3, "replay", True, "u2"),  # ... and of u2: solved now
        *(_rollout(f"t3{i}", 3, "targeted", True, f"s{i}") for i in range(2)),  # 0 of 2 fail
        *(_rollout(f"n4{i}", 3, "novel", i > 0, f"v{i}") for i in range(5)),  # 1 of 5 fails
        _rollout("n5", 4, "novel", False, "u5"),  # round 4: novel only, not the same rounds
    ]
    scenes = [
        {"scene_hash": f"s{i}", "round": r, "split": "targeted", "program_id": "gp-a" if i < 2 else "gp-b"}
        for i in range(4)
        for r in (2, 3)
    ]
    modes = [
        {"mode_id": "m/a/0", "generation_program_id": "gp-a"},
        {"mode_id": "m/a/1", "generation_program_id": "gp-a"},  # two modes with one program: either counts
        {"mode_id": "m/b/0", "generation_program_id": "gp-b"},
    ]
    diagnoses = [
        {"rollout_id": "t20", "mode_id": "m/a/1"},  # failed, in a targeted mode of its program
        {"rollout_id": "t21", "mode_id": "m/b/0"},  # failed, in another program's mode
        {"rollout_id": "n3", "mode_id": "m/a/0"},  # a novel draw: never in-mode
    ]  # t22 failed without a diagnosis
    c = count_splits(rollouts, scenes, modes, diagnoses, seed=7)
    assert c.rounds == (2, 3)
    assert (c.targeted, c.targeted_failed, c.novel, c.novel_failed, c.in_mode) == (6, 3, 6, 2, 1)
    rates = c.rates()
    assert rates["coda_targeted_failure"] == 0.5  # pooled: not the mean of the rounds' rates, (3/4 + 0) / 2
    assert rates["coda_novel_failure"] == pytest.approx(2 / 6)  # not (1/1 + 1/5) / 2
    assert rates["coda_in_mode_precision"] == pytest.approx(1 / 6)
    assert (c.control, c.control_failed, c.replay, c.replay_failed) == (1, 1, 2, 1)
    assert rates["coda_control_failure"] == 1.0 and rates["coda_replay_failure"] == 0.5
    other = count_splits(
        [_rollout("x", 2, "targeted", False, "s9"), _rollout("y", 2, "novel", True, "u9")], [], [], [], seed=8
    )
    entry = pool([c, other])
    assert entry["coda_targeted_failure"] == pytest.approx(4 / 7, abs=1e-4)  # pooled over every rollout
    assert entry["per_seed"]["coda_targeted_failure"] == {"mean": 0.75, "se": 0.25, "n": 2}  # (0.5 + 1) / 2
    assert entry["rollouts"] == {
        "targeted": 7,
        "targeted_failed": 4,
        "novel": 7,
        "novel_failed": 2,
        "control": 1,
        "control_failed": 1,
        "replay": 2,
        "replay_failed": 1,
        "in_mode": 1,
        "validated": 0,
        "validated_failed": 0,
    }
    assert entry["per_seed"]["coda_replay_failure"]["n"] == 1  # seed 8 replayed nothing: no rate, not zero
    assert entry["rounds"] == {"7": [2, 3], "8": [2]} and entry["n"] == 2


def test_table8_splits_off_the_targeted_rollouts_of_modes_validated_when_the_round_began():
    rollouts = [
        _rollout("t2", 2, "targeted", False, "s0"),  # gp-a's mode is a candidate after round 1
        _rollout("n2", 2, "novel", True, "u2"),
        _rollout("t3", 3, "targeted", False, "s0"),  # ... and validated after round 2
        _rollout("u3", 3, "targeted", True, "s1"),
        _rollout("n3", 3, "novel", True, "u3"),
    ]
    scenes = [
        {"scene_hash": h, "round": r, "split": "targeted", "program_id": "gp-a"}
        for h in ("s0", "s1")
        for r in (2, 3)
    ]
    modes = [
        {"mode_id": "m/a", "generation_program_id": "gp-a", "status": "candidate", "snapshot_round": 1},
        {"mode_id": "m/a", "generation_program_id": "gp-a", "status": "validated", "snapshot_round": 2},
        {"mode_id": "m/a", "generation_program_id": "gp-b", "status": "validated", "snapshot_round": 3},
    ]
    c = count_splits(rollouts, scenes, modes, [])
    assert (c.targeted, c.targeted_failed, c.validated, c.validated_failed) == (3, 2, 2, 1)
    assert c.rates()["coda_validated_failure"] == 0.5
    undated = count_splits(rollouts, scenes, [{**modes[1], "snapshot_round": None}], [])
    assert undated.validated == 3  # a mode row without its snapshot's round holds for every round


def test_table8_counts_one_family_in_the_rounds_of_the_whole_run():
    rows = [
        dict(_rollout("a", 2, "targeted", False, "s1"), family="stack"),
        dict(
            _rollout("b", 2, "novel", True, "u1"), family="push"
        ),  # round 2 has both splits, across families
        dict(_rollout("c", 2, "replay", False, "u0"), family="push"),
        dict(_rollout("d", 2, "novel", False, "u2"), family="stack"),
    ]
    stack = count_splits(rows, [], [], [], family="stack")
    push = count_splits(rows, [], [], [], family="push")
    assert stack.rounds == push.rounds == (2,)  # push has no targeted rollout of its own, still round 2
    assert (stack.targeted, stack.targeted_failed, stack.novel, stack.novel_failed) == (1, 1, 1, 1)
    assert (push.targeted, push.novel, push.novel_failed, push.replay, push.replay_failed) == (0, 1, 0, 1, 1)
    assert push.rates()["coda_targeted_failure"] is None  # no rollouts, no rate


def _memory_record(run_dir: Path, seed: int) -> None:
    """A CoDA run record: run.json, rounds.json (success_by_split per round), metrics.json and memory
    snapshots of rounds 2 and 3 with the rollouts behind them. Round 2: 2 targeted (1 fails, diagnosed in its
    mode), 1 novel (fails); round 3: 2 targeted (both succeed), 3 novel (1 fails). The mode's generation program
    is recompiled after round 2, so the round-3 snapshot no longer names the program of round 2's scenes."""
    from coda.memory.programs import validate_program
    from coda.memory.store import Memory, save_snapshot, snapshot_path

    mem = Memory(encoder=lambda texts: np.ones((len(texts), 3)))

    def compile_program(hi: float) -> str:
        op = {"op": "sample", "role": "target", "attribute": "mass", "range": [0.1, hi]}
        return mem.add_program(
            validate_program({"kind": "generation", "family": "pick_place", "operations": [op]})
        )

    gen = compile_program(0.9)
    mode = mem.add_mode("pick_place", "grasp", "mass", "too heavy", 1, generation_program_id=gen)
    spec = {"family": "pick_place"}
    outcomes = {
        2: {"targeted": [False, True], "novel": [False]},
        3: {"targeted": [True, True], "novel": [True, False, True]},
    }
    for rnd, splits in outcomes.items():
        if rnd == 3:  # recompiled from the mode's diagnoses so far
            gen = compile_program(0.7)
            mem.set_mode_programs(mode, generation_program_id=gen)
        for split, oks in splits.items():
            for i, ok in enumerate(oks):
                scene = f"{split[0]}{rnd}{i}"
                program = gen if split == "targeted" else None
                mem.add_scene(
                    scene,
                    "pick_place",
                    rnd,
                    split,
                    spec,
                    program_id=program,
                    base_hash="b" if program else None,
                )
                rid = mem.add_rollout(scene, "pick_place", rnd, split, ok, 0, 10, 0)
                if not ok:
                    did = mem.add_diagnosis(
                        rid, scene, "pick_place", rnd, "bin", "grasp", "mass", "too heavy", 0.9
                    )
                    assert mem.assign_mode(did) == mode
        if rnd == 2:
            save_snapshot(mem, snapshot_path(run_dir, 2), round=2)
    rounds = [{"round": 1, "success_by_split": {"novel": 0.5}}] + [
        {"round": r, "success_by_split": {k: float(np.mean(v)) for k, v in s.items()}}
        for r, s in outcomes.items()
    ]
    metrics = {"round": 3, "ood_success": 0.5, "n_id": 0, "eval_outcomes": "1" * 16}
    (run_dir / "run.json").write_text(json.dumps({"method": "coda", "seed": seed, "profile": "t"}))
    (run_dir / "rounds.json").write_text(json.dumps(rounds))
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    save_snapshot(mem, snapshot_path(run_dir, 3), round=3)


def test_table8_reads_the_memory_of_each_regime_and_reports_a_regime_without_records(tmp_path):
    records = tmp_path / "records"
    _memory_record(records / "regime_a" / "table1" / "coda-0", 0)
    runs = Runs.load(records / "regime_a")
    entry = targeting(runs)
    assert entry["coda_targeted_failure"] == 0.25 and entry["coda_novel_failure"] == 0.5  # 1/4, 2/4
    # round 2's failure was diagnosed in the mode of the program that made it, which round 3 recompiled
    assert entry["coda_in_mode_precision"] == 0.25 and entry["rounds"] == {"0": [2, 3]}
    only = entry["by_family"]["pick_place"]  # one family: its entry is the whole run's
    assert set(entry["by_family"]) == {"pick_place"} and only["rollouts"] == entry["rollouts"]
    assert only["coda_targeted_failure"] == 0.25 and only["coda_replay_failure"] is None  # nothing replayed
    # the memory's per-round rates are rounds.json's success_by_split (which has no counts to pool)
    by_round = {r["round"]: r["success_by_split"] for r in runs.table1["coda"][0].rounds}
    assert 1 - by_round[2]["targeted"] == 0.5 and 1 - by_round[3]["novel"] == pytest.approx(1 / 3)
    assert (
        regime_dirs(records)
        == regime_dirs(records / "regime_a")
        == {
            "a": records / "regime_a",
            "b": records / "regime_b",
        }
    )
    res = regime_results(runs)
    status = {"status": f"no records under {(records / 'regime_b').as_posix()}/table1"}
    assert res["table8"]["b"] == res["table1_regimes"]["b"] == res["claims_regimes"]["b"] == status
    assert res["table8"]["a"] == entry
    assert res["table1_regimes"]["a"]["coda"]["n"] == 1
    assert res["table1_regimes"]["a"]["sr_guided"] == {
        "status": f"no records under {(records / 'regime_a').as_posix()}/table1/sr_guided-*"
    }
    assert [
        c["b"] for c in res["claims_regimes"]["a"] if c["text"] == "CoDA beats the strongest baseline"
    ] == ["sr_guided"]
    # regime B's records, once there, are read by the same code
    _memory_record(records / "regime_b" / "table1" / "coda-1", 1)
    res_b = regime_results(runs)
    assert res_b["table8"]["b"]["coda_targeted_failure"] == 0.25 and res_b["table8"]["b"]["rounds"] == {
        "1": [2, 3]
    }


def test_the_summary_writes_both_regimes_and_builds_without_regime_b(tmp_path, monkeypatch):
    from coda.report.build import build

    records = tmp_path / "records"
    _memory_record(records / "regime_a" / "table1" / "coda-0", 0)
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the inputs check has no experiment grid to ask for
    res = build("summary", "records", "out")  # the records root reads as regime A
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written == json.loads(json.dumps(res))
    assert set(written) >= {"table1", "table1_regimes", "table8", "claims", "claims_regimes"}
    assert written["table1_regimes"]["b"] == {"status": "no records under records/regime_b/table1"}
    assert written["table8"]["a"]["coda_targeted_failure"] == 0.25
    first = (tmp_path / "out" / "results.json").read_bytes()
    build("summary", "records/regime_a", "out")
    assert (tmp_path / "out" / "results.json").read_bytes() == first  # byte-identical on the same records


REGIME_A = ROOT / "records" / "regime_a"
AUDITED = [REGIME_A / "table1" / f"coda-{seed}" for seed in range(3)]


def _made_before_issue_27(record: Path) -> bool:
    """The audit (../shared/docs/AUDIT-targeting.md) counted regime A's CoDA records made with the targeting before
    issue 27; records made since name their demonstration selection in run.json's `coevolve`."""
    run = record / "run.json"
    return run.is_file() and "demo_selection" not in json.loads(run.read_text()).get("coevolve", {})


@pytest.mark.skipif(
    not all((r / "memory").is_dir() and _made_before_issue_27(r) for r in AUDITED),
    reason="regime A's CoDA records are not (all) the ones the audit counted: re-made with issue 27's targeting",
)
def test_regime_a_records_give_the_audits_same_round_numbers():
    entry = targeting(Runs.load(REGIME_A))
    assert 0.35 < entry["coda_targeted_failure"] < 0.45  # the audit: 39.6% per seed
    assert 0.70 < entry["coda_novel_failure"] < 0.85  # the audit: 78.0% per seed
    assert entry["coda_in_mode_precision"] < 0.06  # the audit: 2.8%
    assert entry["coda_targeted_failure"] < entry["coda_novel_failure"]
    assert entry["n"] == 3 and all(r[0] >= 2 for r in entry["rounds"].values())


@pytest.mark.parametrize("regime", ["regime_a", "regime_b"])
def test_committed_coda_records_give_table8_rates_that_their_counts_make(regime):
    """Whatever records are committed: Table 8's pooled rates are their rollout counts' ratios, rounds 2+ only."""
    root = ROOT / "records" / regime
    if not (root / "table1" / "coda-0" / "memory").is_dir():
        pytest.skip(f"no CoDA records under records/{regime}")
    entry = targeting(Runs.load(root))
    counts = entry["rollouts"]
    for split in ("targeted", "novel", "control", "replay"):
        assert counts[split] > 0
        assert entry[f"coda_{split}_failure"] == pytest.approx(
            counts[f"{split}_failed"] / counts[split], abs=1e-4
        )
    assert entry["coda_in_mode_precision"] == pytest.approx(counts["in_mode"] / counts["targeted"], abs=1e-4)
    assert all(min(rounds) >= 2 for rounds in entry["rounds"].values())
