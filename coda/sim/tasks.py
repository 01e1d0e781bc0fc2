"""The task factor of each family, as plain declarations below `scene` and `world`.

A family's `TaskRules` hold its roles, task variants, instruction templates and goal size, the family's own
spec checks (run by `scene.validate` on every `SceneSpec`) and the setup a freshly spawned scene gets before
it settles (run by `World.load`). The family classes in `coda.sim.families` are built on these declarations
and add sampling, predicates and planners; `scene` and `world` read them from here, so neither depends on the
families. `SceneSpecError` is defined here for the checks to raise; `coda.sim.scene` re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pybullet as p


class SceneSpecError(ValueError):
    """A scene specification field is missing or invalid; the message starts with the field path."""


def _no_check(spec) -> None:
    """No family-specific spec checks."""


def _no_setup(world, spec) -> None:
    """Nothing to adjust between spawning and settling."""


@dataclass(frozen=True)
class TaskRules:
    """What a scene of one family must declare and satisfy."""

    name: str  # task-family registry key, e.g. "pick_place"
    roles: tuple[str, ...]  # symbolic roles every scene binds to distinct objects
    variants: tuple[str, ...]
    templates: tuple[str, ...]  # instruction templates; `TaskSpec.template_id` indexes them
    goal_dim: int = 0  # length of `TaskSpec.goal`
    check: Callable[[Any], None] = _no_check  # family-specific spec checks; raise SceneSpecError
    setup: Callable[[Any, Any], None] = _no_setup  # (world, spec): adjust the spawned scene before it settles


# -- pick_place ------------------------------------------------------------------------------------------
def _check_pick_place(spec) -> None:
    c = spec.objects[spec.task.bindings["container"]]
    want = "fixture/bin" if spec.task.variant == "bin" else "fixture/region"
    if c.asset_id != want:
        raise SceneSpecError(
            f"objects[{spec.task.bindings['container']}].asset_id: {spec.task.variant!r} "
            f"needs container {want!r}, got {c.asset_id!r}"
        )
    if abs(spec.task.goal[0] - spec.spatial.poses[spec.task.bindings["container"]].yaw) > 1e-6:
        raise SceneSpecError("task.goal[0]: must equal the container's yaw")


PICK_PLACE = TaskRules(
    name="pick_place",
    roles=("target", "container"),
    variants=("bin", "region"),
    goal_dim=1,  # container yaw (so predicates can test containment without the spec)
    templates=(
        "put the {target} in the {container}",
        "place the {target} into the {container}",
        "pick up the {target} and drop it in the {container}",
        "move the {target} to the {container}",
        "could you stow the {target} inside the {container}",
        "the {target} belongs in the {container}; take it there",
    ),
    check=_check_pick_place,
)


# -- stack -----------------------------------------------------------------------------------------------
def _check_stack(spec) -> None:
    for role in STACK.roles:
        if spec.objects[spec.task.bindings[role]].asset_id.startswith("fixture/"):
            raise SceneSpecError(f"task.bindings.{role}: must bind a movable object, not a fixture")


STACK = TaskRules(
    name="stack",
    roles=("top", "base"),
    variants=("on", "on_center"),
    goal_dim=0,
    templates=(
        "stack the {top} on the {base}",
        "put the {top} on top of the {base}",
        "place the {top} onto the {base}",
        "pick up the {top} and set it on the {base}",
        "build a tower with the {top} above the {base}",
        "the {base} should carry the {top}; stack them",
    ),
    check=_check_stack,
)


# -- drawer ----------------------------------------------------------------------------------------------
def _check_drawer(spec) -> None:
    part, init, yaw = spec.task.goal
    if part != int(part) or part < 0:
        raise SceneSpecError(f"task.goal[0]: expected a drawer index >= 0, got {part}")
    if not 0.0 <= init <= 1.0:
        raise SceneSpecError(f"task.goal[1]: expected an initial opening fraction in [0, 1], got {init}")
    if abs(yaw - spec.spatial.poses[spec.task.bindings["cabinet"]].yaw) > 1e-6:
        raise SceneSpecError("task.goal[2]: must equal the cabinet's yaw")
    if not spec.objects[spec.task.bindings["cabinet"]].asset_id.startswith("articulated/"):
        raise SceneSpecError("task.bindings.cabinet: must bind an articulated asset")


def _setup_drawer(world, spec) -> None:
    """Open the task's drawer to its initial fraction (`task.goal[1]`)."""
    body = world.bodies[spec.task.bindings["cabinet"]]
    part = int(spec.task.goal[0])
    if part >= len(body.movable_joints):
        raise SceneSpecError(
            f"task.goal[0]: cabinet has {len(body.movable_joints)} drawers, got index {part}"
        )
    lo, hi = body.joint_limits[part]
    p.resetJointState(
        body.uid,
        body.movable_joints[part],
        lo + spec.task.goal[1] * (hi - lo),
        physicsClientId=world.client,
    )


DRAWER = TaskRules(
    name="drawer",
    roles=("cabinet",),
    variants=("open", "close"),
    goal_dim=3,  # drawer index (bottom -> top), initial opening fraction, cabinet yaw
    templates=(
        "open the {part}drawer",
        "pull the {part}drawer open",
        "slide the {part}drawer out",
        "get the {part}drawer open",
        "the {part}drawer is shut; open it up",
        "draw out the {part}drawer of the cabinet",
    ),
    check=_check_drawer,
    setup=_setup_drawer,
)
# the "close" variant's instructions, template for template (`TaskSpec.template_id` indexes both)
DRAWER_CLOSE_TEMPLATES = (
    "close the {part}drawer",
    "push the {part}drawer shut",
    "slide the {part}drawer in",
    "get the {part}drawer closed",
    "the {part}drawer is open; shut it",
    "push in the {part}drawer of the cabinet",
)


# -- push ------------------------------------------------------------------------------------------------
def _check_push(spec) -> None:
    g = spec.task.bindings["goal"]
    if spec.objects[g].asset_id != "fixture/region":
        raise SceneSpecError(f"objects[{g}].asset_id: the push goal must be 'fixture/region'")
    pose = spec.spatial.poses[g]
    if abs(pose.x - spec.task.goal[0]) > 1e-6 or abs(pose.y - spec.task.goal[1]) > 1e-6:
        raise SceneSpecError("task.goal: must equal the goal region's x, y")


PUSH = TaskRules(
    name="push",
    roles=("target", "goal"),
    variants=("away", "sideways"),
    goal_dim=2,  # goal x, y
    templates=(
        "push the {target} to the {goal}",
        "slide the {target} into the {goal}",
        "nudge the {target} over to the {goal}",
        "shove the {target} onto the {goal}",
        "without lifting it, get the {target} to the {goal}",
        "the {target} needs to end up on the {goal}; push it there",
    ),
    check=_check_push,
)

RULES: dict[str, TaskRules] = {r.name: r for r in (PICK_PLACE, STACK, DRAWER, PUSH)}
