"""CoDA on LIBERO-Pro (Table 2): planner demonstrations, SFT, evaluation on the standard, position
(``*_swap``) and instruction (``*_lan``, ``*_task``) suites, and co-evolution rounds whose generation
programs perturb object positions and instructions (`coda.domains.libero.interpret`). The simulator adapter and the
scripted planner are in `coda.sim.libero` (optional extra: ``pip install -e '.[libero]'``)."""

METHODS = ("coda", "uniform")  # the co-evolution methods Table 2 compares on LIBERO (the same budget)
