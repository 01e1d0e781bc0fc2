"""Coverage of the held-out suites' regions by generated LIBERO environments (`coda.domains.libero.coverage`), the
per-round curve's tables (`coda.sim.libero.success`) and the report built from them: Table 2 with uniform beside
CoDA, its curve over rounds and the coverage table. With the [libero] extra, the held-out suites' own
evaluation episodes land in their own regions by the same definition."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from coda.domains.libero import coverage
from coda.domains.libero.diagnose import PROPRIO, LiberoReference
from coda.sim.libero.success import curve, restrict, success_table

OBJECTS = ("basket_1", "butter_1", "ketchup_1", "milk_1")
HOME = {"basket_1": (0.0, 0.25), "milk_1": (0.1, -0.1), "ketchup_1": (-0.1, -0.1), "butter_1": (-0.1, 0.1)}
TRAIN = "pick the milk and place it in the basket"


def obs0(positions):
    v = np.zeros(PROPRIO + 4 * len(OBJECTS), np.float32)
    for i, name in enumerate(OBJECTS):
        if name in positions:
            v[PROPRIO + 4 * i : PROPRIO + 4 * i + 4] = [1.0, *positions[name], 0.9]
    return v


def reference() -> LiberoReference:
    ref = LiberoReference()
    for jitter in (0.0, 0.008, -0.008):
        ref.add(0, TRAIN, obs0({n: (x + jitter, y) for n, (x, y) in HOME.items()}), OBJECTS)
    return ref


def regions(positions, instruction=TRAIN, goal="milk_1"):
    return coverage.regions(
        0,
        obs0(positions),
        instruction,
        goal,
        source_goal="milk_1",
        reference=reference(),
        objects=OBJECTS,
        threshold=0.03,
    )


def test_each_kind_of_variant_lands_in_its_region():
    assert regions(HOME) == ("standard",)
    assert regions({**HOME, "milk_1": (0.11, -0.09)}) == ("standard",)  # within the natural spread
    swapped = {**HOME, "milk_1": HOME["ketchup_1"], "ketchup_1": HOME["milk_1"]}
    assert regions(swapped) == ("position", "goal_moved")  # where training had another object
    assert regions({**HOME, "milk_1": (0.2, 0.1)}) == ("goal_moved",)  # off its place, not another's
    assert regions({**HOME, "basket_1": (0.05, 0.3)}) == ()  # the target moved: no held-out suite's region
    assert regions(HOME, "grab milk and put it into basket") == ("instruction",)
    assert regions(HOME, "pick the butter and place it in the basket", "butter_1") == ("new_task",)
    assert regions(swapped, "put the milk in the basket") == ("position", "instruction", "goal_moved")


def test_a_round_tally_counts_regions_overall_and_per_split():
    rows = [("novel", ("position", "goal_moved")), ("control", ("standard",)), ("novel", ())]
    t = coverage.tally(rows)
    assert t["n"] == 3 and t["position"] == 1 and t["standard"] == 1 and t["new_task"] == 0
    assert t["by_split"]["novel"] == {
        "n": 2,
        **dict.fromkeys(coverage.REGIONS, 0),
        "position": 1,
        "goal_moved": 1,
    }
    assert t["by_split"]["control"]["standard"] == 1
    assert coverage.tally([]) == {"n": 0, **dict.fromkeys(coverage.REGIONS, 0), "by_split": {}}


def _table(states, success):
    return success_table(
        (kind, t, i, {"success": success(kind, t, i)})
        for kind in ("standard", "position")
        for t in (0, 1)
        for i in states
    )


def test_the_curve_reads_every_round_on_the_episodes_they_share():
    """SFT and the last round evaluate states 40-49, the rounds between 40-44: every point of the curve is
    read on 40-44 (n = 2 tasks x 5 states), so a difference between rounds is not one of episodes."""
    before = _table(range(40, 50), lambda k, t, i: i >= 45)  # succeeds only on states the curve does not use
    rounds = [
        {"round": 1, "libero": _table(range(40, 45), lambda k, t, i: k == "standard")},
        {"round": 2, "libero": None},  # a round without evaluation is left out
        {"round": 3, "libero": _table(range(40, 50), lambda k, t, i: t == 1)},
    ]
    pts = curve(before, rounds)
    assert [p["round"] for p in pts] == [0, 1, 3]
    assert pts[0]["standard"] == {"mean": 0.0, "n": 10}  # restricted to 40-44 (all of 40-49 would read 0.5)
    assert pts[1]["standard"]["mean"] == 1.0 and pts[1]["position"]["mean"] == 0.0
    assert pts[2]["standard"] == {"mean": 0.5, "n": 10}
    assert restrict(before, [45])["standard"] == {
        "mean": 1.0,
        "n": 2,
        "by_task": {"0": 1.0, "1": 1.0},
        "episodes": [[0, 45, 1], [1, 45, 1]],
    }
    old = {"standard": {"mean": 0.9, "n": 50, "by_task": {}}}  # written before episodes were kept
    assert curve(old, [])[0]["standard"] == {"mean": 0.9, "n": 50}


def _write_runs(root, rounds=2):
    lib = root / "libero"
    evals = range(40, 50)
    full = _table(evals, lambda k, t, i: i % 2 == 0)
    (lib / "sft").mkdir(parents=True)
    (lib / "sft" / "metrics.json").write_text(
        json.dumps({"profile": "cpu", "suite": "libero_object", "tasks": [0, 1], "eval": full, "planner": {}})
    )
    for method, rate in (("coda", 1.0), ("uniform", 0.0)):
        history = []
        for r in range(1, rounds + 1):
            last = r == rounds
            table = _table(evals if last else range(40, 45), lambda k, t, i, rate=rate: rate > 0.5)
            cov = coverage.tally([("novel", ("position", "goal_moved"))] * r + [("control", ("standard",))])
            history.append({"round": r, "libero": table, "coverage": cov})
        (lib / method).mkdir()
        (lib / method / "rounds.json").write_text(json.dumps(history))
        metrics = {
            "method": method,
            "rounds": rounds,
            "after": history[-1]["libero"],
            "after_policy_only": history[-1]["libero"],
            "updates": 10,
            "demos": 4,
            "modes_validated": 1,
            "modes_rejected": 0,
        }
        (lib / method / "metrics.json").write_text(json.dumps(metrics))
    return root


def _rows(path):
    with path.open() as fh:
        return {r["row"]: r for r in csv.DictReader(fh)}


def test_the_report_puts_uniform_beside_coda_and_builds_the_curve_and_the_coverage(tmp_path):
    from coda.report import libero_tables as report
    from coda.report.tables import OURS

    root, out = _write_runs(tmp_path / "runs"), tmp_path / "figures"
    report.table2_libero_pro(root, out)
    t2 = _rows(out / "table2_libero_pro.csv")
    assert len(t2) == 12  # before, after and policy alone for each of the four suites, as before
    after = t2["Standard LIBERO, after 2 rounds"]
    assert after[OURS] == "100.0 ± 0.0 (n=20)" and after[report.UNIFORM] == "0.0 ± 0.0 (n=20)"
    assert t2["Standard LIBERO, before (SFT)"][report.UNIFORM] == ""
    report.table2_libero_curve(root, out)
    assert (out / "table2_libero_curve.png").stat().st_size > 0 and (
        out / "table2_libero_curve.svg"
    ).is_file()
    c = _rows(out / "table2_libero_curve.csv")
    assert c["Standard LIBERO, round 0 (SFT)"][OURS] == "60.0 ± 15.5 (n=10)"  # states 40, 42, 44 of 40-44
    assert c["Standard LIBERO, round 0 (SFT)"][report.UNIFORM] == c["Standard LIBERO, round 0 (SFT)"][OURS]
    assert c["LIBERO-Pro position (`_swap`), round 2"][OURS] == "100.0 ± 0.0 (n=10)"  # the curve's n
    assert c["LIBERO-Pro position (`_swap`), round 2"][report.UNIFORM] == "0.0 ± 0.0 (n=10)"
    report.libero_coverage(root, out)
    cov = _rows(out / "libero_coverage.csv")
    assert set(cov) == {f"{m}, round {r}" for m in ("CoDA", "uniform") for r in (1, 2)}
    row = cov["CoDA, round 2"]
    assert row["environments (n)"] == "3" and row["controls (n)"] == "1"
    assert row["position (_swap) region"] == "66.7" and row["standard region"] == "33.3"
    assert row["new task (_task) region"] == "0.0"


# -- with the simulator: the held-out suites' own episodes --------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("task", [0, 4])
def test_every_held_out_suite_s_evaluation_episodes_land_in_its_own_region(task):
    """Read like a generated environment (first observation, instruction, goal object) against a reference of
    standard-suite states 0-4: the standard suite's evaluation states land in the standard region, `_swap`'s
    in the position region, `_task`'s in the new-task region, `_lan`'s in the paraphrase region — so a
    generated environment counted in a region is one that looks, to the policy, like that suite's episodes."""
    from coda.sim import libero

    if not libero.available():
        pytest.skip(f"LIBERO is not installed ({libero.EXTRA_HINT})")
    from coda.domains.libero.episodes import SuiteObservation, suite_objects

    objects = suite_objects("libero_object")
    observe = SuiteObservation(objects)
    ref = LiberoReference()
    envs = {kind: libero.LiberoEnv("libero_object" + kind, task) for kind in ("", "_swap", "_task", "_lan")}
    try:
        std = envs[""]
        for i in range(5):
            ref.add(task, std.instruction, observe(std.reset(i)), objects)
        expected = {"": "standard", "_swap": "position", "_task": "new_task", "_lan": "instruction"}
        for kind, env in envs.items():
            for i in range(45, 50):
                found = coverage.regions(
                    task,
                    observe(env.reset(i)),
                    env.instruction,
                    env.task.goal.obj,
                    source_goal=std.task.goal.obj,
                    reference=ref,
                    objects=objects,
                    threshold=0.03,
                )
                assert expected[kind] in found, (kind, i, found)
                others = set(expected.values()) - {expected[kind]}
                assert not others & set(found), (kind, i, found)
    finally:
        for env in envs.values():
            env.close()
