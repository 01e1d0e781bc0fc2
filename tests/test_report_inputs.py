"""The report never overwrites committed results with placeholders: without an artifact's inputs, `coda
report` and the notebooks' `build_section` name what is missing and leave figures/ and metrics/ as they are;
a scratch folder, asked for, gets the table with "not run" rows."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coda.report.build import SECTIONS, build, build_section
from coda.report.inputs import MissingInputs, missing

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A project root with params.yaml and committed figures/, but no runs/ or data/ (a fresh clone)."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "table1_main.md").write_text("committed\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_missing_names_the_runs_of_the_experiment_grid(fresh):
    gone = missing("table1_main", "runs", "data")
    assert "runs/table1/sft-0" in gone and "runs/table1/coda-2" in gone and "runs/table1/uniform-0" in gone
    assert missing("sft_baseline", "runs", "data") == ["metrics/sft.json"]
    assert "data" in missing("figure6_gallery", "runs", "data")


def test_committed_figures_are_left_alone(fresh, capsys):
    with pytest.raises(MissingInputs, match=r"table1_main: not built.*runs/table1/sft-0"):
        build("table1_main", "runs", "figures", "data")
    assert build_section("04", "runs", "figures", "data") == {}
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == len(SECTIONS["04"]) and all(
        "not built" in line for line in printed
    )  # one per artifact
    assert [p.name for p in (fresh / "figures").iterdir()] == ["table1_main.md"]
    assert (fresh / "figures" / "table1_main.md").read_text() == "committed\n"


def test_a_scratch_folder_gets_placeholders(fresh):
    build("table1_main", "runs", "scratch", "data")
    assert "not run" in (fresh / "scratch" / "table1_main.md").read_text()


def test_coda_report_without_runs_exits_with_one_line(fresh):
    res = subprocess.run(
        [sys.executable, "-m", "coda", "report"], cwd=fresh, capture_output=True, text=True, timeout=300
    )
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not built" in lines[0] and "missing" in lines[0], res.stderr
    assert [p.name for p in (fresh / "figures").iterdir()] == ["table1_main.md"]


def test_coda_report_available_builds_only_what_has_all_its_inputs(fresh):
    """Mid-pipeline: the SFT table (its metric files are there) is built; everything else is left as it is."""
    (fresh / "metrics").mkdir()
    shutil.copy(ROOT / "metrics" / "sft.json", fresh / "metrics" / "sft.json")
    res = subprocess.run(
        [sys.executable, "-m", "coda", "report", "available"],
        cwd=fresh,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    built = [line for line in res.stdout.splitlines() if "left as it is" not in line]
    assert built == ["sft_baseline"], res.stdout
    assert "table1_main: left as it is (16 inputs missing, e.g. records/regime_a/table1/sft-0)" in res.stdout
    assert (fresh / "figures" / "table1_main.md").read_text() == "committed\n"
    assert (fresh / "figures" / "sft_baseline.md").is_file()
