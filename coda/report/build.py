"""Every table and figure of the paper from finished runs, by notebook section.

``build_section("04", runs_dir, figures_dir)`` writes Table 1 and Figure 3, and so on for each section (see
`SECTIONS`); the notebooks call these and display what they wrote, and ``coda report [NAME|all]`` runs them
from the command line. Rows whose runs are missing say "not run"; no number is ever filled in by hand.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coda.report import paper
from coda.report.runs import RunResult, Runs, fmt, nested_stat, paired, rows_at, stat
from coda.report.tables import Table

SUITES = ("instances", "layouts", "tasks", "categories")
FAMILIES = ("pick_place", "stack", "drawer", "push")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        # fixed metadata and SVG element ids, so that re-running on the same runs gives identical files
        with _plt().rc_context({"svg.hashsalt": name}):
            fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else {})
        paths.append(path)
    _plt().close(fig)
    return paths


def _ablation_round(runs: Runs) -> int | None:
    """The round at which ablations are compared: the rounds the ablation runs ran."""
    rounds = [len(r.rounds) and r.rounds[-1]["round"] for r in runs.ablation.values()]
    return max(rounds) if rounds else None


def _profile_rounds(runs: Runs) -> int | None:
    base = runs.seed_run("coda") or next(iter(runs.all()), None)
    return None if base is None else base.run.get("coevolve", {}).get("rounds")


# ---------------------------------------------------------------------------------------------------------
# §4: Table 1 and Figure 3
def table1_main(runs: Runs, out: Path) -> Table:
    t = Table(
        "table1_main",
        "Table 1: OOD success after the co-evolution rounds (four task families)",
        runs.profile(),
    )
    means = {m: stat(rows_at(rs, None)) for m, rs in runs.table1.items()}
    baselines = [m for m in runs.table1 if m not in ("coda",) and means[m]["mean"] is not None]
    strongest = max(baselines, key=lambda m: means[m]["mean"]) if baselines else None
    for method in paper.TABLE1:
        rs = runs.table1.get(method, [])
        rows = rows_at(rs, None)
        s = stat(rows)
        extra: dict[str, Any] = {
            "ID": fmt(stat(rows, "id_success")),
            **{f"OOD {suite}": fmt(nested_stat(rows, "ood_by_suite", suite)) for suite in SUITES},
            **{f"OOD {fam}": fmt(nested_stat(rows, "ood_by_family", fam)) for fam in FAMILIES},
        }
        if strongest and method != strongest:
            extra[f"paired vs {strongest} (points)"] = fmt(
                paired(rs, runs.table1[strongest], None, None), signed=True
            )
        elif strongest:
            extra[f"paired vs {strongest} (points)"] = "(strongest baseline)"
        t.add(paper.TABLE1_LABELS[method], fmt(s), paper.TABLE1[method], rank=s["mean"], **extra)
    rounds = _profile_rounds(runs)
    n_ood = next((r.metrics.get("n_ood") for r in runs.all() if r.metrics.get("n_ood")), None)
    t.notes.append(
        f"After {rounds} rounds; OOD = {n_ood} fixed held-out episodes (4 suites x 4 families), the same "
        "episodes for every method, so differences are paired per seed. The paired column compares each "
        "method with the strongest baseline (highest OOD mean among the non-CoDA rows)."
    )
    sft_runs = runs.table1.get("sft", [])
    if len(sft_runs) > 1:
        t.notes.append(
            "SFT is one checkpoint; its rows are that policy evaluated once per seed (the same episodes), so "
            "they agree exactly when its actions do not depend on the evaluation seed."
        )
    if strongest and "coda" in runs.table1:
        d = paired(runs.table1["coda"], runs.table1[strongest], None, None)
        if d["mean"] is not None:
            verdict = "above" if d["mean"] > 0 else "below"
            within = d["se"] is not None and abs(d["mean"]) < 2 * d["se"]
            t.notes.append(
                f"CoDA − {strongest}: {fmt(d, signed=True)} points; CoDA is {verdict} the strongest baseline"
                + (" but within two standard errors (not significant)." if within else ".")
            )
    t.write(out)
    return t


def figure3_rounds(runs: Runs, out: Path) -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    sft = runs.seed_run("sft")
    start = sft.at(0)["ood_success"] if sft and sft.at(0) else None
    labels = {"coda": "CoDA (memory)", "critic_no_memory": "critic without memory"}
    for method, run in sorted(runs.long.items()):
        pts = run.curve()
        if start is not None:
            pts = [(0, start), *pts]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, [100 * v for v in y], marker="o", label=labels.get(method, method))
    lo, hi = paper.FIGURE3["coda"]
    ax.scatter([5, 15], [lo, hi], marker="*", s=90, color="grey", label="paper CoDA (rounds 5, 15)", zorder=3)
    ax.set_xlabel("co-evolution round (0 = SFT)")
    ax.set_ylabel("OOD success (%)")
    ax.set_title(f"Figure 3: OOD success over rounds, seed 0 (profile {runs.profile()})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save_figure(fig, out, "figure3_rounds")


# ---------------------------------------------------------------------------------------------------------
# Ablations, compared with CoDA seed 0 at the round the ablation runs ended
def _vs_coda(runs: Runs, name: str) -> tuple[RunResult | None, int | None]:
    r = _ablation_round(runs)
    return (runs.seed_run("coda") if name == "coda" else runs.ablation.get(name)), r


def _ablation_cell(runs: Runs, name: str, base: str = "coda") -> tuple[str, float | None, str]:
    run, r = _vs_coda(runs, name)
    if name == base:
        run = runs.seed_run(base)
    row = run.at(r) if run else None
    s = stat([row] if row else [])
    ref = runs.seed_run("coda")
    d = paired([run], [ref], r, r) if run and ref and name != "coda" else None
    return fmt(s), s["mean"], (fmt(d, signed=True) if d else "")


def table3_critic_sensitivity(runs: Runs, out: Path) -> Table:
    r = _ablation_round(runs)
    t = Table(
        "table3_critic_sensitivity", "Table 3: sensitivity to the failure critic (diagnoser)", runs.profile()
    )
    rows = [
        ("coda", "sim diagnoser (rollout-grounded, full)", paper.TABLE3["sim"]),
        ("critic_noisy20", "noisy diagnoser, 20% of factors replaced", paper.TABLE3["critic_noisy20"]),
        ("critic_noisy40", "noisy diagnoser, 40% of factors replaced", paper.TABLE3["critic_noisy40"]),
        ("critic_phase_only", "phase-only diagnoser (no factor evidence)", paper.TABLE3["critic_phase_only"]),
    ]
    for name, label, p in rows:
        ours, mean, d = _ablation_cell(runs, name)
        t.add(label, ours, p, rank=mean, **{"paired vs CoDA (points)": d})
    sr = runs.seed_run("sr_guided")
    row = sr.at(r) if sr else None
    s = stat([row] if row else [])
    t.add("success-rate-guided generation (reference)", fmt(s), paper.TABLE3["sr_guided"], rank=s["mean"])
    t.notes.append(
        f"Seed 0, compared at round {r}. The paper swaps four VLM critics; we have no VLM weights offline, so "
        "the rows degrade our rollout-grounded diagnoser instead (`noisy:<p>` replaces a share of diagnosed "
        "factors at random; `phase_only` keeps only the failing phase). The `vlm` diagnoser exists but needs "
        "local weights."
    )
    t.write(out)
    return t


def table4_text2potential(runs: Runs, out: Path) -> Table:
    r = _ablation_round(runs)
    t = Table("table4_text2potential", "Table 4: Text2potential ablations", runs.profile())
    rows = [
        ("coda", "Text2potential (full)", paper.TABLE4["full"]),
        ("t2p_sparse", "sparse success reward only", paper.TABLE4["t2p_sparse"]),
        (
            "t2p_task_description",
            "potentials from the task description only",
            paper.TABLE4["t2p_task_description"],
        ),
        ("t2p_no_refinement", "no potential refinement", paper.TABLE4["t2p_no_refinement"]),
        ("value_only", "value-only chunk selection (argmax Q)", paper.TABLE4["value_only"]),
    ]
    for name, label, p in rows:
        ours, mean, d = _ablation_cell(runs, name)
        t.add(label, ours, p, rank=mean, **{"paired vs CoDA (points)": d})
    speed = updates_to_reach(runs)
    t.notes.append(f"Seed 0, compared at round {r}.")
    t.notes.append(speed["note"])
    t.write(out)
    return t


def updates_to_reach(runs: Runs) -> dict[str, Any]:
    """Policy updates until OOD success first reaches a threshold (the paper: 25%), full vs sparse."""
    full, sparse = runs.seed_run("coda"), runs.ablation.get("t2p_sparse")
    if not full or not sparse:
        return {"note": "Updates-to-threshold: the full and sparse runs are both needed (not run)."}
    curves = {
        k: [(row["updates"], row["ood_success"]) for row in run.rounds if row.get("ood_success") is not None]
        for k, run in (("full", full), ("sparse", sparse))
    }
    last = min(max((u for u, _ in c), default=0) for c in curves.values())
    curves = {k: [(u, v) for u, v in c if u <= last] for k, c in curves.items()}
    target = 0.25
    best = min(max((v for _, v in c), default=0) for c in curves.values())
    if best < target:  # our runs may never reach 25%: use the lower of the two runs' best success
        target = best
    first = {k: next((u for u, v in c if v >= target), None) for k, c in curves.items()}
    if None in first.values() or not first["sparse"]:
        return {"note": "Updates-to-threshold: not reached by both runs.", **first}
    saving = 100 * (1 - first["full"] / first["sparse"])
    return {
        "note": (
            f"Updates to reach {100 * target:.1f}% OOD (seed 0, evaluated once per round): full "
            f"{first['full']}, sparse {first['sparse']} ({saving:+.0f}% fewer with shaping; paper: "
            f"{paper.TABLE4_FEWER_UPDATES_TO_25:.0f}% fewer to 25%). Round granularity makes this coarse."
        ),
        "target": target,
        **first,
        "fewer_pct": saving,
    }


def learning_speed(runs: Runs, out: Path, data_dir: str | Path = "data") -> dict[str, Any]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for run, label in (
        (runs.seed_run("coda"), "Text2potential (full)"),
        (runs.ablation.get("t2p_sparse"), "sparse reward only"),
    ):
        if run is None:
            continue
        pts = [
            (row["updates"], 100 * row["id_success"])
            for row in run.rounds
            if row.get("id_success") is not None
        ]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, y, marker="o", label=label)
    ax.set_xlabel("policy updates")
    ax.set_ylabel("ID success (%)")
    agreement = critic_agreement(runs)
    title = "Learning speed: ID success vs policy updates"
    if agreement.get("agreement") is not None:
        title += f" (critics agree on {agreement['agreement']:.0f}% of chunk choices)"
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save_figure(fig, out, "learning_speed")
    (out / "learning_speed.json").write_text(
        json.dumps({**agreement, **updates_to_reach(runs)}, indent=1) + "\n"
    )
    return agreement


def critic_agreement(runs: Runs, n_states: int = 256) -> dict[str, Any]:
    """Share of states on which the full-shaping and sparse-only critics pick the same chunk (argmax Q) among
    j candidates sampled from the SFT policy, at the states of the full run's replay (end of the sparse run's
    last round); the paper reports 97% at the end of training."""
    import torch

    from coda.learn.critic import ChunkCritic
    from coda.learn.policies import ChunkPolicy
    from coda.learn.replay import ChunkReplay
    from coda.learn.text import get_encoder

    full, sparse = runs.seed_run("coda"), runs.ablation.get("t2p_sparse")
    if not full or not sparse or not sparse.rounds:
        return {"agreement": None, "n": 0}
    r = sparse.rounds[-1]["round"]
    dirs = [x.path / "rounds" / f"round-{r:04d}" for x in (full, sparse)]
    sft = runs.root / "sft" / "policy"
    if not all((d / "critic").is_dir() for d in dirs) or not sft.is_dir():
        return {"agreement": None, "n": 0}
    critics = [ChunkCritic.from_pretrained(d / "critic").eval() for d in dirs]
    replay = ChunkReplay.load(dirs[0] / "replay")
    rng = np.random.default_rng(0)
    batch = replay.gather(rng.choice(len(replay), size=min(n_states, len(replay)), replace=False))
    policy = ChunkPolicy.from_pretrained(sft).eval()
    obs = torch.as_tensor(batch["obs"]).float()
    instr = get_encoder().encode(list(batch["instruction"]))
    j = full.run.get("coevolve", {}).get("j", 8)
    with torch.inference_mode():
        chunks = policy.sample(obs, instr, j, generator=torch.Generator().manual_seed(0))
        picks = [c(obs, instr, chunks).argmax(-1) for c in critics]
    agree = float((picks[0] == picks[1]).float().mean())
    return {"agreement": 100 * agree, "n": int(obs.shape[0]), "round": r, "paper": paper.CRITIC_AGREEMENT}


# ---------------------------------------------------------------------------------------------------------
# Appendix C: memory design, complementarity, transfer, generation quality, compute
def complementarity(runs: Runs, out: Path) -> Table:
    r = _ablation_round(runs)
    t = Table(
        "complementarity", "Program complementarity: generation store, training store, both", runs.profile()
    )
    for name, label in (
        ("critic_no_memory", "critic without memory (no program stores)"),
        ("gen_store_only", "generation-program store only"),
        ("train_store_only", "training-program store only"),
        ("coda", "both stores (CoDA)"),
    ):
        run = runs.seed_run(name) if name in ("coda", "critic_no_memory") else runs.ablation.get(name)
        row = run.at(r) if run else None
        s = stat([row] if row else [])
        ref = runs.seed_run("critic_no_memory")
        d = paired([run], [ref], r, r) if run and ref and name != "critic_no_memory" else None
        t.add(
            label,
            fmt(s),
            paper.COMPLEMENTARITY[name],
            rank=s["mean"],
            **{"paired vs no memory (points)": fmt(d, signed=True) if d else ""},
        )
    t.notes.append(f"Seed 0, compared at round {r}.")
    t.write(out)
    return t


def _memory_info(run: RunResult | None) -> dict[str, Any]:
    if run is None:
        return {}
    mem = run.path / "memory"
    size = sum(f.stat().st_size for f in mem.rglob("*") if f.is_file()) if mem.is_dir() else 0
    snaps = sorted(mem.glob("round-*")) if mem.is_dir() else []
    last = snaps[-1] if snaps else None
    last_size = sum(f.stat().st_size for f in last.rglob("*") if f.is_file()) if last else 0
    return {"snapshot_mb": last_size / 1e6, "all_snapshots_mb": size / 1e6}


def table5_memory_design(runs: Runs, out: Path) -> Table:
    r = _ablation_round(runs)
    t = Table("table5_memory_design", "Table 5: memory design at a fixed generation budget", runs.profile())
    for name, label in (
        ("critic_no_memory", "no memory: per-rollout diagnoses, success-rate-guided generation"),
        ("gen_store_only", "generation programs + construction traces only"),
        ("train_store_only", "training programs only (recurrence-validated modes)"),
        ("coda", "full memory: traces, diagnoses, modes, both program stores"),
        ("transfer", "full memory + cross-family program transfer"),
        ("adaptive", "full memory + adaptive round scheduling"),
    ):
        run = runs.seed_run(name) if name in ("coda", "critic_no_memory") else runs.ablation.get(name)
        row = run.at(r) if run else None
        s = stat([row] if row else [])
        mrow = next((x for x in (run.rounds if run else []) if x.get("round") == r), {})
        info = _memory_info(run)
        t.add(
            label,
            fmt(s),
            None,
            rank=s["mean"],
            modes=mrow.get("modes"),
            validated=mrow.get("validated_modes"),
            **{
                "generation programs": mrow.get("generation_programs"),
                "training programs": mrow.get("training_programs"),
                "accepted envs": mrow.get("envs_accepted_total"),
                "snapshot MB": round(info["snapshot_mb"], 2) if info else None,
            },
        )
    t.notes.append(
        f"Seed 0, round {r}. The paper's summary describes Table 5 as a study of memory design choices at a "
        "fixed generation budget without numbers we can quote, hence `—`. Every row had the same environment "
        "budget per round; counts are those of the run's memory at that round."
    )
    t.write(out, check_order=False)
    return t


def figure5_memory_snapshots(runs: Runs, out: Path) -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    r = _ablation_round(runs) or 0
    for name, label in (
        ("coda", "both program types (CoDA)"),
        ("gen_store_only", "generation programs only"),
        ("train_store_only", "training programs only"),
        ("critic_no_memory", "no memory"),
    ):
        run = runs.seed_run(name) if name in ("coda", "critic_no_memory") else runs.ablation.get(name)
        if run is None:
            continue
        pts = [(x, 100 * y) for x, y in run.curve() if x <= r]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, y, marker="o", label=label)
    ax.set_xlabel("memory snapshot (round)")
    ax.set_ylabel("OOD success (%)")
    ax.set_title(
        f"Figure 5: OOD success across memory snapshots, seed 0 (profile {runs.profile()})", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save_figure(fig, out, "figure5_memory_snapshots")


def table6_family_transfer(runs: Runs, out: Path) -> Table:
    """Learning progress of transferred generation programs relative to within-family ones (Appendix A)."""
    from coda.memory.store import load_snapshot, resolve_snapshot

    t = Table("table6_family_transfer", "Table 6: cross-family generation-program transfer", runs.profile())
    run = runs.ablation.get("transfer")
    if run is None:
        t.add(
            "transferred programs, % of within-family learning progress",
            "not run",
            paper.TABLE6["transferred"],
        )
        t.write(out, check_order=False)
        return t
    mem = load_snapshot(resolve_snapshot(run.path))
    programs = mem.programs("generation")
    validated = mem.modes("validated")

    def is_transfer(m) -> bool:
        prog = programs.get(m.generation_program_id or "")
        return bool(prog) and prog.get("source") == "transfer"

    within = [m for m in validated if not is_transfer(m)]
    moved = [m for m in validated if is_transfer(m)]
    first_transfer = min((m.created_round for m in mem.modes() if is_transfer(m)), default=None)
    scratch = [m for m in within if first_transfer is not None and m.created_round >= first_transfer]
    lp = lambda ms: float(np.mean([m.learning_progress for m in ms])) if ms else None  # noqa: E731
    base = lp(within)

    def rel(ms) -> dict[str, Any]:
        v = lp(ms)
        if v is None or not base:
            return {
                "mean": None,
                "se": None,
                "n": len(ms),
                "empty": "none validated" if not ms else "no progress yet",
            }
        return {"mean": 100 * v / base, "se": None, "n": len(ms)}

    n_transferred = sum(is_transfer(m) for m in mem.modes())
    t.add(
        "within-family validated programs (reference)",
        fmt(rel(within)),
        paper.TABLE6["within"],
        rank=rel(within)["mean"],
        **{"mean learning progress": lp(within)},
    )
    t.add(
        "transferred programs (validated in the target family)",
        fmt(rel(moved)),
        paper.TABLE6["transferred"],
        rank=rel(moved)["mean"],
        **{"mean learning progress": lp(moved)},
    )
    t.add(
        "target-family programs found from scratch after transfer began",
        fmt(rel(scratch)),
        paper.TABLE6["scratch"],
        rank=rel(scratch)["mean"],
        **{"mean learning progress": lp(scratch)},
    )
    ref = runs.seed_run("coda")
    r = run.rounds[-1]["round"] if run.rounds else None
    t.notes.append(
        f"Seed 0, {r} rounds with `transfer: true`: {n_transferred} programs were lifted to other families, "
        f"{len(moved)} of them validated by control experiments in the target family. Values are mean "
        "learning progress (|fast − slow EMA| of targeted success) relative to the within-family validated "
        "programs of the same run; n counts modes, not seeds. The paper's rows are per family pair."
    )
    if ref and run.at(r) and ref.at(r):
        t.notes.append(
            f"OOD at round {r}: transfer run {100 * run.at(r)['ood_success']:.1f}%, CoDA without transfer "
            f"{100 * ref.at(r)['ood_success']:.1f}%."
        )
    t.write(out)
    return t


def table7_backbone_transfer(runs: Runs, out: Path) -> Table:
    t = Table("table7_backbone_transfer", "Table 7: memory reuse across policy backbones", runs.profile())
    sft_b, reuse_b = runs.backbone.get("sft_b"), runs.backbone.get("reuse_b")
    s_sft = stat(rows_at([sft_b], None)) if sft_b else stat([])
    s_reuse = stat(rows_at([reuse_b], None)) if reuse_b else stat([])
    meta = next(
        (
            p
            for p in (runs.root.parent / "metrics" / "sft_b.json", runs.root / "sft_b" / "metrics.json")
            if p.is_file()
        ),
        runs.root / "sft_b" / "metrics.json",
    )
    backbone_b = json.loads(meta.read_text()).get("backbone") if meta.is_file() else None
    t.add("backbone B after SFT", fmt(s_sft), paper.TABLE7["sft_b"], rank=s_sft["mean"])
    t.add(
        "backbone B + frozen CoDA memory (no new generation)",
        fmt(s_reuse),
        paper.TABLE7["reuse_b"],
        rank=s_reuse["mean"],
    )
    gain = paired([reuse_b], [sft_b], None, None) if sft_b and reuse_b else None
    t.add(
        "gain from reused memory (points)",
        fmt(gain, signed=True) if gain else "not run",
        paper.TABLE7["gain"],
    )
    a_sft, a_coda = runs.seed_run("sft"), runs.seed_run("coda")
    for label, run in (
        ("backbone A (primary) after SFT", a_sft),
        ("backbone A + CoDA (memory source)", a_coda),
    ):
        s = stat(rows_at([run], None)) if run else stat([])
        t.add(label, fmt(s), None)
    t.notes.append(
        "Backbone A is the profile's `sft.backbone`; backbone B is `experiments.backbone_b` (here "
        f"{backbone_b or 'see params.yaml'}), trained by SFT on the same planner demonstrations and then by "
        "`memory_reuse`: replaying the frozen memory of CoDA seed 0 (its scenes and training programs), with "
        "no environment generation. One direction only (A's memory to B)."
    )
    t.write(out, check_order=False)
    return t


def _scenes_table(run: RunResult | None):
    from coda.memory.store import load_snapshot, resolve_snapshot

    if run is None or not (run.path / "memory").is_dir():
        return None
    return load_snapshot(resolve_snapshot(run.path))


def generated_scenes(mem) -> list:
    """(family, SceneSpec) of every generated scene in a memory (not seeds or replays)."""
    from coda.sim.scene import SceneSpec

    keep = ("targeted", "control", "mutation", "novel", "transfer")
    return [
        (r["family"], SceneSpec.from_json(r["spec_json"])) for r in mem.rows("scenes") if r["split"] in keep
    ]


def uniform_proposals(run: RunResult, data_dir: str | Path) -> list:
    """What uniform generation proposes: as many scenes as the run accepted, sampled per family from the
    generator space with the run's seed (`uniform` keeps no memory, so its scenes are re-drawn here)."""
    from coda import data
    from coda.sim.assets import load_catalog
    from coda.sim.families import REGISTRY

    catalog = load_catalog(Path(data_dir))
    families = run.run.get("families") or list(FAMILIES)
    n = (run.metrics.get("envs_accepted_total") or 0) // max(1, len(families))
    return [
        (f, REGISTRY[f].sample(data.scene_rng(run.seed, f, "generator", i), catalog, "generator"))
        for f in families
        for i in range(n)
    ]


