"""Reading finished runs for the report: per-round evaluations, seeds, paired episode outcomes.

The pipeline lays runs out as ``runs/table1/<method>-<seed>``, ``runs/ablation/<variant>``,
``runs/long/<method>`` and ``runs/backbone/{sft_b,reuse_b,coda_b,reuse_a}`` (see dvc.yaml); every run directory holds
``run.json`` (method, seed, profile, settings, git SHA), ``rounds.json`` (one metrics row per round) and
``metrics.json`` (the last row). A run that has not finished is reported as missing, never guessed. Their
records (`coda record`) lie under ``records/regime_a/`` and ``records/regime_b/``, one folder per benchmark
regime with that same layout (`regime_dirs`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.config.sections import FAMILIES
from coda.evaluate import mean_se

# the order of the OOD episodes in a run's `eval_outcomes` (`coda.evaluate.evaluation_items`): by family (FAMILIES), then
# suite
SUITES = ("instances", "layouts", "tasks", "categories")


REGIMES = {"a": "regime_a", "b": "regime_b"}  # benchmark regime -> its folder under the records root


def regime_dirs(root: str | Path) -> dict[str, Path]:
    """Each benchmark regime's records folder (issue #27), from the records root (``records/``, which holds
    ``regime_a/``) or one regime's folder (its sibling is the other); any other folder of runs (e.g. ``runs/``)
    is regime A itself, with regime B in its ``regime_b/``.

    >>> regime_dirs("records/regime_a")
    {'a': PosixPath('records/regime_a'), 'b': PosixPath('records/regime_b')}
    """
    root = Path(root)
    if root.name in REGIMES.values():
        base = root.parent
    elif (root / REGIMES["a"]).is_dir():
        base = root
    else:
        return {"a": root, "b": root / REGIMES["b"]}
    return {k: base / v for k, v in REGIMES.items()}


def records_of(root: str | Path) -> Path:
    """The folder of runs a report reads: the records root (``records/``) stands for regime A's records; a
    regime's folder (``records/regime_b``) or a folder of run directories (``runs/``) is read as it is."""
    root = Path(root)
    return (
        root / REGIMES["a"] if root.name not in REGIMES.values() and (root / REGIMES["a"]).is_dir() else root
    )


def project_dir(root: str | Path) -> Path:
    """The project folder above a records root: ``records/regime_a`` -> ``.``; ``records`` or ``runs`` -> ``.``."""
    root = Path(root)
    return root.parent.parent if root.name in REGIMES.values() else root.parent


def metrics_file(root: str | Path, name: str) -> Path:
    """A pipeline metric file of the regime whose records lie in `root` (``metrics/NAME`` for regime A,
    ``metrics/regime_b/NAME`` for regime B, e.g. its SFT policy's ``sft.json``)."""
    root = Path(root)
    sub = ("regime_b",) if root.name == REGIMES["b"] else ()
    return project_dir(root).joinpath("metrics", *sub, name)


@dataclass
class RunResult:
    name: str
    path: Path
    run: dict[str, Any]
    rounds: list[dict[str, Any]]
    metrics: dict[str, Any]

    @property
    def method(self) -> str:
        return self.run.get("method", self.metrics.get("method", "?"))

    @property
    def seed(self) -> int:
        return int(self.run.get("seed", self.metrics.get("seed", 0)))

    @property
    def profile(self) -> str:
        return self.run.get("profile", self.metrics.get("profile", "?"))

    def at(self, r: int | None = None) -> dict[str, Any] | None:
        """The evaluated metrics row of round r (None: the last round; 0: the SFT starting point of an
        `sft` run); None when that round was not evaluated."""
        if r is None:
            return self.metrics if self.metrics.get("ood_success") is not None else None
        for row in self.rounds:
            if row.get("round") == r and row.get("ood_success") is not None:
                return row
        if self.method == "sft" and self.rounds:  # the SFT policy does not change with rounds
            return self.rounds[0]
        return None

    def memory(self):
        """The run's latest memory snapshot (`coda.memory.shared_memory.Memory`, verified on reading); None when the
        run kept none."""
        from coda.memory.store import load_snapshot, resolve_snapshot

        if not (self.path / "memory").is_dir():
            return None
        return load_snapshot(resolve_snapshot(self.path))

    def memory_history(self) -> list[tuple[int, Any]]:
        """(round, snapshot) of every memory snapshot the run kept (``memory/round-NNNN``), in round order, each
        verified on reading; empty when the run kept none. A mode's programs are recompiled as it gains
        diagnoses, so only the history says which mode an earlier round's program was compiled for."""
        from coda.memory.store import load_snapshot

        found = sorted((self.path / "memory").glob("round-[0-9]*/manifest.json"))
        return [(int(m.parent.name.removeprefix("round-")), load_snapshot(m.parent)) for m in found]

    def curve(self, key: str = "ood_success") -> list[tuple[int, float]]:
        """(round, value) of every evaluated round."""
        return [(row["round"], row[key]) for row in self.rounds if row.get(key) is not None]


