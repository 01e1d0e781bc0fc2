"""benchmarks/awr_weights.py: how uniform a run's AWR weights were, read from its train log."""

from __future__ import annotations

import csv
import json

from tests.conftest import load_benchmark

FIELDS = ["round", "kind", "step", "loss", "awr_loss", "imitation_loss", "ess_fraction"]


def _record(path, ess, awr):
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"method": "coda", "seed": 2, "profile": "cpu"}))
    with (path / "train_log.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerow({"round": 1, "kind": "critic", "step": 1, "loss": 0.5})  # critic rows carry no AWR columns
        for i, (e, a) in enumerate(zip(ess, awr, strict=True), start=1):
            w.writerow(
                {
                    "round": 1,
                    "kind": "policy",
                    "step": i,
                    "loss": a,
                    "awr_loss": a,
                    "imitation_loss": 0.1,
                    "ess_fraction": e,
                }
            )


def test_summary_reads_policy_rows_only_and_splits_the_loss_into_first_and_last_tenth(tmp_path, capsys):
    script = load_benchmark("awr_weights")
    run = tmp_path / "records" / "coda-2"
    ess = [1.0] * 18 + [0.5, 0.25]
    awr = [0.1, 0.3] + [1.0] * 16 + [2.0, 4.0]
    _record(run, ess, awr)
    s = script.summarize(run)
    assert (s["method"], s["seed"], s["policy_updates"]) == ("coda", 2, 20)
    assert s["ess_fraction_mean"] == round(sum(ess) / 20, 4)
    assert s["ess_fraction_min"] == 0.25
    assert s["ess_fraction_p05"] == 0.5  # the 2nd smallest of 20
    assert (s["awr_loss_first_tenth"], s["awr_loss_last_tenth"]) == (0.2, 3.0)
    assert script.main([str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["awr_loss_last_tenth"] == 3.0


def test_a_folder_without_a_train_log_is_refused(tmp_path, capsys):
    script = load_benchmark("awr_weights")
    assert script.main([str(tmp_path)]) == 2
    assert "no train_log.csv" in capsys.readouterr().err
