"""AWR over sampled chunks and the critic-guided decision rule, on tiny models and synthetic tensors.

A planted critic values a chunk mostly by how close its net displacement (the mean action over the
chunk) is to a goal g, plus a weaker pull of every action to g, so the constant chunk c* = (g, ..., g)
has the highest Q at every state; AWR must move the policy's samples towards it, for both backbones,
with full fine-tuning and with LoRA adapters (then only adapter weights may change). The planted Q is
dominated by 7 numbers rather than all 56 of the chunk: with j=8 candidates a plain 56-D distance gives
each dimension a weak selection signal (measured: the flow backbone's sample mean barely moves in 100
updates while its spread shrinks).
"""

import copy
import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from coda.config import ConfigError
from coda.learn.awr import (
    AWRConfig,
    CriticGuidedPolicy,
    PolicyUpdater,
    awr_update,
    capped_weights,
    effective_sample_size,
    policy_candidates,
    prepare_lora,
    train_critic,
)
from coda.learn.critic import ChunkCritic, CriticConfig, CriticTD
from coda.learn.policies import base_sha256, make_policy
from coda.learn.replay import ChunkReplay
from coda.learn.text import hashed_ngrams
from coda.learn.updates import UpdateCounter
from coda.sim.rollout import RolloutRecord

torch.set_num_threads(1)

TINY = {"flow": {"d_model": 32, "n_layers": 1, "n_heads": 2}, "regression": {"hidden": 64, "n_blocks": 1}}
N_STATES = 16


@functools.cache
def _embed(text: str) -> torch.Tensor:
    return torch.from_numpy(hashed_ngrams(text))


def encode(texts):
    """A cheap deterministic stand-in for the frozen sentence encoder (same 384-d interface)."""
    return torch.stack([_embed(t) for t in texts])


class PlantedCritic(nn.Module):
    """Q(s, a) = −scale · mean((a − c*)²): the chunk c* has the highest value at every state."""

    def __init__(self, target: torch.Tensor, scale: float = 1.0) -> None:
        super().__init__()
        self.target, self.scale = target, scale

    def forward(self, obs, instr, chunks, mask=None):
        return -self.scale * (chunks - self.target).pow(2).mean(dim=(-2, -1))


GOAL = torch.tensor([0.5, -0.4, 0.3, 0.0, 0.2, -0.3, 0.6])  # net displacement the planted critic prefers
BEST = GOAL.expand(8, 7)  # c*: the chunk of highest planted value


class DisplacementCritic(nn.Module):
    """Q(s, a) = −mean_i (mean_t a_ti − g_i)² − 0.2 · mean (a − c*)²: highest (0) only at c*."""

    def forward(self, obs, instr, chunks, mask=None):
        displacement = (chunks.mean(dim=-2) - GOAL).pow(2).mean(dim=-1)
        return -displacement - 0.2 * (chunks - BEST).pow(2).mean(dim=(-2, -1))


