"""Success tables of LIBERO evaluations (numpy only: the report reads them without the simulator).

An evaluation is one `success_table`: per Table 2 row (`KINDS`: the standard suite and its LIBERO-Pro
versions), the mean success, the number of episodes, the success per source task and every episode as
``[task, initial state, success 0/1]``. `restrict` re-reads a table over a subset of its initial states,
`curve` the per-round curve of a run: every evaluation on the states they all share (the per-round curve's
states; SFT and the last round evaluate more of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

# Table 2's rows -> suite suffix. "instruction" is LIBERO-Pro's paraphrase suite (kept under its old key so
# that earlier metrics read the same); "new_task" its task suite (another object of the scene is the goal).
KINDS = {"standard": "", "position": "_swap", "instruction": "_lan", "new_task": "_task"}
OOD_KINDS = ("position", "instruction", "new_task")


def success_table(rows: Iterable[tuple[str, int, int, dict[str, Any]]]) -> dict[str, Any]:
    """{kind: {"mean", "n", "by_task", "episodes"}} from (kind, task, initial state, result) rows."""
    rows = list(rows)
    table: dict[str, Any] = {}
    for kind in KINDS:
        mine = [(t, i, bool(r.get("success"))) for k, t, i, r in rows if k == kind]
        if not mine:
            continue
        by_task: dict[str, list[bool]] = {}
        for t, _, s in mine:
            by_task.setdefault(str(t), []).append(s)
        table[kind] = {
            "mean": round(float(np.mean([s for _, _, s in mine])), 4),
            "n": len(mine),
            "by_task": {
                t: round(float(np.mean(v)), 4) for t, v in sorted(by_task.items(), key=lambda x: int(x[0]))
            },
            "episodes": [[int(t), int(i), int(s)] for t, i, s in mine],
        }
    return table


def states_of(table: dict[str, Any]) -> set[int]:
    """The initial states a table's episodes ran on (empty for a table written before episodes were kept)."""
    return {i for entry in table.values() for _, i, _ in entry.get("episodes", [])}


def restrict(table: dict[str, Any], states: Iterable[int]) -> dict[str, Any]:
    """`table` over the episodes of the initial `states` only."""
    keep = set(states)
    return success_table(
        (kind, t, i, {"success": bool(s)})
        for kind, entry in table.items()
        for t, i, s in entry.get("episodes", [])
        if i in keep
    )


def curve(before: dict[str, Any], rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-round curve: ``{"round", kind: {"mean", "n"}}`` for SFT (round 0, `before`) and every evaluated
    round of `rounds` (a run's rounds.json), each on the initial states every one of them evaluated. Tables
    without episodes (older runs) are taken as they are."""
    tables = [(0, before)] + [(h["round"], h["libero"]) for h in rounds if h.get("libero")]
    shared = [states_of(t) for _, t in tables if states_of(t)]
    common = set.intersection(*shared) if shared else set()
    out = []
    for r, table in tables:
        if common and states_of(table):
            table = restrict(table, common)
        out.append({"round": r, **{k: {"mean": v["mean"], "n": v["n"]} for k, v in table.items()}})
    return out
