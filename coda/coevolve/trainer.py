"""A round's learning (paper §3.4): planner demonstrations, then the chunk critic by TD and the policy by
advantage-weighted regression plus imitation (rehearsal of the SFT distribution and this run's
demonstrations), on LoRA adapters or all weights, for as many updates as the `RoundScheduler` allows.

What a run trained on is recorded as it happens (`TrainedOn`, the run's ``trained_on.json``): every planner
demonstration that entered the imitation set, with its round, family, split, scene hash, the rollout's success
and the mode of a targeted scene; and per round the replay's composition by split.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from coda.learn.demos import chunk_dataset, demo_batch
from coda.memory.program_views import TrainingProgram
from coda.progress import progress

if TYPE_CHECKING:
    from coda.coevolve.domain import Domain
    from coda.coevolve.methods import Method
    from coda.coevolve.mode_book import ModeBook
    from coda.coevolve.schedule import RoundScheduler
    from coda.coevolve.state import RunState


class BehaviourStates:
    """The replay states a round's policy updates draw, gathered and embedded once: `draws` (updates, batch)
    holds replay slots; update u's rows into `obs`/`instr` (one row per distinct slot) are `rows(u)`."""

    def __init__(self, replay: Any, draws: np.ndarray, encode: Any) -> None:
        self.slots, inverse = np.unique(draws, return_inverse=True)
        self._rows = inverse.reshape(draws.shape)
        pool = replay.gather(self.slots)
        self.obs = torch.as_tensor(pool["obs"]).float()
        self.instr = encode(list(pool["instruction"]))

    def rows(self, u: int) -> np.ndarray:
        return self._rows[u]


TRAINED_ON = "trained_on.json"  # the record's file name in a run directory (copied by `coda record`)
TRAINED_ON_VERSION = 1


