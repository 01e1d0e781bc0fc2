"""`coda render SCENE --out x.png`: a scene after settling, seen by the two figure cameras (front and rear,
`coda.sim.world.FIGURE_CAMERAS`: the whole arm and the workspace), as one PNG with a label over each view.

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


def caption(image: np.ndarray, text: str) -> np.ndarray:
    """`image` (H, W, 3) uint8 under a light grey band holding `text` (Pillow's default font, shrunk until it
    fits the width): (H + `band_height(H)`, W, 3)."""
    from PIL import Image, ImageDraw, ImageFont

    h, w = image.shape[:2]
    band = band_height(h)
    canvas = Image.new("RGB", (w, h + band), (232, 232, 232))
    canvas.paste(Image.fromarray(np.ascontiguousarray(image)), (0, band))
    draw = ImageDraw.Draw(canvas)
    size = band - 3
    font = ImageFont.load_default(size=size)
    while size > 6 and draw.textlength(text, font=font) > w - 4:
        size -= 1
        font = ImageFont.load_default(size=size)
    draw.text((2, band / 2), text, fill=(0, 0, 0), font=font, anchor="lm")
    return np.asarray(canvas)


def band_height(image_height: int) -> int:
    """Pixels of the label band over an image `image_height` tall: a tenth of it, at least 12."""
    return max(12, round(image_height * 0.1))


def labelled_views(views: np.ndarray, labels: list[str]) -> np.ndarray:
    """Views (N, H, W, 3) side by side, each under its label (`caption`): (H + band, N * W, 3) uint8."""
    return np.concatenate([caption(v, label) for v, label in zip(views, labels, strict=True)], axis=1)


def view_names() -> list[str]:
    """The figure cameras' names, in the order `World.figure_cameras` returns their views."""
    from coda.sim.world import FIGURE_CAMERAS

    return [name for name, _, _ in FIGURE_CAMERAS]


def render_views(scene, data_dir: str | Path, image_size: int = 320, label: str | None = None) -> np.ndarray:
    """The figure cameras' views of `scene` after it settled, side by side, each under a label: ``<label>,
    <view> view`` (default label: the scene's family and hash). (H + band, 2W, 3) uint8."""
    from coda.sim.world import World

    world = World(data_dir, render=True, image_size=image_size)
    try:
        world.load(scene)
        views = world.figure_cameras()
    finally:
        world.close()
    label = f"{scene.family} {scene.hash}" if label is None else label
    return labelled_views(views, [f"{label}, {name} view" for name in view_names()])


def render_scene(what: str, out: str | Path, data_dir: str | Path = "data", image_size: int = 320) -> Path:
    """Write the labelled views of the scene `what` names to `out` (PNG); returns the path."""
    from matplotlib import image

    scene = resolve_scene(what, data_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.imsave(out, render_views(scene, data_dir, image_size), format="png", metadata={"Software": None})
    return out