def load_run(path: str | Path, name: str | None = None) -> RunResult | None:
    path = Path(path)
    files = [path / f for f in ("run.json", "rounds.json", "metrics.json")]
    if not all(f.is_file() for f in files):
        return None
    run, rounds, metrics = (json.loads(f.read_text()) for f in files)
    if isinstance(rounds, dict):  # `sft`-only runs write one row
        rounds = [rounds]
    return RunResult(name or path.name, path, run, rounds, metrics)


@dataclass
class Runs:
    """Every run under a `runs/` directory, by its place in the pipeline."""

    root: Path
    table1: dict[str, list[RunResult]] = field(default_factory=dict)  # method -> runs over seeds
    ablation: dict[str, RunResult] = field(default_factory=dict)
    long: dict[str, RunResult] = field(default_factory=dict)
    backbone: dict[str, RunResult] = field(default_factory=dict)
    budget: dict[str, RunResult] = field(default_factory=dict)  # "<method>-<envs per family per round>"

    @classmethod
    def load(cls, root: str | Path) -> Runs:
        root = Path(root)
        out = cls(root)
        for d in sorted((root / "table1").glob("*-*")):
            r = load_run(d)
            if r is not None:
                out.table1.setdefault(d.name.rsplit("-", 1)[0], []).append(r)
        for group in ("ablation", "long", "backbone", "budget"):
            for d in sorted((root / group).glob("*")):
                r = load_run(d)
                if r is not None:
                    getattr(out, group)[d.name] = r
        for runs in out.table1.values():
            runs.sort(key=lambda r: r.seed)
        return out

    def seed_run(self, method: str, seed: int = 0) -> RunResult | None:
        return next((r for r in self.table1.get(method, []) if r.seed == seed), None)

    def ablation_ref(self, method: str) -> RunResult | None:
        """The run that the ablations of `method` are compared with: its `<method>_ref` variant (the ablations'
        rounds and evaluation, run with them: runs are not bit-identical across machines) when that ran, else
        seed 0 of Table 1."""
        return self.ablation.get(f"{method}_ref") or self.seed_run(method)

    def profile(self) -> str:
        for r in self.all():
            return r.profile
        return "?"

    def all(self) -> Iterable[RunResult]:
        for runs in self.table1.values():
            yield from runs
        for group in (self.ablation, self.long, self.backbone):
            yield from group.values()


def rows_at(runs: Sequence[RunResult], r: int | None) -> list[dict[str, Any]]:
    """The evaluated row of round r of each run that has one."""
    return [row for row in (x.at(r) for x in runs) if row is not None]


def stat(rows: Sequence[dict[str, Any]], key: str = "ood_success") -> dict[str, Any]:
    """Mean ± s.e. (in %) and n of a metric over runs (seeds)."""
    vals = [row[key] for row in rows if row.get(key) is not None]
    m, se = mean_se(vals)
    return {
        "mean": None if m is None else 100 * m,
        "se": None if se is None else 100 * se,
        "n": len(vals),
    }


def nested_stat(rows: Sequence[dict[str, Any]], key: str, sub: str) -> dict[str, Any]:
    return stat([{key: (row.get(key) or {}).get(sub)} for row in rows], key)


