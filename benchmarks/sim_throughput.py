"""Simulator throughput, measured side by side in one run on the same seed scenes; prints JSON.

* raw_steps_per_s: bare `stepSimulation` replaying the very same episodes: the scene is reloaded and
  the motor targets the engine sent are re-issued, so the physics (contacts, grasps) is the same and
  only our engine's work is missing
* idle_steps_per_s: bare `stepSimulation` on the same scenes with the robot holding still (cheaper
  physics: no manipulation contacts), for reference
* engine_steps_per_s: physics steps per wall second inside our rollout engine (IK, control, state capture,
  predicates, observations, records; the policy's own compute is excluded: it is the scripted planner
  here, a network later); engine_ratio = engine / raw; engine_ratio_incl_planner counts the planner too
* episodes_per_s_1 / _2: the same episodes through the local process pool with 1 and 2 workers;
  scaling_2 = their ratio
* median_episode_s: median scripted episode (state observation) on one core, scene spawn excluded;
  median_load_s is the spawn-and-settle cost that precedes it

The world is configured as the default profile of params.yaml configures it (`world_kwargs`: IK iterations
per control step, control and physics rates).

Usage: python benchmarks/sim_throughput.py --json [--data data] [--per-family 6] [--params params.yaml]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pybullet as p

from coda import data
from coda.commands import _planner_job
from coda.config import load_params
from coda.sim.executor import make_executor
from coda.sim.rollout import plan_episode
from coda.sim.world import ARM_FORCES, ARM_JOINTS, FINGER_FORCE, FINGER_JOINTS, World, world_kwargs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--data", default="data")
    ap.add_argument("--per-family", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--params", default="params.yaml", help="the world settings of its default profile")
    args = ap.parse_args()
    root = Path(args.data)
    scenes = [s for f in data.FAMILIES for s in data.seed_scenes(root, f, args.per_family)]

    # the engine as the default profile configures it (IK iterations per control step, control rate)
    kwargs = world_kwargs(load_params(args.params))
    world = World(root, **kwargs)
    c, robot = world.client, world.robot
    raw_steps, raw_s, idle_steps, idle_s, eng_steps, eng_s, episode_s, load_s = 0, 0.0, 0, 0.0, 0, 0.0, [], []
    eng_policy_s = 0.0
    for _ in range(args.repeats):
        for scene in scenes:
            t0 = time.perf_counter()
            world.load(scene)
            load_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in range(480):
                p.stepSimulation(physicsClientId=c)
            idle_s += time.perf_counter() - t0
            idle_steps += 480
            world.motor_log = []
            rec = plan_episode(world, scene)
            log, world.motor_log = world.motor_log, None
            eng_steps += rec.physics_steps
            eng_s += rec.wall_s - rec.meta["policy_s"]
            eng_policy_s += rec.wall_s
            episode_s.append(rec.wall_s)
            world.load(scene)
            t0 = time.perf_counter()
            for q, width in log:
                p.setJointMotorControlArray(
                    robot,
                    ARM_JOINTS,
                    p.POSITION_CONTROL,
                    targetPositions=q,
                    forces=ARM_FORCES,
                    physicsClientId=c,
                )
                p.setJointMotorControlArray(
                    robot,
                    FINGER_JOINTS,
                    p.POSITION_CONTROL,
                    targetPositions=[width] * 2,
                    forces=[FINGER_FORCE] * 2,
                    physicsClientId=c,
                )
                for _ in range(world.substeps):
                    p.stepSimulation(physicsClientId=c)
            raw_s += time.perf_counter() - t0
            raw_steps += len(log) * world.substeps
    world.close()

    jobs = [(s.family, s.to_json()) for s in scenes] * args.repeats
    rates = {}
    for workers in (1, 2):
        ex = make_executor(
            "local", workers, timeout_s=120.0, initializer=data._init_worker, initargs=(str(root), kwargs)
        )
        ex.map(_planner_job, jobs[: 2 * workers])  # warm up: start the workers, import, load the catalog
        t0 = time.perf_counter()
        results = ex.map(_planner_job, jobs)
        rates[workers] = len(jobs) / (time.perf_counter() - t0)
        ex.close()
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]

    raw = raw_steps / raw_s
    engine = eng_steps / eng_s
    idle = idle_steps / idle_s
    out = {
        "scenes": len(scenes),
        "episodes": len(jobs),
        "raw_steps_per_s": round(raw, 1),
        "idle_steps_per_s": round(idle, 1),
        "engine_steps_per_s": round(engine, 1),
        "engine_ratio": round(engine / raw, 3),
        "engine_ratio_incl_planner": round(eng_steps / eng_policy_s / raw, 3),
        "episodes_per_s_1": round(rates[1], 3),
        "episodes_per_s_2": round(rates[2], 3),
        "scaling_2": round(rates[2] / rates[1], 3),
        "median_episode_s": round(float(np.median(episode_s)), 4),
        "median_load_s": round(float(np.median(load_s)), 4),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
