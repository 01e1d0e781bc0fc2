"""A round's learning (paper §3.4): planner demonstrations, then the chunk critic by TD and the policy by
advantage-weighted regression plus imitation (rehearsal of the SFT distribution and this run's
demonstrations), on LoRA adapters or all weights, for as many updates as the `RoundScheduler` allows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from coda.learn.train import chunk_dataset, demo_batch
from coda.memory.program_views import TrainingProgram
from coda.progress import progress


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


class Trainer:
    """The learning steps of the loop's rounds."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.critic_loss: float | None = None
        # the last round's per-update log (`coda.coevolve.state.TRAIN_LOG_COLUMNS`), saved with its checkpoint
        self.log: list[dict[str, Any]] = []
        self.round_losses: dict[str, float | None] = {}  # the last round's mean losses, for rounds.json

    def collect_demos(self, rollouts: list) -> None:
        """`demos_per_family` planner demonstrations per family: scenes the policy failed first (targeted
        scenes of validated modes, weighted by their training programs' planner_demos), then the others."""
        loop = self.loop
        for f in loop.families:
            cands = [
                (q, v, rec)
                for q, v, rec in rollouts
                if q.family == f and v["demo"] is not None and q.split != "control"
            ]

            def priority(item):
                q, v, rec = item
                program = loop.modes.training_program(q.mode_id) if q.split == "targeted" else None
                extra = TrainingProgram.from_doc(program).demos if program else 0
                return (rec.success, -extra, v["hash"])

            cands.sort(key=priority)
            for _q, v, _rec in cands[: loop.c.demos_per_family]:
                loop.state.demos.append(v["demo"])

    def imitation_weight(self) -> float:
        """The imitation term's weight: the config's, scaled by the training programs' learning tools
        (imitation vs critic weight) when the method keeps training programs."""
        loop = self.loop
        c = loop.c
        if not loop.method.store_training:
            return c.imitation_weight
        programs = [loop.modes.training_program(m.mode_id) for m in loop.memory.modes()]
        views = [TrainingProgram.from_doc(p) for p in programs if p is not None]
        if not views:
            return c.imitation_weight
        ratio = np.mean([v.imitation_ratio for v in views])
        return float(c.imitation_weight * ratio)

    def train(self, r: int, rollouts: list, clock: Any = None) -> tuple[int, list[dict]]:
        """Critic TD steps, then policy updates; returns (updates done, the adaptive schedule's checks)."""
        from coda.learn.awr import AWRConfig, PolicyUpdater, policy_candidates, train_critic
        from coda.learn.critic import CriticTD, TDConfig
        from coda.learn.text import get_encoder

        loop = self.loop
        c, s, seed = loop.c, loop.state, loop.seed
        torch.manual_seed(seed * 7919 + r)
        rng = np.random.default_rng([seed, r, 1])
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
        if clock is not None:
            clock.lap("critic")
        updater = PolicyUpdater(
            s.policy,
            s.critic,
            AWRConfig(
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
            ),
        )
        sources = [
            (chunk_dataset(d), share)
            for d, share in ((s.rehearsal, c.rehearsal_share), (s.demos, 1 - c.rehearsal_share))
            if d and share > 0
        ]
        total = sum(share for _, share in sources)
        enc = get_encoder()
        scheduler = loop.scheduler
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
            imitation = None
            if (
                sources
            ):  # rehearsal (seed scenes) and this run's demonstrations, `rehearsal_share` of the batch
                parts = [demo_batch(ds, round(c.batch_size * share / total), rng) for ds, share in sources]
                imitation = {
                    "obs": torch.cat([p["obs"] for p in parts]),
                    "instr": enc.encode([t for p in parts for t in p["instr"]]),
                    "chunk": torch.cat([p["chunk"] for p in parts]),
                }
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
            if scheduler.checks_at(done, c.policy_updates):
                track.append(
                    scheduler.measure(targeted, done, lambda scenes, d=done: self._check(r, d, scenes))
                )
                if scheduler.over(track):
                    break
        s.policy.eval()
        self.critic_loss = float(np.mean(losses[-10:])) if losses else None
        policy = [row for row in self.log if row["kind"] == "policy"]
        self.round_losses = {
            "critic_loss": self.critic_loss,
            "policy_loss": float(np.mean([x["loss"] for x in policy[-50:]])) if policy else None,
            "awr_loss": float(np.mean([x["awr_loss"] for x in policy[-50:]])) if policy else None,
            "imitation_loss": float(np.mean([x["imitation_loss"] for x in policy[-50:]])) if policy else None,
        }
        if clock is not None:
            clock.lap("policy_updates")
        return done, track

    def _scores_per_round(self) -> bool:
        """Whether AWR's candidates are drawn and scored once per round (`awr_candidates: round`)."""
        c = self.loop.c
        return c.awr_candidates == "round" and c.awr_weight > 0 and c.policy_updates > 0

    def _check(self, r: int, done: int, scenes: list[str]) -> list[bool | None]:
        """The adaptive schedule's rollouts of the current policy on in-band scenes."""
        loop = self.loop
        actor = loop.publish(f"round-{r:04d}-check-{done}")
        return loop.domain.rollout(
            actor, scenes, record=False, desc=f"round {r}: in-band check", seed=loop.seed * 1000 + r
        )
