"""`coda data build`: the asset catalog, planner-certified seed layouts and the held-out evaluation suites.

Everything under `data/` is a deterministic function of the build seed: every scene is drawn from its
own generator (seeded from the base seed, family, split and index), checked and repaired in a freshly
spawned world, and certified by the family's scripted planner, so the files are byte-identical whatever
the number of workers. `data/` is tracked by `data.dvc`; `coda data ensure` pulls it from the DVC remote
or rebuilds it and checks the result against the hash recorded in `data.dvc`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.sim.families import REGISTRY
from coda.sim.families.ranges import SUITES, render_markdown
from coda.sim.scene import SceneSpec

FAMILIES = ("pick_place", "stack", "drawer", "push")
N_SEED_LAYOUTS = 500  # paper: 500 seed layouts (split evenly across the four families)
SUITE_SIZE = 100  # paper: four held-out suites of 100 environments per family
MAX_ATTEMPTS = 6  # draws per scene slot before it is left empty (rejected scenes are counted)
SPLIT_CODES = {"seed": 0, "generator": 1, "instances": 2, "layouts": 3, "tasks": 4, "categories": 5}

_WORLD = None


def _init_worker(data_dir: str, world_kwargs: dict | None = None) -> None:
    """Executor initializer: one simulator world per worker process, reused by every job it runs."""
    global _WORLD
    from coda.sim.world import World

    _WORLD = World(data_dir, **(world_kwargs or {}))


def scene_rng(seed: int, family: str, split: str, index: int, attempt: int = 0) -> np.random.Generator:
    """The generator of one scene slot: independent of every other slot and of the worker that runs it."""
    fam = FAMILIES.index(family)
    return np.random.default_rng(np.random.SeedSequence([seed, fam, SPLIT_CODES[split], index, attempt]))


@dataclass(frozen=True)
class SceneJob:
    family: str
    split: str
    index: int
    seed: int
    certify: bool = True


def build_scene(job: SceneJob) -> dict[str, Any]:
    """Sample, validate/repair and certify one scene slot (runs in a worker)."""
    from coda.sim.validity import certify_scene

    family = REGISTRY[job.family]
    rejected = 0
    for attempt in range(MAX_ATTEMPTS):
        rng = scene_rng(job.seed, job.family, job.split, job.index, attempt)
        spec = family.sample(rng, _WORLD.catalog, job.split)
        report, demo = certify_scene(_WORLD, spec, rng, plan=job.certify)
        if report.scene is not None and (demo is None or demo.success):
            return {
                "spec": report.scene.to_dict(),
                "hash": report.scene.hash,
                "status": report.status,
                "repairs": report.repairs,
                "rejected_before": rejected,
                "attempt": attempt,
                "planner_steps": None if demo is None else demo.steps,
                "trace": report.trace,
            }
        rejected += 1
    return {"spec": None, "hash": None, "status": "rejected", "rejected_before": rejected, "trace": []}


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_scenes(path: Path, limit: int | None = None) -> list[SceneSpec]:
    """Scenes of a seed or suite file (the first `limit`), validated on load."""
    out = []
    with open(path) as f:
        for line in f:
            if limit is not None and len(out) >= limit:
                break
            row = json.loads(line)
            out.append(SceneSpec.from_dict(row["spec"]))
    return out


def seed_scenes(data_dir: Path, family: str, limit: int | None = None) -> list[SceneSpec]:
    return read_scenes(Path(data_dir) / "seeds" / f"{family}.jsonl", limit)


def suite_scenes(data_dir: Path, family: str, suite: str, limit: int | None = None) -> list[SceneSpec]:
    return read_scenes(Path(data_dir) / "suites" / family / f"{suite}.jsonl", limit)


def build(
    out: Path,
    *,
    seed: int = 0,
    n_seed_layouts: int = N_SEED_LAYOUTS,
    suite_size: int = SUITE_SIZE,
    families: tuple[str, ...] = FAMILIES,
    workers: int = 2,
    backend: str = "local",
) -> dict[str, Any]:
    """Build `out/` (assets, seeds, suites, manifest). Written to a temporary folder, then renamed."""
    from coda.sim.assets import build_assets
    from coda.sim.executor import make_executor

    out = Path(out)
    tmp = out.with_name(out.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    build_assets(tmp, seed=seed)
    per_family = [
        n_seed_layouts // len(families) + (i < n_seed_layouts % len(families)) for i in range(len(families))
    ]
    jobs = [SceneJob(f, "seed", i, seed) for f, n in zip(families, per_family, strict=True) for i in range(n)]
    jobs += [SceneJob(f, s, i, seed) for f in families for s in SUITES for i in range(suite_size)]
    ex = make_executor(
        backend, workers, timeout_s=120.0, retries=1, initializer=_init_worker, initargs=(str(tmp),)
    )
    try:
        results = ex.map(build_scene, jobs, desc="building scenes")
    finally:
        ex.close()
    rows: dict[tuple[str, str], list[dict]] = {}
    stats: Counter = Counter()
    for job, res in zip(jobs, results, strict=True):
        if not res.ok:
            raise RuntimeError(f"scene {job} failed: {res.error}")
        row = res.value
        stats[f"{job.split}:{row['status']}"] += 1
        stats["draws_rejected"] += row["rejected_before"]
        if row["spec"] is not None:
            rows.setdefault((job.family, job.split), []).append(row)
    seed_hashes = {r["hash"] for (f, s), rs in rows.items() if s == "seed" for r in rs}
    for (family, split), rs in sorted(rows.items()):
        if split == "seed":
            _write_jsonl(tmp / "seeds" / f"{family}.jsonl", rs)
        else:
            overlap = [r["hash"] for r in rs if r["hash"] in seed_hashes]
            if overlap:
                raise RuntimeError(f"held-out {family}/{split} overlaps seed layouts: {overlap[:3]}")
            _write_jsonl(tmp / "suites" / family / f"{split}.jsonl", rs)
    (tmp / "RANGES.md").write_text(render_markdown())
    manifest = {
        "seed": seed,
        "n_seed_layouts": n_seed_layouts,
        "suite_size": suite_size,
        "families": list(families),
        "counts": {f"{f}/{s}": len(rs) for (f, s), rs in sorted(rows.items())},
        "stats": dict(sorted(stats.items())),
        "files": _file_hashes(tmp),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return manifest


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def dvc_dir_md5(root: Path) -> str:
    """The directory hash DVC records for `root` in a .dvc file (md5 of its sorted file listing)."""
    entries = [
        {"md5": hashlib.md5(p.read_bytes()).hexdigest(), "relpath": p.relative_to(root).as_posix()}
        for p in sorted(Path(root).rglob("*"), key=lambda q: q.relative_to(root).as_posix())
        if p.is_file()
    ]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"
