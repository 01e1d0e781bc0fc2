"""Chunk critic: checkpoints round-trip exactly, TD updates fit their targets, Q ranks the chunks of successful
rollouts above those of failed ones, the decision rule; and the chunk replay store."""

import functools

import numpy as np
import pytest
import torch

from coda.learn.critic import (
    ChunkCritic,
    CriticConfig,
    CriticTD,
    TDConfig,
    make_batch,
    parameter_count,
    select,
    selection_weights,
    state_value,
)
from coda.learn.replay import ChunkReplay
from coda.learn.text import hashed_ngrams
from coda.sim.rollout import RolloutRecord

torch.set_num_threads(1)


@functools.cache
def _embed(text: str) -> torch.Tensor:
    return torch.from_numpy(hashed_ngrams(text))


def encode(texts):
    """A cheap deterministic stand-in for the frozen sentence encoder (same 384-d interface, cached)."""
    return torch.stack([_embed(t) for t in texts])


def synthetic_record(
    rng, good: bool, n_chunks: int = 3, h: int = 8, instruction: str = "put the block in the bin"
):
    """A rollout whose outcome is decided by its actions: "good" chunks push +0.5 along x and succeed at the
    end; "bad" ones push −0.5 and run into the step limit (a failure). Observations are uninformative noise."""
    steps = n_chunks * h
    sign = 1.0 if good else -1.0
    actions = np.clip(rng.normal(0.0, 0.15, size=(steps, 7)), -1, 1)
    actions[:, 0] += 0.5 * sign
    return RolloutRecord(
        scene_hash=f"{rng.integers(1 << 30):08x}",
        family="pick_place",
        variant="bin",
        instruction=instruction,
        ctx={},
        states={},
        obs=rng.normal(size=(steps + 1, 50)).astype(np.float32),
        actions=actions,
        chunk_starts=list(range(0, steps, h)),
        phase_names=[],
        phases=np.zeros((steps + 1, 0), bool),
        success=good,
        success_step=steps if good else None,
        physics_steps=0,
        wall_s=0.0,
    )


def random_batch(rng, b=32, j=None):
    batch = {
        "obs": torch.randn(b, 50),
        "instr": encode(["open the drawer"] * b),
        "actions": torch.randn(b, 8, 7).clamp(-1, 1),
        "mask": torch.ones(b, 8, dtype=torch.bool),
        "reward": torch.from_numpy((rng.random(b) < 0.3).astype(np.float32)),
        "shaping": torch.randn(b) * 0.3,
        "next_obs": torch.randn(b, 50),
        "done": torch.from_numpy(rng.random(b) < 0.4),
        "steps": torch.full((b,), 8),
        "next_actions": torch.randn(b, 8, 7).clamp(-1, 1),
        "next_mask": torch.ones(b, 8, dtype=torch.bool),
    }
    if j:
        batch["next_candidates"] = torch.randn(b, j, 8, 7).clamp(-1, 1)
    return batch


# -- network and checkpoints --------------------------------------------------------------------------------
def test_default_critic_shape_and_size():
    critic = ChunkCritic()
    assert len(critic.blocks) == 4 and critic.config.d_model == 64
    assert parameter_count(critic) < 400_000
    q = critic.score(np.zeros(50), encode(["stack the cube"])[0], np.zeros((8, 8, 7)))
    assert q.shape == (8,)
    # the module has no fused transformer layers (they bypass adapters in eval mode)
    assert not any(
        isinstance(
            m,
            torch.nn.TransformerEncoderLayer | torch.nn.TransformerDecoderLayer | torch.nn.MultiheadAttention,
        )
        for m in critic.modules()
    )


def test_save_load_round_trip_is_exact(tmp_path):
    critic = ChunkCritic(CriticConfig(d_model=32, n_heads=2, seed=3))
    critic.fit_normalizer(np.random.default_rng(0).normal(size=(64, 50)))
    td = CriticTD(critic)
    td.update(random_batch(np.random.default_rng(0)))  # non-initial weights
    critic.save_pretrained(tmp_path / "critic")
    again = ChunkCritic.from_pretrained(tmp_path / "critic")
    assert again.config == critic.config
    a, b = critic.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    batch = random_batch(np.random.default_rng(1), j=8)
    critic.eval(), again.eval()
    assert torch.equal(
        critic(batch["obs"], batch["instr"], batch["next_candidates"]),
        again(batch["obs"], batch["instr"], batch["next_candidates"]),
    )


