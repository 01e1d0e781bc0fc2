"""Figure 6: rendered seed scenes and validated variations of each task family (TinyRenderer, CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coda.report.runs import RunResult

PER_FAMILY = 3  # variations shown per family, beside its seed scene


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


def render_scenes(scenes, data_dir: str | Path, image_size: int = 160) -> list[np.ndarray]:
    """The front camera image of each scene after settling (one World, reloaded per scene)."""
    from coda.sim.world import World

    world = World(data_dir, render=True, image_size=image_size)
    try:
        images = []
        for scene in scenes:
            world.load(scene)
            images.append(world.cameras()[0])
        return images
    finally:
        world.close()
