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
