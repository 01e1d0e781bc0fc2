"""Disk use and peak memory of one co-evolution run; prints JSON.

Runs ``coda run --method M --profile P --out DIR`` in a child process (``coda run`` first trains the SFT
policy when ``--sft`` holds none, and that is measured too) and reports:

* peak_rss_largest_process_mb: the peak resident memory of the largest process of the run (the main process
  or one simulator worker), from ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` like ``/usr/bin/time -v``'s
  "Maximum resident set size";
* peak_rss_process_tree_mb: the peak of the summed resident memory of the run's whole process tree (main
  process + workers), sampled from /proc every `interval` seconds (Linux);
* disk: the run directory's size in bytes, by kind and per round (`coda.maintenance.run_usage`), and
  prunable_bytes: what ``coda prune --keep 1`` would free;
* wall_s, exit_code and the command.

Usage:
    python benchmarks/run_resources.py --method coda --profile cpu --out runs/resources-coda --json
    python benchmarks/run_resources.py --method coda --profile smoke --out /tmp/res --sft /tmp/res-sft
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants, from /proc (0 where /proc is unavailable)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:  # the process ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        parents[int(entry.name)] = int(fields[1])
        rss[int(entry.name)] = int(statm[1]) * PAGE
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier += children
    return sum(rss.get(pid, 0) for pid in tree)


def measure(cmd: list[str], interval: float = 0.2, **popen: Any) -> dict[str, Any]:
    """Run `cmd` to completion; wall time, exit code and peak resident memory (largest process, whole tree)."""
    peak = 0
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, **popen)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    done.set()
    sampler.join()
    wall = time.perf_counter() - t0
    # ru_maxrss is in KiB on Linux: the largest single descendant reaped so far (the run and its workers)
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {
        "command": cmd,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "peak_rss_largest_process_mb": round(largest / 2**20, 1),
        "peak_rss_process_tree_mb": round(peak / 2**20, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="coda")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", required=True, help="run directory (a finished run there is only resumed)")
    ap.add_argument("--sft", default="runs/sft", help="SFT policy directory (trained first when empty)")
    ap.add_argument("--data", default="data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()

    from coda.maintenance import prune, run_usage

    cmd = [sys.executable, "-m", "coda", "run", "--params", args.params, "--profile", args.profile]
    cmd += ["--method", args.method, "--seed", str(args.seed), "--out", args.out]
    cmd += ["--sft", args.sft, "--data", args.data]
    cmd += ["--workers", str(args.workers)] if args.workers else []
    sft_trained = not (Path(args.sft) / "policy" / "config.json").exists()
    report = measure(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    report.update(profile=args.profile, method=args.method, sft_trained_in_run=sft_trained)
    if Path(args.out).is_dir():
        usage = run_usage(args.out)
        report.update(
            disk_total_mb=round(usage["total_bytes"] / 2**20, 2),
            disk=usage,
            prunable_bytes=prune(args.out, keep=1, dry_run=True)["freed_bytes"],
        )
    print(json.dumps(report, indent=1))
    sys.exit(report["exit_code"])


if __name__ == "__main__":
    main()
