"""No committed notebook output or figure names a folder of the machine that made it: they are re-made byte
for byte elsewhere, and a reader's clone lives somewhere else."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# an absolute path into a machine's own folders (not a URL's path: no scheme, host or word character before it)
ABSOLUTE = re.compile(r"(?<![\w.:/-])/(?:home|root|tmp|work|check|Users|opt|var|mnt|srv|usr|private)/[\w.-]")


def tracked(*folders: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *folders], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p]


def absolute_paths(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 40] for m in ABSOLUTE.finditer(text)]


def test_the_pattern_finds_machine_paths_and_leaves_urls_and_relative_paths():
    assert absolute_paths('"/work/main/.venv/lib/python3.11/site-packages/tqdm/auto.py:21"')
    assert absolute_paths("wrote /tmp/coda-verify-x/metrics")
    assert not absolute_paths("https://example.org/home/page and records/regime_a/table1/coda-0")
    assert not absolute_paths("figures/table1.md, ../shared/docs, ./runs/sft")


def test_no_committed_notebook_output_or_figure_names_an_absolute_path():
    files = tracked("notebooks/executed", "figures")
    assert files, "nothing committed under notebooks/executed/ or figures/"
    found = {}
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images
            continue
        hits = absolute_paths(text) + ([str(ROOT)] if str(ROOT) in text else [])
        if hits:
            found[str(f.relative_to(ROOT))] = hits[:2]
    assert not found, found
