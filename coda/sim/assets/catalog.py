"""Catalog records: `RigidAsset`, `ArticulatedAsset`, the `Catalog` that indexes them, and the schema
constants (sources, shapes, joint types, hull size) that building and loading share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

CATALOG_SCHEMA = 1

MAX_HULL_VERTICES = 48

RIGID_SOURCES = ("random_urdfs", "primitive", "pybullet_objects")
SHAPES = ("hull", "box", "cylinder", "sphere")
JOINT_TYPES = ("prismatic", "revolute")


@dataclass(frozen=True)
class RigidAsset:
    asset_id: str
    source: str
    category: str
    shape: str
    dims: tuple[float, ...]
    hull_vertices: tuple[tuple[float, float, float], ...]
    half_extents: tuple[float, float, float]
    visual_mesh: str | None
    visual_mesh_scale: float
    visual_offset: tuple[float, float, float]
    default_mass: float
    # Rotation (quaternion x, y, z, w) from the visual mesh's own frame to the object frame. Hull assets
    # are turned into a stable resting pose; the visual mesh is placed by this rotation, then offset.
    visual_orientation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True)
class ArticulatedAsset:
    asset_id: str
    category: str
    urdf: str
    joint_type: str
    n_movable: int
    movable_joints: tuple[str, ...]
    handle_links: tuple[str, ...]
    joint_limits: tuple[tuple[float, float], ...]
    handle_local: tuple[tuple[float, float, float], ...]
    footprint: tuple[float, float, float]


@dataclass(frozen=True)
class Catalog:
    rigid: tuple[RigidAsset, ...]
    articulated: tuple[ArticulatedAsset, ...]
    _index: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        index: dict[str, RigidAsset | ArticulatedAsset] = {}
        for a in (*self.rigid, *self.articulated):
            if a.asset_id in index:
                raise ValueError(f"{a.asset_id}: duplicate asset_id")
            index[a.asset_id] = a
        object.__setattr__(self, "_index", index)

    def by_id(self, asset_id: str) -> RigidAsset | ArticulatedAsset:
        try:
            return self._index[asset_id]
        except KeyError:
            raise KeyError(f"unknown asset id {asset_id!r}") from None

    def rigid_in(self, categories: str | Iterable[str]) -> tuple[RigidAsset, ...]:
        cats = {categories} if isinstance(categories, str) else set(categories)
        return tuple(a for a in self.rigid if a.category in cats)

    def categories(self) -> dict[str, list[str]]:
        return {
            "articulated": sorted({a.category for a in self.articulated}),
            "rigid": sorted({a.category for a in self.rigid}),
        }


def _r(x: float, nd: int = 5) -> float:
    """Round for storage; never emits -0.0."""
    v = round(float(x), nd)
    return 0.0 if v == 0.0 else v
