"""Every table and figure of the paper from finished runs, by notebook section.

``build_section("04", runs_dir, figures_dir)`` writes Table 1 and Figure 3, and so on for each section (see
`SECTIONS`); the notebooks call these and display what they wrote, and ``coda report [NAME|all]`` runs them
from the command line. Rows whose runs are missing say "not run"; no number is ever filled in by hand.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from coda.report import inputs
from coda.report.ablations import (
    learning_speed,
    table3_critic_sensitivity,
    table4_text2potential,
)
from coda.report.budget import budget_curve
from coda.report.gallery import figure6_gallery
from coda.report.generation import table8_generation_quality, table9_compute
from coda.report.main_results import figure3_rounds, sft_baseline, table1_main
from coda.report.memory_design import (
    complementarity,
    figure5_memory_snapshots,
    table5_memory_design,
    table6_family_transfer,
    table7_backbone_transfer,
)
from coda.report.preregistration import preregistration
from coda.report.regime_tables import table1_regimes
from coda.report.runs import Runs, records_of
from coda.report.summary import index, summary

# ---------------------------------------------------------------------------------------------------------
SECTIONS: dict[str, list[str]] = {
    "01": ["figure6_gallery"],
    "02": ["sft_baseline"],
    "04": ["table1_regimes", "preregistration", "table1_main", "figure3_rounds", "budget_curve"],
    "05": ["table4_text2potential", "learning_speed"],
    "06": ["table3_critic_sensitivity"],
    "07": ["table6_family_transfer", "table7_backbone_transfer"],
    "08": ["table5_memory_design", "complementarity", "figure5_memory_snapshots"],
    "09": ["table8_generation_quality", "table9_compute"],
}
_ARTIFACTS = {
    f.__name__: f
    for f in (
        figure6_gallery,
        sft_baseline,
        table1_regimes,
        preregistration,
        table1_main,
        figure3_rounds,
        budget_curve,
        table4_text2potential,
        learning_speed,
        table3_critic_sensitivity,
        table6_family_transfer,
        table7_backbone_transfer,
        table5_memory_design,
        complementarity,
        figure5_memory_snapshots,
        table8_generation_quality,
        table9_compute,
    )
}
BUILDERS = {name: _ARTIFACTS[name] for names in SECTIONS.values() for name in names}


def _libero(name: str):
    def builder(runs: Runs, out: Path):
        from coda.report import libero_tables

        return getattr(libero_tables, name)(runs.root, out)

    return builder


SECTIONS["10"] = ["table2_libero_pro", "table2_libero_curve", "libero_coverage", "libero_planner"]
BUILDERS.update({name: _libero(name) for name in SECTIONS["10"]})
BUILDERS["summary"] = summary
RECORDS = "records/regime_a"  # regime A's records (`coda record`: results without checkpoints, in git)
BUILDERS["index"] = index  # not a paper artifact: the pipeline's metric files (written to metrics/)
DATA_BUILDERS = {"figure6_gallery", "learning_speed", "table8_generation_quality"}


def build(
    name: str,
    runs_dir: str | Path = RECORDS,
    figures_dir: str | Path = "figures",
    data_dir: str | Path = "data",
):
    """Build one artifact (a table returns its `Table`, a figure its paths)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown artifact {name!r}; known: {', '.join(BUILDERS)}")
    runs_dir = records_of(runs_dir)  # records/ reads as regime A's records; records/regime_b as B's
    inputs.check(
        name, runs_dir, figures_dir, data_dir
    )  # never overwrites a committed result with placeholders
    runs = Runs.load(runs_dir)
    kwargs = {"data_dir": data_dir} if name in DATA_BUILDERS else {}
    return BUILDERS[name](runs, Path(figures_dir), **kwargs)


def build_section(section: str, runs_dir=RECORDS, figures_dir="figures", data_dir="data") -> dict[str, Any]:
    """Build a notebook section's artifacts. One whose inputs are missing is left as it is in the committed
    figures/ (the notebook prints one line naming them; see `coda.report.inputs`)."""
    built = {}
    for name in SECTIONS[section]:
        try:
            built[name] = build(name, runs_dir, figures_dir, data_dir)
        except inputs.MissingInputs as missing:
            print(missing)
    return built


def main(args: argparse.Namespace) -> int:
    data = getattr(args, "data", "data")
    if (
        args.what == "available"
    ):  # mid-pipeline: the artifacts whose inputs are all there, the rest left alone
        for name in BUILDERS:
            if name in ("summary", "index"):
                continue
            gone = inputs.missing(name, args.runs, data)
            if gone:
                noun = "inputs" if len(gone) > 1 else "input"
                print(f"{name}: left as it is ({len(gone)} {noun} missing, e.g. {gone[0]})")
            else:
                build(name, args.runs, args.figures, data)
                print(name)
        return 0
    names = (
        [n for n in BUILDERS if n not in ("summary", "index")] + ["index"]
        if args.what == "all"
        else SECTIONS.get(args.what, [args.what])
    )
    if len(names) > 1:  # `all` or a section: check everything before writing anything
        gone = [name for name in names if inputs.missing(name, args.runs, data)]
        if gone and inputs.protected(args.figures):
            inputs.check(gone[0], args.runs, args.figures, data)
    for name in names:
        build(name, args.runs, args.figures, data)
        print(name)
    return 0
