"""Deterministic asset catalog: rigid objects from pybullet_data plus primitives, and procedurally
generated articulated objects (cabinets with drawers, hinged doors, lidded boxes).

The paper uses 1,200 rigid and 300 articulated objects. Here:

* **rigid** (>= 1,200): the pybullet_data ``random_urdfs`` meshes (mesh scale 0.015 as in their URDFs;
  five unusable ones -- NaN or sub-4 mm thick -- are listed under ``excluded`` in catalog.json), each
  reduced to a simplified convex hull of at most 48 vertices (loading the stock multi-part meshes steps
  about 2x slower); seeded primitives (cubes, cuboids, cylinders, spheres) sized for a Franka gripper
  (max opening 0.08 m); and a handful of pybullet_data objects (mug, duck, teddy, ball, lego, domino,
  toy shapes), also as simplified hulls of their collision meshes.
  Hulls are stored in a **resting pose**: rotated so that, set down with identity or yaw-only
  orientation, they rest on a stable facet (flat blobs lie flat instead of standing on edge; the mug,
  duck, lego and ball keep their upright pose) with the footprint axis aligned, x the longer side.
  ``visual_orientation`` / ``visual_offset`` place the visual mesh accordingly. Every rigid asset's
  frame (and centre of mass) is the centre of its axis-aligned bounding box.
* **articulated** (>= 300): URDFs written here from boxes only (cheap to step). Cabinets face local -x
  (towards a robot at the origin when placed at +x with yaw 0). The base link ``carcass`` has its frame at
  the centre of the carcass's bottom face, so the cabinet stands on whatever surface ``position`` is on.
  Every movable part has a fixed child link ``handle_<i>`` in front of it: drawers carry a vertical bar
  (taken from above with the fingers closing along y), doors and lids a horizontal bar along the handle
  link's y axis, each held by two posts 3.5-5 cm in front of the part (lids: of the box front).
  ``handle_local`` is the grasp point in the handle link frame (drawers: near the bar's top; otherwise
  the bar centre); every grasp point is 0.06-0.40 m above the carcass bottom when closed, at scale 1.
  Closed = lower joint limit = 0. Doors and lids are inset in the carcass, so the closed assembly
  (handles excepted) lies within ``footprint``.

``build_assets`` writes ``<data_dir>/assets/catalog.json`` and ``<data_dir>/assets/articulated/*.urdf``,
byte-identical for the same seed. ``load_catalog`` validates it.

Spawning notes: collision (and visual) shapes are cached per (client, asset, scale). After
``p.resetSimulation`` on a client call :func:`clear_caches` for that client, since pybullet forgets the
shapes. ``spawn_articulated`` uses ``globalScaling``; pybullet scales prismatic joint limits with it
(revolute limits are angles and are unchanged).

Layout: `catalog` (records and schema constants), `geometry` (hulls and resting poses), `rigid` and
`articulated` (asset generation; `urdf` writes the URDFs), `build` and `load` (catalog.json), `spawn`
(pybullet). This package re-exports their public names, and the private helpers the tests reach.
"""

from coda.sim.assets.articulated import HANDLE_Z_RANGE, N_ARTICULATED
from coda.sim.assets.catalog_build import build_assets
from coda.sim.assets.catalog import (
    CATALOG_SCHEMA,
    JOINT_TYPES,
    MAX_HULL_VERTICES,
    RIGID_SOURCES,
    SHAPES,
    ArticulatedAsset,
    Catalog,
    RigidAsset,
)
from coda.sim.assets.geometry import MIN_TIPPING_ANGLE, resting_rotation, simplify_hull
from coda.sim.assets.geometry import _matrix_from_quat as _matrix_from_quat
from coda.sim.assets.geometry import _read_obj_vertices as _read_obj_vertices
from coda.sim.assets.load import load_catalog
from coda.sim.assets.rigid import (
    DENSITY,
    ELONGATED_RATIO,
    FLAT_RATIO,
    HULL_GRID,
    MASS_RANGE,
    MIN_THICKNESS,
    N_PRIMITIVES,
    PYBULLET_OBJECTS,
    RANDOM_URDF_SCALE,
    blob_category,
)
from coda.sim.assets.rigid import _hull_asset as _hull_asset
from coda.sim.assets.spawn import _COLLISION_CACHE as _COLLISION_CACHE
from coda.sim.assets.spawn import (
    ROLLING_FRICTION,
    SPINNING_FRICTION,
    clear_caches,
    link_index,
    spawn_articulated,
    spawn_rigid,
)

__all__ = [
    "CATALOG_SCHEMA",
    "DENSITY",
    "ELONGATED_RATIO",
    "FLAT_RATIO",
    "HANDLE_Z_RANGE",
    "HULL_GRID",
    "JOINT_TYPES",
    "MASS_RANGE",
    "MAX_HULL_VERTICES",
    "MIN_THICKNESS",
    "MIN_TIPPING_ANGLE",
    "N_ARTICULATED",
    "N_PRIMITIVES",
    "PYBULLET_OBJECTS",
    "RANDOM_URDF_SCALE",
    "RIGID_SOURCES",
    "ROLLING_FRICTION",
    "SHAPES",
    "SPINNING_FRICTION",
    "ArticulatedAsset",
    "Catalog",
    "RigidAsset",
    "blob_category",
    "build_assets",
    "clear_caches",
    "link_index",
    "load_catalog",
    "resting_rotation",
    "simplify_hull",
    "spawn_articulated",
    "spawn_rigid",
]
