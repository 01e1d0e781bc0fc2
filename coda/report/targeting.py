"""How often the round's policy fails where CoDA targets it, against its own novel draws (Table 8; issue #27).

Table 8's "targeting precision" in the paper (66.7% for CoDA against 24.6% for uniform generation) is not
defined in the text we have. What the records measure is the *failure rate of the round's policy*: the share
of a round's rollouts that fail, by the split of the environment rolled out. The comparison that isolates
targeting takes both sides from the same CoDA runs and the same rounds, so the same policy meets both:

* `coda_targeted_failure`: rollouts of targeted environments (a mode's generation program applied to a base
  scene) that failed;
* `coda_novel_failure`: rollouts of CoDA's novel draws (uniform from the generator space) that failed;
* `coda_in_mode_precision`: targeted rollouts that failed *and* were diagnosed in the mode that the scene's
  generation program targets (the diagnosis's ``mode_id`` is a mode whose ``generation_program_id`` was the
  scene's ``program_id`` in some snapshot of the run: programs are recompiled), over all targeted rollouts;
* `coda_validated_failure`: targeted rollouts whose program's mode was *validated* (its control experiments
  passed) when the round began, that failed; the rest of the targeted rollouts test candidate modes. Read from
  the snapshot of the round before (``snapshot_round`` on a mode row; a row without it counts for every round);
* `coda_control_failure`: rollouts of the targeted environments' control counterparts (the base scene with no
  program applied) that failed: what the bases alone give;
* `coda_replay_failure`: rollouts of replayed environments (a generated scene the policy failed in an earlier
  round, rolled out again) that failed. This is the ceiling of "recreate a difficulty" by an exact copy: a
  targeted environment can be expected to fail about as often as the failure it recreates still fails.

The rounds are those in which a run rolled out both targeted environments and novel draws (rounds 2+: round 1
has no diagnosed modes to target). Rates are pooled over the rollouts of every seed; each is also given per
seed as mean ± s.e. over seeds (n seeds). Everything is counted from the run's latest memory snapshot
(``rollouts``, ``scenes`` and ``diagnoses`` tables, which hold every round), and which program each mode held
from the ``modes`` table of every snapshot; its per-round rates are
the ``success_by_split`` of ``rounds.json``, which has no counts to pool with. ``by_family`` gives the pooled
rates and counts per task family: the families' failure rates differ several-fold, so a split that draws more
of a hard family fails more for that reason alone.

Example:
    >>> entry = targeting(Runs.load("records/regime_a"))
    >>> entry["coda_targeted_failure"], entry["coda_novel_failure"], entry["per_seed"]["coda_in_mode_precision"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coda.evaluate import mean_se
from coda.report.runs import RunResult, Runs, rounded

SPLITS = ("targeted", "novel", "control", "replay")  # the splits counted, each with its failures
RATES = (
    "coda_targeted_failure",
    "coda_novel_failure",
    "coda_in_mode_precision",
    "coda_validated_failure",
    "coda_control_failure",
    "coda_replay_failure",
)
COUNTS = (*(k for s in SPLITS for k in (s, f"{s}_failed")), "in_mode", "validated", "validated_failed")
DEFINITION = (
    "failure rate of the round's policy on CoDA's targeted environments and on its novel draws, same runs and "
    "same rounds (those with both: rounds 2+), pooled over the rollouts of every seed; in-mode precision: "
    "targeted rollouts that failed with a diagnosis in the targeted mode, over all targeted rollouts; validated: "
    "the targeted rollouts of modes validated when the round began; control "
    "and replay: the same rounds' control counterparts and replays of scenes failed in an earlier round"
)


@dataclass(frozen=True)
class SplitCounts:
    """One run's rollouts in the rounds that had both targeted environments and novel draws."""

    seed: int
    rounds: tuple[int, ...]
    targeted: int
    targeted_failed: int
    novel: int
    novel_failed: int
    control: int
    control_failed: int
    replay: int
    replay_failed: int
    in_mode: int  # targeted rollouts that failed with a diagnosis in the targeted mode
    validated: int = 0  # targeted rollouts of a mode validated when the round began ...
    validated_failed: int = 0  # ... that failed

    def rates(self) -> dict[str, float | None]:
        """The rates of `RATES` (fractions; None for a split without rollouts)."""
        return {
            "coda_targeted_failure": _ratio(self.targeted_failed, self.targeted),
            "coda_novel_failure": _ratio(self.novel_failed, self.novel),
            "coda_in_mode_precision": _ratio(self.in_mode, self.targeted),
            "coda_validated_failure": _ratio(self.validated_failed, self.validated),
            "coda_control_failure": _ratio(self.control_failed, self.control),
            "coda_replay_failure": _ratio(self.replay_failed, self.replay),
        }


