"""Data scaling: how much do generated environments lift the SFT policy, and does targeting them help?

The curve on which the rest of the science stands (issue "Science I"): the SFT policy is fine-tuned on planner
demonstrations of N generated environments per family, for each N of `scaling.ns`, with the recipe of the
co-evolution rounds (`coevolve.finetune`, `rehearsal_per_family`, `rehearsal_share`) and the same number of
updates for every N and mode, then evaluated on the fixed evaluation (`coda.evaluate.evaluation_items`).

* **uniform** — environments drawn from the whole generator space (`generate.uniform_requests`' jobs).
* **targeted** — CoDA's first round on the SFT policy: it is rolled out on `diagnostic_pool` uniform scenes
  per family, every failure is diagnosed (the `sim` diagnoser: rollout and scene, never a program) and
  grouped by (phase, factor); each group's generation program (template compiler) is applied to seed
  scenes, with environments allotted to the groups in proportion to their failures. There is no control
  experiment here: this measures what targeting the SFT policy's diagnosed failures buys, at each budget.

N = 0 is the same fine-tuning on the rehearsal demonstrations alone (as many updates: the control for
"more updates"). Environments are nested: the N-environment set is the first N of the largest one.

Example:
    >>> rows = run_scaling(cfg, Path("scenes"), Path("runs/sft"), Path("runs/data_scaling"), executor)
    >>> [(r["mode"], r["n"], r["ood_success"]) for r in rows]
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda.engine import generate as gen
from coda.engine.jobs import generate_job, rollout_job
from coda.evaluate import evaluation_items, evaluation_summary, paired_diff
from coda.files import write_json
from coda.learn.demos import chunk_dataset, demo_batch
from coda.learn.sft import eval_job
from coda.progress import progress

STREAMS = {"uniform": 11, "diagnostic": 12, "targeted": 13, "rehearsal": 14, "calibration": 15}


def _seed(seed: int, stream: str, family: str, k: int) -> list[int]:
    from coda import data

    return [seed, 7001, STREAMS[stream], data.FAMILIES.index(family), k]


def _certified(ex, jobs: list[dict], want: int, desc: str) -> list[dict]:
    """The first `want` certified environments of `jobs` (in job order)."""
    out = []
    for res in ex.map(generate_job, jobs, desc=desc):
        if res.ok and res.value["certified"]:
            out.append(res.value)
    return out[:want]


def uniform_envs(ex, families, n: int, seed: int, stream: str = "uniform") -> dict[str, list[dict]]:
    """`n` certified environments per family sampled from the generator space (about 1 in 10 draws is
    rejected, so 25% more are drawn, then more while short)."""
    out: dict[str, list[dict]] = {}
    for f in families:
        got: list[dict] = []
        k = 0
        while len(got) < n and k < 4 * n + 16:
            m = n - len(got) + max(4, (n - len(got)) // 4)
            jobs = [
                {
                    "family": f,
                    "split": "novel",
                    "seed": _seed(seed, stream, f, k + i),
                    "base": None,
                    "program": None,
                }
                for i in range(m)
            ]
            k += m
            got += _certified(ex, jobs, n - len(got), f"{f}: {stream} environments")
        out[f] = got
    return out


def diagnosed_programs(ex, cfg, families, policy_dir: Path, bases: dict[str, list[str]], seed: int):
    """CoDA's first round on a policy: roll it out on uniform scenes, diagnose the failures, group them by
    (phase, factor) and compile one generation program per group. Returns {family: [(count, program,
    group)]} and a summary of the groups."""
    from coda.engine.compile import make_compiler
    from coda.engine.diagnose import TrainingReference, make_diagnoser
    from coda.sim.rollout import RolloutRecord
    from coda.sim.scene import SceneSpec

    sc = cfg.scaling
    pool = uniform_envs(ex, families, sc.diagnostic_pool, seed, stream="diagnostic")
    jobs, envs = [], []
    for f in families:
        for v in pool[f]:
            envs.append(v)
            jobs.append(
                {
                    "policy": str(policy_dir),
                    "critic": None,
                    "scene": v["scene"],
                    "record": True,
                    "seed": seed,
                    "max_chunks": cfg.sim.max_chunks,
                }
            )
    results = ex.map(rollout_job, jobs, desc="diagnostic rollouts")
    diagnoser = make_diagnoser("sim", seed=seed)
    compiler = make_compiler("template")
    reference = TrainingReference.from_scenes(SceneSpec.from_json(b) for f in families for b in bases[f])
    groups: dict[tuple[str, str, str], list] = {}
    success: Counter = Counter()
    for v, res in zip(envs, results, strict=True):
        if not res.ok:
            continue
        rec = RolloutRecord.from_dict(res.value)
        success[(v["family"], rec.success)] += 1
        if rec.success:
            continue
        scene = SceneSpec.from_json(v["scene"])
        d = diagnoser.diagnose(rec, scene, v["trace"], reference)
        if d is not None:
            groups.setdefault((v["family"], d.phase, d.factor), []).append((d.to_dict(), scene))
    out: dict[str, list] = {f: [] for f in families}
    summary = []
    for (f, phase, factor), items in sorted(groups.items()):
        diagnosis, scene = items[0]
        program = compiler.compile(diagnosis, scene).generation
        summary.append(
            {
                "family": f,
                "phase": phase,
                "factor": factor,
                "failures": len(items),
                "program": program.get("id") if program else None,
            }
        )
        if program is not None:
            out[f].append((len(items), program, f"{phase}/{factor}"))
    rates = {f: success[(f, True)] / max(1, success[(f, True)] + success[(f, False)]) for f in families}
    return out, {"groups": summary, "pool_success": rates}


def targeted_envs(ex, families, n: int, programs: dict[str, list], bases: dict[str, list[str]], seed: int):
    """`n` certified environments per family made by the diagnosed groups' programs on seed scenes,
    allotted ∝ failures (largest remainder), in a seeded random order (so a prefix keeps the shares)."""
    out: dict[str, list[dict]] = {}
    for fi, f in enumerate(families):
        groups = programs[f]
        if not groups:
            out[f] = []
            continue
        counts = gen.largest_remainder([c for c, _, _ in groups], n)
        got: list[dict] = []
        for g, ((_, program, name), want) in enumerate(zip(groups, counts, strict=True)):
            have, k = [], 0
            while len(have) < want and k < 4 * want + 16:
                m = want - len(have) + max(4, (want - len(have)) // 4)
                jobs = [
                    {
                        "family": f,
                        "split": "targeted",
                        "seed": _seed(seed, "targeted", f, 10_000 * g + k + i),
                        "base": bases[f][(k + i) % len(bases[f])],
                        "program": program,
                    }
                    for i in range(m)
                ]
                k += m
                have += _certified(ex, jobs, want - len(have), f"{f}: targeted {name}")
            got += [{**v, "group": name} for v in have]
        order = np.random.default_rng([seed, fi, 99]).permutation(len(got))
        out[f] = [got[i] for i in order]
    return out


def finetune(sft_policy: Path, rehearsal: list[dict], demos: list[dict], cfg, seed: int, out: Path) -> Path:
    """The rounds' policy update without the critic: `scaling.updates` imitation steps on planner demos,
    `rehearsal_share` of each batch from the seed-scene rehearsal, on all weights or LoRA adapters."""
    from coda.learn.awr import AWRConfig, PolicyUpdater
    from coda.learn.policies import ChunkPolicy, merged_copy
    from coda.learn.text import get_encoder

    c, sc = cfg.coevolve, cfg.scaling
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 5])
    policy = ChunkPolicy.from_pretrained(sft_policy)
    updater = PolicyUpdater(
        policy,
        None,
        AWRConfig(finetune=c.finetune, lora_rank=c.lora_rank, lr=sc.lr, awr_weight=0.0, seed=seed),
    )
    shares = [
        (chunk_dataset(d), s)
        for d, s in ((rehearsal, c.rehearsal_share), (demos, 1 - c.rehearsal_share))
        if d and s > 0
    ]
    total = sum(s for _, s in shares)
    enc = get_encoder()
    for _ in progress(range(sc.updates), desc=f"fine-tune ({len(demos)} demos)"):
        parts = [demo_batch(ds, round(sc.batch_size * s / total), rng) for ds, s in shares]
        imitation = {
            "obs": torch.cat([p["obs"] for p in parts]),
            "instr": enc.encode([t for p in parts for t in p["instr"]]),
            "chunk": torch.cat([p["chunk"] for p in parts]),
        }
        updater.update({}, imitation=imitation)
    policy.eval()
    final = merged_copy(policy) if policy.lora is not None else policy
    final.save_pretrained(out)
    return out


def evaluate_policy(ex, policy_dir: Path, items: list, max_chunks: int, desc: str) -> dict[str, Any]:
    jobs = [(str(Path(policy_dir).resolve()), s.to_json(), max_chunks) for _, _, s in items]
    res = ex.map(eval_job, jobs, desc=desc)
    return evaluation_summary(items, [bool(r.ok and r.value["success"]) for r in res])


def run_scaling(cfg, data_dir: Path, sft_dir: Path, out: Path, executor) -> dict[str, Any]:
    """Every (mode, N) of `cfg.scaling`, fine-tuned and evaluated; rows with paired differences to the SFT
    policy and to N = 0 on the same episodes. Finished rows are kept in `out/rows/` (a rerun resumes)."""
    from coda import data

    out = Path(out)
    (out / "rows").mkdir(parents=True, exist_ok=True)
    sc, c, families, seed = cfg.scaling, cfg.coevolve, tuple(cfg.data.families), cfg.seed
    seeds = {f: data.seed_scenes(data_dir, f) for f in families}
    bases = {f: [s.to_json() for s in seeds[f][: cfg.sft.demos_per_family]] for f in families}
    items = evaluation_items(data_dir, families, cfg.sft.eval_id_per_family, cfg.sft.eval_ood_per_suite)
    sft_policy = Path(sft_dir) / "policy"

    def cached(name: str, fn) -> dict[str, Any]:
        path = out / "rows" / f"{name}.json"
        if path.exists():
            return json.loads(path.read_text())
        row = fn()
        write_json(path, row)
        return row

    sft = cached(
        "sft", lambda: evaluate_policy(executor, sft_policy, items, cfg.sim.max_chunks, "evaluation: sft")
    )
    rehearsal_jobs = [
        {"family": f, "split": "replay", "seed": _seed(seed, "rehearsal", f, k), "base": b, "program": None}
        for f in families
        for k, b in enumerate(bases[f][: c.rehearsal_per_family])
    ]
    rehearsal = [
        v["demo"] for v in _certified(executor, rehearsal_jobs, len(rehearsal_jobs), "rehearsal demos")
    ]
    n_max = max(sc.ns)
    pools: dict[str, dict[str, list[dict]]] = {}
    meta: dict[str, Any] = {"rehearsal_demos": len(rehearsal)}
    if "uniform" in sc.modes and n_max:
        pools["uniform"] = uniform_envs(executor, families, n_max, seed)
    if "targeted" in sc.modes and n_max:
        programs, meta["targeted"] = diagnosed_programs(
            executor, cfg, families, sft_policy.resolve(), bases, seed
        )
        pools["targeted"] = targeted_envs(executor, families, n_max, programs, bases, seed)
    rows = []
    for mode in sc.modes:
        for n in sc.ns:
            if n == 0 and mode != sc.modes[0]:
                continue  # N = 0 is one run, whatever the mode

            def one(mode=mode, n=n):
                demos = [v["demo"] for f in families for v in pools.get(mode, {}).get(f, [])[:n]]
                where = finetune(sft_policy, rehearsal, demos, cfg, seed, out / "policies" / f"{mode}-{n}")
                row = evaluate_policy(executor, where, items, cfg.sim.max_chunks, f"evaluation: {mode} N={n}")
                return {**row, "demos": len(demos)}

            row = cached(f"{mode if n else 'none'}-{n}", one)
            rows.append({"mode": mode if n else "none", "n": n, **row})
    for row in rows:
        zero = next(r for r in rows if r["n"] == 0) if any(r["n"] == 0 for r in rows) else None
        row["ood_vs_sft"], row["ood_vs_sft_se"] = _ood_diff(row, sft)
        row["id_vs_sft"], row["id_vs_sft_se"] = _id_diff(row, sft)
        if zero is not None:
            row["ood_vs_n0"], row["ood_vs_n0_se"] = _ood_diff(row, zero)
    result = {"sft": sft, "rows": rows, "meta": meta, "updates": sc.updates, "finetune": c.finetune}
    write_json(out / "scaling.json", result)
    return result


def _ood_diff(a: dict, b: dict) -> tuple[float, float | None]:
    return paired_diff(a["eval_outcomes"][a["n_id"] :], b["eval_outcomes"][b["n_id"] :])


def _id_diff(a: dict, b: dict) -> tuple[float, float | None]:
    return paired_diff(a["eval_outcomes"][: a["n_id"]], b["eval_outcomes"][: b["n_id"]])


# -- the figure ------------------------------------------------------------------------------------------
COLUMNS = (
    "mode",
    "n",
    "demos",
    "id_success",
    "ood_success",
    "ood_se",
    "ood_vs_sft",
    "ood_vs_sft_se",
    "id_vs_sft",
    "ood_vs_n0",
    "ood_vs_n0_se",
    "instances",
    "layouts",
    "tasks",
    "categories",
)


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per policy (SFT first), the columns of `COLUMNS` (suites: OOD success over all families)."""
    sft = {"mode": "sft", "n": 0, "demos": 0, **result["sft"], "ood_vs_sft": 0.0, "id_vs_sft": 0.0}
    out = []
    for r in [sft, *result["rows"]]:
        row = {k: r.get(k) for k in COLUMNS}
        row.update({s: r["ood_by_suite"].get(s) for s in ("instances", "layouts", "tasks", "categories")})
        out.append(row)
    return out


