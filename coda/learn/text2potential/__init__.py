"""Text2potential (paper §3.4): diagnoses -> cumulative subgoals -> staged potential Φ(s) -> chunk shaping.

A diagnosis ``{family, phase, factor, cause}`` is compiled into a *training-program fragment*, a plain
JSON document an LLM backend can also write::

    {"family": "pick_place", "variant": "bin", "potential": "staged", "source": "diagnosis",
     "subgoals": [{"predicate": "reach", "params": {"dist": 0.03}},
                  {"predicate": "pregrasp_open", "params": {"width": 0.062, "dist": 0.03}}, ...],
     "weights": [1.0, ...],                       # one per stage: every subgoal, then the verifier
     "refinement": {"enabled": true, "window": 3, "epsilon": 0.05, ...}, "refinements": [...]}

Subgoals come from a per-family library of parameterised predicates on simulator state (the ``state`` dicts
of `coda.sim.rollout.RolloutRecord`); each has a bounded in-stage progress function in [0, 1]. The task
verifier is always the final, implicit stage. Subgoals are *cumulative*: satisfying subgoal j certifies
subgoals 1..j-1 (a later subgoal is only reachable through the earlier ones), so the stage of a state is
the highest subgoal it satisfies, and along a trajectory the stage is latched at the highest reached so far.
With stage weights w (normalised to sum to the number of stages n; all 1 by default)::

    Φ(s) = Σ_{i<k} w_i + w_k · min(p_k(s), IN_STAGE_CAP)      k = stage, p_k = progress toward stage k+1
    Φ(s) = n                                                    when the verifier holds

Φ is evaluated only at chunk endpoints; the shaping term of a chunk is F = γ^h Φ(s_{t+h}) − Φ(s_t).

The package's modules: ``schema`` (`validate_fragment`), ``potential`` (`Potential`, `shaping_term`),
``rules`` (the per-family decomposition tables and rules), ``compiler`` (`compile_diagnosis`,
`compile_task_description`, `sparse_fragment`, the `Text2Potential` front end) and ``refinement``
(`refine`).

Example:
    >>> frag = compile_diagnosis({"family": "pick_place", "phase": "grasp", "factor": "scale",
    ...                           "cause": "fingers not opened wide enough"}, record.context())
    >>> pot = compile_potential(frag)
    >>> pot.phi_along(record)          # (n_chunks + 1,) at chunk starts and the final state
    >>> pot.shaping(record, gamma=0.99) # (n_chunks,)
"""

from __future__ import annotations

from coda.errors import ProgramError
from coda.learn.predicates import library_spec
from coda.learn.text2potential.compiler import (
    VARIANTS,
    Text2Potential,
    Variant,
    compile_diagnosis,
    compile_task_description,
    sparse_fragment,
)
from coda.learn.text2potential.fragments import DEFAULT_REFINEMENT, SCHEMA_KEYS, validate_fragment
from coda.learn.text2potential.potential import (
    IN_STAGE_CAP,
    Potential,
    chunk_endpoints,
    compile_potential,
    shaping_term,
)
from coda.learn.text2potential.refinement import refine
from coda.learn.text2potential.rules import (
    DEFAULT_PHASES,
    RULES,
    Build,
    Rule,
)

__all__ = [
    "DEFAULT_PHASES",
    "DEFAULT_REFINEMENT",
    "IN_STAGE_CAP",
    "RULES",
    "SCHEMA_KEYS",
    "VARIANTS",
    "Build",
    "Potential",
    "ProgramError",
    "Rule",
    "Text2Potential",
    "Variant",
    "chunk_endpoints",
    "compile_diagnosis",
    "compile_potential",
    "compile_task_description",
    "library_spec",
    "refine",
    "shaping_term",
    "sparse_fragment",
    "validate_fragment",
]
