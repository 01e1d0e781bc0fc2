"""Backbone A (our stand-in for pi0.5): a small transformer with a flow-matching action-chunk head.

Tokens: the normalised 50-D observation is split into proprioception, one token per object role slot and
a goal/family token (`obs_split`), plus one projected instruction token (the context), and h noisy action
tokens carrying the flow time. As in pi0, attention is block-causal: context tokens attend to the context,
action tokens to everything; the outputs at the action tokens are the velocity field. The context is thus
computed once per decision and shared by all candidates and integration steps.

Training uses conditional flow matching (rectified flow): with noise ε ~ N(0, I), action chunk a and
t ~ U(0, 1), x_t = (1 - t) ε + t a and the network regresses the velocity a - ε. Sampling integrates
dx/dt = v(x, t) from x_0 = ε to t = 1 with `flow_steps` Euler steps and clips to [-1, 1].

The blocks are written out (pre-norm, separate q/k/v/out projections) rather than using
``nn.TransformerEncoderLayer``, whose fused eval-mode path silently skips LoRA on its linears.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coda.config import ConfigError
from coda.learn.policies.base import (
    ChunkPolicy,
    PolicyConfig,
    check_int,
    init_weights,
    seeded_init,
)
from coda.learn.policies.registry import register_policy

# proprio (ee_pos 3, ee_quat 4, grip 1, q 7) | 3 role slots x 9 | goal 4 + family one-hot 4
DEFAULT_OBS_SPLIT = (15, 9, 9, 9, 8)


def linear(layer: nn.Module, x: Tensor) -> Tensor:
    """``layer(x)``; a plain ``nn.Linear`` is applied with ``F.linear`` directly, skipping the module call
    (about 1.5 us each, a sizeable share of a batch-1 decision). Anything else, e.g. a peft LoRA layer that
    replaced the linear, runs its own forward, so adapters are never bypassed. Module hooks are not run
    for plain linears (none are used)."""
    if type(layer) is nn.Linear:
        return F.linear(x, layer.weight, layer.bias)
    return layer(x)


def layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """``norm(x)`` for an ``nn.LayerNorm`` via ``F.layer_norm``, skipping the module call (see `linear`)."""
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


@dataclass(frozen=True)
class FlowConfig(PolicyConfig):
    # defaults keep a j=8 critic-guided decision under 5 ms on one core (benchmarks/policy_speed.py), which
    # its matrix products bound: median 4.2 ms at d_model 64 against 5.0 ms at 96, timed interleaved in one
    # process (2026-12-01)
    d_model: int = 64  # token width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads (must divide d_model)
    mlp_ratio: int = 2  # hidden width of each block's MLP, in units of d_model
    obs_split: tuple[int, ...] = DEFAULT_OBS_SPLIT  # observation token sizes, in vector order; sum = obs_dim
    flow_steps: int = 5  # Euler steps when sampling

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("d_model", "n_layers", "n_heads", "mlp_ratio", "flow_steps"):
            check_int(key, getattr(self, key), 1)
        if self.d_model % self.n_heads:
            raise ConfigError("n_heads", f"must divide d_model={self.d_model}, got {self.n_heads}")
        object.__setattr__(self, "obs_split", tuple(self.obs_split))  # JSON gives a list
        for size in self.obs_split:
            check_int("obs_split", size, 1)
        if sum(self.obs_split) != self.obs_dim:
            raise ConfigError("obs_split", f"sizes must sum to obs_dim={self.obs_dim}, got {self.obs_split}")


class Block(nn.Module):
    """Pre-norm transformer block (x + attn(ln(x)), then x + mlp(ln(x))) with block-causal attention.

    Context tokens attend only to context tokens, so their keys and values do not depend on the noisy
    actions or the flow time: `sample` computes them once per observation and reuses them for every
    Euler step and every candidate. Action tokens attend to the context and to each other.
    """

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)

    def heads(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, H, T, d / H)
        b, t, d = x.shape
        return x.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + linear(self.out_proj, y.transpose(1, 2).reshape(x.shape))
        return x + linear(self.fc2, F.gelu(linear(self.fc1, layer_norm(self.ln2, x))))

    def context_forward(self, c: Tensor, last: bool = False) -> tuple[Tensor | None, Tensor, Tensor]:
        """Context tokens (B, C, d) -> (next layer's tokens, keys, values (B, H, C, d/H)).

        The last block's context outputs feed nothing (actions only read its keys and values): skipped.
        """
        h = layer_norm(self.ln1, c)
        k, v = self.heads(linear(self.k_proj, h)), self.heads(linear(self.v_proj, h))
        return None if last else self.attend(c, self.heads(linear(self.q_proj, h)), k, v), k, v

    def action_forward(self, a: Tensor, k_context: Tensor, v_context: Tensor) -> Tensor:
        """Action tokens (B * j, h, d), j consecutive rows per context row, attending to themselves and to
        their row's context keys/values (B, H, C, d/H); the context is broadcast, not copied, to the j."""
        h = layer_norm(self.ln1, a)
        k = self.with_context(k_context, self.heads(linear(self.k_proj, h)))
        v = self.with_context(v_context, self.heads(linear(self.v_proj, h)))
        return self.attend(a, self.heads(linear(self.q_proj, h)), k, v)

    @staticmethod
    def with_context(context: Tensor, actions: Tensor) -> Tensor:
        """Keys or values of [context, actions] per row: (B, H, C, e), (B * j, H, h, e) -> (B * j, H, C + h, e)."""
        b, n = context.shape[0], actions.shape[0]
        grouped = actions.view(b, n // b, *actions.shape[1:])  # (B, j, H, h, e)
        return torch.cat([context[:, None].expand(-1, n // b, -1, -1, -1), grouped], dim=3).flatten(0, 1)


def time_features(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of flow time t in [0, 1]: (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=t.dtype) / half)
    angles = 1000.0 * t[:, None] * freqs[None]  # the highest frequency resolves steps of ~1e-3
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


@register_policy
class FlowPolicy(ChunkPolicy):
    name = "flow"
    config_class = FlowConfig
    lora_targets = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")

    def __init__(self, config: FlowConfig | None = None) -> None:
        config = config or FlowConfig()
        super().__init__(config)
        c = config
        with seeded_init(c.seed):
            self.obs_in = nn.ModuleList(nn.Linear(size, c.d_model) for size in c.obs_split)
            self.instr_in = nn.Linear(c.instr_dim, c.d_model)
            self.action_in = nn.Linear(c.action_dim, c.d_model)
            self.action_pos = nn.Parameter(0.02 * torch.randn(c.horizon, c.d_model))
            self.time_mlp = nn.Sequential(
                nn.Linear(c.d_model, c.d_model), nn.SiLU(), nn.Linear(c.d_model, c.d_model)
            )
            self.blocks = nn.ModuleList(Block(c.d_model, c.n_heads, c.mlp_ratio) for _ in range(c.n_layers))
            self.ln_out = nn.LayerNorm(c.d_model)
            self.action_out = nn.Linear(c.d_model, c.action_dim)
            self.apply(init_weights)

    def context(self, obs: Tensor, instr_emb: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per-layer context keys and values [(B, H, C, d/H)] * n_layers from the observation and instruction."""
        parts = self.normalize_obs(obs).split(self.config.obs_split, dim=-1)
        tokens = [linear(proj, part) for proj, part in zip(self.obs_in, parts)]
        tokens.append(linear(self.instr_in, instr_emb.float()))
        c = torch.stack(tokens, dim=1)  # (B, C, d), C = len(obs_split) + 1
        kv = []
        for i, block in enumerate(self.blocks):
            c, k, v = block.context_forward(c, last=i == len(self.blocks) - 1)
            kv.append((k, v))
        return kv

    def time_tokens(self, t: Tensor) -> Tensor:
        """Flow-time and position embedding added to the action tokens: t (M,) -> (M, h, d)."""
        return self.action_pos + self.time_mlp(time_features(t, self.config.d_model))[:, None]

    def sampling_time_tokens(self) -> Tensor:
        """`time_tokens` of the `flow_steps` Euler steps, (steps, h, d), cached between calls without grad.

        They depend only on weights, so the cache is keyed on the storage and in-place version counter of
        every parameter they read: an optimizer step, ``load_state_dict``, ``.to()`` or any other in-place
        change of those parameters invalidates it. With grad enabled they are recomputed (and not cached).
        """
        steps = self.config.flow_steps
        times = (1.0 / steps) * torch.arange(steps, dtype=torch.float32)
        if torch.is_grad_enabled():
            return self.time_tokens(times)
        params = (self.action_pos, *self.time_mlp.parameters())
        key = (steps, *((p.data_ptr(), p._version, p.dtype) for p in params))
        cached = self.__dict__.get("_time_token_cache")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_time_token_cache"] = (key, self.time_tokens(times))
        return cached[1]

    def velocity(self, kv: list[tuple[Tensor, Tensor]], x_t: Tensor, time_tokens: Tensor) -> Tensor:
        """Velocity field: context keys/values (B, H, C, d/H) per layer, x_t (B * j, h, 7) (j candidates per
        context row), time_tokens (B * j or 1, h, d) -> (B * j, h, 7)."""
        a = linear(self.action_in, x_t) + time_tokens  # (N, h, d)
        for block, (k, v) in zip(self.blocks, kv):
            a = block.action_forward(a, k, v)
        return linear(self.action_out, layer_norm(self.ln_out, a))

    def per_sample_loss(
        self, obs: Tensor, instr: Tensor, chunk: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        b = obs.shape[0]
        noise = torch.randn(chunk.shape, generator=generator)
        t = torch.rand(b, generator=generator)
        x_t = (1.0 - t[:, None, None]) * noise + t[:, None, None] * chunk
        pred = self.velocity(self.context(obs, instr), x_t, self.time_tokens(t))
        return (pred - (chunk - noise)).pow(2).mean(dim=(1, 2))  # (B,)

    def trace_sampling(self) -> None:
        """Run the velocity field of `draw` through TorchScript traces, one per input shape, for a policy whose
        weights no longer change (a rollout worker's): the same ATen operations in the same order, so the same
        bits, without the Python overhead of each of its ~100 module calls per Euler step. Gradients and
        weight changes are not seen by a trace: training must not call this."""
        self.__dict__["_velocity_traces"] = {}

    def _velocity_at(self, kv: list[tuple[Tensor, Tensor]], x: Tensor, time_tokens: Tensor) -> Tensor:
        traces = self.__dict__.get("_velocity_traces")
        if traces is None or torch.is_grad_enabled():
            return self.velocity(kv, x, time_tokens)
        key = (tuple(kv[0][0].shape), tuple(x.shape), tuple(time_tokens.shape))
        traced = traces.get(key)
        if traced is None:
            with warnings.catch_warnings():  # torch 2.13 deprecates tracing (still there)
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                traced = traces[key] = torch.jit.trace_module(
                    self, {"velocity": (kv, x, time_tokens)}, check_trace=False
                )
        return traced.velocity(kv, x, time_tokens)

    def draw(
        self, obs: Tensor, instr_emb: Tensor, j: int, generator: torch.Generator | None, clip: bool
    ) -> Tensor:
        c = self.config
        b = obs.shape[0]
        # the context is computed once per observation and shared by all j candidates and Euler steps
        kv = self.context(obs, instr_emb)
        x = torch.randn(b * j, c.horizon, c.action_dim, generator=generator)
        dt = 1.0 / c.flow_steps
        # every row shares the flow time of a step, so each step's time tokens are embedded once
        time_tokens = self.sampling_time_tokens()  # (steps, h, d)
        for step in range(c.flow_steps):
            x = torch.add(x, self._velocity_at(kv, x, time_tokens[step : step + 1]), alpha=dt)
        return (x.clamp(-1.0, 1.0) if clip else x).view(b, j, c.horizon, c.action_dim)
