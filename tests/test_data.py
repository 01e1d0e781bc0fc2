"""data/: determinism, held-out/train disjointness, manifest, DVC directory hash."""

import json
from pathlib import Path

import numpy as np

from coda import data
from coda.sim.families import REGISTRY
from coda.sim.families.base import is_heldout_instance
from coda.sim.families.ranges import RANGES, SUITES, TRAIN_TEMPLATES
from coda.sim.rollout import plan_episode
from coda.sim.world import World


def test_same_seed_same_scene_hash(catalog):
    for family in data.FAMILIES:
        a = REGISTRY[family].sample(data.scene_rng(0, family, "seed", 3), catalog, "seed")
        b = REGISTRY[family].sample(data.scene_rng(0, family, "seed", 3), catalog, "seed")
        c = REGISTRY[family].sample(data.scene_rng(1, family, "seed", 3), catalog, "seed")
        assert a.hash == b.hash != c.hash


def test_rollout_record_is_a_function_of_the_scene(small_data):
    scenes = [data.seed_scenes(small_data, f, 1)[0] for f in data.FAMILIES]
    w1 = World(small_data)
    for s in scenes:  # w1 has simulated other scenes before the last one
        rec1 = plan_episode(w1, s)
    w2 = World(small_data)
    rec2 = plan_episode(w2, scenes[-1])
    for k in rec1.states:
        np.testing.assert_array_equal(rec1.states[k], rec2.states[k])
    np.testing.assert_array_equal(rec1.actions, rec2.actions)
    w1.close()
    w2.close()


def test_build_is_deterministic_across_worker_counts(small_data, tmp_path):
    again = tmp_path / "data"
    data.build(again, seed=0, n_seed_layouts=12, suite_size=2, workers=1)
    assert data.dvc_dir_md5(again) == data.dvc_dir_md5(small_data)


def test_manifest_lists_every_file_with_its_hash(small_data):
    m = json.loads((small_data / "manifest.json").read_text())
    files = {str(p.relative_to(small_data)) for p in small_data.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(m["files"]) == files
    assert m["counts"]["pick_place/seed"] == 3 and m["counts"]["drawer/layouts"] == 2


def _rows(small_data):
    out = {}
    for f in data.FAMILIES:
        out[(f, "seed")] = data.seed_scenes(small_data, f)
        for s in SUITES:
            out[(f, s)] = data.suite_scenes(small_data, f, s)
    return out


def test_heldout_suites_never_overlap_training(small_data, catalog):
    rows = _rows(small_data)
    rng = np.random.default_rng(0)
    for family in data.FAMILIES:
        fam = REGISTRY[family]
        seed_hashes = {s.hash for s in rows[(family, "seed")]}
        generated = [fam.sample(rng, catalog, "generator") for _ in range(150)]
        train_assets = {o.asset_id for s in rows[(family, "seed")] + generated for o in s.objects}
        train_cats = {s.objects[0].category for s in rows[(family, "seed")] + generated}
        train_templates = {s.task.template_id for s in rows[(family, "seed")] + generated}
        assert train_templates <= set(range(TRAIN_TEMPLATES))
        for suite in SUITES:
            for s in rows[(family, suite)]:
                assert s.hash not in seed_hashes
                assert s.hash not in {g.hash for g in generated}
        # unseen instances: held-out ids, never in any training pool
        for s in rows[(family, "instances")]:
            assert is_heldout_instance(s.objects[0].asset_id) and s.objects[0].asset_id not in train_assets
        # unseen categories: the category itself never appears in training
        for s in rows[(family, "categories")]:
            assert s.objects[0].category in RANGES[family]["heldout_categories"]
            assert s.objects[0].category not in train_cats
        # unseen tasks: instruction templates that training never uses
        for s in rows[(family, "tasks")]:
            assert s.task.template_id >= TRAIN_TEMPLATES
            assert s.task.variant in RANGES[family]["heldout_variants"]
        for s in generated:
            assert not is_heldout_instance(s.objects[0].asset_id)


def test_seed_distribution_is_narrower_than_generator_and_excludes_layout_suite(small_data, catalog):
    rng = np.random.default_rng(1)
    fam = REGISTRY["pick_place"]
    seed = np.array(
        [
            [s.spatial.poses[0].x, s.spatial.poses[0].y]
            for s in [fam.sample(rng, catalog, "seed") for _ in range(200)]
        ]
    )
    gen = np.array(
        [
            [s.spatial.poses[0].x, s.spatial.poses[0].y]
            for s in [fam.sample(rng, catalog, "generator") for _ in range(200)]
        ]
    )
    lay = np.array(
        [
            [s.spatial.poses[0].x, s.spatial.poses[0].y]
            for s in [fam.sample(rng, catalog, "layouts") for _ in range(100)]
        ]
    )
    assert np.ptp(gen, axis=0).min() > 2 * np.ptp(seed, axis=0).max()
    # every held-out layout lies outside the seed box and inside the generator's reach
    lo, hi = seed.min(axis=0), seed.max(axis=0)
    outside = ~((lay >= lo) & (lay <= hi)).all(axis=1)
    assert outside.all()
    assert (lay >= gen.min(axis=0) - 0.01).all() and (lay <= gen.max(axis=0) + 0.01).all()


def test_dvc_dir_hash_matches_dvc(tmp_path):
    import subprocess
    import sys

    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("alpha\n")
    (d / "sub" / "b.json").write_text('{"b": 1}\n')
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc = Path(sys.executable).parent / "dvc"
    subprocess.run([str(dvc), "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([str(dvc), "add", "-q", "d"], cwd=tmp_path, check=True)
    import yaml

    recorded = yaml.safe_load((tmp_path / "d.dvc").read_text())["outs"][0]["md5"]
    assert data.dvc_dir_md5(d) == recorded


def test_ranges_document_is_current():
    from pathlib import Path

    from coda.sim.families.ranges import render_markdown

    doc = Path(__file__).resolve().parent.parent / "docs" / "RANGES.md"
    assert doc.read_text().strip() == render_markdown().strip(), "run `coda data ranges > docs/RANGES.md`"
