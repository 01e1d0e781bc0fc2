"""What the reproduction costs, stage by stage; prints JSON.

Two sources, side by side:
* ``--log FILE``: a tab-separated log of ``dvc repro -s STAGE`` calls (stage, wall seconds, exit status, end
  time, and "ran" or "cached"), as `docs/pipeline_times.tsv` records them for the committed `cpu` results; a stage
  that ran more than once counts its last successful run, and one logged only as up to date ("cached") counts the
  timings its metrics file records (``metrics/<stage>.json``: the sum of its top-level ``*_s`` keys), listed
  under ``from_metrics``.
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


def from_log(path: Path) -> tuple[dict[str, float], set[str]]:
    """(stage -> wall seconds of its last successful `dvc repro -s` call that ran it, stages only ever skipped)."""
    ran: dict[str, float] = {}
    skipped: set[str] = set()
    with path.open() as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) < 3 or row[2] != "0":
                continue
            if len(row) >= 5 and row[4] == "cached":
                skipped.add(row[0])
            else:
                ran[row[0]] = float(row[1])
    return ran, skipped - set(ran)


def from_metrics(stage: str, root: Path) -> float | None:
    """The sum of the top-level `*_s` timings in `root/<stage>.json`, or None without such a file or keys."""
    path = root / f"{stage}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    parts = [v for k, v in data.items() if k.endswith("_s") and isinstance(v, (int, float))]
    return float(sum(parts)) if parts else None


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
    ap.add_argument("--metrics", default="metrics", help="where a skipped stage's own timings are read")
    args = ap.parse_args()
    result: dict = {"runs": from_runs(Path(args.runs))}
    if args.log:
        stages, skipped = from_log(Path(args.log))
        estimated = {name: from_metrics(name, Path(args.metrics)) for name in sorted(skipped)}
        stages.update({name: s for name, s in estimated.items() if s is not None})
        result["from_metrics"] = sorted(name for name, s in estimated.items() if s is not None)
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