def write_figures(result: dict[str, Any], figures: Path) -> None:
    """figures/data_scaling.{csv,md,png}: OOD and ID success against N, per mode, with ±1 s.e."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    figures = Path(figures)
    figures.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(table_rows(result), columns=list(COLUMNS))
    df.to_csv(figures / "data_scaling.csv", index=False)

    def pct(v):
        return "" if v is None or pd.isna(v) else f"{100 * v:.1f}"

    lines = [
        "# Data scaling: SFT + planner demonstrations of N generated environments per family",
        "",
        f"Every policy after SFT gets {result['updates']} fine-tuning updates ({result['finetune']} weights), "
        "whatever N; N = 0 rehearses the seed demonstrations only. Same evaluation episodes for every row "
        f"({result['sft']['n_id']} ID, {result['sft']['n_ood']} OOD); differences are paired, ± one s.e.",
        "",
        "| policy | N | ID % | OOD % ± s.e. | OOD vs SFT | OOD vs N=0 | ID vs SFT | instances | layouts | tasks | categories |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in df.to_dict("records"):
        vs_n0 = (
            "" if pd.isna(r["ood_vs_n0"]) else f"{100 * r['ood_vs_n0']:+.1f} ± {100 * r['ood_vs_n0_se']:.1f}"
        )
        vs_sft = (
            "" if r["mode"] == "sft" else f"{100 * r['ood_vs_sft']:+.1f} ± {100 * r['ood_vs_sft_se']:.1f}"
        )
        id_sft = "" if r["mode"] == "sft" else f"{100 * r['id_vs_sft']:+.1f}"
        lines.append(
            f"| {r['mode']} | {r['n']} | {pct(r['id_success'])} | {pct(r['ood_success'])} ± {pct(r['ood_se'])} "
            f"| {vs_sft} | {vs_n0} | {id_sft} | {pct(r['instances'])} | {pct(r['layouts'])} | {pct(r['tasks'])} "
            f"| {pct(r['categories'])} |"
        )
    groups = result.get("meta", {}).get("targeted", {}).get("groups", [])
    if groups:
        lines += [
            "",
            "Targeted groups (SFT failures on the diagnostic pool, by phase and factor): "
            + ", ".join(f"{g['family']} {g['phase']}/{g['factor']} ({g['failures']})" for g in groups),
        ]
    (figures / "data_scaling.md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    zero = df[df["mode"] == "none"]
    for mode, colour in (("uniform", "tab:blue"), ("targeted", "tab:red")):
        part = pd.concat([zero, df[df["mode"] == mode]]).sort_values("n")
        if len(part) <= len(zero):
            continue
        x = part["n"].clip(lower=1)
        ax.errorbar(
            x,
            100 * part["ood_success"],
            yerr=100 * part["ood_se"],
            marker="o",
            color=colour,
            label=f"{mode}: OOD",
            capsize=3,
        )
        ax.plot(
            x,
            100 * part["id_success"],
            linestyle="--",
            marker=".",
            color=colour,
            alpha=0.6,
            label=f"{mode}: ID",
        )
    sft = df[df["mode"] == "sft"].iloc[0]
    ax.axhline(100 * sft["ood_success"], color="grey", linewidth=0.8, label="SFT: OOD")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("generated environments per family (N; N = 0 drawn at 1)")
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(figures / "data_scaling.png", dpi=150)
    plt.close(fig)
