"""The co-evolution loop end to end on the small data set: lineage, snapshots, methods, and resuming after a kill."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coda.coevolve import METHODS
from coda.memory.store import inspect, load_snapshot

ROOT = Path(__file__).resolve().parent.parent
TIMING = ("wall_s", "time_s", "cpu_s", "worker_cpu_s", "schedule_checks")


@pytest.fixture(scope="module")
def tiny_params(make_params):
    """params.yaml with a smoke profile shrunk to the small data set (3 seed scenes per family)."""
    return make_params()


@pytest.fixture(scope="module")
def coda(make_coda, small_data, tiny_params, tmp_path_factory):
    """The `coda` runner on the tiny params, with a trained SFT policy (one per module)."""
    runner = make_coda(tiny_params, small_data)
    runner.train_sft(tmp_path_factory.mktemp("sft"), timeout=600)
    return runner


@pytest.fixture(scope="module")
def sft_dir(coda):
    return coda.sft


@pytest.fixture(scope="module")
def run_method(coda):
    """``run_method(out, method="coda", extra=(), check=True)``: `coda run` on the tiny params from `sft_dir`."""

    def run(out, method="coda", extra=(), check=True):
        return coda(*coda.run_args(out, method=method), *extra, check=check, timeout=900)

    return run


@pytest.fixture(scope="module")
def coda_run_process(run_method, tmp_path_factory):
    """The run directory of a `coda run` of coda, and its finished process (stdout and stderr)."""
    out = tmp_path_factory.mktemp("coda") / "run"
    return out, run_method(out)


@pytest.fixture(scope="module")
def coda_run(coda_run_process):
    return coda_run_process[0]


def test_coda_run_writes_rounds_snapshots_and_lineage(coda_run):
    history = json.loads((coda_run / "rounds.json").read_text())
    assert [m["round"] for m in history] == [1, 2]
    for m in history:
        for key in (
            "id_success",
            "ood_success",
            "modes_in_band",
            "updates",
            "tokens_prompt",
            "cpu_s",
            "envs_accepted",
            "agreement_before",
            "agreement_after",
        ):
            assert key in m
    assert history[1]["updates"] > history[0]["updates"] > 0
    for r in (1, 2):
        load_snapshot(coda_run / "memory" / f"round-{r:04d}")  # verified: checksums, schema, programs
    info = inspect(coda_run)
    assert info["round"] == 2 and info["scenes"] > 0 and info["diagnoses"] > 0
    assert info["scenes_without_lineage"] == 0
    # round 2 ran the control experiments of round 1's modes, and they decided (issue #14)
    assert info["validated_modes"] + info["rejected_modes"] >= 1 and info["rejected_diagnoses"] >= 1
    mem = load_snapshot(coda_run / "memory" / "round-0002")
    programs = mem.programs()
    targeted = [s for s in mem.rows("scenes") if s["split"] == "targeted"]
    controls = {(s["program_id"], s["base_hash"]) for s in mem.rows("scenes") if s["split"] == "control"}
    for s in targeted:  # every targeted variant names its program and base, and has a matching control
        assert programs[s["program_id"]]["kind"] == "generation"
        assert (s["program_id"], s["base_hash"]) in controls
    run = json.loads((coda_run / "run.json").read_text())
    assert run["method"] == "coda" and "git_sha" in run


def test_a_run_prints_one_readable_line_per_round_and_keeps_its_json_line(coda_run_process):
    """Per round, one line on stderr a person can follow (success by split, modes, losses, evaluation,
    seconds) with the numbers rounds.json records; the final metrics stay one JSON line on stdout."""
    out, proc = coda_run_process
    history = json.loads((out / "rounds.json").read_text())
    lines = [x for x in proc.stderr.splitlines() if re.match(r"\[coda seed 0\] round \d+/\d+ \| ", x)]
    assert len(lines) == len(history) == 2, proc.stderr[-3000:]
    for line, m in zip(lines, history):
        assert line.startswith(f"[coda seed 0] round {m['round']}/{len(history)} | ")
        for split, rate in m["success_by_split"].items():
            assert f"{split} {100 * rate:.0f}%" in line
        assert f"({m['rollouts']} rollouts)" in line
        assert f"modes {m['modes']} ({m['validated_modes']} validated, {m['modes_in_band']} in band)" in line
        assert f"critic {m['critic_loss']:.3g}" in line and f"policy {m['policy_loss']:.3g}" in line
        if m["ood_success"] is None:
            assert "no evaluation this round" in line
        else:
            assert f"eval OOD {100 * m['ood_success']:.1f}% (n={m['n_ood']})" in line
        assert line.endswith(f"{m['round_updates']} updates, {m['wall_s']:.1f} s")
    final = json.loads(proc.stdout.strip().splitlines()[-1])
    assert final["round"] == history[-1]["round"] and final["ood_success"] == history[-1]["ood_success"]


def test_snapshots_record_the_code_and_params_that_wrote_them(coda_run):
    """Every round's snapshot records, when written, the git commit, the dirty flag and the run's resolved
    parameters (those of run.json) with their hash; its card shows them."""
    run = json.loads((coda_run / "run.json").read_text())
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    for r in (1, 2):
        snap = coda_run / "memory" / f"round-{r:04d}"
        prov = json.loads((snap / "manifest.json").read_text())["extra"]["provenance"]
        assert prov["git_sha"] == (head.stdout.strip() or None) and isinstance(prov["git_dirty"], bool)
        assert prov["profile"] == run["profile"] and prov["params"] == {"coevolve": run["coevolve"]}
        card = (snap / "README.md").read_text()
        assert prov["git_sha"] in card and prov["params_sha256"] in card and f'"memory/round-{r:04d}"' in card


def test_smoke_profile_runs_control_experiments_that_can_decide():
    """Issue #14: modes are diagnosed in round 1 and first tested in round 2, and the smoke policy succeeds on
    few base scenes (the controls), so the smoke profile needs two rounds and a control experiment that a
    single pair with a succeeding control and a failing variant validates."""
    import numpy as np

    from coda.config import load_params
    from coda.engine import generate as gen

    c = load_params(ROOT / "params.yaml", profile="smoke").coevolve
    assert c.ablation_rounds <= c.rounds < c.long_rounds and c.rounds >= 2
    program = {"perturbs": "mass", "id": "gp-x"}
    mode = gen.ModeView("push/reach/mass/0", "push", "candidate", 0.5, 0.0, program, "mass", 3)
    reqs = gen.memory_requests(
        "push",
        c.envs_per_family,
        [mode],
        ["{}"],
        ["{}"],
        seed=0,
        round_=2,
        novel_share=c.novel_share,
        replay_share=c.replay_share,
        band=c.success_band,
        rng=np.random.default_rng(0),
        min_pairs=c.min_pairs,
    )
    n = sum(q.split == "targeted" for q in reqs)
    assert n >= c.min_pairs  # the candidate cap still leaves the tiny profile one test (`gen.allocate`)

    def decide(targeted, control):
        from coda.engine.control import decide as control_decision

        test = control_decision(
            targeted, control, margin=c.validate_margin, min_pairs=c.min_pairs, alpha=c.validate_alpha
        )
        return test["decision"]

    assert decide([False] * n, [True] + [False] * (n - 1)) == "validated"
    assert decide([False] * n, [False] * n) == "rejected"


def test_memory_inspect_cli(coda, coda_run):
    out = json.loads(coda("memory", "inspect", str(coda_run), "--json").stdout)
    for key in (
        "modes",
        "validated_modes",
        "generation_programs",
        "training_programs",
        "rejected_diagnoses",
        "scenes",
        "scenes_without_lineage",
        "round",
    ):
        assert key in out
    assert out == json.loads(json.dumps(inspect(str(coda_run))))  # the values: the verified summary itself


@pytest.mark.parametrize("method", ["sr_guided", "train_store_only"])
def test_other_methods_run_on_the_same_budget(method, run_method, coda_run, tmp_path):
    run_method(tmp_path / method, method=method)
    mine = json.loads((tmp_path / method / "rounds.json").read_text())
    ref = json.loads((coda_run / "rounds.json").read_text())
    # the same environment budget per round (2 * envs_per_family per family)
    assert [m["envs_requested"] for m in mine] == [m["envs_requested"] for m in ref]
    assert mine[-1]["n_ood"] == ref[-1]["n_ood"]


def test_unknown_method_is_a_one_line_error(run_method, tmp_path):
    r = run_method(tmp_path / "x", method="nope", check=False)
    assert r.returncode == 2 and "--method" in r.stderr and "Traceback" not in r.stderr
    assert set(METHODS) >= {
        "sft",
        "domain_rand",
        "uniform",
        "sr_guided",
        "critic_no_memory",
        "coda",
        "gen_store_only",
        "train_store_only",
    }


def _snapshot_digest(run: Path) -> dict:
    manifest = json.loads((run / "memory" / "round-0002" / "manifest.json").read_text())
    return {k: v["sha256"] for k, v in manifest["files"].items()}


def test_killed_run_resumes_to_the_uninterrupted_result(coda, run_method, coda_run, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "coda", *coda.run_args(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while not (out / "rounds" / "round-0001" / "state.json").exists():  # kill it during round 2
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "rounds" / "round-0002").exists()
    run_method(out)
    assert _snapshot_digest(out) == _snapshot_digest(coda_run)
    a = {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k not in TIMING}
    b = {k: v for k, v in json.loads((coda_run / "metrics.json").read_text()).items() if k not in TIMING}
    assert a == b
    assert (out / "train_log.csv").read_bytes() == (coda_run / "train_log.csv").read_bytes()


def test_training_is_logged_per_update(coda_run, tiny_params):
    """train_log.csv: one row per critic and per policy update of every round, in order, with finite losses;
    rounds.json carries the round's mean losses."""
    import csv
    import math

    import yaml

    c = yaml.safe_load(tiny_params.read_text())["profiles"]["smoke"]["coevolve"]
    history = json.loads((coda_run / "rounds.json").read_text())
    rows = list(csv.DictReader((coda_run / "train_log.csv").open()))
    for kind, per_round in (
        ("critic", [c["critic_steps"]] * 2),
        ("policy", [m["round_updates"] for m in history]),  # the scheduler may end a round early
    ):
        mine = [r for r in rows if r["kind"] == kind]
        assert per_round[0] > 0 and [int(r["step"]) for r in mine] == list(range(1, sum(per_round) + 1))
        assert [int(r["round"]) for r in mine] == [1] * per_round[0] + [2] * per_round[1]
        assert all(math.isfinite(float(r["loss"])) for r in mine)
    assert all(isinstance(m["policy_loss"], float) and isinstance(m["critic_loss"], float) for m in history)


