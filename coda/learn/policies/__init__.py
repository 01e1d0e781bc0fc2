"""Action-chunk policies: two backbones behind one interface (`ChunkPolicy`), plus LoRA adapters.

* ``flow`` — `FlowPolicy`, backbone A (stand-in for pi0.5): transformer + flow-matching chunk head.
* ``regression`` — `RegressionPolicy`, backbone B (stand-in for OpenVLA-OFT): MLP trunk, parallel
  L1-regressed chunk, learned noise scale for sampling.

Example:
    >>> policy = make_policy("regression", hidden=128)
    >>> policy = ChunkPolicy.from_pretrained(policy.save_pretrained("ckpt"))
"""

from __future__ import annotations

from typing import Any

from coda.learn.policies.base import ChunkPolicy, PolicyConfig
from coda.learn.policies.flow import FlowConfig, FlowPolicy
from coda.learn.policies.lora import LoraSpec, add_lora, base_sha256, load_adapter, merged_copy, save_adapter
from coda.learn.policies.registry import POLICIES
from coda.learn.policies.regression import RegressionConfig, RegressionPolicy


def make_policy(name: str, **config: Any) -> ChunkPolicy:
    """A freshly initialised policy of backbone `name` with config fields overriding the defaults."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {sorted(POLICIES)}")
    cls = POLICIES[name]
    return cls(cls.config_class(**config))


__all__ = [
    "POLICIES",
    "ChunkPolicy",
    "FlowConfig",
    "FlowPolicy",
    "LoraSpec",
    "PolicyConfig",
    "RegressionConfig",
    "RegressionPolicy",
    "add_lora",
    "base_sha256",
    "load_adapter",
    "make_policy",
    "merged_copy",
    "save_adapter",
]
