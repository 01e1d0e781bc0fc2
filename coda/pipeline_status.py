"""`coda status`: which dvc.yaml stages `dvc repro` would re-run, and why, in a few lines.

`dvc status` names every changed dependency of every stage: on a fresh clone that is hundreds of lines, and
"changed" reads as "broken". This reads ``dvc status --json`` and groups it by reason (`REASONS`): code or
notebooks changed since ``dvc.lock`` recorded the stage, ``params.yaml`` values it reads changed, an input
changed or is missing (usually another stage's output, which `dvc repro` makes first), an output is missing
here or not in the DVC cache (a fresh clone has no cache: every cached output is missing until it is pulled
from a DVC remote or re-made), or the stage's definition changed. Each reason gets one line with the number of
stages and the paths behind it, most frequent first; then the stages themselves (a ``foreach`` group as
``table1 ×12``) and, where ``docs/pipeline_times.tsv`` timed them, what their last runs took.
``make reproduce`` prints it before it runs `dvc repro`; ``docs/FRESH_CLONE.md`` says how to read it.

    $ coda status                      # runs `dvc status --json` here (about a minute: DVC hashes the inputs)
    $ coda status table1@coda-0        # one stage and the stages it depends on
    $ dvc status --json > s.json && coda status --from s.json --json
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coda.errors import UserError

# reason -> what it means, in the order they are printed
REASONS = {
    "definition": "their command or definition in dvc.yaml changed since dvc.lock",
    "code": "code or notebooks they read changed since dvc.lock recorded them",
    "params": "params.yaml values they read changed",
    "input changed": "an input file differs from the one dvc.lock recorded",
    "input missing": "an input is missing here (another stage's output, made first by `dvc repro`)",
    "output not cached": "an output is not in the DVC cache (a fresh clone has no cache)",
    "output missing": "an output is missing here (not made yet or deleted; `dvc checkout` restores a cached one)",
    "output changed": "an output was changed or added by hand",
    "always": "they always run (always_changed: true)",
}
OUTPUTS_ONLY = {"output not cached", "output missing"}  # nothing the stage reads changed
# dependencies that are code: the package, the notebooks the report stages execute, the benchmarks
CODE = ("coda", "notebooks", "benchmarks")
TIMES = Path("docs") / "pipeline_times.tsv"  # stage, wall seconds, exit status, end time, ran|cached
SHOWN_PATHS = 4  # paths named per reason
FEW = 3  # a reason of at most this many stages names them
WIDTH = 110  # the list of stages is wrapped at this width


def _is_code(path: str) -> bool:
    return path.split("/")[0] in CODE or path.endswith((".py", ".ipynb"))


def stage_reasons(entries: list[Any]) -> dict[str, list[str]]:
    """One stage's ``dvc status --json`` entries as reason -> the paths (or params) behind it."""
    found: dict[str, list[str]] = {}

    def add(reason: str, what: str) -> None:
        found.setdefault(reason, []).append(what)

    for entry in entries:
        if isinstance(entry, str):  # "changed command", "changed checksum", "always changed"
            add("always" if entry == "always changed" else "definition", entry)
            continue
        for kind, changes in entry.items():
            for path, state in (changes or {}).items():
                if kind == "changed deps":
                    if isinstance(state, Mapping):  # a params file: {param: modified|new|deleted}
                        for param in state:
                            add("params", param if path == "params.yaml" else f"{path}:{param}")
                    elif _is_code(path):
                        add("code", path)
                    else:
                        add("input missing" if state == "deleted" else "input changed", path)
                elif kind == "changed outs":
                    reason = {"not in cache": "output not cached", "deleted": "output missing"}
                    add(reason.get(state, "output changed"), path)
                else:  # a kind this version does not know: still a reason to re-run
                    add("definition", f"{kind}: {path}")
    return found


