"""Untrusted memory: a snapshot read from disk or pulled from the Hub that is truncated, tampered with, of an
unknown schema version, oversized or carries unexpected files is rejected with `MemoryFormatError` naming the
file; nothing is ever unpickled; and no module of `coda` can load code or pickles from data it reads."""

from __future__ import annotations

import ast
import hashlib
import json
import pickle
from pathlib import Path

import pytest
from test_hub import REPO, FakeHub, make_memory  # the fake Hub of tests/test_hub.py

from coda.memory.hub import pull_memory, push_memory
from coda.memory.store import MemoryFormatError, load_snapshot, save_snapshot

PACKAGE = Path(__file__).resolve().parents[2] / "coda"


class Boom:
    """A pickle that creates a marker file when unpickled: proof that a loader executed content."""

    marker: Path

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _bomb(marker: Path) -> bytes:
    b = Boom()
    b.marker = marker
    return pickle.dumps(b)


def _edit_manifest(files: dict[str, bytes], fn) -> None:
    manifest = json.loads(files["manifest.json"])
    fn(manifest)
    files["manifest.json"] = json.dumps(manifest).encode()


def _replace_consistently(files: dict[str, bytes], rel: str, data: bytes) -> None:
    """Swap a file's content and fix the manifest, so that sizes and checksums verify."""
    files[rel] = data
    entry = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _edit_manifest(files, lambda m: m["files"].update({rel: entry}))


