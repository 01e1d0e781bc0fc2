"""Data scaling (issue "Science I"): the SFT policy fine-tuned on planner demonstrations of N generated
environments per family, uniform vs targeted at its own diagnosed failures, on the fixed evaluation; prints JSON.

Every (mode, N) of the profile's `scaling` section gets the same number of updates (`scaling.updates`) with
the co-evolution rounds' recipe (`coevolve.finetune`, `rehearsal_share`, `rehearsal_per_family`); see
`coda/scaling.py`. Finished rows are kept under --out, so an interrupted run resumes. With --figures it also
writes data_scaling.{csv,md,png} there.

Usage: python benchmarks/data_scaling.py --json [--profile cpu] [--data scenes] [--sft runs/sft]
       [--out runs/data_scaling] [--figures figures]
       # the recipe comparison (README): LoRA adapters instead of all weights, at one budget
       python benchmarks/data_scaling.py --json --finetune lora --lr 1e-3 --ns 0 64 --modes uniform \
           --out runs/data_scaling_lora
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON (the default output)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--data", default="scenes")
    ap.add_argument("--sft", default="runs/sft")
    ap.add_argument("--out", default="runs/data_scaling")
    ap.add_argument("--figures", default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--finetune", choices=["full", "lora"], default=None, help="override coevolve.finetune")
    ap.add_argument("--lr", type=float, default=None, help="override scaling.lr")
    ap.add_argument("--ns", type=int, nargs="+", default=None, help="override scaling.ns")
    ap.add_argument("--modes", nargs="+", default=None, help="override scaling.modes")
    args = ap.parse_args()

    import torch

    from coda.commands import _executor
    from coda.config import load_params
    from coda.scaling import run_scaling, table_rows, write_figures

    torch.set_num_threads(1)
    cfg = load_params(args.params, profile=args.profile)
    sc = {k: v for k, v in (("lr", args.lr), ("ns", args.ns), ("modes", args.modes)) if v is not None}
    cfg = dataclasses.replace(
        cfg,
        scaling=dataclasses.replace(cfg.scaling, **sc),
        coevolve=dataclasses.replace(cfg.coevolve, finetune=args.finetune or cfg.coevolve.finetune),
    )
    if not (Path(args.sft) / "policy" / "config.json").exists():
        raise SystemExit(f"{args.sft}/policy: no SFT policy (run `coda sft --out {args.sft}` first)")
    ex = _executor(cfg, Path(args.data), args.workers)
    try:
        result = run_scaling(cfg, Path(args.data), Path(args.sft), Path(args.out), ex)
    finally:
        ex.close()
    if args.figures:
        write_figures(result, Path(args.figures))
    summary = {
        "profile": cfg.profile,
        "updates": result["updates"],
        "finetune": result["finetune"],
        "rows": table_rows(result),
        "targeted": result["meta"].get("targeted"),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
