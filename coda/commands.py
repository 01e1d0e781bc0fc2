"""What `coda`'s result-producing commands do: the planner and validity checks, SFT, one co-evolution run and
the data/ and scenes/ directories. `coda.cli` parses the command line and calls these; the pipeline's stages
depend on this module (dvc.yaml), not on the parser, so adding a command does not invalidate finished runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from coda import numerics
from coda.errors import UserError


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


def _no_op(_: int) -> None:
    """A job that does nothing: mapping it starts an executor's workers (and runs their initializer)."""


class _StartingExecutor:
    """`executor` (the local pool) whose workers start at once, on a thread, while this process goes on with
    its own set-up (importing torch, loading the policy): a worker's start (a new interpreter, its imports, the
    initializer's simulator world) takes seconds, and a pipeline stage otherwise waits for it at its first
    `map`. The workers only run an empty job before the real ones, so what they compute is unchanged; an error
    in their start is raised by the first `map`, as without the warm start."""

    def __init__(self, executor, workers: int) -> None:
        import threading

        self._executor, self._error = executor, None
        self._thread = threading.Thread(target=self._start, args=(workers,), name="coda-start", daemon=True)
        self._thread.start()

    def _start(self, workers: int) -> None:
        try:
            self._executor.map(_no_op, range(workers))
        except BaseException as err:  # noqa: BLE001 - raised by the first map, in the caller's thread
            self._error = err

    def _started(self) -> None:
        self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def map(self, fn, jobs, *, desc: str = ""):
        self._started()
        return self._executor.map(fn, jobs, desc=desc)

    def close(self) -> None:
        self._thread.join()
        self._executor.close()


def _started_executor(cfg, data_dir: Path, workers: int | None):
    """`_executor`, its workers starting right away when it is the local pool (`_StartingExecutor`)."""
    ex = _executor(cfg, data_dir, workers)
    if (cfg.sim.backend if cfg else "local").lower() != "local":
        return ex
    return _StartingExecutor(ex, workers or (cfg.sim.workers if cfg else 2))


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


def run_sft_command(cfg, data_dir: Path, out: Path, workers: int | None, eval_only: bool = False) -> dict:
    """`coda sft`: collect, train and evaluate; with `eval_only`, re-evaluate the policy already in `out` on
    `data_dir`'s episodes (e.g. after its suites were re-derived) and keep its training keys."""
    prior = Path(out) / "metrics.json"
    if eval_only and not (prior.is_file() and (Path(out) / "policy").is_dir()):
        raise UserError(
            f"sft --eval-only: {out} holds no trained policy and metrics.json (run `coda sft` first)"
        )
    ex = _started_executor(cfg, data_dir, workers)  # the workers start while torch is imported here
    try:
        from coda.files import write_json
        from coda.learn.sft import evaluate_sft, run_sft
        from coda.learn.updates import TRAIN_THREADS

        numerics.pin_torch(TRAIN_THREADS)
        s = cfg.sft
        if eval_only:
            metrics = json.loads(prior.read_text())
            metrics.update(
                evaluate_sft(
                    Path(out) / "policy",
                    data_dir,
                    tuple(cfg.data.families),
                    s.eval_id_per_family,
                    s.eval_ood_per_suite,
                    ex,
                    cfg.sim.max_chunks,
                )
            )
            write_json(prior, metrics)
            return metrics
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


def run_regimes_command(cfg, args) -> dict:
    """`coda regimes`: each regime's SFT policy on the same certified uniform draws, written to `args.out`."""
    from coda.regimes import parse_regime_arg, run_regimes

    try:
        regimes = [parse_regime_arg(t) for t in args.regime]
    except ValueError as err:
        raise UserError(str(err)) from None
    for *_, data_dir in regimes:
        if not (data_dir / "manifest.json").is_file():
            raise UserError(f"--regime: {data_dir} holds no built scenes (coda data scenes)")
    ex = _executor(cfg, regimes[0][3], args.workers)
    try:
        result = run_regimes(cfg, regimes, args.n or cfg.data.uniform_draws, ex)
    finally:
        ex.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return result


# -- data ------------------------------------------------------------------------------------------------
def run_method_command(cfg, args) -> dict:
    # With the SFT policy in place, the workers start now (they depend on the `sim` settings and the data
    # only), while this process imports torch and sets the run up; else after the SFT training below.
    sft_ready = (Path(args.sft) / "policy" / "config.json").exists()
    ex = _started_executor(cfg, Path(args.data), args.workers) if sft_ready else None
    try:
        return _run_method(cfg, args, ex)
    finally:
        if ex is not None:
            ex.close()


