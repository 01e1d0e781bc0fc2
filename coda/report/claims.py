"""The paper's Table-1 claims, tested one by one on our runs (issue "Science II").

Each claim compares two methods on the same evaluation episodes: per seed, the paired difference a − b
of OOD success (points) over the shared episodes; then the mean and standard error over seeds, and a
two-sided one-sample t-test of the per-seed differences (df = seeds − 1, α = 0.05). The verdict is
"holds" when the difference is significant in the paper's direction, "reversed" when it is significant
in the other, and "not significant" otherwise. A claim that reads "at least" (claim 3) is also consistent
with a difference that is not significant.

"The strongest baseline" is the generation baseline (domain randomization, uniform, SR-guided) with the
highest mean OOD success in our runs; the paper's is SR-guided generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coda.report import paper
from coda.report.runs import Runs, paired, rows_at, stat

ALPHA = 0.05
BASELINES = ("domain_rand", "uniform", "sr_guided")
STRONGEST = "strongest baseline"


@dataclass(frozen=True)
class Claim:
    number: int  # the issue's numbering of the paper's claims
    text: str
    a: str  # method whose success should be higher
    b: str  # method compared with (or STRONGEST)


CLAIMS = (
    Claim(1, "Domain randomization beats SFT", "domain_rand", "sft"),
    Claim(1, "Uniform generation beats SFT", "uniform", "sft"),
    Claim(1, "SR-guided generation beats SFT", "sr_guided", "sft"),
    Claim(1, "Critic without memory beats SFT", "critic_no_memory", "sft"),
    Claim(1, "CoDA beats SFT", "coda", "sft"),
    Claim(2, "SR-guided generation beats uniform generation", "sr_guided", "uniform"),
    Claim(2, "SR-guided generation beats domain randomization", "sr_guided", "domain_rand"),
    Claim(3, "Critic without memory is at least SR-guided generation", "critic_no_memory", "sr_guided"),
    Claim(4, "CoDA beats the critic without memory", "coda", "critic_no_memory"),
    Claim(4, "CoDA beats the strongest baseline", "coda", STRONGEST),
)


def strongest_baseline(runs: Runs) -> str | None:
    """The generation baseline with the highest mean OOD success (None before any has run)."""
    means = {m: stat(rows_at(runs.table1.get(m, []), None))["mean"] for m in BASELINES}
    ran = {m: v for m, v in means.items() if v is not None}
    return max(ran, key=ran.get) if ran else None


def verdict(mean: float | None, se: float | None, n: int, expected_sign: float) -> tuple[str, float | None]:
    """(verdict, two-sided p) of the per-seed paired differences: see the module docstring."""
    if mean is None:
        return "not run", None
    if se is None or n < 2:
        return "n = 1: no test", None
    if se == 0:
        p = 0.0 if mean != 0 else 1.0
    else:
        from scipy.stats import t as student_t

        p = float(2 * student_t.sf(abs(mean) / se, df=n - 1))
    if p >= ALPHA:
        return "not significant", p
    return ("holds" if mean * expected_sign > 0 else "reversed"), p


def claims(runs: Runs) -> list[dict[str, Any]]:
    """Every claim with our paired difference, its s.e. and n (seeds), the paper's difference, p and verdict."""
    strongest = strongest_baseline(runs)
    out = []
    for c in CLAIMS:
        b = strongest if c.b == STRONGEST else c.b
        paper_b = "sr_guided" if c.b == STRONGEST else c.b
        paper_diff = round(paper.TABLE1[c.a] - paper.TABLE1[paper_b], 1)
        d = (
            paired(runs.table1.get(c.a, []), runs.table1.get(b, []), None, None)
            if b is not None
            else {"mean": None, "se": None, "n": 0}
        )
        v, p = verdict(d["mean"], d["se"], d["n"], paper_diff)
        out.append(
            {
                "claim": c.number,
                "text": c.text,
                "a": c.a,
                "b": b,
                "diff": None if d["mean"] is None else round(d["mean"], 2),
                "se": None if d["se"] is None else round(d["se"], 2),
                "n": d["n"],
                "paper_diff": paper_diff,
                "p": None if p is None else round(p, 4),
                "verdict": v,
            }
        )
    return out


def claims_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The claims as a Markdown table (lines)."""
    lines = [
        "| claim | comparison | ours: paired difference (points, mean ± s.e., n seeds) | paper | p | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = "not run" if r["diff"] is None else f"{r['diff']:+.1f}"
        if r["se"] is not None:
            ours += f" ± {r['se']:.1f}"
        if r["diff"] is not None:
            ours += f" (n={r['n']})"
        p = "" if r["p"] is None else f"{r['p']:.3f}"
        comparison = f"{r['a']} − {r['b'] or 'strongest baseline'}"
        lines.append(
            f"| {r['claim']}. {r['text']} | {comparison} | {ours} | {r['paper_diff']:+.1f} | {p} | {r['verdict']} |"
        )
    return lines
