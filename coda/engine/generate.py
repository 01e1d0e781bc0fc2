"""Memory-guided scene generation (paper §3.3) and the generation strategies of the baselines.

A round's environment budget per family is ``2 · envs_per_family`` environments (paper: 64 targeted + 64
control). Every strategy turns it into `EnvRequest`s, which `coda.engine.jobs.generate_job` builds in the
workers:

* ``memory`` (CoDA, `allocate`): the novel stream (environments sampled from the generator space), the replay
  stream (stored environments) and every difficulty mode are *arms*. ε = ``novel_share`` and
  ``replay_share`` of the slots are floors of the two streams; of the rest, at most ``CANDIDATE_SHARE`` tests
  candidate modes that recur (``CANDIDATE_MIN_DIAGNOSES``), and the remainder goes to the arms in proportion
  to `arm_weight`: a validated mode by its learning progress and how central its success lies in the
  success band, and nothing when its success is outside the band; the novel stream by its learning
  progress plus a base weight (slots no mode earns fall back to novel draws); the replay stream by its
  learning progress only. A mode's slot is a *pair*: the mode's generation program applied to a base scene
  (targeted) and the same base scene without the program's operations (control).
* ``sr_guided``: closed loop on success rate only (PLR-style): environments whose estimated success
  p = (s + 1) / (n + 2) is intermediate (weight p(1 − p)) are mutated along a random factor or replayed;
  novel environments fill ε of the budget.
* ``uniform``: every environment sampled uniformly from the generator space (open loop).
* ``domain_rand``: seed scenes with every randomisable factor re-drawn around the seed value (open loop).

The control experiment that decides whether a diagnosed difficulty is real is `coda.engine.control`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.memory.factors import FACTORS, PRIMARY_ROLE

CANDIDATE_SHARE = 0.25  # at most this share of the mode slots tests candidate modes ...
CANDIDATE_MIN_DIAGNOSES = 2  # ... that have recurred: a failure seen once is not yet a mode (paper §3.2)
ARM_BASE = 0.25  # weight of an in-band validated mode, or of the novel stream, before its progress counts
SPLIT_CODES = {"novel": 1, "targeted": 2, "control": 3, "replay": 4, "mutation": 5}


@dataclass
class EnvRequest:
    """One environment to build; `pair` ties a targeted variant to its control."""

    family: str
    split: str  # novel | targeted | control | replay | mutation
    seed: list[int]  # seeds the job's generator
    base: str | None = None  # scene JSON the program applies to (or the stored scene itself)
    program: dict | None = None  # generation program (targeted / mutation)
    program_id: str | None = None  # lineage: the program of a targeted variant, or the one a control controls
    mode_id: str | None = None
    pair: int | None = None
    base_hash: str | None = None
    slot: int = -1  # position in the round's request list: the environment's id within the round
    truth_factor: str | None = (
        None  # the factor the program perturbs (ground truth, never shown to a diagnoser)
    )

    def job(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "split": self.split,
            "seed": self.seed,
            "base": self.base,
            "program": self.program,
        }


@dataclass
class ModeView:
    """What allocation needs to know about a difficulty mode."""

    mode_id: str
    family: str
    status: str  # candidate | validated
    hardness: float  # 1 − success
    learning_progress: float
    program: dict  # its generation program
    factor: str = ""
    recurrence: int = 1  # diagnoses that fell into the mode


@dataclass
class SceneStats:
    """Success record of a stored environment (sr_guided's level buffer)."""

    scene: str  # JSON
    family: str
    successes: int = 0
    trials: int = 0
    history: list[int] = field(default_factory=list)

    @property
    def p(self) -> float:
        return (self.successes + 1) / (self.trials + 2)


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Integer allocation of `total` proportional to `weights` (Hamilton's method, ties by index)."""
    w = np.asarray(weights, dtype=np.float64)
    if total <= 0 or len(w) == 0:
        return [0] * len(w)
    if w.sum() <= 0:
        w = np.ones_like(w)
    raw = w / w.sum() * total
    counts = np.floor(raw).astype(int)
    rest = total - int(counts.sum())
    order = sorted(range(len(w)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts.tolist()


def mode_weight(mode: ModeView, band: tuple[float, float]) -> float:
    """Allocation weight of a validated mode: zero when its variant success (1 − hardness) lies outside the
    success band (paper §3.3: variants are kept only inside it), else ``ARM_BASE`` + 2 · learning progress +
    0.5 · how close the success lies to the middle of the band."""
    success = 1.0 - mode.hardness
    lo, hi = band
    if not lo <= success <= hi:
        return 0.0
    centre = 1.0 - abs(success - (lo + hi) / 2) / max((hi - lo) / 2, 1e-9)
    return ARM_BASE + 2.0 * mode.learning_progress + 0.5 * centre


def stream_weight(split: str, learning_progress: float) -> float:
    """Allocation weight of the novel or replay stream beyond its ε floor: the novel stream is the default
    arm (``ARM_BASE`` + 2 · learning progress: slots no mode earns fall back to novel draws); the replay
    stream gets only what its learning progress earns (2 · learning progress)."""
    return (ARM_BASE if split == "novel" else 0.0) + 2.0 * learning_progress


@dataclass
class Allocation:
    """A family's slots of one round: novel and replay slots, and pairs per mode (in the order given)."""

    novel: int
    replay: int
    modes: list[int]


def testable(mode: ModeView, min_diagnoses: int) -> bool:
    """A candidate worth a control experiment: it recurred, or its program was lifted from a mode validated
    in another family (Appendix A, no diagnosis of its own)."""
    return mode.recurrence >= min_diagnoses or mode.program.get("source") == "transfer"


def allocate(
    n: int,
    modes: list[ModeView],
    *,
    novel_share: float,
    replay_share: float,
    has_stored: bool,
    band: tuple[float, float],
    min_pairs: int,
    progress: Mapping[str, float] | None = None,
) -> Allocation:
    """Split `n` slots among the arms (see the module docstring). `progress` holds the measured learning
    progress of the ``novel`` and ``replay`` streams (0 when absent); without stored scenes the replay floor
    goes to novel.

    Candidates: the most recurrent testable ones get `min_pairs` pairs each, within ``CANDIDATE_SHARE`` of
    the mode slots (the slots beyond the ε floors). A profile too small for that share to hold one test (the
    smoke profile: 3 mode slots) tests one candidate anyway, and when no candidate has recurred it tests a
    candidate of one diagnosis, so that the control experiment still runs there."""
    progress = progress or {}
    novel = int(round(novel_share * n))
    replay = int(round(replay_share * n))
    if not has_stored:
        novel, replay = novel + replay, 0
    free = n - novel - replay
    counts = [0] * len(modes)
    cap = int(CANDIDATE_SHARE * free)
    tiny = cap < min_pairs
    candidates = [i for i, m in enumerate(modes) if m.status == "candidate"]
    tested = [i for i in candidates if testable(modes[i], CANDIDATE_MIN_DIAGNOSES)]
    if tiny:
        cap = min(min_pairs, free)
        tested = tested or [i for i in candidates if testable(modes[i], 1)]
    tested.sort(key=lambda i: (-modes[i].recurrence, modes[i].mode_id))
    for i in tested[: cap // max(min_pairs, 1)]:
        counts[i] = min_pairs
    validated = [i for i, m in enumerate(modes) if m.status == "validated"]
    weights = [stream_weight("novel", progress.get("novel", 0.0))]
    weights += [stream_weight("replay", progress.get("replay", 0.0))] if has_stored else []
    weights += [mode_weight(modes[i], band) for i in validated]
    shares = largest_remainder(weights, free - sum(counts))
    novel += shares.pop(0)
    replay += shares.pop(0) if has_stored else 0
    for i, c in zip(validated, shares):
        counts[i] = c
    return Allocation(novel, replay, counts)


def seed_for(seed: int, round_: int, family: str, split: str, index: int) -> list[int]:
    """The job seed of a request. PyBullet families are numbered by name; another domain's families (LIBERO
    source tasks) by a stable hash of the name, above them."""
    if family in FACTORS:
        fam = sorted(FACTORS).index(family)
    else:
        fam = len(FACTORS) + zlib.crc32(family.encode()) % 1_000_000
    return [seed, round_, fam, SPLIT_CODES[split], index]


def memory_requests(
    family: str,
    n: int,
    modes: list[ModeView],
    bases: list[str],
    stored: list[str],
    *,
    seed: int,
    round_: int,
    novel_share: float,
    replay_share: float,
    band: tuple[float, float],
    rng: np.random.Generator,
    min_pairs: int = 2,
    base_weights: Sequence[float] | None = None,
    progress: Mapping[str, float] | None = None,
) -> list[EnvRequest]:
    """CoDA's allocation for one family: `n` slots of two environments each (`allocate`; `progress`: the
    novel and replay streams' learning progress).

    Base scenes (seed scenes and generated scenes the policy has solved) are drawn with probability ∝
    `base_weights` (the policy's estimated success on them): a control experiment can only show a drop where
    the policy succeeds on the control. The family's pairs of the round use distinct base scenes while
    unused ones remain (`draw_bases`)."""
    modes = [m for m in modes if m.family == family]
    plan = allocate(
        n,
        modes,
        novel_share=novel_share,
        replay_share=replay_share,
        has_stored=bool(stored),
        band=band,
        min_pairs=min_pairs,
        progress=progress,
    )
    out: list[EnvRequest] = []
    for k in range(2 * plan.novel):
        out.append(EnvRequest(family, "novel", seed_for(seed, round_, family, "novel", k)))
    for k in range(2 * plan.replay):
        scene = stored[int(rng.integers(len(stored)))]
        out.append(EnvRequest(family, "replay", seed_for(seed, round_, family, "replay", k), base=scene))
    counts = plan.modes
    p = None
    if base_weights is not None:
        w = np.asarray(base_weights, dtype=np.float64)
        p = w / w.sum()
    picks = iter(draw_bases(rng, len(bases), sum(counts), p))
    pair = 0
    for mode, count in zip(modes, counts):
        for _ in range(count):
            base = bases[next(picks)]
            common = {
                "mode_id": mode.mode_id,
                "pair": pair,
                "truth_factor": mode.program.get("perturbs"),
                "program_id": mode.program.get("id"),
            }
            s = seed_for(seed, round_, family, "targeted", pair)
            out.append(EnvRequest(family, "targeted", s, base=base, program=mode.program, **common))
            s = seed_for(seed, round_, family, "control", pair)
            out.append(EnvRequest(family, "control", s, base=base, **common))
            pair += 1
    return out


def draw_bases(rng: np.random.Generator, n_bases: int, count: int, p: np.ndarray | None = None) -> list[int]:
    """`count` base-scene indices for a family's pairs of one round, drawn with probability ∝ `p` and
    distinct while unused bases remain (then a new cycle starts).

    A control is the base scene itself, rolled out by the round's deterministic actor, so a base drawn twice
    in a round measures the same control twice: the second pair adds a targeted variant but no new control
    observation, and the McNemar test of the control experiment (`coda.engine.control`) would count one control outcome as several
    independent pairs. Each draw is the one ``rng.choice(n_bases, p=p)`` makes, redrawn while it repeats a
    base of the current cycle: a round without repeats draws exactly what independent draws would."""
    support = n_bases if p is None else int(np.count_nonzero(np.asarray(p) > 0))
    out: list[int] = []
    used: set[int] = set()
    for _ in range(count):
        if len(used) >= support:
            used = set()
        i = int(rng.choice(n_bases, p=p))
        for _ in range(64):  # rejection keeps the draw ∝ p among the unused bases
            if i not in used:
                break
            i = int(rng.choice(n_bases, p=p))
        else:  # unused bases of tiny weight only: draw among them directly
            q = np.ones(n_bases) if p is None else np.asarray(p, dtype=np.float64).copy()
            q[list(used)] = 0.0
            i = int(rng.choice(n_bases, p=q / q.sum()))
        used.add(i)
        out.append(i)
    return out


def random_program(family: str, rng: np.random.Generator, *, n_ops: int = 1) -> dict:
    """A generation program that re-draws `n_ops` random factors of `family` within the generator space
    (the mutation operator of sr_guided and of domain randomisation)."""
    from coda.memory.programs import validate_generation

    supported = [f for f, (_, attr) in FACTORS[family].items() if attr not in ("part", "goal_offset")]
    chosen = sorted(rng.choice(len(supported), size=min(n_ops, len(supported)), replace=False).tolist())
    roles: dict[str, dict] = {}
    ops = []
    for i in chosen:
        factor = supported[i]
        role, attr = FACTORS[family][factor]
        op: dict[str, Any] = {"op": "sample", "attribute": attr}
        if role is not None:
            op["role"] = role
            roles.setdefault(role, {"requires": {}})
        if attr == "distractors":
            op["range"] = [0, 2]
        elif attr == "instance" or attr == "instruction":
            pass
        else:
            op["range"] = "generator"
        ops.append(op)
    doc = {
        "kind": "generation",
        "version": 1,
        "family": family,
        "source": "random",
        "perturbs": supported[chosen[0]],
        "roles": roles or {PRIMARY_ROLE[family]: {"requires": {}}},
        "operations": ops,
        "constraints": [],
    }
    return validate_generation(doc)


def sr_guided_requests(
    family: str,
    n: int,
    buffer: list[SceneStats],
    *,
    seed: int,
    round_: int,
    novel_share: float,
    replay_share: float,
    rng: np.random.Generator,
) -> list[EnvRequest]:
    """Success-rate-guided generation for one family: 2n environments (see the module docstring)."""
    total = 2 * n
    pool = [s for s in buffer if s.family == family]
    n_novel = total if not pool else max(1, int(round(novel_share * total)))
    n_replay = 0 if not pool else int(round(replay_share * total))
    n_mut = total - n_novel - n_replay
    out = [EnvRequest(family, "novel", seed_for(seed, round_, family, "novel", k)) for k in range(n_novel)]
    if pool:
        w = np.array([s.p * (1 - s.p) + 0.01 for s in pool])
        w = w / w.sum()
        for k in range(n_replay):
            parent = pool[int(rng.choice(len(pool), p=w))]
            out.append(
                EnvRequest(family, "replay", seed_for(seed, round_, family, "replay", k), base=parent.scene)
            )
        for k in range(n_mut):
            parent = pool[int(rng.choice(len(pool), p=w))]
            out.append(
                EnvRequest(
                    family,
                    "mutation",
                    seed_for(seed, round_, family, "mutation", k),
                    base=parent.scene,
                    program=random_program(family, rng),
                )
            )
    return out


def uniform_requests(family: str, n: int, *, seed: int, round_: int) -> list[EnvRequest]:
    return [EnvRequest(family, "novel", seed_for(seed, round_, family, "novel", k)) for k in range(2 * n)]


def domain_rand_requests(
    family: str, n: int, bases: list[str], *, seed: int, round_: int, rng: np.random.Generator
) -> list[EnvRequest]:
    """Seed scenes with several factors re-drawn at random (classic domain randomisation)."""
    out = []
    for k in range(2 * n):
        base = bases[int(rng.integers(len(bases)))]
        program = random_program(family, rng, n_ops=3)
        out.append(
            EnvRequest(
                family, "mutation", seed_for(seed, round_, family, "mutation", k), base=base, program=program
            )
        )
    return out


def exhibits(program: dict, scene) -> bool:
    """Whether `scene` shows the difficulty `program` recreates: every operation's factor of the scene lies in
    the region the operation produces (a sampled range, widened by 10% of its width; a set value; one of the
    operation's task variants). A
    diagnosis is confirmed by its mode's control experiment only when its own failing scene exhibits the
    validated difficulty; this reads the scene, never the program that generated it."""
    from coda.engine.diagnose import factor_values
    from coda.memory.factors import TASK_ATTRIBUTES, factor_name
    from coda.memory.programs import variant_choices

    if program.get("family") != scene.family:
        return False
    values = factor_values(scene)
    for op in program.get("operations", []):
        if op["attribute"] in TASK_ATTRIBUTES:
            if scene.task.variant not in variant_choices(scene.family, op):
                return False
            continue
        factor = factor_name(scene.family, op.get("role"), op["attribute"])
        if factor is None or factor not in values:
            return False
        value = values[factor]
        if op["attribute"] == "instance":
            cats = op.get("categories")
            if cats and scene.objects[scene.task.bindings[op["role"]]].category not in cats:
                return False
        elif op["op"] == "sample" and isinstance(op.get("range"), list):
            rng = op["range"]
            pairs = rng if isinstance(rng[0], list) else [rng]
            coords = value if isinstance(value, tuple) else (value,)
            for (lo, hi), v in zip(pairs, coords):
                pad = 0.1 * (hi - lo)
                if not lo - pad <= v <= hi + pad:
                    return False
        elif op["op"] == "set" and "value" in op:
            target = op["value"] if isinstance(op["value"], list) else [op["value"]]
            coords = value if isinstance(value, tuple) else (value,)
            if any(abs(float(v) - float(t)) > 1e-3 + 0.05 * abs(float(t)) for v, t in zip(coords, target)):
                return False
    return True