@dataclass
class TrainedOn:
    """What a run trained on, round by round; saved in each round's checkpoint (so it survives a resume) and
    written to the run directory as ``trained_on.json``.

    Example:
        >>> record = TrainedOn()
        >>> record.add_demo(1, "stack", "novel", "ab12", success=False)
        >>> record.add_replay(1, [("novel", 9)], {"chunks": {"novel": 9}, "episodes": {"novel": 1}})
        >>> record.demonstrated
        {'ab12'}
    """

    # one row per demonstration, in the order it joined the imitation set:
    # {round, family, split, scene_hash, success (the policy's rollout there), mode_id (targeted only)}
    demos: list[dict[str, Any]] = field(default_factory=list)
    # one entry per round: {"round", "selection": {family: {candidates, failed_candidates, repeats_excluded,
    # demos}}, "replay_added": {"chunks", "episodes"} by split, "replay_buffer": the same, held after adding}
    rounds: list[dict[str, Any]] = field(default_factory=list)
    # rounds resumed from checkpoints written before this record existed (their demonstrations are unknown)
    unrecorded_rounds: list[int] = field(default_factory=list)

    @property
    def demonstrated(self) -> set[str]:
        return {d["scene_hash"] for d in self.demos}

    def _round(self, r: int) -> dict[str, Any]:
        if not self.rounds or self.rounds[-1]["round"] != r:
            self.rounds.append({"round": r, "selection": {}, "replay_added": {}, "replay_buffer": {}})
        return self.rounds[-1]

    def add_demo(
        self, r: int, family: str, split: str, scene_hash: str, *, success: bool, mode_id: str | None = None
    ) -> None:
        self.demos.append(
            {
                "round": r,
                "family": family,
                "split": split,
                "scene_hash": scene_hash,
                "success": bool(success),
                "mode_id": mode_id if split == "targeted" else None,
            }
        )

    def add_selection(self, r: int, family: str, **counts: int) -> None:
        self._round(r)["selection"][family] = counts

    def add_replay(self, r: int, added: list[tuple[str, int]], held: dict[str, dict[str, int]]) -> None:
        """Round r's replay: `added` lists (split, chunks added) per rollout (0 chunks: not an episode of the
        store), `held` is `ChunkReplay.composition()` after adding them."""
        chunks, episodes = Counter(), Counter()
        for split, n in added:
            chunks[split] += n
            episodes[split] += int(n > 0)
        entry = self._round(r)
        entry["replay_added"] = {
            "chunks": dict(sorted(chunks.items())),
            "episodes": dict(sorted(episodes.items())),
        }
        entry["replay_buffer"] = held

    def to_state(self) -> dict[str, Any]:
        return {"demos": self.demos, "rounds": self.rounds, "unrecorded_rounds": self.unrecorded_rounds}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None, rounds: int) -> TrainedOn:
        """The record of a checkpoint after `rounds` rounds (`to_state`'s dict; None: a checkpoint written before
        recording, whose rounds 1..`rounds` stay unrecorded)."""
        if state is None:
            return cls(unrecorded_rounds=list(range(1, rounds + 1)))
        return cls(
            demos=list(state["demos"]),
            rounds=list(state["rounds"]),
            unrecorded_rounds=list(state["unrecorded_rounds"]),
        )

    @staticmethod
    def read(run: str | Path) -> dict[str, Any]:
        """The trained_on.json of a run directory or record (or that file's path); FileNotFoundError names what
        is missing, as for a record written before runs recorded what they trained on."""
        path = Path(run)
        path = path if path.suffix == ".json" else path / TRAINED_ON
        if not path.is_file():
            raise FileNotFoundError(path)
        doc = json.loads(path.read_text())
        if doc.get("format_version") != TRAINED_ON_VERSION:
            raise ValueError(f"{path}: unsupported format {doc.get('format_version')!r}")
        return doc

    @staticmethod
    def summary(doc: dict[str, Any]) -> dict[str, Any]:
        """What a trained_on.json says a run trained on: demonstrations by split (count, share of the
        demonstrations, the policy's success on those scenes) per round and in total, repeated scenes, and
        the replay's composition by split (added per round and in total, held after the last round)."""

        def by_split(demos: list[dict[str, Any]]) -> dict[str, Any]:
            splits = sorted({d["split"] for d in demos})
            rows = {}
            for split in splits:
                got = [d for d in demos if d["split"] == split]
                rows[split] = {
                    "n": len(got),
                    "share": round(len(got) / len(demos), 4),
                    "policy_success": round(float(np.mean([d["success"] for d in got])), 4),
                }
            return {"n": len(demos), "by_split": rows}

        demos = doc["demos"]
        rounds = sorted({e["round"] for e in doc["rounds"]} | {d["round"] for d in demos})
        added: dict[str, Counter] = {"chunks": Counter(), "episodes": Counter()}
        for e in doc["rounds"]:
            for kind in added:
                added[kind].update(e["replay_added"].get(kind, {}))
        seen: set[str] = set()
        repeats = 0
        for d in demos:
            repeats += d["scene_hash"] in seen
            seen.add(d["scene_hash"])
        return {
            **{k: doc.get(k) for k in ("method", "seed", "profile", "trains", "demo_selection")},
            "unrecorded_rounds": doc["unrecorded_rounds"],
            "demos": {
                "total": by_split(demos),
                "rounds": [{"round": r, **by_split([d for d in demos if d["round"] == r])} for r in rounds],
            },
            "repeats": {
                "demos_of_an_already_demonstrated_scene": repeats,
                "unique_scenes": len(seen),
                "candidates_excluded": sum(
                    s["repeats_excluded"] for e in doc["rounds"] for s in e["selection"].values()
                ),
            },
            "replay": {
                "added": {
                    "total": {kind: dict(sorted(c.items())) for kind, c in added.items()},
                    "rounds": [{"round": e["round"], **e["replay_added"]} for e in doc["rounds"]],
                },
                "held_after_last_round": doc["rounds"][-1]["replay_buffer"] if doc["rounds"] else {},
            },
        }

    def write(self, out: Path, header: dict[str, Any]) -> Path:
        """`out`/trained_on.json: `header` (method, seed, selection, ...) and the record."""
        path = Path(out) / TRAINED_ON
        doc = {"format_version": TRAINED_ON_VERSION, **header, **self.to_state()}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return path


