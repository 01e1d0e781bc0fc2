"""A run's state and its checkpoints: what a round leaves behind so that a re-run resumes after it.

A run directory holds ``memory/round-NNNN/`` (memory snapshots), ``rounds/round-NNNN/`` (the policy — LoRA
adapter or, when fine-tuning all weights, the whole policy — critic, replay, demonstrations, rehearsal and
``state.json``), ``rounds.json`` (per-round metrics, for ``dvc plots``) and ``metrics.json``. A round is
complete when its ``rounds/round-NNNN`` directory exists (written under a temporary name and renamed);
re-running on the same directory resumes after the last complete round, and because every random choice of a
round is seeded from (seed, round), the result equals an uninterrupted run's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.engine import generate as gen
from coda.files import write_json
from coda.learn.demos import pack_demos, unpack_demos


def git_info() -> dict[str, Any]:
    """The code's git SHA and whether tracked files differ from it (recorded in every run.json)."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        sha, dirty = None, None
    return {"git_sha": sha, "git_dirty": dirty}


TRAIN_LOG = "train_log.csv"
TRAIN_LOG_COLUMNS = ("round", "kind", "step", "loss", "awr_loss", "imitation_loss", "ess_fraction")


def train_log_csv(rows, *, header: bool) -> str:
    """Per-update log rows as CSV (`TRAIN_LOG_COLUMNS`; kind "critic": TD loss per critic update, "policy":
    AWR + imitation loss per policy update; step counts that kind's updates over the run; blank = none)."""
    lines = [",".join(TRAIN_LOG_COLUMNS)] if header else []
    for row in rows:
        cells = []
        for key in TRAIN_LOG_COLUMNS:
            v = row.get(key)
            cells.append("" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n" if lines else ""


def write_train_log(out: Path, r: int) -> None:
    """`out`/train_log.csv: the logs of rounds 1..r from their checkpoints, in order (`dvc plots` reads it)."""
    parts = [",".join(TRAIN_LOG_COLUMNS) + "\n"]
    for k in range(1, r + 1):
        path = round_dir(out, k) / TRAIN_LOG
        if path.is_file():
            parts.append("".join(path.read_text().splitlines(keepends=True)[1:]))
    (out / TRAIN_LOG).write_text("".join(parts))


def round_dir(out: Path, r: int) -> Path:
    return out / "rounds" / f"round-{r:04d}"


def last_complete_round(out: Path) -> int:
    """The highest round whose directory and memory snapshot are both complete (0 when none)."""
    rounds = out / "rounds"
    if not rounds.is_dir():
        return 0
    done = [
        int(p.name[6:])
        for p in rounds.iterdir()
        if p.name.startswith("round-") and (p / "state.json").exists()
    ]
    return max(done, default=0)


@dataclass
class RunState:
    """Everything a round changes: the learners, the memory and the loop's counters and buffers."""

    policy: Any = None
    critic: Any = None
    replay: Any = None
    memory: Any = None
    updates: int = 0
    critic_updates: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0, "invalid": 0})
    sr_buffer: list[gen.SceneStats] = field(default_factory=list)
    program_progress: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    base_stats: dict[str, list[int]] = field(default_factory=dict)  # scene hash -> [successes, rollouts]
    demos: list[dict[str, Any]] = field(default_factory=list)
    rehearsal: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    def fresh(self, sft_dir: Path, seed: int, replay_capacity: int) -> None:
        """The SFT policy, an untrained critic and an empty replay."""
        from coda.learn.critic import ChunkCritic, CriticConfig
        from coda.learn.policies import ChunkPolicy
        from coda.learn.replay import ChunkReplay

        self.policy = ChunkPolicy.from_pretrained(sft_dir / "policy")
        obs_dim = self.policy.config.obs_dim
        self.critic = ChunkCritic(CriticConfig(obs_dim=obs_dim, seed=seed))
        self.replay = ChunkReplay(capacity=replay_capacity, obs_dim=obs_dim)

    # -- scenes' success record and the success-rate buffer ------------------------------------------------
    def base_weights(self, hashes: list[str]) -> list[float]:
        """Estimated success of the policy on each base scene, (s + 1) / (n + 2) from its earlier rollouts
        (as a control, or in any other split for a generated scene)."""
        out = []
        for b in hashes:
            s, n = self.base_stats.get(b, (0, 0))
            out.append((s + 1) / (n + 2))
        return out

    def record_outcome(self, scene_hash: str, success: bool) -> None:
        stats = self.base_stats.setdefault(scene_hash, [0, 0])
        stats[0] += int(success)
        stats[1] += 1

    def sr_record(self, scene: str, family: str, success: bool) -> None:
        for s in self.sr_buffer:
            if s.scene == scene:
                s.successes += int(success)
                s.trials += 1
                s.history.append(int(success))
                return
        self.sr_buffer.append(gen.SceneStats(scene, family, int(success), 1, [int(success)]))
        self.sr_buffer.sort(key=lambda s: (s.family, s.scene))

    # -- checkpoints ----------------------------------------------------------------------------------------
    def save(
        self,
        out: Path,
        r: int,
        metrics: dict[str, Any],
        *,
        train_log: list[dict[str, Any]] = (),
        pairs: dict[str, list[list[int]]],
        extra_state: dict[str, Any],
        snapshot_extra: dict[str, Any],
    ) -> None:
        """Round r's memory snapshot and checkpoint (atomically renamed into place, with the round's
        per-update `train_log`), then rounds.json and the run's train_log.csv (every saved round's log)."""
        from coda.memory.store import save_snapshot

        t0 = time.perf_counter()
        save_snapshot(
            self.memory, out / "memory" / f"round-{r:04d}", round=r, extra=snapshot_extra, overwrite=True
        )
        final = round_dir(out, r)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.policy.lora is not None:
            self.policy.save_adapter(tmp / "adapter")
        elif self.updates:  # finetune "full": the whole policy
            self.policy.save_pretrained(tmp / "policy")
        self.critic.save_pretrained(tmp / "critic")
        self.replay.save(tmp / "replay")
        obs_dim = self.policy.config.obs_dim
        np.savez(tmp / "demos.npz", **pack_demos(self.demos, obs_dim))
        np.savez(tmp / "rehearsal.npz", **pack_demos(self.rehearsal, obs_dim))
        state = {
            "round": r,
            "updates": self.updates,
            "critic_updates": self.critic_updates,
            "tokens": self.tokens,
            **extra_state,
            "sr_buffer": [s.__dict__ for s in self.sr_buffer],
            "program_progress": dict(self.program_progress),
            "pairs": dict(pairs),
            "base_stats": self.base_stats,
            "metrics": metrics,
        }
        metrics.setdefault("time_s", {})["snapshot"] = round(time.perf_counter() - t0, 2)
        (tmp / "state.json").write_text(json.dumps(state, sort_keys=True) + "\n")
        (tmp / TRAIN_LOG).write_text(train_log_csv(train_log, header=True))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        write_json(out / "rounds.json", self.history)
        write_train_log(out, r)

    def load(self, out: Path, r: int, sft_dir: Path, seed: int, replay_capacity: int) -> dict[str, Any]:
        """Restore round r's checkpoint; returns its state.json (for the parts other units keep)."""
        from coda.learn.critic import ChunkCritic
        from coda.learn.policies import ChunkPolicy
        from coda.learn.policies.lora import load_adapter
        from coda.learn.replay import ChunkReplay
        from coda.memory.store import load_snapshot

        d = round_dir(out, r)
        self.fresh(sft_dir, seed, replay_capacity)
        if (d / "adapter").exists():
            load_adapter(self.policy, d / "adapter")
        elif (d / "policy").exists():  # finetune "full": the round's whole policy
            self.policy = ChunkPolicy.from_pretrained(d / "policy")
        self.critic = ChunkCritic.from_pretrained(d / "critic")
        self.replay = ChunkReplay.load(d / "replay")
        self.memory = load_snapshot(out / "memory" / f"round-{r:04d}")
        state = json.loads((d / "state.json").read_text())
        self.updates, self.critic_updates = state["updates"], state["critic_updates"]
        self.tokens = state["tokens"]
        self.sr_buffer = [gen.SceneStats(**s) for s in state["sr_buffer"]]
        self.program_progress = defaultdict(list, state["program_progress"])
        self.base_stats = state["base_stats"]
        self.history = (
            json.loads((out / "rounds.json").read_text())[:r] if (out / "rounds.json").exists() else []
        )
        with np.load(d / "demos.npz", allow_pickle=False) as z:
            self.demos = unpack_demos(z)
        with np.load(d / "rehearsal.npz", allow_pickle=False) as z:
            self.rehearsal = unpack_demos(z)
        return state
