"""Report helpers: cells, the ordering note, paired differences over shared episodes."""

from __future__ import annotations

import csv
import json

from coda.report.runs import RunResult, fmt, paired, stat
from coda.report.tables import OURS, Table


def _run(tmp_path, name, seed, outcomes, method="coda"):
    row = {
        "round": 1,
        "n_id": 1,
        "ood_success": outcomes[1:].count("1") / (len(outcomes) - 1),
        "id_success": float(outcomes[0]),
        "eval_outcomes": outcomes,
    }
    return RunResult(name, tmp_path, {"method": method, "seed": seed, "profile": "t"}, [row], row)


def test_fmt_and_stat():
    assert fmt(stat([{"ood_success": 0.25}, {"ood_success": 0.35}])) == "30.0 ± 5.0 (n=2)"
    assert fmt(stat([{"ood_success": 0.5}])) == "50.0 (n=1)"
    assert fmt(stat([])) == "not run"
    assert fmt({"mean": 2.0, "se": None, "n": 1}, signed=True) == "+2.0 (n=1)"


def test_paired_difference_uses_shared_episodes(tmp_path):
    a = [_run(tmp_path, "a0", 0, "11100"), _run(tmp_path, "a1", 1, "10110")]
    b = [_run(tmp_path, "b0", 0, "10100", "sft")]  # one reference run pairs with every seed
    d = paired(a, b, None, None)
    assert d["n"] == 2
    assert abs(d["mean"] - 100 * (0.25 + 0.25) / 2) < 1e-9 and d["se"] == 0.0
    back = paired(b, a, None, None)  # SFT first: the same pairs, the opposite sign
    assert back["n"] == 2 and abs(back["mean"] + d["mean"]) < 1e-9
    other = [_run(tmp_path, "c0", 0, "00000", "uniform")]  # another method's seed 0 pairs with seed 0 only
    assert paired(a, other, None, None)["n"] == 1


def test_ordering_note_and_files(tmp_path):
    t = Table("t", "T", "smoke")
    t.add("A", "10.0 (n=1)", 20.0, rank=10.0)
    t.add("B", "30.0 (n=1)", 10.0, rank=30.0)
    t.add("C", "not run", 5.0, rank=None)
    assert "differs" in t.ordering_note()
    csv_path, md_path = t.write(tmp_path)
    text = md_path.read_text()
    assert "Paper: A > B. Ours: B > A." in text and "Profile: `smoke`" in text and "1 of 1 pairs" in text
    header = next(csv.reader(csv_path.open()))
    assert header == ["row", OURS, "paper", "profile"]
    t2 = Table("u", "U", "smoke")
    t2.add("A", "x", 2.0, rank=5.0)
    t2.add("B", "y", 1.0, rank=1.0)
    assert "matches" in t2.ordering_note()
    json.dumps(t2.rows)


def test_claims_verdicts_follow_the_paired_t_test(tmp_path):
    from coda.report.claims import claims, strongest_baseline, verdict
    from coda.report.runs import Runs

    assert verdict(None, None, 0, 1.0)[0] == "not run"
    assert verdict(5.0, None, 1, 1.0)[0] == "n = 1: no test"
    assert verdict(10.0, 1.0, 3, 1.0)[0] == "holds"  # t = 10, df = 2: p ≈ 0.01
    assert verdict(-10.0, 1.0, 3, 1.0)[0] == "reversed"
    assert verdict(3.0, 2.0, 3, 1.0)[0] == "not significant"  # t = 1.5
    runs = Runs(tmp_path)
    ood = 40
    # sft fails everything; uniform succeeds on a seed-dependent half; sr_guided on a few more episodes
    runs.table1["sft"] = [_run(tmp_path, "sft-0", 0, "1" + "0" * ood, "sft")]
    runs.table1["uniform"] = [
        _run(tmp_path, f"uniform-{s}", s, "1" + "1" * (20 + s) + "0" * (ood - 20 - s), "uniform")
        for s in range(3)
    ]
    runs.table1["sr_guided"] = [
        _run(tmp_path, f"sr-{s}", s, "1" + "1" * (20 + s) + "0" * (ood - 20 - s), "sr_guided")
        for s in range(3)
    ]
    assert strongest_baseline(runs) in ("uniform", "sr_guided")
    rows = {(r["a"], r["b"]): r for r in claims(runs)}
    up = rows[("uniform", "sft")]
    assert up["n"] == 3 and up["verdict"] == "holds" and abs(up["diff"] - 100 * 21 / ood) < 1e-6
    assert rows[("sr_guided", "uniform")]["verdict"] == "not significant"  # identical outcomes: p = 1
    assert rows[("coda", "sft")]["verdict"] == "not run"


def test_budget_curve_reads_budget_runs_and_the_table1_run(tmp_path):
    from coda.report.budget import budget_curve
    from coda.report.runs import Runs

    def run(name, method, envs, outcomes):
        r = _run(tmp_path, name, 0, outcomes, method)
        r.run["coevolve"] = {"envs_per_family": envs, "rounds": 5}
        r.metrics["envs_accepted_total"] = 4 * 5 * envs
        r.metrics["ood_se"] = 0.2
        return r

    runs = Runs(tmp_path)
    runs.table1["uniform"] = [run("uniform-0", "uniform", 16, "1" + "1100")]
    runs.table1["coda"] = [run("coda-0", "coda", 16, "1" + "1110")]
    runs.budget["uniform-4"] = run("uniform-4", "uniform", 4, "1" + "1000")
    runs.budget["coda-4"] = run("coda-4", "coda", 4, "1" + "1100")
    out = tmp_path / "fig"
    paths = budget_curve(runs, out)
    assert {p.name for p in paths} >= {"budget_curve.csv", "budget_curve.md", "budget_curve.png"}
    rows = list(csv.DictReader((out / "budget_curve.csv").open()))
    assert [(r["method"], r["budget"], r["accepted per family"]) for r in rows] == [
        ("uniform", "4", "20.0"),
        ("uniform", "16", "80.0"),
        ("coda", "4", "20.0"),
        ("coda", "16", "80.0"),
    ]
    coda16 = rows[3]
    assert coda16[OURS].startswith("75.0 ± ") and coda16["paired vs uniform (points)"].startswith("+25.0 ± ")


