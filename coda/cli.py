"""`coda` command line: the parser and the dispatch; what the result-producing commands do lives in
`coda.commands` (data building, planner and validity checks, SFT, co-evolution runs)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from coda.commands import (
    _record,
    data_ensure,
    data_scenes,
    ensure_scenes,
    planner_check,
    run_method_command,
    run_regimes_command,
    run_sft_command,
    validity_counts,
)
from coda.errors import UserError  # still importable from coda.cli, as before

os.environ.setdefault("DVC_NO_ANALYTICS", "1")

DESCRIPTION = (
    "Reproduce CoDA (Co-Evolution of Data Engines and Action Policies) with a simulated Franka Panda in "
    "PyBullet: build the scenes, train a policy on planner demonstrations, run the co-evolution methods, "
    "inspect their shared memory and make the paper's tables and figures. `--profile smoke` runs everything "
    "in minutes; `coda COMMAND --help` describes each command."
)
# help texts shared by several commands
DATA_HELP = (
    "the built scenes to read (default data/; the pipeline uses scenes/); built here first when missing "
    "and the profile builds its own scenes (smoke)"
)
WORKERS_HELP = "simulator worker processes (default: the profile's sim.workers)"
JSON_HELP = "print the result as JSON"


# -- entry point -------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    # --params/--profile are accepted before or after the subcommand (`coda sft --profile smoke ...`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--params", default=argparse.SUPPRESS, help="parameters file (default params.yaml)")
    common.add_argument(
        "--profile",
        default=argparse.SUPPRESS,
        help="smoke (minutes, builds its own scenes), cpu (the committed results) or paper "
        "(default: the params file's base.profile)",
    )
    ap = argparse.ArgumentParser(prog="coda", description=DESCRIPTION, parents=[common])
    sub = ap.add_subparsers(dest="cmd", required=True)

    # every (sub)subcommand takes --params/--profile too: `coda data scenes --profile smoke`
    def inherit(add):
        def add_parser(name, **kw):
            parser = add(name, parents=[common], **kw)
            make_subparsers = parser.add_subparsers

            def add_subparsers(**kw2):
                action = make_subparsers(**kw2)
                action.add_parser = inherit(action.add_parser)
                return action

            parser.add_subparsers = add_subparsers
            return parser

        return add_parser

    sub.add_parser = inherit(sub.add_parser)

    d = sub.add_parser("data", help="build, check or describe data/")
    dsub = d.add_subparsers(dest="data_cmd", required=True)
    b = dsub.add_parser("build", help="build data/ deterministically")
    b.add_argument("--out", default="data", help="folder to build (default data/; replaced)")
    b.add_argument("--n-seeds", type=int, default=None, help="seed layouts in total (default 500)")
    b.add_argument("--suite-size", type=int, default=None, help="held-out scenes per suite (default 100)")
    b.add_argument("--families", nargs="+", default=None, help="task families to build (default: all four)")
    b.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)
    b.add_argument(
        "--record",
        metavar="DVC_FILE",
        default=None,
        help="then record the build in DVC_FILE (dvc commit, and the file listing under meta), e.g. data.dvc",
    )
    e = dsub.add_parser("ensure", help="pull or rebuild data/ so that it matches data.dvc")
    e.add_argument("--out", default="data", help="the data folder (default data/)")
    e.add_argument("--dvc-file", default="data.dvc", help="the DVC file that records it (default data.dvc)")
    e.add_argument(
        "--accept", action="store_true", help="keep a rebuild that differs from data.dvc and record it there"
    )
    sc_ = dsub.add_parser("scenes", help="the profile's scenes (its data section) from data/ or built")
    sc_.add_argument(
        "--out", default="scenes", help="folder to write the scenes to (default scenes/; replaced)"
    )
    sc_.add_argument(
        "--data", default="data", help="the released data folder to take them from (default data/)"
    )
    sc_.add_argument("--dvc-file", default="data.dvc", help="the DVC file that records it (default data.dvc)")
    sc_.add_argument(
        "--regime",
        choices=("a", "b"),
        default="a",
        help="b: the widened seed space and corner suites (issue #27)",
    )
    dsub.add_parser("ranges", help="print the factor ranges of every family (Markdown)")

    pc = sub.add_parser("planner-check", help="scripted-planner success on seed scenes")
    pc.add_argument("--family", default="all", help="a task family or all (default)")
    pc.add_argument("--n", type=int, default=None, help="seed scenes per family (default planner.n_check)")
    pc.add_argument("--data", default="data", help=DATA_HELP)
    pc.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)
    pc.add_argument("--json", action="store_true", help=JSON_HELP)
    pc.add_argument("--out", default=None, help="also write the JSON here")

    sc = sub.add_parser("scenes", help="sample scenes and report validity pass/repair/reject counts")
    sc.add_argument("--family", required=True, help="the task family to sample")
    sc.add_argument("--n", type=int, default=50, help="scenes to sample (default 50)")
    sc.add_argument("--split", default="generator", help="the sampler's split (default generator)")
    sc.add_argument("--validity", action="store_true", help="run the validity checks (the only mode so far)")
    sc.add_argument("--data", default="data", help=DATA_HELP)
    sc.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)
    sc.add_argument("--json", action="store_true", help=JSON_HELP)

    rg = sub.add_parser(
        "regimes", help="each regime's SFT policy on the same certified uniform draws (metrics/regimes.json)"
    )
    rg.add_argument(
        "--regime",
        action="append",
        required=True,
        help="NAME=POLICY_RUN:SFT_METRICS:DATA, e.g. a=runs/sft:metrics/sft.json:scenes (repeatable)",
    )
    rg.add_argument(
        "--n",
        type=_positive_int,
        default=None,
        help="certified uniform draws per family (data.uniform_draws)",
    )
    rg.add_argument(
        "--out", default="metrics/regimes.json", help="JSON file to write (default metrics/regimes.json)"
    )
    rg.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)

    sft = sub.add_parser("sft", help="SFT on planner demonstrations; writes DIR/policy and DIR/metrics.json")
    sft.add_argument("--out", required=True, metavar="DIR", help="directory for the policy and its metrics")
    sft.add_argument("--data", default="data", help=DATA_HELP)
    sft.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)
    sft.add_argument(
        "--metrics-out", default=None, help="also write the metrics here (for DVC, tracked by git)"
    )
    sft.add_argument(
        "--backbone-b",
        action="store_true",
        help="train Table 7's second backbone (experiments.backbone_b: backbone and epochs)",
    )
    sft.add_argument(
        "--eval-only",
        action="store_true",
        help="re-evaluate the policy already in --out on --data's episodes (training keys kept)",
    )

    run = sub.add_parser("run", help="run one co-evolution method end to end (resumes in DIR)")
    run.add_argument(
        "--method",
        default=None,
        help="sft, domain_rand, uniform, sr_guided, critic_no_memory, "
        "coda, gen_store_only or train_store_only",
    )
    run.add_argument("--seed", type=int, default=None, help="run seed (default base.seed)")
    run.add_argument(
        "--out", required=True, metavar="DIR", help="run directory (checkpoints, memory, metrics; resumed)"
    )
    run.add_argument(
        "--sft",
        default="runs/sft",
        help="directory holding the SFT policy (policy/); trained there first when missing",
    )
    run.add_argument("--data", default="data", help=DATA_HELP)
    run.add_argument("--workers", type=_positive_int, default=None, help=WORKERS_HELP)
    run.add_argument("--metrics-out", default=None, help="also write the final metrics here")
    run.add_argument(
        "--memory", default=None, help="memory_reuse: a run directory, snapshot or pulled Hub copy"
    )
    run.add_argument(
        "--variant",
        default=None,
        help="an ablation from params.yaml's experiments.variants (sets the method and coevolve overrides)",
    )
    run.add_argument(
        "--budget",
        type=_positive_int,
        default=None,
        metavar="N",
        help="N generated environments and up to N planner demonstrations per family per round "
        "(sets coevolve.envs_per_family and demos_per_family; evaluated only after the last round: "
        "the budget curve)",
    )
    run.add_argument(
        "--extend",
        default=None,
        metavar="RUN",
        help="continue a finished run (copied into --out) up to coevolve.long_rounds rounds (Figure 3)",
    )

    from coda.memory.commands import add_memory_commands
    from coda.report.commands import add_memory_report_command

    add_memory_report_command(add_memory_commands(sub))

    from coda.libero_pro.commands import add_libero_commands

    add_libero_commands(sub)

    from coda.maintenance import add_compare_command, add_prune_command, add_record_command

    add_prune_command(sub)
    add_compare_command(sub)
    add_record_command(sub)

    from coda.verify import add_verify_command

    add_verify_command(sub)

    from coda.pipeline_status import add_status_command

    add_status_command(sub)

    from coda.report.commands import add_render_command, add_report_commands

    add_report_commands(sub)
    add_render_command(sub)

    sub.add_parser(
        "numerics",
        help="what of the numerics pin is in force in a `coda` process (JSON; see coda/numerics.py)",
    )
    bench = sub.add_parser("bench", help="benchmarks (print JSON)")
    bench.add_argument("what", choices=["sim"], help="what to benchmark: sim (simulator throughput)")
    bench.add_argument("--json", action="store_true", help="print JSON (the only output so far)")
    bench.add_argument("--data", default="data", help="the built scenes to load (default data/)")
    return ap


def _families(arg: str) -> list[str]:
    from coda.data import FAMILIES

    if arg == "all":
        return list(FAMILIES)
    if arg not in FAMILIES:
        raise UserError(f"--family: unknown family {arg!r}; expected one of {', '.join(FAMILIES)} or all")
    return [arg]


def _memory_report_scenes(args: argparse.Namespace) -> None:
    """`coda memory report` without its scenes: the page goes without scene images (and says so), and a note
    says how to get them for the run's profile (or --profile). Not built here: the run that made RUN built
    them (`coda run` does), so they are missing only where --data points elsewhere."""
    from coda.config import ConfigError, load_params
    from coda.memory.snapshots import latest_snapshot

    data_dir = Path(args.data)
    if (data_dir / "manifest.json").is_file() or not Path(args.run_dir).is_dir():
        return
    if latest_snapshot(args.run_dir) is None:
        return  # the report refuses the run in one line; a note about images would only come before it
    if (Path(args.run_dir) / "keyframes" / "keyframes.json").is_file():
        return  # a record with stored keyframes: the page says what it shows without data/
    run_json = Path(args.run_dir) / "run.json"
    profile = args.profile
    if profile is None and run_json.is_file():
        profile = json.loads(run_json.read_text()).get("profile")
    try:
        ensure_scenes(data_dir, load_params(args.params, profile), build=False)
    except (UserError, ConfigError) as err:
        print(f"note: the report shows no scene images: {err}", file=sys.stderr)


def run(argv: list[str] | None = None) -> int:
    from coda.config import load_params

    args = _parser().parse_args(argv)
    # not set_defaults: the parent parser's actions are shared, and a default there would override the
    # value given before the subcommand
    args.params = getattr(args, "params", "params.yaml")
    args.profile = getattr(args, "profile", None)
    cfg = load_params(args.params, args.profile)
    if args.cmd == "data":
        from coda import data

        if args.data_cmd == "ranges":
            from coda.sim.families.ranges import render_coverage

            print(data.render_markdown().rstrip("\n") + "\n\n" + render_coverage())
        elif args.data_cmd == "build":
            m = data.build(
                Path(args.out),
                seed=cfg.seed,
                n_seed_layouts=args.n_seeds or data.N_SEED_LAYOUTS,
                suite_size=args.suite_size or data.SUITE_SIZE,
                families=tuple(args.families or data.FAMILIES),
                workers=args.workers or cfg.sim.workers,
                backend=cfg.sim.backend,
            )
            if args.record:
                _record(Path(args.record), Path(args.out))
            print(
                json.dumps(
                    {"counts": m["counts"], "stats": m["stats"], "dvc_md5": data.dvc_dir_md5(Path(args.out))}
                )
            )
        elif args.data_cmd == "scenes":
            m = data_scenes(Path(args.out), Path(args.data), Path(args.dvc_file), cfg, args.regime)
            print(json.dumps({"counts": m["counts"], "stats": m["stats"]}))
        else:
            print(data_ensure(Path(args.out), Path(args.dvc_file), cfg, accept=args.accept))
    elif args.cmd == "planner-check":
        families = _families(args.family)  # a wrong --family is reported before any build
        ensure_scenes(Path(args.data), cfg, whole=False)
        rows = planner_check(Path(args.data), families, args.n or cfg.planner.n_check, args.workers, cfg)
        out = rows[0] if len(rows) == 1 else {"families": rows}
        if args.out:  # keyed by family so that `dvc metrics show` can read it
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            keyed = {r["family"]: {k: v for k, v in r.items() if k != "family"} for r in rows}
            Path(args.out).write_text(json.dumps(keyed, indent=1) + "\n")
        print(
            json.dumps(out)
            if args.json
            else "\n".join(
                f"{r['family']:>10}: {r['success_rate'] * 100:5.1f}% of {r['n']}, median {r['median_episode_s']} s"
                for r in rows
            )
        )
    elif args.cmd == "scenes":
        (family,) = _families(args.family)
        ensure_scenes(Path(args.data), cfg, whole=False)
        counts = validity_counts(Path(args.data), family, args.n, args.split, cfg.seed, args.workers, cfg)
        print(json.dumps(counts) if args.json else counts)
    elif args.cmd == "regimes":
        for name, value in run_regimes_command(cfg, args).items():
            print(
                f"regime {name}: SFT fails {value['sft_uniform_failure']:.1%} of {value['n_uniform']} uniform "
                f"draws; OOD success {value['sft_ood']:.1%} of {value['n_ood']}"
            )
    elif args.cmd == "sft":
        ensure_scenes(Path(args.data), cfg)
        if args.backbone_b:  # Table 7's second policy backbone, from experiments.backbone_b
            import dataclasses

            from coda.config import read_experiments

            b = read_experiments(args.params, args.profile).backbone_b
            cfg = dataclasses.replace(
                cfg, sft=dataclasses.replace(cfg.sft, backbone=b["backbone"], epochs=b["epochs"])
            )
        metrics = run_sft_command(cfg, Path(args.data), Path(args.out), args.workers, args.eval_only)
        if args.metrics_out:
            from coda.files import write_json

            write_json(Path(args.metrics_out), metrics)
        print(json.dumps(metrics))
    elif args.cmd == "run":
        ensure_scenes(Path(args.data), cfg)
        metrics = run_method_command(cfg, args)
        if args.metrics_out:
            from coda.files import write_json

            write_json(Path(args.metrics_out), metrics)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("schedule_checks", "eval_outcomes")}))
    elif args.cmd == "memory":
        if args.memory_cmd == "report":
            from coda.report.commands import run_memory_report_command

            _memory_report_scenes(args)
            return run_memory_report_command(args)
        from coda.memory.commands import run_memory_command

        return run_memory_command(args)
    elif args.cmd == "report":
        from coda.report.commands import run_report_command

        return run_report_command(args)
    elif args.cmd == "render":
        from coda.report.commands import run_render_command

        ensure_scenes(Path(args.data), cfg, whole=False)
        return run_render_command(args)
    elif args.cmd == "libero":
        from coda.libero_pro.commands import run_libero_command

        return run_libero_command(args, cfg)
    elif args.cmd == "prune":
        from coda.maintenance import run_prune_command

        return run_prune_command(args)
    elif args.cmd == "compare":
        from coda.maintenance import run_compare_command

        return run_compare_command(args)
    elif args.cmd == "record":
        from coda.maintenance import run_record_command

        return run_record_command(args)
    elif args.cmd == "verify":
        from coda.verify import run_verify_command

        return run_verify_command(args)
    elif args.cmd == "status":
        from coda.pipeline_status import run_status_command

        return run_status_command(args)
    elif args.cmd == "numerics":
        from coda import numerics
        from coda.learn.updates import TRAIN_THREADS

        numerics.pin_torch(TRAIN_THREADS)
        print(json.dumps(numerics.in_force()))
    elif args.cmd == "bench":
        bench = Path(__file__).resolve().parent.parent / "benchmarks" / "sim_throughput.py"
        return subprocess.call([sys.executable, str(bench), "--json", "--data", args.data])
    return 0


def main(argv: list[str] | None = None) -> None:
    if argv is None:  # the `coda` command itself (not a call from Python): run under the numerics pin
        from coda import numerics

        numerics.pin_process()
    from coda.config import ConfigError
    from coda.sim.scene import SceneSpecError

    try:
        code = run(argv)
    except (UserError, ConfigError, SceneSpecError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted; re-running `coda run` on the same --out resumes it", file=sys.stderr)
        sys.exit(130)
    # Everything is written and closed by now. Freezing the objects left (torch, transformers, peft) keeps the
    # interpreter's final garbage collection from walking them: that saves ~1 s per process, and a pipeline runs
    # dozens of them.
    gc.freeze()
    sys.exit(code)
