"""Results across runs: success per method as mean ± standard error over seeds, and paired differences.

Every method is evaluated on the same episodes (the held-back seed scenes and the first scenes of each
held-out suite, fixed by the data), so two runs of the same seed can be compared episode by episode. A run's
``metrics.json`` carries ``eval_outcomes``, one character per evaluation episode in a fixed order
("1" success, "0" failure): ID episodes first, then OOD episodes by family and suite.

Example:
    >>> rows = summarize({"coda": ["runs/coda-0", "runs/coda-1"], "sft": ["runs/sft-0"]}, reference="sft")
    >>> rows[0]["ood_mean"], rows[0]["ood_se"], rows[0]["paired_diff"]
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample std / sqrt(n)); s.e. is None for a single value."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None, None
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, None
    var = sum((v - m) ** 2 for v in vals) / (len(vals) - 1)
    return m, math.sqrt(var / len(vals))


def binomial_se(successes: Sequence[bool | int]) -> float | None:
    """Standard error of a success rate over independent episodes, sqrt(p(1 - p) / n)."""
    n = len(successes)
    if n == 0:
        return None
    p = sum(int(x) for x in successes) / n
    return math.sqrt(p * (1 - p) / n)


def paired_diff(a: str, b: str) -> tuple[float, float | None]:
    """Mean and standard error of the per-episode difference a − b of two outcome strings ("1"/"0") over
    the same episodes (a paired comparison: the s.e. is that of the mean of the n differences)."""
    if len(a) != len(b):
        raise ValueError(
            f"paired_diff: {len(a)} vs {len(b)} episodes; a paired comparison needs the same ones"
        )
    d = [int(x) - int(y) for x, y in zip(a, b, strict=True)]
    return mean_se(d)


def evaluation_items(
    data_dir: str | Path,
    families: Sequence[str],
    n_id: int,
    n_ood: int,
    held_back: int | None = None,
) -> list[tuple[str, str, Any]]:
    """The fixed evaluation episodes, in the order of ``eval_outcomes``: (split, family, scene) with split
    "id" for the first `n_id` of each family's last `held_back` (default `n_id`) seed scenes, which no
    policy trains on, then the first `n_ood` scenes of every held-out suite, by family and suite."""
    from coda import data
    from coda.sim.families.ranges import SUITES

    held_back = n_id if held_back is None else held_back
    items = []
    for f in families:
        seeds = data.seed_scenes(data_dir, f)
        items += [("id", f, s) for s in seeds[len(seeds) - held_back :][:n_id]]
    items += [
        (suite, f, s)
        for f in families
        for suite in SUITES
        for s in data.suite_scenes(data_dir, f, suite, n_ood)
    ]
    return items


def evaluation_summary(items: Sequence[tuple[str, str, Any]], successes: Sequence[bool]) -> dict[str, Any]:
    """ID and OOD success of one policy on `evaluation_items`, with binomial standard errors, per family,
    per suite (all families) and per family and suite, and the outcome string for paired comparisons."""
    rows = [(split, f, bool(ok)) for (split, f, _), ok in zip(items, successes, strict=True)]
    ident = [r for r in rows if r[0] == "id"]
    ood = [r for r in rows if r[0] != "id"]

    def rate(xs):
        return round(sum(x[2] for x in xs) / len(xs), 4) if xs else None

    def se(xs):
        v = binomial_se([x[2] for x in xs])
        return None if v is None else round(v, 4)

    families = list(dict.fromkeys(f for _, f, _ in rows))
    suites = list(dict.fromkeys(r[0] for r in ood))
    return {
        "id_success": rate(ident),
        "ood_success": rate(ood),
        "id_se": se(ident),
        "ood_se": se(ood),
        "n_id": len(ident),
        "n_ood": len(ood),
        "id_by_family": {f: rate([x for x in ident if x[1] == f]) for f in families},
        "ood_by_family": {f: rate([x for x in ood if x[1] == f]) for f in families},
        "ood_by_suite": {s: rate([x for x in ood if x[0] == s]) for s in suites},
        "ood_by_family_suite": {
            f: {s: rate([x for x in ood if x[1] == f and x[0] == s]) for s in suites} for f in families
        },
        "eval_outcomes": "".join("1" if r[2] else "0" for r in rows),
    }


def load_metrics(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (has the run finished?)")
    return json.loads(path.read_text())


def _ood_outcomes(m: Mapping[str, Any]) -> str:
    return m["eval_outcomes"][m["n_id"] :]


def summarize(runs: Mapping[str, Sequence[str | Path]], reference: str | None = None) -> list[dict[str, Any]]:
    """One row per method: ID and OOD success (mean ± s.e. over its runs) and, with `reference`, the paired
    OOD difference to it (per seed: the mean over the shared episodes of method − reference; then mean ±
    s.e. over seeds, and `paired_se_episodes`, its s.e. from the episodes alone). A reference with a single
    run (e.g. the one SFT checkpoint) pairs with every seed."""
    metrics = {name: [load_metrics(d) for d in dirs] for name, dirs in runs.items()}
    ref = {m["seed"]: m for m in metrics.get(reference, [])} if reference else {}
    rows = []
    for name, ms in metrics.items():
        ood_mean, ood_se = mean_se([m["ood_success"] for m in ms])
        id_mean, id_se = mean_se([m["id_success"] for m in ms])
        row = {
            "method": name,
            "n": len(ms),
            "seeds": sorted(m["seed"] for m in ms),
            "ood_mean": ood_mean,
            "ood_se": ood_se,
            "id_mean": id_mean,
            "id_se": id_se,
            "ood_by_suite": {
                s: mean_se([m["ood_by_suite"][s] for m in ms])[0] for s in ms[0]["ood_by_suite"]
            },
            "ood_by_family": {
                f: mean_se([m["ood_by_family"][f] for m in ms])[0] for f in ms[0]["ood_by_family"]
            },
        }
        if ref and name != reference:
            diffs, episode_se = [], []
            for m in ms:
                other = ref.get(m["seed"]) or (next(iter(ref.values())) if len(ref) == 1 else None)
                if other is None:
                    continue
                a, b = _ood_outcomes(m), _ood_outcomes(other)
                if len(a) != len(b):
                    raise ValueError(f"{name} seed {m['seed']}: evaluated on other episodes than {reference}")
                d, se = paired_diff(a, b)
                diffs.append(d)
                episode_se.append(se or 0.0)
            row["paired_diff"], row["paired_se"] = mean_se(diffs)
            # the s.e. of that mean from the episodes alone (what a single seed's comparison can resolve)
            row["paired_se_episodes"] = (
                math.sqrt(sum(x * x for x in episode_se)) / len(episode_se) if episode_se else None
            )
        rows.append(row)
    return rows