def _truncate(files, rel="tables/modes.parquet"):
    files[rel] = files[rel][: len(files[rel]) // 2]


def _flip_byte(files, rel="tables/scenes.parquet"):
    data = bytearray(files[rel])
    data[len(data) // 2] ^= 0xFF
    files[rel] = bytes(data)


# name -> (corrupt the snapshot's files in place, the message that must name the file)
CORRUPTIONS = {
    "truncated table": (_truncate, r"tables/modes\.parquet: size mismatch: \d+ bytes, manifest\.json says"),
    "truncated manifest": (
        lambda f: f.update({"manifest.json": f["manifest.json"][:40]}),
        r"manifest\.json: invalid JSON",
    ),
    "wrong checksum": (_flip_byte, r"tables/scenes\.parquet: sha256 mismatch"),
    "unknown schema_version": (
        lambda f: _edit_manifest(f, lambda m: m.update(schema_version=99)),
        r"manifest\.json: unknown schema_version 99",
    ),
    "oversized table": (
        lambda f: _edit_manifest(f, lambda m: m["files"]["tables/rollouts.parquet"].update(bytes=10**12)),
        r"tables/rollouts\.parquet: 1000000000000 bytes exceeds the limit max_table_bytes=",
    ),
    "unexpected file": (
        lambda f: f.update({"tables/payload.pkl": b"\x80\x04K\x01."}),
        r"tables/payload\.pkl: unexpected file",
    ),
    "unexpected file listed in the manifest": (
        lambda f: _replace_consistently(f, "tables/payload.pkl", b"\x80\x04K\x01."),
        r"manifest\.json: files: unexpected path 'tables/payload\.pkl'",
    ),
    "a pickle in place of a table, checksums fixed": (
        lambda f: _replace_consistently(f, "tables/modes.parquet", pickle.dumps({"rows": []})),
        r"tables/modes\.parquet: not a readable Parquet file",
    ),
    "a program that is not JSON, checksums fixed": (
        lambda f: _replace_consistently(f, next(r for r in f if r.startswith("programs/")), b"\x80\x04."),
        r"programs/.*\.json: invalid JSON",
    ),
}


def _files_of(snap: Path) -> dict[str, bytes]:
    return {p.relative_to(snap).as_posix(): p.read_bytes() for p in snap.rglob("*") if p.is_file()}


def _write_files(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture
def snapshot(tmp_path) -> Path:
    return save_snapshot(make_memory(round=2), tmp_path / "run" / "memory" / "round-0002", round=2)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The fake Hub of tests/test_hub.py on 127.0.0.1, with a private Hugging Face cache."""
    from huggingface_hub import constants

    fake = FakeHub()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_XET_CACHE", str(tmp_path / "hf-home" / "xet"))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_fake_token_for_tests")
    yield fake
    fake.close()


def _refuse_pickle(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used while loading untrusted memory")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupt_local_snapshot_is_rejected_naming_the_file(name, snapshot, tmp_path, monkeypatch):
    corrupt, message = CORRUPTIONS[name]
    files = _files_of(snapshot)
    corrupt(files)
    bad = _write_files(tmp_path / "bad", files)
    _refuse_pickle(monkeypatch)
    with pytest.raises(MemoryFormatError, match=message):
        load_snapshot(bad)


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupt_hub_snapshot_is_rejected_naming_the_file(name, snapshot, hub, tmp_path, monkeypatch):
    push_memory(snapshot, REPO, revision="good")
    corrupt, message = CORRUPTIONS[name]
    repo = hub.repos[REPO]
    files = dict(hub.files(REPO, "good"))
    corrupt(files)
    sha = hub._commit(repo, files, f"tampered: {name}")  # a later commit on main, as an attacker would push
    _refuse_pickle(monkeypatch)
    with pytest.raises(MemoryFormatError, match=message):
        pull_memory(REPO, revision=sha, local_dir=tmp_path / "pulled")
    if name == "wrong checksum":  # the pinned good revision still verifies
        assert load_snapshot(pull_memory(REPO, revision="good", local_dir=tmp_path / "good")) == make_memory(
            2
        )


def test_a_pickle_bomb_is_never_unpickled(snapshot, hub, tmp_path):
    """A malicious pickle as a table and as an extra file, checksums made consistent: rejected, not run."""
    marker = tmp_path / "executed"
    files = _files_of(snapshot)
    _replace_consistently(files, "tables/diagnoses.parquet", _bomb(marker))
    files["programs/evil.pkl"] = _bomb(marker)
    for where in ("tables/diagnoses.parquet", "programs/evil.pkl"):
        trial = dict(files)
        if where == "tables/diagnoses.parquet":
            trial.pop("programs/evil.pkl")
        with pytest.raises(MemoryFormatError, match=where.replace(".", r"\.")):
            load_snapshot(_write_files(tmp_path / f"local-{len(where)}", trial))
        hub.repos.setdefault(REPO, {"commits": {}, "refs": {}, "private": False})
        sha = hub._commit(hub.repos[REPO], trial, f"bomb in {where}")
        with pytest.raises(MemoryFormatError, match=where.replace(".", r"\.")):
            pull_memory(REPO, revision=sha, local_dir=tmp_path / f"pulled-{len(where)}")
    assert not marker.exists()


# -- the code itself: nothing in coda/ can execute or unpickle what it reads -------------------------------------
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "_StrictLoader"}  # _StrictLoader subclasses SafeLoader
# the executor pickles jobs and results between the parent and its own worker processes (never data from disk
# or the network), so it is the one module allowed to use pickle
PICKLE_ALLOWED = {"sim/executor/local.py"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_const(node: ast.AST | None, value) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def unsafe_calls(source: str, rel: str) -> list[str]:
    """Calls in `source` that could execute code or unpickle data: eval/exec/compile, pickle/marshal/dill,
    torch.load without weights_only=True, np.load with allow_pickle, unsafe yaml loaders, and
    trust_remote_code set to anything but False (as a keyword or a dict entry)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "trust_remote_code" and not _is_const(v, False):
                    found.append(f"{where}: trust_remote_code entry")
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if any(n and n.split(".")[0] in ("pickle", "marshal", "dill", "cloudpickle", "shelve", "joblib")
                   for n in names) and rel not in PICKLE_ALLOWED:  # fmt: skip
                found.append(f"{where}: imports {', '.join(n for n in names if n)}")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        kw = {k.arg: k.value for k in node.keywords}
        if name in ("eval", "exec", "compile", "__import__", "builtins.eval", "builtins.exec"):
            found.append(f"{where}: {name}()")
        elif name.endswith("read_pickle") or name.split(".")[0] in ("marshal", "dill", "shelve"):
            found.append(f"{where}: {name}()")
        elif name.split(".")[0] == "pickle" and rel not in PICKLE_ALLOWED:
            found.append(f"{where}: {name}()")
        elif name == "torch.load" and not _is_const(kw.get("weights_only"), True):
            found.append(f"{where}: torch.load without weights_only=True")
        elif (
            name in ("np.load", "numpy.load")
            and "allow_pickle" in kw
            and not _is_const(kw["allow_pickle"], False)
        ):
            found.append(f"{where}: np.load with allow_pickle")  # fmt: skip
        elif name in ("yaml.unsafe_load", "yaml.full_load", "yaml.load_all") or (
            name == "yaml.load" and _dotted(kw.get("Loader", ast.Constant(None))).split(".")[-1] not in SAFE_YAML_LOADERS
        ):  # fmt: skip
            found.append(f"{where}: {name} with an unsafe loader")
        if "trust_remote_code" in kw and not _is_const(kw["trust_remote_code"], False):
            found.append(f"{where}: trust_remote_code={ast.unparse(kw['trust_remote_code'])}")
    return found


def test_the_checker_finds_every_unsafe_pattern():
    bad = """
import pickle
eval("1")
exec("x = 1")
pickle.loads(b"")
torch.load("w.pt")
torch.load("w.pt", weights_only=False)
np.load("a.npz", allow_pickle=True)
yaml.load(text, Loader=yaml.Loader)
yaml.load(text)
AutoModel.from_pretrained("m", trust_remote_code=True)
kwargs = {"trust_remote_code": flag}
pd.read_pickle("x")
"""
    assert len(unsafe_calls(bad, "x.py")) == 12
    good = """
model.eval()
re.compile("x")
torch.load("w.pt", weights_only=True)
np.load("a.npz", allow_pickle=False)
yaml.load(text, Loader=_StrictLoader)
AutoModel.from_pretrained("m", local_files_only=True, trust_remote_code=False)
kwargs = {"trust_remote_code": False}
"""
    assert unsafe_calls(good, "x.py") == []


def test_no_module_can_execute_or_unpickle_what_it_loads():
    import yaml

    from coda import config

    assert issubclass(config._StrictLoader, yaml.SafeLoader)
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    found = [f for p in modules for f in unsafe_calls(p.read_text(), p.relative_to(PACKAGE).as_posix())]
    assert found == []
