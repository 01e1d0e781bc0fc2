"""The LIBERO-Pro domain: what the co-evolution loop knows of LIBERO's source tasks.

* `coda.domains.libero.domain` — `LiberoDomain`, the `coda.coevolve.domain.Domain` implementation;
* `coda.domains.libero.episodes` — its worker jobs: planner demonstrations, rollouts, evaluation suites;
* `coda.domains.libero.interpret` — the interpreter and template compiler of LIBERO programs (their schema is
  `coda.memory.libero_programs`, beside the PyBullet programs' schema, because memory validates both);
* `coda.domains.libero.diagnose` — the rollout-grounded diagnoser;
* `coda.domains.libero.coverage` — how much of a round's environments lands in each held-out suite's region.

The simulator itself (MuJoCo through the ``[libero]`` extra, the scripted planner, what the LIBERO-Pro suites
hold out) is `coda.sim.libero`; the Table 2 experiment that runs this domain is `coda.libero_pro`. Importing
this package loads no simulator.
"""