def coverage_entropy(scenes, data_dir: str | Path = "data") -> float | None:
    """Entropy (bits) of scenes over (family, most-perturbed factor, perturbation size) cells: each scene
    falls in the cell of the factor farthest from the family's seed scenes (in units of the seed spread),
    in three size bins (< 1, 1–2, > 2 spreads)."""
    from coda import data
    from coda.engine.diagnose import factor_values

    if not scenes:
        return None
    ref: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    cells = Counter()
    for f, scene in scenes:
        if f not in ref:
            vals: dict[str, list] = {}
            for s in data.seed_scenes(Path(data_dir), f, limit=100):
                for k, v in factor_values(s).items():
                    if isinstance(v, int | float | tuple | list):
                        vals.setdefault(k, []).append(np.atleast_1d(np.asarray(v, dtype=float)))
            ref[f] = {k: (np.mean(v, 0), np.std(v, 0) + 1e-6) for k, v in vals.items()}
        best, size = None, 0.0
        for k, v in factor_values(scene).items():
            if k not in ref[f] or not isinstance(v, int | float | tuple | list):
                continue
            mu, sd = ref[f][k]
            z = float(np.max(np.abs((np.atleast_1d(np.asarray(v, dtype=float)) - mu) / sd)))
            if z > size:
                best, size = k, z
        cells[(f, best, 0 if size < 1 else 1 if size < 2 else 2)] += 1
    p = np.array(list(cells.values()), dtype=float)
    p /= p.sum()
    return float(-(p * np.log2(p)).sum())


