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
