"""`coda verify TARGET`: re-make one committed result in a scratch folder and compare it with the one in git.

TARGET is a stage as dvc.yaml names it (``table1@uniform-1``) or a record folder. A stage's command runs
unchanged in the scratch folder, which links the stage's inputs from the repository (``params.yaml``, ``scenes``,
``runs/sft/policy``, ...; the `coda` package itself is the installed one): its outputs land there, and those
that dvc.yaml keeps in git (``cache: false``) are compared with the committed ones. An input missing here (a
fresh clone has no DVC cache: ``scenes``, the ``runs/`` of other stages) is first re-made, in the scratch folder,
by the stage that makes it. The instruction-embedding cache (``$CODA_TEXT_CACHE``) starts empty there too. A record folder that a stage makes is verified through that stage; any other
(``records/reference/...``) is re-made from its ``run.json`` (method, seed, profile) with `coda run`'s
defaults: the profile's scenes built in the scratch folder, the SFT policy of ``runs/sft``, then
`coda record`. ``--update`` re-makes such a record in place (or a new one, from ``--method/--seed/--profile``).

Files compare by `coda.maintenance.same_result` (timings and git provenance aside); `coda.differences` names
the first difference down to the JSON key, the table row and column or the CSV line and column, with both
values. Exit 0 identical, 1 different, 2 on a user error (an unknown stage, a failed re-run).

    $ coda verify records/reference/smoke-coda-0
    $ coda verify table1@uniform-1 --scratch /tmp/check
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coda.differences import compare, report
from coda.errors import UserError
from coda.maintenance import record

DONE = "verify.json"  # in the scratch folder: the steps of a finished re-run (compared again, not re-run)


# -- what to re-run ----------------------------------------------------------------------------------------
def _repo():
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        return Repo()
    except DvcException as err:  # not in a DVC project, or not in a git checkout
        raise UserError(f"coda verify runs inside the repository's git checkout: {err}") from None


def _producer(repo, path: str):
    """The stage whose output `path` is or lies in, or None."""
    from dvc.exceptions import DvcException

    try:
        outs = repo.find_outs_by_path(os.path.join(repo.root_dir, path), strict=False)
    except DvcException:
        return None
    return outs[0].stage if outs else None


def _stage(repo, name: str):
    from dvc.exceptions import DvcException

    try:
        found = repo.stage.collect(name)
    except DvcException:
        found = []
    if len(found) == 1 and found[0].addressing == name:
        return found[0]
    if len(found) > 1:
        some = ", ".join(s.addressing for s in found[:3])
        raise UserError(f"{name!r} names {len(found)} stages ({some}, ...): give one of them")
    close = difflib.get_close_matches(name, sorted(s.addressing for s in repo.index.stages), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `dvc stage list` lists them"
    raise UserError(f"unknown stage {name!r}: not a stage of dvc.yaml, nor a record folder{hint}")


def _stage_plan(repo, stage, plan: dict, seen: set[str]) -> None:
    """Add `stage`'s step to `plan` after those that make its inputs missing here; link the others."""
    root, seen = Path(repo.root_dir), seen | {stage.addressing}
    for dep in (str(d.def_path) for d in stage.deps):
        if dep == "coda" or dep.startswith("coda/"):  # the code: the installed package
            continue
        if (root / dep).exists():
            plan["links"].add(dep)
            continue
        maker = _producer(repo, dep)
        if maker is None or maker.addressing in seen:
            raise UserError(f"{stage.addressing} needs {dep}, which is not here and no other stage makes")
        if all(maker.addressing != s[0] for s in plan["steps"]):
            print(
                f"{dep} is not here (no DVC cache): re-making it first ({maker.addressing})", file=sys.stderr
            )
            _stage_plan(repo, maker, plan, seen)
    cmd = stage.cmd if isinstance(stage.cmd, str) else " && ".join(stage.cmd)
    plan["steps"].append((stage.addressing, cmd))
    plan["outs"] += [str(o.def_path) for o in stage.outs]


def stage_plan(repo, name: str) -> dict:
    """Steps, links and compared outputs that verify stage `name`."""
    stage = _stage(repo, name)
    # besides the declared inputs: dvc.lock (the reports read a stage's profile there), data.dvc and data/
    # (the scenes stage takes them from data/, pulled or rebuilt to match data.dvc)
    links = {x for x in ("dvc.lock", "data.dvc", "data") if (Path(repo.root_dir) / x).exists()}
    plan = {"label": f"stage {name}", "steps": [], "links": links | {"params.yaml"}, "outs": []}
    _stage_plan(repo, stage, plan, set())
    kept = [str(o.def_path) for o in stage.outs if not o.use_cache]
    if not kept:
        raise UserError(
            f"{name} keeps its outputs in the DVC cache, not in git: nothing committed to compare"
        )
    plan["compare"] = [(p, Path(repo.root_dir) / p, p) for p in kept]
    return plan


