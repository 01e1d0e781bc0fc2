"""Table 2 (LIBERO-Pro) and the LIBERO planner's per-task success, from ``runs/libero/``.

``runs/libero/sft/metrics.json`` holds the planner's success on the demonstrated initial states and the SFT
policy's evaluation; ``runs/libero/coda/metrics.json`` the evaluation after the CoDA rounds. Our intervals
are binomial standard errors over evaluation episodes (one seed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from coda.report.paper import TABLE2
from coda.report.tables import Table

KIND_LABELS = {
    "standard": "Standard LIBERO",
    "position": "LIBERO-Pro position (`_swap`)",
    "new_task": "LIBERO-Pro instruction, new task (`_task`)",
    "instruction": "LIBERO-Pro instruction, paraphrase (`_lan`)",
}
# The paper's column per row. Its instruction numbers (1 -> 76) sit on the `_task` row: a pretrained VLA that
# reads little of its instruction keeps doing the original task, which fails a new task (LIBERO-Pro's own
# finding) but passes a paraphrase; the paper does not say which instruction suite it used.
PAPER = {
    "standard": TABLE2["standard"],
    "position": TABLE2["position"],
    "new_task": TABLE2["instruction"],
    "instruction": (None, None),
}


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _cell(entry: dict[str, Any] | None) -> tuple[str, float | None]:
    if not entry or not entry.get("n"):
        return "not run", None
    p, n = entry["mean"], entry["n"]
    return f"{100 * p:.1f} ± {100 * math.sqrt(p * (1 - p) / n):.1f} (n={n})", 100 * p


def table2_libero_pro(runs_root: Path, out: Path) -> Table:
    sft = _read(runs_root / "libero" / "sft" / "metrics.json")
    coda = _read(runs_root / "libero" / "coda" / "metrics.json")
    profile = (sft or {}).get("profile", "?")
    t = Table(
        "table2_libero_pro", "Table 2: LIBERO-Pro success before and after co-evolution rounds", profile
    )
    rounds = coda["rounds"] if coda else None
    for kind, label in KIND_LABELS.items():
        before = (sft or {}).get("eval", {}).get(kind)
        after = (coda or {}).get("after", {}).get(kind)
        for when, entry, paper in (
            ("before (SFT)", before, PAPER[kind][0]),
            (
                f"after {rounds} rounds (CoDA)" if rounds is not None else "after rounds (CoDA)",
                after,
                PAPER[kind][1],
            ),
        ):
            ours, _ = _cell(entry)
            t.add(f"{label}, {when}", ours, paper)
        if coda and "after_policy_only" in coda:  # not in the paper: the updates without the decision rule
            ours, _ = _cell(coda["after_policy_only"].get(kind))
            t.add(f"{label}, after {rounds} rounds, policy alone (no critic)", ours, None)
    suite = (sft or {}).get("suite", "?")
    t.notes += [
        f"Our suite: `{suite}` ({len((sft or {}).get('tasks', []))} source tasks), state observations; the paper: "
        "30 LIBERO source tasks, image observations, a pretrained VLA, 15 rounds.",
        "Before: the SFT policy trained on scripted-planner demonstrations of the standard suite. After: the "
        "co-evolved policy with the critic's decision rule (j candidates, softmax(Q/τ)).",
        "Evaluation: the last bundled initial states of every source task, never used for demonstrations or "
        "generation. ± is the binomial standard error over episodes of one seed.",
        "Paper column: the paper reports before/after for position (25 → 84), instruction (1 → 76) and "
        "standard LIBERO (97.1 → 97.4). We put its instruction numbers on the new-task row (`_task`: same "
        "scene, the instruction and the goal name another object of it), the instruction shift that a "
        "pretrained VLA reading little of its instruction fails; the paper does not name its instruction suite.",
        "Paraphrase row (`_lan`, no paper counterpart): the same goal reworded. Our SFT policy reads the "
        "instruction through a frozen sentence encoder and already handles LIBERO-Pro's paraphrases, so this "
        "row measures retention, not a shift the policy starts out failing.",
        "Starting points: the paper starts from a VLA pretrained on many layouts (25% under position "
        "perturbations); ours is trained on the standard layouts of the source tasks only, where the goal object "
        "always starts in the same region, so a swap that puts another object there starts near 0%. Our "
        "before → after gains are therefore not comparable in size to the paper's.",
    ]
    if coda:
        t.notes.append(
            f"Rounds: {coda['updates']} policy updates, {coda['demos']} planner demonstrations of validated modes, "
            f"{coda['modes_validated']} modes validated, {coda['modes_rejected']} rejected."
        )
    t.write(out, check_order=False)
    return t


def libero_planner(runs_root: Path, out: Path) -> Table:
    sft = _read(runs_root / "libero" / "sft" / "metrics.json") or {}
    profile = sft.get("profile", "?")
    t = Table(
        "libero_planner",
        "LIBERO scripted planner: success on bundled initial states per source task",
        profile,
    )
    for task, p in sorted((sft.get("planner") or {}).items(), key=lambda kv: int(kv[0])):
        t.add(
            f"{sft['suite']} task {task}: {p['task']}",
            f"{100 * p['success']:.1f} (n={p['n']})",
            None,
            states=f"{p['states'][0]}–{p['states'][1]}",
            held=f"{100 * p['held']:.1f}",
            median_s=p["median_s"],
        )
    t.notes += [
        "Clean planner episodes (no execution noise) on the bundled initial states the SFT demonstrations use; "
        "`held`: the goal still holds 10 steps after success. The paper reports no planner numbers.",
    ]
    t.write(out, check_order=False)
    return t
