"""data/: determinism, held-out/train disjointness, manifest, DVC directory hash."""

import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


def test_every_heldout_factor_range_lies_inside_the_generator_space(catalog, monkeypatch):
    """The generator can produce every held-out factor value (so generated environments can reach each
    suite), both as declared ranges and as sampled suite scenes."""
    from coda.engine.diagnose import factor_values
    from coda.sim.families import ranges

    for family in data.FAMILIES:
        assert ranges.uncovered(family) == [], family
    rng = np.random.default_rng(3)
    for family in data.FAMILIES:
        fam, gen = REGISTRY[family], REGISTRY[family].space("generator")
        for suite in SUITES:
            keys = set(RANGES[family][suite])
            for _ in range(30):
                spec = fam.sample(rng, catalog, suite)
                obj = spec.objects[0]
                values = {"scale": obj.scale, "mass": obj.mass, "friction": obj.friction}
                values.update({f"{k}_yaw": p.yaw for k, p in _role_poses(spec).items()})
                for key in keys & set(values):
                    assert any(
                        lo - 1e-9 <= values[key] <= hi + 1e-9 for lo, hi in ranges.intervals(gen[key])
                    ), (family, suite, key, values[key])
            assert factor_values(spec)  # the diagnoser reads the same scenes
    # a held-out range outside the generator's is reported, with its key
    monkeypatch.setitem(RANGES["push"], "instances", {"scale": (1.2, 1.6)})
    assert ranges.uncovered("push") == ["push.instances.scale: [1.2, 1.6] outside the generator's [0.7, 1.4]"]


def _role_poses(spec):
    return {role: spec.spatial.poses[i] for role, i in spec.task.bindings.items()}


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

    from coda.sim.families.ranges import generator_share, render_coverage, render_markdown

    doc = Path(__file__).resolve().parent.parent / "docs" / "RANGES.md"
    want = render_markdown().rstrip("\n") + "\n\n" + render_coverage()
    assert doc.read_text().strip() == want.strip(), "run `coda data ranges > docs/RANGES.md`"
    for family in RANGES:  # a suite no generated draw can land in could never be trained for
        assert all(0 < generator_share(family, s) < 1 for s in SUITES)


def _reduced_kernels_env() -> dict[str, str]:
    """This environment with NumPy's SIMD dispatch switched off (baseline kernels only) and OpenBLAS on its
    Nehalem kernels: what an older x86-64 CPU computes with."""
    import os

    from numpy._core import _multiarray_umath as umath

    env = dict(os.environ)
    env.update(NPY_DISABLE_CPU_FEATURES=" ".join(umath.__cpu_dispatch__), OPENBLAS_CORETYPE="Nehalem")
    return env


def _differing_files(a: Path, b: Path) -> list[str]:
    names = sorted({p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()})
    names += sorted({p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()} - set(names))
    return [
        n
        for n in names
        if not (a / n).is_file() or not (b / n).is_file() or (a / n).read_bytes() != (b / n).read_bytes()
    ]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="NumPy/OpenBLAS kernel names are x86-64's")
def test_build_is_byte_identical_with_reduced_numpy_and_openblas_kernels(small_data, tmp_path):
    """The CPU's vector extensions decide nothing: with baseline kernels every file has the same bytes."""
    out = tmp_path / "reduced"
    coda = Path(sys.executable).parent / "coda"
    probe = (  # which dispatch targets NumPy uses and which kernels OpenBLAS runs, in that environment
        "import numpy, threadpoolctl; from numpy._core import _multiarray_umath as u; "
        "print([f for f in u.__cpu_dispatch__ if u.__cpu_features__[f]], "
        "[i.get('architecture') for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'])"
    )
    got = subprocess.run(
        [sys.executable, "-c", probe], env=_reduced_kernels_env(), capture_output=True, text=True, check=True
    )
    assert got.stdout.split() == ["[]", "['Nehalem']"], got.stdout  # the reduced kernels really are in force
    cmd = [
        str(coda),
        "data",
        "build",
        "--out",
        str(out),
        "--n-seeds",
        "12",
        "--suite-size",
        "2",
        "--workers",
        "2",
    ]
    subprocess.run(cmd, env=_reduced_kernels_env(), capture_output=True, text=True, check=True)
    assert _differing_files(small_data, out) == []


def test_pinned_libm_keeps_other_tunables(monkeypatch):
    from coda.numerics import PINNED_LIBM, pinned_libm_env

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.check=0")
    assert pinned_libm_env() == {"GLIBC_TUNABLES": f"glibc.malloc.check=0:{PINNED_LIBM}"}
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert pinned_libm_env() == {"GLIBC_TUNABLES": PINNED_LIBM}


def test_profile_scenes_from_a_larger_build_are_the_bytes_of_a_direct_build(small_data, tmp_path):
    """Every slot is seeded on its own: the smoke-sized scenes cut from data/ equal a smoke-sized build."""
    cut = data.build(tmp_path / "cut", n_seed_layouts=8, suite_size=1, source=small_data)
    direct = data.build(tmp_path / "direct", n_seed_layouts=8, suite_size=1, workers=2)
    assert cut == direct
    assert _differing_files(tmp_path / "cut", tmp_path / "direct") == []
    with pytest.raises(ValueError, match="does not hold"):
        data.build(tmp_path / "more", n_seed_layouts=40, suite_size=1, source=small_data)


def test_ensure_names_the_files_a_rebuild_changed(small_data, tmp_path, monkeypatch):
    """A rebuild that differs from data.dvc's record is reported file by file, kept, and accepted on request."""
    import shutil

    import yaml

    from coda.commands import UserError, data_ensure
    from coda.config import load_params

    repo = tmp_path / "repo"
    repo.mkdir()
    dvc = str(Path(sys.executable).parent / "dvc")
    for args in (["git", "init", "-q"], [dvc, "init", "-q"]):
        subprocess.run(args, cwd=repo, check=True)
    shutil.copytree(small_data, repo / "data")
    subprocess.run([dvc, "add", "-q", "data"], cwd=repo, check=True)
    data.record_release(repo / "data.dvc", repo / "data")
    doc = yaml.safe_load((repo / "data.dvc").read_text())
    assert doc["meta"]["build"]["n_seed_layouts"] == 12
    assert data.release_listing(doc) == data.file_listing(repo / "data")
    # pretend the release was built elsewhere with other bytes for one file
    doc["meta"]["files"]["seeds"]["stack.jsonl"] = ["0" * 32, 10, 1]
    doc["outs"][0]["md5"] = "0" * 32 + ".dir"
    (repo / "data.dvc").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.rmtree(repo / "data")
    cfg = load_params(Path(__file__).resolve().parents[1] / "params.yaml", "smoke")
    monkeypatch.chdir(repo)
    with pytest.raises(UserError) as err:
        data_ensure(Path("data"), Path("data.dvc"), cfg)
    assert "1 file(s) differ" in str(err.value) and "seeds/stack.jsonl: different content" in str(err.value)
    assert "--accept" in str(err.value) and (repo / "data" / "manifest.json").is_file()
    assert data_ensure(Path("data"), Path("data.dvc"), cfg, accept=True).startswith("kept the rebuilt data")
    up_to_date = data_ensure(Path("data"), Path("data.dvc"), cfg)
    assert up_to_date.endswith(f"up to date ({data.dvc_dir_md5(repo / 'data')})")