def table8_generation_quality(runs: Runs, out: Path, data_dir: str | Path = "data") -> Table:
    t = Table(
        "table8_generation_quality", "Table 8: generation quality and diagnosis agreement", runs.profile()
    )
    coda, uni = runs.table1.get("coda", []), runs.table1.get("uniform", [])

    def over_rounds(rs, key):
        vals = [
            float(np.mean([x[key] for x in r.rounds if x.get(key) is not None]))
            for r in rs
            if any(x.get(key) is not None for x in r.rounds)
        ]
        return {**stat([{key: v} for v in vals], key)}

    def precision(rs, split):
        vals = []
        for r in rs:
            sr = [
                x["success_by_split"].get(split)
                for x in r.rounds
                if (x.get("success_by_split") or {}).get(split) is not None
            ]
            if sr:
                vals.append(1 - float(np.mean(sr)))
        return stat([{"v": v} for v in vals], "v")

    def entropy(rs, uniform=False):
        sets = (
            [uniform_proposals(r, data_dir) for r in rs]
            if uniform
            else [generated_scenes(m) for m in (_scenes_table(r) for r in rs) if m]
        )
        vals = [e for e in (coverage_entropy(x, data_dir) for x in sets) if e is not None]
        m = float(np.mean(vals)) if vals else None
        se = float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None
        return {"mean": m, "se": se, "n": len(vals)}

    def add(label, s, p, digits=1, rank_group=None):
        t.add(label, fmt(s, digits), p)

    add(
        "validity, CoDA: proposals passing every check first time",
        over_rounds(coda, "validity_pass_first"),
        paper.TABLE8["validity_coda"],
    )
    add(
        "validity, uniform generation",
        over_rounds(uni, "validity_pass_first"),
        paper.TABLE8["validity_uniform"],
    )
    add(
        "targeting precision, CoDA: targeted envs on which the policy fails",
        precision(coda, "targeted"),
        paper.TABLE8["precision_coda"],
    )
    add(
        "targeting precision, uniform: generated envs on which the policy fails",
        precision(uni, "novel"),
        paper.TABLE8["precision_uniform"],
    )
    add("coverage entropy, CoDA (bits)", entropy(coda), f"{paper.TABLE8['entropy_coda']:.2f}", digits=2)
    add(
        "coverage entropy, uniform (bits)",
        entropy(uni, uniform=True),
        f"{paper.TABLE8['entropy_uniform']:.2f}",
        digits=2,
    )
    final = rows_at(coda, None)
    totals = [_totals(r) for r in coda]
    rej = stat(
        [{"v": x["rejected_diagnoses"] / x["diagnoses"] if x.get("diagnoses") else None} for x in totals], "v"
    )
    add("CoDA: diagnoses rejected by control experiments", rej, paper.TABLE8["rejected_share"])
    add(
        "CoDA: diagnosis agreement, all diagnoses",
        stat(final, "agreement_before"),
        paper.TABLE8["agreement_before"],
    )
    add(
        "CoDA: diagnosis agreement, after rejection",
        stat(final, "agreement_after"),
        paper.TABLE8["agreement_after"],
    )
    t.notes.append(
        "Validity: share of proposals that pass every physical check before repair, averaged over rounds "
        "(`validity_pass_first`); the validity checks and repairs are the same for every method. Targeting "
        "precision: for CoDA the share of *targeted* environments (recreating a diagnosed difficulty) on which "
        "the policy fails; for uniform generation, the share of its generated environments on which it fails. "
        "Coverage entropy: scenes binned by (family, most-perturbed factor, size of the perturbation in seed "
        "spreads); uniform generation keeps no memory, so its proposals are re-drawn from the generator space "
        "with the run's seed, as many as it accepted."
    )
    t.notes.append(
        "Diagnosis agreement is scored against the factor each generation program perturbed (ground truth "
        "known to the generator), not against human annotators as in the paper; 'after rejection' keeps the "
        "diagnoses whose mode was validated by control experiments and whose failing scene lies in the "
        "validated program's region, which is partly structural (see README)."
    )
    t.write(out, check_order=False)
    return t


