"""What a co-evolution run trained on: its planner demonstrations and its replay, by split.

Reads the ``trained_on.json`` that every run writes (`coda.coevolve.trainer.TrainedOn`) in a run directory or a
run record (``coda record`` copies it) and prints, per round and in total:

* demonstrations by split (targeted / novel / replay / mutation ...): count, share of the demonstrations, and
  the policy's success on those scenes when it was rolled out there (low: demonstrations of failures);
* repeats: demonstrations of a scene the run had already demonstrated (none since runs exclude them) and the
  candidates excluded for that reason;
* the replay's composition by split: chunks and episodes added per round and in total, and what the store
  held after the last round (the states the critic and AWR train on).

A record written before runs recorded this has no trained_on.json: the script says so and exits 2.

Usage:
    python benchmarks/trained_on.py records/regime_b/table1/coda-0
    python benchmarks/trained_on.py runs/table1/uniform-1 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from coda.coevolve.trainer import TRAINED_ON, TrainedOn


def _split_cells(row: dict[str, Any]) -> str:
    parts = [
        f"{split} {c['n']} ({100 * c['share']:.0f}%, success {100 * c['policy_success']:.0f}%)"
        for split, c in row["by_split"].items()
    ]
    return "; ".join(parts) if parts else "none"


def _counts(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    if not total:
        return "none"
    return ", ".join(f"{k or '(no split)'} {n} ({100 * n / total:.0f}%)" for k, n in counts.items())


def text(summary: dict[str, Any], where: str) -> str:
    """The summary as lines of text."""
    head = f"{where}: method {summary['method']}, seed {summary['seed']}, profile {summary['profile']}"
    lines = [head, f"demonstration selection: {summary['demo_selection']}"]
    if summary["trains"] is False:
        lines.append("this method trains nothing during co-evolution (the SFT policy, evaluated)")
        return "\n".join(lines)
    if summary["unrecorded_rounds"]:
        lines.append(
            f"rounds {summary['unrecorded_rounds']} were resumed from checkpoints written before recording: "
            "their demonstrations and replay are not in the record"
        )
    demos = summary["demos"]
    lines.append("demonstrations by split: count (share, policy success on those scenes)")
    for row in demos["rounds"]:
        lines.append(f"  round {row['round']}: {row['n']}: {_split_cells(row)}")
    lines.append(f"  total: {demos['total']['n']}: {_split_cells(demos['total'])}")
    rep = summary["repeats"]
    lines.append(
        f"repeats: {rep['demos_of_an_already_demonstrated_scene']} demonstrations of an already demonstrated "
        f"scene; {rep['unique_scenes']} distinct scenes; {rep['candidates_excluded']} candidates excluded as "
        "already demonstrated"
    )
    replay = summary["replay"]
    lines.append("replay added by split: chunks | episodes")
    for row in replay["added"]["rounds"]:
        lines.append(
            f"  round {row['round']}: {_counts(row.get('chunks', {}))} | {_counts(row.get('episodes', {}))}"
        )
    total = replay["added"]["total"]
    lines.append(f"  total: {_counts(total['chunks'])} | {_counts(total['episodes'])}")
    held = replay["held_after_last_round"]
    if held:
        lines.append(
            f"replay held after the last round: {_counts(held['chunks'])} | {_counts(held['episodes'])}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record", help="a run record (records/...) or run directory, or its trained_on.json")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    where = Path(args.record)
    if not where.exists():
        print(f"{where}: no such run record or run directory", file=sys.stderr)
        return 2
    try:
        doc = TrainedOn.read(where)
    except FileNotFoundError:
        print(
            f"{where}: this record predates recording what a run trained on (no {TRAINED_ON}): its "
            "demonstrations and replay composition were not recorded (at best they can be reconstructed "
            "from its memory tables); re-run the method to record them",
            file=sys.stderr,
        )
        return 2
    except ValueError as err:
        print(str(err), file=sys.stderr)
        return 2
    summary = TrainedOn.summary(doc)
    print(json.dumps(summary, indent=1) if args.json else text(summary, str(where)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
