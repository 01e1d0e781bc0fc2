"""Release and reuse of memory snapshots as Hugging Face Hub dataset repositories.

A released snapshot is a dataset repo holding exactly the snapshot's files (``manifest.json``,
``tables/*.parquet``, ``programs/*.json``) plus its dataset card, ``README.md`` (`coda.memory.card`,
rewritten at push time with the repo id and the provenance given as ``card``), whose YAML ``configs`` list
one config per table, so ``datasets.load_dataset(repo_id, "modes")`` reads a table directly. `push_memory`
verifies the snapshot before uploading it (a snapshot that does not verify is never published), replaces
the previous snapshot's files in one commit, and can tag that commit. `pull_memory` downloads a revision
(pin a tag or a full commit hash for reproducibility) and verifies it with `load_snapshot`: checksums,
sizes, schemas; nothing is unpickled.

The endpoint and offline mode come from the environment as huggingface_hub reads them at import
(``HF_ENDPOINT``, ``HF_HUB_OFFLINE``); ``endpoint=`` overrides the former. Offline, `pull_memory` serves a
revision already in the local cache. `coda.learn.text` sets ``HF_HUB_OFFLINE=1`` for its process, so push
from a process that has not loaded the sentence encoder (e.g. ``coda memory push``).

Example:
    >>> sha = push_memory("runs/coda/memory/round-0005", "me/coda-memory", revision="round-5",
    ...                   card={"profile": "cpu", "git_sha": "1e92c6f", "params": {...}})
    >>> path = pull_memory("me/coda-memory", revision="round-5")
    >>> memory = load_snapshot(path)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# imported with this module, not lazily: huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE at import
from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import HfHubHTTPError

from coda.memory.card import LICENSE, TABLE_DESCRIPTIONS, TAGS, dataset_card  # noqa: F401  (re-exported)
from coda.memory.store import MemoryFormatError, load_snapshot, read_manifest, resolve_snapshot

REPO_TYPE = "dataset"


class HubError(RuntimeError):
    """A Hub operation that cannot be done as asked (offline, a tag that points elsewhere)."""


def _endpoint(endpoint: str | None) -> str | None:
    """An explicit endpoint, else ``HF_ENDPOINT`` as set now (huggingface_hub itself reads it at import)."""
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    return endpoint.rstrip("/") if endpoint else None


def _is_offline() -> bool:
    return constants.is_offline_mode()


def push_memory(
    snapshot_dir: str | Path,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool = False,
    token: str | None = None,
    card: Mapping[str, Any] | None = None,
    endpoint: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Upload a verified snapshot (or a run's latest) to the dataset repo `repo_id`; returns the commit sha.

    ``revision``: a tag to put on the commit (re-pushing the same snapshot under the same tag is a no-op;
    a tag that points to another commit raises `HubError`). ``card``: provenance for the dataset card
    (e.g. ``params``, ``git_sha``, ``profile``; ``license``).
    """
    snap = resolve_snapshot(snapshot_dir)
    load_snapshot(snap)
    manifest = read_manifest(snap)
    if _is_offline():
        raise HubError("cannot push: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE is set)")
    api = HfApi(endpoint=_endpoint(endpoint), token=token)
    api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="coda-push-") as tmp:
        stage = Path(tmp) / "snapshot"
        for rel in ["manifest.json", *manifest["files"]]:
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(snap / rel, stage / rel)
        (stage / "README.md").write_text(dataset_card(manifest, repo_id, card))
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=stage,
            repo_type=REPO_TYPE,
            commit_message=commit_message or f"CoDA memory snapshot, round {manifest['round']}",
            # files of an earlier snapshot that this one lacks would fail verification after a pull
            delete_patterns=["tables/*", "programs/*"],
        )
    if revision is not None:
        try:
            api.create_tag(repo_id, tag=revision, revision=info.oid, repo_type=REPO_TYPE)
        except HfHubHTTPError as err:
            if err.response is None or err.response.status_code != 409:
                raise
            tagged = api.repo_info(repo_id, repo_type=REPO_TYPE, revision=revision).sha
            if tagged != info.oid:
                raise HubError(f"{repo_id}: tag {revision!r} already points to commit {tagged}") from None
    return info.oid


def pull_memory(
    repo_id: str | Path,
    *,
    revision: str | None = None,
    local_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """Download a released snapshot (or take a local snapshot/run directory) and verify it; returns its path.

    Without ``local_dir`` the files live in the Hugging Face cache (``cache_dir``); offline, a cached
    revision is used. Raises `MemoryFormatError` when the download does not verify.
    """
    local = Path(repo_id)
    if local.is_dir():
        snap = resolve_snapshot(local)
        load_snapshot(snap)
        return snap
    path = snapshot_download(
        str(repo_id),
        repo_type=REPO_TYPE,
        revision=revision,
        local_dir=local_dir,
        cache_dir=cache_dir,
        token=token,
        endpoint=_endpoint(endpoint),
    )
    try:
        load_snapshot(path)
    except MemoryFormatError as err:
        if local_dir is not None and "unexpected file" in str(err):
            hint = "local_dir holds files of another revision: pull into an empty folder"
            raise MemoryFormatError(f"{err} ({hint})") from None
        raise
    return Path(path)


__all__ = ["HubError", "dataset_card", "pull_memory", "push_memory"]
