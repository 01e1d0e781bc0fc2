"""Run-directory maintenance: disk use by kind, and pruning of rounds a resume no longer needs.

A run directory (`coda.coevolve`) keeps, for every complete round N, a checkpoint ``rounds/round-NNNN/``
(adapter, critic, replay buffer, demonstrations, state) and a memory snapshot ``memory/round-NNNN/``.
Resuming needs only the last complete round; the older ones are history (e.g. for the memory-snapshot
study) and can be pruned.

`prune` removes the checkpoints and snapshots of the complete rounds older than the last ``keep`` complete
rounds, together with temporary directories of those old rounds left by an interrupted save. It never
removes the latest complete round, never touches a run that has no complete round, and leaves everything
else alone: ``rounds.json`` and ``metrics.json`` (the per-round metrics), ``run.json``, the workers' actor
and any round after the last complete one (an interrupted round that a resume redoes). A pruned run
resumes exactly as before.

Example:
    >>> run_usage("runs/coda-0")["by_kind"]
    {'checkpoints': 9123456, 'memory': 812345, 'actor': 1234567, 'metrics': 23456, 'other': 1234}
    >>> prune("runs/coda-0", keep=1)["freed_bytes"]
    7345678

    $ coda prune runs/coda-0 --keep 2 --dry-run --json

`coda compare A B` shows two runs' final metrics side by side, per suite and family, paired over the same
episodes where it can (`coda.report.compare`). With ``--bytes``, `compare_runs` says whether two run
directories hold the same results: every file byte for byte, except the JSON records (``rounds.json``,
``metrics.json``, ``run.json``, each round's ``state.json``), which are compared after dropping what differs
between identical runs — wall and CPU seconds and the git provenance. Memory snapshots (their manifests hash
every file) and checkpoints are compared as bytes, except what a snapshot records of the code that wrote it:
its manifest's ``extra.provenance`` (git SHA, dirty flag, parameters: `SNAPSHOT_PROVENANCE`) and the
sections of its card (``README.md``) that render that provenance and the loading example
(`CARD_VOLATILE_SECTIONS`). So a re-run on another commit or clone compares equal when its results are.

    $ coda compare runs/table1/coda-0 runs/table1/uniform-0      # OOD 47.0 vs 47.6, per suite and family
    $ coda compare --bytes runs/coda-0 /elsewhere/coda-0   # exit 0 when identical, 1 with the differing files

`record` copies what a finished run's results are — its top-level JSON and CSV files (``run.json``,
``rounds.json``, ``metrics.json``, ``train_log.csv``) and the complete memory snapshots — without its checkpoints and actor
(a few hundred kB instead of tens of MB), and adds ``keyframes/``: a few diagnosed failures re-simulated from
the run's checkpoints while they are still there (`record_keyframes`). The pipeline keeps these records in
git (``records/``, see dvc.yaml), so the report, the notebooks and the memory's readers (`coda memory report`
shows the stored keyframes) work on a fresh clone, and a finished stage's results survive a machine that loses
the DVC cache. Comparisons treat the keyframes like the rest: ``keyframes.json`` as a JSON record, the PNG and
GIF files byte for byte (they are deterministic under the numerics pin).

    $ coda record runs/table1/coda-0 records/regime_a/table1/coda-0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from coda.errors import UserError

# rounds/round-0003 (complete when it holds state.json), rounds/round-0003.tmp (a round being written)
_CHECKPOINT = re.compile(r"round-(\d+)(\.tmp)?")
# memory/round-0003, memory/.round-0003.tmp-<pid>-<token>[-old] (a snapshot being written or replaced)
_SNAPSHOT = re.compile(r"\.?round-(\d+)(\.tmp-.*)?")
# top-level directories of a run by kind (see coda.coevolve); files at the top level are metrics/records
KINDS = {"rounds": "checkpoints", "memory": "memory", "actor": "actor"}
# keys of the JSON records that differ between two identical runs: timings and the code's provenance
VOLATILE_KEYS = frozenset(
    {"wall_s", "time_s", "cpu_s", "worker_cpu_s", "git_sha", "git_dirty"}
    # and the SFT's and the planner check's timings
    | {"collect_s", "train_s", "median_s", "median_episode_s", "median_load_s"}
)

# a memory snapshot's manifest keeps what wrote it in extra["provenance"] (coda.memory.card.PROVENANCE_KEY:
# git SHA, dirty flag, profile and parameters, taken at write time); results compare without it
SNAPSHOT_PROVENANCE = "provenance"
# the sections of a snapshot's card that render that provenance and the loading example (coda.memory.card)
CARD_VOLATILE_SECTIONS = ("## How it was produced", "## How to load it")
_SNAPSHOT_FILE = re.compile(r"(?:.*/)?memory/round-\d+/(manifest\.json|README\.md)")


def _size(path: Path) -> int:
    """Apparent size in bytes of a file or a directory tree (symlinks count as links, not followed)."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def complete_rounds(run_dir: str | Path) -> list[int]:
    """The rounds whose checkpoint is complete (``rounds/round-NNNN/state.json`` exists), ascending."""
    rounds = Path(run_dir) / "rounds"
    if not rounds.is_dir():
        return []
    done = []
    for p in rounds.iterdir():
        m = _CHECKPOINT.fullmatch(p.name)
        if m and not m.group(2) and not p.is_symlink() and (p / "state.json").is_file():
            done.append(int(m.group(1)))
    return sorted(done)


