"""On a fresh clone (no runs/, no data/), running any notebook changes no tracked file and says what is missing:
every artifact whose inputs are absent is left as committed (coda.report.inputs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A git clone of the working tree's committed state plus its uncommitted changes (what `git clone` of a
    pushed branch gives): tracked files only, no runs/, data/ or DVC cache."""
    repo = tmp_path_factory.mktemp("fresh") / "coda"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    for args in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fresh"],
    ):
        subprocess.run(args, cwd=repo, check=True, capture_output=True)
    return repo


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_on_a_fresh_clone_changes_no_tracked_file(clone, name, tmp_path):
    out = tmp_path / name
    res = subprocess.run(
        [sys.executable, "-m", "papermill", f"notebooks/{name}", str(out), "--log-level", "WARNING"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True
    ).stdout
    assert status.strip() == "", status
    text = out.read_text()
    assert "missing" in text or "not built" in text or "no LIBERO runs" in text, name
