"""The `coda` console script: JSON outputs and one-line user errors (subprocess smoke tests)."""

import argparse
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_planner_check_json(coda_cli, small_data):
    r = coda_cli(
        "--profile",
        "smoke",
        "planner-check",
        "--family",
        "push",
        "--n",
        "2",
        "--json",
        "--data",
        str(small_data),
        "--workers",
        "1",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"family", "n", "success_rate", "median_episode_s"}
    assert out["family"] == "push" and out["n"] == 2 and out["success_rate"] == 1.0


def test_scenes_validity_counts(coda_cli, small_data):
    r = coda_cli(
        "--profile",
        "smoke",
        "scenes",
        "--family",
        "pick_place",
        "--n",
        "3",
        "--validity",
        "--json",
        "--data",
        str(small_data),
        "--workers",
        "1",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["pass"] + out["repaired"] + out["rejected"] == 3


def test_unknown_family_is_a_one_line_error(coda_cli, small_data):
    r = coda_cli("planner-check", "--family", "juggle", "--data", str(small_data))
    assert r.returncode == 2
    assert (
        r.stderr.strip() == "error: --family: unknown family 'juggle'; expected one of pick_place, stack, "
        "drawer, push or all"
    )


def test_bad_params_is_a_one_line_error(coda_cli, tmp_path):
    bad = tmp_path / "params.yaml"
    text = (ROOT / "params.yaml").read_text().replace("workers: 2", "workers: -2", 1)
    bad.write_text(text)
    r = coda_cli("--params", str(bad), "data", "ranges")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "workers" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_data_is_explained(coda_cli, tmp_path):
    r = coda_cli("planner-check", "--data", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "coda data ensure" in r.stderr


def test_ranges_document(coda_cli):
    r = coda_cli("data", "ranges")
    assert r.returncode == 0 and "## pick_place" in r.stdout and "Held-out categories" in r.stdout


def test_profile_is_accepted_after_nested_subcommands(coda_cli):
    r = coda_cli("data", "ranges", "--profile", "smoke")
    assert r.returncode == 0 and "pick_place" in r.stdout
    r = coda_cli("data", "ranges", "--profile", "nosuch")
    assert r.returncode == 2 and "nosuch" in r.stderr


def _options_without_help(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options_without_help(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_option_has_help():
    from coda.cli import DESCRIPTION, _parser

    parser = _parser()
    assert list(_options_without_help(parser, "coda")) == []
    assert parser.description == DESCRIPTION and "coda/" not in DESCRIPTION  # for a user, not about modules


def test_release_profile_without_data_says_to_run_data_ensure(coda_cli, tmp_path):
    missing = tmp_path / "nothing"
    r = coda_cli("run", "--profile", "cpu", "--method", "coda", "--out", tmp_path / "run", "--data", missing)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {missing}: no built data here; the cpu profile runs on the released")
    assert "coda --profile cpu data scenes --out" in line and "coda data ensure" in line
    assert not missing.exists() and not (tmp_path / "run").exists()


def test_release_profile_refuses_smaller_data(coda_cli, small_data, tmp_path):
    r = coda_cli("--profile", "cpu", "sft", "--out", tmp_path / "sft", "--data", small_data)
    assert r.returncode == 2 and "fewer than the cpu profile's" in r.stderr and "coda data" in r.stderr
    assert not (tmp_path / "sft").exists()


@pytest.mark.slow
def test_smoke_profile_builds_missing_scenes(coda_cli, tmp_path):
    """A fresh clone: no data/ (nor data.dvc here), and a command of a profile that builds its own scenes
    builds them into --data first, as `coda data scenes` does, then runs."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["profiles"]["smoke"]["data"].update(n_seed_layouts=4, suite_size=1)  # 4 + 4 x 4 scenes: fast
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    data_dir = tmp_path / "data"
    args = ("--profile", "smoke", "planner-check", "--family", "push", "--n", "1", "--json")
    r = coda_cli(*args, "--data", data_dir, "--workers", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(f"{data_dir}: no built scenes here; building the smoke profile's 20 scenes")
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert sum(manifest["counts"].values()) == 20 and manifest["n_seed_layouts"] == 4
    assert manifest["suite_size"] == 1 and json.loads(r.stdout)["n"] == 1
