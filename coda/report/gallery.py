"""Figure 6: rendered seed scenes and validated variations of each task family (TinyRenderer, CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coda.report.common import pyplot, save_figure
from coda.report.runs import RunResult, Runs

PER_FAMILY = 3  # variations shown per family, beside its seed scene
# the figure camera per family (`coda.sim.world.FIGURE_CAMERAS`): drawers face the robot, so their handles
# and open drawers show from behind it; the other families from the front
VIEWS = {"drawer": "rear"}
DEFAULT_VIEW = "front"


def gallery_scenes(run: RunResult | None, data_dir: str | Path, per_family: int = PER_FAMILY):
    """(family, label, SceneSpec): per family its first seed scene, then targeted scenes of validated modes
    (one per mode, most recent modes first); families without validated modes show generated scenes of any
    split, labelled by their split, so the figure never silently lacks a family."""
    from coda import data
    from coda.memory.store import load_snapshot, resolve_snapshot
    from coda.sim.scene import SceneSpec

    mem = None
    if run is not None and (run.path / "memory").is_dir():
        mem = load_snapshot(resolve_snapshot(run.path))
    families = run.run.get("families") if run else None
    families = families or list(data.FAMILIES)
    out = []
    for fam in families:
        seeds = data.seed_scenes(Path(data_dir), fam, limit=1)
        if seeds:
            out.append((fam, "seed scene", seeds[0]))
        if mem is None:
            continue
        rows = [r for r in mem.rows("scenes") if r["family"] == fam]
        chosen: list[tuple[str, str]] = []
        for mode in sorted(mem.modes("validated", fam), key=lambda m: -m.created_round):
            hit = next(
                (
                    r
                    for r in rows
                    if r["split"] == "targeted" and r["program_id"] == mode.generation_program_id
                ),
                None,
            )
            if hit:
                chosen.append((f"validated: {mode.factor}", hit["spec_json"]))
            if len(chosen) == per_family:
                break
        for r in rows:  # fill up with other generated scenes
            if len(chosen) >= per_family:
                break
            if r["split"] in ("targeted", "novel", "mutation", "transfer") and all(
                r["spec_json"] != s for _, s in chosen
            ):
                chosen.append((r["split"], r["spec_json"]))
        out += [(fam, label, SceneSpec.from_json(spec)) for label, spec in chosen]
    return out


def figure_view(family: str) -> str:
    """The figure camera that shows `family`'s scenes in Figure 6 (`VIEWS`)."""
    return VIEWS.get(family, DEFAULT_VIEW)


def render_scenes(scenes, data_dir: str | Path, image_size: int = 160) -> list[np.ndarray]:
    """Each scene after settling, seen by its family's figure camera (`figure_view`; the cameras of
    `coda.sim.world.FIGURE_CAMERAS` hold the whole arm and the workspace); one World, reloaded per scene."""
    from coda.sim.world import FIGURE_CAMERAS, World

    names = [name for name, _, _ in FIGURE_CAMERAS]
    world = World(data_dir, render=True, image_size=image_size)
    try:
        images = []
        for scene in scenes:
            world.load(scene)
            images.append(world.figure_cameras()[names.index(figure_view(scene.family))])
        return images
    finally:
        world.close()


def figure6_gallery(
    runs: Runs, out: Path, data_dir: str | Path = "data", image_size: int = 160
) -> list[Path]:
    """Validated variations: per family, a seed scene and targeted scenes of CoDA seed 0's validated modes,
    each panel labelled with its family, figure camera and what it shows."""
    plt = pyplot()
    picks = gallery_scenes(runs.seed_run("coda"), data_dir)
    images = render_scenes([s for _, _, s in picks], data_dir, image_size)
    cols = max(
        1, max((sum(1 for f, _, _ in picks if f == fam) for fam in {f for f, _, _ in picks}), default=1)
    )
    fams = sorted({f for f, _, _ in picks})
    fig, axes = plt.subplots(
        len(fams) or 1, cols, figsize=(2.2 * cols, 2.45 * max(1, len(fams))), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    for i, fam in enumerate(fams):
        items = [(lab, img) for (f, lab, _), img in zip(picks, images) if f == fam]
        for k, (lab, img) in enumerate(items):
            axes[i, k].imshow(img)
            axes[i, k].set_title(f"{fam}, {figure_view(fam)} view\n{lab}", fontsize=7)
    fig.suptitle("Figure 6: seed scenes and validated variations (CoDA seed 0 memory)", fontsize=9)
    return save_figure(fig, out, "figure6_gallery")
