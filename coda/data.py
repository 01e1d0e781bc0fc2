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

from coda.config.sections import FAMILIES
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import REGIMES, SUITES, regime, render_markdown
from coda.sim.scene import SceneSpec

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


def scene_rng(
    seed: int, family: str, split: str, index: int, attempt: int = 0, regime: str = "a"
) -> np.random.Generator:
    """The generator of one scene slot: independent of every other slot and of the worker that runs it
    (regime B's slots draw from streams of their own; regime A's are those of the release)."""
    fam = FAMILIES.index(family)
    key = [seed, fam, SPLIT_CODES[split], index, attempt] + ([REGIMES.index(regime)] if regime != "a" else [])
    return np.random.default_rng(np.random.SeedSequence(key))


@dataclass(frozen=True)
class SceneJob:
    family: str
    split: str
    index: int
    seed: int
    certify: bool = True
    regime: str = "a"  # the seed space and suites (coda.sim.families.ranges.regime)


def build_scene(job: SceneJob) -> dict[str, Any]:
    """Sample, validate/repair and certify one scene slot (runs in a worker)."""
    from coda.sim.validity import certify_scene

    family = REGISTRY[job.family]
    rejected = 0
    for attempt in range(MAX_ATTEMPTS):
        rng = scene_rng(job.seed, job.family, job.split, job.index, attempt, job.regime)
        with regime(job.regime):
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


def scene_file(data_dir: Path, family: str, split: str) -> Path:
    """Where a built data folder keeps one family's seed layouts (`split="seed"`) or one held-out suite."""
    if split == "seed":
        return Path(data_dir) / "seeds" / f"{family}.jsonl"
    return Path(data_dir) / "suites" / family / f"{split}.jsonl"


def seed_scenes(data_dir: Path, family: str, limit: int | None = None) -> list[SceneSpec]:
    return read_scenes(scene_file(data_dir, family, "seed"), limit)


def suite_scenes(data_dir: Path, family: str, suite: str, limit: int | None = None) -> list[SceneSpec]:
    return read_scenes(scene_file(data_dir, family, suite), limit)


def scene_jobs(
    seed: int, n_seed_layouts: int, suite_size: int, families: tuple[str, ...] = FAMILIES, regime: str = "a"
) -> list[SceneJob]:
    """Every scene slot of a build: seed layouts split over the families, then `suite_size` per suite."""
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    per_family = [
        n_seed_layouts // len(families) + (i < n_seed_layouts % len(families)) for i in range(len(families))
    ]
    r = {"regime": regime}
    jobs = [
        SceneJob(f, "seed", i, seed, **r) for f, n in zip(families, per_family, strict=True) for i in range(n)
    ]
    jobs += [SceneJob(f, s, i, seed, **r) for f in families for s in SUITES for i in range(suite_size)]
    return jobs


def _slot(job: SceneJob) -> str:
    return f"{job.family}/{job.split}/{job.index}"


