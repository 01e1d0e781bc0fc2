"""The dataset card (``README.md``) of a memory snapshot: every snapshot is a self-describing HF dataset.

`dataset_card` renders YAML front matter (``license``, ``pretty_name``, ``task_categories``, ``tags`` and one
``configs`` entry per Parquet table, ``modes`` the default, so ``datasets.load_dataset(dir, "modes")`` reads a
table directly) and a body: what the memory is, each table with its row count and a column table (name,
Arrow type, description: `COLUMN_DESCRIPTIONS`), how the snapshot was produced, how to load it, and a
citation. How it was produced comes from the manifest as written: its round and ``extra`` (method, seed,
profile) and ``extra["provenance"]`` (`PROVENANCE_KEY`), which the run recorded when it wrote the snapshot
(`coda.memory.store.snapshot_provenance`: git SHA, dirty flag, profile, resolved parameters and their
sha256); nothing is looked up when the card is rendered. The card is a pure function of the manifest (and of
the optional Hub provenance): no dates, so equal memories give byte-identical cards. Its loading example
names the snapshot's own folder (``memory/round-0005`` of a round-5 snapshot, relative to its run).
`coda.memory.store.save_snapshot` writes it into every snapshot; `coda.memory.hub.push_memory` rewrites it
with the repository id.

Example:
    >>> text = dataset_card(read_manifest("runs/coda/memory/round-0003"))
    >>> DatasetCard(text).data.configs[0]["config_name"]
    'scenes'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from coda.memory.schema import NULLABLE, SCHEMA
from coda.memory.snapshots import PROGRAMS_FILE, PROGRAMS_SCHEMA

__all__ = [
    "CITATION",
    "COLUMN_DESCRIPTIONS",
    "DEFAULT_CONFIG",
    "LICENSE",
    "PROVENANCE_FIELDS",
    "PROVENANCE_KEY",
    "TABLE_DESCRIPTIONS",
    "TAGS",
    "TASK_CATEGORIES",
    "dataset_card",
    "snapshot_folder",
]

LICENSE = "mit"  # the Hub's id of the repository's LICENSE (MIT)
TASK_CATEGORIES = ("robotics",)
TAGS = ("robotics", "manipulation", "coda", "curriculum-learning", "simulation")
DEFAULT_CONFIG = "modes"
# manifest["extra"][PROVENANCE_KEY]: what wrote the snapshot, recorded at write time
# (`coda.memory.store.snapshot_provenance`); `coda.maintenance` compares results without it
PROVENANCE_KEY = "provenance"
PROVENANCE_FIELDS = {
    "git_sha": "git commit of the code that wrote the snapshot",
    "git_dirty": "whether tracked files under `coda/` or `params.yaml` had uncommitted changes then",
    "profile": "the params.yaml profile the run used",
    "params_sha256": "sha256 of the resolved parameters below, as canonical JSON (sorted keys, no spaces)",
}
TABLE_DESCRIPTIONS = {
    "scenes": "every scene with its construction trace (generation steps, checks, repairs) and lineage",
    "rollouts": "one summary row per policy rollout",
    "diagnoses": "rollout-grounded failure diagnoses (phase, generative factor, cause) and their mode",
    "modes": "difficulty modes with hardness, learning progress, importance and compiled programs",
    "mode_stats": "per-measurement targeted/control success of each mode",
    "program_stats": "per-measurement learning progress of each program",
    "programs": "the generation and training programs (one row per `programs/<id>.json` document)",
}

_ROUND = "CoDA round (0 = seed scenes) in which the row was recorded"
_FAMILY = "task family (e.g. `pick_place`, or a LIBERO suite `libero_*`)"
_UPDATES = "global policy-update counter at the time of the measurement"
COLUMN_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "scenes": {
        "scene_hash": "content hash of the scene specification (the scene's id)",
        "family": _FAMILY,
        "round": _ROUND,
        "split": "why the scene exists: novel, targeted, control, replay, mutation, seed or transfer",
        "program_id": "the generation program that made the scene (null for seed scenes)",
        "base_hash": "scene_hash of the base scene the program was applied to (null for seed scenes)",
        "spec_json": "the scene specification as canonical JSON",
        "validity": "outcome of the validity checks: pass, repaired or rejected",
        "repairs": "number of repairs applied before the scene passed its checks",
        "trace_json": "construction trace as JSON: generation steps, validity checks, repairs",
        "certified": "whether the scripted planner solved the scene (its trajectory is a demonstration)",
    },
    "rollouts": {
        "rollout_id": "id of the rollout (`r<round>-<k>` unless given)",
        "scene_hash": "the scene the policy was rolled out in",
        "family": _FAMILY,
        "round": _ROUND,
        "split": "split of the scene the rollout ran in (see scenes.split)",
        "success": "whether the policy completed the task",
        "phase_reached": "index of the last task phase the policy reached",
        "steps": "number of control steps taken",
        "policy_updates": "global policy-update counter when the rollout ran",
    },
    "diagnoses": {
        "diagnosis_id": "id of the diagnosis (`d<round>-<k>` unless given)",
        "rollout_id": "the failed rollout that was diagnosed",
        "scene_hash": "the scene of that rollout",
        "family": _FAMILY,
        "round": _ROUND,
        "variant": "task variant of the family the rollout ran",
        "phase": "task phase in which the failure occurred (e.g. grasp, lift)",
        "factor": "generative factor blamed for the failure (e.g. mass, scale)",
        "cause": "free-text cause of the failure",
        "confidence": "the diagnoser's confidence in the diagnosis, in [0, 1]",
        "evidence_json": "rollout evidence supporting the diagnosis, as JSON",
        "mode_id": "difficulty mode the diagnosis was clustered into (null until assigned)",
        "status": "candidate, validated or rejected (follows its mode's control experiment)",
        "truth_factor": "the factor the generating program actually perturbed; for scoring only (nullable)",
    },
    "modes": {
        "mode_id": "id of the mode: `family/phase/factor/k`",
        "family": _FAMILY,
        "phase": "task phase of the mode's failures",
        "factor": "generative factor of the mode's failures",
        "cause": "representative cause: the cause of the mode's first diagnosis",
        "created_round": "round in which the mode was opened",
        "status": "candidate, validated, rejected or retired",
        "n_diagnoses": "number of diagnoses clustered into the mode",
        "hardness": "1 - fast EMA of targeted success; null until measured",
        "learning_progress": "|fast EMA - slow EMA| of targeted success",
        "importance": "learning progress normalised to sum to 1 over the family's validated modes",
        "success_fast": "fast (alpha 0.5) exponential moving average of targeted success; null until measured",
        "success_slow": "slow (alpha 0.1) exponential moving average of targeted success; null until measured",
        "n_updates_seen": "number of success measurements folded into the EMAs",
        "generation_program_id": "generation program compiled for the mode (nullable)",
        "training_program_id": "training program compiled for the mode (nullable)",
        "validation_json": "control-experiment evidence (targeted vs control success), as JSON",
    },
    "mode_stats": {
        "mode_id": "the measured difficulty mode",
        "round": _ROUND,
        "policy_updates": _UPDATES,
        "targeted_success": "success rate on the mode's targeted environments",
        "control_success": "success rate on matched control environments (nullable)",
        "n_targeted": "number of targeted rollouts measured",
        "n_control": "number of control rollouts measured",
        "in_band": "whether targeted success lies in the learnable success band",
    },
    "program_stats": {
        "program_id": "the measured generation or training program",
        "round": _ROUND,
        "policy_updates": _UPDATES,
        "progress": "learning progress attributed to the program",
        "success": "success rate of the rollouts measured",
        "n": "number of rollouts measured",
    },
    "programs": {
        "program_id": "content-derived id of the program (its file name under `programs/`)",
        "kind": "generation or training",
        "mode_id": "the difficulty mode the program was compiled for (null if it names none)",
        "family": "task family the program applies to (null if it names none)",
        "document": "the canonical JSON document, exactly the text of `programs/<program_id>.json`",
    },
}

CITATION = """@article{coda2026,
  title         = {{CoDA}: Co-Evolution of Data Engines and Action Policies},
  author        = {{CoDA authors}},
  journal       = {arXiv preprint arXiv:2610.22362},
  eprint        = {2610.22362},
  archivePrefix = {arXiv},
  year          = {2026}
}"""


def _tables(manifest: Mapping[str, Any]) -> list[str]:
    """The Parquet tables of the snapshot: the `SCHEMA` tables, and ``programs`` when it was written."""
    return [*SCHEMA, *(["programs"] if PROGRAMS_FILE in manifest["files"] else [])]


def _columns(name: str) -> list[tuple[str, str, bool]]:
    if name == "programs":
        return [(f.name, str(f.type), f.nullable) for f in PROGRAMS_SCHEMA]
    return [(col, str(typ), col in NULLABLE[name]) for col, typ in SCHEMA[name].items()]


def _front_matter(manifest: Mapping[str, Any], license: str) -> dict[str, Any]:
    configs = []
    for name in _tables(manifest):
        config: dict[str, Any] = {"config_name": name, "data_files": f"tables/{name}.parquet"}
        if name == DEFAULT_CONFIG:
            config["default"] = True
        configs.append(config)
    return {
        "license": license,
        "pretty_name": f"CoDA shared memory (round {manifest['round']})",
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "configs": configs,
    }


def _table_sections(manifest: Mapping[str, Any], n_programs: int) -> list[str]:
    counts = {**manifest["tables"], "programs": n_programs}
    out = ["## Tables", "", "| table | rows | contents |", "|---|---|---|"]
    out += [f"| `{n}` | {counts[n]} | {TABLE_DESCRIPTIONS[n]} |" for n in _tables(manifest)]
    for name in _tables(manifest):
        out += ["", f"### `{name}`", "", "| column | Arrow type | description |", "|---|---|---|"]
        for col, typ, nullable in _columns(name):
            typ = f"{typ} (nullable)" if nullable else typ
            out.append(f"| `{col}` | {typ} | {COLUMN_DESCRIPTIONS[name][col]} |")
    return out


def snapshot_folder(manifest: Mapping[str, Any]) -> str:
    """Where a run keeps this snapshot, relative to the run directory: ``memory/round-0005``."""
    return f"memory/round-{manifest['round']:04d}"


def _load_section(manifest: Mapping[str, Any], repo_id: str | None) -> list[str]:
    out = ["## How to load it", ""]
    if repo_id is not None:
        out += [
            "```bash",
            f"coda memory pull {repo_id} --revision <tag or commit>   # download and verify checksums",
            "```",
            "",
            "```python",
            "from coda.memory.hub import pull_memory",
            f'snapshot = pull_memory("{repo_id}", revision="<tag or commit>")  # a verified local copy',
            "",
            "import pandas as pd",
            'modes = pd.read_parquet(f"{snapshot}/tables/modes.parquet")  # any table, with plain pandas',
            "",
            "import datasets",
            f'modes = datasets.load_dataset("{repo_id}", "modes", split="train")  # one config per table',
        ]
    else:
        out += [
            "Run this in the run directory (the folder that holds `memory/`), or set `snapshot` to this "
            "folder's path:",
            "",
            "```python",
            f'snapshot = "{snapshot_folder(manifest)}"',
            "",
            "import pandas as pd",
            'modes = pd.read_parquet(f"{snapshot}/tables/modes.parquet")  # any table, with plain pandas',
            "",
            "import datasets",
            'modes = datasets.load_dataset(snapshot, "modes", split="train")  # one config per table',
        ]
    out += [
        "",
        "from coda.memory.store import load_snapshot",
        "memory = load_snapshot(snapshot)  # verifies every file; the full Memory API",
        "```",
        "",
        "`manifest.json` records the sha256 and size of every file; `load_snapshot` verifies them, checks "
        "every table's schema and rows and every program document, and never unpickles anything.",
    ]
    return out


def _produced_section(manifest: Mapping[str, Any], card: dict[str, Any]) -> list[str]:
    """How the snapshot was produced: the manifest's round, ``extra`` and write-time provenance (``card``
    entries, e.g. a push's, are shown too and win), then the parameters."""
    extra = dict(manifest.get("extra") or {})
    recorded = extra.pop(PROVENANCE_KEY, None)
    recorded = dict(recorded) if isinstance(recorded, Mapping) else {}
    card.pop(PROVENANCE_KEY, None)  # a push passes the manifest's extra back: the recorded one is shown
    params = card.pop("params", None)
    params = params if params is not None else recorded.pop("params", None)
    params = params if params is not None else extra.pop("params", None)
    recorded.pop("params", None)
    extra.pop("params", None)
    ordered = {k: recorded[k] for k in PROVENANCE_FIELDS if k in recorded}  # git_sha, git_dirty, ...
    fields = {"round": manifest["round"], **extra, **ordered, **recorded, **card}
    out = [
        "## How it was produced",
        "",
        f"Written by `coda.memory.store.save_snapshot` at the end of round {manifest['round']} of a CoDA run. "
        "The values below are the snapshot's `manifest.json` as written: `round`, the run's `extra` "
        f"(method, seed, profile) and `extra.{PROVENANCE_KEY}`, taken when the snapshot was written.",
        "",
        "| field | value |",
        "|---|---|",
        *(f"| `{k}` | {json.dumps(v, sort_keys=True)} |" for k, v in fields.items()),
    ]
    if recorded:
        out += ["", *(f"* `{k}`: {what}" for k, what in PROVENANCE_FIELDS.items() if k in recorded)]
    else:
        out += [
            "",
            f"No `extra.{PROVENANCE_KEY}` was recorded (a snapshot written before snapshots carried the git "
            "commit and parameters): the run's `run.json` has them.",
        ]
    if params is not None:
        out += ["", "Parameters:", "", "```yaml", yaml.safe_dump(params, sort_keys=True).rstrip(), "```"]
    return out


