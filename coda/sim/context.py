"""What a loaded scene hands to the code above the world: the spawned objects (`Body`) and the geometry
fixed at load time that predicates, planners and features read (`SceneContext`, JSON-serialisable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Body:
    """A spawned scene object and the geometry predicates need."""

    uid: int
    half_extents: np.ndarray  # scaled AABB half sizes in the object frame
    fixed: bool = False
    movable_joints: list[int] = field(default_factory=list)
    joint_limits: list[tuple[float, float]] = field(default_factory=list)
    handle_links: list[int] = field(default_factory=list)
    handle_local: list[np.ndarray] = field(default_factory=list)
    inner: np.ndarray | None = None  # containers: inner half sizes (x, y) and floor height


@dataclass
class SceneContext:
    """Geometry a predicate needs, fixed when a scene is loaded; JSON-serialisable via `to_dict`."""

    family: str
    variant: str
    bindings: dict[str, int]
    goal: tuple[float, ...]
    half_extents: np.ndarray  # (N, 3) scaled object half sizes
    init_pos: np.ndarray  # (N, 3) settled positions
    init_art_q: np.ndarray  # (K,) settled articulation joint positions
    joint_limits: np.ndarray  # (K, 2)
    inner: dict[int, np.ndarray] = field(default_factory=dict)  # containers: inner half x, y, floor z

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "variant": self.variant,
            "bindings": dict(self.bindings),
            "goal": list(self.goal),
            "half_extents": self.half_extents.tolist(),
            "init_pos": self.init_pos.tolist(),
            "init_art_q": self.init_art_q.tolist(),
            "joint_limits": self.joint_limits.tolist(),
            "inner": {str(k): v.tolist() for k, v in self.inner.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SceneContext:
        return cls(
            d["family"],
            d["variant"],
            dict(d["bindings"]),
            tuple(d["goal"]),
            np.array(d["half_extents"]),
            np.array(d["init_pos"]),
            np.array(d["init_art_q"]),
            np.array(d["joint_limits"]).reshape(-1, 2),
            {int(k): np.array(v) for k, v in d["inner"].items()},
        )

    @classmethod
    def from_world(cls, world) -> SceneContext:
        scene, st = world.scene, world.state()
        limits = [lim for b in world.bodies for lim in b.joint_limits]
        return cls(
            scene.task.family,
            scene.task.variant,
            dict(scene.task.bindings),
            tuple(scene.task.goal),
            np.array([b.half_extents for b in world.bodies]),
            st["obj_pos"].copy(),
            st["art_q"].copy(),
            np.array(limits, dtype=np.float64).reshape(-1, 2),
            {i: b.inner for i, b in enumerate(world.bodies) if b.inner is not None},
        )
