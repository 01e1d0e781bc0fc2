"""Typed, validated view of ``params.yaml``.

``params.yaml`` holds a shared ``base`` (seed, default profile) and named ``profiles``; a profile has one
mapping per section (``data``, ``sim``, ``planner``, ...). Each section is a frozen dataclass below whose
``__post_init__`` checks types, ranges and allowed values. Every key of every section must appear in
``params.yaml``: DVC stages declare the keys they depend on, so the file is the complete record of a run's
parameters. Dataclass defaults (the ``cpu`` values) exist only for building configs in code and tests.

All profiles are validated on every load, so a mistake in ``paper`` is caught while running ``smoke``.
Any problem raises :class:`ConfigError`, one line naming the dotted key, for example
``profiles.cpu.sim.workers: expected an integer >= 1, got -2``.

To add a section: write a frozen dataclass (one comment per field, checks in ``__post_init__``), add it as a
field of :class:`Config`, and add its mapping to every profile in ``params.yaml``.

Example:
    >>> cfg = load_params("params.yaml", profile="smoke")
    >>> cfg.sim.workers, cfg.sim.substeps
    (1, 24)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

import yaml

FAMILIES = ("pick_place", "stack", "drawer", "push")
OBS_MODES = ("state", "rgb")
BACKENDS = ("local", "ray")


class ConfigError(ValueError):
    """A problem in the parameters, located by its dotted key path; ``str()`` is ``"<key_path>: <message>"``."""

    def __init__(self, key_path: str, message: str):
        self.key_path = key_path
        self.message = " ".join(message.split())  # always a single line
        super().__init__(f"{key_path}: {self.message}")

    def within(self, prefix: str) -> ConfigError:
        """The same error located under ``prefix``: ``workers`` becomes ``profiles.cpu.sim.workers``."""
        return ConfigError(_join(prefix, self.key_path), self.message)


# ---------------------------------------------------------------------------------------------------------
# Field checks shared by the section dataclasses. Each returns the (normalised) value or raises ConfigError.


def _got(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return f"{value!r} ({type(value).__name__})"


def _check_int(key: str, value: Any, minimum: int | None = None) -> int:
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise ConfigError(key, f"expected an integer{bound}, got {_got(value)}")
    return value


def _check_float(key: str, value: Any, above: float | None = None) -> float:
    """A finite number (ints accepted and converted), strictly greater than ``above`` when given."""
    bound = "" if above is None else f" > {above:g}"
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or (above is not None and value <= above):
        hint = ""
        if isinstance(value, str) and _parses_as_float(value):
            hint = " (YAML 1.1 reads exponent floats without a dot as strings: write 1.0e-4, not 1e-4)"
        raise ConfigError(key, f"expected a finite number{bound}, got {_got(value)}{hint}")
    return float(value)


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"expected true or false, got {_got(value)}")
    return value


def _check_choice(key: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        got = repr(value) if isinstance(value, str) else _got(value)
        raise ConfigError(key, f"expected one of {', '.join(map(repr, choices))}, got {got}")
    return value


def _check_choices(key: str, value: Any, choices: Iterable[str]) -> tuple[str, ...]:
    """A non-empty list of distinct values from ``choices``, returned as a tuple (hashable, immutable)."""
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(key, f"expected a non-empty list, got {_got(value)}")
    for i, item in enumerate(value):
        _check_choice(f"{key}[{i}]", item, choices)
        if item in value[:i]:
            raise ConfigError(f"{key}[{i}]", f"duplicate entry {item!r}")
    return tuple(value)


def _check_optional_str(key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(key, f"expected a non-empty string or null, got {_got(value)}")
    return value


# ---------------------------------------------------------------------------------------------------------
# Sections: one frozen dataclass per params.yaml section.


@dataclass(frozen=True)
class DataConfig:
    """Scene data: seed layouts that start the environment memory and held-out evaluation suites."""

    n_seed_layouts: int = 500  # seed layouts used, in total over the families (data/ holds 500)
    suite_size: int = 50  # held-out environments used per suite per family (data/ holds 100)
    families: tuple[str, ...] = FAMILIES  # task families to run, distinct entries of FAMILIES
    # `coda data scenes` (the pipeline's first stage): true takes the profile's scenes from the released data/
    # (pulling or rebuilding it first); false builds only the profile's slots when data/ is absent
    use_release: bool = True

    def __post_init__(self) -> None:
        _check_int("n_seed_layouts", self.n_seed_layouts, minimum=1)
        _check_int("suite_size", self.suite_size, minimum=1)
        object.__setattr__(self, "families", _check_choices("families", self.families, FAMILIES))
        _check_bool("use_release", self.use_release)


@dataclass(frozen=True)
class SimConfig:
    """PyBullet simulation, observations and the rollout executor."""

    control_hz: int = 10  # policy control rate; one 7-D action per control step
    physics_hz: int = 240  # physics rate; a multiple of control_hz (substeps per action = ratio)
    chunk_len: int = 8  # actions per action chunk (h in the paper)
    max_chunks: int = 12  # episode length in chunks
    obs: str = "state"  # observation type: "state" (proprio + object features) or "rgb" (two cameras)
    image_size: int = 224  # side of the square camera images in pixels, used when obs == "rgb"
    workers: int = 2  # parallel rollout worker processes (or Ray tasks in flight)
    backend: str = "local"  # "local" process pool or "ray"
    ray_address: str | None = None  # ray.init(address=...) target; null starts or joins a local Ray
    episode_timeout_s: float = 60.0  # wall-clock limit for one episode before its worker is replaced
    retries: int = 1  # re-attempts of an episode whose worker crashed or timed out

    def __post_init__(self) -> None:
        _check_int("control_hz", self.control_hz, minimum=1)
        _check_int("physics_hz", self.physics_hz, minimum=1)
        if self.physics_hz % self.control_hz:
            raise ConfigError(
                "physics_hz", f"must be a multiple of control_hz ({self.control_hz}), got {self.physics_hz}"
            )
        _check_int("chunk_len", self.chunk_len, minimum=1)
        _check_int("max_chunks", self.max_chunks, minimum=1)
        _check_choice("obs", self.obs, OBS_MODES)
        _check_int("image_size", self.image_size, minimum=1)
        _check_int("workers", self.workers, minimum=1)
        _check_choice("backend", self.backend, BACKENDS)
        _check_optional_str("ray_address", self.ray_address)
        object.__setattr__(
            self, "episode_timeout_s", _check_float("episode_timeout_s", self.episode_timeout_s, above=0)
        )
        _check_int("retries", self.retries, minimum=0)

    @property
    def substeps(self) -> int:
        """Physics steps per control step."""
        return self.physics_hz // self.control_hz

    @property
    def max_steps(self) -> int:
        """Episode length in control steps."""
        return self.chunk_len * self.max_chunks


@dataclass(frozen=True)
class PlannerConfig:
    """Scripted IK planner that certifies scenes and produces demonstrations."""

    n_check: int = 50  # seed scenes per family for `coda planner-check`
    ik_iterations: int = 100  # maxNumIterations of pybullet's calculateInverseKinematics
    ik_threshold: float = 1e-4  # residualThreshold of calculateInverseKinematics (metres)

    def __post_init__(self) -> None:
        _check_int("n_check", self.n_check, minimum=1)
        _check_int("ik_iterations", self.ik_iterations, minimum=1)
        object.__setattr__(self, "ik_threshold", _check_float("ik_threshold", self.ik_threshold, above=0))


BACKBONES = ("flow", "regression")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning on planner demonstrations (the paper's starting point)."""

    backbone: str = "regression"  # "flow" (pi0.5 stand-in) or "regression" (OpenVLA-OFT stand-in)
    demos_per_family: int = 100  # seed scenes per family demonstrated by the planner (the first ones)
    demo_repeats: int = 3  # demonstrations per seed scene, each with its own execution noise
    noise: float = 0.1  # std of the Gaussian noise added to executed normalised actions (DART-style)
    epochs: int = 100  # passes over the chunk dataset
    batch_size: int = 256  # chunks per gradient step
    lr: float = 1e-3  # AdamW learning rate (cosine decay)
    eval_id_per_family: int = 25  # held-back seed scenes per family for in-distribution success
    eval_ood_per_suite: int = 50  # held-out scenes per suite per family for OOD success

    def __post_init__(self) -> None:
        _check_choice("backbone", self.backbone, BACKBONES)
        _check_int("demos_per_family", self.demos_per_family, minimum=1)
        _check_int("demo_repeats", self.demo_repeats, minimum=1)
        object.__setattr__(self, "noise", _check_float("noise", self.noise, above=None))
        if self.noise < 0:
            raise ConfigError("noise", f"expected a number >= 0, got {self.noise}")
        _check_int("epochs", self.epochs, minimum=1)
        _check_int("batch_size", self.batch_size, minimum=1)
        object.__setattr__(self, "lr", _check_float("lr", self.lr, above=0))
        _check_int("eval_id_per_family", self.eval_id_per_family, minimum=0)
        _check_int("eval_ood_per_suite", self.eval_ood_per_suite, minimum=0)


