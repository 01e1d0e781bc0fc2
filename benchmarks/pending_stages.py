"""Which pipeline stages still have to run on this machine, in dvc.yaml's order; prints their names (or JSON).

On a machine without the DVC cache of the one that ran them (no remote), `dvc status` lists every finished stage
as changed: its cached outputs (``runs/...``) are "deleted" (a cache without them) or "not in cache" (an empty
cache, a fresh clone). Such a stage is done all the same when its deps,
params and command are unchanged and every output that is missing is a cached one (git-ignored): its results
are in git (``records/``, ``metrics/``, ``figures/``, and ``dvc.lock``). It has to run again only when a pending
stage needs one of those missing outputs as a dependency (e.g. ``long@coda`` continues ``runs/table1/coda-0``).

    COMMIT=1 benchmarks/repro_timed.sh $(python benchmarks/pending_stages.py)

Usage: python benchmarks/pending_stages.py [--json] [--status FILE] (FILE: saved ``dvc status --json`` output)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

# the dvc beside this interpreter (the project's venv), else the one on PATH
DVC = (
    str(Path(sys.executable).with_name("dvc"))
    if Path(sys.executable).with_name("dvc").exists()
    else (shutil.which("dvc") or "dvc")
)


# how `dvc status` names an output or dependency that is not in the workspace
GONE = ("deleted", "not in cache")


def _ignored(paths: list[str]) -> set[str]:
    """The paths git ignores (the cached outputs), of `paths`."""
    if not paths:
        return set()
    res = subprocess.run(["git", "check-ignore", "--no-index", *paths], capture_output=True, text=True)
    return set(res.stdout.split())


def _under(path: str, outs: list[str]) -> bool:
    """Whether `path` is one of `outs`, inside one, or holds one."""
    return any(path == o or path.startswith(o + "/") or o.startswith(path + "/") for o in outs)


def pending(status: dict, order: list[str], ignored: set[str]) -> list[str]:
    """Stages of `order` that must run: `status` is `dvc status --json`, `ignored` the paths of its missing
    outputs that git ignores (the cached ones). `order` is dvc.yaml's, upstream stages first."""
    todo: set[str] = set()
    lost: dict[str, list[str]] = {}  # stage done elsewhere -> its missing cached outputs
    needs: dict[str, list[str]] = {}  # stage -> its missing dependencies
    for stage in order:
        done = True
        for entry in status.get(stage, []):
            if isinstance(entry, dict) and set(entry) == {"changed outs"}:
                gone = entry["changed outs"]
                if all(v in GONE for v in gone.values()) and set(gone) <= ignored:
                    lost.setdefault(stage, []).extend(gone)
                    continue
            if isinstance(entry, dict) and set(entry) == {"changed deps"}:
                deps = entry["changed deps"]
                needs[stage] = [d for d, v in deps.items() if v in GONE]
                lost_outs = [o for outs in lost.values() for o in outs]
                if len(needs[stage]) == len(deps) and all(_under(d, lost_outs) for d in deps):
                    continue  # only outputs lost with a finished upstream stage are missing
            done = False
        if not done:
            todo.add(stage)
    changed = True
    while changed:  # a pending stage whose dependency is a lost output needs that output's stage again
        changed = False
        for stage in list(todo):
            for dep in needs.get(stage, []):
                for other, gone in lost.items():
                    if other not in todo and _under(dep, gone):
                        todo.add(other)
                        changed = True
    return [s for s in order if s in todo]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--status", default=None, help="saved `dvc status --json` output (default: run it)")
    args = ap.parse_args()
    if args.status:
        status = json.loads(Path(args.status).read_text())
    else:
        res = subprocess.run([DVC, "status", "--json"], capture_output=True, text=True, check=True)
        status = json.loads(res.stdout or "{}")
    order = subprocess.run(
        [DVC, "stage", "list", "--name-only"], capture_output=True, text=True, check=True
    ).stdout.split()
    missing = {
        path
        for changes in status.values()
        for entry in changes
        if isinstance(entry, dict)
        for path in entry.get("changed outs", {})
    }
    todo = pending(status, order, _ignored(sorted(missing)))
    print(json.dumps({"pending": todo}) if args.json else "\n".join(todo))


if __name__ == "__main__":
    main()
