"""The whole reproduction pipeline at the smoke profile: `dvc repro` on a fresh copy of the project writes
every table and figure file (Table 2 when the `[libero]` extra is installed), executes every notebook with
papermill, and is then up to date; `dvc metrics show`, `dvc plots show` and `dvc params diff` work, and
changing one variant's parameters invalidates only that run and what reads it. Regime B's grids (its budget
curve, ablations, long runs, backbone transfer and data scaling: regime A's commands on regime B's scenes and
SFT) are left out, which halves the test; regime B's scenes, SFT, Table 1 and report stay. Of the ablations it
keeps one per table (`VARIANTS`, plus the two reference runs and the variant the invalidation check edits): the
others are the same command with other parameters, and their tables show them as not run.

This is the slowest test (minutes). The copy has no `data/`, DVC cache or remote, as on a fresh clone: the
`scenes` stage builds the smoke profile's scenes from scratch inside the timed repro. It prints repro's wall
time, in all and without the LIBERO stages, and per stage (`-s` shows them); `python
benchmarks/smoke_pipeline.py` measures the same on its own.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import yaml

from coda.report.tables import OURS
from tests.conftest import load_benchmark

# `make test` runs this beside the rest of the suite on two workers: 32-35 min here, about twice that on CI
pytestmark = [pytest.mark.slow, pytest.mark.timeout(4800)]
REPRO_TIMEOUT_S = 4500  # repro's own watchdog fires first, so a failure lists the stages that finished


ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
smoke = load_benchmark("smoke_pipeline")

EXPECTED = [
    *(
        f"{t}.{ext}"
        for t in (
            "table1_main",
            "table3_critic_sensitivity",
            "table4_text2potential",
            "table5_memory_design",
            "table6_family_transfer",
            "table7_backbone_transfer",
            "table8_generation_quality",
            "table9_compute",
            "complementarity",
            "budget_curve",
        )
        for ext in ("csv", "md")
    ),
    *(
        f"{f}.{ext}"
        for f in (
            "figure3_rounds",
            "figure5_memory_snapshots",
            "figure6_gallery",
            "learning_speed",
            "budget_curve",
        )
        for ext in ("png", "svg")
    ),
    "README.md",
]
LIBERO = [
    *("table2_libero_pro.csv", "table2_libero_pro.md", "libero_planner.csv", "libero_planner.md"),
    *("table2_libero_curve.csv", "table2_libero_curve.md", "table2_libero_curve.png", "libero_coverage.csv"),
    "libero_coverage.md",
]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# one ablation per table (3, 4, complementarity, 6, 9), the references they pair with, and `value_only`, which
# the invalidation check edits
VARIANTS = (
    "critic_noisy20",
    "t2p_sparse",
    "value_only",
    "gen_store_only",
    "train_store_only",
    "transfer",
    "adaptive",
    "coda_ref",
    "critic_no_memory_ref",
)


def _libero() -> bool:
    from coda.sim import libero

    return libero.available()


@pytest.fixture(scope="module")
def smoke_repo(tmp_path_factory) -> tuple[Path, dict]:
    """A fresh copy of the project (what `git clone` gives) with the smoke profile and one Table 1 seed
    selected, after `dvc repro` (benchmarks/smoke_pipeline.py); returns it and repro's timings."""
    if not _libero():  # without the [libero] extra (CI installs it) the LIBERO stages are left out
        print("LIBERO is not installed (pip install -e '.[libero]'): testing the pipeline without Table 2")
    # regime B's grids (budget, ablations, long runs, backbone, data scaling) are regime A's commands on other
    # scenes: left out here, they are run by `python benchmarks/smoke_pipeline.py` (the whole pipeline)
    repo = smoke.prepare(
        tmp_path_factory.mktemp("pipeline") / "coda",
        libero=_libero(),
        regime_b_grids=False,
        variants=VARIANTS,
    )
    timing = smoke.repro(repo, timeout=REPRO_TIMEOUT_S)
    (repo / "repro.log").write_text(timing.pop("log"))
    done = f"stages finished (s): {json.dumps(timing['stages'])}"
    assert timing["returncode"] == 0, (repo / "repro.log").read_text()[-4000:] + "\n" + done
    # the figure the reproduction issue asks for: reported, not asserted (timings are benchmarks' business)
    print(f"smoke dvc repro: {timing['total_s']:.0f} s, {timing['without_libero_s']:.0f} s without LIBERO")
    print(json.dumps(timing["stages"]))
    return repo, timing