def test_memory_reuse_trains_on_a_frozen_memory(run_method, coda_run, tmp_path):
    out = tmp_path / "reuse"
    run_method(out, method="memory_reuse", extra=["--memory", str(coda_run)])
    rounds = json.loads((out / "rounds.json").read_text())
    ref = json.loads((coda_run / "rounds.json").read_text())
    assert [m["envs_requested"] for m in rounds] == [m["envs_requested"] for m in ref]
    assert all(m["diagnoses"] == 0 for m in rounds)  # nothing new is diagnosed or generated
    source, reused = (
        load_snapshot(coda_run / "memory" / "round-0002"),
        load_snapshot(out / "memory" / "round-0002"),
    )
    assert source == reused  # the memory stays frozen
    missing = run_method(tmp_path / "x", method="memory_reuse", check=False)
    assert missing.returncode == 2 and "--memory" in missing.stderr


def test_transfer_lifts_validated_programs_to_other_families(small_data, tiny_params, sft_dir, tmp_path):
    import numpy as np

    from coda import data
    from coda.coevolve import make_loop
    from coda.config import load_params
    from coda.engine.compile import TemplateCompiler
    from coda.engine.interpret import apply_generation
    from coda.sim.assets import load_catalog

    cfg = load_params(tiny_params, "smoke")
    run = make_loop(cfg, "coda", 0, small_data, sft_dir, tmp_path / "run", executor=None)
    scene = data.seed_scenes(small_data, "pick_place")[0]
    diagnosis = {
        "family": "pick_place",
        "variant": scene.task.variant,
        "phase": "grasp",
        "factor": "target_yaw",
        "cause": "the gripper closed beside the object",
        "confidence": 0.9,
        "evidence_steps": [10],
    }
    program = TemplateCompiler().compile(diagnosis, scene).generation
    mode_id = run.memory.add_mode(
        "pick_place",
        "grasp",
        "target_yaw",
        diagnosis["cause"],
        1,
        generation_program_id=run.memory.add_program(program),
    )
    run.memory.set_mode_status(mode_id, "validated", {"test": "by hand"})
    run.modes.transfer_programs(2)
    lifted = [m for m in run.memory.modes() if m.family != "pick_place"]
    assert {m.family for m in lifted} >= {"stack", "push"}  # both have a graspable/movable target with a yaw
    catalog = load_catalog(small_data)
    for mode in lifted:
        prog = run.memory.program(mode.generation_program_id)
        assert prog["source"] == "transfer" and prog["parent"] == program["id"] and mode.status == "candidate"
        base = data.seed_scenes(small_data, mode.family)[0]
        variant = apply_generation(prog, base, np.random.default_rng(0), catalog)
        assert variant.family == mode.family
    run.modes.transfer_programs(3)  # idempotent: each program is lifted once per family
    assert len([m for m in run.memory.modes() if m.family != "pick_place"]) == len(lifted)