def build(
    out: Path,
    *,
    seed: int = 0,
    n_seed_layouts: int = N_SEED_LAYOUTS,
    suite_size: int = SUITE_SIZE,
    families: tuple[str, ...] = FAMILIES,
    workers: int = 2,
    backend: str = "local",
    source: Path | None = None,
    regime: str = "a",
) -> dict[str, Any]:
    """Build `out/` (assets, seeds, suites, manifest). Written to a temporary folder, then renamed.

    With `source`, a built data folder of the same seed that holds every slot asked for (e.g. the full
    `data/`), the scenes and assets are taken from it instead of simulated: every slot is seeded on its own,
    so the files are the same bytes as a build from scratch.
    """
    from coda.sim.executor import make_executor

    out = Path(out)
    tmp = out.with_name(out.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    jobs = scene_jobs(seed, n_seed_layouts, suite_size, families, regime)
    if source is not None:
        rows = _rows_from(Path(source), jobs)
        shutil.copytree(Path(source) / "assets", tmp / "assets")
    else:
        ex = make_executor(backend, 1, timeout_s=600.0, retries=0)
        try:  # the catalog too is computed in a worker, which starts with the pinned libm
            res = ex.map(_build_assets_job, [(str(tmp), seed)], desc="building assets")[0]
        finally:
            ex.close()
        if not res.ok:
            raise RuntimeError(f"asset catalog failed: {res.error}")
        ex = make_executor(
            backend,
            workers,
            timeout_s=120.0,
            retries=1,
            initializer=_init_worker,
            initargs=(str(tmp),),
        )
        try:
            results = ex.map(build_scene, jobs, desc="building scenes")
        finally:
            ex.close()
        rows = []
        for job, res in zip(jobs, results, strict=True):
            if not res.ok:
                raise RuntimeError(f"scene {job} failed: {res.error}")
            rows.append({"slot": job.index, **res.value})
    manifest = _write_scenes(tmp, jobs, rows)
    manifest.update(seed=seed, n_seed_layouts=n_seed_layouts, suite_size=suite_size, families=list(families))
    if regime != "a":  # regime A's manifest is the release's, unchanged
        manifest["regime"] = regime
    manifest = dict(sorted(manifest.items()))
    manifest["files"] = _file_hashes(tmp)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return manifest


def _build_assets_job(args: tuple[str, int]) -> int:
    from coda.sim.assets import build_assets

    data_dir, seed = args
    return len(build_assets(Path(data_dir), seed=seed).rigid)


def _write_scenes(tmp: Path, jobs: list[SceneJob], rows: list[dict]) -> dict[str, Any]:
    """Write the seed and suite files of `rows` (one per job, rejected slots included); returns the
    manifest's counts, stats and rejected slots."""
    by_file: dict[tuple[str, str], list[dict]] = {}
    stats: Counter = Counter()
    rejected = []
    for job, row in zip(jobs, rows, strict=True):
        stats[f"{job.split}:{row['status']}"] += 1
        stats["draws_rejected"] += row["rejected_before"]
        if row["spec"] is None:
            rejected.append(_slot(job))
        else:
            by_file.setdefault((job.family, job.split), []).append(row)
    seed_hashes = {r["hash"] for (f, s), rs in by_file.items() if s == "seed" for r in rs}
    for (family, split), rs in sorted(by_file.items()):
        overlap = [r["hash"] for r in rs if r["hash"] in seed_hashes] if split != "seed" else []
        if overlap:
            raise RuntimeError(f"held-out {family}/{split} overlaps seed layouts: {overlap[:3]}")
        _write_jsonl(scene_file(tmp, family, split), rs)
    with regime(jobs[0].regime if jobs else "a"):  # the ranges the scenes were drawn from
        (tmp / "RANGES.md").write_text(render_markdown())
    return {
        "counts": {f"{f}/{s}": len(rs) for (f, s), rs in sorted(by_file.items())},
        "stats": dict(sorted(stats.items())),
        "rejected_slots": rejected,
    }


def _rows_from(source: Path, jobs: list[SceneJob]) -> list[dict]:
    """The rows of `jobs`' slots in the built folder `source` (rejected slots as the build records them)."""
    m = json.loads((source / "manifest.json").read_text())
    want = {(j.family, j.split) for j in jobs}
    seed = {j.seed for j in jobs}
    if seed != {m["seed"]}:
        raise ValueError(f"{source}: built with seed {m['seed']}, asked for {sorted(seed)}")
    found: dict[str, dict] = {}
    for family, split in want:
        path = scene_file(source, family, split)
        if path.is_file():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                found[f"{family}/{split}/{row['slot']}"] = row
    gone = {"spec": None, "hash": None, "status": "rejected", "rejected_before": MAX_ATTEMPTS, "trace": []}
    for slot in m.get("rejected_slots", []):
        found[slot] = {"slot": int(slot.rsplit("/", 1)[1]), **gone}
    missing = [_slot(j) for j in jobs if _slot(j) not in found]
    if missing:
        raise ValueError(f"{source}: does not hold {len(missing)} of the slots asked for, e.g. {missing[:3]}")
    return [found[_slot(j)] for j in jobs]


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def dvc_dir_md5(root: Path) -> str:
    """The directory hash DVC records for `root` in a .dvc file (md5 of its sorted file listing)."""
    entries = [{"md5": row[0], "relpath": name} for name, row in file_listing(root).items()]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"


# -- the released data/: what data.dvc records, and how a rebuild compares with it ----------------------
def file_listing(root: Path) -> dict[str, list]:
    """Every file under `root`: [md5, bytes, lines], the record `coda data ensure` compares a rebuild with."""
    out = {}
    for p in sorted(Path(root).rglob("*"), key=lambda q: q.relative_to(root).as_posix()):
        if p.is_file():
            raw = p.read_bytes()
            out[p.relative_to(root).as_posix()] = [hashlib.md5(raw).hexdigest(), len(raw), raw.count(b"\n")]
    return out


def compare_listing(expected: dict[str, list], got: dict[str, list]) -> list[str]:
    """One line per file that is missing, extra or different, saying how (bytes and lines)."""
    lines = []
    for name in sorted(set(expected) | set(got)):
        e, g = expected.get(name), got.get(name)
        if e is None:
            lines.append(f"{name}: not in the release ({g[1]:,} bytes, {g[2]:,} lines)")
        elif g is None:
            lines.append(f"{name}: missing ({e[1]:,} bytes, {e[2]:,} lines in the release)")
        elif e[0] != g[0]:
            lines.append(
                f"{name}: different content, {g[1]:,} bytes and {g[2]:,} lines "
                f"(release: {e[1]:,} bytes, {e[2]:,} lines)"
            )
    return lines


class _Row(list):
    """A list YAML writes on one line (a file's [md5, bytes, lines])."""


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(
        _Row, lambda d, row: d.represent_sequence("tag:yaml.org,2002:seq", row, flow_style=True)
    )
    return Dumper


def record_release(dvc_file: Path, data_dir: Path) -> None:
    """Write `data_dir`'s file listing and build sizes into `dvc_file`'s `meta` (DVC keeps it as is).

    The listing is grouped by folder, one file per line, short enough that DVC's own rewrites leave it alone."""
    import yaml

    doc = yaml.safe_load(Path(dvc_file).read_text())
    manifest = json.loads((Path(data_dir) / "manifest.json").read_text())
    folders: dict[str, dict[str, _Row]] = {}
    for name, row in file_listing(data_dir).items():
        folder, _, base = name.rpartition("/")
        folders.setdefault(folder or ".", {})[base] = _Row(row)
    doc["meta"] = {
        "build": {k: manifest[k] for k in ("seed", "n_seed_layouts", "suite_size", "families")},
        "files": folders,
    }
    Path(dvc_file).write_text(yaml.dump(doc, Dumper=_dumper(), sort_keys=False, width=200))


def release_listing(doc: dict) -> dict[str, list]:
    """The file listing (path -> [md5, bytes, lines]) that `record_release` wrote into a .dvc document."""
    folders = (doc.get("meta") or {}).get("files") or {}
    return {
        (f"{d}/{n}" if d != "." else n): list(row) for d, rows in folders.items() for n, row in rows.items()
    }
