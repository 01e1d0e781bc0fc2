"""Bad configuration through the command line: exit status 2, one line naming the key and the expected form,
never a traceback."""

import copy

import pytest
import yaml
from rel_helpers import ROOT

BASE = yaml.safe_load((ROOT / "params.yaml").read_text())


def _edit(fn):
    def make():
        params = copy.deepcopy(BASE)
        fn(params)
        return yaml.safe_dump(params)

    return make


def _smoke(params):
    return params["profiles"]["smoke"]


# name -> (params text, key the message must name, fragment of the expected form)
CASES = {
    "unknown key": (
        _edit(lambda p: _smoke(p)["sim"].update(wrokers=2)),
        "profiles.smoke.sim.wrokers",
        "unknown key; expected one of:",
    ),
    "wrong type": (
        _edit(lambda p: _smoke(p)["sim"].update(workers="two")),
        "profiles.smoke.sim.workers",
        "expected an integer >= 1, got 'two'",
    ),
    "out of range": (
        _edit(lambda p: _smoke(p)["sim"].update(episode_timeout_s=-5)),
        "profiles.smoke.sim.episode_timeout_s",
        "expected a finite number > 0",
    ),
    "missing section": (
        _edit(lambda p: _smoke(p).pop("planner")),
        "profiles.smoke.planner",
        "missing",
    ),
    "inverted success band": (
        _edit(lambda p: _smoke(p)["coevolve"].update(success_band=[0.9, 0.1])),
        "profiles.smoke.coevolve.success_band",
        "expected 0 <= low < high <= 1, got [0.9, 0.1]",
    ),
    "vlm diagnoser without a model": (
        _edit(lambda p: _smoke(p)["coevolve"].update(diagnoser="vlm")),
        "profiles.smoke.coevolve.vlm_model",
        "diagnoser 'vlm' needs",
    ),
    "openai compiler without an endpoint": (
        _edit(lambda p: _smoke(p)["coevolve"].update(compiler="openai", llm_model="m")),
        "profiles.smoke.coevolve.llm_endpoint",
        "needs the server's base URL",
    ),
    "bad choice in an unselected profile": (
        _edit(lambda p: p["profiles"]["paper"]["coevolve"].update(scheduling="weekly")),
        "profiles.paper.coevolve.scheduling",
        "expected one of 'adaptive', 'fixed', got 'weekly'",
    ),
    "YAML syntax": (lambda: "base: {seed: 0\nprofiles: [", "params.yaml", "invalid YAML"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_params_exit_2_with_one_line_naming_the_key(name, coda_cli, tmp_path):
    text, key, expected = CASES[name]
    params = tmp_path / "params.yaml"
    params.write_text(text())
    # a real command line: the run never starts, whatever its other arguments
    r = coda_cli(
        "run", "--params", params, "--profile", "smoke", "--method", "coda", "--out", tmp_path / "out",
        check=False, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and key in lines[0] and expected in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing was written


def test_bad_command_line_values_are_one_line_errors(coda_cli, tmp_path):
    r = coda_cli("run", "--method", "coda", "--out", tmp_path / "o", "--data", tmp_path / "none", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'none'}: no built data here; the cpu profile runs on the ")
    assert "coda data ensure" in line
    r = coda_cli("prune", tmp_path / "missing", check=False)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path / 'missing'}: not a directory"