def states(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(N_STATES, 50, generator=g)
    instr = encode([f"task {i % 4}" for i in range(N_STATES)])
    return {"obs": obs, "instr": instr}


def target_chunk(seed: int = 1) -> torch.Tensor:
    return torch.rand(8, 7, generator=torch.Generator().manual_seed(seed)) - 0.5  # (h, 7) in [-0.5, 0.5)


def sft_policy(name: str):
    """A tiny policy briefly fitted to broad random chunks (a spread-out starting distribution, as after SFT)."""
    return copy.deepcopy(_sft_policy(name))


@functools.cache
def _sft_policy(name: str):
    policy = make_policy(name, **TINY[name])
    batch, g = states(), torch.Generator().manual_seed(5)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    for _ in range(60):
        idx = torch.randint(0, N_STATES, (64,), generator=g)
        chunk = torch.rand(64, 8, 7, generator=g) * 1.6 - 0.8
        opt.zero_grad()
        policy.loss(
            {"obs": batch["obs"][idx], "instr": batch["instr"][idx], "chunk": chunk}, generator=g
        ).backward()
        opt.step()
    return policy


def samples(policy) -> torch.Tensor:
    batch = states()
    return policy.sample(batch["obs"], batch["instr"], 8, generator=torch.Generator().manual_seed(123))


def distance(policy, chunk: torch.Tensor) -> float:
    """Mean squared distance of the policy's samples at the test states to `chunk`."""
    return (samples(policy) - chunk).pow(2).mean().item()


def bias(policy, chunk: torch.Tensor) -> float:
    """Mean squared distance of the policy's mean sample at each test state to `chunk`."""
    return (samples(policy).mean(dim=1) - chunk).pow(2).mean().item()


# -- AWR ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("name", ["flow", "regression"])
def test_awr_moves_samples_towards_the_planted_high_advantage_chunk(name, lora):
    policy = sft_policy(name)
    if lora:
        optimizer = prepare_lora(policy, rank=4, lr=3e-3)
        before = {k: v.clone() for k, v in policy.state_dict().items()}
        base_before = base_sha256(policy)
    else:
        optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4 if name == "flow" else 1e-3)
    critic, counter, gen = DisplacementCritic(), UpdateCounter(), torch.Generator().manual_seed(0)
    displacement_error = lambda: (samples(policy).mean(dim=-2) - GOAL).pow(2).mean().item()
    d0, bias0 = distance(policy, BEST), displacement_error()
    for i in range(60):
        stats = awr_update(
            policy, critic, states(), optimizer=optimizer, beta=0.01, counter=counter, generator=gen
        )
        assert counter.value == i + 1  # one policy update per call
        assert stats["weight_max"] <= 20.0 + 1e-4
        assert 1.0 <= stats["ess"] <= N_STATES * 8 + 1e-6
    d1, bias1 = distance(policy, BEST), displacement_error()
    assert bias1 < bias0 / 3, (bias0, bias1)  # the samples' net displacement moves to the goal
    assert d1 < 0.5 * d0, (d0, d1)  # and the samples themselves towards c*
    assert abs(stats["mean_advantage"]) < 1e-5  # V(s) = mean Q of the candidates
    if lora:
        after = policy.state_dict()
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        assert changed and all("lora_" in k for k in changed)
        assert base_sha256(policy) == base_before


def test_awr_weights_are_capped_and_favour_high_q():
    policy = make_policy("regression", **TINY["regression"])
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    # a steep critic: without the cap a single candidate would take almost all the weight
    stats = awr_update(
        policy, PlantedCritic(target_chunk(), 100.0), states(), optimizer=optimizer, beta=0.01, max_weight=3.0
    )
    assert stats["weight_max"] == pytest.approx(3.0, rel=1e-5)

    a = torch.tensor([[50.0, 0.0, -1.0, 0.2], [0.1, 0.3, -0.2, 0.0]])
    w = capped_weights(a, beta=0.5, max_weight=3.0)
    assert (
        w.shape == a.shape and w.max().item() == pytest.approx(3.0) and w.mean().item() == pytest.approx(1.0)
    )
    free = w < 3.0 - 1e-6  # below the cap, weights stay proportional to exp(A/β)
    ratio = w[free] / torch.exp(a[free] / 0.5)
    torch.testing.assert_close(ratio, ratio[0].expand_as(ratio))
    assert torch.equal(capped_weights(torch.zeros(5), 1.0, 20.0), torch.ones(5))
    huge = capped_weights(torch.tensor([1e6, 0.0, -1e6]), beta=1e-3, max_weight=2.0)  # no overflow
    assert torch.isfinite(huge).all() and huge.mean().item() == pytest.approx(1.0)
    assert effective_sample_size(torch.ones(7)) == pytest.approx(7.0)
    assert effective_sample_size(torch.tensor([1.0, 0.0, 0.0])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="max_weight"):
        capped_weights(a, 1.0, 0.5)


@pytest.mark.parametrize("name", ["flow", "regression"])
def test_imitation_pulls_towards_demonstrations(name):
    demo_chunk = -target_chunk(seed=7)
    batch = states()
    demos = {**batch, "chunk": demo_chunk.expand(N_STATES, 8, 7)}
    flat = PlantedCritic(torch.zeros(8, 7), scale=0.0)  # Q = 0 everywhere: AWR alone has no preference
    d_start = bias(sft_policy(name), demo_chunk)
    results = {}
    for with_demos in (False, True):
        policy = sft_policy(name)
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(0)
        for _ in range(50):
            stats = awr_update(
                policy,
                flat,
                batch,
                optimizer=optimizer,
                imitation=demos if with_demos else None,
                imitation_weight=2.0,
                generator=gen,
            )
        results[with_demos] = bias(policy, demo_chunk)
        assert (stats["imitation_loss"] != 0.0) == with_demos
    assert results[True] < 0.2 * d_start and results[True] < 0.2 * results[False], (d_start, results)