SCHEDULES = ("adaptive", "fixed")
DIAGNOSERS = ("sim", "phase_only", "vlm")  # plus "noisy:<p>" (e.g. "noisy:0.2")
COMPILERS = ("template", "hf", "openai")
POTENTIALS = ("full", "sparse", "task_description", "no_refinement")
SELECTIONS = ("softmax", "argmax")
FINETUNES = ("full", "lora")


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
    eval_every: int = 1  # evaluate after every n-th round and the last one ...
    curve_seeds: tuple[int, ...] = (0,)  # ... except runs of these seeds, evaluated every round (curves)
    long_rounds: int = 15  # rounds of the extended runs (Figure 3), which continue the 5-round runs
    ablation_rounds: int = 5  # rounds of the ablation runs (experiments.variants), compared at that round

    def __post_init__(self) -> None:
        for key in (
            "rounds",
            "envs_per_family",
            "min_pairs",
            "critic_steps",
            "batch_size",
            "j",
            "eval_every",
            "long_rounds",
            "ablation_rounds",
        ):
            _check_int(key, getattr(self, key), minimum=1)
        for key in (
            "demos_per_family",
            "rehearsal_per_family",
            "policy_updates",
            "min_modes_in_band",
            "eval_id_per_family",
            "curve_id_per_family",
        ):
            _check_int(key, getattr(self, key), minimum=0)
        for key in (
            "eval_ood_per_suite",
            "curve_ood_per_suite",
            "plateau_updates",
            "lora_rank",
            "check_every",
        ):
            _check_int(key, getattr(self, key), minimum=0 if key.endswith("per_suite") else 1)
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
        _check_choice("finetune", self.finetune, FINETUNES)
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