def _totals(run: RunResult) -> dict[str, Any]:
    return {
        "diagnoses": sum(x.get("diagnoses") or 0 for x in run.rounds),
        "rejected_diagnoses": run.metrics.get("rejected_diagnoses") or 0,
    }


def table9_compute(runs: Runs, out: Path) -> Table:
    t = Table(
        "table9_compute",
        "Table 9: compute per 1,000 accepted environments; adaptive scheduling",
        runs.profile(),
    )
    t.columns = ["row", "ours (mean ± s.e., n)", "paper"]

    def per_1000(rs, fn):
        vals = []
        for r in rs:
            envs = r.metrics.get("envs_accepted_total") or sum(x.get("envs_accepted") or 0 for x in r.rounds)
            if envs:
                vals.append(1000 * fn(r) / envs)
        return {
            "mean": float(np.mean(vals)) if vals else None,
            "se": float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None,
            "n": len(vals),
        }

    tokens = lambda r: sum(
        (x.get("tokens_prompt") or 0) + (x.get("tokens_completion") or 0) for x in r.rounds
    )  # noqa: E731
    cpu_h = lambda r: sum((x.get("cpu_s") or 0) + (x.get("worker_cpu_s") or 0) for x in r.rounds) / 3600  # noqa: E731
    wall_h = lambda r: sum(x.get("wall_s") or 0 for x in r.rounds) / 3600  # noqa: E731
    coda = runs.table1.get("coda", [])
    for m in ("coda", "sr_guided", "uniform"):
        rs = runs.table1.get(m, [])
        t.rows.append(
            {
                "row": f"{m}: CPU-hours (main + workers) per 1,000 accepted envs",
                t.columns[1]: fmt(per_1000(rs, cpu_h), 2),
                "paper": "66 GPU-h (CoDA)" if m == "coda" else "—",
            }
        )
    t.rows.append(
        {
            "row": "coda: wall-clock hours per 1,000 accepted envs",
            t.columns[1]: fmt(per_1000(coda, wall_h), 2),
            "paper": "—",
        }
    )
    t.rows.append(
        {
            "row": "coda: LLM tokens per 1,000 accepted envs",
            t.columns[1]: fmt(per_1000(coda, tokens), 0),
            "paper": "7.4M",
        }
    )
    r = _ablation_round(runs)
    fixed, adaptive = runs.seed_run("coda"), runs.ablation.get("adaptive")
    for label, run, p in (
        ("fixed scheduling: OOD success (%)", fixed, paper.TABLE9["ood_fixed"]),
        ("adaptive scheduling: OOD success (%)", adaptive, paper.TABLE9["ood_adaptive"]),
    ):
        row = run.at(r) if run else None
        t.rows.append({"row": label, t.columns[1]: fmt(stat([row] if row else [])), "paper": p})
    if fixed and adaptive:

        def cost(run):
            rows = [x for x in run.rounds if x["round"] <= (r or 0)]
            return sum((x.get("cpu_s") or 0) + (x.get("worker_cpu_s") or 0) for x in rows), sum(
                x.get("round_updates") or 0 for x in rows
            )

        (cf, uf), (ca, ua) = cost(fixed), cost(adaptive)
        t.rows.append(
            {
                "row": "adaptive vs fixed: CPU-seconds change (%)",
                t.columns[1]: fmt({"mean": 100 * (ca / cf - 1) if cf else None, "se": None, "n": 1}),
                "paper": paper.TABLE9["adaptive_cost_change"],
            }
        )
        t.rows.append(
            {
                "row": "adaptive vs fixed: policy updates change (%)",
                t.columns[1]: fmt({"mean": 100 * (ua / uf - 1) if uf else None, "se": None, "n": 1}),
                "paper": "—",
            }
        )
    t.notes.append(
        "This machine has no GPU: compute is CPU-seconds of the main process (training) plus the simulation "
        "workers, as measured by the runs. The default compiler is the offline template compiler, which uses "
        "no LLM tokens (0); the `hf`/`openai` compilers count tokens. Scheduling rows: seed 0 at the "
        f"ablation round ({r})."
    )
    t.write(out, check_order=False)
    return t


