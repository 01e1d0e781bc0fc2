"""The registry of action-chunk backbones: policy name -> `ChunkPolicy` subclass.

It is a module of its own, importing nothing of the package, so that the base class can look a
checkpoint's class up (`ChunkPolicy.from_pretrained`) without importing the backbone modules that
subclass it. Each backbone module enters its class with the `register_policy` decorator when it is
imported; the package ``__init__`` imports them all (``flow``, then ``regression``), and Python runs that
``__init__`` before any submodule, so the registry is complete whichever module a caller imports.
"""

from __future__ import annotations

from typing import TypeVar

PolicyClass = TypeVar("PolicyClass", bound=type)

# values are ChunkPolicy subclasses (annotated as `type` because this module must not import the base)
POLICIES: dict[str, type] = {}


def register_policy(cls: PolicyClass) -> PolicyClass:
    """Class decorator: enter a `ChunkPolicy` subclass in `POLICIES` under its ``name``; returns it."""
    POLICIES[cls.name] = cls
    return cls
