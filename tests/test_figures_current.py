"""The committed tables are the ones the committed records give: every table whose inputs are all in git (or in
data/, when it is there) is rebuilt into a scratch folder and must equal figures/, byte for byte. A stage that
re-ran and changed a record without its figure being rebuilt fails here in seconds, rather than in
test_notebooks_fresh on a fresh clone after half an hour."""

from __future__ import annotations

from pathlib import Path

from coda.report import inputs
from coda.report.build import BUILDERS, build

ROOT = Path(__file__).resolve().parents[1]


def test_committed_tables_match_what_the_committed_records_give(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    built = []
    for name in BUILDERS:
        if name in ("summary", "index") or inputs.missing(name, "records", "data"):
            continue
        build(name, "records", tmp_path, "data")
        built.append(name)
    assert built, "no table could be built from the committed records"
    stale = [
        f.name
        for f in sorted(tmp_path.iterdir())
        if f.suffix in (".md", ".csv") and f.read_bytes() != (ROOT / "figures" / f.name).read_bytes()
    ]
    assert not stale, f"committed figures differ from the records' (run `coda report available`): {stale}"
