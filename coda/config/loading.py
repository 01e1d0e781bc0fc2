"""Loading ``params.yaml``: every profile validated, the selected one returned as a :class:`Config`.

`load_params` reads the file with a YAML loader that rejects duplicate keys, checks ``base`` and that every
profile has exactly the sections of :class:`~coda.config.sections.Config` with exactly their keys, builds
each section's dataclass (so a mistake in an unselected profile is caught too) and validates the top-level
``experiments`` (`coda.config.experiments`). `read_experiments` returns that grid itself. Every problem is a
one-line :class:`~coda.config.checks.ConfigError` naming the dotted key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from coda.config.checks import ConfigError, _as_mapping, _check_int, _check_keys, _got
from coda.config.experiments import Experiments, load_experiments
from coda.config.sections import Config, section_types


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Config:
    """Read ``path``, validate every profile and return the one named by ``profile`` or ``base.profile``."""
    path = Path(path)
    root = _as_mapping(str(path), _read_yaml(path))
    for key in root:
        if key not in ("base", "profiles", "experiments"):
            raise ConfigError(str(key), "unknown key; expected one of: base, profiles, experiments")
    for key in ("base", "profiles"):
        if key not in root:
            raise ConfigError(key, "missing key")

    base = _as_mapping("base", root["base"])
    _check_keys("base", base, ("seed", "profile"), what="key")
    seed = _check_int("base.seed", base["seed"], minimum=0)
    default_profile = base["profile"]

    profiles = _as_mapping("profiles", root["profiles"])
    if not profiles:
        raise ConfigError("profiles", "expected at least one profile")
    configs = {}
    for name, body in profiles.items():
        if not isinstance(name, str):
            raise ConfigError(f"profiles.{name}", f"profile names must be strings, got {_got(name)}")
        configs[name] = _build_profile(name, body, seed)

    available = ", ".join(sorted(configs))
    if not isinstance(default_profile, str) or default_profile not in configs:
        raise ConfigError("base.profile", f"unknown profile {default_profile!r}; available: {available}")
    selected = default_profile if profile is None else profile
    if selected not in configs:
        raise ConfigError(
            f"profiles.{selected}", f"unknown profile {selected!r} requested; available: {available}"
        )
    config = configs[selected]
    if "experiments" in root:
        load_experiments(root["experiments"], config)  # validated with every command, used by the pipeline
    return config


def read_experiments(path: str | Path = "params.yaml", profile: str | None = None) -> Experiments:
    root = _as_mapping(str(path), _read_yaml(Path(path)))
    if "experiments" not in root:
        raise ConfigError("experiments", f"missing key in {path}")
    return load_experiments(root["experiments"], load_params(path, profile))


def _build_profile(name: str, body: Any, seed: int) -> Config:
    prefix = f"profiles.{name}"
    body = _as_mapping(prefix, body)
    types = section_types()
    _check_keys(prefix, body, tuple(types), what="section")
    sections = {
        section: _build_section(f"{prefix}.{section}", cls, body[section]) for section, cls in types.items()
    }
    return Config(seed=seed, profile=name, **sections)


def _build_section(prefix: str, cls: type, raw: Any) -> Any:
    raw = _as_mapping(prefix, raw)
    _check_keys(prefix, raw, tuple(f.name for f in dataclasses.fields(cls)), what="key")
    try:
        return cls(**raw)
    except ConfigError as error:
        raise error.within(prefix) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, which plain YAML loading resolves silently to the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merge keys may be overridden on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Mapping | list):
                continue  # unhashable; the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(str(path), f"cannot read file ({error.strerror or error})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(str(path), f"invalid YAML{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), f"invalid YAML: {error}") from None
