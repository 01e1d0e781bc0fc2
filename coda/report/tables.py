"""Writing a table as CSV and Markdown, ours beside the paper's.

Every table has a `row` column, an `ours (mean ± s.e., n)` column (percentages unless the row says
otherwise), a `paper` column (the paper's value for that row, or "—" where the paper reports none), optional
extra columns, the profile the runs came from, and notes: what the rows mean here and, when our ordering of
the rows differs from the paper's, a sentence saying so. Nothing in a table is typed in by hand except the
paper's numbers (`coda.report.paper`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OURS = "ours (mean ± s.e., n)"


@dataclass
class Table:
    name: str  # file stem under figures/, e.g. "table1_main"
    title: str
    profile: str
    columns: list[str] = field(default_factory=lambda: ["row", OURS, "paper"])
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[tuple[str, list[str]]] = field(
        default_factory=list
    )  # (heading, Markdown lines) after the notes
    # (row label, our mean or None, paper value or None): the ordering check
    _ranked: list[tuple[str, float | None, float | None]] = field(default_factory=list)

    def add(self, row: str, ours: str, paper: float | str | None, *, rank: float | None = None, **extra: Any):
        entry = {"row": row, OURS: ours, "paper": _paper(paper), **{k: _cell(v) for k, v in extra.items()}}
        for key in extra:
            if key not in self.columns:
                self.columns.append(key)
        self.rows.append(entry)
        self._ranked.append((row, rank, paper if isinstance(paper, int | float) else None))

    def ordering_note(self, higher_is_better: bool = True) -> str | None:
        """A note on whether the rows with both numbers are ordered as in the paper: they differ when some pair
        is ranked the other way round (ties in our numbers are reported, not counted as a difference)."""
        both = [(r, o, p) for r, o, p in self._ranked if o is not None and p is not None]
        if len(both) < 2:
            return None
        sign = -1 if higher_is_better else 1
        ours = [r for r, _, _ in sorted(both, key=lambda t: (sign * t[1], t[0]))]
        paper = [r for r, _, _ in sorted(both, key=lambda t: (sign * t[2], t[0]))]
        swapped = [
            (a, b)
            for i, (a, oa, pa) in enumerate(both)
            for b, ob, pb in both[i + 1 :]
            if (oa - ob) * (pa - pb) < 0
        ]
        ties = [(a, b) for i, (a, oa, _) in enumerate(both) for b, ob, _ in both[i + 1 :] if oa == ob]
        tie_note = f" {len(ties)} pair(s) of rows are tied in our numbers." if ties else ""
        if not swapped:
            return "Our ordering of these rows matches the paper's." + tie_note
        return (
            f"**Our ordering differs from the paper's** ({len(swapped)} of {len(both) * (len(both) - 1) // 2} "
            "pairs reversed). Paper: " + " > ".join(paper) + ". Ours: " + " > ".join(ours) + "." + tie_note
        )

    def write(self, out_dir: str | Path, *, check_order: bool = True) -> list[Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        notes = list(self.notes)
        if check_order and (note := self.ordering_note()):
            notes.append(note)
        columns = [*self.columns, "profile"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for row in self.rows:
            w.writerow({**{c: row.get(c, "") for c in self.columns}, "profile": self.profile})
        csv_path = out_dir / f"{self.name}.csv"
        csv_path.write_text(buf.getvalue())
        md = [
            f"# {self.title}",
            "",
            f"Profile: `{self.profile}`. Values in % unless the row says otherwise.",
            "",
        ]
        md.append("| " + " | ".join(self.columns) + " |")
        md.append("|" + "---|" * len(self.columns))
        for row in self.rows:
            md.append("| " + " | ".join(str(row.get(c, "")) for c in self.columns) + " |")
        if notes:
            md += ["", *[f"- {n}" for n in notes]]
        for heading, lines in self.sections:
            md += ["", f"## {heading}", "", *lines]
        md_path = out_dir / f"{self.name}.md"
        md_path.write_text("\n".join(md) + "\n")
        return [csv_path, md_path]

    def markdown(self) -> str:
        buf = io.StringIO()
        for row in self.rows:
            buf.write(" | ".join(str(row.get(c, "")) for c in self.columns) + "\n")
        return buf.getvalue()


def _paper(value: float | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "" if value is None else value