def dataset_card(
    manifest: Mapping[str, Any], repo_id: str | None = None, card: Mapping[str, Any] | None = None
) -> str:
    """The README.md of a snapshot (deterministic): front matter, tables and columns, provenance, use.

    ``manifest``: the snapshot's manifest (round, row counts, files, ``extra`` and its write-time
    ``extra["provenance"]``). ``repo_id``: the Hub dataset repo, for pull instructions. ``card``: more
    provenance shown with the manifest's (e.g. ``params``, ``git_sha`` of a snapshot that recorded none; a
    key given here wins), and optionally ``license``.
    """
    card = dict(card or {})
    license = card.pop("license", LICENSE)
    n_programs = sum(rel.startswith("programs/") for rel in manifest["files"])
    parts = [
        "---",
        yaml.safe_dump(_front_matter(manifest, license), sort_keys=False).rstrip(),
        "---",
        "",
        f"# CoDA shared memory, round {manifest['round']}",
        "",
        "The shared heterogeneous memory of a CoDA (Co-Evolution of Data Engines and Action Policies) run: "
        "what the data engine (generation) and the policy (training) know about each other. It holds "
        "construction traces of generated scenes, rollout summaries, rollout-grounded failure diagnoses, "
        "difficulty modes (recurring failures of one family, phase and factor) with their hardness, learning "
        "progress and importance, and the generation and training programs compiled for them "
        f"({n_programs} JSON documents of a declarative DSL under `programs/`, also the `programs` table: "
        "data, never code).",
        "",
        *_table_sections(manifest, n_programs),
        "",
        *_produced_section(manifest, card),
        "",
        *_load_section(manifest, repo_id),
        "",
        "## License",
        "",
        f"`{license}`" + (" (the CoDA reproduction's LICENSE file: MIT)." if license == LICENSE else "."),
        "",
        "## Citation",
        "",
        "The paper this memory reproduces (the author list is a placeholder, not the paper's authors):",
        "",
        "```bibtex",
        CITATION,
        "```",
        "",
    ]
    return "\n".join(parts)
