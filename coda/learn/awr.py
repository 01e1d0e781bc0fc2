"""Critic-guided chunk selection at rollout time and advantage-weighted policy updates (paper §3.5).

* `CriticGuidedPolicy` — the decision rule: sample j=8 candidate chunks from the policy, score them with
  the chunk critic Qϕ and execute their softmax(Q/0.5)-weighted combination (paper), or the argmax-Q
  chunk (value-only selection, Table 4). It is a rollout policy (`act(observation) -> (h, 7)`).
* `awr_update` — one advantage-weighted regression step over sampled chunks: for every state, j candidates
  from the current policy, A_k = Q(s, a_k) − V(s), weights ∝ exp(A/β) capped at `max_weight`, and the
  backbone's own weighted loss (flow matching for backbone A, L1 + NLL for backbone B) on the
  (state, candidate) pairs, plus imitation of planner demonstrations when a training program asks for it.
* `train_critic` — a small loop of `CriticTD.update` steps on replay samples.
* `prepare_lora` / `PolicyUpdater` — co-evolution updates train LoRA adapters on the frozen SFT weights.

V(s) is by default the mean Q of the j candidates: they are samples from the current policy π, so their
mean is a Monte-Carlo estimate of V^π(s), and A_k = Q − V is the advantage of AWR (Peng et al. 2019).
``value="softmax"`` uses the softmax(Q/τ)-weighted mean instead (the value of the critic-guided decision
rule; then most advantages are negative and only the best candidates keep large weights).

Every policy update steps the global `UpdateCounter` once (the paper's x-axis for learning speed).

Example:
    >>> optimizer = prepare_lora(policy, rank=8)                      # SFT weights frozen
    >>> stats = awr_update(policy, critic, {"obs": obs, "instr": instr}, optimizer=optimizer,
    ...                    imitation=demo_batch, counter=counter)     # obs (B, 50), instr (B, 384)
    >>> rollout_policy = CriticGuidedPolicy(policy, critic, j=8, mode="softmax", temperature=0.5)
    >>> chunk = rollout_policy.act(observation)                         # (8, 7) in [-1, 1]
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from coda import numerics
from coda.config import ConfigError
from coda.learn.critic import (
    CriticTD,
    SelectMode,
    ValueMode,
    make_batch,
    select,
    selection_weights,
    state_value,
)
from coda.learn.policies import ChunkPolicy, add_lora, merged_copy
from coda.learn.text import get_encoder
from coda.learn.updates import UpdateCounter
from coda.progress import progress

Encode = Callable[[list[str]], Tensor]  # instruction strings -> (n, 384) embeddings
# a critic is called as critic(obs (B, obs_dim), instr (B, 384), chunks (B, J, h, 7)) -> Q (B, J),
# the batched forward of `coda.learn.critic.ChunkCritic`
Critic = Callable[[Tensor, Tensor, Tensor], Tensor]


# ==================================================================================================
# decision rule
# ==================================================================================================
@dataclass
class Decision:
    """One critic-guided decision and what led to it."""

    chunk: Tensor  # (h, 7) the executed chunk
    candidates: Tensor  # (j, h, 7) sampled from the policy
    q: Tensor  # (j,) critic values of the candidates
    weights: Tensor  # (j,) combination weights: softmax(Q/τ), or one-hot on the argmax


class CriticGuidedPolicy:
    """Rollout policy: j candidates from `policy`, scored by `critic`, combined by softmax(Q/τ) or argmax.

    Deterministic given `seed`: each decision's noise comes from the object's own `torch.Generator`,
    re-seeded from (seed, instruction, observation bytes). A chunk is therefore a function of the
    observation, so a rollout is reproducible whatever a worker ran before, while different states still
    get different noise. A policy with LoRA attached is replaced by `merged_copy` once, at construction
    (adapter branches roughly double a flow decision's latency); later changes to the adapters are not
    seen, so build a new CriticGuidedPolicy after each update round.
    """

    def __init__(
        self,
        policy: ChunkPolicy,
        critic: nn.Module,
        *,
        j: int = 8,
        mode: SelectMode = "softmax",
        temperature: float = 0.5,
        seed: int = 0,
        encode: Encode | None = None,
        trace: bool = False,
    ) -> None:
        if j < 1:
            raise ValueError(f"j must be >= 1, got {j}")
        if mode not in ("softmax", "argmax"):
            raise ValueError(f"mode must be 'softmax' or 'argmax', got {mode!r}")
        if mode == "softmax" and not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.policy = (merged_copy(policy) if policy.lora is not None else policy).eval()
        self.critic = critic.eval()
        self.j, self.mode, self.temperature, self.seed = j, mode, float(temperature), int(seed)
        self.generator = torch.Generator()
        self._encode = encode
        self._instructions: dict[str, Tensor] = {}  # instruction -> (1, 384) embedding
        self.trace = trace and isinstance(critic, nn.Module)
        if trace and hasattr(self.policy, "trace_sampling"):  # the policy's sampling too (flow)
            self.policy.trace_sampling()
        self._traced: dict[tuple, Any] = {}  # input shapes -> the critic traced by TorchScript

    def embed(self, instruction: str) -> Tensor:
        """The instruction's (1, 384) embedding, computed once per string."""
        emb = self._instructions.get(instruction)
        if emb is None:
            if self._encode is None:
                self._encode = get_encoder().encode
            emb = self._instructions[instruction] = self._encode([instruction]).float().reshape(1, -1)
        return emb

    def reseed(self, obs: np.ndarray, instruction: str) -> torch.Generator:
        """The generator, seeded for the decision at (obs, instruction)."""
        digest = hashlib.blake2b(digest_size=8)
        digest.update(self.seed.to_bytes(8, "little"))
        digest.update(instruction.encode())
        digest.update(np.ascontiguousarray(obs, dtype=np.float32).tobytes())
        return self.generator.manual_seed(int.from_bytes(digest.digest(), "little") >> 1)

    @torch.inference_mode()  # the decision's tensors are for acting and logging, never for training
    def decide(self, obs: np.ndarray | Tensor, instruction: str) -> Decision:
        """The decision at one state: obs (obs_dim,) -> `Decision` (chunk (h, 7), candidates, Q, weights)."""
        obs_np = np.asarray(obs, dtype=np.float32).reshape(-1)
        obs_t = torch.from_numpy(obs_np)[None]  # (1, obs_dim)
        instr = self.embed(instruction)  # (1, 384)
        candidates = self.policy.sample(obs_t, instr, self.j, generator=self.reseed(obs_np, instruction))
        q = self.score(obs_t, instr, candidates)[0]  # (j,)
        candidates = candidates[0]  # (j, h, 7)
        chunk = select(q, candidates, self.mode, self.temperature)
        return Decision(chunk, candidates, q, selection_weights(q, self.mode, self.temperature))

    def score(self, obs: Tensor, instr: Tensor, candidates: Tensor) -> Tensor:
        """The critic's Q (B, j) of candidates (B, j, h, 7). With ``trace`` (rollout workers, whose critic
        never changes), through a TorchScript trace of the critic per input shape: the same ATen operations
        in the same order, so the same bits, without the Python of its ~50 module calls (~1/3 of its time
        at one state). The trace shares the critic's parameter tensors."""
        if not self.trace:
            return self.critic(obs, instr, candidates)
        key = (tuple(obs.shape), tuple(instr.shape), tuple(candidates.shape))
        traced = self._traced.get(key)
        if traced is None:
            with warnings.catch_warnings():  # the shape checks are constant for one input shape; torch 2.13
                warnings.simplefilter("ignore", torch.jit.TracerWarning)  # deprecates tracing (still there)
                warnings.simplefilter("ignore", DeprecationWarning)
                traced = torch.jit.trace(self.critic, (obs, instr, candidates), check_trace=False)
            self._traced[key] = traced
        return traced(obs, instr, candidates)

    def act(self, observation: Any) -> np.ndarray:
        """One chunk (h, 7) in [-1, 1] for a `coda.sim.rollout.Observation` (reads .vector, .instruction)."""
        return self.decide(observation.vector, observation.instruction).chunk.numpy()


# ==================================================================================================
# advantage-weighted regression
# ==================================================================================================
_ACTORS: dict[
    tuple, Any
] = {}  # a worker's rollout policy: (policy_dir, critic_dir, j, τ, seed, mode) -> actor


def cached_actor(
    policy_dir: str,
    critic_dir: str | None,
    *,
    j: int = 8,
    temperature: float = 0.5,
    seed: int = 0,
    mode: SelectMode = "softmax",
):
    """The rollout policy a worker acts with: the saved policy, critic-guided when a critic is given. A
    worker keeps one at a time (rounds replace it) and loads it once per version: the loop publishes every
    new actor under a fresh directory name."""
    from coda.learn.critic import ChunkCritic

    key = (policy_dir, critic_dir, j, temperature, seed, mode)
    if key not in _ACTORS:
        numerics.pin_torch(1)
        _ACTORS.clear()
        policy = ChunkPolicy.from_pretrained(policy_dir)
        if critic_dir:
            critic = ChunkCritic.from_pretrained(critic_dir)
            _ACTORS[key] = CriticGuidedPolicy(
                policy, critic, j=j, temperature=temperature, seed=seed, mode=mode, trace=True
            )
        else:
            _ACTORS[key] = policy.eval()
    return _ACTORS[key]


def capped_weights(advantages: Tensor, beta: float, max_weight: float) -> Tensor:
    """AWR weights of any shape: proportional to exp(A/β), capped at `max_weight`, with mean exactly 1.

    Capping and normalising are solved together (water-filling): w_i = min(max_weight, c · exp(A_i/β))
    with the constant c chosen so that the mean is 1. So no sample weighs more than `max_weight` times
    the average, and the loss scale does not depend on the scale of Q. Computed in float64 from
    exp((A − max A)/β), which cannot overflow for small β; advantages more than 300β below the best
    share one (tiny) relative weight.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not max_weight >= 1:
        raise ValueError(f"max_weight must be >= 1 (weights have mean 1), got {max_weight}")
    a = advantages.detach().double().reshape(-1)
    n = a.numel()
    # in (0, 1], the largest is 1; the floor keeps every term positive so the scale c stays finite
    e = torch.exp(((a - a.max()) / beta).clamp(min=-300.0))
    s, order = e.sort(descending=True)
    # with the k largest capped at max_weight, the rest scale by c_k = (n − k·max_weight) / Σ_{i≥k} s_i;
    # the smallest k whose first uncapped weight c_k · s_k stays under the cap is the solution
    k = torch.arange(n, dtype=s.dtype)
    suffix = s.flip(0).cumsum(0).flip(0)
    scale = (n - k * max_weight) / suffix
    k_star = int(torch.nonzero(scale * s <= max_weight * (1 + 1e-6))[0])
    w_sorted = torch.cat(
        [torch.full((k_star,), float(max_weight), dtype=s.dtype), scale[k_star] * s[k_star:]]
    )
    weights = torch.empty_like(w_sorted).scatter_(0, order, w_sorted)
    return weights.clamp(max=max_weight).float().view(advantages.shape)


def effective_sample_size(weights: Tensor) -> float:
    """Kish's effective sample size (Σw)² / Σw² (equals the number of weights when they are uniform)."""
    w = weights.reshape(-1).double()
    return float(w.sum() ** 2 / w.pow(2).sum().clamp(min=1e-300))


@dataclass(frozen=True)
class Candidates:
    """AWR's regression targets at a set of states: j candidate chunks each (as sampled, before clipping) and
    their advantages under the critic, A_k = Q(s, clip(a_k)) − V(s)."""

    raw: Tensor  # (N, j, h, 7)
    q: Tensor  # (N, j)
    advantages: Tensor  # (N, j)

    def take(self, rows: np.ndarray | Tensor) -> Candidates:
        rows = torch.as_tensor(rows, dtype=torch.long)
        return Candidates(self.raw[rows], self.q[rows], self.advantages[rows])


@torch.no_grad()
def score_candidates(
    policy: ChunkPolicy,
    critic: Critic,
    obs: Tensor,
    instr: Tensor,
    *,
    j: int = 8,
    value: ValueMode = "mean",
    temperature: float = 0.5,
    generator: torch.Generator | None = None,
    block: int = 256,
) -> Candidates:
    """j candidates per state from `policy` (eval mode, no gradient), scored by `critic`, in blocks of `block`
    states: obs (N, obs_dim), instr (N, 384) -> `Candidates`. The regression targets are the unclipped samples
    (clipped ones pile up at ±1 and would drag an action that sits at a bound, the gripper's open/close
    command, toward the interior, update after update); the critic scores what would be executed."""
    was_training = policy.training
    policy.eval()
    raws, qs = [], []
    for start in range(0, len(obs), block):
        o, t = obs[start : start + block].float(), instr[start : start + block].float()
        raw = policy.sample(o, t, j, generator=generator, clip=False)  # (n, j, h, 7)
        raws.append(raw)
        qs.append(critic(o, t, raw.clamp(-1.0, 1.0)).float())  # (n, j)
    policy.train(was_training)
    raw, q = torch.cat(raws), torch.cat(qs)
    return Candidates(raw, q, q - state_value(q, value, temperature)[:, None])


def awr_update(
    policy: ChunkPolicy,
    critic: Critic,
    batch: dict[str, Tensor],
    *,
    optimizer: torch.optim.Optimizer,
    j: int = 8,
    beta: float = 1.0,
    max_weight: float = 20.0,
    value: ValueMode = "mean",
    temperature: float = 0.5,
    normalize: bool = False,
    imitation: dict[str, Tensor] | None = None,
    imitation_weight: float = 1.0,
    awr_weight: float = 1.0,
    grad_clip: float | None = 1.0,
    counter: UpdateCounter | None = None,
    generator: torch.Generator | None = None,
    candidates: Candidates | None = None,
) -> dict[str, float]:
    """One AWR step over sampled chunks (+ imitation); returns diagnostics.

    `candidates` (one row per state of `batch`): the j candidates and advantages drawn and scored beforehand
    (`score_candidates`), e.g. once per round for every replay state the round's updates draw; without them
    they are drawn from the current policy and scored here, at every update.

    The loss is `awr_weight` × the AWR term + `imitation_weight` × the imitation term; with `awr_weight`
    0 the candidates are not sampled at all (an imitation-only update, which needs `imitation`).

    batch: "obs" (B, obs_dim), "instr" (B, 384) — the states to improve the policy at (other keys are
    ignored). For each state, j candidates a_k ~ π (no gradient) get Q(s, a_k) from `critic` and
    A_k = Q − V(s), V = `state_value` over the candidates (`value`: "mean", or "softmax" with
    `temperature`; see the module docstring). The B·j (state, candidate) pairs are weighted by
    `capped_weights(A, beta, max_weight)` in the policy's own loss (`ChunkPolicy.candidate_loss`). `imitation` ("obs", "instr", "chunk":
    planner-demonstration chunks) adds `imitation_weight` × the unweighted loss on them. One optimiser
    step (gradients clipped to `grad_clip` global norm unless None), then `counter.step()`. With
    `normalize`, advantages are divided by their batch standard deviation before exp(A/β), so β does not
    depend on the scale of Q (an early critic's advantages of a few hundredths make exp(A/β) nearly uniform,
    and AWR then only regresses the policy onto its own noisy samples).

    Returns: loss, awr_loss, imitation_loss (0 without demos), q_mean, mean_advantage (0 by construction
    with value="mean"), advantage_std, weight_max, ess (effective sample size of the B·j weights) and
    ess_fraction (ess / (B·j)).
    """
    if awr_weight == 0:
        return _imitation_update(
            policy, optimizer, imitation, imitation_weight, grad_clip, counter, generator
        )
    obs, instr = batch["obs"].float(), batch["instr"].float()
    was_training = policy.training
    if candidates is None:
        candidates = score_candidates(
            policy, critic, obs, instr, j=j, value=value, temperature=temperature, generator=generator
        )
    raw, q, advantages = candidates.raw, candidates.q, candidates.advantages  # (B, j, h, 7), (B, j), (B, j)
    with torch.no_grad():
        scaled = advantages / advantages.std().clamp(min=1e-6) if normalize else advantages
        weights = capped_weights(scaled, beta, max_weight)  # (B, j), mean 1
    policy.train()
    awr_loss = policy.candidate_loss(obs, instr, raw, weights, generator=generator)
    imitation_loss = torch.zeros(())
    if imitation is not None:
        imitation_loss = policy.loss(imitation, None, generator=generator)
    loss = awr_weight * awr_loss + imitation_weight * imitation_loss
    _step(policy, optimizer, loss, grad_clip, counter, was_training)
    return {
        "loss": loss.item(),
        "awr_loss": awr_loss.item(),
        "imitation_loss": imitation_loss.item(),
        "q_mean": float(q.mean()),
        "mean_advantage": float(advantages.mean()),
        "advantage_std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        "weight_max": float(weights.max()),
        "ess": effective_sample_size(weights),
        "ess_fraction": effective_sample_size(weights) / weights.numel(),
    }


def _imitation_update(policy, optimizer, imitation, imitation_weight, grad_clip, counter, generator):
    """`awr_update` without its AWR term: one step of behaviour cloning on planner demonstrations."""
    if imitation is None:
        raise ValueError("awr_weight 0 needs imitation data (planner demonstrations)")
    was_training = policy.training
    policy.train()
    imitation_loss = policy.loss(imitation, None, generator=generator)
    loss = imitation_weight * imitation_loss
    _step(policy, optimizer, loss, grad_clip, counter, was_training)
    return {"loss": loss.item(), "awr_loss": 0.0, "imitation_loss": imitation_loss.item()}


def _step(policy, optimizer, loss, grad_clip, counter, was_training) -> None:
    """One optimiser step on `loss` (gradients clipped unless `grad_clip` is None), then the counter."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], grad_clip)
    optimizer.step()
    policy.train(was_training)
    if counter is not None:
        counter.step()


# ==================================================================================================
# critic training
# ==================================================================================================
def train_critic(
    critic_td: CriticTD,
    replay,
    *,
    steps: int,
    batch_size: int,
    rng: np.random.Generator,
    candidates_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
    counter: UpdateCounter | None = None,
    encode: Encode | None = None,
) -> list[float]:
    """`steps` TD updates of the critic on uniform samples of `replay` (a `ChunkReplay`); returns the losses.

    candidates_fn(next_obs (B, obs_dim), next_instr (B, 384)) -> (B, J, h, 7): chunks from the current
    policy at s_{t+k} for the bootstrap V(s_{t+k}); without it the dataset's next executed chunk is used.
    `counter` counts critic updates (keep it apart from the policy-update counter); `encode` embeds the
    instructions (default: the frozen sentence encoder).
    """
    losses = []
    for _ in progress(range(steps), desc="critic TD"):
        batch = make_batch(replay.sample(batch_size, rng), encode)
        if candidates_fn is not None:
            with torch.no_grad():
                batch["next_candidates"] = candidates_fn(batch["next_obs"].float(), batch["instr"])
        losses.append(critic_td.update(batch)["loss"])
        if counter is not None:
            counter.step()
    return losses


def policy_candidates(policy: ChunkPolicy, j: int = 8, generator: torch.Generator | None = None):
    """A `candidates_fn` for `train_critic`: j chunks sampled from `policy` (B, j, h, 7)."""

    def candidates(obs: Tensor, instr: Tensor) -> Tensor:
        return policy.sample(obs, instr, j, generator=generator)

    return candidates


# ==================================================================================================
# co-evolution updates on LoRA adapters
# ==================================================================================================
def prepare_lora(
    policy: ChunkPolicy,
    rank: int = 8,
    *,
    alpha: float | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """Attach LoRA adapters to the SFT weights (only they stay trainable) and return an AdamW over them.

    A policy that already carries adapters of the same rank keeps them (training continues across rounds).
    alpha defaults to 2 · rank (an update of scale 2 · B @ A).
    """
    alpha = 2.0 * rank if alpha is None else alpha
    if policy.lora is None:
        add_lora(policy, rank=rank, alpha=alpha)
    elif policy.lora.rank != rank or policy.lora.alpha != alpha:
        raise ValueError(f"the policy already has adapters {policy.lora}, not rank {rank}, alpha {alpha}")
    params = [p for p in policy.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


@dataclass(frozen=True)
class AWRConfig:
    """Policy updates of a co-evolution round."""

    finetune: Literal["lora", "full"] = "lora"  # train LoRA adapters on frozen weights, or every weight
    lora_rank: int = 8  # rank of the adapters on the frozen SFT weights (finetune "lora")
    lr: float = 1e-3  # AdamW learning rate
    j: int = 8  # candidate chunks sampled per state
    beta: float = 1.0  # AWR temperature: weights ∝ exp(A/β)
    max_weight: float = 20.0  # cap on a weight, in units of the batch's mean weight
    value: Literal["mean", "softmax"] = "mean"  # V(s) over the candidates (module docstring)
    temperature: float = 0.5  # τ of value="softmax"
    imitation_weight: float = 1.0  # factor of the imitation loss on planner demonstrations
    awr_weight: float = 1.0  # factor of the AWR loss (0: imitation only)
    normalize: bool = False  # divide advantages by their batch std before exp(A/β)
    grad_clip: float = 1.0  # max global gradient norm
    seed: int = 0  # seeds the candidate and flow-matching noise of the updates

    def __post_init__(self) -> None:
        for key in ("lora_rank", "j"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(key, f"expected an integer >= 1, got {value!r}")
        for key, low in (("lr", 0.0), ("beta", 0.0), ("temperature", 0.0), ("grad_clip", 0.0)):
            if not getattr(self, key) > low:
                raise ConfigError(key, f"expected a number > {low}, got {getattr(self, key)!r}")
        if not self.max_weight >= 1:
            raise ConfigError("max_weight", f"expected a number >= 1, got {self.max_weight!r}")
        for key in ("imitation_weight", "awr_weight"):
            if not getattr(self, key) >= 0:
                raise ConfigError(key, f"expected a number >= 0, got {getattr(self, key)!r}")
        if self.finetune not in ("lora", "full"):
            raise ConfigError("finetune", f"expected 'lora' or 'full', got {self.finetune!r}")
        if self.value not in ("mean", "softmax"):
            raise ConfigError("value", f"expected 'mean' or 'softmax', got {self.value!r}")


class PolicyUpdater:
    """AWR (+ imitation) updates of `policy`, on LoRA adapters or on every weight (`AWRConfig.finetune`),
    guided by `critic`, counted by `counter`.

    Example:
        >>> updater = PolicyUpdater(ChunkPolicy.from_pretrained("sft"), critic, AWRConfig(), counter)
        >>> stats = updater.update({"obs": obs, "instr": instr}, imitation=demos)
        >>> rollout_policy = updater.rollout_policy()            # merged adapters, critic-weighted
        >>> updater.policy.save_adapter("round3/adapter")
    """

    def __init__(
        self,
        policy: ChunkPolicy,
        critic: nn.Module,
        config: AWRConfig | None = None,
        counter: UpdateCounter | None = None,
    ) -> None:
        self.policy, self.critic = policy, critic
        self.config = config = config or AWRConfig()
        self.counter = counter if counter is not None else UpdateCounter()
        if config.finetune == "lora":
            self.optimizer = prepare_lora(policy, config.lora_rank, lr=config.lr)
        else:
            if policy.lora is not None:
                raise ValueError("finetune 'full' on a policy that carries LoRA adapters; merge them first")
            params = [prm for prm in policy.parameters() if prm.requires_grad]
            self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=1e-4, fused=True)
        self.generator = torch.Generator().manual_seed(config.seed)

    def score(self, obs: Tensor, instr: Tensor) -> Candidates:
        """`score_candidates` at these states with this updater's policy, critic, j, V(s) and noise."""
        c = self.config
        return score_candidates(
            self.policy,
            self.critic,
            obs,
            instr,
            j=c.j,
            value=c.value,
            temperature=c.temperature,
            generator=self.generator,
        )

    def update(
        self,
        batch: dict[str, Tensor],
        imitation: dict[str, Tensor] | None = None,
        candidates: Candidates | None = None,
    ) -> dict[str, float]:
        """One `awr_update` with this updater's configuration; see there for the batch layout."""
        c = self.config
        return awr_update(
            self.policy,
            self.critic,
            batch,
            optimizer=self.optimizer,
            j=c.j,
            beta=c.beta,
            max_weight=c.max_weight,
            value=c.value,
            temperature=c.temperature,
            normalize=c.normalize,
            imitation=imitation,
            imitation_weight=c.imitation_weight,
            awr_weight=c.awr_weight,
            grad_clip=c.grad_clip,
            counter=self.counter,
            generator=self.generator,
            candidates=candidates,
        )

    def rollout_policy(
        self, mode: SelectMode = "softmax", temperature: float = 0.5, seed: int = 0
    ) -> CriticGuidedPolicy:
        """The current policy (adapters merged) with the critic's decision rule, for rollouts."""
        return CriticGuidedPolicy(
            self.policy, self.critic, j=self.config.j, mode=mode, temperature=temperature, seed=seed
        )
