"""Backbone B (our stand-in for OpenVLA-OFT): an MLP trunk with parallel chunk decoding.

The normalised observation and the instruction embedding are concatenated and passed through residual
MLP blocks; one linear head emits the whole chunk (h x 7) at once, trained by L1 regression as in OFT.
To let it propose j candidates, a learned per-dimension log noise scale (h x 7, state-independent) is
fitted by Gaussian NLL on the residual with the mean detached, so it does not pull on the regression.
Candidate 0 is the mean chunk; candidates 1..j-1 are mean + σ·ε; all are clipped to [-1, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coda.config import ConfigError
from coda.learn.policies.base import (
    ChunkPolicy,
    PolicyConfig,
    check_float,
    check_int,
    init_weights,
    seeded_init,
)
from coda.learn.policies.registry import register_policy


@dataclass(frozen=True)
class RegressionConfig(PolicyConfig):
    hidden: int = 512  # trunk width
    n_blocks: int = 3  # residual MLP blocks in the trunk
    init_log_std: float = -1.5  # initial log σ of the sampling noise (σ ≈ 0.22)
    min_log_std: float = -5.0  # log σ is clamped to [min_log_std, max_log_std]
    max_log_std: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("hidden", self.hidden, 1)
        check_int("n_blocks", self.n_blocks, 0)
        for key in ("init_log_std", "min_log_std", "max_log_std"):
            check_float(key, getattr(self, key))
        if not self.min_log_std <= self.init_log_std <= self.max_log_std:
            raise ConfigError(
                "init_log_std",
                f"must lie in [min_log_std, max_log_std] = "
                f"[{self.min_log_std}, {self.max_log_std}], got {self.init_log_std}",
            )


class ResidualBlock(nn.Module):
    """x + fc2(gelu(fc1(ln(x))))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


@register_policy
class RegressionPolicy(ChunkPolicy):
    name = "regression"
    config_class = RegressionConfig
    lora_targets = ("trunk_in", "fc1", "fc2", "head")

    def __init__(self, config: RegressionConfig | None = None) -> None:
        config = config or RegressionConfig()
        super().__init__(config)
        c = config
        with seeded_init(c.seed):
            self.trunk_in = nn.Linear(c.obs_dim + c.instr_dim, c.hidden)
            self.blocks = nn.ModuleList(ResidualBlock(c.hidden) for _ in range(c.n_blocks))
            self.ln_out = nn.LayerNorm(c.hidden)
            self.head = nn.Linear(c.hidden, c.horizon * c.action_dim)
            self.apply(init_weights)
        self.log_std = nn.Parameter(torch.full((c.horizon, c.action_dim), c.init_log_std))

    def mean_chunk(self, obs: Tensor, instr_emb: Tensor) -> Tensor:
        """Regressed chunk (B, h, 7), not clipped."""
        c = self.config
        x = F.gelu(self.trunk_in(torch.cat([self.normalize_obs(obs), instr_emb.float()], dim=-1)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x)).view(-1, c.horizon, c.action_dim)

    def std(self) -> Tensor:
        """Sampling noise scale σ (h, 7)."""
        return self.log_std.clamp(self.config.min_log_std, self.config.max_log_std).exp()

    def per_sample_loss(
        self, obs: Tensor, instr: Tensor, chunk: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """L1 on the mean plus Gaussian NLL of the residual for log σ, per sample (generator unused)."""
        return self._chunk_losses(self.mean_chunk(obs, instr), chunk)

    def candidate_pair_losses(
        self, obs: Tensor, instr: Tensor, chunks: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """The mean chunk is a function of the state alone: the trunk runs once per state, not per pair."""
        return self._chunk_losses(self.mean_chunk(obs, instr)[:, None], chunks)  # (B, j)

    def _chunk_losses(self, mean: Tensor, chunk: Tensor) -> Tensor:
        """mean and chunk (..., h, 7) -> the (...) losses: L1 + NLL of the residual under σ."""
        l1 = (mean - chunk).abs().mean(dim=(-2, -1))
        # unclamped here so that log σ always gets a gradient; `std()` applies the bounds when sampling
        z = (chunk - mean.detach()) / self.log_std.exp()
        nll = (0.5 * z.pow(2) + self.log_std + 0.5 * math.log(2 * math.pi)).mean(dim=(-2, -1))
        return l1 + nll

    def draw(
        self, obs: Tensor, instr_emb: Tensor, j: int, generator: torch.Generator | None, clip: bool
    ) -> Tensor:
        c = self.config
        mean = self.mean_chunk(obs, instr_emb)[:, None]  # (B, 1, h, 7)
        noise = torch.randn(obs.shape[0], j, c.horizon, c.action_dim, generator=generator)
        noise[:, 0] = 0.0  # candidate 0 is the mean chunk
        out = mean + self.std() * noise
        return out.clamp(-1.0, 1.0) if clip else out
