"""The simulator domains the co-evolution loop runs over: each implements `coda.coevolve.domain.Domain`.

* ``pybullet`` — `coda.domains.pybullet.PyBulletDomain`: the four PyBullet task families (`coda.sim`);
* ``libero`` — `coda.domains.libero.domain.LiberoDomain`: LIBERO-Pro source tasks (`coda.sim.libero`, the
  ``[libero]`` extra), with its worker jobs in `coda.domains.libero.episodes`.

The registry names each domain's class by module path and the factory imports it when asked, so the loop
(`coda.coevolve`) reaches a simulator only through the domain it is given: importing this package loads no
simulator.

Example:
    >>> domain_class("pybullet").__name__
    'PyBulletDomain'
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DOMAINS", "domain_class", "make_domain"]

# name -> (module, class): the module is imported on first use
DOMAINS: dict[str, tuple[str, str]] = {
    "pybullet": ("coda.domains.pybullet", "PyBulletDomain"),
    "libero": ("coda.domains.libero.domain", "LiberoDomain"),
}


def domain_class(name: str) -> type:
    """The `Domain` implementation registered as `name` (ValueError naming the known ones otherwise)."""
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; expected one of {sorted(DOMAINS)}")
    module, cls = DOMAINS[name]
    return getattr(importlib.import_module(module), cls)


def make_domain(name: str, *args: Any, **kwargs: Any) -> Any:
    """An instance of the domain registered as `name`, built with its own constructor's arguments."""
    return domain_class(name)(*args, **kwargs)
