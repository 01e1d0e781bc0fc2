"""Scripted pick-and-place planner for LIBERO ``On`` / ``In`` goals (libero_object, libero_spatial).

A small state machine re-planned at every chunk: approach above a grasp point, descend, close, lift to a
carrying height that clears every obstacle, steer the *object's* observed position over the target, lower,
release, retreat. Inside a chunk the actions come from a proportional controller run on a kinematic model of
the arm (≈0.0126 m per step at action 1). Grasp points come from object poses and their collision boxes in
the MuJoCo model: boxes/bottles/cans are closed across their shortest horizontal side, bowls are gripped at
the rim wall with the fingers closing radially. A failed grasp (timeout, blocked descent, dropped object)
is retried with the next grasp candidate.

``python -m coda.sim.libero.planner --suite libero_object --states 0-4`` prints per-task success as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from coda.sim.libero.env import LiberoEnv, LiberoTask, get_task, n_tasks, run_episode
from coda.sim.rollout import Observation

STEP_GAIN = 0.0126  # metres moved per control step at action 1.0
ROT_STEP = 0.063  # radians turned per control step at rotation action 1.0
POS_SCALE = 0.05
ROT_SCALE = 0.5
YAW_RANGE = (-math.radians(60.0), math.radians(120.0))
OPEN, CLOSE = -1.0, 1.0


def covers(task: LiberoTask) -> bool:
    """Tasks the planner supports: single On/In pick-and-place goals of the object and spatial suites."""
    base = task.suite.split("_")[1] if task.suite.count("_") >= 1 else ""
    return base in ("object", "spatial") and task.goal.predicate in ("On", "In")


def _rz(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


# The grip site's orientation when pointing straight down with yaw 0: x -> world y, y -> world x, z -> -z.
# Its x axis is the fingers' closing axis.
_R_DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


def _yaw_for_axis(axis_xy: np.ndarray, prefer: float = 0.5) -> float:
    """Gripper yaw whose closing axis is parallel to ``axis_xy``, wrapped into the joint-7-friendly range."""
    base = math.atan2(-axis_xy[0], axis_xy[1])
    options = [base + k * math.pi for k in range(-2, 3)]
    ok = [y for y in options if YAW_RANGE[0] <= y <= YAW_RANGE[1]]
    return min(ok or options, key=lambda y: abs(y - prefer))


@dataclass
class Grasp:
    pos: np.ndarray  # grip-site position at the grasp (world)
    yaw: float
    score: float
    local: np.ndarray | None = None  # the same point in the object's body frame (to track a moving object)


class LiberoPlanner:
    """Scripted chunking policy for `covers` tasks; ``act(obs)`` returns (horizon, 7) actions."""

    bowl_yaw_pref = 0.5  # preferred gripper yaw for rim grasps (rad)
    bowl_yaw_weight = 0.05
    approach_timeout = 90

    def __init__(self, task: LiberoTask, env: LiberoEnv, horizon: int = 8) -> None:
        if not covers(task):
            raise ValueError(f"LiberoPlanner does not cover {task.suite}/{task.name} ({task.goal})")
        self.task, self.env, self.horizon = task, env, int(horizon)
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.phase_steps = 0
        self.attempt = 0
        self.grasp: Grasp | None = None
        self.obj_z0: float | None = None
        self.hold_offset: np.ndarray | None = None  # ee - object bottom, measured after closing
        self.last_ee: np.ndarray | None = None

    # ------------------------------------------------------------------ geometry
    def _obj_box(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi) body-frame box, body position, body rotation."""
        lo, hi = self.env.extents(name)
        p, R = self.env.body_pose(name)
        return lo, hi, p, R

    def _is_bowl(self, name: str) -> bool:
        lo, hi = self.env.extents(name)
        size = hi - lo
        return "bowl" in name or (sorted(size)[1] > 0.075 and min(size) > 0.03)

    def _obstacles(self) -> list[str]:
        return [n for n in self.env.object_names + self.env.fixture_names if n != self.task.goal.obj]

    def _clearance(self, xy: np.ndarray, exclude: str) -> float:
        best = 1.0
        for n in self._obstacles():
            if n == exclude or n in ("floor", "main_table", "kitchen_table", "table"):
                continue
            lo, hi = self.env.world_box(n)
            if hi[2] - lo[2] > 0.5:  # tables / floors
                continue
            d = np.maximum(np.maximum(lo[:2] - xy, xy - hi[:2]), 0.0)
            best = min(best, float(np.linalg.norm(d)))
        return best

    def _grasps(self) -> list[Grasp]:
        name = self.task.goal.obj
        lo, hi, p, R = self._obj_box(name)
        center = p + R @ ((lo + hi) / 2)
        wlo, whi = self.env.world_box(name)
        top = float(whi[2])
        out: list[Grasp] = []
        base = np.array([-0.66, 0.0])
        if self._is_bowl(name):
            up = int(np.argmax(np.abs(R[2])))
            axes = [k for k in range(3) if k != up]
            radius = float(min((hi - lo)[axes[0]], (hi - lo)[axes[1]]) / 2 - 0.006)
            for k in range(16):
                th = 2 * math.pi * k / 16
                local = (lo + hi) / 2
                local = local.copy()
                local[axes[0]] += radius * math.cos(th)
                local[axes[1]] += radius * math.sin(th)
                local[up] = hi[up] if R[2, up] > 0 else lo[up]
                pt = p + R @ local
                pt[2] -= 0.017
                radial = (pt - center)[:2]
                radial /= np.linalg.norm(radial) + 1e-9
                yaw = _yaw_for_axis(radial, prefer=self.bowl_yaw_pref)
                reach = float(np.linalg.norm(pt[:2] - base))
                clear = min(self._clearance(pt[:2], name), 0.08)
                score = 2.0 * clear - 0.5 * reach - self.bowl_yaw_weight * abs(yaw - self.bowl_yaw_pref)
                out.append(Grasp(pt, yaw, score))
        else:
            up = int(np.argmax(np.abs(R[2])))
            horiz = [k for k in range(3) if k != up]
            size = hi - lo
            horiz.sort(key=lambda k: size[k])
            height = float(whi[2] - wlo[2])
            z = max(top - min(0.035, height / 2), float(wlo[2]) + 0.012)
            for rank, k in enumerate(horiz):
                if size[k] > 0.078:
                    continue
                axis = R[:, k][:2]
                axis = axis / (np.linalg.norm(axis) + 1e-9)
                yaw = _yaw_for_axis(axis)
                pt = np.array([center[0], center[1], z])
                out.append(Grasp(pt, yaw, -float(rank) - 0.05 * abs(yaw - 0.5)))
                # a second, slightly higher grasp as a fallback
                out.append(Grasp(pt + np.array([0, 0, 0.01]), yaw, -float(rank) - 0.5))
        for g in out:
            g.local = R.T @ (g.pos - p)
        out.sort(key=lambda g: -g.score)
        return out

    def _track(self, g: Grasp) -> None:
        """Move the grasp point with the object (it may still be settling or get nudged)."""
        if g.local is not None:
            p, R = self.env.body_pose(self.task.goal.obj)
            g.pos = p + R @ g.local

    def _target_xy(self) -> np.ndarray:
        return self.env.target_position()[:2]

    def _carry_bottom(self) -> float:
        """Object-bottom height that clears every obstacle and the target's rim."""
        tops = [self.env.world_box(n)[1][2] for n in self._obstacles()]
        tops = [
            t
            for t, n in zip(tops, self._obstacles())
            if self.env.world_box(n)[1][2] - self.env.world_box(n)[0][2] < 0.5
        ]
        floor = float(self.env.world_box(self.task.goal.obj)[0][2]) if self.obj_z0 is None else self.floor_z
        return max([floor + 0.06] + [float(t) + 0.04 for t in tops])

    def _release_bottom(self) -> float:
        tb = self.env.target_body()
        lo, hi = self.env.world_box(tb)
        if self.task.goal.predicate == "In":
            return float(lo[2]) + 0.035
        return float(hi[2]) + 0.008

    # ------------------------------------------------------------------ control
    def _servo(
        self, state: dict, target: np.ndarray, yaw: float, grip: float, n: int | None = None
    ) -> np.ndarray:
        from scipy.spatial.transform import Rotation

        n = self.horizon if n is None else n
        ee = np.array(state["ee_pos"], dtype=float)
        R_cur = Rotation.from_quat(state["ee_quat"])
        R_tgt = Rotation.from_matrix(_rz(yaw) @ _R_DOWN)
        out = np.zeros((n, 7))
        for i in range(n):
            a_pos = np.clip((target - ee) / POS_SCALE, -1.0, 1.0)
            err = (R_tgt * R_cur.inv()).as_rotvec()
            a_rot = np.clip(err / ROT_SCALE, -1.0, 1.0)
            out[i, :3], out[i, 3:6], out[i, 6] = a_pos, a_rot, grip
            ee = ee + STEP_GAIN * a_pos
            R_cur = Rotation.from_rotvec(ROT_STEP * a_rot) * R_cur
        return out

    def _yaw_error(self, state: dict, yaw: float) -> float:
        from scipy.spatial.transform import Rotation

        R_cur = Rotation.from_quat(state["ee_quat"])
        R_tgt = Rotation.from_matrix(_rz(yaw) @ _R_DOWN)
        return float(np.linalg.norm((R_tgt * R_cur.inv()).as_rotvec()))

    def _set(self, phase: str) -> None:
        self.phase, self.phase_steps = phase, 0

    def _retry(self) -> None:
        self.attempt += 1
        self.grasp = None
        self._set("reopen")

    def act(self, obs: Observation) -> np.ndarray:
        s = obs.state
        ee, obj = np.asarray(s["ee_pos"]), np.asarray(s["obj_pos"])
        name = self.task.goal.obj
        moved = 1.0 if self.last_ee is None else float(np.linalg.norm(ee - self.last_ee))
        self.last_ee = ee.copy()
        if self.obj_z0 is None:
            self.obj_z0 = float(obj[2])
            self.floor_z = float(self.env.world_box(name)[0][2])
        chunk = self._decide(s, ee, obj, moved)
        self.phase_steps += len(chunk)
        return chunk

    def _decide(self, s: dict, ee: np.ndarray, obj: np.ndarray, moved: float) -> np.ndarray:
        name = self.task.goal.obj
        wlo, whi = self.env.world_box(name)
        if self.phase == "reopen":
            if self.phase_steps >= 8:
                self._set("approach")
            else:
                up = ee + np.array([0, 0, 0.06])
                return self._servo(s, up, self._cur_yaw(s), OPEN)
        if self.phase == "approach":
            if self.grasp is None:
                cands = self._grasps()
                if not cands:
                    return self._servo(s, ee, 0.5, OPEN)
                self.grasp = cands[self.attempt % len(cands)]
            g = self.grasp
            self._track(g)
            hover = g.pos + np.array([0, 0, 0.10])
            hover[2] = max(hover[2], min(ee[2], g.pos[2] + 0.16))
            if (
                self.phase_steps > 0
                and np.linalg.norm((ee - hover)[:2]) < 0.012
                and self._yaw_error(s, g.yaw) < 0.1
            ):
                self._set("descend")
            elif self.phase_steps > self.approach_timeout or (self.phase_steps > 24 and moved < 0.002):
                self._retry()
                return self._decide(s, ee, obj, moved)
            else:
                # travel high first when far away, then drop to the hover height
                far = np.linalg.norm((ee - hover)[:2]) > 0.05
                way = hover.copy()
                if far:
                    way[2] = max(hover[2], ee[2])
                return self._servo(s, way, g.yaw, OPEN)
        if self.phase == "descend":
            g = self.grasp
            assert g is not None
            self._track(g)
            err = float(np.linalg.norm(ee - g.pos))
            blocked = self.phase_steps >= 16 and moved < 0.003
            if err < 0.008 or (blocked and abs(ee[2] - g.pos[2]) < 0.025):
                self._set("close")
            elif blocked or self.phase_steps > 60:
                self._retry()
                return self._decide(s, ee, obj, moved)
            else:
                return self._servo(s, g.pos, g.yaw, OPEN)
        if self.phase == "close":
            # bowls are held by their 2 mm rim wall: the fingers must close (almost) fully before lifting
            if self.phase_steps >= (16 if self._is_bowl(name) else 8):
                self.hold_offset = ee - np.array([obj[0], obj[1], wlo[2]])
                self.lift_ee0 = float(ee[2])
                self._set("lift")
            else:
                return self._servo(s, ee if self.phase_steps else ee, self.grasp.yaw, CLOSE)
        if self.phase == "lift":
            assert self.hold_offset is not None
            carry = self._carry_bottom() + self.hold_offset[2]
            rose = ee[2] - self.lift_ee0
            if (
                rose > 0.04
                and (obj[2] - self.obj_z0) < 0.5 * rose - 0.005
                or (self.phase_steps > 8 and not np.any(s["finger_contact"]))
            ):
                self._retry()
                return self._decide(s, ee, obj, moved)
            if ee[2] > carry - 0.02:
                self._set("transport")
            elif self.phase_steps > 60:
                self._retry()
                return self._decide(s, ee, obj, moved)
            else:
                out = self._servo(s, np.array([ee[0], ee[1], carry + 0.01]), self.grasp.yaw, CLOSE)
                if self._is_bowl(name):  # a rim grip slips when jerked upwards
                    out[:, :3] = np.clip(out[:, :3], -0.5, 0.5)
                return out
        if self.phase in ("transport", "lower"):
            if (
                not np.any(s["finger_contact"])
                and float(wlo[2]) < self._carry_bottom() - 0.05
                and self.phase == "transport"
            ):
                self._retry()
                return self._decide(s, ee, obj, moved)
            tgt = self._target_xy()
            d_xy = tgt - obj[:2]
            carry = self._carry_bottom() + self.hold_offset[2]
            way = np.array(
                [ee[0] + d_xy[0], ee[1] + d_xy[1], max(carry, ee[2]) if self.phase == "transport" else ee[2]]
            )
            tol = 0.01 if self.task.goal.predicate == "On" else 0.015
            if self.phase == "transport":
                if np.linalg.norm(d_xy) < tol and self.phase_steps > 0:
                    self._set("lower")
                elif self.phase_steps > 120:
                    self._set("lower")
                else:
                    return self._servo(s, way, self.grasp.yaw, CLOSE)
            rel = self._release_bottom()
            bottom = float(wlo[2])
            blocked = self.phase_steps >= 16 and moved < 0.002
            if bottom - rel < 0.006 or blocked or self.phase_steps > 80:
                self._set("release")
            else:
                way[2] = ee[2] - (bottom - rel)
                if np.linalg.norm(d_xy) > 0.02:
                    way[2] = ee[2]
                return self._servo(s, way, self.grasp.yaw, CLOSE)
        if self.phase == "release":
            if self.phase_steps >= 8:
                self._set("retreat")
            else:
                return self._servo(s, ee, self.grasp.yaw, OPEN)
        if self.phase == "retreat":
            if self.phase_steps >= 16 and not self.env.success():
                # object missed the goal: try again from the top
                if np.linalg.norm(obj[:2] - self._target_xy()) > 0.05 or self.phase_steps > 40:
                    self._retry()
                    return self._decide(s, ee, obj, moved)
            up = np.array([ee[0], ee[1], max(ee[2], self._carry_bottom() + 0.12)])
            return self._servo(s, up, self.grasp.yaw if self.grasp else 0.5, OPEN)
        return self._servo(s, ee, self._cur_yaw(s), OPEN)

    def _cur_yaw(self, s: dict) -> float:
        return self.grasp.yaw if self.grasp is not None else 0.5