def test_policy_updater_trains_adapters_and_counts_updates():
    policy, counter = sft_policy("regression"), UpdateCounter(start=100)
    updater = PolicyUpdater(policy, PlantedCritic(target_chunk()), AWRConfig(lora_rank=2, beta=0.05), counter)
    assert policy.lora is not None and policy.lora.rank == 2
    for _ in range(3):
        updater.update(states())
    assert counter.value == 103
    rollout = updater.rollout_policy(mode="argmax")
    assert rollout.policy.lora is None and rollout.mode == "argmax"  # adapters merged for rollouts
    assert prepare_lora(policy, rank=2) is not None  # same adapters continue training in the next round
    with pytest.raises(ValueError, match="already has adapters"):
        prepare_lora(policy, rank=4)
    with pytest.raises(ConfigError, match="max_weight"):
        AWRConfig(max_weight=0.5)


def test_full_finetuning_updates_every_weight_and_imitation_only_needs_no_critic():
    demo_chunk = -target_chunk(seed=7)
    demos = {**states(), "chunk": demo_chunk.expand(N_STATES, 8, 7)}
    policy = sft_policy("regression")
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    d_start = bias(policy, demo_chunk)
    updater = PolicyUpdater(policy, None, AWRConfig(finetune="full", awr_weight=0.0, lr=1e-3))
    assert policy.lora is None
    for _ in range(40):
        stats = updater.update({}, imitation=demos)
    assert stats["awr_loss"] == 0.0 and stats["imitation_loss"] != 0.0
    assert updater.counter.value == 40
    changed = [
        k for k, v in policy.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])
    ]
    assert len(changed) >= 0.5 * sum(v.is_floating_point() for v in before.values())  # not adapters only
    assert bias(policy, demo_chunk) < 0.2 * d_start
    with pytest.raises(ValueError, match="needs imitation"):
        updater.update(states())
    with pytest.raises(ConfigError, match="finetune"):
        AWRConfig(finetune="adapters")
    with pytest.raises(ConfigError, match="awr_weight"):
        AWRConfig(awr_weight=-1.0)


# -- critic training ---------------------------------------------------------------------------------------
def test_train_critic_bootstraps_from_policy_candidates():
    rng = np.random.default_rng(0)
    replay = ChunkReplay(capacity=200)
    for k in range(6):
        record = RolloutRecord(
            scene_hash=f"{k:08x}",
            family="push",
            variant="default",
            instruction="push the puck",
            ctx={},
            states={},
            obs=rng.normal(size=(25, 50)).astype(np.float32),
            actions=rng.uniform(-1, 1, size=(24, 7)),
            chunk_starts=[0, 8, 16],
            phase_names=[],
            phases=np.zeros((25, 0), bool),
            success=k % 2 == 0,
            success_step=24 if k % 2 == 0 else None,
            physics_steps=0,
            wall_s=0.0,
        )
        replay.add_record(record)
    td = CriticTD(ChunkCritic(CriticConfig(d_model=16, n_layers=1, n_heads=2)))
    policy, seen = make_policy("regression", **TINY["regression"]), []
    sample = policy_candidates(policy, j=4, generator=torch.Generator().manual_seed(0))

    def candidates(next_obs, instr):
        seen.append(next_obs)
        return sample(next_obs, instr)

    counter = UpdateCounter()
    losses = train_critic(
        td, replay, steps=5, batch_size=16, rng=rng, candidates_fn=candidates, counter=counter, encode=encode
    )
    assert len(losses) == 5 and np.isfinite(losses).all()
    assert td.updates == 5 and counter.value == 5 and len(seen) == 5
    stored = {tuple(row) for row in replay.data["next_obs"][: len(replay)].tolist()}
    assert all(tuple(row) in stored for row in seen[0].tolist())  # V(s') is taken at the replay's s'


# -- decision rule -----------------------------------------------------------------------------------------
def guided(mode="softmax", seed=0, policy=None, critic=None):
    policy = policy or make_policy("flow", **TINY["flow"])
    critic = critic or ChunkCritic(CriticConfig(d_model=16, n_layers=1, n_heads=2, seed=1))
    return CriticGuidedPolicy(policy, critic, j=8, mode=mode, temperature=0.5, seed=seed, encode=encode)


def observation(seed=0, instruction="put the red cube in the bowl"):
    vector = np.random.default_rng(seed).normal(size=50).astype(np.float32)
    return SimpleNamespace(vector=vector, instruction=instruction)