def count_splits(
    rollouts: Iterable[Mapping[str, Any]],
    scenes: Iterable[Mapping[str, Any]],
    modes: Iterable[Mapping[str, Any]],
    diagnoses: Iterable[Mapping[str, Any]],
    seed: int = 0,
    family: str | None = None,
) -> SplitCounts:
    """Count one run's rollouts by split (`SPLITS`; rows of the memory tables of the same names) in the rounds
    with both targeted and novel rollouts, and the targeted failures diagnosed in the targeted mode; with
    `family`, only that family's rollouts (the rounds are the run's all the same)."""
    rollouts = list(rollouts)
    splits: dict[int, set[str]] = {}
    for r in rollouts:
        splits.setdefault(r["round"], set()).add(r["split"])
    rounds = tuple(sorted(k for k, v in splits.items() if {"targeted", "novel"} <= v))
    programs: dict[tuple[str, int], set[str]] = {}  # a targeted scene of a round -> its generation programs
    for s in scenes:
        if s["split"] == "targeted" and s.get("program_id"):
            programs.setdefault((s["scene_hash"], s["round"]), set()).add(s["program_id"])
    modes_of: dict[str, set[str]] = {}  # generation program -> the modes it recreates
    validated: set[tuple[str, int | None]] = set()  # (program, snapshot round) held by a validated mode
    for m in modes:
        if m.get("generation_program_id"):
            modes_of.setdefault(m["generation_program_id"], set()).add(m["mode_id"])
            if m.get("status") == "validated":
                validated.add((m["generation_program_id"], m.get("snapshot_round")))
    diagnosed = {d["rollout_id"]: d.get("mode_id") for d in diagnoses}
    n = dict.fromkeys(COUNTS, 0)
    for r in rollouts:
        if r["round"] not in rounds or r["split"] not in SPLITS or (family and r["family"] != family):
            continue
        n[r["split"]] += 1
        made_by = programs.get((r["scene_hash"], r["round"]), ())
        of_validated = r["split"] == "targeted" and any(
            (p, k) in validated for p in made_by for k in (r["round"] - 1, None)
        )
        n["validated"] += of_validated
        if r["success"]:
            continue
        n[f"{r['split']}_failed"] += 1
        n["validated_failed"] += of_validated
        if r["split"] == "targeted":
            targeted_modes = set().union(*(modes_of.get(p, set()) for p in made_by))
            n["in_mode"] += diagnosed.get(r["rollout_id"]) in targeted_modes
    return SplitCounts(seed, rounds, **n)


def run_counts(run: RunResult) -> dict[str | None, SplitCounts] | None:
    """`count_splits` of a run's memory, over all families (key None) and per family; None when the run kept
    no memory. Rollouts, scenes and diagnoses come from the latest snapshot (it holds every round); the modes
    from every snapshot, because a mode's generation program is recompiled as the mode gains diagnoses: a
    round's targeted scene was made by the program its mode held *then*, which the latest snapshot no longer
    names (read from the latest alone, in-mode precision missed the scenes of every superseded program)."""
    history = run.memory_history()
    if not history:
        return None
    latest = history[-1][1]
    rollouts, scenes, diagnoses = (list(latest.rows(name)) for name in ("rollouts", "scenes", "diagnoses"))
    modes = [{**row, "snapshot_round": k} for k, mem in history for row in mem.rows("modes")]
    families = sorted({r["family"] for r in rollouts})
    return {
        f: count_splits(rollouts, scenes, modes, diagnoses, seed=run.seed, family=f)
        for f in (None, *families)
    }


def pool(counts: Sequence[SplitCounts]) -> dict[str, Any]:
    """The Table-8 entry of a set of runs: the rates pooled over every rollout, per seed (mean ± s.e. over
    seeds, n), the counts and each seed's rounds."""
    total = SplitCounts(-1, (), **{k: sum(getattr(c, k) for c in counts) for k in COUNTS})
    per_seed = {}
    for key in RATES:
        m, se = mean_se([c.rates()[key] for c in counts])
        vals = [v for v in (c.rates()[key] for c in counts) if v is not None]
        per_seed[key] = {"mean": rounded(m, 4), "se": rounded(se, 4), "n": len(vals)}
    return {
        **{k: rounded(v, 4) for k, v in total.rates().items()},
        "per_seed": per_seed,
        "rollouts": {k: getattr(total, k) for k in COUNTS},
        "rounds": {str(c.seed): list(c.rounds) for c in counts},
        "n": len(counts),
        "definition": DEFINITION,
    }


def targeting(runs: Runs) -> dict[str, Any]:
    """Table 8's same-run, same-round entry for the CoDA runs of Table 1 under `runs.root`, or a status that
    says why there is none."""
    coda = runs.table1.get("coda", [])
    if not coda:
        return {"status": f"no CoDA runs under {runs.root.as_posix()}/table1"}
    counts = [c for c in (run_counts(r) for r in coda) if c is not None]
    if not counts:
        return {"status": f"no memory snapshots in the CoDA runs under {runs.root.as_posix()}/table1"}
    families = sorted({f for c in counts for f in c if f is not None})
    by_family = {}
    for f in families:
        entry = pool([c[f] for c in counts if f in c])
        by_family[f] = {**{k: entry[k] for k in RATES}, "rollouts": entry["rollouts"]}
    return {**pool([c[None] for c in counts]), "by_family": by_family}


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None
