"""SFT: demonstrations -> chunk dataset -> behaviour cloning -> closed-loop success; the `coda sft` command."""

import json

import numpy as np
import pytest
import torch

from coda import data
from coda.learn.demos import chunk_dataset, demo_job
from coda.learn.sft import eval_job, train_sft


@pytest.fixture(scope="module")
def worker_world(small_data):
    data._init_worker(str(small_data))
    yield data._WORLD
    data._WORLD.close()


def test_noisy_demonstrations_keep_clean_labels(small_data, worker_world):
    scene = data.seed_scenes(small_data, "push", 1)[0]
    clean = demo_job((scene.to_json(), 0.0, 0))
    noisy = demo_job((scene.to_json(), 0.3, 0))
    assert clean["success"] and len(clean["labels"]) == len(clean["obs"])
    # noise changes what was executed (so the visited states), labels stay planner actions in [-1, 1]
    assert not np.allclose(clean["obs"][5], noisy["obs"][5])
    assert np.abs(noisy["labels"]).max() <= 1.0
    ds = chunk_dataset([clean, {**noisy, "success": False}])
    assert ds["obs"].shape == (len(clean["labels"]), 50) and ds["chunk"].shape == (len(clean["labels"]), 8, 7)
    np.testing.assert_array_equal(ds["chunk"][0], clean["labels"][:8])
    assert (ds["chunk"][-1, 1:, :6] == 0).all()  # padded with "hold still" past the end


def test_sft_on_a_handful_of_demos_succeeds_on_those_seeds(small_data, worker_world, tmp_path):
    """A real learning test: a few push demonstrations, cloned, reproduce the task in closed loop."""
    from coda.learn.policies import make_policy

    torch.set_num_threads(1)
    scenes = data.seed_scenes(small_data, "push", 3)
    demos = [demo_job((s.to_json(), 0.0, i)) for i, s in enumerate(scenes)]
    demos += [demo_job((s.to_json(), 0.1, 100 + i)) for i, s in enumerate(scenes)]
    ds = chunk_dataset(demos)
    policy = make_policy("regression", seed=0)
    result = train_sft(policy, ds, epochs=300, batch_size=64, lr=2e-3, seed=0)
    assert result.losses[-1] < 0.5 * result.losses[0]
    assert result.updates == 300 * max(1, len(ds["obs"]) // 64)
    policy.save_pretrained(tmp_path / "policy")
    wins = [eval_job((str(tmp_path / "policy"), s.to_json(), 12))["success"] for s in scenes]
    assert sum(wins) >= 2, wins


def test_coda_sft_command(make_coda, make_params, small_data, tmp_path):
    out = tmp_path / "run"
    r = make_coda(make_params(sft={"epochs": 2}), small_data).train_sft(
        out, workers=1, check=False, timeout=900
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["id_success"]) == set(data.FAMILIES) and set(m["ood_success"]) == set(data.FAMILIES)
    assert all(0.0 <= v <= 1.0 for v in m["id_success"].values())
    assert (out / "policy" / "config.json").exists()
