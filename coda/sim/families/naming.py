"""Human-readable object names for instructions: nearest colour name + category noun."""

from __future__ import annotations

import numpy as np

from coda.sim import exact_math
from coda.sim.scene import ObjectSpec

COLOURS = {
    "red": (0.85, 0.15, 0.15),
    "green": (0.2, 0.7, 0.25),
    "blue": (0.15, 0.3, 0.85),
    "yellow": (0.9, 0.85, 0.2),
    "orange": (0.95, 0.55, 0.15),
    "purple": (0.55, 0.25, 0.7),
    "pink": (0.95, 0.55, 0.7),
    "white": (0.92, 0.92, 0.92),
    "grey": (0.5, 0.5, 0.5),
    "brown": (0.5, 0.32, 0.18),
    "teal": (0.15, 0.6, 0.6),
    "black": (0.12, 0.12, 0.12),
}
NOUNS = {
    "cube": "cube",
    "cuboid": "block",
    "cylinder": "cylinder",
    "sphere": "ball",
    "mug": "mug",
    "duck": "duck",
}


def colour_name(rgba) -> str:
    rgb = np.asarray(rgba[:3])
    return min(COLOURS, key=lambda k: exact_math.norm(rgb - np.array(COLOURS[k])))


def noun(category: str) -> str:
    if category in NOUNS:
        return NOUNS[category]
    if category.startswith("blob"):
        return "object"
    if category.startswith("drawer"):
        return "drawer"
    return category.replace("_", " ")


def describe(obj: ObjectSpec) -> str:
    return f"{colour_name(obj.rgba)} {noun(obj.category)}"
