"""Hub release of memory snapshots, tested offline against a minimal fake Hub on 127.0.0.1.

`FakeHub` implements just the routes huggingface_hub uses for create_repo, upload_folder (preupload answered
with ``uploadMode: regular``, then an ndjson commit), create_tag, repo_info, list_repo_tree and file
resolution (HEAD/GET with ``ETag``, ``X-Repo-Commit`` and ``Content-Length``), keeping git-like commits in
memory.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

from coda.memory.hub import HubError, dataset_card, pull_memory, push_memory
from coda.memory.store import Memory, MemoryFormatError, load_snapshot, read_manifest, save_snapshot

REPO = "tester/coda-memory"


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """Dataset repos as {repo_id: {"commits": {sha: {path: bytes}}, "refs": {name: sha}}}, served over HTTP."""

    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                hub.handle(self, "GET")

            def do_HEAD(self) -> None:
                hub.handle(self, "HEAD")

            def do_POST(self) -> None:
                hub.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- state ---------------------------------------------------------------------------------------------
    def _commit(self, repo: dict, files: dict[str, bytes], message: str) -> str:
        parent = repo["refs"].get("main", "")
        digest = hashlib.sha1(parent.encode() + message.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        sha = digest.hexdigest()
        repo["commits"][sha] = files
        repo["refs"]["main"] = sha
        return sha

    def _resolve(self, repo: dict, rev: str) -> str | None:
        if rev in repo["refs"]:
            return repo["refs"][rev]
        return rev if rev in repo["commits"] else None

    def files(self, repo_id: str, rev: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return repo["commits"][self._resolve(repo, rev)]

    # -- HTTP ----------------------------------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(req.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        body = req.rfile.read(int(req.headers.get("Content-Length") or 0)) if method == "POST" else b""
        self.requests.append((method, url.path))
        if parts[:3] == ["api", "repos", "create"]:
            return self.create_repo(req, json.loads(body))
        if parts[:2] == ["api", "validate-yaml"]:
            return self.validate_yaml(req, json.loads(body)["content"])
        if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
            repo_id, rest = f"{parts[2]}/{parts[3]}", parts[4:]
            repo = self.repos.get(repo_id)
            if repo is None:
                return self.send(req, 404, {"error": "Repository not found"}, error_code="RepoNotFound")
            action = rest[0] if rest else "revision"
            rev = rest[1] if len(rest) > 1 else "main"
            if action == "tag":
                return self.create_tag(req, repo, rev, json.loads(body))
            sha = self._resolve(repo, rev)
            if sha is None:
                return self.send(req, 404, {"error": f"Invalid rev id: {rev}"}, error_code="RevisionNotFound")
            if action == "revision":
                siblings = [{"rfilename": p} for p in sorted(repo["commits"][sha])]
                return self.send(
                    req, 200, {"id": repo_id, "sha": sha, "private": False, "siblings": siblings}
                )
            if action == "tree":
                return self.tree(req, repo["commits"][sha], "/".join(rest[2:]), query)
            if action == "preupload":
                return self.preupload(req, repo["commits"][sha], json.loads(body))
            if action == "commit":
                return self.commit(req, repo_id, repo, sha, body)
        if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
            return self.resolve(req, method, f"{parts[1]}/{parts[2]}", parts[4], "/".join(parts[5:]))
        self.send(req, 404, {"error": f"fake hub: no route {method} {url.path}"})

    def send(
        self, req, status: int, payload=None, *, raw: bytes | None = None, headers=None, error_code=None
    ):
        data = raw if raw is not None else json.dumps(payload).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        req.send_header("Content-Length", str(len(data)))
        if error_code:
            req.send_header("X-Error-Code", error_code)
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)

    def create_repo(self, req, payload: dict) -> None:
        repo_id = f"{payload['organization']}/{payload['name']}"
        if repo_id in self.repos:
            url = f"{self.url}/datasets/{repo_id}"
            return self.send(req, 409, {"error": "You already created this dataset repo", "url": url})
        repo = self.repos[repo_id] = {
            "commits": {},
            "refs": {},
            "private": payload.get("visibility") == "private",
        }
        self._commit(repo, {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"}, "initial")
        self.send(req, 200, {"url": f"{self.url}/datasets/{repo_id}"})

    def validate_yaml(self, req, content: str) -> None:
        """The Hub checks a README's front matter before an upload; here: it parses and has configs."""
        try:
            front = yaml.safe_load(content.split("---\n")[1])
            assert all({"config_name", "data_files"} <= set(c) for c in front["configs"])
        except Exception as err:
            return self.send(req, 400, {"errors": [{"message": f"invalid metadata: {err!r}"}]})
        self.send(req, 200, {"errors": [], "warnings": []})

    def create_tag(self, req, repo: dict, rev: str, payload: dict) -> None:
        sha = self._resolve(repo, rev)
        if sha is None:
            return self.send(req, 404, {"error": "no such revision"}, error_code="RevisionNotFound")
        if payload["tag"] in repo["refs"]:
            return self.send(req, 409, {"error": "Tag already exists"})
        repo["refs"][payload["tag"]] = sha
        self.send(req, 200, {})

    def tree(self, req, files: dict[str, bytes], prefix: str, query: dict) -> None:
        recursive = query.get("recursive", ["False"])[0].lower() == "true"
        entries, folders = [], set()
        for path in sorted(files):
            rel = path[len(prefix) + 1 :] if prefix else path
            if prefix and not path.startswith(prefix + "/"):
                continue
            if "/" in rel and not recursive:
                folders.add(path[: len(path) - len(rel)] + rel.split("/")[0])
                continue
            entries.append(
                {"type": "file", "path": path, "size": len(files[path]), "oid": git_blob_sha(files[path])}
            )
        entries += [{"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)]
        self.send(req, 200, entries)

    def preupload(self, req, files: dict[str, bytes], payload: dict) -> None:
        out = [
            {
                "path": f["path"],
                "uploadMode": "regular",  # no LFS/xet: content travels base64-encoded in the commit
                "shouldIgnore": False,
                "oid": git_blob_sha(files[f["path"]]) if f["path"] in files else None,
            }
            for f in payload["files"]
        ]
        self.send(req, 200, {"files": out, "commitOid": None})

    def commit(self, req, repo_id: str, repo: dict, parent: str, body: bytes) -> None:
        files = dict(repo["commits"][parent])
        summary = ""
        for line in body.decode().splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                summary = value["summary"]
            elif key == "file":
                assert value["encoding"] == "base64"
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                files = {p: d for p, d in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            else:
                return self.send(req, 400, {"error": f"fake hub: unsupported commit item {key}"})
        sha = self._commit(repo, files, summary)
        url = f"{self.url}/datasets/{repo_id}/commit/{sha}"
        self.send(req, 200, {"commitUrl": url, "commitOid": sha, "pullRequestUrl": None})

    def resolve(self, req, method: str, repo_id: str, rev: str, path: str) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.send(req, 404, {"error": "Repository not found"}, error_code="RepoNotFound")
        sha = self._resolve(repo, rev)
        if sha is None:
            return self.send(req, 404, {"error": "no such revision"}, error_code="RevisionNotFound")
        if path not in repo["commits"][sha]:
            return self.send(req, 404, {"error": "Entry not found"}, error_code="EntryNotFound")
        data = repo["commits"][sha][path]
        headers = {"ETag": f'"{git_blob_sha(data)}"', "X-Repo-Commit": sha}
        self.send(req, 200, raw=data, headers=headers)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    from huggingface_hub import constants

    fake = FakeHub()
    # another test may have imported coda.learn.text (which sets HF_HUB_OFFLINE) before huggingface_hub
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # keep the user's Hugging Face cache untouched (refs of local_dir downloads, xet logs)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_XET_CACHE", str(tmp_path / "hf-home" / "xet"))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_fake_token_for_tests")
    yield fake
    fake.close()


def generation_program(k: int) -> dict:
    """A valid generation program (canonicalised by coda.memory.programs when that module exists)."""
    doc = {
        "kind": "generation",
        "family": "pick_place",
        "operations": [
            {"op": "sample", "role": "target", "attribute": "mass", "range": [0.1 + 0.01 * k, 0.8]}
        ],
    }
    try:
        from coda.memory.programs import validate_program
    except ImportError:
        return {**doc, "id": f"gp-test{k}"}
    return validate_program(doc)


def make_memory(round: int = 1, n_programs: int = 2) -> Memory:
    mem = Memory(encoder=lambda texts: [[1.0, float(len(t))] for t in texts])
    pids = [mem.add_program(generation_program(k)) for k in range(n_programs)]
    mem.add_scene("seed0", "pick_place", 0, "seed", {"family": "pick_place"})
    for r in range(1, round + 1):
        mem.add_scene(f"t{r}", "pick_place", r, "targeted", "{}", program_id=pids[0], base_hash="seed0")
        rid = mem.add_rollout(f"t{r}", "pick_place", r, "targeted", False, 2, 40, 100 * r)
        d = mem.add_diagnosis(rid, f"t{r}", "pick_place", r, "default", "grasp", "mass", "slips", 0.6)
        mem.assign_mode(d)
        mem.update_mode("pick_place/grasp/mass/0", 0.2 * r, 8, 100 * r, r)
    return mem


def test_push_pull_round_trip(hub, tmp_path):
    mem = make_memory()
    snap = save_snapshot(mem, tmp_path / "run" / "memory" / "round-0001", round=1, extra={"profile": "smoke"})
    card = {"profile": "smoke", "git_sha": "abc1234", "params": {"seed": 0, "rounds": 1}}
    sha = push_memory(tmp_path / "run", REPO, revision="round-1", card=card)
    remote = hub.files(REPO, "round-1")
    assert hub.repos[REPO]["refs"]["round-1"] == sha
    expected = {rel for rel in read_manifest(snap)["files"]} | {
        "manifest.json",
        "README.md",
        ".gitattributes",
    }
    assert set(remote) == expected
    assert "tables/programs.parquet" in remote
    assert remote["README.md"].decode() != (snap / "README.md").read_text()  # rewritten: repo id, provenance
    assert REPO in remote["README.md"].decode() and "abc1234" in remote["README.md"].decode()
    for rel in read_manifest(snap)["files"]:
        assert remote[rel] == (snap / rel).read_bytes()

    into = tmp_path / "pulled"
    path = pull_memory(REPO, revision="round-1", local_dir=into)
    assert path == into.resolve() and load_snapshot(path) == mem
    assert (into / ".cache").is_dir()  # huggingface_hub's local_dir metadata, ignored by the loader
    cached = pull_memory(REPO, revision=sha, cache_dir=tmp_path / "hf-cache")  # files are cache symlinks
    assert load_snapshot(cached) == mem


def test_dataset_card_lists_tables_as_configs(tmp_path):
    from huggingface_hub import DatasetCard

    snap = save_snapshot(make_memory(), tmp_path / "s", round=1)
    text = dataset_card(
        read_manifest(snap), REPO, {"git_sha": "abc1234", "profile": "cpu", "params": {"a": 1}}
    )
    card = DatasetCard(text)
    configs = {c["config_name"]: c["data_files"] for c in card.data.to_dict()["configs"]}
    assert configs["modes"] == "tables/modes.parquet" and len(configs) == 7
    assert configs["programs"] == "tables/programs.parquet"
    assert card.data.license and "robotics" in card.data.tags
    assert "abc1234" in text and "`profile`" in text and "a: 1" in text


def test_tags_pin_revisions_and_old_files_are_removed(hub, tmp_path):
    mem1, mem2 = make_memory(1, n_programs=3), make_memory(2, n_programs=1)
    s1 = save_snapshot(mem1, tmp_path / "m" / "round-0001", round=1)
    s2 = save_snapshot(mem2, tmp_path / "m" / "round-0002", round=2)
    sha1 = push_memory(s1, REPO, revision="r1")
    sha2 = push_memory(s2, REPO, revision="r2")
    dropped = f"programs/{generation_program(2)['id']}.json"
    assert dropped in hub.files(REPO, "r1") and dropped not in hub.files(REPO, "main")
    assert sha1 != sha2
    assert load_snapshot(pull_memory(REPO, revision="r1", local_dir=tmp_path / "a")) == mem1
    assert load_snapshot(pull_memory(REPO, local_dir=tmp_path / "b")) == mem2  # main = latest push
    with pytest.raises(MemoryFormatError, match="another revision"):  # r1's extra programs linger in "a"
        pull_memory(REPO, revision="r2", local_dir=tmp_path / "a")
    assert push_memory(s2, REPO, revision="r2") == sha2  # same snapshot, same tag: nothing to do
    with pytest.raises(HubError, match="r1"):
        push_memory(s2, REPO, revision="r1")


def test_pull_offline_uses_the_cache(hub, tmp_path):
    from huggingface_hub import constants

    mem = make_memory()
    push_memory(save_snapshot(mem, tmp_path / "s", round=1), REPO, revision="v1")
    cache = tmp_path / "hf-cache"
    online = pull_memory(REPO, revision="v1", cache_dir=cache)
    hub.close()
    constants.HF_HUB_OFFLINE = True  # restored by the fixture's monkeypatch
    assert pull_memory(REPO, revision="v1", cache_dir=cache) == online
    with pytest.raises(HubError, match="offline"):
        push_memory(tmp_path / "s", REPO)


def test_corrupted_remote_file_fails_verification(hub, tmp_path):
    push_memory(save_snapshot(make_memory(), tmp_path / "s", round=1), REPO)
    files = hub.files(REPO)
    data = bytearray(files["tables/modes.parquet"])
    data[len(data) // 2] ^= 0xFF
    files["tables/modes.parquet"] = bytes(data)
    with pytest.raises(MemoryFormatError, match=r"tables/modes\.parquet: sha256 mismatch"):
        pull_memory(REPO, local_dir=tmp_path / "p")


def test_push_refuses_a_snapshot_that_does_not_verify(hub, tmp_path):
    snap = save_snapshot(make_memory(), tmp_path / "s", round=1)
    (snap / "programs" / "stray.json").write_text("{}")
    with pytest.raises(MemoryFormatError, match="programs/stray.json"):
        push_memory(snap, REPO)
    assert REPO not in hub.repos


def test_pull_accepts_a_local_folder(tmp_path):
    snap = save_snapshot(make_memory(), tmp_path / "run" / "memory" / "round-0001", round=1)
    assert pull_memory(str(tmp_path / "run")) == snap


def test_cli_push_pull_in_a_fresh_process_honours_hf_endpoint(python_cli, hub, tmp_path):
    snap = save_snapshot(make_memory(), tmp_path / "run" / "memory" / "round-0001", round=1)
    script = (
        "import argparse, sys\n"
        "from coda.errors import UserError\n"
        "from coda.memory.commands import add_memory_commands, run_memory_command\n"
        "ap = argparse.ArgumentParser(); add_memory_commands(ap.add_subparsers(dest='cmd'))\n"
        "try:\n"
        "    sys.exit(run_memory_command(ap.parse_args(sys.argv[1:])))\n"
        "except UserError as e:  # as coda.cli.main does\n"
        "    print(f'error: {e}', file=sys.stderr); sys.exit(2)\n"
    )
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return python_cli("-c", script, *args, env=env)

    pushed = cli("memory", "push", str(tmp_path / "run"), REPO, "--revision", "v1")
    assert pushed.returncode == 0, pushed.stderr
    assert hub.files(REPO, "v1")["manifest.json"] == (snap / "manifest.json").read_bytes()
    pulled = cli("memory", "pull", REPO, "--revision", "v1", "--out", str(tmp_path / "pulled"), "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["modes"] == 1
    missing = cli("memory", "pull", "tester/nope", "--out", str(tmp_path / "nope"))
    assert (
        missing.returncode == 2 and missing.stderr.startswith("error: ") and "Traceback" not in missing.stderr
    )
    assert Path(tmp_path / "pulled" / "README.md").is_file()


def test_cli_push_shows_the_provenance_recorded_at_write_time_else_the_runs(hub, tmp_path):
    """`coda memory push`'s card: a snapshot's recorded provenance (git SHA, params), not the run.json's
    (which a resumed run may have rewritten under other code); run.json's only for a snapshot without one."""
    from coda.memory.commands import memory_push

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps({"coevolve": {"rounds": 9}, "git_sha": "b" * 40, "git_dirty": True})
    )
    recorded = {"git_sha": "a" * 40, "git_dirty": False, "profile": "smoke", "params_sha256": "c" * 64}
    recorded["params"] = {"coevolve": {"rounds": 2}}
    save_snapshot(make_memory(), run / "memory" / "round-0001", round=1, extra={"provenance": recorded})
    memory_push(str(run), REPO, revision="new")
    card = hub.files(REPO, "new")["README.md"].decode()
    assert "a" * 40 in card and "b" * 40 not in card
    assert "rounds: 2" in card and "rounds: 9" not in card
    old = tmp_path / "old"
    old.mkdir()
    (old / "run.json").write_text((run / "run.json").read_text())
    save_snapshot(make_memory(), old / "memory" / "round-0001", round=1, extra={"profile": "smoke"})
    memory_push(str(old), REPO, revision="old")
    card = hub.files(REPO, "old")["README.md"].decode()
    assert "b" * 40 in card and "rounds: 9" in card