def test_same_seed_same_weights_without_touching_the_global_rng():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b = ChunkCritic(CriticConfig(seed=7)), ChunkCritic(CriticConfig(seed=7))
    assert torch.equal(torch.rand(1), before)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_padded_actions_do_not_change_q():
    critic = ChunkCritic(CriticConfig(d_model=32, n_heads=2)).eval()
    obs, instr = torch.randn(2, 50), encode(["a", "b"])
    chunks = torch.randn(2, 8, 7)
    mask = torch.arange(8)[None].expand(2, 8) < torch.tensor([[5], [8]])
    q = critic(obs, instr, chunks, mask)
    other = chunks.clone()
    other[0, 5:] = 9.0  # garbage in the padded steps of row 0
    torch.testing.assert_close(critic(obs, instr, other, mask), q)
    with pytest.raises(ValueError, match="at least one valid action"):
        critic(obs, instr, chunks, torch.zeros(2, 8, dtype=torch.bool))


def test_config_is_validated():
    from coda.config import ConfigError

    with pytest.raises(ConfigError, match="n_heads"):
        CriticConfig(d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="tau"):
        TDConfig(tau=0.0)
    with pytest.raises(ConfigError, match="value"):
        TDConfig(value="max")


# -- TD learning --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["mean", "softmax"])
def test_td_update_lowers_the_td_loss_on_a_fixed_batch(value):
    td = CriticTD(ChunkCritic(CriticConfig(d_model=32, n_heads=2)), TDConfig(lr=1e-3, value=value))
    batch = random_batch(np.random.default_rng(0), j=4)
    with torch.no_grad():
        before = float(td.td_loss(batch))
    stats = [td.update(batch) for _ in range(60)]
    with torch.no_grad():
        after = float(td.td_loss(batch))
    assert after < 0.5 * before, (before, after)
    assert set(stats[0]) >= {"loss", "q_mean", "target_mean"} and td.updates == 60


def test_td_target_uses_done_discount_and_candidates():
    td = CriticTD(ChunkCritic(CriticConfig(d_model=32, n_heads=2)), TDConfig(gamma=0.9, value="mean"))
    batch = random_batch(np.random.default_rng(0), b=6, j=3)
    batch["steps"] = torch.tensor([8, 8, 8, 5, 5, 5])
    with torch.no_grad():
        q_next = td.target(batch["next_obs"], batch["instr"], batch["next_candidates"]).mean(1)
        want = (
            batch["reward"]
            + batch["shaping"]
            + 0.9 ** batch["steps"].float() * (~batch["done"]).float() * q_next
        )
        torch.testing.assert_close(td.td_target(batch), want)
        # without candidates the dataset's next chunk is the single candidate
        del batch["next_candidates"]
        q_data = td.target(batch["next_obs"], batch["instr"], batch["next_actions"], batch["next_mask"])
        want = (
            batch["reward"]
            + batch["shaping"]
            + 0.9 ** batch["steps"].float() * (~batch["done"]).float() * q_data
        )
        torch.testing.assert_close(td.td_target(batch), want)


def test_target_network_tracks_by_polyak_averaging():
    td = CriticTD(ChunkCritic(CriticConfig(d_model=32, n_heads=2)), TDConfig(tau=0.1, lr=1e-2))
    old_target = [p.clone() for p in td.target.parameters()]
    td.update(random_batch(np.random.default_rng(0)))
    for p_old, p_target, p in zip(old_target, td.target.parameters(), td.critic.parameters()):
        torch.testing.assert_close(p_target, 0.9 * p_old + 0.1 * p)
    assert not any(p.requires_grad for p in td.target.parameters())


def test_q_ranks_successful_rollout_chunks_above_failed_ones():
    rng = np.random.default_rng(0)
    store = ChunkReplay(capacity=512)
    for k in range(48):
        store.add_record(synthetic_record(rng, good=k % 2 == 0))
    critic = ChunkCritic(CriticConfig(d_model=32, n_heads=2))
    critic.fit_normalizer(store.data["obs"][: len(store)])
    td = CriticTD(critic, TDConfig(lr=1e-3, tau=0.05, value="mean"))
    td.sync_target()
    sample_rng = np.random.default_rng(1)
    for _ in range(150):
        td.update(make_batch(store.sample(32, sample_rng), encode))
    # held-out rollouts: at every chunk, the chunk of a successful rollout outscores the failed one
    test_rng = np.random.default_rng(2)
    good, bad = synthetic_record(test_rng, True), synthetic_record(test_rng, False)
    instr = encode([good.instruction])[0]
    critic.eval()
    wins = 0
    for start in good.chunk_starts:
        obs = test_rng.normal(size=50)
        chunks = np.stack([good.actions[start : start + 8], bad.actions[start : start + 8]])
        q = critic.score(obs, instr, chunks)
        wins += int(q[0] > q[1])
        assert float(q[0]) > 0.5 and abs(float(q[1])) < 0.3  # ≈ γ^(remaining steps) vs 0
    assert wins == len(good.chunk_starts)