def record_plan(repo, folder: Path, params: str, args: argparse.Namespace) -> dict:
    """Steps that re-make record `folder` from its run.json (or, with --update, from --method/--seed)."""
    run_json = folder / "run.json"
    if run_json.is_file():
        run = json.loads(run_json.read_text())
        if args.profile not in (None, run.get("profile")):
            raise UserError(f"--profile {args.profile}: {run_json} says profile {run.get('profile')}")
    elif args.update and args.method:
        from coda.config import load_params

        profile = load_params(params, args.profile).profile
        run = {"method": args.method, "seed": args.seed or 0, "profile": profile}
    else:
        raise UserError(f"{folder}: no run.json, and not an output of a dvc.yaml stage")
    if run.get("method") == "memory_reuse" or not all(k in run for k in ("method", "seed", "profile")):
        raise UserError(f"{run_json}: verify re-makes a record from method, seed and profile (no --memory)")
    profile, out = ["coda", "--profile", str(run["profile"])], f"runs/{folder.name}"
    how = ["run", "--method", str(run["method"]), "--seed", str(run["seed"])]
    steps = [
        ("scenes", shlex.join([*profile, "data", "scenes", "--out", "scenes"])),
        ("run", shlex.join([*profile, *how, "--data", "scenes", "--out", out])),
        ("record", shlex.join(["coda", "record", out, "record"])),
    ]
    links = {x for x in ("data.dvc", "data", "runs/sft/policy") if (Path(repo.root_dir) / x).exists()}
    return {
        "label": f"{folder} ({shlex.join([*profile, *how])})",
        "steps": steps,
        "links": links | {"params.yaml"},
        "outs": ["scenes", out, "record"],
        "compare": [(str(folder), folder, "record")],
        "update": (out, folder),
    }


# -- re-running --------------------------------------------------------------------------------------------
def _duration(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60:02d} s" if s < 3600 else f"{s // 3600} h {s % 3600 // 60:02d} min"


def _last_line(log: Path) -> str:
    with open(log, "rb") as fh:
        fh.seek(max(0, fh.seek(0, 2) - 2000))
        text = fh.read().decode(errors="replace").replace("\r", "\n")
    return next((x.strip() for x in reversed(text.splitlines()) if x.strip()), "")


def _linked(ws: Path, rel: str) -> bool:
    """Whether `rel` is, or lies in, a link of `ws` to the repository."""
    parts = Path(rel).parts
    return any((ws.joinpath(*parts[:i])).is_symlink() for i in range(1, len(parts) + 1))


def prepare(plan: dict, root: Path, ws: Path, params: str) -> None:
    """Link the plan's inputs into `ws`; never an output's folder (a command must not write into the repository)."""
    for rel in sorted(plan["links"]):  # parents first: an input inside a linked one is linked already
        if not _linked(ws, rel):
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).symlink_to((Path(params) if rel == "params.yaml" else root / rel).resolve())
    for rel in plan["outs"]:
        if _linked(ws, rel):
            raise UserError(f"{rel}: an output inside a linked input; verify would write into the repository")
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)