def test_smoke_repro_writes_every_table_and_figure(smoke_repo):
    repo, seconds = smoke_repo
    figures = repo / "figures"
    expected = EXPECTED + (LIBERO if _libero() else [])
    missing = [f for f in expected if not (figures / f).is_file() or (figures / f).stat().st_size == 0]
    assert not missing, f"not written: {missing}"
    for f in expected:
        if f.endswith(".csv"):
            rows = list(csv.DictReader((figures / f).open()))
            assert rows, f
            # every table has a row label and its profile; the paper's tables ours beside the paper's
            paper_table = f not in ("libero_coverage.csv",)
            assert ({"row", OURS, "paper"} if paper_table else {"row"}) | {"profile"} <= set(rows[0]), f
            assert all(r["profile"] == "smoke" for r in rows), f
    with (figures / "table1_main.csv").open() as fh:
        table1 = {r["row"]: r for r in csv.DictReader(fh)}
    assert set(table1) == {
        "SFT",
        "Domain randomization",
        "Uniform generation",
        "Success-rate-guided generation",
        "Critic without memory",
        "CoDA",
    }
    for row in table1.values():  # every Table 1 method ran: a number with n=1 (smoke: one seed)
        assert row["ours (mean ± s.e., n)"].endswith("(n=1)"), row
    assert table1["CoDA"]["paper"] == "27.6"
    assert "table1_main.md" in (figures / "README.md").read_text()
    if _libero():  # Table 2: before/after rows for the four LIBERO suites, each from a real evaluation
        with (figures / "table2_libero_pro.csv").open() as fh:
            table2 = list(csv.DictReader(fh))
        assert len(table2) == 12 and all("(n=" in r[OURS] for r in table2), table2
        papers = [r["paper"] for r in table2]
        # standard, position (_swap), new task (_task: the paper's instruction numbers), paraphrase (_lan)
        assert papers == ["97.1", "97.4", "—", "25.0", "84.0", "—", "1.0", "76.0", "—", "—", "—", "—"], papers
    # the per-round metrics DVC reads
    results = json.loads((repo / "metrics" / "results.json").read_text())
    # every Table 1 method, plus SFT from its own evaluation stage (`sft_eval`)
    assert results["profile"] == "smoke" and set(results["table1"]) == {"sft"} | set(
        yaml.safe_load((repo / "params.yaml").read_text())["experiments"]["table1"]
    )


def test_every_notebook_executed_by_papermill(smoke_repo):
    repo, _ = smoke_repo
    for name in NOTEBOOKS:
        executed = json.loads((repo / "notebooks" / "executed" / name).read_text())
        meta = executed["metadata"]["papermill"]
        assert meta.get("exception") in (None, False), name
        errors = [
            o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"
        ]
        assert not errors, (name, errors[:1])
    # the committed notebooks carry no outputs
    for name in NOTEBOOKS:
        nb = json.loads((ROOT / "notebooks" / name).read_text())
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), name


def test_repro_again_is_a_no_op_and_one_variant_invalidates_only_its_chain(smoke_repo):
    repo, _ = smoke_repo
    res = smoke.sh([str(BIN / "dvc"), "repro"], repo)
    assert "Running stage" not in res.stdout, res.stdout[-2000:]
    shown = smoke.sh([str(BIN / "dvc"), "metrics", "show"], repo).stdout
    assert "metrics/summary/table1/coda.json" in shown and "claims" in shown, shown
    assert max(len(line) for line in shown.splitlines()) <= 200, shown  # fits a terminal
    for path in (repo / "metrics" / "summary").rglob("*.json"):  # numbers only
        values = json.loads(path.read_text()).values()
        assert all(v is None or isinstance(v, int | float) for v in values), path
    plots = repo / "metrics" / "plots"  # one file per plot, long format, no blanks drawn as zeros
    groups = {p.stem: list(csv.DictReader(p.open())) for p in plots.glob("*.csv")}
    assert set(groups) >= {
        "rounds_table1",
        "rounds_table1_b",
        "rounds_long",
        "losses_critic",
        "losses_policy",
    }
    for name, rows in groups.items():
        head = {"round", "method", "ood"} if name.startswith("rounds") else {"method", "step", "loss"}
        assert rows and set(rows[0]) == head and all(all(r.values()) for r in rows), name
    assert "coda" in {r["method"] for r in groups["rounds_table1"]}
    assert "coda" in {r["method"] for r in groups["rounds_long"]}
    smoke.sh([str(BIN / "dvc"), "plots", "show", "-o", str(repo / "plots_html")], repo)
    page = (repo / "plots_html" / "index.html").read_text()
    assert '"field": "method"' in page or '"field":"method"' in page  # one colour per method
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["experiments"]["variants"]["value_only"]["set"]["temperature"] = 0.25
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    diff = smoke.sh([str(BIN / "dvc"), "params", "diff"], repo).stdout
    assert "value_only" in diff
    status = smoke.sh([str(BIN / "dvc"), "status", "--json"], repo).stdout
    changed = set(json.loads(status))
    assert "ablation@value_only" in changed
    assert not any(s.startswith(("table1@", "long@", "sft", "backbone")) for s in changed), changed
    assert not any(s.startswith("ablation@") and s != "ablation@value_only" for s in changed), changed