def sft_baseline(runs: Runs, out: Path) -> Table:
    t = Table("sft_baseline", "SFT baseline: success of the starting policy", runs.profile())
    # metrics/sft.json is the sft stage's tracked metric file; runs/sft/metrics.json is the same, untracked
    candidates = [runs.root.parent / "metrics" / "sft.json", runs.root / "sft" / "metrics.json"]
    path = next((p for p in candidates if p.is_file()), None)
    m = json.loads(path.read_text()) if path else None
    if m is None:
        t.add("SFT OOD", "not run", paper.TABLE1["sft"])
        t.write(out, check_order=False)
        return t

    def se(key):  # binomial s.e. over the episodes (older metric files have none)
        return 100 * m[key] if m.get(key) is not None else None

    t.add(
        "OOD success, all suites",
        fmt({"mean": 100 * m["ood_mean"], "se": se("ood_se"), "n": 1}),
        paper.TABLE1["sft"],
    )
    t.add(
        "ID success (held-back seed scenes)",
        fmt({"mean": 100 * m["id_mean"], "se": se("id_se"), "n": 1}),
        None,
    )
    for suite, v in m.get("ood_suite_mean", {}).items():
        t.add(f"OOD suite {suite}, all families", fmt({"mean": 100 * v, "se": None, "n": 1}), None)
    for fam, v in sorted(m["ood_success"].items()):
        t.add(
            f"OOD {fam}",
            fmt({"mean": 100 * v, "se": None, "n": 1}),
            None,
            **{s: round(100 * m["ood_by_suite"][fam][s], 1) for s in SUITES},
        )
    t.notes.append(
        f"{m['demos']} planner demonstrations, {m['updates']} updates; ID over {m['n_id']} and OOD over "
        f"{m['n_ood']} episodes (the same episodes as every run's final evaluation); ± is the binomial s.e."
    )
    t.write(out, check_order=False)
    return t


