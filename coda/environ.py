"""`scoped_environ`: set environment variables for the span of a ``with`` block (for what reads them at that
moment: a process being spawned, a library being loaded), then restore them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_environ(extra: dict[str, str]) -> Iterator[None]:
    """`os.environ` with `extra` set, restored afterwards (a variable that was unset is removed again)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