def _run_method(cfg, args, ex) -> dict:
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
    if args.budget is not None:  # a budget-curve point: only its final evaluation is read, so no curve
        c = dataclasses.replace(
            cfg.coevolve, envs_per_family=args.budget, demos_per_family=args.budget, curve_seeds=()
        )
        cfg = dataclasses.replace(cfg, coevolve=c)
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
    own = ex is None
    if own:
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
        if own:
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


def data_scenes(out: Path, data_dir: Path, dvc_file: Path, cfg, regime: str = "a") -> dict[str, Any]:
    """The profile's scenes (its `data` section's slots) in `out`: taken from `data_dir` when it matches
    `dvc_file` (after pulling or rebuilding it when the profile says `use_release`), else built directly.
    Either way the files are the same bytes. Regime B's scenes (its widened seed space and corner suites,
    `coda.sim.families.ranges.regime`) are not released: always built."""
    from coda import data

    d = cfg.data
    sizes = dict(n_seed_layouts=d.n_seed_layouts, suite_size=d.suite_size, families=tuple(d.families))
    if regime != "a":
        return data.build(
            out, seed=cfg.seed, workers=cfg.sim.workers, backend=cfg.sim.backend, regime=regime, **sizes
        )
    if d.use_release:
        print(data_ensure(data_dir, dvc_file, cfg), file=sys.stderr)
    want = _recorded_md5(dvc_file)
    source = data_dir if want and data_dir.exists() and data.dvc_dir_md5(data_dir) == want else None
    return data.build(
        out, seed=cfg.seed, workers=cfg.sim.workers, backend=cfg.sim.backend, source=source, **sizes
    )


def ensure_scenes(
    data_dir: Path,
    cfg,
    *,
    build: bool = True,
    whole: bool = True,
    release: Path = Path("data"),
    dvc_file: Path = Path("data.dvc"),
) -> None:
    """Make sure `data_dir` holds built scenes before a command reads them. A profile that builds its own
    scenes (`data.use_release: false`, smoke) builds them there now, as `coda data scenes --out data_dir`
    does (the same bytes, taken from `release` when it matches `dvc_file`); without `build`, a `UserError`
    says how. A profile that runs on the released data (cpu, paper) gets a `UserError` instead: `coda data
    ensure` pulls or rebuilds that data and checks it against `dvc_file`, which takes minutes and may ask for
    a decision (`--accept`), so the user runs it. With `whole` (a command that reads the profile's scene
    sets), such a profile also refuses a data folder with fewer scenes than it reads, e.g. smoke's."""
    from coda import data

    d, name = cfg.data, cfg.profile
    manifest = data_dir / "manifest.json"
    how = (
        "run `coda data ensure`"
        if data_dir.resolve() == release.resolve()
        else f"run `coda --profile {name} data scenes --out {data_dir}` (it runs `coda data ensure` first)"
    )
    why = (
        f"{how}: it pulls the released {release}/ from the DVC remote or rebuilds it deterministically "
        f"(6.5 MB, a few minutes) and checks it against {dvc_file}, so that results compare with the published "
        "ones"
    )
    if manifest.is_file():
        if d.use_release and whole:
            built = json.loads(manifest.read_text())
            have = (built.get("n_seed_layouts", d.n_seed_layouts), built.get("suite_size", d.suite_size))
            if have[0] < d.n_seed_layouts or have[1] < d.suite_size:
                raise UserError(
                    f"{data_dir}: holds {have[0]} seed layouts and {have[1]} scenes per suite, fewer than the "
                    f"{name} profile's {d.n_seed_layouts} and {d.suite_size} (built for a smaller profile, "
                    f"e.g. smoke); {why}"
                )
        return
    if d.use_release:
        raise UserError(
            f"{data_dir}: no built data here; the {name} profile runs on the released scenes "
            f"(data.use_release), so {why}"
        )
    n = len(data.scene_jobs(cfg.seed, d.n_seed_layouts, d.suite_size, tuple(d.families)))
    command = f"coda --profile {name} data scenes --out {data_dir}"
    if not build:
        raise UserError(
            f"{data_dir}: no built scenes here; `{command}` builds the {name} profile's {n} there"
        )
    print(
        f"{data_dir}: no built scenes here; building the {name} profile's {n} scenes there "
        f"(`{command}`, about a minute on 2 cores)",
        file=sys.stderr,
    )
    data_scenes(data_dir, release, dvc_file, cfg)