LIBERO_SUITES = ("libero_object", "libero_spatial")


@dataclass(frozen=True)
class LiberoConfig:
    """LIBERO-Pro (Table 2): source tasks, planner demonstrations, evaluation and co-evolution rounds.

    The learning hyper-parameters of the rounds (LoRA rank, learning rate, j, τ, γ, β) are the profile's
    ``coevolve`` ones; SFT's batch size and learning rate are the profile's ``sft`` ones.
    """

    suite: str = "libero_object"  # standard suite; its _swap (position) and _lan (instruction) versions too
    tasks: tuple[int, ...] = tuple(range(10))  # source tasks (task ids of the suite)
    demo_states: int = 10  # bundled initial states 0..n-1 of each task demonstrated by the planner (SFT)
    demo_repeats: int = 2  # demonstrations per state: one clean, the others with execution noise
    noise: float = 0.1  # std of the Gaussian noise on executed normalised actions of noisy demonstrations
    eval_states: int = 5  # the last n bundled initial states of each task, evaluated in every suite
    max_steps: int = 300  # control steps per episode (LIBERO's 20 Hz OSC controller)
    epochs: int = 60  # SFT passes over the chunk dataset
    rounds: int = 3  # co-evolution rounds
    envs_per_task: int = 4  # generated variants per source task per round (each with its control)
    novel_share: float = 0.25  # share of variants drawn from new random programs once modes exist
    min_pairs: int = 2  # fresh targeted/control pairs that test a candidate mode
    validate_margin: float = 0.25  # validated when control − targeted success reaches this
    demos_per_round: int = 10  # planner demonstrations of validated modes' variants per round
    critic_steps: int = 100  # critic TD updates per round
    policy_updates: int = 100  # AWR (+ imitation) updates per round
    batch_size: int = 64  # states per AWR / critic update
    workers: int = 2  # simulator worker processes

    def __post_init__(self) -> None:
        _check_choice("suite", self.suite, LIBERO_SUITES)
        tasks = self.tasks
        if (
            not isinstance(tasks, list | tuple)
            or not tasks
            or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 10 for t in tasks)
            or len(set(tasks)) != len(tasks)
        ):
            raise ConfigError(
                "tasks", f"expected a non-empty list of distinct task ids in [0, 9], got {_got(tasks)}"
            )
        object.__setattr__(self, "tasks", tuple(tasks))
        for key, minimum in (
            ("demo_states", 1),
            ("demo_repeats", 1),
            ("eval_states", 1),
            ("max_steps", 10),
            ("epochs", 1),
            ("rounds", 0),
            ("envs_per_task", 1),
            ("min_pairs", 1),
            ("demos_per_round", 0),
            ("critic_steps", 0),
            ("policy_updates", 0),
            ("batch_size", 1),
            ("workers", 1),
        ):
            _check_int(key, getattr(self, key), minimum=minimum)
        if self.demo_states + self.eval_states > 45:
            raise ConfigError(
                "eval_states",
                f"demo_states + eval_states must leave initial states for the rounds (<= 45 of 50), "
                f"got {self.demo_states} + {self.eval_states}",
            )
        for key in ("noise", "novel_share", "validate_margin"):
            value = _check_float(key, getattr(self, key), above=None)
            if not 0 <= value <= 1:
                raise ConfigError(key, f"expected a number in [0, 1], got {value}")
            object.__setattr__(self, key, value)


