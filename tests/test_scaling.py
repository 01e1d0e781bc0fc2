"""The data-scaling experiment (coda/scaling.py) end to end on the small data set: nested generated sets,
paired rows on the same episodes, targeted environments from diagnosed failures, resuming, the figures."""

import dataclasses
from pathlib import Path

import pytest

from coda import scaling
from coda.config import load_params
from coda.evaluate import paired_diff

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def setup(small_data, tmp_path_factory):
    from coda.commands import _executor
    from coda.learn.sft import run_sft

    cfg = load_params(ROOT / "params.yaml", profile="smoke")
    cfg = dataclasses.replace(
        cfg,
        sft=dataclasses.replace(
            cfg.sft, demos_per_family=2, demo_repeats=1, epochs=5, eval_id_per_family=1, eval_ood_per_suite=1
        ),
        coevolve=dataclasses.replace(cfg.coevolve, rehearsal_per_family=1),
        scaling=dataclasses.replace(cfg.scaling, ns=(0, 2), updates=3, batch_size=16, diagnostic_pool=3),
    )
    ex = _executor(cfg, small_data, 2)
    sft_dir = tmp_path_factory.mktemp("sft")
    s = cfg.sft
    run_sft(
        small_data,
        sft_dir,
        backbone=s.backbone,
        demos_per_family=2,
        noise=s.noise,
        epochs=5,
        batch_size=64,
        lr=s.lr,
        eval_id_per_family=1,
        eval_ood_per_suite=1,
        seed=0,
        families=cfg.data.families,
        executor=ex,
    )
    out = tmp_path_factory.mktemp("scaling")
    yield cfg, ex, sft_dir, out
    ex.close()


def test_rows_are_paired_on_the_same_episodes_and_the_run_resumes(setup, small_data, monkeypatch, tmp_path):
    cfg, ex, sft_dir, out = setup
    result = scaling.run_scaling(cfg, small_data, sft_dir, out, ex)
    rows = {(r["mode"], r["n"]): r for r in result["rows"]}
    assert set(rows) == {("none", 0), ("uniform", 2), ("targeted", 2)}
    n_eval = 4 * 1 + 4 * 4 * 1  # one ID scene per family, one scene per suite per family
    sft = result["sft"]
    for r in [sft, *rows.values()]:
        assert len(r["eval_outcomes"]) == n_eval and (r["n_id"], r["n_ood"]) == (4, 16)
    assert rows[("none", 0)]["demos"] == 0 and rows[("uniform", 2)]["demos"] == 2 * 4
    assert 0 < rows[("targeted", 2)]["demos"] <= 2 * 4
    for r in rows.values():  # paired differences on the same OOD episodes
        assert r["ood_vs_sft"] == pytest.approx(
            paired_diff(r["eval_outcomes"][4:], sft["eval_outcomes"][4:])[0]
        )
    # the targeted environments come from diagnosed failures of the SFT policy on the diagnostic pool
    groups = result["meta"]["targeted"]["groups"]
    assert groups and all(g["failures"] > 0 for g in groups)
    assert any(g["program"] for g in groups)

    # every finished row is kept: a rerun trains nothing
    def boom(*a, **k):
        raise AssertionError("a finished row was recomputed")

    monkeypatch.setattr(scaling, "finetune", boom)
    again = scaling.run_scaling(cfg, small_data, sft_dir, out, ex)
    assert [r["eval_outcomes"] for r in again["rows"]] == [r["eval_outcomes"] for r in result["rows"]]

    scaling.write_figures(result, tmp_path)
    text = (tmp_path / "data_scaling.md").read_text()
    assert "| uniform | 2 |" in text and "| targeted | 2 |" in text and "| sft | 0 |" in text
    assert (tmp_path / "data_scaling.png").stat().st_size > 0
    assert (tmp_path / "data_scaling.csv").read_text().splitlines()[0].startswith("mode,n,demos")


def test_uniform_sets_are_nested(setup):
    cfg, ex, _, _ = setup
    small = scaling.uniform_envs(ex, ("push",), 2, seed=0)["push"]
    large = scaling.uniform_envs(ex, ("push",), 4, seed=0)["push"]
    assert [v["hash"] for v in large[:2]] == [v["hash"] for v in small]
