"""``coda memory ...``: inspect a memory snapshot, release it to the Hugging Face Hub, pull it back.

`add_memory_commands` adds the ``memory`` command to the ``coda`` parser; `run_memory_command` runs it.
Problems the user can fix (no snapshot at PATH, a corrupt download, an unknown repo, offline mode) raise
`coda.errors.UserError`, which ``coda`` prints as one line (exit status 2).

Example:
    $ coda memory inspect runs/coda --json
    $ coda memory push runs/coda me/coda-memory --revision round-5
    $ coda memory pull me/coda-memory --revision round-5 --out memory-round-5
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from coda.errors import UserError


def add_memory_commands(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add ``memory inspect|push|pull`` to the ``coda`` subparsers; returns the ``memory`` subcommands, to which
    higher layers add theirs (``memory report``, `coda.report.commands`)."""
    mem = subparsers.add_parser("memory", help="inspect, push or pull shared-memory snapshots")
    msub = mem.add_subparsers(dest="memory_cmd", required=True)
    ins = msub.add_parser("inspect", help="verify a snapshot and summarise it")
    ins.add_argument("path", help="a snapshot, a run directory (latest round) or a pulled Hub copy")
    ins.add_argument("--json", action="store_true", help="print the summary as JSON")
    push = msub.add_parser("push", help="release a snapshot as a Hugging Face Hub dataset repo")
    push.add_argument("path", help="a snapshot or a run directory (latest round)")
    push.add_argument("repo_id", help="namespace/name of the dataset repo (created if missing)")
    push.add_argument("--revision", default=None, help="tag to put on the commit, e.g. round-5")
    push.add_argument("--private", action="store_true", help="create the repo private")
    pull = msub.add_parser("pull", help="download a released snapshot and verify it")
    pull.add_argument("repo_id", help="namespace/name of the dataset repo, or a local folder")
    pull.add_argument("--revision", default=None, help="tag, branch or full commit hash (default: main)")
    pull.add_argument(
        "--out", default=None, help="download into this folder (default: the Hugging Face cache)"
    )
    pull.add_argument("--json", action="store_true", help="print the summary as JSON")
    return msub


def format_summary(summary: dict[str, Any]) -> str:
    """A short human-readable table of `coda.memory.store.inspect`'s summary."""
    lines = [
        f"{summary['path']} (round {summary['round']})",
        f"  scenes {summary['scenes']} ({summary['scenes_without_lineage']} generated without lineage), "
        f"rollouts {summary['rollouts']}, diagnoses {summary['diagnoses']} "
        f"({summary['rejected_diagnoses']} rejected)",
        f"  modes {summary['modes']} ({summary['validated_modes']} validated), programs: "
        f"{summary['generation_programs']} generation, {summary['training_programs']} training",
    ]
    if summary["families"]:
        cols = ("scenes", "rollouts", "diagnoses", "rejected_diagnoses", "modes", "validated_modes")
        lines.append(f"  {'family':>10}  " + "  ".join(cols))
        for family, counts in summary["families"].items():
            lines.append(f"  {family:>10}  " + "  ".join(f"{counts[c]:>{len(c)}}" for c in cols))
    return "\n".join(lines)


def _user_error(message: str) -> Exception:
    return UserError(" ".join(str(message).split()))


def memory_inspect(path: str, as_json: bool = False) -> str:
    from coda.memory.store import inspect

    summary = inspect(path)
    return json.dumps(summary, indent=1) if as_json else format_summary(summary)


def memory_push(path: str, repo_id: str, revision: str | None = None, private: bool = False) -> str:
    from coda.memory.hub import push_memory
    from coda.memory.store import PROVENANCE_KEY, read_manifest, resolve_snapshot

    snap = resolve_snapshot(path)
    card = dict(read_manifest(snap)["extra"])  # provenance recorded by the run: method, seed, profile
    run_json = snap.parent.parent / "run.json"  # <run>/memory/round-NNNN: the run's settings and git state
    # a snapshot written before it recorded its own provenance (git SHA, params) at write time: the run's
    if PROVENANCE_KEY not in card and run_json.is_file():
        run = json.loads(run_json.read_text())
        card.setdefault("params", {"coevolve": run.get("coevolve")})
        for key, value in run.items():
            if key.startswith("git"):
                card.setdefault(key, value)
    sha = push_memory(snap, repo_id, revision=revision, private=private, card=card)
    tag = f" (tag {revision})" if revision else ""
    return f"pushed {snap} to dataset {repo_id} at commit {sha}{tag}"


def memory_pull(
    repo_id: str, revision: str | None = None, out: str | None = None, as_json: bool = False
) -> str:
    from coda.memory.hub import pull_memory

    path = pull_memory(repo_id, revision=revision, local_dir=out)
    return memory_inspect(str(path), as_json)


def run_memory_command(args: argparse.Namespace) -> int:
    """Run a parsed ``coda memory ...`` command, printing its result; returns the exit status."""
    from coda.memory.hub import HubError
    from coda.memory.store import MemoryFormatError

    try:
        if args.memory_cmd == "inspect":
            print(memory_inspect(args.path, args.json))
        elif args.memory_cmd == "push":
            print(memory_push(args.path, args.repo_id, args.revision, args.private))
        else:
            print(memory_pull(args.repo_id, args.revision, args.out, args.json))
    except (MemoryFormatError, HubError, FileExistsError) as err:
        raise _user_error(err) from None
    except Exception as err:
        if _is_hub_error(err):
            raise _user_error(f"{getattr(args, 'repo_id', '')}: {_describe(err, args)}") from None
        raise
    return 0


def _describe(err: Exception, args: argparse.Namespace) -> str:
    from huggingface_hub import errors

    if isinstance(err, errors.RevisionNotFoundError):
        return f"revision {args.revision!r} not found"
    if isinstance(err, errors.RepositoryNotFoundError):
        return "dataset repo not found (or private and no token given)"
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _is_hub_error(err: Exception) -> bool:
    """Errors of huggingface_hub (unknown repo or revision, no connection, offline cache miss)."""
    from huggingface_hub import errors
    from huggingface_hub.utils import OfflineModeIsEnabled

    hub_errors = (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OfflineModeIsEnabled, OSError)
    return isinstance(err, hub_errors) or type(err).__module__.startswith(("httpx", "httpx2"))