def _parse_states(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def evaluate(suite: str, states: list[int], tasks: list[int] | None = None, max_steps: int = 300) -> dict:
    """Planner success per task of ``suite`` on the given bundled init states."""
    result: dict = {"suite": suite, "states": states, "tasks": {}}
    ids = list(range(n_tasks(suite))) if tasks is None else tasks
    total = held = n = 0
    secs: list[float] = []
    for tid in ids:
        task = get_task(suite, tid)
        if not covers(task):
            result["tasks"][task.name] = {"covered": False}
            continue
        env = LiberoEnv(suite, tid)
        pl = LiberoPlanner(task, env)
        succ, hold, steps = [], [], []
        for i in states:
            rec = run_episode(env, i, pl, max_steps=max_steps)
            succ.append(bool(rec.success))
            hold.append(bool(rec.success_held))
            steps.append(rec.steps)
            secs.append(rec.seconds)
        env.close()
        result["tasks"][task.name] = {
            "task_id": tid,
            "success": succ,
            "success_held": hold,
            "steps": steps,
            "rate": float(np.mean(succ)),
        }
        print(
            f"[{suite} {tid}] {task.name}: {sum(succ)}/{len(succ)} steps={steps}", file=sys.stderr, flush=True
        )
        total += sum(succ)
        held += sum(hold)
        n += len(succ)
    result["success"] = f"{total}/{n}"
    result["success_held"] = f"{held}/{n}"
    result["median_seconds_per_episode"] = float(np.median(secs)) if secs else None
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="libero_object")
    ap.add_argument("--states", default="0-4", help="init-state indices, e.g. 0-4 or 0,3,7")
    ap.add_argument("--tasks", default="", help="task ids (default: all)")
    ap.add_argument("--max-steps", type=int, default=300)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tasks = _parse_states(args.tasks) if args.tasks else None
    res = evaluate(args.suite, _parse_states(args.states), tasks, args.max_steps)
    res["total_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