SCALING_MODES = ("uniform", "targeted")


@dataclass(frozen=True)
class ScalingConfig:
    """The data-scaling experiment (`benchmarks/data_scaling.py`): the SFT policy fine-tuned on planner
    demonstrations of N generated environments per family, uniform or targeted at its own failures. The
    recipe (finetune, lora_rank, rehearsal_per_family, rehearsal_share) is the profile's `coevolve` one."""

    ns: tuple[int, ...] = (0, 16, 64, 256)  # generated environments per family
    modes: tuple[str, ...] = SCALING_MODES
    updates: int = 2000  # policy updates of every fine-tuning (the same for every N and mode)
    batch_size: int = 256  # demonstration chunks per update
    lr: float = 3.0e-4  # AdamW learning rate of the fine-tuning
    diagnostic_pool: int = 64  # uniform scenes per family the SFT policy is rolled out on to find failures

    def __post_init__(self) -> None:
        ns = self.ns
        if (
            not isinstance(ns, list | tuple)
            or not ns
            or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in ns)
        ):
            raise ConfigError("ns", f"expected a non-empty list of integers >= 0, got {_got(ns)}")
        if list(ns) != sorted(set(ns)):
            raise ConfigError("ns", f"expected increasing values, got {list(ns)}")
        object.__setattr__(self, "ns", tuple(ns))
        object.__setattr__(self, "modes", _check_choices("modes", self.modes, SCALING_MODES))
        for key in ("updates", "batch_size", "diagnostic_pool"):
            _check_int(key, getattr(self, key), minimum=1)
        object.__setattr__(self, "lr", _check_float("lr", self.lr, above=0))


@dataclass(frozen=True)
class Config:
    """The parameters of one run: ``base`` plus the sections of the selected profile."""

    seed: int  # base.seed: root seed from which every random generator of a run is derived
    profile: str  # name of the selected profile
    data: DataConfig
    sim: SimConfig
    planner: PlannerConfig
    sft: SFTConfig
    coevolve: CoevolveConfig
    libero: LiberoConfig
    scaling: ScalingConfig

    def __post_init__(self) -> None:
        _check_int("seed", self.seed, minimum=0)