# -- decision rule ------------------------------------------------------------------------------------------
def test_select_softmax_weights_sum_to_one_and_argmax_picks_the_best():
    q = torch.tensor([0.1, 1.2, -0.3, 0.9, 0.0, 0.5, 1.1, -1.0])
    chunks = torch.randn(8, 8, 7)
    w = selection_weights(q, "softmax", 0.5)
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))
    torch.testing.assert_close(w, torch.softmax(q / 0.5, 0))
    torch.testing.assert_close(select(q, chunks, "softmax", 0.5), (w[:, None, None] * chunks).sum(0))
    assert torch.equal(select(q, chunks, "argmax"), chunks[1])
    # numpy in, numpy out; a colder softmax approaches argmax
    out = select(q.numpy(), chunks.numpy(), "softmax", 1e-3)
    assert isinstance(out, np.ndarray) and np.allclose(out, chunks[1].numpy(), atol=1e-5)
    assert torch.equal(
        selection_weights(q, "argmax"), torch.nn.functional.one_hot(torch.tensor(1), 8).float()
    )
    # the state value matches the decision rule: softmax-weighted Q, or the mean
    torch.testing.assert_close(state_value(q, "softmax", 0.5), (w * q).sum())
    torch.testing.assert_close(state_value(q, "mean"), q.mean())
    with pytest.raises(ValueError):
        select(q, chunks, "best")


# -- replay store -------------------------------------------------------------------------------------------
def test_replay_builds_chunk_transitions_from_records():
    rng = np.random.default_rng(0)
    store = ChunkReplay(capacity=16)
    good = synthetic_record(rng, True)
    good.actions, good.obs = good.actions[:21], good.obs[:22]  # success in the middle of the third chunk
    good.success_step = 21
    assert store.add_record(good) == 3
    assert store.data["reward"][:3].tolist() == [0, 0, 1] and store.data["done"][:3].tolist() == [
        False,
        False,
        True,
    ]
    assert store.data["steps"][:3].tolist() == [8, 8, 5]
    assert store.data["mask"][2].tolist() == [True] * 5 + [False] * 3
    np.testing.assert_array_equal(store.data["next_obs"][0], good.obs[8])
    np.testing.assert_array_equal(store.data["next_actions"][0], good.actions[8:16].astype(np.float32))
    bad = synthetic_record(rng, False)
    assert store.add_record(bad) == 3
    # running into the step limit is a failure that ends the episode: no reward, no bootstrap
    assert store.data["done"][3:6].tolist() == [False, False, True] and not store.data["reward"][3:6].any()
    assert store.data["success"][:6].tolist() == [True] * 3 + [False] * 3
    assert store.text["instruction"][0] == good.instruction and store.text["family"][4] == "pick_place"


def test_replay_capacity_sampling_and_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    store = ChunkReplay(capacity=10)
    for k in range(5):
        store.add_record(synthetic_record(rng, good=k % 2 == 0, instruction=f"task {k}"))
    assert len(store) == 10 and store.added == 15 and store.cursor == 5  # the oldest 5 were overwritten
    assert sorted(set(store.text["instruction"])) == ["task 1", "task 2", "task 3", "task 4"]
    a = store.sample(7, np.random.default_rng(42))
    b = store.sample(7, np.random.default_rng(42))
    assert all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a)
    store.save(tmp_path / "replay")
    with np.load(tmp_path / "replay" / "replay.npz", allow_pickle=False) as arrays:
        assert arrays["instruction"].dtype.kind == "U"
    again = ChunkReplay.load(tmp_path / "replay")
    assert (again.size, again.cursor, again.added, again.capacity) == (
        store.size,
        store.cursor,
        store.added,
        10,
    )
    for key in store.data:
        np.testing.assert_array_equal(again.data[key], store.data[key])
    assert again.text == store.text
    c = again.sample(7, np.random.default_rng(42))
    assert all(np.array_equal(a[k], c[k]) if isinstance(a[k], np.ndarray) else a[k] == c[k] for k in a)
    # and keeps working as a ring buffer after loading
    again.add_record(synthetic_record(rng, True, instruction="task 5"))
    assert again.text["instruction"][5:8] == ["task 5"] * 3
