"""The one progress-bar helper: tqdm on a terminal, silent in logs, CI and when CODA_NO_PROGRESS=1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

# not tqdm.auto: bars show on a terminal only, and tqdm.auto warns in a Jupyter kernel without ipywidgets
from tqdm import tqdm


def enabled() -> bool:
    if os.environ.get("CODA_NO_PROGRESS", "") == "1":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    """A tqdm bar (a disabled one still supports `update` and `close`)."""
    return tqdm(
        iterable,
        total=total,
        desc=desc or None,
        unit=unit,
        dynamic_ncols=True,
        leave=False,
        disable=not enabled(),
    )
