"""The paper's Table-1 claims, tested one by one on our runs (issue "Science II"; issue #27 for the test
against the paper's effect and the per-suite differences).

Each claim compares two methods on the same evaluation episodes: per seed, the paired difference a − b
of OOD success (points) over the shared episodes; then the mean and standard error over seeds, and two
two-sided one-sample t-tests of the per-seed differences (df = seeds − 1): against 0 (`p`, which gives the
verdict at α = 0.05) and against the paper's difference for the same pair (`p_vs_paper`: a small value means
our effect is not the paper's). The verdict is "holds" when the difference is significant in the paper's
direction, "reversed" when it is significant in the other, and "not significant" otherwise. A claim that
reads "at least" (claim 3) is also consistent with a difference that is not significant. Each claim also
carries the same paired difference per held-out suite (`per_suite`: mean ± s.e. over seeds).

"The strongest baseline" is fixed before looking at our runs: it is the paper's strongest generation
baseline, success-rate-guided generation (`STRONGEST_BASELINE`; the paper: CoDA − SR-guided = 27.6 − 18.1 =
+9.5). It is never the baseline that happens to score highest in our runs, which would be a choice made after
seeing the outcome. CoDA against uniform generation (the paper: 27.6 − 8.5 = +19.1) and against domain
randomization (+19.7) are claims of their own, so that every baseline has its CoDA comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coda.report import paper
from coda.report.runs import SUITES, Runs, paired, rounded

ALPHA = 0.05
STRONGEST = "strongest baseline"
STRONGEST_BASELINE = "sr_guided"  # the paper's strongest generation baseline, fixed beforehand


@dataclass(frozen=True)
class Claim:
    number: int  # the numbering of the paper's claims
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
    Claim(4, "CoDA beats domain randomization", "coda", "domain_rand"),
    Claim(4, "CoDA beats uniform generation", "coda", "uniform"),
    Claim(4, "CoDA beats the strongest baseline", "coda", STRONGEST),
)


def strongest_baseline(runs: Runs) -> str | None:
    """`STRONGEST_BASELINE` when it has run (None before): the rule is fixed, not the highest of our means."""
    return STRONGEST_BASELINE if runs.table1.get(STRONGEST_BASELINE) else None


def t_test(mean: float | None, se: float | None, n: int, mu: float = 0.0) -> float | None:
    """Two-sided p of the one-sample t-test of H0 "the mean of the n per-seed differences is mu" (df = n − 1);
    None without a test (no differences, or n = 1). A zero s.e. gives p = 1 when mean = mu, else 0."""
    if mean is None or se is None or n < 2:
        return None
    if se == 0:
        return 1.0 if mean == mu else 0.0
    from scipy.stats import t as student_t

    return float(2 * student_t.sf(abs(mean - mu) / se, df=n - 1))


def verdict(mean: float | None, se: float | None, n: int, expected_sign: float) -> tuple[str, float | None]:
    """(verdict, two-sided p against 0) of the per-seed paired differences: see the module docstring."""
    if mean is None:
        return "not run", None
    p = t_test(mean, se, n)
    if p is None:
        return "n = 1: no test", None
    if p >= ALPHA:
        return "not significant", p
    return ("holds" if mean * expected_sign > 0 else "reversed"), p


def claims(runs: Runs) -> list[dict[str, Any]]:
    """Every claim with our paired difference, its s.e. and n (seeds), the paper's difference for the same
    pair, p against 0 and against the paper's difference, the verdict, and the difference per suite."""
    out = []
    for c in CLAIMS:
        b = STRONGEST_BASELINE if c.b == STRONGEST else c.b
        paper_diff = round(paper.TABLE1[c.a] - paper.TABLE1[b], 1)
        a_runs, b_runs = runs.table1.get(c.a, []), runs.table1.get(b, [])
        d = paired(a_runs, b_runs, None, None)
        v, p = verdict(d["mean"], d["se"], d["n"], paper_diff)
        p_paper = t_test(d["mean"], d["se"], d["n"], paper_diff)
        out.append(
            {
                "claim": c.number,
                "text": c.text,
                "a": c.a,
                "b": b,
                "diff": rounded(d["mean"], 2),
                "se": rounded(d["se"], 2),
                "n": d["n"],
                "paper_diff": paper_diff,
                "p": rounded(p, 4),
                "p_vs_paper": rounded(p_paper, 4),
                "verdict": v,
                "per_suite": {suite: _suite_diff(a_runs, b_runs, suite) for suite in SUITES},
            }
        )
    return out


def _suite_diff(a_runs, b_runs, suite: str) -> dict[str, Any]:
    d = paired(a_runs, b_runs, None, None, suite)
    return {"diff": rounded(d["mean"], 2), "se": rounded(d["se"], 2), "n": d["n"]}


def claims_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The claims as a Markdown table (lines)."""
    lines = [
        "| claim | comparison | ours: paired difference (points, mean ± s.e., n seeds) | paper | p | "
        "p vs paper | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = "not run" if r["diff"] is None else f"{r['diff']:+.1f}"
        if r["se"] is not None:
            ours += f" ± {r['se']:.1f}"
        if r["diff"] is not None:
            ours += f" (n={r['n']})"
        p = "" if r["p"] is None else f"{r['p']:.3f}"
        p_paper = "" if r["p_vs_paper"] is None else f"{r['p_vs_paper']:.3f}"
        comparison = f"{r['a']} − {r['b']}"
        lines.append(
            f"| {r['claim']}. {r['text']} | {comparison} | {ours} | {r['paper_diff']:+.1f} | {p} | {p_paper} "
            f"| {r['verdict']} |"
        )
    return lines


def suites_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """CoDA's claims per held-out suite as a Markdown table (lines): paired difference, mean ± s.e. (n)."""
    lines = ["| comparison | " + " | ".join(SUITES) + " |", "|---|" + "---|" * len(SUITES)]
    for r in rows:
        if r["a"] != "coda":
            continue
        cells = []
        for suite in SUITES:
            d = r["per_suite"][suite]
            cell = "not run" if d["diff"] is None else f"{d['diff']:+.1f}"
            if d["se"] is not None:
                cell += f" ± {d['se']:.1f}"
            cells.append(cell + (f" (n={d['n']})" if d["diff"] is not None else ""))
        lines.append(f"| {r['a']} − {r['b']} | " + " | ".join(cells) + " |")
    return lines
