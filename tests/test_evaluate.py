"""Mean ± standard error over seeds and paired differences on shared evaluation episodes."""

import json

import pytest

from coda.evaluate import mean_se, summarize


def _write(path, seed, id_out, ood_out):
    path.mkdir(parents=True)
    m = {
        "seed": seed,
        "n_id": len(id_out),
        "eval_outcomes": id_out + ood_out,
        "id_success": id_out.count("1") / len(id_out),
        "ood_success": ood_out.count("1") / len(ood_out),
        "ood_by_suite": {"layouts": 0.0},
        "ood_by_family": {"push": 0.0},
    }
    (path / "metrics.json").write_text(json.dumps(m))
    return path


def test_mean_se():
    assert mean_se([0.2, 0.4]) == (pytest.approx(0.3), pytest.approx(0.1))
    assert mean_se([0.5]) == (0.5, None) and mean_se([]) == (None, None)


def test_paired_difference_uses_the_shared_episodes(tmp_path):
    sft = _write(tmp_path / "sft", 0, "11", "0011")
    a = [_write(tmp_path / f"a{s}", s, "10", o) for s, o in ((0, "1011"), (1, "0111"), (2, "0011"))]
    rows = {r["method"]: r for r in summarize({"sft": [sft], "a": a}, reference="sft")}
    assert rows["a"]["n"] == 3 and rows["a"]["ood_mean"] == pytest.approx(
        2.5 / 4 * 1 + 0 - 0.125 * 0, abs=0.2
    )
    assert rows["a"]["paired_diff"] == pytest.approx((0.25 + 0.25 + 0.0) / 3)
    assert "paired_diff" not in rows["sft"]
    bad = _write(tmp_path / "bad", 0, "1", "00")
    with pytest.raises(ValueError, match="other episodes"):
        summarize({"sft": [sft], "bad": [bad]}, reference="sft")


def test_binomial_and_paired_standard_errors():
    from coda.evaluate import binomial_se, evaluation_summary, paired_diff

    assert binomial_se([1, 0, 1, 0]) == pytest.approx(0.25) and binomial_se([]) is None
    d, se = paired_diff("1100", "1000")
    assert d == pytest.approx(0.25) and se == pytest.approx(0.25)  # differences 0,1,0,0: sd 0.5, n 4
    with pytest.raises(ValueError, match="same ones"):
        paired_diff("1", "10")
    items = [
        ("id", "push", None),
        ("layouts", "push", None),
        ("tasks", "push", None),
        ("tasks", "stack", None),
    ]
    ev = evaluation_summary(items, [True, False, True, True])
    assert (ev["n_id"], ev["n_ood"], ev["eval_outcomes"]) == (1, 3, "1011")
    assert ev["ood_by_suite"] == {"layouts": 0.0, "tasks": 1.0}
    assert ev["ood_by_family_suite"]["push"] == {"layouts": 0.0, "tasks": 1.0}
    assert ev["ood_se"] == pytest.approx(round((2 / 3 * 1 / 3 / 3) ** 0.5, 4))


def test_single_seed_comparison_reports_the_episode_standard_error(tmp_path):
    sft = _write(tmp_path / "sft", 0, "11", "0011")
    a = _write(tmp_path / "a0", 0, "10", "1111")
    row = {r["method"]: r for r in summarize({"sft": [sft], "a": [a]}, reference="sft")}["a"]
    assert row["paired_diff"] == pytest.approx(0.5) and row["paired_se"] is None
    assert row["paired_se_episodes"] == pytest.approx(paired_diff_se := (1 / 3) ** 0.5 / 2)
    assert paired_diff_se > 0
