"""The `coda` console script: JSON outputs and one-line user errors (subprocess smoke tests)."""

import json
from pathlib import Path

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
