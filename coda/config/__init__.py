"""Typed, validated view of ``params.yaml``.

``params.yaml`` holds a shared ``base`` (seed, default profile) and named ``profiles``; a profile has one
mapping per section (``data``, ``sim``, ``planner``, ...). Each section is a frozen dataclass
(`coda.config.sections`, `coda.config.coevolve`) whose ``__post_init__`` checks types, ranges and allowed
values (with the helpers of `coda.config.checks`). Every key of every section must appear in
``params.yaml``: DVC stages declare the keys they depend on, so the file is the complete record of a run's
parameters. Dataclass defaults (the ``cpu`` values) exist only for building configs in code and tests.

All profiles are validated on every load (`coda.config.loading`), so a mistake in ``paper`` is caught while
running ``smoke``; the top-level ``experiments`` grid is validated with them (`coda.config.experiments`).
Any problem raises :class:`ConfigError`, one line naming the dotted key, for example
``profiles.cpu.sim.workers: expected an integer >= 1, got -2``.

To add a section: write a frozen dataclass in `coda.config.sections` (one comment per field, checks in
``__post_init__``), add it as a field of :class:`Config`, and add its mapping to every profile in
``params.yaml``. This package re-exports every public name, so ``from coda.config import ...`` is all a
caller needs.

Example:
    >>> cfg = load_params("params.yaml", profile="smoke")
    >>> cfg.sim.workers, cfg.sim.substeps
    (1, 24)
"""

from coda.config.checks import ConfigError
from coda.config.coevolve import (
    COMPILERS,
    DEMO_SELECTIONS,
    DIAGNOSERS,
    FINETUNES,
    POTENTIALS,
    SCHEDULES,
    SELECTIONS,
    CoevolveConfig,
)
from coda.config.experiments import METHODS, Experiments, Variant, load_experiments, with_variant
from coda.config.loading import _StrictLoader, load_params, read_experiments
from coda.config.sections import (
    BACKBONES,
    BACKENDS,
    FAMILIES,
    LIBERO_SUITES,
    OBS_MODES,
    SCALING_MODES,
    Config,
    DataConfig,
    LiberoConfig,
    PlannerConfig,
    ScalingConfig,
    SFTConfig,
    SimConfig,
    config_hash,
    section_types,
)

__all__ = [
    "BACKBONES",
    "BACKENDS",
    "COMPILERS",
    "DEMO_SELECTIONS",
    "DIAGNOSERS",
    "FAMILIES",
    "FINETUNES",
    "LIBERO_SUITES",
    "METHODS",
    "OBS_MODES",
    "POTENTIALS",
    "SCALING_MODES",
    "SCHEDULES",
    "SELECTIONS",
    "CoevolveConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "Experiments",
    "LiberoConfig",
    "PlannerConfig",
    "SFTConfig",
    "ScalingConfig",
    "SimConfig",
    "Variant",
    "_StrictLoader",
    "config_hash",
    "load_experiments",
    "load_params",
    "read_experiments",
    "section_types",
    "with_variant",
]
