"""Helpers of the reliability suite (fixtures are in conftest.py): the tiny params and a `python -m coda`
runner."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["pick_place", "push"]
# metrics that measure time, not results (they differ between identical runs)
TIMING = ("wall_s", "cpu_s", "worker_cpu_s", "schedule_checks")


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in TIMING}


class Coda:
    """Runs `python -m coda ...` (in the repository root) and, for `run`, the tiny co-evolution run."""

    def __init__(self, params: Path, data: Path, sft: Path | None = None):
        self.params, self.data, self.sft = params, data, sft

    def __call__(self, *args, check=True, env=None, timeout=600, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [sys.executable, "-m", "coda", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            timeout=timeout,
            **kw,
        )
        if check:
            assert r.returncode == 0, r.stderr[-3000:]
        return r

    def run_args(self, out: Path, workers: int = 2, params: Path | None = None) -> list[str]:
        return [
            "run",
            "--params",
            str(params or self.params),
            "--profile",
            "smoke",
            "--method",
            "coda",
            "--seed",
            "0",
            "--sft",
            str(self.sft),
            "--out",
            str(out),
            "--data",
            str(self.data),
            "--workers",
            str(workers),
        ]

    def run(self, out: Path, workers: int = 2, params: Path | None = None, **kw):
        return self(*self.run_args(out, workers, params), **kw)


def tiny_params(**coevolve) -> dict:
    """params.yaml with the smoke profile shrunk to the small data set and two families."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    smoke = params["profiles"]["smoke"]
    smoke["data"]["families"] = FAMILIES
    smoke["sft"].update(
        demos_per_family=2, demo_repeats=1, epochs=20, eval_id_per_family=1, eval_ood_per_suite=1
    )
    smoke["coevolve"].update(
        rounds=2,
        envs_per_family=2,
        min_pairs=1,
        demos_per_family=1,
        rehearsal_per_family=1,
        critic_steps=4,
        policy_updates=4,
        batch_size=16,
        check_every=2,
        scheduling="adaptive",
        eval_id_per_family=1,
        eval_ood_per_suite=1,
        **coevolve,
    )
    return params


def write_params(path: Path, params: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(params))
    return path
