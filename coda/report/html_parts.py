"""Small HTML pieces the report pages share: escaping, PNG data URIs, images, and the order of modes.

Kept apart from `coda.report.memory_report` (the page) so that `coda.report.keyframes` and
`coda.report.failure_images`, which the page uses, can use them too without importing the page.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

FAILURES_PER_MODE = 3  # example failures per difficulty mode on the page


def esc(value: Any) -> str:
    """HTML-escaped text of `value` (quotes too, so that it is safe in attributes); None is a dash."""
    return "\u2014" if value is None else html.escape(str(value), quote=True)


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def array_uri(image) -> str:
    """An (H, W, 3) uint8 image as a PNG data URI."""
    from matplotlib import image as mpimage

    buf = io.BytesIO()
    mpimage.imsave(buf, image, format="png", metadata={"Software": None})
    return png_uri(buf.getvalue())


def array_img(image, alt: str) -> str:
    return f'<img class="scene" alt="{esc(alt)}" src="{array_uri(image)}">'


def sorted_modes(mem) -> list:
    """The modes, validated first, then by importance (highest first), then by id."""
    return sorted(mem.modes(), key=lambda m: (m.status != "validated", -(m.importance or 0.0), m.mode_id))
