"""What the reproduction costs, stage by stage; prints JSON.

Two sources, side by side:
* ``--log FILE``: a tab-separated log of ``dvc repro -s STAGE`` calls (stage, wall seconds, exit status, end
  time), as `docs/pipeline_times.tsv` records them for the committed `cpu` results; a stage that ran more than
  once counts its last successful run.
* the run directories under ``runs/`` themselves: every co-evolution run's rounds (``rounds.json``: wall seconds
  and their split by phase, ``time_s``), so a run's cost can be read from its outputs alone.

Stages are grouped by their name before ``@`` (``table1@coda-0`` -> ``table1``).

Usage: python benchmarks/pipeline_times.py --json [--log docs/pipeline_times.tsv] [--runs runs]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path


def from_log(path: Path) -> dict[str, float]:
    """stage -> wall seconds of its last successful `dvc repro -s` call."""
    out: dict[str, float] = {}
    with path.open() as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) >= 3 and row[2] == "0":
                out[row[0]] = float(row[1])
    return out


def from_runs(root: Path) -> dict[str, dict]:
    """run directory (relative to `root`) -> its total wall seconds and the sum of each phase over rounds."""
    out = {}
    for rounds_file in sorted(root.glob("*/*/rounds.json")):
        rounds = json.loads(rounds_file.read_text())
        rounds = [rounds] if isinstance(rounds, dict) else rounds
        phases: dict[str, float] = defaultdict(float)
        for r in rounds:
            for k, v in (r.get("time_s") or {}).items():
                phases[k] += v
        out[rounds_file.parent.relative_to(root).as_posix()] = {
            "rounds": len(rounds),
            "wall_s": round(sum(r.get("wall_s") or 0 for r in rounds), 1),
            "phases_s": {k: round(v, 1) for k, v in sorted(phases.items())},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--log", default=None, help="TSV of dvc repro -s calls (stage, seconds, rc, end time)")
    ap.add_argument("--runs", default="runs")
    args = ap.parse_args()
    result: dict = {"runs": from_runs(Path(args.runs))}
    if args.log:
        stages = from_log(Path(args.log))
        groups: dict[str, float] = defaultdict(float)
        for name, s in stages.items():
            groups[name.split("@")[0]] += s
        result["stages_s"] = stages
        result["groups_s"] = {k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])}
        result["total_s"] = round(sum(stages.values()), 1)
        result["total_h"] = round(sum(stages.values()) / 3600, 2)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
