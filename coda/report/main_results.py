"""The main results (paper §4, notebooks 02 and 04): Table 1 (OOD success of every method after the
co-evolution rounds, with paired differences against the strongest baseline), Figure 3 (OOD success over the
rounds of the extended runs, with and without memory) and the SFT baseline every method starts from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coda.report import paper
from coda.report.claims import claims, claims_markdown, strongest_baseline, suites_markdown
from coda.report.common import FAMILIES, SUITES, profile_rounds, pyplot, save_figure
from coda.report.runs import Runs, fmt, metrics_file, nested_stat, paired, project_dir, rounded, rows_at, stat
from coda.report.tables import Table


def table1_numbers(runs: Runs) -> dict[str, dict[str, Any]]:
    """Each Table-1 method that ran: OOD success (`ood`, %) mean and s.e. over seeds, ID success (`id`) and n."""
    out = {}
    for m, rs in runs.table1.items():
        rows = rows_at(rs, None)
        s, i = stat(rows), stat(rows, "id_success")
        out[m] = {"ood": rounded(s["mean"]), "se": rounded(s["se"]), "id": rounded(i["mean"]), "n": s["n"]}
    return out


def table1_main(runs: Runs, out: Path) -> Table:
    t = Table(
        "table1_main",
        "Table 1: OOD success after the co-evolution rounds (four task families)",
        runs.profile(),
    )
    strongest = strongest_baseline(runs)
    for method in paper.TABLE1:
        rs = runs.table1.get(method, [])
        rows = rows_at(rs, None)
        s = stat(rows)
        extra: dict[str, Any] = {
            "ID": fmt(stat(rows, "id_success")),
            **{f"OOD {suite}": fmt(nested_stat(rows, "ood_by_suite", suite)) for suite in SUITES},
            **{f"OOD {fam}": fmt(nested_stat(rows, "ood_by_family", fam)) for fam in FAMILIES},
        }
        if strongest and method != strongest:
            extra[f"paired vs {strongest} (points)"] = fmt(
                paired(rs, runs.table1[strongest], None, None), signed=True
            )
        elif strongest:
            extra[f"paired vs {strongest} (points)"] = "(strongest baseline)"
        t.add(paper.TABLE1_LABELS[method], fmt(s), paper.TABLE1[method], rank=s["mean"], **extra)
    rounds = profile_rounds(runs)
    n_ood = next((r.metrics.get("n_ood") for r in runs.all() if r.metrics.get("n_ood")), None)
    t.notes.append(
        f"After {rounds} rounds; OOD = {n_ood} fixed held-out episodes (4 suites x 4 families), the same "
        "episodes for every method, so differences are paired per seed. The paired column compares each "
        "method with the strongest baseline, fixed beforehand as the paper's (success-rate-guided generation), "
        "not chosen from our means (`coda.report.claims`)."
    )
    sft_runs = runs.table1.get("sft", [])
    if len(sft_runs) > 1:
        t.notes.append(
            "SFT is one checkpoint; its rows are that policy evaluated once per seed (the same episodes), so "
            "they agree exactly when its actions do not depend on the evaluation seed."
        )
    if strongest and "coda" in runs.table1:
        d = paired(runs.table1["coda"], runs.table1[strongest], None, None)
        if d["mean"] is not None:
            verdict = "above" if d["mean"] > 0 else "below"
            within = d["se"] is not None and abs(d["mean"]) < 2 * d["se"]
            t.notes.append(
                f"CoDA − {strongest}: {fmt(d, signed=True)} points; CoDA is {verdict} the strongest baseline"
                + (" but within two standard errors (not significant)." if within else ".")
            )
    tested = claims(runs)
    t.sections.append(
        (
            "The paper's claims, tested",
            [
                "Paired differences over the same evaluation episodes, per seed; mean ± s.e. over seeds; "
                "verdict from a two-sided t-test of the per-seed differences against 0 (α = 0.05); `p vs "
                "paper` tests them against the paper's difference for the same pair (`coda.report.claims`).",
                "",
                *claims_markdown(tested),
            ],
        )
    )
    t.sections.append(
        (
            "CoDA's paired differences per held-out suite",
            ["Points, CoDA − each method, mean ± s.e. over seeds (n).", "", *suites_markdown(tested)],
        )
    )
    t.write(out)
    return t


def figure3_rounds(runs: Runs, out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    sft = runs.seed_run("sft")
    start = sft.at(0)["ood_success"] if sft and sft.at(0) else None
    labels = {"coda": "CoDA (memory)", "critic_no_memory": "critic without memory"}
    for method, run in sorted(runs.long.items()):
        pts = run.curve()
        if start is not None:
            pts = [(0, start), *pts]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, [100 * v for v in y], marker="o", label=labels.get(method, method))
    lo, hi = paper.FIGURE3["coda"]
    ax.scatter([5, 15], [lo, hi], marker="*", s=90, color="grey", label="paper CoDA (rounds 5, 15)", zorder=3)
    ax.set_xlabel("co-evolution round (0 = SFT)")
    ax.set_ylabel("OOD success (%)")
    ax.set_title(f"Figure 3: OOD success over rounds, seed 0 (profile {runs.profile()})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out, "figure3_rounds")


def locked_profile(project: Path, stage: str) -> str:
    """The profile (``base.profile``) that `stage` last ran with, from the project's dvc.lock; "?" when the
    lock or the stage is missing. A fresh clone has the lock (and the sft stage's metric file) but no runs."""
    import yaml

    try:
        lock = yaml.safe_load((project / "dvc.lock").read_text())
        return str(lock["stages"][stage]["params"]["params.yaml"]["base.profile"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return "?"


def sft_baseline(runs: Runs, out: Path) -> Table:
    profile = runs.profile()
    if profile == "?":  # no run directory here: the profile the sft stage ran with
        profile = locked_profile(project_dir(runs.root), "sft")
    t = Table("sft_baseline", "SFT baseline: success of the starting policy", profile)
    # metrics/sft.json is the sft stage's tracked metric file; runs/sft/metrics.json is the same, untracked
    candidates = [metrics_file(runs.root, "sft.json"), runs.root / "sft" / "metrics.json"]
    path = next((p for p in candidates if p.is_file()), None)
    m = json.loads(path.read_text()) if path else None
    if m is None:
        t.add("SFT OOD", "not run", paper.TABLE1["sft"])
        t.write(out, check_order=False)
        return t

    def se(key):  # binomial s.e. over the episodes (older metric files have none)
        return 100 * m[key] if m.get(key) is not None else None

    t.add(
        "OOD success, all suites",
        fmt({"mean": 100 * m["ood_mean"], "se": se("ood_se"), "n": 1}),
        paper.TABLE1["sft"],
    )
    t.add(
        "ID success (held-back seed scenes)",
        fmt({"mean": 100 * m["id_mean"], "se": se("id_se"), "n": 1}),
        None,
    )
    for suite, v in m.get("ood_suite_mean", {}).items():
        t.add(f"OOD suite {suite}, all families", fmt({"mean": 100 * v, "se": None, "n": 1}), None)
    for fam, v in sorted(m["ood_success"].items()):
        t.add(
            f"OOD {fam}",
            fmt({"mean": 100 * v, "se": None, "n": 1}),
            None,
            **{s: round(100 * m["ood_by_suite"][fam][s], 1) for s in SUITES},
        )
    t.notes.append(
        f"{m['demos']} planner demonstrations, {m['updates']} updates; ID over {m['n_id']} and OOD over "
        f"{m['n_ood']} episodes (the same episodes as every run's final evaluation); ± is the binomial s.e."
    )
    t.write(out, check_order=False)
    return t
