"""The experiment grid of the pipeline (top-level ``experiments`` of ``params.yaml``): which runs dvc.yaml's
stages make.

`load_experiments` validates the section against a loaded :class:`~coda.config.sections.Config`: the Table 1
seeds and methods, the runs extended for Figure 3, the ablation variants (each a method plus overrides of the
profile's ``coevolve`` keys, applied and validated by `with_variant`) and Table 7's second backbone.
`METHODS` names the methods without importing the co-evolution loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coda.config.checks import (
    ConfigError,
    _as_mapping,
    _check_choice,
    _check_choices,
    _check_int,
    _check_keys,
    _got,
)
from coda.config.coevolve import CoevolveConfig
from coda.config.sections import BACKBONES, Config

METHODS = (
    "sft",
    "domain_rand",
    "uniform",
    "sr_guided",
    "critic_no_memory",
    "coda",
    "gen_store_only",
    "train_store_only",
    "memory_reuse",
)


@dataclass(frozen=True)
class Variant:
    """One ablation run: a method plus overrides of the profile's `coevolve` keys (seed `base.seed`)."""

    name: str
    method: str
    set: Mapping[str, Any]
    table: str  # the table or figure it feeds (documentation; the report reads runs by name)


@dataclass(frozen=True)
class Experiments:
    seeds: tuple[int, ...]  # Table 1 seeds
    table1: tuple[str, ...]  # Table 1 methods
    long: tuple[str, ...]  # methods whose seed-0 run is extended to `coevolve.long_rounds` (Figure 3)
    variants: Mapping[str, Variant]
    backbone_b: Mapping[str, Any]  # Table 7: {backbone, epochs} of the second policy backbone's SFT
    budget: Mapping[str, tuple]  # the budget curve: {methods, envs}: seed-0 runs at each `--budget`


def load_experiments(raw: Any, config: Config) -> Experiments:
    """Validate the top-level `experiments` section against ``config`` (variants' overrides are applied
    to its `coevolve` section, so a bad value is reported here with its full key)."""
    raw = _as_mapping("experiments", raw)
    _check_keys(
        "experiments", raw, ("seeds", "table1", "long", "variants", "backbone_b", "budget"), what="key"
    )
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError("experiments.seeds", f"expected a non-empty list of seeds, got {_got(seeds)}")
    for i, x in enumerate(seeds):
        _check_int(f"experiments.seeds[{i}]", x, minimum=0)
    table1 = _check_choices("experiments.table1", raw["table1"], METHODS[:6])
    long = _check_choices("experiments.long", raw["long"], METHODS[1:6])
    variants = {}
    for name, body in _as_mapping("experiments.variants", raw["variants"]).items():
        prefix = f"experiments.variants.{name}"
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ConfigError(prefix, "variant names are letters, digits and underscores")
        body = _as_mapping(prefix, body)
        _check_keys(prefix, body, ("method", "table", "set"), what="key")
        method = _check_choice(f"{prefix}.method", body["method"], METHODS[1:8])
        overrides = _as_mapping(f"{prefix}.set", body["set"] or {})
        variant = Variant(name, method, dict(overrides), str(body["table"]))
        with_variant(config, variant)  # validates the overrides
        variants[name] = variant
    b = _as_mapping("experiments.backbone_b", raw["backbone_b"])
    _check_keys("experiments.backbone_b", b, ("backbone", "epochs"), what="key")
    _check_choice("experiments.backbone_b.backbone", b["backbone"], BACKBONES)
    _check_int("experiments.backbone_b.epochs", b["epochs"], minimum=1)
    budget = _as_mapping("experiments.budget", raw["budget"])
    _check_keys("experiments.budget", budget, ("methods", "envs"), what="key")
    methods = _check_choices("experiments.budget.methods", budget["methods"], METHODS[1:6])
    envs = budget["envs"]
    if not isinstance(envs, list) or not envs:
        raise ConfigError(
            "experiments.budget.envs", f"expected a non-empty list of budgets, got {_got(envs)}"
        )
    for i, n in enumerate(envs):
        _check_int(f"experiments.budget.envs[{i}]", n, minimum=1)
    budget = {"methods": methods, "envs": tuple(envs)}
    return Experiments(tuple(seeds), table1, long, variants, dict(b), budget)


def with_variant(config: Config, variant: Variant) -> Config:
    """``config`` with the variant's `coevolve` overrides applied (validated like the profile itself)."""
    prefix = f"experiments.variants.{variant.name}.set"
    fields = {f.name for f in dataclasses.fields(CoevolveConfig)}
    for key in variant.set:
        if key not in fields:
            raise ConfigError(f"{prefix}.{key}", "unknown coevolve key")
    merged = {**config.coevolve.__dict__, **variant.set}
    try:
        coevolve = CoevolveConfig(**merged)
    except ConfigError as error:
        raise error.within(prefix) from None
    return dataclasses.replace(config, coevolve=coevolve)
