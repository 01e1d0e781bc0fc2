"""Where one pipeline stage's time goes, from DVC's call to its last write; prints JSON (seconds per phase).

Run it in a copy of the project on the smoke profile whose stage dependencies are already built (``scenes``,
``runs/sft`` for a run stage), e.g. the copy ``benchmarks/smoke_pipeline.py --keep DIR`` leaves:

    python benchmarks/stage_overhead.py --repo DIR [--stage table1@uniform-0] [--no-dvc]

Phases, each measured on its own, in wall seconds and (``*_cpu_s``) CPU seconds of the process tree, which
another job on the cores disturbs much less:

* ``dvc``: ``dvc repro -f -s STAGE`` timed end to end, with every ``coda`` process it starts timed by a shim
  on PATH (``coda_processes``: one entry per process, its subcommand and seconds); ``dvc_own_s`` is what is
  left: DVC's parsing, dependency hashing, output hashing and caching, dvc.lock. Then ``dvc_noop_s`` (the same
  call again, up to date) and ``dvc_noop_cold_s`` (again with an empty DVC site cache: every dependency
  re-hashed, as on a CI machine).
* ``import``: ``python -X importtime -c 'import coda.cli'`` and the modules a run pulls in later (torch,
  pybullet, transformers, pyarrow, ...): the cumulative import seconds of each top-level package.
* ``run``: the stage's first ``coda run`` under cProfile (``--out`` a scratch directory): the cumulative
  seconds of the run's parts (parameters, domain set-up, the workers' start, the SFT load, the rehearsal
  demonstrations, each round, the checkpoints, the text encoder, closing the workers), next to the rounds'
  own ``wall_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
# (label, file suffix, function name): the parts of a `coda run` that cProfile's cumulative times report
RUN_PARTS = (
    ("load_params", "coda/config/loading.py", "load_params"),
    ("domain_setup", "coda/domains/pybullet.py", "__init__"),
    ("executor_start", "coda/commands.py", "_executor"),
    ("loop_setup", "coda/coevolve/loop.py", "__init__"),
    ("sft_load_fresh", "coda/coevolve/state.py", "fresh"),
    ("rehearsal", "coda/domains/pybullet.py", "rehearsal"),
    ("rounds", "coda/coevolve/loop.py", "round"),
    ("evaluate_only", "coda/coevolve/loop.py", "_evaluate_only"),
    ("checkpoint_save", "coda/coevolve/state.py", "save"),
    ("git_info", "coda/coevolve/state.py", "git_info"),
    ("text_encode", "coda/learn/text.py", "encode"),
    ("text_model_load", "coda/learn/text.py", "_load_minilm"),
    ("executor_map", "coda/sim/executor/local.py", "map"),
    ("executor_close", "coda/sim/executor/local.py", "close"),
    ("publish_actor", "coda/coevolve/loop.py", "publish"),
    ("run_total", "coda/cli.py", "run"),
)
PACKAGES = ("coda", "torch", "numpy", "pybullet", "transformers", "pyarrow", "pandas", "matplotlib", "yaml")


def _env(repo: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(repo),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        DVC_NO_ANALYTICS="1",
        CODA_NO_PROGRESS="1",
        **extra,
    )
    return env


def _stage_cmd(repo: Path, stage: str) -> str:
    """The stage's command as DVC would run it (matrix/foreach expanded), from `dvc stage list`-free parsing:
    the `cmd` that `dvc repro --dry` prints."""
    res = subprocess.run(
        [str(BIN / "dvc"), "repro", "--dry", "-f", "-s", stage],
        cwd=repo,
        env=_env(repo),
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line[2:] for line in res.stdout.splitlines() if line.startswith("> ")]
    if not lines:
        raise SystemExit(f"{stage}: no command in `dvc repro --dry`:\n{res.stdout}")
    return lines[0]


def _shim(tmp: Path, log: Path) -> Path:
    """A directory holding a `coda` that runs the real one and appends one JSON line to `log`: its argv, wall
    seconds and the CPU seconds of its process tree (the workers included)."""
    shim = tmp / "shim"
    shim.mkdir()
    real = shutil.which("coda", path=str(BIN)) or str(BIN / "coda")
    (shim / "coda").write_text(
        f"#!{sys.executable}\n"
        "import json, resource, subprocess, sys, time\n"
        # a shell may exec the last command of `a && b` in place: its earlier children count in RUSAGE_CHILDREN
        "ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()\n"
        f"rc = subprocess.call([{real!r}, *sys.argv[1:]])\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "cpu = ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime\n"
        "row = {'argv': sys.argv[1:], 's': time.perf_counter() - t0, 'cpu_s': cpu}\n"
        f"open({str(log)!r}, 'a').write(json.dumps(row) + '\\n')\n"
        "sys.exit(rc)\n"
    )
    (shim / "coda").chmod(0o755)
    return shim


def _timed(
    args: list[str], repo: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `args`; returns the result, its wall seconds and the CPU seconds of its process tree."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return res, wall, (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)


def dvc_phases(repo: Path, stage: str) -> dict:
    dvc = str(BIN / "dvc")
    with tempfile.TemporaryDirectory(prefix="stage-overhead-") as tmp:
        tmp = Path(tmp)
        log = tmp / "calls.log"
        env = _env(repo)
        env["PATH"] = f"{_shim(tmp, log)}{os.pathsep}{env['PATH']}"
        res, total, total_cpu = _timed([dvc, "repro", "-f", "-s", stage], repo, env)
        if res.returncode != 0:
            raise SystemExit(f"dvc repro -s {stage} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        _, noop, noop_cpu = _timed([dvc, "repro", "-s", stage], repo, env)
        cold = _env(repo, DVC_SITE_CACHE_DIR=str(tmp / "site"))
        _, noop_cold, noop_cold_cpu = _timed([dvc, "repro", "-s", stage], repo, cold)
    coda_s, coda_cpu = sum(c["s"] for c in calls), sum(c["cpu_s"] for c in calls)
    return {
        "dvc_repro_s": round(total, 2),
        "dvc_repro_cpu_s": round(total_cpu, 2),
        "coda_processes": [
            {"cmd": c["argv"][0], "s": round(c["s"], 2), "cpu_s": round(c["cpu_s"], 2)} for c in calls
        ],
        "dvc_own_s": round(total - coda_s, 2),
        "dvc_own_cpu_s": round(total_cpu - coda_cpu, 2),
        "dvc_noop_s": round(noop, 2),
        "dvc_noop_cpu_s": round(noop_cpu, 2),
        "dvc_noop_cold_s": round(noop_cold, 2),
        "dvc_noop_cold_cpu_s": round(noop_cold_cpu, 2),
    }


def import_phases(repo: Path) -> dict:
    """Cumulative import seconds per top-level package, importing what a run stage imports."""
    code = (
        "import coda.cli, coda.commands, coda.coevolve, coda.domains.pybullet, coda.learn.policies, coda.memory.store, "
        "coda.learn.text, coda.sim.world"
    )
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=repo,
        env=_env(repo),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    per: dict[str, float] = {}
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and m.group(4).split(".")[0] in PACKAGES and "." not in m.group(4):
            per[m.group(4)] = max(per.get(m.group(4), 0.0), int(m.group(2)) / 1e6)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import coda.cli"], cwd=repo, env=_env(repo), check=True)
    cli = time.perf_counter() - t0
    return {
        "import_run_modules_s": round(wall, 2),
        "import_coda_cli_s": round(cli, 2),
        "by_package_s": {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
    }


def run_phases(repo: Path, stage_cmd: str) -> dict:
    """The stage's first `coda run ...` under cProfile, into a scratch --out."""
    first = stage_cmd.split("&&")[0].strip()
    argv = shlex.split(first)
    if argv[:2] != ["coda", "run"]:
        return {}
    with tempfile.TemporaryDirectory(prefix="stage-overhead-run-") as tmp:
        out = Path(tmp) / "run"
        argv = argv[1:]
        argv[argv.index("--out") + 1] = str(out)
        prof = Path(tmp) / "run.prof"
        script = Path(tmp) / "profiled.py"
        script.write_text(
            "import cProfile, sys, time\n"
            "if __name__ == '__main__':  # the workers are spawned: they import this file\n"
            "    t0 = time.perf_counter()\n"
            "    import coda.cli\n"
            "    print('IMPORT', time.perf_counter() - t0, file=sys.stderr)\n"
            f"    cProfile.runctx('coda.cli.run(argv)', globals(), {{'argv': {argv!r}}}, {str(prof)!r})\n"
        )
        res, wall, cpu = _timed([sys.executable, str(script)], repo, _env(repo))
        if res.returncode != 0:
            raise SystemExit(f"coda {' '.join(argv)} failed:\n{res.stderr[-3000:]}")
        stats = pstats.Stats(str(prof)).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
        parts = {}
        for label, suffix, name in RUN_PARTS:
            ct = [v[3] for (f, _, n), v in stats.items() if n == name and f.endswith(suffix)]
            if ct:
                parts[label] = round(sum(ct), 2)
        rounds = json.loads((out / "rounds.json").read_text()) if (out / "rounds.json").exists() else []
        imported = re.search(r"IMPORT ([\d.]+)", res.stderr)
    return {
        "process_s": round(wall, 2),
        "process_cpu_s": round(cpu, 2),
        "cli_import_s": round(float(imported.group(1)), 2) if imported else None,
        "parts_s": parts,
        "rounds_wall_s": [r.get("wall_s") for r in rounds],
        "rounds_time_s": [r.get("time_s") for r in rounds],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--repo", type=Path, required=True, help="a smoke-profile copy with the stage's deps built"
    )
    ap.add_argument("--stage", default="table1@uniform-0")
    ap.add_argument("--no-dvc", action="store_true", help="skip the `dvc repro` phases")
    ap.add_argument("--no-run", action="store_true", help="skip the profiled `coda run`")
    args = ap.parse_args()
    repo = args.repo.resolve()
    cmd = _stage_cmd(repo, args.stage)
    out: dict = {"stage": args.stage, "cmd": cmd}
    out["import"] = import_phases(repo)
    if not args.no_run:
        out["run"] = run_phases(repo, cmd)
    if not args.no_dvc:
        out["dvc"] = dvc_phases(repo, args.stage)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
