"""The ``coevolve`` section of a ``params.yaml`` profile: the co-evolution rounds (paper §3.2–3.5, Appendix B).

:class:`CoevolveConfig` is the largest section (budgets, the critic and policy updates, scheduling, the
diagnoser and program compiler, evaluation), so it has this module to itself; the allowed values of its
choice fields are the tuples below. Its checks use the helpers of `coda.config.checks`; the ablation
variants of `coda.config.experiments` are overrides of its fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda.config.checks import (
    ConfigError,
    _check_choice,
    _check_float,
    _check_int,
    _check_optional_str,
    _got,
    _parses_as_float,
)

SCHEDULES = ("adaptive", "fixed")
DIAGNOSERS = ("sim", "phase_only", "vlm")  # plus "noisy:<p>" (e.g. "noisy:0.2")
COMPILERS = ("template", "hf", "openai")
POTENTIALS = ("full", "sparse", "task_description", "no_refinement")
SELECTIONS = ("softmax", "argmax")
FINETUNES = ("full", "lora")
AWR_CANDIDATES = ("round", "update")
TD_BOOTSTRAPS = ("executed", "policy")
DEMO_SELECTIONS = ("failures_first", "random")


@dataclass(frozen=True)
class CoevolveConfig:
    """Co-evolution rounds (paper §3.2–3.5, Appendix B); per family and round unless noted."""

    rounds: int = 5  # co-evolution rounds (paper: 5, extended runs 15)
    envs_per_family: int = 8  # targeted environments per family per round, plus as many controls (paper 64)
    novel_share: float = 0.15  # share of the budget for novel environments (paper ε = 0.15)
    replay_share: float = 0.10  # share of the budget for replaying stored environments (paper 0.10)
    success_band: tuple[float, float] = (0.2, 0.8)  # success rates counted as "in the band"
    validate_margin: float = 0.25  # a mode is validated when targeted success is this far below control
    min_pairs: int = 3  # targeted/control pairs a mode needs before it can be validated or rejected
    validate_alpha: float = 0.25  # ... and the one-sided McNemar p-value it must reach to be validated
    demos_per_family: int = 8  # planner demonstrations per family per round (same for every method)
    # which of a round's certified non-control rollouts are demonstrated, for every method alike (never a scene
    # the run already demonstrated): failed scenes first ("failures_first", closed-loop selection), or a seeded
    # shuffle ("random")
    demo_selection: str = "failures_first"
    rehearsal_per_family: int = 25  # seed scenes per family whose planner demos imitation keeps rehearsing
    critic_steps: int = 200  # critic TD updates per round
    policy_updates: int = 150  # AWR policy updates per round (the cap under adaptive scheduling)
    batch_size: int = 64  # states per AWR / critic update
    j: int = 8  # candidate chunks per decision (paper j = 8)
    temperature: float = 0.5  # softmax(Q/τ) temperature of the decision rule (paper 0.5)
    selection: str = "softmax"  # softmax(Q/τ)-weighted chunks, or "argmax" (value-only, Table 4)
    gamma: float = 0.99  # discount per control step
    finetune: str = (
        "lora"  # policy updates on LoRA adapters of the frozen SFT weights, or "full" (all weights)
    )
    lora_rank: int = 8  # rank of the LoRA adapters trained during co-evolution
    lr: float = 1.0e-3  # AdamW learning rate of the updates
    beta: float = 1.0  # AWR temperature
    # AWR's j candidate chunks per state: drawn anew from the current policy and scored at every update
    # ("update"), or drawn once per round from the policy entering the round's updates and scored once by the
    # round's critic ("round": 2x faster updates, but it trains a different policy: uniform-1 OOD 28.8% vs 46.4%)
    awr_candidates: str = "update"
    # V(s') in the critic's TD target: the target critic's Q of the chunk the rollout executed at s' ("executed",
    # the value of the decision rule that acted), or softmax(Q'/τ) over j chunks sampled from the policy
    # ("policy", the recipe before 2026-12-02; j times the target network's work per step)
    td_bootstrap: str = "executed"
    awr_weight: float = 1.0  # factor of the AWR term (0: imitation of planner demonstrations only)
    rehearsal_share: float = 0.5  # share of each imitation batch drawn from the seed-scene rehearsal demos
    normalize_advantages: bool = False  # divide advantages by their batch std before exp(A/β)
    imitation_weight: float = 1.0  # default weight of imitation on planner demonstrations
    scheduling: str = "fixed"  # "fixed" (every method the same updates) or "adaptive" (paper rule, Table 9)
    min_modes_in_band: int = 8  # adaptive: end a round when fewer modes than this remain in the band
    plateau_points: float = 0.02  # adaptive: ... or in-band success moves less than this
    plateau_updates: int = 2000  # adaptive: ... over this many policy updates
    check_every: int = 50  # adaptive: policy updates between in-band success checks
    diagnoser: str = "sim"  # "sim", "noisy:<p>", "phase_only" or "vlm"
    compiler: str = "template"  # program compiler: "template", "hf" or "openai"
    vlm_model: str | None = None  # diagnoser "vlm": local path of an image-text-to-text model
    llm_model: str | None = None  # compiler "hf": local path of a causal LM; "openai": the model name
    llm_endpoint: str | None = None  # compiler "openai": base URL of an OpenAI-compatible server
    transfer: bool = False  # lift validated generation programs to the other families (Appendix A, Table 6)
    potential: str = "full"  # Text2potential variant (Table 4 rows)
    eval_id_per_family: int = 10  # held-back seed scenes per family of the final (reported) evaluation
    eval_ood_per_suite: int = 10  # held-out scenes per suite per family of the final (reported) evaluation
    curve_id_per_family: int = 4  # ... and of the other rounds' evaluations (the first of the same scenes)
    curve_ood_per_suite: int = 4
    final_eval: str = "full"  # the last round's evaluation: "full" (eval_* episodes) or "curve" (the curve_*
    # subset: ablations, compared with CoDA seed 0, whose curve is evaluated on that subset every round)
    eval_every: int = 1  # evaluate after every n-th round and the last one ...
    curve_seeds: tuple[int, ...] = (0,)  # ... except runs of these seeds, evaluated every round (curves)
    long_rounds: int = 15  # rounds of the extended runs (Figure 3), which continue the 5-round runs
    ablation_rounds: int = 5  # rounds of the ablation runs (experiments.variants), compared at that round

    def __post_init__(self) -> None:
        minimums = {  # the integer fields and their smallest allowed value, checked in this order
            "rounds": 1,
            "envs_per_family": 1,
            "min_pairs": 1,
            "critic_steps": 1,
            "batch_size": 1,
            "j": 1,
            "eval_every": 1,
            "long_rounds": 1,
            "ablation_rounds": 1,
            "demos_per_family": 0,
            "rehearsal_per_family": 0,
            "policy_updates": 0,
            "min_modes_in_band": 0,
            "eval_id_per_family": 0,
            "curve_id_per_family": 0,
            "eval_ood_per_suite": 0,
            "curve_ood_per_suite": 0,
            "plateau_updates": 1,
            "lora_rank": 1,
            "check_every": 1,
        }
        for key, minimum in minimums.items():
            _check_int(key, getattr(self, key), minimum=minimum)
        for small, big in (
            ("curve_id_per_family", "eval_id_per_family"),
            ("curve_ood_per_suite", "eval_ood_per_suite"),
        ):
            if getattr(self, small) > getattr(self, big):
                raise ConfigError(
                    small, f"expected at most {big} ({getattr(self, big)}), got {getattr(self, small)}"
                )
        for key in ("temperature", "lr", "beta"):
            object.__setattr__(self, key, _check_float(key, getattr(self, key), above=0))
        for key in (
            "novel_share",
            "replay_share",
            "validate_margin",
            "validate_alpha",
            "gamma",
            "imitation_weight",
            "awr_weight",
            "rehearsal_share",
            "plateau_points",
        ):
            value = _check_float(key, getattr(self, key))
            top = 10 if key in ("imitation_weight", "awr_weight") else 1
            if not 0 <= value <= top:
                raise ConfigError(key, f"expected a number in [0, {top}], got {value!r}")
            object.__setattr__(self, key, value)
        if self.novel_share + self.replay_share > 1:
            raise ConfigError("replay_share", "novel_share + replay_share must be <= 1")
        band = self.success_band
        if not isinstance(band, list | tuple) or len(band) != 2:
            raise ConfigError("success_band", f"expected [low, high], got {_got(band)}")
        lo, hi = (_check_float(f"success_band[{i}]", v) for i, v in enumerate(band))
        if not 0 <= lo < hi <= 1:
            raise ConfigError("success_band", f"expected 0 <= low < high <= 1, got {list(band)}")
        object.__setattr__(self, "success_band", (lo, hi))
        if not isinstance(self.normalize_advantages, bool):
            raise ConfigError(
                "normalize_advantages", f"expected true or false, got {_got(self.normalize_advantages)}"
            )
        if not isinstance(self.transfer, bool):
            raise ConfigError("transfer", f"expected true or false, got {_got(self.transfer)}")
        _check_choice("scheduling", self.scheduling, SCHEDULES)
        _check_choice("final_eval", self.final_eval, ("full", "curve"))
        _check_choice("finetune", self.finetune, FINETUNES)
        _check_choice("awr_candidates", self.awr_candidates, AWR_CANDIDATES)
        _check_choice("td_bootstrap", self.td_bootstrap, TD_BOOTSTRAPS)
        _check_choice("demo_selection", self.demo_selection, DEMO_SELECTIONS)
        if not (isinstance(self.diagnoser, str) and self.diagnoser.startswith("noisy:")):
            _check_choice("diagnoser", self.diagnoser, DIAGNOSERS)
        elif not _parses_as_float(self.diagnoser[6:]) or not 0 <= float(self.diagnoser[6:]) <= 1:
            raise ConfigError("diagnoser", f"noisy:<p> needs p in [0, 1], got {self.diagnoser!r}")
        _check_choice("compiler", self.compiler, COMPILERS)
        for key in ("vlm_model", "llm_model", "llm_endpoint"):
            _check_optional_str(key, getattr(self, key))
        if self.diagnoser == "vlm" and self.vlm_model is None:
            raise ConfigError("vlm_model", "diagnoser 'vlm' needs the local path of a model")
        if self.compiler in ("hf", "openai") and self.llm_model is None:
            raise ConfigError("llm_model", f"compiler {self.compiler!r} needs a model (path or name)")
        if self.compiler == "openai" and self.llm_endpoint is None:
            raise ConfigError("llm_endpoint", "compiler 'openai' needs the server's base URL")
        _check_choice("potential", self.potential, POTENTIALS)
        _check_choice("selection", self.selection, SELECTIONS)
        seeds = self.curve_seeds
        if not isinstance(seeds, list | tuple) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds
        ):
            raise ConfigError("curve_seeds", f"expected a list of seeds (integers >= 0), got {_got(seeds)}")
        object.__setattr__(self, "curve_seeds", tuple(seeds))
