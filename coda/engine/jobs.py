"""Worker jobs of a co-evolution round: build an environment (generate, check, repair, certify) and roll a
policy out. They run in executor workers (`coda.sim.executor`), each of which holds one simulator world
(`coda.data._WORLD`); jobs and results are plain data (JSON strings, dicts of arrays).

Every job derives its randomness from the integers it is given, so its result is a function of the job
alone, whichever worker runs it and whatever that worker ran before.

Fault injection (tests only; off unless set): ``CODA_FAULT_INJECT="rollout:segfault:<prefix>,rollout:hang:<prefix>"``
makes `rollout_job` kill its worker with SIGSEGV, or sleep forever, on every scene whose hash starts with
``<prefix>``, so that the executor's crash and timeout handling can be exercised inside a real ``coda run``
(`tests/reliability/test_sim_faults.py`).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

FAULT_ENV = "CODA_FAULT_INJECT"


def generate_job(job: dict[str, Any]) -> dict[str, Any]:
    """Build one environment: sample (novel), apply a generation program (targeted) or take a stored scene
    (control/replay); run the validity checks and repairs; certify it with the scripted planner.

    job: family, split, seed (list of ints), base (scene JSON or None), program (dict or None),
    bindings (dict or None), sample_split ("generator" by default).
    Returns the scene JSON (None when rejected), validity status, repairs, the construction trace (the
    generation step first), whether the planner certified it, and the planner's demonstration (obs, actions).
    """
    from coda import data
    from coda.engine.interpret import apply_generation
    from coda.sim.families import REGISTRY
    from coda.sim.scene import SceneSpec
    from coda.sim.validity import certify_scene

    cpu0 = time.process_time()
    world = data._WORLD
    rng = np.random.default_rng(np.random.SeedSequence(job["seed"]))
    family = REGISTRY[job["family"]]
    base = SceneSpec.from_json(job["base"]) if job.get("base") else None
    trace: list[dict[str, Any]] = []
    if job.get("program") is not None:
        try:
            spec = apply_generation(job["program"], base, rng, world.catalog, job.get("bindings"))
        except ValueError as err:  # ProgramError / SceneSpecError: the program does not apply here
            return _rejected(
                job, [{"op": "generate", "program": job["program"].get("id"), "error": str(err)}]
            )
        trace.append({"op": "generate", "program": job["program"].get("id"), "base": base.hash})
    elif base is not None:
        spec = base
        trace.append({"op": "generate", "stored": base.hash})
    else:
        spec = family.sample(rng, world.catalog, job.get("sample_split", "generator"))
        trace.append({"op": "generate", "sample": job.get("sample_split", "generator")})
    report, demo = certify_scene(world, spec, rng)
    trace += report.trace
    if report.scene is None:
        return _rejected(job, trace)
    out = {
        "family": job["family"],
        "split": job["split"],
        "scene": report.scene.to_json(),
        "hash": report.scene.hash,
        "validity": report.status,
        "repairs": report.repairs,
        "trace": trace,
        "certified": bool(demo is not None and demo.success),
        "demo": None,
        "cpu_s": time.process_time() - cpu0,
    }
    if out["certified"]:
        out["demo"] = {
            "obs": demo.obs[: demo.steps].astype(np.float32),
            "labels": demo.actions.astype(np.float32),
            "instruction": report.scene.task.instruction,
            "family": job["family"],
            "success": True,
        }
    return out


def _rejected(job: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "family": job["family"],
        "split": job["split"],
        "scene": None,
        "hash": None,
        "validity": "rejected",
        "repairs": sum(1 for t in trace if t.get("op") == "repair"),
        "trace": trace,
        "certified": False,
        "demo": None,
        "cpu_s": 0.0,
    }


def rollout_job(job: dict[str, Any]) -> dict[str, Any]:
    """Roll a saved policy out on one scene: critic-guided (j candidates, softmax(Q/τ)) when a critic is
    given, else the policy's own sample. job: policy, critic (dirs), scene (JSON), max_chunks, j,
    temperature, selection ("softmax" or "argmax"), seed, record (return the full `RolloutRecord` dict, else a
    summary), and optionally embedding (the instruction's, from the parent's encoder)."""
    from coda import data
    from coda.learn.awr import cached_actor
    from coda.learn.text import get_encoder
    from coda.sim.rollout import run_episode, run_outcome
    from coda.sim.scene import SceneSpec

    actor = cached_actor(
        job["policy"],
        job.get("critic"),
        j=job.get("j", 8),
        temperature=job.get("temperature", 0.5),
        seed=job.get("seed", 0),
        mode=job.get("selection", "softmax"),
    )
    cpu0 = time.process_time()
    scene = SceneSpec.from_json(job["scene"])
    if job.get("embedding") is not None:  # the parent's embedding: no text model to load here
        get_encoder().remember([scene.task.instruction], [job["embedding"]])
    _inject_fault(scene.hash)
    if job.get("record"):  # arrays, not lists: they pickle as bytes (`RolloutRecord.from_dict` reads both)
        rec = run_episode(data._WORLD, scene, actor, max_chunks=job["max_chunks"])
        return {**rec.to_dict(arrays=True), "cpu_s": time.process_time() - cpu0}
    out = run_outcome(data._WORLD, scene, actor, max_chunks=job["max_chunks"])
    return {
        "family": scene.family,
        "hash": scene.hash,
        "success": out["success"],
        "phase_reached": out["phase_reached"],
        "steps": out["steps"],
        "cpu_s": time.process_time() - cpu0,
    }


def _inject_fault(scene_hash: str) -> None:
    """The test hook of the module docstring: crash or hang on the scenes `CODA_FAULT_INJECT` names."""
    for item in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        job, kind, prefix = (item.split(":") + ["", ""])[:3]
        if job != "rollout" or not prefix or not scene_hash.startswith(prefix):
            continue
        if kind == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif kind == "hang":
            while True:
                time.sleep(3600)
