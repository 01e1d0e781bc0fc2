"""`FakeDomain`: a small in-memory `coda.coevolve.domain.Domain` for fast tests of the co-evolution loop.

No simulator, no workers, no planner. A scene is a JSON dict of one push task with three factors of its
target (``mass``, ``friction``, ``scale``) and a task variant. Everything is deterministic:

* **build** samples a novel scene from the request's seed, applies a generation program's operations on
  those factors to the base scene (targeted, mutation), or returns the base scene itself (control, replay);
* **the policy's outcome is scripted**: whatever the actor, a rollout fails exactly when the target is
  heavier than `MASS_LIMIT` (it stops short of the goal in the ``push`` phase) and succeeds otherwise;
* **the diagnoser** reads the rollout and the scene (never the program that made it) and names ``mass`` —
  except on a slippery scene (friction below `SLIPPERY`), where it blames ``friction``: a wrong diagnosis,
  whose mode the control experiment must reject;
* **the compiler** writes the two programs as data: a generation program sampling the diagnosed factor in
  a window around the failing value (recompiled by `region` as the hull of a mode's failing scenes), and a
  training program (push subgoals, learning tools); `refine` raises a stalled program's demonstrations.

Programs name the PyBullet family ``push`` and its factors because the memory validates every program
against the program schema (`coda.memory.programs`), which is written over the PyBullet families.

Example:
    >>> domain = FakeDomain()
    >>> scene = domain.scene(mass=0.5)
    >>> [rec.success for rec in domain.rollout({}, [scene], record=True, desc="", seed=0)]
    [False]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.engine.generate import EnvRequest
from coda.memory.programs import validate_generation, validate_training

FAMILY = "push"
VARIANTS = ("away", "sideways")
PHASES = ("reach", "contact", "push", "arrive")  # the push family's phases
FAILING_PHASE = "push"
RANGES = {"mass": (0.02, 0.6), "friction": (0.2, 1.0), "scale": (0.7, 1.4)}  # push's generator space
MASS_LIMIT = 0.4  # the scripted policy fails exactly on targets heavier than this
SLIPPERY = 0.3  # below this friction the diagnoser blames friction (wrongly: mass is the cause)
WINDOW = 0.1  # a compiled program samples the failing values' hull padded by 10% of the factor's range
CAUSES = {
    "mass": "the target is too heavy: it stops short of the goal while pushed",
    "friction": "the target slides off the gripper's face while pushed",
}
OBS_DIM = 4  # a record's observation: mass, friction, scale, time
CHUNK = 4  # steps per chunk of a rollout
SUBGOALS = [
    {"predicate": "reach"},
    {"predicate": "contact"},
    {"predicate": "push_progress", "params": {"frac": 0.5}},
]
TOOLS = {"planner_demos": 4, "imitation_weight": 1.5}
SEED_MASSES = (0.1, 0.15, 0.2, 0.25)  # the seed bases: all light, so the policy succeeds on them


def succeeds(scene: Mapping[str, Any]) -> bool:
    """The scripted policy outcome."""
    return scene["mass"] <= MASS_LIMIT


@dataclass
class FakeRecord:
    """A rollout record with what the loop and `ChunkReplay.add_record` read."""

    family: str
    variant: str
    instruction: str
    scene_hash: str
    success: bool
    phase_reached: int  # phases completed (len(PHASES) on success)
    steps: int
    chunk_starts: list[int]
    success_step: int | None
    obs: np.ndarray  # (steps + 1, OBS_DIM)
    actions: np.ndarray  # (steps, 7)


@dataclass
class Compiled:
    """What `Domain.compile` returns (the fields `ModeBook` reads)."""

    generation: dict | None
    training: dict | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class FakePotential:
    """A shaping potential: Φ ramps over the rollout's chunk endpoints to the phases it reached, in units of
    the program's stages (``scale``); ``source`` says where it came from (a training program's id,
    ``diagnosis`` or ``task``)."""

    source: str
    scale: float

    def phi_along(self, record: FakeRecord) -> np.ndarray:
        ends = len(record.chunk_starts) + 1
        reached = record.phase_reached / len(PHASES)
        return np.linspace(0.0, reached * self.scale, ends)


def _window(factor: str, values: Sequence[float]) -> list[float]:
    lo, hi = RANGES[factor]
    pad = WINDOW * (hi - lo)
    return [round(max(min(values) - pad, lo), 4), round(min(max(values) + pad, hi), 4)]


class FakeDomain:
    """One push family over in-memory scenes (see the module docstring)."""

    families = (FAMILY,)
    replay_capacity = 4096
    generator_space = True

    def __init__(self) -> None:
        self._bases = [self.scene(mass=m, friction=0.5 + 0.1 * k) for k, m in enumerate(SEED_MASSES)]
        self.trained: set[str] = set()  # hashes of the scenes the policy is trained on
        self.worker_cpu_s = 0.0

    # -- scenes -----------------------------------------------------------------------------------------
    @staticmethod
    def scene(mass: float = 0.2, friction: float = 0.6, scale: float = 1.0, variant: str = "away") -> str:
        doc = {
            "family": FAMILY,
            "variant": variant,
            "instruction": f"push the block {variant}",
            "mass": round(float(mass), 4),
            "friction": round(float(friction), 4),
            "scale": round(float(scale), 4),
        }
        return json.dumps(doc, sort_keys=True)

    def scene_hash(self, scene: str) -> str:
        return hashlib.sha256(scene.encode()).hexdigest()[:16]

    def bases(self, family: str) -> list[str]:
        return list(self._bases)

    def base_hashes(self, family: str) -> list[str]:
        return [self.scene_hash(s) for s in self._bases]

    def _sample(self, rng: np.random.Generator) -> str:
        values = {f: rng.uniform(lo, hi) for f, (lo, hi) in RANGES.items()}
        return self.scene(**values, variant=VARIANTS[int(rng.integers(len(VARIANTS)))])

    def _apply(self, program: Mapping[str, Any], base: str, rng: np.random.Generator) -> str:
        """A generation program's operations on the base scene's factors (others are not modelled)."""
        doc = json.loads(base)
        for op in program["operations"]:
            attr = op["attribute"]
            if attr == "variant":
                doc["variant"] = (
                    op["value"] if op["op"] == "set" else str(rng.choice(op.get("values") or VARIANTS))
                )
                doc["instruction"] = f"push the block {doc['variant']}"
            elif attr in RANGES:
                lo, hi = RANGES[attr]
                if op["op"] == "sample":
                    a, b = (lo, hi) if op["range"] == "generator" else op["range"]
                    value = rng.uniform(a, b)
                elif op["op"] == "set":
                    value = op["value"]
                elif op["op"] == "scale":
                    value = doc[attr] * op["by"]
                else:
                    value = doc[attr] + op["by"]
                doc[attr] = min(max(value, lo), hi)
        return self.scene(**{k: doc[k] for k in (*RANGES, "variant")})

    def build(self, requests: list[EnvRequest], *, desc: str) -> list[dict[str, Any] | None]:
        out = []
        for q in requests:
            rng = np.random.default_rng(q.seed)
            if q.split == "novel":
                scene = self._sample(rng)
            elif q.program is not None:  # targeted, mutation
                scene = self._apply(q.program, q.base, rng)
            else:  # control, replay: the base scene itself
                scene = q.base
            out.append(
                {
                    "scene": scene,
                    "hash": self.scene_hash(scene),
                    "validity": "pass",
                    "repairs": 0,
                    "trace": [{"step": q.split}],
                    "certified": False,  # no planner: no demonstration
                    "demo": None,
                }
            )
        return out

    def rehearsal(self, per_family: int) -> list[dict[str, Any]]:
        return []

    # -- the policy in the environments ------------------------------------------------------------------
    def record(self, scene: str) -> FakeRecord:
        """The scripted rollout on `scene`: two chunks to success, or three chunks stuck in the push phase."""
        doc = json.loads(scene)
        ok = succeeds(doc)
        steps = 2 * CHUNK if ok else 3 * CHUNK
        t = np.arange(steps + 1, dtype=np.float32) / steps
        factors = np.array([doc["mass"], doc["friction"], doc["scale"]], dtype=np.float32)
        obs = np.concatenate([np.tile(factors, (steps + 1, 1)), t[:, None]], axis=1)
        actions = np.full((steps, 7), 0.1 if ok else -0.1, dtype=np.float32)
        return FakeRecord(
            family=doc["family"],
            variant=doc["variant"],
            instruction=doc["instruction"],
            scene_hash=self.scene_hash(scene),
            success=ok,
            phase_reached=len(PHASES) if ok else PHASES.index(FAILING_PHASE),
            steps=steps,
            chunk_starts=list(range(0, steps, CHUNK)),
            success_step=steps if ok else None,
            obs=obs,
            actions=actions,
        )

    def rollout(
        self, actor: dict[str, str], scenes: list[str], *, record: bool, desc: str, seed: int
    ) -> list[Any]:
        if record:
            return [self.record(s) for s in scenes]
        return [succeeds(json.loads(s)) for s in scenes]

    def evaluate(self, actor: dict[str, str], *, final: bool) -> dict[str, Any]:
        """ID: the seed bases; OOD: heavier targets."""
        ood = [self.scene(mass=m) for m in (0.3, 0.5, 0.55)]
        id_ok = self.rollout(actor, self._bases, record=False, desc="", seed=0)
        ood_ok = self.rollout(actor, ood, record=False, desc="", seed=0)
        return {
            "id_success": float(np.mean(id_ok)),
            "ood_success": float(np.mean(ood_ok)),
            "n_id": len(id_ok),
            "n_ood": len(ood_ok),
        }

    def no_evaluation(self) -> dict[str, Any]:
        return {"id_success": None, "ood_success": None, "n_id": 0, "n_ood": 0}

    def failures(self) -> dict[str, Any]:
        return {"failed_jobs": 0, "failure_reasons": {}}

    # -- diagnosis, programs, shaping ----------------------------------------------------------------------
    def diagnose(self, record: FakeRecord, env: dict[str, Any]) -> dict[str, Any] | None:
        if record.success:
            return None
        doc = json.loads(env["scene"])
        factor = "friction" if doc["friction"] < SLIPPERY else "mass"
        return {
            "family": record.family,
            "variant": record.variant,
            "phase": PHASES[record.phase_reached],
            "factor": factor,
            "cause": CAUSES[factor],
            "confidence": 0.9,
            "evidence_steps": [record.steps - 1],
        }

    def observe_trained(self, scene: str) -> None:
        self.trained.add(self.scene_hash(scene))

    def compile(self, diagnosis: dict[str, Any], scene: str) -> Compiled:
        doc = json.loads(scene)
        factor, variant = diagnosis["factor"], doc["variant"]
        generation = validate_generation(
            {
                "family": FAMILY,
                "source": "template",
                "perturbs": factor,
                "operations": [
                    {"op": "set", "attribute": "variant", "value": variant},
                    {
                        "op": "sample",
                        "role": "target",
                        "attribute": factor,
                        "range": _window(factor, [doc[factor]]),
                    },
                ],
            }
        )
        training = validate_training(
            {
                "kind": "training",
                "family": FAMILY,
                "source": "template",
                "potential": {"family": FAMILY, "variant": variant, "subgoals": SUBGOALS},
                "tools": TOOLS,
            }
        )
        return Compiled(generation, training)

    def region(self, program: dict[str, Any], scenes: list[str]) -> dict[str, Any]:
        """The hull of the failing scenes' values of the perturbed factor, padded; their variants."""
        if program.get("source") != "template":
            return program
        docs = [json.loads(s) for s in scenes]
        factor = program["perturbs"]
        variants = sorted({d["variant"] for d in docs})
        task = (
            {"op": "set", "attribute": "variant", "value": variants[0]}
            if len(variants) == 1
            else {"op": "sample", "attribute": "variant", "values": variants}
        )
        factor_op = {
            "op": "sample",
            "role": "target",
            "attribute": factor,
            "range": _window(factor, [d[factor] for d in docs]),
        }
        return validate_generation({**program, "operations": [task, factor_op]})

    def exhibits(self, program: dict[str, Any], scene: str) -> bool:
        doc = json.loads(scene)
        if program.get("family") != doc["family"]:
            return False
        for op in program["operations"]:
            attr = op["attribute"]
            if attr == "variant":
                choices = [op["value"]] if op["op"] == "set" else op.get("values") or list(VARIANTS)
                if doc["variant"] not in choices:
                    return False
            elif attr in RANGES and op["op"] == "sample" and isinstance(op["range"], list):
                lo, hi = op["range"]
                pad = WINDOW * (hi - lo)
                if not lo - pad <= doc[attr] <= hi + pad:
                    return False
        return True

    def transfer(self, program: dict[str, Any], family: str, phase: str) -> tuple[dict, str] | None:
        return None  # one family: nothing to transfer to

    def potential(
        self, record: FakeRecord, *, program: dict | None = None, diagnosis: dict | None = None
    ) -> FakePotential:
        if program is not None and program["potential"]["variant"] == record.variant:
            return FakePotential(program["id"], len(program["potential"]["subgoals"]) + 1.0)
        if program is None and diagnosis is not None:
            return FakePotential("diagnosis", 1.0)
        return FakePotential("task", 1.0)

    def progress(self, program: dict[str, Any], records: list[FakeRecord]) -> list[float]:
        """End-of-rollout Φ of the program's potential on the rollouts of its variant."""
        variant = program["potential"]["variant"]
        return [
            float(self.potential(rec, program=program).phi_along(rec)[-1])
            for rec in records
            if rec.variant == variant
        ]

    def refine(self, program: dict[str, Any], history: list[float]) -> dict[str, Any] | None:
        """A stalled program (progress moved less than 0.05 over its last two measurements) asks for two more
        planner demonstrations."""
        demos = program["tools"]["planner_demos"]
        if len(history) < 2 or abs(history[-1] - history[-2]) >= 0.05 or demos >= 16:
            return None
        tools = {**program["tools"], "planner_demos": min(demos + 2, 16)}
        return validate_training(
            {**{k: v for k, v in program.items() if k != "id"}, "tools": tools, "parent": program["id"]}
        )

    # -- checkpointed state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"trained": sorted(self.trained)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.trained = set(state["trained"])
