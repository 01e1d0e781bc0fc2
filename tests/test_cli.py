"""The `coda` console script: JSON outputs and one-line user errors (subprocess smoke tests)."""

import json
import subprocess
import sys
from pathlib import Path

CODA = [sys.executable, "-m", "coda"]
ROOT = Path(__file__).resolve().parent.parent


def _run(*args, cwd=ROOT):
    return subprocess.run([*CODA, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_planner_check_json(small_data):
    r = _run(
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


def test_scenes_validity_counts(small_data):
    r = _run(
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


def test_unknown_family_is_a_one_line_error(small_data):
    r = _run("planner-check", "--family", "juggle", "--data", str(small_data))
    assert r.returncode == 2
    assert (
        r.stderr.strip() == "error: --family: unknown family 'juggle'; expected one of pick_place, stack, "
        "drawer, push or all"
    )


def test_bad_params_is_a_one_line_error(tmp_path):
    bad = tmp_path / "params.yaml"
    text = (ROOT / "params.yaml").read_text().replace("workers: 2", "workers: -2", 1)
    bad.write_text(text)
    r = _run("--params", str(bad), "data", "ranges")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "workers" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_data_is_explained(tmp_path):
    r = _run("planner-check", "--data", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "coda data ensure" in r.stderr


def test_ranges_document():
    r = _run("data", "ranges")
    assert r.returncode == 0 and "## pick_place" in r.stdout and "Held-out categories" in r.stdout


def test_profile_is_accepted_after_nested_subcommands():
    r = _run("data", "ranges", "--profile", "smoke")
    assert r.returncode == 0 and "pick_place" in r.stdout
    r = _run("data", "ranges", "--profile", "nosuch")
    assert r.returncode == 2 and "nosuch" in r.stderr
