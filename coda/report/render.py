"""`coda render SCENE --out x.png`: a scene's two camera views (front and side, after settling) as one PNG.

SCENE is a scene spec (a JSON file written by `SceneSpec.to_json`, or the JSON text itself), a seed scene of
`data/` named ``FAMILY/N`` (its N-th seed layout), or a scene hash found among the seed scenes and held-out
suites of `data/`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from coda.errors import UserError


def resolve_scene(what: str, data_dir: str | Path):
    """The `SceneSpec` that `what` names (see the module docstring); `UserError` naming it otherwise."""
    from coda import data
    from coda.sim.scene import SceneSpec, SceneSpecError

    path = Path(what)
    text = path.read_text() if path.is_file() else what if what.lstrip().startswith("{") else None
    if text is not None:
        try:
            return SceneSpec.from_json(text)
        except (SceneSpecError, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise UserError(f"{what}: not a scene spec ({err})") from None
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(
            f"{what}: not a spec file, and {data_dir}/ is missing to look it up (coda data ensure)"
        )
    family, _, index = what.partition("/")
    if family in data.FAMILIES and index.isdigit():
        scenes = data.seed_scenes(data_dir, family)
        if int(index) >= len(scenes):
            raise UserError(f"{what}: {family} has {len(scenes)} seed scenes in {data_dir}/")
        return scenes[int(index)]
    for fam in data.FAMILIES:
        pools = [data.seed_scenes(data_dir, fam)]
        pools += [
            data.suite_scenes(data_dir, fam, s)
            for s in data.SUITES
            if data.scene_file(data_dir, fam, s).is_file()
        ]
        for scene in (s for pool in pools for s in pool):
            if scene.hash == what:
                return scene
    raise UserError(f"{what}: no such scene (a spec file, FAMILY/N or a scene hash of {data_dir}/)")


def render_views(scene, data_dir: str | Path, image_size: int = 320) -> np.ndarray:
    """(H, 2W, 3) uint8: the front and side cameras of `scene` after it settled, side by side."""
    from coda.sim.world import World

    world = World(data_dir, render=True, image_size=image_size)
    try:
        world.load(scene)
        front, side = world.cameras()
    finally:
        world.close()
    return np.concatenate([front, side], axis=1)


def render_scene(what: str, out: str | Path, data_dir: str | Path = "data", image_size: int = 320) -> Path:
    """Write the two views of the scene `what` names to `out` (PNG); returns the path."""
    from matplotlib import image

    scene = resolve_scene(what, data_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.imsave(out, render_views(scene, data_dir, image_size), format="png", metadata={"Software": None})
    return out