def figure6_gallery(
    runs: Runs, out: Path, data_dir: str | Path = "data", image_size: int = 160
) -> list[Path]:
    """Validated variations: per family, a seed scene and targeted scenes of CoDA seed 0's validated modes."""
    from coda.report.gallery import gallery_scenes, render_scenes

    plt = _plt()
    picks = gallery_scenes(runs.seed_run("coda"), data_dir)
    images = render_scenes([s for _, _, s in picks], data_dir, image_size)
    cols = max(
        1, max((sum(1 for f, _, _ in picks if f == fam) for fam in {f for f, _, _ in picks}), default=1)
    )
    fams = sorted({f for f, _, _ in picks})
    fig, axes = plt.subplots(
        len(fams) or 1, cols, figsize=(2.2 * cols, 2.3 * max(1, len(fams))), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    for i, fam in enumerate(fams):
        items = [(lab, img) for (f, lab, _), img in zip(picks, images) if f == fam]
        for k, (lab, img) in enumerate(items):
            axes[i, k].imshow(img)
            axes[i, k].set_title(f"{fam}: {lab}", fontsize=6)
    fig.suptitle("Figure 6: seed scenes and validated variations (CoDA seed 0 memory)", fontsize=9)
    return _save_figure(fig, out, "figure6_gallery")


def summary(runs: Runs, out: Path) -> dict[str, Any]:
    """Small metric files for `dvc metrics show` / `dvc plots show`: ``results.json`` (OOD/ID per method and
    ablation) and ``curves.csv`` (OOD per evaluated round, one column per seed-0 run)."""
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"profile": runs.profile(), "table1": {}, "ablation": {}}
    for m, rs in runs.table1.items():
        rows = rows_at(rs, None)
        s, i = stat(rows), stat(rows, "id_success")
        res["table1"][m] = {
            "ood": _round(s["mean"]),
            "ood_se": _round(s["se"]),
            "id": _round(i["mean"]),
            "n": s["n"],
        }
    for name, run in runs.ablation.items():
        s = stat(rows_at([run], None))
        res["ablation"][name] = {
            "ood": _round(s["mean"]),
            "round": run.rounds[-1]["round"] if run.rounds else None,
        }
    (out / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    curves: dict[str, dict[int, float]] = {}
    for name, run in [
        *((m, runs.seed_run(m)) for m in runs.table1),
        *runs.ablation.items(),
        *((f"long_{k}", v) for k, v in runs.long.items()),
    ]:
        if run is not None and run.method != "sft":
            curves[name] = {r: 100 * v for r, v in run.curve()}
    for name in CURVES:  # fixed columns, so that dvc.yaml's plot definition always finds them
        curves.setdefault(name, {})
    rounds = sorted({r for c in curves.values() for r in c})
    lines = ["round," + ",".join(curves)]
    for r in rounds:
        lines.append(f"{r}," + ",".join("" if r not in c else f"{c[r]:.2f}" for c in curves.values()))
    (out / "curves.csv").write_text("\n".join(lines) + "\n")
    return res


INDEX = [  # (file stem, what it is, paper section / notebook)
    ("table1_main", "Table 1: main OOD success, all methods", "§4 · 04"),
    ("figure3_rounds", "Figure 3: OOD success over rounds, with and without memory", "§4 · 04"),
    ("table3_critic_sensitivity", "Table 3: critic (diagnoser) sensitivity", "§4 · 06"),
    ("table4_text2potential", "Table 4: Text2potential ablations", "§4 · 05"),
    ("learning_speed", "Learning speed with and without shaping; critic agreement", "App. C · 05"),
    ("table5_memory_design", "Table 5: memory design at a fixed budget", "App. C · 08"),
    ("complementarity", "Program complementarity (generation / training / both)", "App. C · 08"),
    ("figure5_memory_snapshots", "Figure 5: OOD success across memory snapshots", "App. C · 08"),
    ("table6_family_transfer", "Table 6: cross-family program transfer", "App. C · 07"),
    ("table7_backbone_transfer", "Table 7: memory reuse across policy backbones", "App. C · 07"),
    ("table8_generation_quality", "Table 8: generation quality and diagnosis agreement", "App. C · 09"),
    ("table9_compute", "Table 9: compute and adaptive scheduling", "App. C · 09"),
    ("figure6_gallery", "Figure 6: rendered seed scenes and validated variations", "App. C · 01"),
    ("sft_baseline", "SFT baseline (starting point of every method)", "02"),
    ("table2_libero_pro", "Table 2: LIBERO-Pro (its own issue and notebook 10)", "§4 · 10"),
]


def index(runs: Runs, out: Path) -> Path:
    """figures/README.md: every artifact, its files, and whether our ordering matches the paper's."""
    lines = [
        "# Tables and figures",
        "",
        f"Regenerated by `dvc repro` (profile `{runs.profile()}`, from the runs under `runs/`). Each table is a "
        "CSV and a Markdown file with our numbers (`ours (mean ± s.e., n)`) beside the paper's (`paper`); "
        "each figure is a PNG and an SVG. The notebook column names the notebook that writes it.",
        "",
        "| artifact | what | section · notebook | files | ordering vs paper |",
        "|---|---|---|---|---|",
    ]
    for stem, what, where in INDEX:
        files = sorted(p.name for p in out.glob(f"{stem}.*"))
        md = out / f"{stem}.md"
        order = ""
        if md.is_file():
            text = md.read_text()
            order = (
                "differs" if "ordering differs" in text else "matches" if "matches the paper" in text else "—"
            )
        shown = ", ".join(f"[{f}]({f})" for f in files) or "not built"
        lines.append(f"| `{stem}` | {what} | {where} | {shown} | {order} |")
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


CURVES = (
    "coda",
    "critic_no_memory",
    "sr_guided",
    "gen_store_only",
    "train_store_only",
    "t2p_sparse",
    "long_coda",
    "long_critic_no_memory",
)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# ---------------------------------------------------------------------------------------------------------
SECTIONS: dict[str, list[str]] = {
    "01": ["figure6_gallery"],
    "02": ["sft_baseline"],
    "04": ["table1_main", "figure3_rounds"],
    "05": ["table4_text2potential", "learning_speed"],
    "06": ["table3_critic_sensitivity"],
    "07": ["table6_family_transfer", "table7_backbone_transfer"],
    "08": ["table5_memory_design", "complementarity", "figure5_memory_snapshots"],
    "09": ["table8_generation_quality", "table9_compute"],
}
BUILDERS = {name: globals()[name] for names in SECTIONS.values() for name in names}


def _libero(name: str):
    def builder(runs: Runs, out: Path):
        from coda.report import libero

        return getattr(libero, name)(runs.root, out)

    return builder


SECTIONS["10"] = ["table2_libero_pro", "libero_planner"]
BUILDERS.update({name: _libero(name) for name in SECTIONS["10"]})
BUILDERS["summary"] = summary
BUILDERS["index"] = index  # not a paper artifact: the pipeline's metric files (written to metrics/)
DATA_BUILDERS = {"figure6_gallery", "learning_speed", "table8_generation_quality"}


def build(
    name: str,
    runs_dir: str | Path = "runs",
    figures_dir: str | Path = "figures",
    data_dir: str | Path = "data",
):
    """Build one artifact (a table returns its `Table`, a figure its paths)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown artifact {name!r}; known: {', '.join(BUILDERS)}")
    runs = Runs.load(runs_dir)
    kwargs = {"data_dir": data_dir} if name in DATA_BUILDERS else {}
    return BUILDERS[name](runs, Path(figures_dir), **kwargs)


def build_section(section: str, runs_dir="runs", figures_dir="figures", data_dir="data") -> dict[str, Any]:
    return {name: build(name, runs_dir, figures_dir, data_dir) for name in SECTIONS[section]}


def main(args: argparse.Namespace) -> int:
    names = (
        [n for n in BUILDERS if n not in ("summary", "index")] + ["index"]
        if args.what == "all"
        else SECTIONS.get(args.what, [args.what])
    )
    for name in names:
        build(name, args.runs, args.figures, getattr(args, "data", "data"))
        print(name)
    return 0