def section_types() -> dict[str, type]:
    """Section name -> dataclass, read from the dataclass-typed fields of :class:`Config`."""
    hints = get_type_hints(Config)
    return {
        f.name: hints[f.name] for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name])
    }


# ---------------------------------------------------------------------------------------------------------
# Loading.


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Config:
    """Read ``path``, validate every profile and return the one named by ``profile`` or ``base.profile``."""
    path = Path(path)
    root = _as_mapping(str(path), _read_yaml(path))
    for key in root:
        if key not in ("base", "profiles", "experiments"):
            raise ConfigError(str(key), "unknown key; expected one of: base, profiles, experiments")
    for key in ("base", "profiles"):
        if key not in root:
            raise ConfigError(key, "missing key")

    base = _as_mapping("base", root["base"])
    _check_keys("base", base, ("seed", "profile"), what="key")
    seed = _check_int("base.seed", base["seed"], minimum=0)
    default_profile = base["profile"]

    profiles = _as_mapping("profiles", root["profiles"])
    if not profiles:
        raise ConfigError("profiles", "expected at least one profile")
    configs = {}
    for name, body in profiles.items():
        if not isinstance(name, str):
            raise ConfigError(f"profiles.{name}", f"profile names must be strings, got {_got(name)}")
        configs[name] = _build_profile(name, body, seed)

    available = ", ".join(sorted(configs))
    if not isinstance(default_profile, str) or default_profile not in configs:
        raise ConfigError("base.profile", f"unknown profile {default_profile!r}; available: {available}")
    selected = default_profile if profile is None else profile
    if selected not in configs:
        raise ConfigError(
            f"profiles.{selected}", f"unknown profile {selected!r} requested; available: {available}"
        )
    config = configs[selected]
    if "experiments" in root:
        load_experiments(root["experiments"], config)  # validated with every command, used by the pipeline
    return config


# ---------------------------------------------------------------------------------------------------------
# The experiment grid of the pipeline (top-level `experiments`): which runs dvc.yaml's stages make.

METHODS = (
    "sft",
    "domain_rand",
    "uniform",
    "sr_guided",
    "critic_no_memory",
    "coda",
    "gen_store_only",
    "train_store_only",
    "memory_reuse",
)


@dataclass(frozen=True)
class Variant:
    """One ablation run: a method plus overrides of the profile's `coevolve` keys (seed `base.seed`)."""

    name: str
    method: str
    set: Mapping[str, Any]
    table: str  # the table or figure it feeds (documentation; the report reads runs by name)


@dataclass(frozen=True)
class Experiments:
    seeds: tuple[int, ...]  # Table 1 seeds
    table1: tuple[str, ...]  # Table 1 methods
    long: tuple[str, ...]  # methods whose seed-0 run is extended to `coevolve.long_rounds` (Figure 3)
    variants: Mapping[str, Variant]
    backbone_b: Mapping[str, Any]  # Table 7: {backbone, epochs} of the second policy backbone's SFT


