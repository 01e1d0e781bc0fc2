"""`coda libero sft|run`: the LIBERO-Pro experiment (Table 2) from the command line and DVC."""

from __future__ import annotations

import json
from pathlib import Path

from coda.errors import UserError
from coda.libero_pro import METHODS


def add_libero_commands(sub) -> None:
    lib = sub.add_parser(
        "libero", help="LIBERO-Pro (Table 2): planner demos + SFT, CoDA rounds (needs the [libero] extra)"
    )
    lsub = lib.add_subparsers(dest="libero_cmd", required=True)
    sft = lsub.add_parser(
        "sft", help="planner demonstrations, SFT and evaluation; writes DIR/policy, DIR/metrics.json"
    )
    sft.add_argument("--out", required=True, metavar="DIR", help="directory for the policy and its metrics")
    run = lsub.add_parser(
        "run",
        help="co-evolution rounds (CoDA or uniform) from an SFT directory, evaluated after every round "
        "(resumes in DIR)",
    )
    run.add_argument(
        "--sft", required=True, metavar="DIR", help="the `coda libero sft` directory to start from"
    )
    run.add_argument(
        "--out", required=True, metavar="DIR", help="run directory (checkpoints, metrics; resumed)"
    )
    run.add_argument(
        "--method",
        default="coda",
        choices=METHODS,
        help="coda (memory-guided generation) or uniform (novel programs only, the same budget)",
    )
    for p in (sft, run):  # --params/--profile come from coda's parser (accepted after any subcommand)
        p.add_argument("--seed", type=int, default=None, help="run seed (default base.seed)")
        p.add_argument(
            "--metrics-out", default=None, help="also write the metrics here (for DVC, tracked by git)"
        )


def run_libero_command(args, cfg) -> int:
    from coda.files import write_json
    from coda.libero_pro import run as lr
    from coda.sim.libero import LiberoUnavailable

    seed = cfg.seed if args.seed is None else args.seed
    try:
        if args.libero_cmd == "sft":
            metrics = lr.run_sft(cfg, Path(args.out), seed=seed)
        else:
            if not (Path(args.sft) / "policy" / "config.json").exists():
                raise UserError(
                    f"--sft {args.sft}: no LIBERO SFT policy there; run `coda libero sft --out {args.sft}`"
                )
            metrics = lr.run_rounds(cfg, Path(args.sft), Path(args.out), seed=seed, method=args.method)
    except LiberoUnavailable as e:
        raise UserError(str(e)) from None
    if args.metrics_out:
        write_json(Path(args.metrics_out), metrics)
    print(json.dumps(metrics))
    return 0
