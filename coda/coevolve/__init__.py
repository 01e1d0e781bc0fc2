"""The co-evolution of a data engine and an action policy (paper §3.2–3.5), as one loop over a `Domain`.

* `loop` — the round, the only orchestration (`Loop`, `run_method`);
* `methods` — each method a strategy object (how it generates, how it shapes, what the memory keeps);
* `mode_book` — diagnose → cluster → control experiment → compile → refine (`ModeBook`);
* `trainer` — demonstrations, critic TD and AWR + imitation for a round (`Trainer`);
* `schedule` — fixed and adaptive round scheduling (`RoundScheduler`);
* `state` — run state, checkpoints and resumption (`RunState`);
* `domain` — the simulator interface (`Domain`), implemented by `coda.domains.pybullet.PyBulletDomain` and
  `coda.domains.libero.domain.LiberoDomain`.

See docs/ARCHITECTURE.md for one round step by step.
"""

from coda.coevolve.loop import Loop, make_loop, run_method
from coda.coevolve.methods import METHODS, Method
from coda.coevolve.state import last_complete_round

__all__ = ["METHODS", "Loop", "Method", "last_complete_round", "make_loop", "run_method"]
