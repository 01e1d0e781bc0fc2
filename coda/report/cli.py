"""`coda report ...`: build tables and figures from finished runs."""

from __future__ import annotations

import argparse


def add_report_commands(sub) -> None:
    rep = sub.add_parser("report", help="build the paper's tables and figures from runs/ into figures/")
    rep.add_argument("what", nargs="?", default="all", help="a table/figure name, a notebook section, or all")
    rep.add_argument("--runs", default="runs")
    rep.add_argument("--figures", default="figures")
    rep.add_argument("--data", default="data")


def add_render_command(sub) -> None:
    ren = sub.add_parser(
        "render", help="a scene's two camera views as a PNG (a spec file, FAMILY/N or a hash)"
    )
    ren.add_argument("scene", help="scene spec JSON file, FAMILY/N (seed scene N of data/) or a scene hash")
    ren.add_argument("--out", required=True, help="PNG file to write")
    ren.add_argument("--data", default="data")
    ren.add_argument("--size", type=int, default=320, help="pixels per view (square)")


def run_render_command(args: argparse.Namespace) -> int:
    from coda.report.render import render_scene

    print(render_scene(args.scene, args.out, args.data, args.size))
    return 0


def run_report_command(args: argparse.Namespace) -> int:
    from coda.report import build

    return build.main(args)
