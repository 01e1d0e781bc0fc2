"""`coda report ...`: build tables and figures from finished runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_report_commands(sub) -> None:
    rep = sub.add_parser(
        "report", help="build the paper's tables and figures from the runs' records/ into figures/"
    )
    rep.add_argument(
        "what",
        nargs="?",
        default="all",
        help="a table/figure name, a notebook section, all, available (those whose inputs are all there); "
        "agreement (the critics' agreement, from runs/); or plots-template (the page `dvc plots show` writes, "
        "with its chart libraries inlined: it opens with no network; default --out .dvc/plots/offline.html)",
    )
    rep.add_argument(
        "--runs",
        default=None,
        help="the runs' records (default records/: `coda record` copies, in git) or run directories "
        "(default runs/ for agreement)",
    )
    rep.add_argument(
        "--out",
        default=None,
        help="agreement: the JSON file to write; plots-template: the HTML file to write",
    )
    rep.add_argument("--figures", default="figures", help="folder to write the tables and figures to")
    rep.add_argument("--data", default="data", help="the built scenes that figures with scene images render")


def add_render_command(sub) -> None:
    ren = sub.add_parser(
        "render",
        help="a scene with the robot, seen by the two figure cameras (front, rear), as a labelled PNG "
        "(a spec file, FAMILY/N or a hash)",
    )
    ren.add_argument("scene", help="scene spec JSON file, FAMILY/N (seed scene N of data/) or a scene hash")
    ren.add_argument("--out", required=True, help="PNG file to write")
    ren.add_argument(
        "--data",
        default="data",
        help="the built scenes (default data/; built there first when missing and the profile builds "
        "its own scenes, smoke)",
    )
    ren.add_argument("--size", type=int, default=320, help="pixels per view (square)")


def add_memory_report_command(msub: argparse._SubParsersAction) -> None:
    """Add ``report RUN --out FILE`` to the ``memory`` subcommands (`coda.memory.commands.add_memory_commands`),
    here so that `coda.memory` never imports the report layer."""
    rep = msub.add_parser(
        "report", help="a static HTML page about a run's memory: modes, programs, lineage, failures"
    )
    rep.add_argument(
        "run_dir",
        metavar="RUN",
        help="a run directory (run.json, memory/round-NNNN/, ...) or its record (`coda record`: the keyframes "
        "stored there are shown)",
    )
    rep.add_argument("--out", required=True, help="HTML file to write")
    rep.add_argument(
        "--data",
        default="data",
        help="the built scenes to render with (default data/, which `coda run` builds for smoke; the "
        "pipeline: scenes); without them the page has no scene images",
    )
    rep.add_argument(
        "--image-size",
        type=int,
        default=160,
        help="pixels per camera view (square) of the images it renders (a record's stored keyframes keep "
        "their 160)",
    )
    rep.add_argument(
        "--sft", default=None, help="SFT directory of the run (round 1's actor; default: runs/sft)"
    )
    rep.add_argument(
        "--no-resimulate",
        action="store_true",
        help="show the failing scenes' initial states instead of re-simulated keyframes",
    )
    rep.add_argument(
        "--keyframes-dir",
        default=None,
        help="where the keyframes are also saved as PNG + GIF files with a keyframes.json index "
        "(default: <out stem>_keyframes/ beside the page; e.g. RUN/memory/round-NNNN/keyframes to keep "
        "them beside that snapshot)",
    )


def run_memory_report_command(args: argparse.Namespace) -> int:
    from coda.report.memory_report import build_report

    out = build_report(
        args.run_dir,
        args.out,
        args.data,
        args.image_size,
        params=getattr(args, "params", "params.yaml"),  # the common --params
        sft_dir=args.sft,
        resimulate=not args.no_resimulate,
        keyframes_dir=args.keyframes_dir,
    )
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


def run_render_command(args: argparse.Namespace) -> int:
    from coda.report.render import render_scene

    print(render_scene(args.scene, args.out, args.data, args.size))
    return 0


def run_report_command(args: argparse.Namespace) -> int:
    from coda.report import build

    if args.what == "plots-template":
        from coda.report.plots_page import DEFAULT, write_template

        print(f"wrote {write_template(args.out or DEFAULT)}")
        return 0
    if args.what == "agreement":
        from coda.report.ablations import AGREEMENT_FILE, write_agreement
        from coda.report.runs import Runs

        runs = Runs.load(args.runs or "runs")
        print(json.dumps(write_agreement(runs, Path(args.out or Path(build.RECORDS) / AGREEMENT_FILE))))
        return 0
    args.runs = args.runs or build.RECORDS
    return build.main(args)
