"""`coda` command line: data building, planner and validity checks, benchmarks."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from coda.errors import UserError  # still importable from coda.cli, as before

os.environ.setdefault("DVC_NO_ANALYTICS", "1")


# -- planner and validity checks (run inside executor workers) ----------------------------------------
def _planner_job(args: tuple[str, str]) -> dict[str, Any]:
    import time

    from coda import data
    from coda.sim.rollout import plan_episode
    from coda.sim.scene import SceneSpec

    spec = SceneSpec.from_json(args[1])
    t0 = time.perf_counter()
    rec = plan_episode(data._WORLD, spec)
    return {
        "family": args[0],
        "success": rec.success,
        "episode_s": rec.wall_s,
        "load_s": time.perf_counter() - t0 - rec.wall_s,
        "steps": rec.steps,
    }


def _validity_job(args: tuple[str, str, int, int]) -> dict[str, Any]:
    from coda import data
    from coda.sim.families import REGISTRY
    from coda.sim.validity import validate_scene

    family, split, index, seed = args
    rng = data.scene_rng(seed, family, split, index)
    spec = REGISTRY[family].sample(rng, data._WORLD.catalog, split)
    report = validate_scene(data._WORLD, spec, rng)
    return {"status": report.status, "repairs": report.repairs}


def _executor(cfg, data_dir: Path, workers: int | None):
    from coda import data
    from coda.sim.executor import make_executor
    from coda.sim.world import world_kwargs

    return make_executor(
        cfg.sim.backend if cfg else "local",
        workers or (cfg.sim.workers if cfg else 2),
        timeout_s=cfg.sim.episode_timeout_s if cfg else 60.0,
        retries=cfg.sim.retries if cfg else 1,
        ray_address=cfg.sim.ray_address if cfg else None,
        initializer=data._init_worker,
        initargs=(str(data_dir), world_kwargs(cfg) if cfg else None),
    )


def planner_check(
    data_dir: Path, families: list[str], n: int, workers: int | None = None, cfg=None
) -> list[dict]:
    from coda import data

    jobs = [(f, s.to_json()) for f in families for s in data.seed_scenes(data_dir, f, n)]
    ex = _executor(cfg, data_dir, workers)
    try:
        results = ex.map(_planner_job, jobs, desc="planner check")
    finally:
        ex.close()
    out = []
    for f in families:
        rows = [r.value for (fam, _), r in zip(jobs, results, strict=True) if fam == f and r.ok]
        failed = sum(1 for (fam, _), r in zip(jobs, results, strict=True) if fam == f and not r.ok)
        out.append(
            {
                "family": f,
                "n": len(rows) + failed,
                "success_rate": round(sum(r["success"] for r in rows) / max(len(rows) + failed, 1), 4),
                "median_episode_s": round(float(np.median([r["episode_s"] for r in rows])), 4)
                if rows
                else None,
                "median_load_s": round(float(np.median([r["load_s"] for r in rows])), 4) if rows else None,
                "worker_failures": failed,
            }
        )
    return out


def validity_counts(
    data_dir: Path, family: str, n: int, split: str, seed: int, workers: int | None, cfg=None
):
    jobs = [(family, split, 10_000 + i, seed) for i in range(n)]
    ex = _executor(cfg, data_dir, workers)
    try:
        results = ex.map(_validity_job, jobs, desc="validity")
    finally:
        ex.close()
    counts = {"family": family, "split": split, "n": n, "pass": 0, "repaired": 0, "rejected": 0, "errors": 0}
    for r in results:
        if r.ok:
            counts[r.value["status"]] += 1
        else:
            counts["errors"] += 1
    return counts


def run_sft_command(cfg, data_dir: Path, out: Path, workers: int | None) -> dict:
    import torch

    from coda.learn.train import run_sft

    torch.set_num_threads(1)
    s = cfg.sft
    ex = _executor(cfg, data_dir, workers)
    try:
        return run_sft(
            data_dir,
            out,
            backbone=s.backbone,
            demos_per_family=s.demos_per_family,
            noise=s.noise,
            epochs=s.epochs,
            batch_size=s.batch_size,
            lr=s.lr,
            eval_id_per_family=s.eval_id_per_family,
            eval_ood_per_suite=s.eval_ood_per_suite,
            seed=cfg.seed,
            families=cfg.data.families,
            executor=ex,
            max_chunks=cfg.sim.max_chunks,
            demo_repeats=s.demo_repeats,
        )
    finally:
        ex.close()


# -- data ------------------------------------------------------------------------------------------------
def run_method_command(cfg, args) -> dict:
    import dataclasses
    import shutil

    from coda.coevolve import METHODS, run_method
    from coda.config import read_experiments, with_variant

    if args.variant is not None:
        experiments = read_experiments(args.params, args.profile)
        if args.variant not in experiments.variants:
            known = ", ".join(experiments.variants) or "none"
            raise UserError(f"--variant: no experiments.variants.{args.variant} in {args.params} ({known})")
        variant = experiments.variants[args.variant]
        if args.method not in (None, variant.method):
            raise UserError(f"--method {args.method} contradicts variant {args.variant} ({variant.method})")
        args.method = variant.method
        cfg = with_variant(cfg, variant)
        cfg = dataclasses.replace(
            cfg, coevolve=dataclasses.replace(cfg.coevolve, rounds=cfg.coevolve.ablation_rounds)
        )
    if args.method is None:
        raise UserError("--method or --variant is required")
    if args.extend is not None:
        src, out = Path(args.extend), Path(args.out)
        if not (src / "metrics.json").exists():
            raise UserError(f"--extend: {src} is not a finished run (no metrics.json)")
        if not out.exists():  # later calls resume in --out itself
            shutil.copytree(src, out, ignore=shutil.ignore_patterns("actor"))
        cfg = dataclasses.replace(
            cfg, coevolve=dataclasses.replace(cfg.coevolve, rounds=cfg.coevolve.long_rounds)
        )
    if args.method not in METHODS:
        raise UserError(f"--method: unknown method {args.method!r}; expected one of {', '.join(METHODS)}")
    if args.method == "memory_reuse" and not args.memory:
        raise UserError(
            "--memory: memory_reuse trains on a frozen memory; give a run dir, snapshot or Hub copy"
        )
    if not (Path(args.sft) / "policy" / "config.json").exists():
        # the starting point of every method; trained here with the profile's `sft` settings when absent
        print(
            f"{args.sft}/policy: no SFT policy yet; training it first (coda sft --out {args.sft})",
            file=sys.stderr,
        )
        run_sft_command(cfg, Path(args.data), Path(args.sft), args.workers)
    ex = _executor(cfg, Path(args.data), args.workers)
    try:
        return run_method(
            cfg,
            args.method,
            seed=cfg.seed if args.seed is None else args.seed,
            data_dir=Path(args.data),
            sft_dir=Path(args.sft),
            out=Path(args.out),
            executor=ex,
            memory_from=args.memory,
        )
    finally:
        ex.close()


def _dvc() -> str:
    """The `dvc` beside this interpreter (the project's environment), else the one on PATH."""
    here = Path(sys.executable).parent / "dvc"
    return str(here) if here.is_file() else "dvc"


def _recorded_md5(dvc_file: Path) -> str | None:
    import yaml

    return yaml.safe_load(dvc_file.read_text())["outs"][0]["md5"] if dvc_file.exists() else None


def _record(dvc_file: Path, data_dir: Path) -> None:
    """Record `data_dir` in `dvc_file`: the file listing first, then DVC's own write (outs, cache; meta kept)."""
    from coda import data

    data.record_release(dvc_file, data_dir)
    subprocess.run([_dvc(), "commit", "-q", "-f", str(dvc_file)], capture_output=True, check=True)


def _dvc_remotes() -> list[str]:
    res = subprocess.run([_dvc(), "remote", "list"], capture_output=True, text=True)
    return (
        [line.split()[0] for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []
    )


def data_ensure(data_dir: Path, dvc_file: Path, cfg, *, accept: bool = False) -> str:
    """Make `data_dir` match `dvc_file`: keep it, pull it from a DVC remote if one is configured, or
    rebuild it and compare it file by file with the listing `dvc_file` records. With `accept`, a rebuild
    that differs is kept and recorded in `dvc_file` (after the report of what differs)."""
    import yaml

    from coda import data

    if not dvc_file.exists():
        raise UserError(f"{dvc_file}: not found (run from the repository root)")
    doc = yaml.safe_load(dvc_file.read_text())
    want = doc["outs"][0]["md5"]
    if data_dir.exists() and data.dvc_dir_md5(data_dir) == want:
        return f"{data_dir} is up to date ({want})"
    remotes = _dvc_remotes()
    if remotes:
        pulled = subprocess.run([_dvc(), "pull", "-q", str(dvc_file)], capture_output=True, text=True)
        if pulled.returncode == 0 and data_dir.exists() and data.dvc_dir_md5(data_dir) == want:
            return f"pulled {data_dir} from the DVC remote ({want})"
        where = f"not in the DVC remote ({', '.join(remotes)})"
    else:
        where = "no DVC remote configured"
    print(f"{data_dir}: {where}; rebuilding it (deterministic, a few minutes)", file=sys.stderr)
    build = (doc.get("meta") or {}).get("build", {})
    data.build(
        data_dir,
        seed=build.get("seed", cfg.seed),
        n_seed_layouts=build.get("n_seed_layouts", data.N_SEED_LAYOUTS),
        suite_size=build.get("suite_size", data.SUITE_SIZE),
        families=tuple(build.get("families", data.FAMILIES)),
        workers=cfg.sim.workers,
        backend=cfg.sim.backend,
    )
    got = data.dvc_dir_md5(data_dir)
    if got == want:
        subprocess.run([_dvc(), "commit", "-q", "-f", str(dvc_file)], capture_output=True)
        return f"rebuilt {data_dir}; hash matches {dvc_file} ({want})"
    diff = data.compare_listing(data.release_listing(doc), data.file_listing(data_dir))
    report = "\n  ".join(diff[:40] + ([f"... and {len(diff) - 40} more"] if len(diff) > 40 else []))
    head = f"rebuilt {data_dir} hashes to {got}, but {dvc_file} records {want}; {len(diff)} file(s) differ:"
    if not accept:
        raise UserError(
            f"{head}\n  {report}\nThe rebuilt data is kept in {data_dir}. To go on with it, run "
            f"`coda data ensure --accept` (records it in {dvc_file}; results will not be bit-comparable with "
            "the published ones), and please report the lines above."
        )
    _record(dvc_file, data_dir)
    print(f"warning: {head}\n  {report}", file=sys.stderr)
    return f"kept the rebuilt {data_dir} and recorded it in {dvc_file} ({got})"


def data_scenes(out: Path, data_dir: Path, dvc_file: Path, cfg) -> dict[str, Any]:
    """The profile's scenes (its `data` section's slots) in `out`: taken from `data_dir` when it matches
    `dvc_file` (after pulling or rebuilding it when the profile says `use_release`), else built directly.
    Either way the files are the same bytes."""
    from coda import data

    d = cfg.data
    sizes = dict(n_seed_layouts=d.n_seed_layouts, suite_size=d.suite_size, families=tuple(d.families))
    if d.use_release:
        print(data_ensure(data_dir, dvc_file, cfg), file=sys.stderr)
    want = _recorded_md5(dvc_file)
    source = data_dir if want and data_dir.exists() and data.dvc_dir_md5(data_dir) == want else None
    return data.build(
        out, seed=cfg.seed, workers=cfg.sim.workers, backend=cfg.sim.backend, source=source, **sizes
    )


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
    common.add_argument("--params", default=argparse.SUPPRESS, help="params file (default: params.yaml)")
    common.add_argument("--profile", default=argparse.SUPPRESS, help="override base.profile")
    ap = argparse.ArgumentParser(prog="coda", description=__doc__, parents=[common])
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
    b.add_argument("--out", default="data")
    b.add_argument("--n-seeds", type=int, default=None, help="seed layouts in total (default 500)")
    b.add_argument("--suite-size", type=int, default=None, help="held-out scenes per suite (default 100)")
    b.add_argument("--families", nargs="+", default=None)
    b.add_argument("--workers", type=_positive_int, default=None)
    b.add_argument(
        "--record",
        metavar="DVC_FILE",
        default=None,
        help="then record the build in DVC_FILE (dvc commit, and the file listing under meta), e.g. data.dvc",
    )
    e = dsub.add_parser("ensure", help="pull or rebuild data/ so that it matches data.dvc")
    e.add_argument("--out", default="data")
    e.add_argument("--dvc-file", default="data.dvc")
    e.add_argument(
        "--accept", action="store_true", help="keep a rebuild that differs from data.dvc and record it there"
    )
    sc_ = dsub.add_parser("scenes", help="the profile's scenes (its data section) from data/ or built")
    sc_.add_argument("--out", default="scenes")
    sc_.add_argument("--data", default="data")
    sc_.add_argument("--dvc-file", default="data.dvc")
    dsub.add_parser("ranges", help="print the factor ranges of every family (Markdown)")

    pc = sub.add_parser("planner-check", help="scripted-planner success on seed scenes")
    pc.add_argument("--family", default="all")
    pc.add_argument("--n", type=int, default=None, help="seed scenes per family (default planner.n_check)")
    pc.add_argument("--data", default="data")
    pc.add_argument("--workers", type=_positive_int, default=None)
    pc.add_argument("--json", action="store_true")
    pc.add_argument("--out", default=None, help="also write the JSON here")

    sc = sub.add_parser("scenes", help="sample scenes and report validity pass/repair/reject counts")
    sc.add_argument("--family", required=True)
    sc.add_argument("--n", type=int, default=50)
    sc.add_argument("--split", default="generator")
    sc.add_argument("--validity", action="store_true", help="run the validity checks (the only mode so far)")
    sc.add_argument("--data", default="data")
    sc.add_argument("--workers", type=_positive_int, default=None)
    sc.add_argument("--json", action="store_true")

    sft = sub.add_parser("sft", help="SFT on planner demonstrations; writes DIR/policy and DIR/metrics.json")
    sft.add_argument("--out", required=True)
    sft.add_argument("--data", default="data")
    sft.add_argument("--workers", type=_positive_int, default=None)
    sft.add_argument(
        "--metrics-out", default=None, help="also write the metrics here (for DVC, tracked by git)"
    )
    sft.add_argument(
        "--backbone-b",
        action="store_true",
        help="train Table 7's second backbone (experiments.backbone_b: backbone and epochs)",
    )

    run = sub.add_parser("run", help="run one co-evolution method end to end (resumes in DIR)")
    run.add_argument(
        "--method",
        default=None,
        help="sft, domain_rand, uniform, sr_guided, critic_no_memory, "
        "coda, gen_store_only or train_store_only",
    )
    run.add_argument("--seed", type=int, default=None, help="run seed (default base.seed)")
    run.add_argument("--out", required=True)
    run.add_argument("--sft", default="runs/sft", help="directory holding the SFT policy (policy/)")
    run.add_argument("--data", default="data")
    run.add_argument("--workers", type=_positive_int, default=None)
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
        "--extend",
        default=None,
        metavar="RUN",
        help="continue a finished run (copied into --out) up to coevolve.long_rounds rounds (Figure 3)",
    )

    from coda.memory.cli import add_memory_commands

    add_memory_commands(sub)

    from coda.libero.cli import add_libero_commands

    add_libero_commands(sub)

    from coda.maintenance import add_compare_command, add_prune_command

    add_prune_command(sub)
    add_compare_command(sub)

    from coda.report.cli import add_report_commands

    add_report_commands(sub)

    bench = sub.add_parser("bench", help="benchmarks (print JSON)")
    bench.add_argument("what", choices=["sim"])
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--data", default="data")
    return ap


def _families(arg: str) -> list[str]:
    from coda.data import FAMILIES

    if arg == "all":
        return list(FAMILIES)
    if arg not in FAMILIES:
        raise UserError(f"--family: unknown family {arg!r}; expected one of {', '.join(FAMILIES)} or all")
    return [arg]


def _need_data(path: Path) -> None:
    if not (path / "manifest.json").exists():
        raise UserError(
            f"{path}: no built data here; run `coda data ensure` (or `coda data build --out {path}`)"
        )


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
            m = data_scenes(Path(args.out), Path(args.data), Path(args.dvc_file), cfg)
            print(json.dumps({"counts": m["counts"], "stats": m["stats"]}))
        else:
            print(data_ensure(Path(args.out), Path(args.dvc_file), cfg, accept=args.accept))
    elif args.cmd == "planner-check":
        _need_data(Path(args.data))
        rows = planner_check(
            Path(args.data), _families(args.family), args.n or cfg.planner.n_check, args.workers, cfg
        )
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
        _need_data(Path(args.data))
        (family,) = _families(args.family)
        counts = validity_counts(Path(args.data), family, args.n, args.split, cfg.seed, args.workers, cfg)
        print(json.dumps(counts) if args.json else counts)
    elif args.cmd == "sft":
        _need_data(Path(args.data))
        if args.backbone_b:  # Table 7's second policy backbone, from experiments.backbone_b
            import dataclasses

            from coda.config import read_experiments

            b = read_experiments(args.params, args.profile).backbone_b
            cfg = dataclasses.replace(
                cfg, sft=dataclasses.replace(cfg.sft, backbone=b["backbone"], epochs=b["epochs"])
            )
        metrics = run_sft_command(cfg, Path(args.data), Path(args.out), args.workers)
        if args.metrics_out:
            from coda.learn.train import write_json

            write_json(Path(args.metrics_out), metrics)
        print(json.dumps(metrics))
    elif args.cmd == "run":
        _need_data(Path(args.data))
        metrics = run_method_command(cfg, args)
        if args.metrics_out:
            from coda.learn.train import write_json

            write_json(Path(args.metrics_out), metrics)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("schedule_checks", "eval_outcomes")}))
    elif args.cmd == "memory":
        from coda.memory.cli import run_memory_command

        return run_memory_command(args)
    elif args.cmd == "report":
        from coda.report.cli import run_report_command

        return run_report_command(args)
    elif args.cmd == "libero":
        from coda.libero.cli import run_libero_command

        return run_libero_command(args, cfg)
    elif args.cmd == "prune":
        from coda.maintenance import run_prune_command

        return run_prune_command(args)
    elif args.cmd == "compare":
        from coda.maintenance import run_compare_command

        return run_compare_command(args)
    elif args.cmd == "bench":
        bench = Path(__file__).resolve().parent.parent / "benchmarks" / "sim_throughput.py"
        return subprocess.call([sys.executable, str(bench), "--json", "--data", args.data])
    return 0


def main(argv: list[str] | None = None) -> None:
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
