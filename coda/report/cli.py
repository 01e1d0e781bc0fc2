"""`coda report ...`: build tables and figures from finished runs."""

from __future__ import annotations

import argparse


def add_report_commands(sub) -> None:
    rep = sub.add_parser("report", help="build the paper's tables and figures from runs/ into figures/")
    rep.add_argument("what", nargs="?", default="all", help="a table/figure name, a notebook section, or all")
    rep.add_argument("--runs", default="runs")
    rep.add_argument("--figures", default="figures")
    rep.add_argument("--data", default="data")


def run_report_command(args: argparse.Namespace) -> int:
    from coda.report import build

    return build.main(args)
