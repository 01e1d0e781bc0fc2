"""Field checks of ``params.yaml``: :class:`ConfigError` and the helpers that raise it.

Each ``_check_*`` helper returns the (normalised) value or raises :class:`ConfigError` naming the key, in one
line; the section dataclasses (`coda.config.sections`, `coda.config.coevolve`) call them from their
``__post_init__``, and the loaders (`coda.config.loading`, `coda.config.experiments`) use the mapping and
key checks. Nothing here knows about any particular section.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


class ConfigError(ValueError):
    """A problem in the parameters, located by its dotted key path; ``str()`` is ``"<key_path>: <message>"``."""

    def __init__(self, key_path: str, message: str):
        self.key_path = key_path
        self.message = " ".join(message.split())  # always a single line
        super().__init__(f"{key_path}: {self.message}")

    def within(self, prefix: str) -> ConfigError:
        """The same error located under ``prefix``: ``workers`` becomes ``profiles.cpu.sim.workers``."""
        return ConfigError(_join(prefix, self.key_path), self.message)


def _got(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return f"{value!r} ({type(value).__name__})"


def _check_int(key: str, value: Any, minimum: int | None = None) -> int:
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise ConfigError(key, f"expected an integer{bound}, got {_got(value)}")
    return value


def _check_float(key: str, value: Any, above: float | None = None) -> float:
    """A finite number (ints accepted and converted), strictly greater than ``above`` when given."""
    bound = "" if above is None else f" > {above:g}"
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or (above is not None and value <= above):
        hint = ""
        if isinstance(value, str) and _parses_as_float(value):
            hint = " (YAML 1.1 reads exponent floats without a dot as strings: write 1.0e-4, not 1e-4)"
        raise ConfigError(key, f"expected a finite number{bound}, got {_got(value)}{hint}")
    return float(value)


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"expected true or false, got {_got(value)}")
    return value


def _check_choice(key: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        got = repr(value) if isinstance(value, str) else _got(value)
        raise ConfigError(key, f"expected one of {', '.join(map(repr, choices))}, got {got}")
    return value


def _check_choices(key: str, value: Any, choices: Iterable[str]) -> tuple[str, ...]:
    """A non-empty list of distinct values from ``choices``, returned as a tuple (hashable, immutable)."""
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(key, f"expected a non-empty list, got {_got(value)}")
    for i, item in enumerate(value):
        _check_choice(f"{key}[{i}]", item, choices)
        if item in value[:i]:
            raise ConfigError(f"{key}[{i}]", f"duplicate entry {item!r}")
    return tuple(value)


def _check_optional_str(key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(key, f"expected a non-empty string or null, got {_got(value)}")
    return value


def _check_keys(prefix: str, mapping: Mapping, expected: tuple[str, ...], what: str) -> None:
    for key in mapping:
        if key not in expected:
            raise ConfigError(_join(prefix, key), f"unknown {what}; expected one of: {', '.join(expected)}")
    for key in expected:
        if key not in mapping:
            raise ConfigError(_join(prefix, key), f"missing {what}")


def _as_mapping(key: str, value: Any) -> Mapping:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a mapping, got {_got(value)}")
    return value


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)
