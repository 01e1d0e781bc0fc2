"""The sections of a ``params.yaml`` profile as frozen dataclasses, and :class:`Config`, which holds them.

One dataclass per section (``data``, ``sim``, ``planner``, ``sft``, ``libero``, ``scaling``; ``coevolve`` has
a module of its own, `coda.config.coevolve`), one comment per field, the checks in ``__post_init__`` (the
helpers of `coda.config.checks`). :class:`Config` is ``base`` plus one instance of each; `section_types`
reads the sections from its fields, which is how the loader (`coda.config.loading`) knows what a profile
must hold. `config_hash` names cached artefacts by a section's values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, get_type_hints

from coda.config.checks import (
    ConfigError,
    _check_bool,
    _check_choice,
    _check_choices,
    _check_float,
    _check_int,
    _check_optional_str,
    _got,
)
from coda.config.coevolve import CoevolveConfig

FAMILIES = ("pick_place", "stack", "drawer", "push")
OBS_MODES = ("state", "rgb")
BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class DataConfig:
    """Scene data: seed layouts that start the environment memory and held-out evaluation suites."""

    n_seed_layouts: int = 500  # seed layouts used, in total over the families (data/ holds 500)
    suite_size: int = 50  # held-out environments used per suite per family (data/ holds 100)
    families: tuple[str, ...] = FAMILIES  # task families to run, distinct entries of FAMILIES
    # `coda data scenes` (the pipeline's first stage): true takes the profile's scenes from the released data/
    # (pulling or rebuilding it first); false builds only the profile's slots when data/ is absent
    use_release: bool = True
    # `coda regimes`: certified uniform generator draws per family on which each regime's SFT policy is measured
    # (its failure rate tells the benchmark regimes apart; issue #27)
    uniform_draws: int = 64

    def __post_init__(self) -> None:
        _check_int("n_seed_layouts", self.n_seed_layouts, minimum=1)
        _check_int("uniform_draws", self.uniform_draws, minimum=1)
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
    record_keyframes: int = 8  # diagnosed failures `coda record` re-simulates and stores as keyframe strips

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
        _check_int("record_keyframes", self.record_keyframes, minimum=0)

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
    ik_iterations: int = 20  # maxNumIterations of pybullet's calculateInverseKinematics per control step
    # (the World's own default, which built data/, stays 100)
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


LIBERO_SUITES = ("libero_object", "libero_spatial")


@dataclass(frozen=True)
class LiberoConfig:
    """LIBERO-Pro (Table 2): what is LIBERO's own — source tasks, planner demonstrations, evaluation states,
    episode length, the budget of its rounds (rounds, environments and demonstrations per source task) and
    the share of every imitation batch that rehearses the SFT demonstrations.

    The rounds run the shared co-evolution loop with the profile's ``coevolve`` recipe otherwise (novel share,
    control experiment, critic and policy updates, batch size, LoRA/full fine-tuning, j, τ, γ, β); SFT's
    batch size and learning rate are the profile's ``sft`` ones. Which initial states are demonstrated,
    generated from and evaluated: `coda.sim.libero.heldout`.
    """

    suite: str = "libero_object"  # standard suite; its _swap (position) and _lan (instruction) versions too
    tasks: tuple[int, ...] = tuple(range(10))  # source tasks (task ids of the suite)
    demo_states: int = 10  # bundled initial states 0..n-1 of each task demonstrated by the planner (SFT)
    demo_repeats: int = 2  # demonstrations per state: one clean, the others with execution noise
    noise: float = 0.1  # std of the Gaussian noise on executed normalised actions of noisy demonstrations
    eval_states: int = 5  # the last n bundled initial states of each task, evaluated in every suite
    curve_states: int = 5  # the first n of those, evaluated after every round (the last round: all of them)
    max_steps: int = 300  # control steps per episode (LIBERO's 20 Hz OSC controller)
    epochs: int = 60  # SFT passes over the chunk dataset
    rounds: int = 3  # co-evolution rounds (Table 2 compares before and after them)
    envs_per_task: int = 4  # environment slots per source task per round (coevolve's envs_per_family)
    demos_per_task: int = 4  # planner demonstrations per source task per round (coevolve's demos_per_family)
    # share of every round's imitation batches drawn from the SFT demonstrations of the source tasks (all of
    # them are rehearsed), the rest from the rounds' planner demonstrations (coevolve's rehearsal_share)
    rehearsal_share: float = 0.9
    # the rounds' learning rate and AWR weight where LIBERO's differ from coevolve's (None: coevolve's); a
    # benchmark choice stated in docs/LIBERO.md and applied to every LIBERO method alike
    lr: float | None = None
    awr_weight: float | None = None
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
            ("curve_states", 1),
            ("max_steps", 10),
            ("epochs", 1),
            ("rounds", 0),
            ("envs_per_task", 1),
            ("demos_per_task", 0),
            ("workers", 1),
        ):
            _check_int(key, getattr(self, key), minimum=minimum)
        if self.demo_states + self.eval_states > 45:
            raise ConfigError(
                "eval_states",
                f"demo_states + eval_states must leave initial states for the rounds (<= 45 of 50), "
                f"got {self.demo_states} + {self.eval_states}",
            )
        if self.curve_states > self.eval_states:
            raise ConfigError(
                "curve_states",
                f"expected at most eval_states ({self.eval_states}), got {self.curve_states}",
            )
        for key in ("noise", "rehearsal_share"):
            value = _check_float(key, getattr(self, key), above=None)
            if not 0 <= value <= 1:
                raise ConfigError(key, f"expected a number in [0, 1], got {value}")
            object.__setattr__(self, key, value)
        if self.lr is not None:
            object.__setattr__(self, "lr", _check_float("lr", self.lr, above=0.0))
        if self.awr_weight is not None:
            object.__setattr__(self, "awr_weight", _check_float("awr_weight", self.awr_weight, above=None))
            if self.awr_weight < 0:
                raise ConfigError("awr_weight", f"expected a number >= 0, got {self.awr_weight}")


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
