"""The pipeline's metric and plot files (``metrics/summary/``, ``metrics/curves.csv``, ``metrics/training.csv``,
read by ``dvc metrics show`` and ``dvc plots show``; see `summary`) and ``figures/README.md``, which lists every
artifact of `INDEX` with its files and whether our ordering of the rows matches the paper's.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

from coda.report.budget import accepted_per_family, budget_points
from coda.report.claims import claims
from coda.report.common import ablation_round
from coda.report.main_results import table1_numbers
from coda.report.regime_tables import regime_results
from coda.report.runs import Runs, paired_episodes, regime_dirs, rounded, rows_at, stat
from coda.report.tidy import write_tidy


def summary(runs: Runs, out: Path) -> dict[str, Any]:
    """The pipeline's metric and plot files (`dvc metrics show`, `dvc plots show` / `diff`):

    * ``summary/<topic>/<name>.json``: small files of numbers only, the same few keys per topic, so that
      ``dvc metrics show`` is a narrow table: ``table1/<method>`` (ood, se, id, n), ``claims/<a>-vs-<b>``
      (diff, se, n, p, p_vs_paper, paper, verdict: +1 holds, -1 reversed, 0 not significant), ``ablation/<variant>``
      (ood, diff and se against CoDA seed 0 at the same round, round) and ``budget/<method>-<n>`` (ood, se,
      accepted);
    * ``results.json``: the same with the claims' text, per-suite differences and p against the paper's
      difference (a plain output, not a metric), and both benchmark regimes side by side
      (`coda.report.regime_tables`): ``table1_regimes``, ``table8`` (targeted against novel failure of CoDA's
      policy, same runs and rounds) and ``claims_regimes``, each ``{"a": ..., "b": ...}``;
    * ``plots/``: one long-format CSV per plot that `dvc plots show` draws (`write_plots`), with no blanks, for
      the ``by_method`` template (.dvc/plots: one colour per series);
    * ``tidy.csv``: every record's final and per-round metrics of both regimes, one value per row
      (`coda.report.tidy`), for pandas.
    """
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "profile": runs.profile(),
        "table1": table1_numbers(runs),
        "ablation": {},
        "budget": {},
    }
    r = ablation_round(runs)
    coda0 = runs.ablation_ref("coda")
    for name, run in runs.ablation.items():
        d = paired_episodes(run.at(r), coda0.at(r) if coda0 else None)
        res["ablation"][name] = {
            "ood": rounded(stat(rows_at([run], None))["mean"]),
            "diff": rounded(d["mean"]),
            "se": rounded(d["se"]),
            "round": run.rounds[-1]["round"] if run.rounds else None,
        }
    for method, points in budget_points(runs).items():
        for n, run in sorted(points.items()):
            row = run.at(None)
            res["budget"][f"{method}-{n}"] = {
                "ood": rounded(100 * row["ood_success"]),
                "se": rounded(100 * row["ood_se"]) if row.get("ood_se") is not None else None,
                "accepted": rounded(accepted_per_family(run)),
            }
    res["claims"] = claims(runs)
    res.update(regime_results(runs))
    (out / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    topics = {
        "table1": res["table1"],
        "ablation": res["ablation"],
        "budget": res["budget"],
        "claims": {
            f"{c['a']}-vs-{c['b']}": {
                "diff": c["diff"],
                "se": c["se"],
                "n": c["n"],
                "p": c["p"],
                "p_vs_paper": c["p_vs_paper"],
                "paper": c["paper_diff"],
                "verdict": VERDICTS.get(c["verdict"]),
            }
            for c in res["claims"]
        },
    }
    folder = out / "summary"
    shutil.rmtree(folder, ignore_errors=True)
    for topic, entries in topics.items():
        for name, values in entries.items():
            path = folder / topic / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, sort_keys=True) + "\n")
    write_plots(runs, out / "plots")
    write_tidy(runs, out / "tidy.csv")
    return res


def write_plots(runs: Runs, folder: Path) -> list[Path]:
    """The files of `dvc plots show`, one plot each, so that a plot shows one group of runs:

    * ``rounds_table1.csv`` (round, method, ood): every evaluated round of each Table-1 method's seed-0 run,
      ``rounds_table1_b.csv`` the same in regime B (when it has records);
    * ``rounds_ablation.csv`` (round, method, ood): the ablation variants' evaluated rounds (``method`` is the
      variant);
    * ``rounds_long.csv`` (round, method, ood): Figure 3's extended runs;
    * ``losses_critic.csv`` and ``losses_policy.csv`` (method, step, loss): the per-update losses of the
      seed-0 runs (every 5th row), apart from success and from each other (their scales differ).
    """
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    written = []

    def rounds(name: str, named_runs) -> None:
        rows = [("round", "method", "ood")]
        for label, run in named_runs:
            if run is not None and run.method != "sft":
                rows += [(r, label, f"{100 * v:.2f}") for r, v in run.curve()]
        if len(rows) > 1:
            _write_csv(folder / f"{name}.csv", rows)
            written.append(folder / f"{name}.csv")

    rounds("rounds_table1", ((m, runs.seed_run(m)) for m in runs.table1))
    b = regime_dirs(runs.root).get("b")
    if b is not None and b != runs.root and (b / "table1").is_dir():
        rb = Runs.load(b)
        rounds("rounds_table1_b", ((m, rb.seed_run(m)) for m in rb.table1))
    rounds("rounds_ablation", runs.ablation.items())
    rounds("rounds_long", runs.long.items())
    losses: dict[str, list[tuple]] = {"critic": [], "policy": []}
    for m in runs.table1:
        run = runs.seed_run(m)
        log = run.path / "train_log.csv" if run else None
        if log is not None and log.is_file():
            with log.open() as fh:
                rows = list(csv.DictReader(fh))
            for x in rows[::5]:
                if x["loss"] and x["kind"] in losses:
                    losses[x["kind"]].append((m, x["step"], x["loss"]))
    for kind, rows in losses.items():
        if rows:
            _write_csv(folder / f"losses_{kind}.csv", [("method", "step", "loss"), *rows])
            written.append(folder / f"losses_{kind}.csv")
    return written


VERDICTS = {"holds": 1, "reversed": -1, "not significant": 0}


def _write_csv(path: Path, rows: list[tuple]) -> None:
    path.write_text("\n".join(",".join(str(c) for c in row) for row in rows) + "\n")


INDEX = [  # (file stem, what it is, paper section / notebook)
    (
        "table1_regimes",
        "Table 1 in both benchmark regimes (A: narrow SFT data; B: the paper's regime)",
        "§4 · 04",
    ),
    (
        "preregistration",
        "Regime B's pre-registered predictions, per claim, beside the outcomes (not in the paper)",
        "04",
    ),
    ("table1_main", "Table 1: main OOD success, all methods", "§4 · 04"),
    ("figure3_rounds", "Figure 3: OOD success over rounds, with and without memory", "§4 · 04"),
    ("budget_curve", "Budget curve: OOD success against accepted environments (not in the paper)", "04"),
    ("table3_critic_sensitivity", "Table 3: critic (diagnoser) sensitivity", "§4 · 06"),
    ("table4_text2potential", "Table 4: Text2potential ablations", "§4 · 05"),
    ("learning_speed", "Learning speed with and without shaping; critic agreement", "App. C · 05"),
    ("table5_memory_design", "Table 5: memory design at a fixed budget", "App. C · 08"),
    ("complementarity", "Program complementarity (generation / training / both)", "App. C · 08"),
    ("figure5_memory_snapshots", "Figure 5: OOD success across memory snapshots", "App. C · 08"),
    ("table6_family_transfer", "Table 6: cross-family program transfer", "App. C · 07"),
    ("table7_backbone_transfer", "Table 7: memory reuse across policy backbones", "App. C · 07"),
    ("table8_generation_quality", "Table 8: generation quality and diagnosis agreement", "App. C · 09"),
    ("table9_compute", "Table 9: compute and adaptive scheduling", "App. C · 09"),
    ("figure6_gallery", "Figure 6: rendered seed scenes and validated variations", "App. C · 01"),
    ("sft_baseline", "SFT baseline (starting point of every method)", "02"),
    ("table2_libero_pro", "Table 2: LIBERO-Pro (its own issue and notebook 10)", "§4 · 10"),
    ("table2_libero_curve", "Table 2 over rounds: LIBERO-Pro success per suite, CoDA and uniform", "§4 · 10"),
    ("libero_coverage", "Generated LIBERO variants per held-out suite region, per round", "10"),
]


def index(runs: Runs, out: Path) -> Path:
    """figures/README.md: every artifact, its files, and whether our ordering matches the paper's."""
    lines = [
        "# Tables and figures",
        "",
        f"Regenerated by `dvc repro` (profile `{runs.profile()}`, from the runs under `runs/`). Each table is a "
        "CSV and a Markdown file with our numbers (`ours (mean ± s.e., n)`) beside the paper's (`paper`); "
        "each figure is a PNG and an SVG. The notebook column names the notebook that writes it.",
        "",
        "| artifact | what | section · notebook | files | ordering vs paper |",
        "|---|---|---|---|---|",
    ]
    for stem, what, where in INDEX:
        files = sorted(p.name for p in out.glob(f"{stem}.*"))
        md = out / f"{stem}.md"
        order = ""
        if md.is_file():
            text = md.read_text()
            order = (
                "differs" if "ordering differs" in text else "matches" if "matches the paper" in text else "—"
            )
        shown = ", ".join(f"[{f}]({f})" for f in files) or "not built"
        lines.append(f"| `{stem}` | {what} | {where} | {shown} | {order} |")
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path
