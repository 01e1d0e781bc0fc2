"""The interface every action-chunk policy implements, and its checkpoint format.

A policy maps a state observation (the 50-D ``Observation.vector``) and an instruction embedding (384-d,
from `coda.learn.text`) to chunks of h=8 normalised 7-D actions. Subclasses implement `draw` (j
candidate chunks per observation, which `sample` calls on checked inputs without gradients) and
`per_sample_loss` (which `loss` weights and averages over the batch); this base class adds those checks,
observation normalisation, `act` for the rollout engine, and checkpoints.

Checkpoint layout (no pickle anywhere)::

    DIR/config.json        {"format_version", "policy", "class", "config", "encoder_backend"}
    DIR/model.safetensors  base weights and buffers (observation normaliser included)
    DIR/adapter/           only when LoRA is attached: see `coda.learn.policies.lora`

Example:
    >>> policy = make_policy("flow", d_model=64)
    >>> policy.fit_normalizer(demo_obs)                        # (N, 50) observations from SFT data
    >>> chunks = policy.sample(obs, instr_emb, j=8)            # (B, 8, 8, 7) in [-1, 1]
    >>> policy.save_pretrained("ckpt"); ChunkPolicy.from_pretrained("ckpt")
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from coda.config import ConfigError
from coda.learn.policies.lora import base_state_dict, load_adapter, save_adapter
from coda.learn.policies.registry import POLICIES
from coda.learn.text import EMBED_DIM, get_encoder
from coda.sim.world import OBS_DIM

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ADAPTER_DIR = "adapter"


def check_int(key: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(key, f"expected an integer >= {minimum}, got {value!r}")


def check_float(key: str, value: Any, above: float | None = None) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not np.isfinite(value):
        raise ConfigError(key, f"expected a finite number, got {value!r}")
    if above is not None and value <= above:
        raise ConfigError(key, f"expected a number > {above}, got {value!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """Fields every backbone shares; subclasses add their architecture."""

    obs_dim: int = OBS_DIM  # length of Observation.vector
    instr_dim: int = EMBED_DIM  # instruction embedding size (coda.learn.text)
    horizon: int = 8  # actions per chunk (h)
    action_dim: int = 7  # Δpos (3), Δrot (3), gripper (1), each normalised to [-1, 1]
    obs_clip: float = 10.0  # normalised observations are clipped to ±obs_clip (robust to unseen states)
    seed: int = 0  # seeds weight initialisation and the noise `act` samples with

    def __post_init__(self) -> None:
        for key in ("obs_dim", "instr_dim", "horizon", "action_dim"):
            check_int(key, getattr(self, key), 1)
        check_int("seed", self.seed, 0)
        check_float("obs_clip", self.obs_clip, above=0.0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ChunkPolicy(nn.Module):
    """Base class: normaliser, `sample`, `loss`, `act`, checkpoints. Subclasses define `draw` and
    `per_sample_loss`."""

    name: ClassVar[str]  # registry key in coda.learn.policies.registry.POLICIES
    config_class: ClassVar[type[PolicyConfig]]
    lora_targets: ClassVar[tuple[str, ...]]  # names of the nn.Linear modules LoRA adapts

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        self.config = config
        self.lora = None  # a LoraSpec once coda.learn.policies.lora.add_lora attached adapters
        self.register_buffer("obs_mean", torch.zeros(config.obs_dim))
        self.register_buffer("obs_std", torch.ones(config.obs_dim))

    # ----------------------------------------------------------------------------------------------
    # what subclasses implement

    def draw(
        self, obs: Tensor, instr_emb: Tensor, j: int, generator: torch.Generator | None, clip: bool
    ) -> Tensor:
        """`sample` on checked inputs, without gradients."""
        raise NotImplementedError

    def per_sample_loss(
        self, obs: Tensor, instr: Tensor, chunk: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """The (B,) training losses behind `loss`, on checked inputs (chunk as float)."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------------
    # shared machinery

    @torch.no_grad()
    def sample(
        self,
        obs: Tensor,
        instr_emb: Tensor,
        j: int,
        generator: torch.Generator | None = None,
        clip: bool = True,
    ) -> Tensor:
        """`j` candidate chunks per row: obs (B, obs_dim), instr_emb (B, 384) -> (B, j, h, 7) in [-1, 1]
        (``clip=False``: before clipping, for regression targets that must not be biased at the bounds)."""
        self.check_inputs(obs, instr_emb)
        return self.draw(obs, instr_emb, j, generator, clip)

    def loss(
        self,
        batch: dict[str, Tensor],
        weights: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Scalar training loss: mean over the batch of weights[i] * per-sample loss[i].

        batch: "obs" (B, obs_dim), "instr" (B, 384), "chunk" (B, h, 7). weights (B,) default to ones;
        a zero weight removes the sample's gradient contribution (AWR passes exp(A/β), clipped).
        """
        obs, instr, chunk = batch["obs"], batch["instr"], batch["chunk"].float()
        self.check_inputs(obs, instr)
        w = self.per_sample_weights(weights, obs.shape[0])
        return (w * self.per_sample_loss(obs, instr, chunk, generator)).mean()

    def candidate_loss(
        self,
        obs: Tensor,
        instr: Tensor,
        chunks: Tensor,
        weights: Tensor,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """The weighted loss over j candidate chunks per state, AWR's regression term: obs (B, obs_dim),
        instr (B, 384), chunks (B, j, h, 7), weights (B, j) -> the mean over the B·j (state, chunk) pairs of
        weight × per-sample loss, i.e. `loss` on every state repeated j times. Backbones whose loss shares
        work across a state's candidates override `candidate_pair_losses`."""
        self.check_inputs(obs, instr)
        b, j = chunks.shape[:2]
        if weights.shape != (b, j):
            raise ValueError(f"weights must be ({b}, {j}), got {tuple(weights.shape)}")
        losses = self.candidate_pair_losses(obs, instr, chunks.float(), generator)  # (B, j)
        return (weights.detach().float() * losses).mean()

    def candidate_pair_losses(
        self, obs: Tensor, instr: Tensor, chunks: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """(B, j) per-pair losses of `candidate_loss`: by default `per_sample_loss` on each state repeated
        for its j candidates."""
        b, j, h, a = chunks.shape
        losses = self.per_sample_loss(
            obs.repeat_interleave(j, dim=0),
            instr.repeat_interleave(j, dim=0),
            chunks.reshape(b * j, h, a),
            generator,
        )
        return losses.view(b, j)

    def fit_normalizer(self, obs: np.ndarray | Tensor, min_std: float = 1e-2) -> None:
        """Set the observation mean/std (buffers, saved with the weights) from SFT observations (N, obs_dim).

        Dimensions that barely vary in the data (padding slots, the family one-hot within one family) get
        `min_std` so that they cannot blow up when they do vary at test time.
        """
        obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        if obs.ndim != 2 or obs.shape[1] != self.config.obs_dim or len(obs) < 2:
            raise ValueError(
                f"fit_normalizer needs (N >= 2, {self.config.obs_dim}) observations, got {tuple(obs.shape)}"
            )
        self.obs_mean.copy_(obs.mean(0))
        self.obs_std.copy_(obs.std(0).clamp(min=min_std))

    def normalize_obs(self, obs: Tensor) -> Tensor:
        obs = obs.to(self.obs_mean.dtype)
        clip = self.config.obs_clip
        return ((obs - self.obs_mean) / self.obs_std).clamp(-clip, clip)

    def check_inputs(self, obs: Tensor, instr_emb: Tensor) -> None:
        c = self.config
        if obs.ndim != 2 or obs.shape[1] != c.obs_dim:
            raise ValueError(f"obs must be (B, {c.obs_dim}), got {tuple(obs.shape)}")
        if instr_emb.shape != (obs.shape[0], c.instr_dim):
            raise ValueError(
                f"instr_emb must be ({obs.shape[0]}, {c.instr_dim}), got {tuple(instr_emb.shape)}"
            )

    @staticmethod
    def per_sample_weights(weights: Tensor | None, batch_size: int) -> Tensor:
        if weights is None:
            return torch.ones(batch_size)
        if weights.shape != (batch_size,):
            raise ValueError(f"weights must be ({batch_size},), got {tuple(weights.shape)}")
        return weights.detach().float()

    @torch.no_grad()
    def act(self, observation: Any, generator: torch.Generator | None = None) -> np.ndarray:
        """One chunk (h, 7) for a `coda.sim.rollout.Observation`, in eval mode.

        Without a generator the noise is drawn from one seeded by ``config.seed`` on every call, so the
        chunk is a deterministic function of the observation (rollouts are reproducible).
        """
        was_training = self.training
        self.eval()
        try:
            instr = get_encoder().encode([observation.instruction])
            obs = torch.as_tensor(np.asarray(observation.vector), dtype=torch.float32)[None]
            if generator is None:
                generator = torch.Generator().manual_seed(self.config.seed)
            chunk = self.sample(obs, instr, 1, generator=generator)[0, 0]
        finally:
            self.train(was_training)
        return chunk.numpy()

    # ----------------------------------------------------------------------------------------------
    # checkpoints

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json + model.safetensors (+ adapter/ when LoRA is attached); returns the directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": FORMAT_VERSION,
            "policy": self.name,
            "class": type(self).__name__,
            "config": self.config.to_dict(),
            "encoder_backend": get_encoder().backend,
        }
        (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        state = {k: v.contiguous() for k, v in base_state_dict(self).items()}
        save_file(state, directory / WEIGHTS_FILE, metadata={"format": "pt"})
        if self.lora is not None:
            save_adapter(self, directory / ADAPTER_DIR)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> ChunkPolicy:
        """Rebuild a policy saved by `save_pretrained`; refuses classes outside the registry."""
        directory = Path(directory)
        meta = json.loads((directory / CONFIG_FILE).read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: unsupported checkpoint format {meta.get('format_version')!r}")
        by_class = {policy_cls.__name__: policy_cls for policy_cls in POLICIES.values()}
        policy_cls = by_class.get(meta.get("class"))
        if policy_cls is None:
            raise ValueError(
                f"{directory}: unknown policy class {meta.get('class')!r}; known: {sorted(by_class)}"
            )
        if cls is not ChunkPolicy and not issubclass(policy_cls, cls):
            raise ValueError(f"{directory} holds a {policy_cls.__name__}, not a {cls.__name__}")
        backend = get_encoder().backend
        if meta.get("encoder_backend") != backend:
            log.warning(
                "%s was trained with the %r instruction encoder, this process uses %r",
                directory,
                meta.get("encoder_backend"),
                backend,
            )
        try:
            config = policy_cls.config_class(**meta["config"])
        except TypeError as err:
            raise ValueError(f"{directory}: config does not match {policy_cls.__name__}: {err}") from err
        policy = policy_cls(config)
        policy.load_state_dict(load_file(directory / WEIGHTS_FILE), strict=True)
        if (directory / ADAPTER_DIR).exists():
            load_adapter(policy, directory / ADAPTER_DIR)
        return policy

    def save_adapter(self, directory: str | Path) -> Path:
        """Save the LoRA adapter alone (see `coda.learn.policies.lora.save_adapter`)."""
        return save_adapter(self, directory)


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Build modules under a fixed seed without touching the caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def init_weights(module: nn.Module) -> None:
    """Small-normal linear weights, zero biases (the usual transformer initialisation)."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
