"""Wall time of the smoke pipeline, stage by stage: `dvc repro` on a fresh copy of the project; prints JSON.

The copy holds what `git clone` would give (tracked and untracked files that git does not ignore) with the
`smoke` profile and one Table 1 seed selected, exactly as `tests/test_pipeline.py` prepares it (that test uses
`prepare` and `repro` from here). Nothing else comes along: no `data/`, no DVC cache or remote, so the
timed repro includes the `scenes` stage, which builds the smoke profile's scenes from scratch, as on a fresh
clone. Without the `[libero]` extra the LIBERO stages are left out. Prints one JSON object:

    {"profile": "smoke", "total_s", "without_libero_s", "libero_s", "stages": {name: seconds}, "libero": bool,
     "returncode"}

A stage's seconds run from its "Running stage" line to the next stage's (DVC's bookkeeping included);
`without_libero_s` is the total less the LIBERO stages (`libero_sft`, `libero_coda`, `nb10_libero_pro`).
Close other work first: the machine has two cores and every stage uses them.

    python benchmarks/smoke_pipeline.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LIBERO_STAGES = ("libero_sft", "libero_coda", "libero_uniform", "nb10_libero_pro")
# Regime B's copies of regime A's grids (the same commands on scenes_b and regime B's SFT): `prepare` can leave
# them out, keeping regime B's scenes, SFT, Table 1 and report (the test suite does, to halve its longest test)
REGIME_B_GRIDS = (
    "sft_b_regime_b",
    "data_scaling_regime_b",
    "budget_regime_b",
    "ablation_regime_b",
    "long_regime_b",
    "backbone_regime_b",
)


def env_for(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(repo),  # the copy's `coda`, not the editable install's
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        DVC_NO_ANALYTICS="1",
        CODA_NO_PROGRESS="1",
    )
    return env


def sh(args: list[str], repo: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    res = subprocess.run(args, cwd=repo, env=env_for(repo), capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return res


def copy_working_tree(repo: Path) -> Path:
    """The project's tracked and untracked-but-not-ignored files copied to `repo` (what a clone of a pushed
    branch holds: no data/, runs/, DVC cache or remote)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    return repo


def commit_all(repo: Path, message: str) -> Path:
    """`repo` as its own git repository with everything committed."""
    for args in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
    ):
        sh(args, repo)
    return repo


def prepare(
    repo: Path, *, libero: bool, regime_b_grids: bool = True, variants: Sequence[str] | None = None
) -> Path:
    """A fresh copy of the project at `repo` on the smoke profile with Table 1 seed 0, committed to its own
    git repository (no data/, no DVC remote, none of the committed `cpu` records); `libero=False` leaves the
    LIBERO stages out, `regime_b_grids=False` the stages of `REGIME_B_GRIDS`, and `variants` keeps only those
    ablations of `experiments.variants` (the tables show the others as not run)."""
    copy_working_tree(repo)
    from coda.report.plots_page import DEFAULT, write_template

    write_template(repo / DEFAULT)  # as `make venv` does in a clone: `dvc plots show`'s page (git-ignored)
    shutil.rmtree(repo / "records", ignore_errors=True)  # the `cpu` runs' records: smoke writes its own
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["base"]["profile"] = "smoke"
    params["experiments"]["seeds"] = [0]
    params["experiments"]["budget"]["envs"] = [2]  # one more budget beside the profile's own
    if variants is not None:
        known = params["experiments"]["variants"]
        unknown = sorted(set(variants) - set(known))
        if unknown:
            raise ValueError(f"variants: no experiments.variants.{unknown[0]} in params.yaml")
        params["experiments"]["variants"] = {k: v for k, v in known.items() if k in variants}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())
    if not libero:
        for name in LIBERO_STAGES:
            del stages["stages"][name]
        for fig in ("table2_libero_pro.md", "table2_libero_curve.png", "libero_coverage.md"):
            stages["stages"]["figures_index"]["deps"].remove(f"figures/{fig}")
        if "metrics" in stages:
            stages["metrics"] = [m for m in stages["metrics"] if "libero" not in m]
    if not regime_b_grids:
        for name in REGIME_B_GRIDS:
            del stages["stages"][name]
        stages["stages"]["report_regime_b"]["deps"].remove("metrics/regime_b/sft_b.json")
    if not (libero and regime_b_grids):
        (repo / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    return commit_all(repo, "smoke")


def repro(repo: Path, timeout: float = 3600) -> dict:
    """Run `dvc repro` in `repo`, timing each stage; returns the JSON summary plus `log` (DVC's output)."""
    t0 = last = time.perf_counter()
    stages: dict[str, float] = {}
    current, log = None, []
    proc = subprocess.Popen(
        [str(BIN / "dvc"), "repro"],
        cwd=repo,
        env=env_for(repo),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    for line in proc.stdout:
        log.append(line)
        if line.startswith("Running stage '"):
            now = time.perf_counter()
            if current is not None:
                stages[current] = round(now - last, 1)
            current, last = line.split("'")[1], now
    code = proc.wait()
    watchdog.cancel()
    end = time.perf_counter()
    if current is not None:
        stages[current] = round(end - last, 1)
    libero_s = sum(s for name, s in stages.items() if name in LIBERO_STAGES)
    return {
        "profile": "smoke",
        "total_s": round(end - t0, 1),
        "without_libero_s": round(end - t0 - libero_s, 1),
        "libero_s": round(libero_s, 1),
        "libero": any(name in stages for name in LIBERO_STAGES),
        "returncode": code,
        "stages": stages,
        "log": "".join(log),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--keep", type=Path, help="make the copy here and keep it (default: a temporary directory)"
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from coda.sim import libero

    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="coda-smoke-")
        repo = Path(tmp.name) / "coda"
    else:
        repo = args.keep
        if repo.exists():
            raise SystemExit(f"--keep {repo}: already exists")
    try:
        result = repro(prepare(repo, libero=libero.available()))
    finally:
        if tmp is not None:
            tmp.cleanup()
    result.pop("log")
    print(json.dumps(result, indent=1))
    sys.exit(result["returncode"])


if __name__ == "__main__":
    main()
