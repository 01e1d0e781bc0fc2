"""Regime B's pre-registered predictions as data, and how an outcome is read against them."""

import pytest

from coda.report.claims import CLAIMS
from coda.report.preregistration import PREDICTIONS, Prediction, measure, verdict


def test_every_predicted_difference_is_a_claim_the_report_tests():
    pairs = {(c.a, c.b) for c in CLAIMS}
    for p in PREDICTIONS:
        if "-" in p.quantity:
            assert tuple(p.quantity.split("-")) in pairs, p
        assert p.regime in ("a", "b") and (p.low is None or p.high is None or p.low < p.high)


def test_an_outcome_is_inside_outside_or_not_run():
    p = Prediction(5, "b", "coda-uniform", 1, 6, "")
    assert [verdict(p, v) for v in (1.0, 6.0, 0.99, 6.01, None)] == [
        *("inside", "inside", "outside", "outside", "not run")
    ]
    assert verdict(Prediction(6, "a", "targeted/novel", None, 1.0, ""), 0.5) == "inside"
    assert verdict(Prediction(1, "b", "uniform-sft", 5, None, ""), 4.9) == "outside"


def test_measure_reads_paired_differences_and_table8():
    rows = [{"a": "coda", "b": "uniform", "diff": -1.9, "se": 2.9, "n": 2}]
    t8 = {
        "coda_targeted_failure": 0.337,
        "coda_novel_failure": 0.406,
        "n": 3,
        "per_seed": {"coda_targeted_failure": {"se": 0.042}},
    }
    assert measure(Prediction(5, "b", "coda-uniform", 1, 6, ""), rows, t8) == {
        "value": -1.9,
        "se": 2.9,
        "n": 2,
    }
    assert measure(Prediction(6, "b", "coda_targeted_failure", 50, 70, ""), rows, t8) == {
        "value": 33.7,
        "se": 4.2,
        "n": 3,
    }
    assert measure(Prediction(6, "b", "targeted/novel", 1.3, 2.2, ""), rows, t8)["value"] == 0.83
    assert measure(Prediction(6, "b", "targeted/novel", 1.3, 2.2, ""), rows, {})["value"] is None
    with pytest.raises(KeyError, match="sr_guided"):
        measure(Prediction(2, "b", "sr_guided-uniform", -3, 3, ""), rows, t8)