def rerun(steps: list[tuple[str, str]], ws: Path, log: Path) -> list[float]:
    """Run the steps' shell commands in `ws` (output to `log`, a progress line on a terminal); their times."""
    quiet = {"DVC_NO_ANALYTICS": "1", "CODA_NO_PROGRESS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    quiet["CODA_TEXT_CACHE"] = str(
        ws / ".text-cache"
    )  # empty, as on a fresh clone: nothing computed elsewhere
    env = {
        **os.environ,
        **quiet,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    tty, times = sys.stderr.isatty(), []
    for i, (label, cmd) in enumerate(steps, 1):
        short = cmd if len(cmd) <= 160 else cmd[:157] + "..."
        print(f"[{i}/{len(steps)}] {label}: {short}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        with open(log, "a") as fh:
            fh.write(f"$ {cmd}\n")
            fh.flush()
            proc = subprocess.Popen(cmd, shell=True, cwd=ws, env=env, stdout=fh, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                time.sleep(1)
                if tty:  # the step, its time so far and the last line it wrote
                    line = (
                        f"  [{i}/{len(steps)}] {label} {_duration(time.monotonic() - t0)}  {_last_line(log)}"
                    )
                    sys.stderr.write("\r\033[K" + line[: shutil.get_terminal_size().columns - 1])
                    sys.stderr.flush()
        if tty:
            sys.stderr.write("\r\033[K")
        times.append(time.monotonic() - t0)
        if proc.returncode:
            tail = "\n  ".join(log.read_text(errors="replace").replace("\r", "\n").splitlines()[-12:])
            raise UserError(
                f"the re-run failed ({label}: exit {proc.returncode}); the end of {log}:\n  {tail}"
            )
    return times


# -- the command -------------------------------------------------------------------------------------------
def add_verify_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``verify TARGET [--scratch DIR] [--update]`` to the ``coda`` subparsers."""
    p = subparsers.add_parser(
        "verify",
        help="re-make one committed result (a dvc.yaml stage or a record folder) and compare it with git's",
    )
    p.add_argument("target", metavar="TARGET", help="a stage (table1@uniform-1) or a record folder")
    p.add_argument(
        "--scratch",
        metavar="DIR",
        help="re-run here and keep it (an empty folder, or one holding a finished re-run of the same steps, "
        "compared again without re-running); default: a temporary folder, removed when identical",
    )
    p.add_argument("--update", action="store_true", help="replace a record outside dvc.yaml with the re-run")
    p.add_argument("--method", help="--update of a new record folder: its method (with --seed, --profile)")
    p.add_argument("--seed", type=int, default=None, help="--update of a new record folder: its seed (0)")
    return p


def run_verify_command(args: argparse.Namespace) -> int:
    repo = _repo()
    root = Path(repo.root_dir)
    folder = Path(args.target)
    if folder.is_dir() or args.update:
        inside = folder.resolve().is_relative_to(root)
        maker = _producer(repo, folder.resolve().relative_to(root).as_posix()) if inside else None
        if maker is not None:
            if args.update:
                raise UserError(f"{folder} is made by stage {maker.addressing}: `dvc repro` re-makes it")
            print(f"{folder} is an output of stage {maker.addressing}", file=sys.stderr)
            plan = stage_plan(repo, maker.addressing)
        else:
            plan = record_plan(repo, folder, args.params, args)
    elif args.profile is not None:
        raise UserError("--profile: a stage runs with params.yaml's base.profile, as `dvc repro` does")
    else:
        plan = stage_plan(repo, args.target)
    steps = [list(s) for s in plan["steps"]]
    ws = Path(args.scratch or tempfile.mkdtemp(prefix="coda-verify-")).resolve()
    if ws.is_relative_to(root):  # DVC and git would take the re-run's files for the project's
        raise UserError(f"--scratch {args.scratch}: give a folder outside the repository")
    done = json.loads((ws / DONE).read_text()) if (ws / DONE).is_file() else None
    if done is not None and done["steps"] != steps:
        done = None
    if done is not None:
        print(f"{ws} holds a finished re-run of the same steps: not re-running", file=sys.stderr)
        times = done["times"]
    elif ws.exists() and any(ws.iterdir()):
        raise UserError(f"--scratch {ws}: not empty, and no finished re-run of the same steps there")
    else:
        print(f"re-running {plan['label']} in {ws} (log: {ws / 'verify.log'})", file=sys.stderr)
        ws.mkdir(parents=True, exist_ok=True)
        prepare(plan, root, ws, args.params)
        times = rerun(plan["steps"], ws, ws / "verify.log")
        (ws / DONE).write_text(json.dumps({"steps": steps, "times": times}) + "\n")
    per_step = ", ".join(f"{label} {_duration(t)}" for (label, _), t in zip(plan["steps"], times))
    took = "re-ran in" if done is None else "re-used a re-run that took"
    print(f"{took} {_duration(sum(times))} ({per_step})")
    pairs = [(shown, committed, ws / rerun_path) for shown, committed, rerun_path in plan["compare"]]
    total, different, files = compare(pairs)
    if args.update and not any(committed.exists() for _, committed, _ in pairs):
        print(f"no committed {folder} yet")
    else:
        print("\n".join(report(total, different, files)))
    if args.update:
        made = record(ws / plan["update"][0], plan["update"][1])
        print(f"updated {folder}: {len(made['files'])} files and {len(made['snapshots'])} memory snapshots")
    if different and not args.update or args.scratch:
        print(f"the re-run is kept in {ws}")
    else:
        shutil.rmtree(ws, ignore_errors=True)
    return 1 if different and not args.update else 0
