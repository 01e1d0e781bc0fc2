"""Chunk critic Qϕ(s, a_{t:t+h}) (paper §3.5, App. B), its TD learner and the chunk decision rule.

Architecture: a state token (MLP on the normalised 50-D observation) and an instruction token (a linear
map of the frozen 384-d sentence embedding from `coda.learn.text`, passed in precomputed) form the memory;
the h=8 action tokens (linear map of each 7-D action + a learned position embedding) go through a
4-layer pre-norm transformer *decoder* (self-attention over the chunk, cross-attention to the memory,
MLP), written out with explicit q/k/v projections so LoRA or any adapter sees every matrix; a masked mean
over the executed actions and a linear head give the scalar Q. The paper's critic uses frozen DINOv2-B +
T5-base encoders; with state observations the state MLP stands in for the image encoder.

TD learning (`CriticTD`): target ``R_chunk + F + γ^k · (1 − done) · V_target(s_{t+k})`` with k the chunk's
length, F the Text2potential shaping term, done the end of the episode (verifier success, or the step limit:
a failure), and V the target network's mean or softmax(Q/τ)-weighted Q over candidate chunks at s_{t+k}
(given, e.g. sampled from the policy; else the dataset's next chunk); the target network tracks the online
one by Polyak averaging. Both successful and failed rollouts train it (see `coda.learn.replay`).

Decision rule (`select`): at rollout time the policy samples j=8 chunks; the executed chunk is their
softmax(Q/0.5)-weighted combination (paper), or the argmax-Q chunk (value-only selection, Table 4).

Checkpoint: ``config.json`` + ``model.safetensors`` (weights and the observation normaliser); no pickle.

Example:
    >>> critic = ChunkCritic(CriticConfig())
    >>> q = critic.score(obs, instr_emb, chunks)           # (50,), (384,), (8, 8, 7) -> (8,)
    >>> chunk = select(q, chunks, mode="softmax", temperature=0.5)
    >>> td = CriticTD(critic, TDConfig()); td.update(make_batch(replay.sample(64, rng)))
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from coda.config import ConfigError
from coda.learn.policies.base import seeded_init
from coda.sim.world import OBS_DIM

EMBED_DIM = 384  # coda.learn.text.EMBED_DIM (not imported: loading the encoder module is deferred)
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SelectMode = Literal["softmax", "argmax"]
ValueMode = Literal["mean", "softmax"]


def _check_int(key: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(key, f"expected an integer >= {minimum}, got {value!r}")


def _check_float(key: str, value: Any, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(key, f"expected a finite number, got {value!r}")
    if value < lo or value > hi or (lo_open and value == lo):
        raise ConfigError(key, f"expected a number in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}")


@dataclass(frozen=True)
class CriticConfig:
    """Architecture of Qϕ."""

    obs_dim: int = OBS_DIM  # length of Observation.vector
    instr_dim: int = EMBED_DIM  # frozen sentence-embedding size
    horizon: int = 8  # actions per chunk (h)
    action_dim: int = 7  # Δpos (3), Δrot (3), gripper (1)
    d_model: int = 64  # token width
    n_layers: int = 4  # decoder blocks (paper: 4)
    n_heads: int = 4  # attention heads; must divide d_model
    mlp_ratio: int = 2  # MLP hidden width = mlp_ratio * d_model
    obs_clip: float = 10.0  # normalised observations are clipped to ±obs_clip
    seed: int = 0  # weight initialisation

    def __post_init__(self) -> None:
        for key in (
            "obs_dim",
            "instr_dim",
            "horizon",
            "action_dim",
            "d_model",
            "n_layers",
            "n_heads",
            "mlp_ratio",
        ):
            _check_int(key, getattr(self, key), 1)
        _check_int("seed", self.seed, 0)
        _check_float("obs_clip", self.obs_clip, 0.0, lo_open=True)
        if self.d_model % self.n_heads:
            raise ConfigError("n_heads", f"must divide d_model={self.d_model}, got {self.n_heads}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TDConfig:
    """Chunk-level TD learning of Qϕ."""

    gamma: float = 0.99  # per control step; a chunk of k steps discounts by gamma**k
    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 0.0
    tau: float = 0.01  # Polyak rate of the target network (θ' ← (1 − τ) θ' + τ θ after each update)
    value: ValueMode = "softmax"  # V(s') over candidates: mean Q, or softmax(Q/temperature)-weighted Q
    temperature: float = 0.5  # matches the decision rule's softmax(Q/0.5)
    grad_clip: float = 1.0  # max global gradient norm

    def __post_init__(self) -> None:
        _check_float("gamma", self.gamma, 0.0, 1.0)
        _check_float("lr", self.lr, 0.0, lo_open=True)
        _check_float("weight_decay", self.weight_decay, 0.0)
        _check_float("tau", self.tau, 0.0, 1.0, lo_open=True)
        _check_float("temperature", self.temperature, 0.0, lo_open=True)
        _check_float("grad_clip", self.grad_clip, 0.0, lo_open=True)
        if self.value not in ("mean", "softmax"):
            raise ConfigError("value", f"expected 'mean' or 'softmax', got {self.value!r}")


# ==================================================================================================
# network
# ==================================================================================================
class Attention(nn.Module):
    """Multi-head attention with explicit q/k/v/out projections (no fused fast path); keys and values can
    be computed once for memory shared by several query rows (`keys_values`)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

    def heads(self, x: Tensor) -> Tensor:  # (N, T, d) -> (N, H, T, d / H)
        n, t, d = x.shape
        return x.view(n, t, self.n_heads, d // self.n_heads).transpose(1, 2)

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Per-head keys and values (N, H, S, d / H) of `memory` (N, S, d)."""
        return self.heads(self.k(memory)), self.heads(self.v(memory))

    def forward(self, x: Tensor, memory: Tensor | None, key_mask: Tensor | None = None, kv=None) -> Tensor:
        """x (N, T, d) attends to memory (N, S, d), or to precomputed `kv` = `keys_values(...)` (whose
        leading dim may be N / J, repeated over the J queries of each); key_mask (N, S) True = attend."""
        n, t, d = x.shape
        k, v = self.keys_values(memory) if kv is None else kv
        if k.shape[0] != n:  # shared by the J consecutive rows of each state
            j = n // k.shape[0]
            k = k[:, None].expand(-1, j, -1, -1, -1).reshape(n, *k.shape[1:])
            v = v[:, None].expand(-1, j, -1, -1, -1).reshape(n, *v.shape[1:])
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (N, 1, 1, S)
        y = F.scaled_dot_product_attention(self.heads(self.q(x)), k, v, attn_mask=mask)  # (N, H, T, hd)
        return self.out(y.transpose(1, 2).reshape(n, t, d))


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: self-attention over the chunk, cross-attention to [state, instruction], MLP."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_self, self.norm_cross, self.norm_mlp = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = Attention(d, n_heads)
        self.cross_attn = Attention(d, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d, mlp_ratio * d), nn.GELU(), nn.Linear(mlp_ratio * d, d))

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        """x (B·J, h, d): the J chunks of each of B states; memory (B, 2, d): each state's two tokens, whose
        keys and values are computed once per state, not once per chunk."""
        h = self.norm_self(x)
        x = x + self.self_attn(h, h, mask)
        x = x + self.cross_attn(self.norm_cross(x), None, kv=self.cross_attn.keys_values(memory))
        return x + self.mlp(self.norm_mlp(x))


class ChunkCritic(nn.Module):
    """Qϕ(s, instruction, chunk) -> scalar."""

    def __init__(self, config: CriticConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or CriticConfig()
        with seeded_init(config.seed):  # seeded initialisation without touching the global RNG
            self._build(config)

    def _build(self, config: CriticConfig) -> None:
        d = config.d_model
        self.register_buffer("obs_mean", torch.zeros(config.obs_dim))
        self.register_buffer("obs_std", torch.ones(config.obs_dim))
        self.state_encoder = nn.Sequential(nn.Linear(config.obs_dim, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.instr_proj = nn.Linear(config.instr_dim, d)
        self.memory_type = nn.Parameter(torch.zeros(2, d))  # marks the state and instruction tokens
        self.action_in = nn.Linear(config.action_dim, d)
        self.position = nn.Parameter(0.02 * torch.randn(config.horizon, d))
        self.blocks = nn.ModuleList(
            DecoderBlock(d, config.n_heads, config.mlp_ratio) for _ in range(config.n_layers)
        )
        self.norm_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)

    def fit_normalizer(self, obs: np.ndarray | Tensor, min_std: float = 1e-2) -> None:
        """Set the observation mean/std (saved with the weights) from training observations (N, obs_dim)."""
        obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        if obs.ndim != 2 or obs.shape[1] != self.config.obs_dim or len(obs) < 2:
            raise ValueError(
                f"fit_normalizer needs (N >= 2, {self.config.obs_dim}) observations, got {tuple(obs.shape)}"
            )
        self.obs_mean.copy_(obs.mean(0))
        self.obs_std.copy_(obs.std(0).clamp(min=min_std))

    def memory(self, obs: Tensor, instr_emb: Tensor) -> Tensor:
        """The cross-attention memory: (B, 2, d) = [state token, instruction token]."""
        c = self.config
        if obs.ndim != 2 or obs.shape[1] != c.obs_dim:
            raise ValueError(f"obs must be (B, {c.obs_dim}), got {tuple(obs.shape)}")
        if instr_emb.shape != (obs.shape[0], c.instr_dim):
            raise ValueError(
                f"instr_emb must be ({obs.shape[0]}, {c.instr_dim}), got {tuple(instr_emb.shape)}"
            )
        x = ((obs.float() - self.obs_mean) / self.obs_std).clamp(-c.obs_clip, c.obs_clip)
        tokens = torch.stack([self.state_encoder(x), self.instr_proj(instr_emb.float())], dim=1)
        return tokens + self.memory_type

    def forward(self, obs: Tensor, instr_emb: Tensor, chunks: Tensor, mask: Tensor | None = None) -> Tensor:
        """Q values. obs (B, obs_dim), instr_emb (B, 384); chunks (B, h, 7) -> (B,) or (B, J, h, 7) -> (B, J).

        mask (same leading shape as chunks, h) marks executed actions (True); padded steps are ignored by
        attention and pooling. Default: all steps valid.
        """
        c = self.config
        single = chunks.ndim == 3
        if single:
            chunks = chunks[:, None]
            mask = None if mask is None else mask[:, None]
        b, j = chunks.shape[:2]
        if chunks.shape[2:] != (c.horizon, c.action_dim) or chunks.shape[0] != obs.shape[0]:
            raise ValueError(
                f"chunks must be ({obs.shape[0]}, [J,] {c.horizon}, {c.action_dim}), got {tuple(chunks.shape)}"
            )
        flat_mask = None  # all actions valid: plain attention and mean pooling (the common, fast case)
        if mask is not None and not bool(mask.all()):
            flat_mask = mask.bool().reshape(b * j, c.horizon)
            if not flat_mask.any(-1).all():
                raise ValueError("every chunk needs at least one valid action in its mask")
        memory = self.memory(obs, instr_emb)  # (B, 2, d), shared by the state's J chunks
        x = (
            self.action_in(chunks.float().reshape(b * j, c.horizon, c.action_dim)) + self.position
        )  # (BJ, h, d)
        for block in self.blocks:
            x = block(x, memory, flat_mask)
        x = self.norm_out(x)
        if flat_mask is None:
            pooled = x.mean(1)  # (BJ, d)
        else:
            weights = flat_mask.float()[..., None]
            pooled = (x * weights).sum(1) / weights.sum(1)
        q = self.head(pooled).view(b, j)
        return q[:, 0] if single else q

    @torch.inference_mode()
    def score(self, obs: Tensor | np.ndarray, instr_emb: Tensor, chunks: Tensor | np.ndarray) -> Tensor:
        """Q of j candidate chunks at one state: obs (obs_dim,), instr_emb (384,), chunks (j, h, 7) -> (j,)."""
        obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)[None]
        chunks = torch.as_tensor(np.asarray(chunks), dtype=torch.float32)[None]
        return self(obs, torch.as_tensor(instr_emb).float().reshape(1, -1), chunks)[0]

    # ----------------------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": FORMAT_VERSION,
            "class": type(self).__name__,
            "config": self.config.to_dict(),
        }
        (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        save_file(
            {k: v.detach().contiguous() for k, v in self.state_dict().items()},
            directory / WEIGHTS_FILE,
            metadata={"format": "pt"},
        )
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> ChunkCritic:
        directory = Path(directory)
        meta = json.loads((directory / CONFIG_FILE).read_text())
        if meta.get("format_version") != FORMAT_VERSION or meta.get("class") != cls.__name__:
            raise ValueError(
                f"{directory}: not a {cls.__name__} checkpoint (format {meta.get('format_version')!r}, "
                f"class {meta.get('class')!r})"
            )
        critic = cls(CriticConfig(**meta["config"]))
        critic.load_state_dict(load_file(directory / WEIGHTS_FILE), strict=True)
        return critic


# ==================================================================================================
# decision rule and state value
# ==================================================================================================
def selection_weights(q_values: Tensor, mode: SelectMode = "softmax", temperature: float = 0.5) -> Tensor:
    """Weights over candidates (last dim): softmax(Q/τ), or one-hot on the argmax (value-only selection)."""
    q_values = torch.as_tensor(q_values, dtype=torch.float32)
    if mode == "softmax":
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        return torch.softmax(q_values / temperature, dim=-1)
    if mode == "argmax":
        return F.one_hot(q_values.argmax(-1), q_values.shape[-1]).to(q_values.dtype)
    raise ValueError(f"mode must be 'softmax' or 'argmax', got {mode!r}")


def select(
    q_values: Tensor | np.ndarray,
    chunks: Tensor | np.ndarray,
    mode: SelectMode = "softmax",
    temperature: float = 0.5,
) -> Tensor | np.ndarray:
    """The chunk to execute: q_values (j,), chunks (j, h, 7) -> (h, 7), the weighted combination of the
    candidates (softmax) or the best one (argmax). Returns numpy when given numpy chunks."""
    as_numpy = isinstance(chunks, np.ndarray)
    chunks_t = torch.as_tensor(chunks, dtype=torch.float32)
    q = torch.as_tensor(
        np.asarray(q_values) if isinstance(q_values, np.ndarray) else q_values, dtype=torch.float32
    )
    if q.ndim != 1 or chunks_t.ndim != 3 or len(q) != len(chunks_t):
        raise ValueError(
            f"expected q_values (j,) and chunks (j, h, 7), got {tuple(q.shape)} and {tuple(chunks_t.shape)}"
        )
    chunk = torch.einsum("j,jha->ha", selection_weights(q, mode, temperature), chunks_t)
    return chunk.numpy() if as_numpy else chunk


def state_value(q_values: Tensor, mode: ValueMode = "softmax", temperature: float = 0.5) -> Tensor:
    """V(s) from the Q values of candidate chunks (last dim): their mean, or softmax(Q/τ)-weighted mean."""
    if mode == "mean":
        return q_values.mean(-1)
    return (selection_weights(q_values, "softmax", temperature) * q_values).sum(-1)


# ==================================================================================================
# TD learning
# ==================================================================================================
def make_batch(
    sample: dict[str, Any], encode: Callable[[list[str]], Tensor] | None = None
) -> dict[str, Tensor]:
    """Tensors for `CriticTD.update` from a `ChunkReplay.sample`; instructions are embedded by `encode`
    (default: the frozen encoder of `coda.learn.text`, cached per string)."""
    if encode is None:
        from coda.learn.text import get_encoder

        encode = get_encoder().encode
    batch = {
        k: torch.as_tensor(sample[k])
        for k in (
            "obs",
            "actions",
            "mask",
            "next_obs",
            "next_actions",
            "next_mask",
            "reward",
            "shaping",
            "done",
            "steps",
        )
    }
    batch["instr"] = encode(list(sample["instruction"]))
    return batch


class CriticTD:
    """Online critic + Polyak target network + optimiser; `update(batch)` is one TD step.

    batch (tensors): obs (B, obs_dim), instr (B, 384), actions (B, h, 7), mask (B, h), reward (B,),
    shaping (B,), next_obs (B, obs_dim), done (B,), steps (B,), and bootstrap candidates: either
    next_candidates (B, J, h, 7) [+ next_candidates_mask (B, J, h)], e.g. sampled from the policy, or the
    dataset's next chunk next_actions (B, h, 7) + next_mask (B, h).
    """

    def __init__(self, critic: ChunkCritic, config: TDConfig | None = None) -> None:
        self.critic = critic
        self.config = config or TDConfig()
        self.target = copy.deepcopy(critic).requires_grad_(False).eval()
        self.optimizer = torch.optim.AdamW(
            critic.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay, fused=True
        )
        self.updates = 0

    @torch.no_grad()
    def td_target(self, batch: dict[str, Tensor]) -> Tensor:
        c = self.config
        if "next_candidates" in batch:
            cands = batch["next_candidates"].float()
            cmask = batch.get("next_candidates_mask")
        else:
            cands, cmask = batch["next_actions"].float()[:, None], batch["next_mask"][:, None]
        q_next = self.target(batch["next_obs"], batch["instr"], cands, cmask)  # (B, J)
        v_next = state_value(q_next, c.value, c.temperature)
        discount = c.gamma ** batch["steps"].float()
        alive = 1.0 - batch["done"].float()
        return batch["reward"].float() + batch["shaping"].float() + discount * alive * v_next

    def td_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Mean squared TD error of the online critic against the (fixed) target."""
        q = self.critic(batch["obs"], batch["instr"], batch["actions"], batch["mask"])
        return F.mse_loss(q, self.td_target(batch))

    def update(self, batch: dict[str, Tensor]) -> dict[str, float]:
        self.critic.train()
        q = self.critic(batch["obs"], batch["instr"], batch["actions"], batch["mask"])
        target = self.td_target(batch)
        loss = F.mse_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.critic.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self._polyak()
        self.updates += 1
        return {
            "loss": loss.item(),
            "q_mean": q.mean().item(),
            "target_mean": target.mean().item(),
            "grad_norm": float(grad_norm),
        }

    @torch.no_grad()
    def _polyak(self) -> None:
        tau = self.config.tau
        for p_target, p in zip(self.target.parameters(), self.critic.parameters()):
            p_target.lerp_(p, tau)
        for b_target, b in zip(self.target.buffers(), self.critic.buffers()):
            b_target.copy_(b)

    def sync_target(self) -> None:
        """Copy the online weights into the target network (e.g. after fitting the normaliser)."""
        self.target.load_state_dict(self.critic.state_dict())


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