class Trainer:
    """The learning steps of the loop's rounds."""

    def __init__(
        self,
        *,
        settings: Any,
        seed: int,
        method: Method,
        state: RunState,
        modes: ModeBook,
        scheduler: RoundScheduler,
        domain: Domain,
        publish: Callable[[str], dict[str, str]],
    ) -> None:
        """settings: the profile's ``coevolve`` section; state: the run's state (policy, critic, replay,
        demonstrations, counters), which training changes; modes: where the training programs are read;
        scheduler: the adaptive schedule's checks; domain and publish: its in-band rollouts of the current
        policy (publish writes the actor the workers load and returns it)."""
        self.c, self.seed, self.method, self.state = settings, seed, method, state
        self.modes, self.scheduler, self.domain, self.publish = modes, scheduler, domain, publish
        self.families = modes.families
        self.record = TrainedOn()  # what the run trained on (restored by the loop on resume)
        self.critic_loss: float | None = None
        # the last round's per-update log (`coda.coevolve.state.TRAIN_LOG_COLUMNS`), saved with its checkpoint
        self.log: list[dict[str, Any]] = []
        self.round_losses: dict[str, float | None] = {}  # the last round's mean losses, for rounds.json

    def collect_demos(self, r: int, rollouts: list) -> None:
        """Round r's planner demonstrations: per family, up to `demos_per_family` of the certified non-control
        rollouts, never a scene this run already demonstrated (by scene hash), in the order `demo_selection`
        states for every method alike: "failures_first" (scenes the policy failed first; targeted scenes of
        validated modes weighted by their training programs' planner_demos), or "random" (a seeded shuffle).
        Each demonstration joins the imitation set and the record."""
        c = self.c
        rng = np.random.default_rng([self.seed, r, 2])  # stream 2 of the round: demonstration order

        def priority(item):
            q, v, rec = item
            program = self.modes.training_program(q.mode_id) if q.split == "targeted" else None
            extra = TrainingProgram.from_doc(program).demos if program else 0
            return (rec.success, -extra, v["hash"])

        demonstrated = self.record.demonstrated
        for f in self.families:
            cands = [
                (q, v, rec)
                for q, v, rec in rollouts
                if q.family == f and v["demo"] is not None and q.split != "control"
            ]
            if c.demo_selection == "failures_first":
                cands.sort(key=priority)
            else:
                cands = [cands[i] for i in rng.permutation(len(cands))]
            chosen, repeats = [], 0
            for item in cands:
                if item[1]["hash"] in demonstrated:  # in an earlier round, or chosen earlier in this one
                    repeats += 1
                elif len(chosen) < c.demos_per_family:
                    demonstrated.add(item[1]["hash"])
                    chosen.append(item)
            for q, v, rec in chosen:
                self.state.demos.append(v["demo"])
                self.record.add_demo(r, f, q.split, v["hash"], success=rec.success, mode_id=q.mode_id)
            self.record.add_selection(
                r,
                f,
                candidates=len(cands),
                failed_candidates=sum(not rec.success for _, _, rec in cands),
                repeats_excluded=repeats,
                demos=len(chosen),
            )

    def imitation_weight(self) -> float:
        """The imitation term's weight: the config's, scaled by the training programs' learning tools
        (imitation vs critic weight) when the method keeps training programs."""
        c = self.c
        if not self.method.store_training:
            return c.imitation_weight
        programs = [self.modes.training_program(m.mode_id) for m in self.state.memory.modes()]
        views = [TrainingProgram.from_doc(p) for p in programs if p is not None]
        if not views:
            return c.imitation_weight
        ratio = np.mean([v.imitation_ratio for v in views])
        return float(c.imitation_weight * ratio)

    def train(self, r: int, rollouts: list, clock: Any = None) -> tuple[int, list[dict]]:
        """Critic TD steps, then policy updates; returns (updates done, the adaptive schedule's checks)."""
        torch.manual_seed(self.seed * 7919 + r)
        rng = np.random.default_rng([self.seed, r, 1])
        losses = self._train_critic(r, rng)
        if clock is not None:
            clock.lap("critic")
        done, track = self._update_policy(r, rollouts, rng)
        self.critic_loss = float(np.mean(losses[-10:])) if losses else None
        policy = [row for row in self.log if row["kind"] == "policy"]

        def recent(key: str) -> float | None:
            return float(np.mean([x[key] for x in policy[-50:]])) if policy else None

        self.round_losses = {
            "critic_loss": self.critic_loss,
            "policy_loss": recent("loss"),
            "awr_loss": recent("awr_loss"),
            "imitation_loss": recent("imitation_loss"),
        }
        if clock is not None:
            clock.lap("policy_updates")
        return done, track

    def _train_critic(self, r: int, rng: np.random.Generator) -> list[float]:
        """The round's TD steps of the chunk critic on the replay (the log starts with them)."""
        from coda.learn.awr import policy_candidates, train_critic
        from coda.learn.critic import CriticTD, TDConfig

        c, s, seed = self.c, self.state, self.seed
        if r == 1:  # later rounds keep the first round's normaliser (saved with the critic's weights)
            s.critic.fit_normalizer(s.replay.gather(np.arange(len(s.replay)))["obs"])
        td = CriticTD(s.critic, TDConfig(gamma=c.gamma, temperature=c.temperature))
        gen_t = torch.Generator().manual_seed(seed * 7919 + r)
        s.policy.eval()
        losses = train_critic(
            td,
            s.replay,
            steps=c.critic_steps,
            batch_size=c.batch_size,
            rng=rng,
            # "executed": V(s') from the chunk the rollout executed at s' (in the replay), no sampling
            candidates_fn=policy_candidates(s.policy, c.j, gen_t) if c.td_bootstrap == "policy" else None,
        )
        self.log = [
            {"round": r, "kind": "critic", "step": s.critic_updates + i + 1, "loss": loss}
            for i, loss in enumerate(losses)
        ]
        s.critic_updates += c.critic_steps
        s.critic.eval()
        return losses

    def _updater(self, r: int) -> Any:
        """The round's `PolicyUpdater` (AWR + imitation) with the run's settings."""
        from coda.learn.awr import AWRConfig, PolicyUpdater

        c, s, seed = self.c, self.state, self.seed
        config = AWRConfig(
            finetune=c.finetune,
            lora_rank=c.lora_rank,
            lr=c.lr,
            j=c.j,
            beta=c.beta,
            temperature=c.temperature,
            imitation_weight=self.imitation_weight(),
            awr_weight=c.awr_weight,
            normalize=c.normalize_advantages,
            seed=seed * 7919 + r,
        )
        return PolicyUpdater(s.policy, s.critic, config)

    def _imitation_batch(self, sources: list, rng: np.random.Generator, encode: Any) -> dict | None:
        """Rehearsal (seed scenes) and this run's demonstrations, `rehearsal_share` of the batch from the first."""
        if not sources:
            return None
        batch_size = self.c.batch_size
        total = sum(share for _, share in sources)
        parts = [demo_batch(ds, round(batch_size * share / total), rng) for ds, share in sources]
        return {
            "obs": torch.cat([p["obs"] for p in parts]),
            "instr": encode([t for p in parts for t in p["instr"]]),
            "chunk": torch.cat([p["chunk"] for p in parts]),
        }

    def _update_policy(self, r: int, rollouts: list, rng: np.random.Generator) -> tuple[int, list[dict]]:
        """AWR (+ imitation) updates on replay states, checked by the adaptive schedule; (done, checks)."""
        from coda.learn.text import get_encoder

        c, s = self.c, self.state
        updater = self._updater(r)
        sources = [
            (chunk_dataset(d), share)
            for d, share in ((s.rehearsal, c.rehearsal_share), (s.demos, 1 - c.rehearsal_share))
            if d and share > 0
        ]
        enc = get_encoder()
        targeted = [(q.mode_id, v["scene"], rec.success) for q, v, rec in rollouts if q.split == "targeted"]
        track: list[dict] = []
        done = 0
        if c.policy_updates and not len(s.replay):
            raise ValueError("cannot sample from an empty replay store")
        draws = rng.integers(
            0, max(len(s.replay), 1), size=(c.policy_updates, c.batch_size)
        )  # update × state
        states = BehaviourStates(s.replay, draws, enc.encode)
        scored = updater.score(states.obs, states.instr) if self._scores_per_round() else None
        for u in progress(range(c.policy_updates), desc=f"round {r}: policy updates"):
            rows = states.rows(u)
            batch = {"obs": states.obs[rows], "instr": states.instr[rows]}
            imitation = self._imitation_batch(sources, rng, enc.encode)
            stats = updater.update(
                batch, imitation=imitation, candidates=None if scored is None else scored.take(rows)
            )
            done += 1
            s.updates += 1
            self.log.append(
                {
                    "round": r,
                    "kind": "policy",
                    "step": s.updates,
                    "loss": stats["loss"],
                    "awr_loss": stats["awr_loss"],
                    "imitation_loss": stats["imitation_loss"],
                    "ess_fraction": stats.get("ess_fraction"),
                }
            )
            if self.scheduler.checks_at(done, c.policy_updates):
                track.append(
                    self.scheduler.measure(targeted, done, lambda scenes, d=done: self._check(r, d, scenes))
                )
                if self.scheduler.over(track):
                    break
        s.policy.eval()
        return done, track

    def _scores_per_round(self) -> bool:
        """Whether AWR's candidates are drawn and scored once per round (`awr_candidates: round`)."""
        c = self.c
        return c.awr_candidates == "round" and c.awr_weight > 0 and c.policy_updates > 0

    def _check(self, r: int, done: int, scenes: list[str]) -> list[bool | None]:
        """The adaptive schedule's rollouts of the current policy on in-band scenes."""
        actor = self.publish(f"round-{r:04d}-check-{done}")
        return self.domain.rollout(
            actor, scenes, record=False, desc=f"round {r}: in-band check", seed=self.seed * 1000 + r
        )