def summarize(status: Mapping[str, list[Any]], times: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Group ``dvc status --json`` by reason: ``stages`` (changed stages, in status order), ``tracked`` (the
    ``.dvc`` files among them, e.g. data.dvc: data/, not stages), ``reasons`` (reason -> ``stages`` and
    ``paths``, path -> number of stages), ``only_outputs_missing`` (stages whose code, params and inputs are
    unchanged: a DVC remote would restore them) and ``timed`` / ``seconds`` (their last recorded runs)."""
    stages = [s for s in status if not s.endswith(".dvc")]
    tracked = {s: stage_reasons(status[s]) for s in status if s.endswith(".dvc")}
    reasons: dict[str, dict[str, Any]] = {}
    only_outputs = []
    for stage in stages:
        found = stage_reasons(status[stage])
        for reason, paths in found.items():
            r = reasons.setdefault(reason, {"stages": [], "paths": Counter()})
            r["stages"].append(stage)
            r["paths"].update(set(paths))
        if set(found) <= OUTPUTS_ONLY:
            only_outputs.append(stage)
    order = list(REASONS) + sorted(set(reasons) - set(REASONS))
    timed = [s for s in stages if times and s in times]
    return {
        "stages": stages,
        "tracked": tracked,
        "reasons": {
            k: {"stages": reasons[k]["stages"], "paths": dict(reasons[k]["paths"].most_common())}
            for k in order
            if k in reasons
        },
        "only_outputs_missing": only_outputs,
        "timed": timed,
        "seconds": round(sum(times[s] for s in timed), 1) if times else 0.0,
    }


def _groups(stages: list[str]) -> str:
    """Stage names with a ``foreach`` group (``table1@coda-0``, ...) as ``table1 ×12``."""
    counts = Counter(s.split("@")[0] for s in stages)
    seen, out = set(), []
    for s in stages:
        base = s.split("@")[0]
        if base in seen:
            continue
        seen.add(base)
        out.append(s if counts[base] == 1 else f"{base} ×{counts[base]}")
    return ", ".join(out)


def _paths(paths: Mapping[str, int]) -> str:
    """The most frequent paths, each with the number of stages it is in when more than one."""
    shown = [p if k == 1 else f"{p} in {k}" for p, k in list(paths.items())[:SHOWN_PATHS]]
    more = len(paths) - SHOWN_PATHS
    return ", ".join(shown) + (f", and {more} more" if more > 0 else "")


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{round(seconds / 60)} min" if seconds >= 60 else f"{round(seconds)} s"


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The summary as a few readable lines (one per reason)."""
    lines = []
    for name, found in summary["tracked"].items():
        what = ", ".join(sorted({p for paths in found.values() for p in paths})) or name
        lines.append(
            f"{name}: {what} is not here or not in the DVC cache; `coda data ensure` (make reproduce's first "
            "step) pulls it from a DVC remote or rebuilds it"
        )
    stages = summary["stages"]
    if not stages:
        return lines + ["dvc status: up to date; `dvc repro` has no stage to re-run"]
    n = len(stages)
    lines.append(
        f"dvc status: {n} stage{'s' * (n != 1)} would re-run under `dvc repro`"
        + (", for these reasons (a stage can have several):" if len(summary["reasons"]) > 1 else ":")
    )
    for reason, found in summary["reasons"].items():
        k = len(found["stages"])
        meaning = REASONS.get(reason, reason)
        which = f" ({', '.join(found['stages'])})" if k <= FEW else ""  # a reason of a few stages names them
        lines.append(f"  {k:>3} because {meaning}: {_paths(found['paths'])}{which}")
    only = summary["only_outputs_missing"]
    if only:
        lines.append(
            f"  {len(only)} of them only lack outputs (code, params and inputs unchanged): `dvc repro` restores "
            "what the DVC cache holds and `dvc pull` what a DVC remote holds; the rest is re-made"
        )
    lines += textwrap.wrap(
        f"stages: {_groups(stages)}", WIDTH, subsequent_indent="  ", break_on_hyphens=False
    )
    if summary["timed"]:
        lines.append(
            f"their last recorded runs ({TIMES}: {len(summary['timed'])} of the {n}) took about "
            f"{_hours(summary['seconds'])} of stage time"
        )
    lines.append("why one stage: `dvc status STAGE`; what it needs: `dvc dag STAGE`; see docs/FRESH_CLONE.md")
    return lines


def read_times(path: Path = TIMES) -> dict[str, float]:
    """Stage -> wall seconds of its last successful run in `docs/pipeline_times.tsv` (empty when absent)."""
    times: dict[str, float] = {}
    if not path.is_file():
        return times
    with path.open() as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) >= 3 and row[2] == "0" and (len(row) < 5 or row[4] == "ran"):
                try:
                    times[row[0]] = float(row[1])
                except ValueError:
                    continue
    return times


def dvc_status(targets: list[str]) -> dict[str, list[Any]]:
    """``dvc status --json [TARGETS]`` here (the `dvc` beside this interpreter, else the one on PATH)."""
    here = Path(sys.executable).parent / "dvc"
    cmd = [str(here) if here.is_file() else "dvc", "status", "--json", *targets]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError("dvc is not installed here: `make venv` installs it into .venv") from None
    if proc.returncode != 0:
        last = next((x for x in reversed(proc.stderr.splitlines()) if x.strip()), f"exit {proc.returncode}")
        raise UserError(f"dvc status failed: {last.strip()}")
    return _parse(proc.stdout, "dvc status --json")


def _parse(text: str, where: str) -> dict[str, list[Any]]:
    try:
        status = json.loads(text or "{}")
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not the JSON of `dvc status --json` ({err})") from None
    if not isinstance(status, dict) or not all(isinstance(v, list) for v in status.values()):
        raise UserError(f"{where}: not the JSON of `dvc status --json` (expected stage -> list of changes)")
    return status


# -- the command -------------------------------------------------------------------------------------------
def add_status_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``status [TARGET ...] [--from FILE] [--json]`` to the ``coda`` subparsers."""
    p = subparsers.add_parser(
        "status",
        help="which dvc.yaml stages `dvc repro` would re-run and why, grouped by reason (from `dvc status`)",
    )
    p.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="stages (or .dvc files) to look at, as `dvc status TARGET` takes them (default: all)",
    )
    p.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="read the output of `dvc status --json` from FILE ('-': standard input) instead of running it",
    )
    p.add_argument("--json", action="store_true", help="print the grouped summary as one JSON object")
    return p


def run_status_command(args: argparse.Namespace) -> int:
    if args.from_file:
        if args.targets:
            raise UserError("--from reads a saved `dvc status --json`: give no TARGET with it")
        if args.from_file == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(args.from_file).read_text()
            except OSError as err:
                raise UserError(f"--from {args.from_file}: {err.strerror or err}") from None
        status = _parse(text, args.from_file)
    else:
        print("reading `dvc status --json` (DVC hashes the inputs: up to a minute) ...", file=sys.stderr)
        status = dvc_status(args.targets)
    summary = summarize(status, read_times())
    print(json.dumps(summary) if args.json else "\n".join(summary_lines(summary)))
    return 0