def run_usage(run_dir: str | Path) -> dict[str, Any]:
    """Disk use of a run directory in bytes: total, by kind and per complete round.

    Kinds: ``checkpoints`` (``rounds/``), ``memory`` (snapshots), ``actor`` (the rollout policy the workers
    load), ``metrics`` (files at the top level: ``rounds.json``, ``metrics.json``, ``run.json``) and
    ``other``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a directory")
    by_kind = {"checkpoints": 0, "memory": 0, "actor": 0, "metrics": 0, "other": 0}
    for p in run_dir.iterdir():
        kind = KINDS.get(p.name) if p.is_dir() and not p.is_symlink() else "metrics"
        by_kind[kind or "other"] += _size(p)
    per_round = {
        r: {
            "checkpoint": _size(run_dir / "rounds" / f"round-{r:04d}"),
            "memory": _size(m) if (m := run_dir / "memory" / f"round-{r:04d}").exists() else 0,
        }
        for r in complete_rounds(run_dir)
    }
    return {"total_bytes": sum(by_kind.values()), "by_kind": by_kind, "per_round": per_round}


def prune(run_dir: str | Path, keep: int = 1, dry_run: bool = False) -> dict[str, Any]:
    """Remove the checkpoints and memory snapshots of complete rounds older than the last `keep` ones.

    Returns what was (with ``dry_run``: would be) removed: ``complete_rounds``, ``kept_rounds``,
    ``pruned_rounds``, ``removed`` (paths relative to the run directory) and ``freed_bytes``.
    """
    run_dir = Path(run_dir)
    if keep < 1:
        raise ValueError(
            f"--keep: expected an integer >= 1 (the latest complete round is always kept), got {keep}"
        )
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a directory")
    done = complete_rounds(run_dir)
    kept = done[-keep:]
    cutoff = kept[0] if kept else 0  # with no complete round nothing is below the cut-off
    victims: list[Path] = []
    for folder, pattern in (("rounds", _CHECKPOINT), ("memory", _SNAPSHOT)):
        if not (run_dir / folder).is_dir():
            continue
        for p in sorted((run_dir / folder).iterdir()):
            m = pattern.fullmatch(p.name)
            if m and int(m.group(1)) < cutoff:
                victims.append(p)
    freed = sum(_size(p) for p in victims)
    if not dry_run:
        for p in victims:
            if p.is_symlink() or not p.is_dir():
                p.unlink()
            else:
                shutil.rmtree(p)
    return {
        "run_dir": str(run_dir),
        "dry_run": dry_run,
        "complete_rounds": done,
        "kept_rounds": kept,
        "pruned_rounds": [r for r in done if r < cutoff],
        "removed": [p.relative_to(run_dir).as_posix() for p in victims],
        "freed_bytes": freed,
    }


# -- `coda record` ------------------------------------------------------------------------------------------
RECORD_SUFFIXES = (".json", ".csv")  # a run's top-level records and logs (not e.g. LIBERO SFT's demos.npz)


KEYFRAME_DATA = ("data", "scenes")  # where `record` looks for the scenes' assets, when not told


def record(
    run_dir: str | Path,
    out: str | Path,
    *,
    keyframes: bool = True,
    data_dir: str | Path | None = None,
    params: str | Path = "params.yaml",
    sft_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Copy finished run `run_dir`'s results into `out` (replaced as a whole, written under a temporary name and
    renamed): its top-level JSON and CSV files and its complete memory snapshots, not the checkpoints
    (``rounds/``), the workers' actor, any other directory or any other file. Refuses a run without
    ``metrics.json`` (not finished).

    With `keyframes`, ``out/keyframes/`` holds keyframes of a few diagnosed failures of the latest snapshot,
    re-simulated from the run's checkpoints under the numerics pin (`record_keyframes`): at most one per
    difficulty mode and eight per record, modes in the memory report's order (validated first, then by
    importance) taken family by family in turn; per mode the first of the failures the report lists whose
    round's checkpoint is there (a PNG strip and a GIF of the front and rear figure views, 160 px per view,
    and a row of ``keyframes.json`` saying whether the re-simulation matches the recorded rollout; one that
    differs is stored with that label). The world settings come from `params` (the run's profile), the
    scenes' assets from `data_dir` (default: the first of `KEYFRAME_DATA` that is built), round 1's actor
    from `sft_dir` (default: the pipeline's SFT directory beside the run, else runs/sft). Where that is not
    possible (no snapshot, no built scenes, params without the run's profile, a LIBERO run) or where it fails
    the record has no keyframes and ``keyframes.why`` of the result says why: the record of the results is
    made regardless."""
    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "metrics.json").is_file():
        raise FileNotFoundError(f"{run_dir}: not a finished run (no metrics.json)")
    files = [
        p
        for p in sorted(run_dir.iterdir())
        if p.is_file() and not p.is_symlink() and p.suffix in RECORD_SUFFIXES
    ]
    snapshots = [
        p
        for p in sorted((run_dir / "memory").iterdir() if (run_dir / "memory").is_dir() else ())
        if p.is_dir() and _SNAPSHOT.fullmatch(p.name) and not p.name.startswith(".")
    ]
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for p in files:
        shutil.copy2(p, tmp / p.name)
    for p in snapshots:
        shutil.copytree(p, tmp / "memory" / p.name)
    stored = None
    if keyframes:
        try:
            stored = _record_keyframes(run_dir, tmp, data_dir, params, sft_dir)
        except Exception as err:  # pictures are a bonus: a record of the results is made regardless
            shutil.rmtree(tmp / "keyframes", ignore_errors=True)
            stored = {"stored": 0, "why": f"failed: {type(err).__name__}: {' '.join(str(err).split())}"}
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    report = {
        "run_dir": str(run_dir),
        "out": str(out),
        "files": [p.name for p in files],
        "snapshots": [p.name for p in snapshots],
        "bytes": _size(out),
    }
    if stored is not None:
        report["keyframes"] = stored
    return report