def test_summary_writes_numbers_only_topics_and_long_curves(tmp_path):
    from coda.report.runs import Runs
    from coda.report.summary import summary

    runs = Runs(tmp_path)
    for m in ("uniform", "coda"):
        runs.table1[m] = []
        for s in range(2):
            r = _run(tmp_path, f"{m}-{s}", s, "1" + "1100" if m == "coda" else "1" + "1000", m)
            r.rounds = [{"round": 1, "ood_success": 0.25}, dict(r.metrics, round=2)]
            runs.table1[m].append(r)
    out = tmp_path / "metrics"
    res = summary(runs, out)
    assert res["table1"]["coda"]["ood"] == 50.0 and res["table1"]["coda"]["n"] == 2
    files = sorted(p.relative_to(out).as_posix() for p in (out / "summary").rglob("*.json"))
    assert "summary/table1/coda.json" in files and any(f.startswith("summary/claims/") for f in files)
    for p in (out / "summary").rglob("*.json"):
        assert all(v is None or isinstance(v, int | float) for v in json.loads(p.read_text()).values()), p
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "rounds_table1.csv"
    ]  # no ablation, long, logs
    rows = list(csv.DictReader((out / "plots" / "rounds_table1.csv").open()))
    assert [(r["round"], r["method"]) for r in rows] == [
        ("1", "uniform"),
        ("2", "uniform"),
        ("1", "coda"),
        ("2", "coda"),
    ]
    assert all(all(r.values()) for r in rows)  # long format: no blank cells


def test_the_sft_table_profile_comes_from_the_lock_without_runs(tmp_path):
    """A fresh clone has dvc.lock and metrics/sft.json but no runs/: the profile is the sft stage's."""
    from coda.report.main_results import locked_profile

    assert locked_profile(tmp_path, "sft") == "?"
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  sft:\n    params:\n      params.yaml:\n        base.profile: cpu\n"
    )
    assert locked_profile(tmp_path, "sft") == "cpu"
    assert locked_profile(tmp_path, "table1@coda-0") == "?"


def test_the_refinement_note_counts_refined_training_programs_in_the_snapshot(tmp_path):
    from coda.memory.programs import validate_program
    from coda.memory.store import Memory, save_snapshot, snapshot_path
    from coda.report.ablations import refinement_note

    def training(k, refinements):
        doc = validate_program(
            {
                "kind": "training",
                "family": "pick_place",
                "potential": {"family": "pick_place", "variant": "bin", "potential": "zero", "subgoals": []},
                "tools": {"planner_demos": k},
            }
        )
        doc["potential"]["refinements"] = refinements
        return doc

    run = _run(tmp_path, "coda-0", 0, "1010")
    mem = Memory()
    mem.add_program(training(1, []))
    save_snapshot(mem, snapshot_path(tmp_path, 3), round=3)
    assert "0 of 1 training programs" in refinement_note(run, 3)
    assert "trains as CoDA does" in refinement_note(run, 3)
    # the no-refinement control: identical episodes are said to be; different ones are named as run-to-run noise
    same = _run(tmp_path / "same", "t2p_no_refinement", 0, "1010")
    for x in (run, same):  # evaluated at round 3, the round compared
        x.rounds[0]["round"] = 3
    assert refinement_note(run, 3, same).endswith("its row is identical.")
    other = _run(tmp_path / "other", "t2p_no_refinement", 0, "1000")
    other.rounds[0]["round"] = 3
    note = refinement_note(run, 3, other)
    assert "differs by -33.3 ± 33.3 (n=1)" in note and "noise floor" in note
    mem.add_program(training(2, [{"history_len": 3}]))
    save_snapshot(mem, snapshot_path(tmp_path, 4), round=4)
    note = refinement_note(run, 4)
    assert "1 of 2 training programs" in note and "trains as CoDA does" not in note
    assert refinement_note(run, 5) is None  # no snapshot of that round


def test_ablations_are_paired_with_the_reference_run_beside_them_when_it_ran(tmp_path):
    from coda.report.common import single_seed_note
    from coda.report.runs import Runs

    runs = Runs(tmp_path)
    seed0 = _run(tmp_path / "t", "coda-0", 0, "11100")
    runs.table1["coda"] = [seed0]
    assert runs.ablation_ref("coda") is seed0  # no reference variant: Table 1's seed 0
    assert "compared with coda seed 0" in single_seed_note(runs, 1)
    ref = _run(tmp_path / "a", "coda_ref", 0, "10000")
    runs.ablation["coda_ref"] = ref
    assert runs.ablation_ref("coda") is ref
    assert "compared with `coda_ref`" in single_seed_note(runs, 1)
    assert runs.ablation_ref("critic_no_memory") is None  # neither ran