def load_experiments(raw: Any, config: Config) -> Experiments:
    """Validate the top-level `experiments` section against ``config`` (variants' overrides are applied
    to its `coevolve` section, so a bad value is reported here with its full key)."""
    raw = _as_mapping("experiments", raw)
    _check_keys("experiments", raw, ("seeds", "table1", "long", "variants", "backbone_b"), what="key")
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError("experiments.seeds", f"expected a non-empty list of seeds, got {_got(seeds)}")
    for i, x in enumerate(seeds):
        _check_int(f"experiments.seeds[{i}]", x, minimum=0)
    table1 = _check_choices("experiments.table1", raw["table1"], METHODS[:6])
    long = _check_choices("experiments.long", raw["long"], METHODS[1:6])
    variants = {}
    for name, body in _as_mapping("experiments.variants", raw["variants"]).items():
        prefix = f"experiments.variants.{name}"
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ConfigError(prefix, "variant names are letters, digits and underscores")
        body = _as_mapping(prefix, body)
        _check_keys(prefix, body, ("method", "table", "set"), what="key")
        method = _check_choice(f"{prefix}.method", body["method"], METHODS[1:8])
        overrides = _as_mapping(f"{prefix}.set", body["set"] or {})
        variant = Variant(name, method, dict(overrides), str(body["table"]))
        with_variant(config, variant)  # validates the overrides
        variants[name] = variant
    b = _as_mapping("experiments.backbone_b", raw["backbone_b"])
    _check_keys("experiments.backbone_b", b, ("backbone", "epochs"), what="key")
    _check_choice("experiments.backbone_b.backbone", b["backbone"], BACKBONES)
    _check_int("experiments.backbone_b.epochs", b["epochs"], minimum=1)
    return Experiments(tuple(seeds), table1, long, variants, dict(b))


def read_experiments(path: str | Path = "params.yaml", profile: str | None = None) -> Experiments:
    root = _as_mapping(str(path), _read_yaml(Path(path)))
    if "experiments" not in root:
        raise ConfigError("experiments", f"missing key in {path}")
    return load_experiments(root["experiments"], load_params(path, profile))


def with_variant(config: Config, variant: Variant) -> Config:
    """``config`` with the variant's `coevolve` overrides applied (validated like the profile itself)."""
    prefix = f"experiments.variants.{variant.name}.set"
    fields = {f.name for f in dataclasses.fields(CoevolveConfig)}
    for key in variant.set:
        if key not in fields:
            raise ConfigError(f"{prefix}.{key}", "unknown coevolve key")
    merged = {**config.coevolve.__dict__, **variant.set}
    try:
        coevolve = CoevolveConfig(**merged)
    except ConfigError as error:
        raise error.within(prefix) from None
    return dataclasses.replace(config, coevolve=coevolve)


def _build_profile(name: str, body: Any, seed: int) -> Config:
    prefix = f"profiles.{name}"
    body = _as_mapping(prefix, body)
    types = section_types()
    _check_keys(prefix, body, tuple(types), what="section")
    sections = {
        section: _build_section(f"{prefix}.{section}", cls, body[section]) for section, cls in types.items()
    }
    return Config(seed=seed, profile=name, **sections)


def _build_section(prefix: str, cls: type, raw: Any) -> Any:
    raw = _as_mapping(prefix, raw)
    _check_keys(prefix, raw, tuple(f.name for f in dataclasses.fields(cls)), what="key")
    try:
        return cls(**raw)
    except ConfigError as error:
        raise error.within(prefix) from None


def _check_keys(prefix: str, mapping: Mapping, expected: tuple[str, ...], what: str) -> None:
    for key in mapping:
        if key not in expected:
            raise ConfigError(_join(prefix, key), f"unknown {what}; expected one of: {', '.join(expected)}")
    for key in expected:
        if key not in mapping:
            raise ConfigError(_join(prefix, key), f"missing {what}")


def _as_mapping(key: str, value: Any) -> Mapping:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a mapping, got {_got(value)}")
    return value


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, which plain YAML loading resolves silently to the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merge keys may be overridden on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Mapping | list):
                continue  # unhashable; the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(str(path), f"cannot read file ({error.strerror or error})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(str(path), f"invalid YAML{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), f"invalid YAML: {error}") from None


# ---------------------------------------------------------------------------------------------------------
# Hashing.


def config_hash(section: Any) -> str:
    """Stable SHA-256 (hex) of a config dataclass instance: its fields as canonical JSON.

    Canonical means sorted keys, no whitespace, tuples as lists; equal configs hash equally in any process,
    so the hash can name cached artefacts.

    Example:
        >>> config_hash(PlannerConfig()) == config_hash(PlannerConfig(n_check=50))
        True
    """
    if not dataclasses.is_dataclass(section) or isinstance(section, type):
        raise TypeError(f"config_hash expects a dataclass instance, got {type(section).__name__}")
    payload = json.dumps(dataclasses.asdict(section), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