def _record_keyframes(run_dir: Path, tmp: Path, data_dir, params, sft_dir) -> dict[str, Any]:
    """`coda.report.keyframes.record_keyframes_pinned` into ``tmp/keyframes``, or why there are none."""
    import time

    from coda.config import ConfigError, load_params
    from coda.memory.snapshots import latest_snapshot

    if latest_snapshot(run_dir) is None:
        return {"stored": 0, "why": "no memory snapshot"}
    if data_dir is None:
        data_dir = next((d for d in KEYFRAME_DATA if (Path(d) / "manifest.json").is_file()), None)
        if data_dir is None:
            return {"stored": 0, "why": f"no built scenes for their assets ({', '.join(KEYFRAME_DATA)}/)"}
    elif not (Path(data_dir) / "manifest.json").is_file():
        return {"stored": 0, "why": f"{data_dir}/ holds no built scenes"}
    profile = (
        json.loads((run_dir / "run.json").read_text()).get("profile")
        if (run_dir / "run.json").is_file()
        else None
    )
    try:
        limit = load_params(params, profile).sim.record_keyframes
    except (ConfigError, OSError, UserError) as err:
        return {"stored": 0, "why": f"{params}: {' '.join(str(err).split())}"}
    if limit == 0:
        return {"stored": 0, "why": f"the {profile or 'default'} profile's sim.record_keyframes is 0"}
    from coda.report.keyframes import RECORD_FOLDER, record_keyframes_pinned

    t0 = time.monotonic()
    kw = {"data_dir": str(data_dir), "params": str(params), "limit": limit}
    if sft_dir is not None:
        kw["sft_dir"] = str(sft_dir)
    stored = record_keyframes_pinned(run_dir, tmp / RECORD_FOLDER, **kw)
    return {**stored, "data_dir": str(data_dir), "wall_s": round(time.monotonic() - t0, 1)}


