"""Counts of a memory overall and per family: `summarize` (in memory) and `inspect` (a verified snapshot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coda.memory.shared_memory import Memory
from coda.memory.snapshots import load_snapshot, read_manifest, resolve_snapshot

__all__ = ["inspect", "summarize"]


def inspect(path: str | Path) -> dict[str, Any]:
    """Verified summary of a snapshot (counts overall and per family); `path` as in `resolve_snapshot`."""
    snap = resolve_snapshot(path)
    manifest = read_manifest(snap)
    return {
        "path": str(snap),
        "round": manifest["round"],
        **summarize(load_snapshot(snap)),
        "extra": manifest["extra"],
    }


def summarize(mem: Memory) -> dict[str, Any]:
    """Counts overall and per family of an in-memory `Memory` (what `inspect` reports for a snapshot)."""
    scenes, diags, modes = mem.rows("scenes"), mem.rows("diagnoses"), mem.rows("modes")
    programs = mem.programs()
    families = sorted(
        {r["family"] for t in ("scenes", "rollouts", "diagnoses", "modes") for r in mem.rows(t)}
    )
    per_family = {
        f: {
            "scenes": sum(r["family"] == f for r in scenes),
            "rollouts": sum(r["family"] == f for r in mem.rows("rollouts")),
            "diagnoses": sum(r["family"] == f for r in diags),
            "rejected_diagnoses": sum(r["family"] == f and r["status"] == "rejected" for r in diags),
            "modes": sum(r["family"] == f for r in modes),
            "validated_modes": sum(r["family"] == f and r["status"] == "validated" for r in modes),
        }
        for f in families
    }
    return {
        "scenes": len(scenes),
        "rollouts": len(mem.rows("rollouts")),
        "diagnoses": len(diags),
        "rejected_diagnoses": sum(r["status"] == "rejected" for r in diags),
        "modes": len(modes),
        "validated_modes": sum(r["status"] == "validated" for r in modes),
        "rejected_modes": sum(r["status"] == "rejected" for r in modes),
        "generation_programs": sum(d["kind"] == "generation" for d in programs.values()),
        "training_programs": sum(d["kind"] == "training" for d in programs.values()),
        "scenes_without_lineage": len(mem.scenes_without_lineage()),
        "families": per_family,
    }