def test_softmax_decision_is_the_q_weighted_combination():
    rule, obs = guided("softmax", critic=PlantedCritic(target_chunk(), scale=5.0)), observation()
    decision = rule.decide(obs.vector, obs.instruction)
    chunk = rule.act(obs)
    assert chunk.shape == (8, 7) and chunk.dtype == np.float32 and np.abs(chunk).max() <= 1.0
    np.testing.assert_array_equal(chunk, decision.chunk.numpy())
    q = -5.0 * (decision.candidates - target_chunk()).pow(2).mean(dim=(1, 2))
    torch.testing.assert_close(decision.q, q)
    weights = torch.exp(q / 0.5) / torch.exp(q / 0.5).sum()
    manual = (weights[:, None, None] * decision.candidates).sum(0)
    np.testing.assert_allclose(chunk, manual.numpy(), atol=1e-6)
    assert not np.allclose(chunk, decision.candidates[0].numpy())


def test_argmax_decision_is_the_best_candidate():
    rule, obs = guided("argmax"), observation()
    decision = rule.decide(obs.vector, obs.instruction)
    with torch.inference_mode():  # a decision's tensors are inference tensors: outside autograd
        q = rule.critic(
            torch.from_numpy(obs.vector)[None], encode([obs.instruction]), decision.candidates[None]
        )
    q = q[0]
    torch.testing.assert_close(decision.q, q)
    np.testing.assert_array_equal(rule.act(obs), decision.candidates[int(q.argmax())].numpy())
    assert decision.weights.sum() == 1.0 and decision.weights.max() == 1.0


def test_decisions_are_deterministic_given_the_seed():
    obs = observation()
    a, b, other = guided(seed=3), guided(seed=3), guided(seed=4)
    np.testing.assert_array_equal(a.act(obs), b.act(obs))
    np.testing.assert_array_equal(a.act(obs), a.act(obs))  # a function of the observation
    assert not np.array_equal(a.act(obs), other.act(obs))
    assert not np.array_equal(a.act(obs), a.act(observation(seed=1)))  # new state, new noise


def test_lora_policy_is_merged_once_for_rollouts():
    policy = make_policy("flow", **TINY["flow"])
    prepare_lora(policy, rank=4)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    rule, obs = guided(policy=policy), observation()
    assert rule.policy is not policy and rule.policy.lora is None and policy.lora is not None
    decision = rule.decide(obs.vector, obs.instruction)
    reference = policy.eval().sample(
        torch.from_numpy(obs.vector)[None],
        encode([obs.instruction]),
        8,
        generator=rule.reseed(obs.vector, obs.instruction),
    )[0]
    torch.testing.assert_close(decision.candidates, reference, atol=1e-5, rtol=0)


def test_traced_critic_decides_the_same_bits():
    """Rollout workers score candidates through a TorchScript trace of the critic (`trace=True`): the same
    candidates, Q values and chunk, bit for bit, as the eager critic."""
    policy = make_policy("regression", **TINY["regression"])
    critic = ChunkCritic(CriticConfig(d_model=16, n_layers=2, n_heads=2, seed=1))
    eager = CriticGuidedPolicy(policy, critic, j=8, seed=3, encode=encode)
    traced = CriticGuidedPolicy(policy, critic, j=8, seed=3, encode=encode, trace=True)
    for seed in range(5):
        obs = observation(seed)
        a, b = eager.decide(obs.vector, obs.instruction), traced.decide(obs.vector, obs.instruction)
        assert torch.equal(a.candidates, b.candidates) and torch.equal(a.q, b.q)
        assert torch.equal(a.chunk, b.chunk) and torch.equal(a.weights, b.weights)
    assert len(traced._traced) == 1 and not eager._traced


def test_traced_flow_sampling_decides_the_same_bits():
    """With `trace=True` the flow policy's Euler steps run through a TorchScript trace of its velocity field:
    the same candidates and chunk, bit for bit, as eager sampling; training (grad enabled) stays eager."""
    import copy

    policy = make_policy("flow", **TINY["flow"])
    critic = ChunkCritic(CriticConfig(d_model=16, n_layers=2, n_heads=2, seed=1))
    eager = CriticGuidedPolicy(copy.deepcopy(policy), critic, j=8, seed=3, encode=encode)
    traced = CriticGuidedPolicy(policy, critic, j=8, seed=3, encode=encode, trace=True)
    for seed in range(4):
        obs = observation(seed)
        a, b = eager.decide(obs.vector, obs.instruction), traced.decide(obs.vector, obs.instruction)
        assert torch.equal(a.candidates, b.candidates) and torch.equal(a.chunk, b.chunk)
    assert len(policy.__dict__["_velocity_traces"]) == 1
    assert "_velocity_traces" not in eager.policy.__dict__
