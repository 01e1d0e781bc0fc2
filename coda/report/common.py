"""What the report's tables and figures share: the suites and families they break results down by, the
figure backend and writer, and the rounds at which runs are compared.

`save_figure` writes a PNG and an SVG with fixed metadata, so that re-running on the same runs gives
identical files; `ablation_round` is the round at which the ablations are compared with CoDA (the rounds the
ablation runs ran), `stat_at` one run's success at a round and `profile_rounds` the rounds of the profile's
main runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coda.report.runs import FAMILIES, SUITES, RunResult, Runs, stat

__all__ = [
    "FAMILIES",
    "SUITES",
    "ablation_round",
    "profile_rounds",
    "pyplot",
    "save_figure",
    "single_seed_note",
    "stat_at",
]


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        # fixed metadata and SVG element ids, so that re-running on the same runs gives identical files
        with pyplot().rc_context({"svg.hashsalt": name}):
            fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else {})
        paths.append(path)
    pyplot().close(fig)
    return paths


def ablation_round(runs: Runs) -> int | None:
    """The round at which ablations are compared: the rounds the ablation runs ran."""
    rounds = [len(r.rounds) and r.rounds[-1]["round"] for r in runs.ablation.values()]
    return max(rounds) if rounds else None


def stat_at(run: RunResult | None, r: int | None) -> dict[str, Any]:
    """`stat` of one run's evaluated row of round `r` (None: the last); "not run" when there is none."""
    row = run.at(r) if run else None
    return stat([row] if row else [])


def profile_rounds(runs: Runs) -> int | None:
    base = runs.seed_run("coda") or next(iter(runs.all()), None)
    return None if base is None else base.run.get("coevolve", {}).get("rounds")


def single_seed_note(runs: Runs, r: int | None, ref: str = "coda") -> str:
    """The note of a table of single-seed rows compared with `ref` seed 0 at round r."""
    run = runs.ablation_ref(ref)
    row = run.at(r) if run else None
    n_ood = row.get("n_ood") if row else None
    on = f" on the same {n_ood} OOD episodes" if n_ood else ""
    what = (
        f"`{run.name}` ({ref} with the ablations' rounds and evaluation, run with them)"
        if run is not None and run.name == f"{ref}_ref"
        else f"{ref} seed 0"
    )
    return (
        f"Seed 0 (n = 1), compared with {what} at round {r}{on}; paired differences are ± their s.e. over "
        "those episodes."
    )