def add_record_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``record RUN_DIR OUT`` to the ``coda`` subparsers."""
    p = subparsers.add_parser(
        "record", help="copy a finished run's results (records and memory snapshots, no checkpoints) to OUT"
    )
    p.add_argument("run_dir", help="a finished run directory written by `coda run`")
    p.add_argument("out", help="the record's directory (replaced)")
    p.add_argument(
        "--data",
        default=None,
        help="built scenes whose assets the keyframes' re-simulation loads (default: data/, else scenes/)",
    )
    p.add_argument(
        "--sft",
        default=None,
        help="the run's SFT directory (round 1's actor; default: runs/sft beside the run)",
    )
    p.add_argument(
        "--no-keyframes",
        action="store_true",
        help="do not re-simulate and store keyframes of a few diagnosed failures in OUT/keyframes/",
    )
    return p


def run_record_command(args: argparse.Namespace) -> int:
    try:
        report = record(
            args.run_dir,
            args.out,
            keyframes=not args.no_keyframes,
            data_dir=args.data,
            params=getattr(args, "params", "params.yaml"),
            sft_dir=args.sft,
        )
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    print(json.dumps(report))
    return 0


# -- `coda prune` -------------------------------------------------------------------------------------------
def without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def volatile_json(name: str) -> bool:
    """Whether file `name` (a path inside a run or record directory) is a JSON record compared without
    `VOLATILE_KEYS`: every JSON file except those of memory snapshots (whose manifests hash the others)."""
    return name.endswith(".json") and "memory" not in name.split("/")[:-1]


def snapshot_file(name: str) -> str | None:
    """``manifest.json`` or ``README.md`` when `name` is that file of a memory snapshot
    (``.../memory/round-0003/manifest.json``), else None."""
    m = _SNAPSHOT_FILE.fullmatch(name)
    return m.group(1) if m else None


def without_snapshot_provenance(manifest: Any) -> Any:
    """A snapshot manifest without ``extra.provenance`` (`SNAPSHOT_PROVENANCE`); anything else as it is."""
    if isinstance(manifest, dict) and isinstance(manifest.get("extra"), dict):
        extra = {k: v for k, v in manifest["extra"].items() if k != SNAPSHOT_PROVENANCE}
        return {**manifest, "extra": extra}
    return manifest


def card_without_provenance(text: str) -> str:
    """A snapshot card without its `CARD_VOLATILE_SECTIONS` (each up to the next ``## `` heading)."""
    out, skip = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            skip = line.rstrip("\r\n") in CARD_VOLATILE_SECTIONS
        if not skip:
            out.append(line)
    return "".join(out)


def comparable_json(name: str, document: Any) -> Any:
    """JSON document `document` of file `name` as results compare it: a JSON record (`volatile_json`) without
    `VOLATILE_KEYS`, a snapshot manifest without its write-time provenance, anything else as it is."""
    if volatile_json(name):
        return without_volatile(document)
    if snapshot_file(name) == "manifest.json":
        return without_snapshot_provenance(document)
    return document


def same_result(name: str, x: bytes, y: bytes) -> bool:
    """Whether two versions of file `name` hold the same result: the same bytes or, for a JSON record
    (`volatile_json`), the same document once timings and git provenance are dropped; for a memory snapshot's
    manifest, the same document without ``extra.provenance``, and for its card the same text without the
    sections that render that provenance and the loading example (`card_without_provenance`)."""
    if x == y:
        return True
    kind = snapshot_file(name)
    if kind == "README.md":
        try:
            return card_without_provenance(x.decode()) == card_without_provenance(y.decode())
        except UnicodeDecodeError:
            return False
    if volatile_json(name) or kind == "manifest.json":
        try:
            return comparable_json(name, json.loads(x)) == comparable_json(name, json.loads(y))
        except ValueError:
            return False
    return False


def _keyframes_root(name: str) -> str | None:
    """The record folder whose ``keyframes/`` holds file `name` (a path relative to what is compared), or None."""
    parts = name.split("/")
    return "/".join(parts[: parts.index("keyframes")]) if "keyframes" in parts[:-1] else None


def unmatched_keyframes(names_a: set[str], names_b: set[str]) -> set[str]:
    """The files of the ``keyframes/`` folders that only one side has at all: a record made before `coda
    record` stored keyframes (2026-12-03) compares with its re-run on its results, and keyframes compare
    byte for byte wherever both sides have them."""
    roots_a = {_keyframes_root(n) for n in names_a} - {None}
    roots_b = {_keyframes_root(n) for n in names_b} - {None}
    only = roots_a ^ roots_b
    return {n for n in names_a | names_b if _keyframes_root(n) in only}


def compare_runs(a: str | Path, b: str | Path) -> dict[str, Any]:
    """Which files of run directories `a` and `b` are identical (see the module docstring): ``files`` (the
    union), ``identical``, and ``different`` (the paths that differ or exist in only one, sorted)."""
    a, b = Path(a), Path(b)
    for d in (a, b):
        if not d.is_dir():
            raise FileNotFoundError(f"{d}: not a run directory")
    fa = {p.relative_to(a).as_posix(): p for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b).as_posix(): p for p in b.rglob("*") if p.is_file()}
    drop = unmatched_keyframes(set(fa), set(fb))
    fa = {n: p for n, p in fa.items() if n not in drop}
    fb = {n: p for n, p in fb.items() if n not in drop}
    different = set(fa) ^ set(fb)
    different |= {n for n in set(fa) & set(fb) if not same_result(n, fa[n].read_bytes(), fb[n].read_bytes())}
    files = len(set(fa) | set(fb))
    return {"files": files, "identical": files - len(different), "different": sorted(different)}


