"""What each table and figure is built from, so that the report never overwrites a committed result with
placeholders.

`missing(name, runs_dir, data_dir)` lists the inputs of artifact `name` that do not exist yet: finished run
directories (they hold ``metrics.json``) named by the experiment grid of ``params.yaml``, metric files and
``data/``. `coda.report.build.build` refuses to write an artifact with missing inputs into the committed
``figures/`` or ``metrics/`` (`MissingInputs`, one line naming them); written anywhere else (a scratch folder
asked for with ``--figures``, or a notebook's ``figures`` parameter), the missing rows read "not run".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coda.errors import UserError
from coda.report.runs import records_of

PROTECTED = ("figures", "metrics")  # the committed result folders of the project root


class MissingInputs(UserError):
    """An artifact's inputs are not there; nothing was written."""


def _experiments():
    from coda.config import read_experiments

    return read_experiments("params.yaml") if Path("params.yaml").is_file() else None


def _runs(root: Path, *names: str) -> list[Path]:
    return [root / n for n in names]


def _table1(root: Path, ex) -> list[Path]:
    return _runs(root, "table1/sft-0", *(f"table1/{m}-{s}" for m in ex.table1 for s in ex.seeds))


def _seed0(root: Path, *methods: str) -> list[Path]:
    return _runs(root, *(f"table1/{m}-0" for m in methods))


def _variants(root: Path, ex, *tables: str) -> list[Path]:
    return _runs(root, *(f"ablation/{k}" for k, v in ex.variants.items() if v.table in tables))


# artifact -> its run directories and files, from runs/ (r), the experiment grid (ex)
RUN_INPUTS: dict[str, Callable[[Path, object], list[Path]]] = {
    "figure6_gallery": lambda r, ex: _seed0(r, "coda"),
    "table1_main": _table1,
    "table1_regimes": _table1,  # regime A's; regime B's rows say "not run" until its records are there
    "preregistration": _table1,  # likewise
    "figure3_rounds": lambda r, ex: [*_runs(r, *(f"long/{m}" for m in ex.long)), *_runs(r, "table1/sft-0")],
    "budget_curve": lambda r, ex: [
        *_runs(r, *(f"budget/{m}-{n}" for m in ex.budget["methods"] for n in ex.budget["envs"])),
        *_seed0(r, *ex.budget["methods"]),
    ],
    "table3_critic_sensitivity": lambda r, ex: [*_variants(r, ex, "table3"), *_seed0(r, "coda", "sr_guided")],
    "table4_text2potential": lambda r, ex: [*_variants(r, ex, "table4"), *_seed0(r, "coda")],
    "learning_speed": lambda r, ex: [*_variants(r, ex, "table4"), *_seed0(r, "coda")],
    "table5_memory_design": lambda r, ex: [
        *_variants(r, ex, "complementarity"),
        *_seed0(r, "coda", "critic_no_memory"),
    ],
    "complementarity": lambda r, ex: [
        *_variants(r, ex, "complementarity"),
        *_seed0(r, "coda", "critic_no_memory"),
    ],
    "figure5_memory_snapshots": lambda r, ex: [*_variants(r, ex, "complementarity"), *_seed0(r, "coda")],
    "table6_family_transfer": lambda r, ex: [*_variants(r, ex, "table6"), *_seed0(r, "coda")],
    "table7_backbone_transfer": lambda r, ex: [
        *_runs(r, "backbone/sft_b", "backbone/reuse_b", "backbone/coda_b", "backbone/reuse_a"),
        *_seed0(r, "coda", "sft"),
    ],
    "table8_generation_quality": lambda r, ex: _runs(
        r, *(f"table1/{m}-{s}" for m in ("coda", "uniform") for s in ex.seeds)
    ),  # every seed of both
    "table9_compute": lambda r, ex: [*_variants(r, ex, "table9"), *_table1(r, ex)],
    # LIBERO: the uniform column (libero/uniform) says "not run" until its record is there
    "table2_libero_pro": lambda r, ex: _runs(r, "libero/sft", "libero/coda"),
    "table2_libero_curve": lambda r, ex: _runs(r, "libero/sft", "libero/coda"),
    "libero_coverage": lambda r, ex: _runs(r, "libero/sft", "libero/coda"),
    "libero_planner": lambda r, ex: _runs(r, "libero/sft"),
    "summary": lambda r, ex: [*_table1(r, ex), *_variants(r, ex, *{v.table for v in ex.variants.values()})],
}
FILE_INPUTS = {  # artifact -> files beside runs/ it reads (relative to the project root)
    "sft_baseline": ("metrics/sft.json",),
    "table1_regimes": ("metrics/regimes.json",),
    "table7_backbone_transfer": ("metrics/sft_b.json",),
}
DATA_INPUTS = {"figure6_gallery", "table8_generation_quality", "learning_speed"}


def missing(name: str, runs_dir: str | Path, data_dir: str | Path) -> list[str]:
    """The inputs of artifact `name` that are not there (empty when it can be built in full)."""
    ex = _experiments()
    root = records_of(runs_dir)  # records/ reads as regime A's records; records/regime_b as B's
    out: list[str] = []
    if name in RUN_INPUTS and ex is not None:
        out += [str(p) for p in RUN_INPUTS[name](root, ex) if not (p / "metrics.json").is_file()]
    out += [f for f in FILE_INPUTS.get(name, ()) if not Path(f).is_file()]
    if name in DATA_INPUTS and not Path(data_dir).is_dir():
        out.append(str(data_dir))
    return list(dict.fromkeys(out))


def protected(out_dir: str | Path) -> bool:
    """Whether `out_dir` is one of the project's committed result folders (figures/, metrics/)."""
    target = Path(out_dir).resolve()
    return any(target == (Path.cwd() / p).resolve() for p in PROTECTED)


def check(name: str, runs_dir: str | Path, out_dir: str | Path, data_dir: str | Path) -> list[str]:
    """Raise `MissingInputs` when `name` would be written into a committed folder without all its inputs;
    return the missing inputs (the rows that will read "not run") otherwise."""
    gone = missing(name, runs_dir, data_dir)
    if gone and protected(out_dir):
        shown = ", ".join(gone[:6]) + (f" and {len(gone) - 6} more" if len(gone) > 6 else "")
        raise MissingInputs(
            f"{name}: not built, {out_dir}/ left as it is: missing {shown} (run `dvc repro` or `dvc pull`; "
            "or write to a scratch folder with --figures DIR)"
        )
    return gone
