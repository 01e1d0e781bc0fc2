"""The control experiment (`coda.engine.control`) and round scheduling (`coda.coevolve.schedule`) as units."""

from __future__ import annotations

import pytest

from coda.coevolve.schedule import RoundScheduler
from coda.engine.control import ControlExperiment, decide, mcnemar_p, round_pairs


def test_decision_rule_and_mcnemar():
    drop = decide([False, False, True, False], [True, True, True, True], margin=0.25, min_pairs=2)
    assert drop["decision"] == "validated" and drop["drop"] == 0.75 and drop["mcnemar_p"] == 0.125
    same = decide([True, False], [True, False], margin=0.25, min_pairs=2)
    assert same["decision"] == "rejected" and same["drop"] == 0.0
    few = decide([False], [True], margin=0.25, min_pairs=2)
    assert few["decision"] == "undecided" and few["pairs"] == 1
    assert mcnemar_p([False] * 5, [True] * 5) == pytest.approx(1 / 32)
    assert mcnemar_p([True] * 3, [True] * 3) == 1.0


def test_a_candidate_accumulates_its_pairs_over_rounds_and_a_decided_mode_does_not():
    ce = ControlExperiment(margin=0.25, min_pairs=4, alpha=0.25)
    first = ce.test("m", [False, False], [True, True], candidate=True)
    assert first["decision"] == "undecided" and first["pairs"] == 2  # 2 < min_pairs
    second = ce.test("m", [False, False], [True, True], candidate=True)
    assert second["decision"] == "validated" and second["pairs"] == 4
    assert ce.pairs["m"] == [[0, 1]] * 4
    later = ce.test("m", [True], [True], candidate=False)  # a validated mode: this round's pairs only
    assert later["pairs"] == 1 and ce.pairs["m"] == [[0, 1]] * 4


def test_a_transferred_program_must_keep_its_variants_in_the_band():
    ce = ControlExperiment(margin=0.25, min_pairs=2, alpha=0.5, band=(0.2, 0.8))
    out = ce.test("t", [False, False, False], [True, True, True], candidate=True, transferred=True)
    assert out["decision"] == "rejected" and out["reason"].startswith("transferred variant success")
    own = ControlExperiment(margin=0.25, min_pairs=2, alpha=0.5, band=(0.2, 0.8))
    assert own.test("t", [False] * 3, [True] * 3, candidate=True)["decision"] == "validated"


def test_round_pairs_keep_complete_pairs_in_order():
    rows = [
        ("targeted", "a", 0, False),
        ("control", "a", 0, True),
        ("targeted", "a", 1, True),  # its control failed to build: incomplete
        ("control", "b", 2, True),
        ("targeted", "b", 2, True),
        ("novel", None, None, False),
    ]
    assert round_pairs(rows) == {"a": ([False], [True]), "b": ([True], [True])}


def _scheduler(kind="adaptive"):
    return RoundScheduler(
        kind, check_every=10, min_modes_in_band=1, plateau_updates=20, plateau_points=0.05, band=(0.2, 0.8)
    )


def test_round_scheduler_checks_and_stops_by_the_paper_rule():
    s = _scheduler()
    assert s.checks_at(10, 50) and not s.checks_at(15, 50) and not s.checks_at(50, 50)
    assert not _scheduler("fixed").checks_at(10, 50)
    assert s.over([{"updates": 10, "modes_in_band": 0, "in_band_success": None}])  # no mode left in band
    moving = [{"updates": u, "modes_in_band": 2, "in_band_success": p} for u, p in ((10, 0.3), (30, 0.5))]
    assert not s.over(moving)
    flat = [{"updates": u, "modes_in_band": 2, "in_band_success": p} for u, p in ((10, 0.5), (30, 0.52))]
    assert s.over(flat)  # moved 2 points over 20 updates: a plateau


def test_round_scheduler_measures_only_in_band_modes():
    s = _scheduler()
    targeted = [("easy", "e1", True), ("easy", "e2", True), ("mid", "m1", True), ("mid", "m2", False)]
    asked = []

    def rollout(scenes):
        asked.extend(scenes)
        return [False, None]  # one outcome failed to come back

    out = s.measure(targeted, 10, rollout)
    assert asked == ["m1", "m2"]  # the always-solved mode is out of the band
    assert out == {"updates": 10, "modes_in_band": 0, "in_band_success": 0.0}
    assert s.measure([("easy", "e1", True)], 20, rollout) == {
        "updates": 20,
        "modes_in_band": 0,
        "in_band_success": None,
    }
