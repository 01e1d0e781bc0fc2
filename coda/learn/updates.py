"""How training steps are counted and threaded: the global update counter (the paper's x-axis for learning
speed) and the training process's fixed thread count."""

from __future__ import annotations

# intra-op threads of the training process (SFT, critic and policy updates). Fixed rather than the machine's
# core count, so that results do not depend on it; the rollout workers, idle while the process trains, use
# one thread each (`cached_actor`, `eval_job`).
TRAIN_THREADS = 2


class UpdateCounter:
    """Global number of policy updates (gradient steps) taken so far."""

    def __init__(self, start: int = 0) -> None:
        self.value = start

    def step(self, n: int = 1) -> int:
        self.value += n
        return self.value