def ood_outcomes(row: dict[str, Any], suite: str | None = None) -> str | None:
    """The OOD episodes' outcomes of an evaluated row ("1"/"0"), all of them or those of one suite; None when
    the row has none, or when its outcomes do not follow the `FAMILIES` x `SUITES` layout of
    `coda.evaluate.evaluation_items` (checked against the row's own per-family, per-suite rates)."""
    out = row.get("eval_outcomes")
    if out is None:
        return None
    out = out[row["n_id"] :]
    if suite is None:
        return out
    cells = _suite_cells(row, out)
    return None if cells is None else "".join(cells[(f, suite)] for f in FAMILIES)


def _suite_cells(row: dict[str, Any], out: str) -> dict[tuple[str, str], str] | None:
    """(family, suite) -> that cell's outcomes, when every cell's rate is the row's `ood_by_family_suite`."""
    rates = row.get("ood_by_family_suite") or {}
    k, rest = divmod(len(out), len(FAMILIES) * len(SUITES))
    if k == 0 or rest:
        return None
    cells = {}
    for i, (f, s) in enumerate((f, s) for f in FAMILIES for s in SUITES):
        cell = out[i * k : (i + 1) * k]
        if (rates.get(f) or {}).get(s) is None or abs(cell.count("1") / k - rates[f][s]) > 1e-4:
            return None
        cells[(f, s)] = cell
    return cells


def paired(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    r_a: int | None,
    r_b: int | None,
    suite: str | None = None,
) -> dict[str, Any]:
    """Paired OOD difference a − b in points: per seed, the mean over the shared evaluation episodes (all of
    them, or one suite's); then mean ± s.e. over seeds. The SFT policy (one checkpoint, the start of every
    seed) on either side pairs with every seed of the other."""
    if len(a) == 1 and a[0].method == "sft" and not (len(b) == 1 and b[0].method == "sft"):
        d = paired(b, a, r_b, r_a, suite)
        return {**d, "mean": None if d["mean"] is None else -d["mean"]}
    by_seed = {x.seed: x.at(r_b) for x in b}
    sft = b[0].at(r_b) if len(b) == 1 and b[0].method == "sft" else None
    diffs = []
    for x in a:
        row = x.at(r_a)
        other = by_seed.get(x.seed) if sft is None else sft
        if row is None or other is None:
            continue
        oa, ob = ood_outcomes(row, suite), ood_outcomes(other, suite)
        if not oa or not ob or len(oa) != len(ob):
            continue
        diffs.append(sum(int(p) - int(q) for p, q in zip(oa, ob)) / len(oa))
    m, se = mean_se(diffs)
    return {"mean": None if m is None else 100 * m, "se": None if se is None else 100 * se, "n": len(diffs)}


def paired_episodes(row_a: dict[str, Any] | None, row_b: dict[str, Any] | None) -> dict[str, Any]:
    """One run against another on their shared OOD episodes: the mean per-episode difference a − b in points,
    its s.e. over episodes, and n = 1 (one seed)."""
    oa, ob = (ood_outcomes(r) if r else None for r in (row_a, row_b))
    if not oa or not ob or len(oa) != len(ob):
        return {"mean": None, "se": None, "n": 0}
    m, se = mean_se([int(p) - int(q) for p, q in zip(oa, ob)])
    return {"mean": 100 * m, "se": None if se is None else 100 * se, "n": 1}


def rounded(x: float | None, digits: int = 2) -> float | None:
    """`x` rounded for the JSON outputs; None stays None."""
    return None if x is None else round(x, digits)


def fmt(s: dict[str, Any] | None, digits: int = 1, signed: bool = False) -> str:
    """`27.6 ± 1.2 (n=3)`, `27.6 (n=1)`, or `not run`."""
    if not s or s.get("mean") is None or (isinstance(s["mean"], float) and math.isnan(s["mean"])):
        return (s or {}).get("empty", "not run")
    sign = "+" if signed else ""
    body = f"{s['mean']:{sign}.{digits}f}"
    if s.get("se") is not None:
        body += f" ± {s['se']:.{digits}f}"
    return f"{body} (n={s['n']})"