def add_compare_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``compare RUN_A RUN_B [--json] [--bytes]`` to the ``coda`` subparsers."""
    p = subparsers.add_parser(
        "compare",
        help="two runs' final OOD/ID success per suite and family, A − B paired over shared episodes "
        "(--bytes: whether they hold the same results)",
    )
    p.add_argument("run_a", help="a run directory or its record (run.json, rounds.json, metrics.json)")
    p.add_argument("run_b", help="the run to compare it with")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    p.add_argument(
        "--bytes",
        action="store_true",
        help="compare every file instead (JSON records without timings and git provenance, memory snapshots "
        "without the provenance they record); exit 1 when any differs",
    )
    return p


def run_compare_command(args: argparse.Namespace) -> int:
    if args.bytes:
        try:
            report = compare_runs(args.run_a, args.run_b)
        except FileNotFoundError as err:
            raise UserError(str(err)) from None
        print(json.dumps(report))
        return 0 if not report["different"] else 1
    from coda.report.compare import compare_metrics, metrics_lines

    try:
        report = compare_metrics(args.run_a, args.run_b)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    print(json.dumps(report) if args.json else "\n".join(metrics_lines(report)))
    return 0


def add_prune_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``prune RUN_DIR [--keep N] [--dry-run] [--json]`` to the ``coda`` subparsers."""
    p = subparsers.add_parser(
        "prune", help="remove checkpoints and memory snapshots of rounds older than the last N complete ones"
    )
    p.add_argument("run_dir", help="a run directory written by `coda run`")
    p.add_argument("--keep", type=int, default=1, help="complete rounds to keep (default 1: the latest)")
    p.add_argument("--dry-run", action="store_true", help="only report what would be removed")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def run_prune_command(args: argparse.Namespace) -> int:
    try:
        report = prune(args.run_dir, keep=args.keep, dry_run=args.dry_run)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(str(err)) from None
    if args.json:
        print(json.dumps(report))
        return 0
    pruned, freed = ("would prune", "would free") if args.dry_run else ("pruned", "freed")
    if not report["complete_rounds"]:
        print(f"{args.run_dir}: no complete round; nothing pruned")
    elif not report["removed"]:
        print(f"{args.run_dir}: nothing to prune (keeping rounds {report['kept_rounds']})")
    else:
        print(
            f"{args.run_dir}: {pruned} rounds {report['pruned_rounds']} ({len(report['removed'])} directories), "
            f"{freed} {report['freed_bytes'] / 1e6:.1f} MB; kept rounds {report['kept_rounds']}"
        )
    return 0
