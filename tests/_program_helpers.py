"""Shared by the program tests (`test_program_schema.py`, `test_program_interpreter.py`,
`test_program_properties.py`): seed scenes and generation programs (the asset catalog is conftest's
`catalog` fixture)."""

import copy

import numpy as np

from coda.sim.families import REGISTRY
from coda.sim.scene import SceneSpec


def seed_scene(catalog, family: str, seed: int = 0) -> SceneSpec:
    return REGISTRY[family].sample(np.random.default_rng(seed), catalog, "seed")


def mass_program(**extra) -> dict:
    return {
        "kind": "generation",
        "family": "pick_place",
        "operations": [{"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]}],
        **extra,
    }


RICH = {
    "kind": "generation",
    "version": 1,
    "family": "pick_place",
    "mode": "pick_place/lift/mass",
    "source": "template",
    "perturbs": "mass",
    "roles": {"target": {"requires": {"movable": True, "graspable": True}}},
    "operations": [
        {"op": "sample", "role": "target", "attribute": "mass", "range": [0.5, 0.8]},
        {"op": "set", "role": "target", "attribute": "yaw", "value": 1.2},
        {"op": "scale", "role": "target", "attribute": "scale", "by": 1.3},
        {"op": "shift", "role": "target", "attribute": "position", "by": [0.05, -0.1]},
        {"op": "sample", "attribute": "instruction"},
    ],
    "constraints": [{"relation": "min_distance", "roles": ["target", "container"], "value": 0.15}],
}


def gen(**patch):
    """RICH with some top-level fields replaced."""
    doc = copy.deepcopy(RICH)
    doc.update(patch)
    return doc
