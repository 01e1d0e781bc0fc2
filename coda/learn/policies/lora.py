"""LoRA adapters on a policy's linear layers (peft), saved and loaded on their own.

The SFT weights stay frozen; co-evolution updates train only the adapters. `add_lora` injects peft LoRA
layers in place (the policy keeps its class, so `sample`, `loss` and `save_pretrained` work unchanged) and
leaves only the adapter parameters trainable. Targets are plain ``nn.Linear`` modules called directly
in ``forward`` (our attention is hand-written), so no fused fast path can bypass them in eval mode.

An adapter is only meaningful on the base weights it was trained on: its config stores the sha256 of
the base state dict (LoRA excluded, normaliser buffers included) and `load_adapter` refuses any other base.

Adapter layout::

    DIR/adapter_config.json        {"format_version", "policy_class", "rank", "alpha", "dropout",
                                    "targets", "base_sha256"}
    DIR/adapter_model.safetensors  LoRA A/B matrices (peft's key naming)

Example:
    >>> add_lora(policy, rank=8, alpha=16)
    >>> opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    >>> save_adapter(policy, "round3/adapter")
    >>> load_adapter(ChunkPolicy.from_pretrained("sft"), "round3/adapter")
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

# peft is imported where adapters are made, saved or loaded: importing it costs ~3.5 s (it pulls in much of
# transformers), which every rollout worker and every policy-only process would otherwise pay.

# The policies these functions take are `ChunkPolicy` instances (they read ``lora``, ``lora_targets`` and
# ``config.seed``), typed as modules: the base class imports this module for its checkpoints, so this
# module does not import the base class.
Policy = TypeVar("Policy", bound=nn.Module)

ADAPTER_FORMAT_VERSION = 1
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoraSpec:
    """What was attached: enough to re-create identical (untrained) adapters."""

    rank: int  # r, the rank of each update B @ A
    alpha: float  # scaling numerator: the update is (alpha / rank) * B @ A
    dropout: float  # dropout on the adapter input during training
    targets: tuple[str, ...]  # module names (suffixes) that receive adapters

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoRA rank must be an integer >= 1, got {self.rank!r}")
        if not self.alpha > 0:
            raise ValueError(f"LoRA alpha must be > 0, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}")
        if not self.targets:
            raise ValueError("LoRA needs at least one target module")
        object.__setattr__(self, "targets", tuple(self.targets))


def add_lora(
    policy: Policy,
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
    targets: tuple[str, ...] | None = None,
) -> Policy:
    """Attach LoRA adapters in place to `targets` (default: the policy's `lora_targets`) and return it.

    Adapters start as the identity (B = 0); A is drawn under the policy's seed, so this is deterministic.
    Every non-adapter parameter is frozen.
    """
    if policy.lora is not None:
        raise ValueError("this policy already has LoRA adapters")
    from peft import LoraConfig, inject_adapter_in_model

    spec = LoraSpec(rank, float(alpha), float(dropout), tuple(targets or policy.lora_targets))
    config = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.targets),
        bias="none",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(policy.config.seed)
        inject_adapter_in_model(config, policy)
    for name, param in policy.named_parameters():
        param.requires_grad_(is_lora_key(name))
    policy.lora = spec
    return policy


def is_lora_key(name: str) -> bool:
    return "lora_" in name


def base_state_dict(policy: nn.Module) -> dict[str, Tensor]:
    """The policy's state dict without adapters, under the names it has without LoRA."""
    return {k.replace(".base_layer.", "."): v for k, v in policy.state_dict().items() if not is_lora_key(k)}


def base_sha256(policy: nn.Module) -> str:
    """Content hash of the base weights and buffers (names, dtypes, shapes and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(base_state_dict(policy).items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def save_adapter(policy: nn.Module, directory: str | Path) -> Path:
    """Write the adapter alone (config with the base hash + LoRA weights); returns the directory."""
    from peft import get_peft_model_state_dict

    if policy.lora is None:
        raise ValueError("this policy has no LoRA adapters to save (call add_lora first)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": ADAPTER_FORMAT_VERSION,
        "policy_class": type(policy).__name__,
        **dataclasses.asdict(policy.lora),
        "base_sha256": base_sha256(policy),
    }
    (directory / ADAPTER_CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    weights = {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(policy).items()}
    save_file(weights, directory / ADAPTER_WEIGHTS_FILE, metadata={"format": "pt"})
    return directory


def load_adapter(policy: Policy, directory: str | Path) -> Policy:
    """Load an adapter saved by `save_adapter` onto `policy` (attaching LoRA if needed); returns it.

    Raises ValueError when the policy's base weights differ from those the adapter was trained on.
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    directory = Path(directory)
    meta = json.loads((directory / ADAPTER_CONFIG_FILE).read_text())
    if meta.get("format_version") != ADAPTER_FORMAT_VERSION:
        raise ValueError(f"{directory}: unsupported adapter format {meta.get('format_version')!r}")
    if meta["policy_class"] != type(policy).__name__:
        raise ValueError(
            f"{directory} is an adapter for a {meta['policy_class']}, not a {type(policy).__name__}"
        )
    sha = base_sha256(policy)
    if meta["base_sha256"] != sha:
        raise ValueError(
            f"{directory} was trained on base weights {meta['base_sha256'][:12]}…, but this "
            f"policy's base weights are {sha[:12]}…: load the checkpoint the adapter was trained from"
        )
    spec = LoraSpec(meta["rank"], meta["alpha"], meta["dropout"], tuple(meta["targets"]))
    if policy.lora is None:
        add_lora(policy, spec.rank, spec.alpha, spec.dropout, spec.targets)
    elif policy.lora != spec:
        raise ValueError(f"{directory} holds adapters {spec}, but the policy has {policy.lora}")
    weights = load_file(directory / ADAPTER_WEIGHTS_FILE)
    expected = set(get_peft_model_state_dict(policy))
    if set(weights) != expected:
        raise ValueError(
            f"{directory}: adapter tensors do not match the policy's adapters "
            f"(missing {sorted(expected - set(weights))[:3]}, extra {sorted(set(weights) - expected)[:3]})"
        )
    result = set_peft_model_state_dict(policy, weights)
    if result.unexpected_keys:
        raise ValueError(f"{directory}: unexpected adapter tensors {result.unexpected_keys[:3]}")
    return policy


def merged_copy(policy: Policy) -> Policy:
    """A plain copy of `policy` with its adapters folded into the linear weights (W + scale * B @ A).

    For rollout workers that only act: it skips the adapter branch on every call (LoRA roughly doubles
    a flow decision's latency on one core). Outputs match the adapted policy up to float rounding
    (~1e-7), not bit for bit, so anything that must round-trip exactly uses the policy itself.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    merged = copy.deepcopy(policy)
    for name, module in list(merged.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge()
            parent_name, _, child = name.rpartition(".")
            setattr(merged.get_submodule(parent_name), child, module.get_base_layer())
    merged.__dict__.pop("peft_config", None)
    merged.lora = None
    merged.requires_grad_(True)
    return merged
