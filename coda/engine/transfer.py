"""Role binding and transfer of generation programs across families (Appendix A).

`transfer_program` lifts a program to another family: roles renamed by their object requirements
(``ROLE_REQUIRES``), operations kept when their (role, attribute) is a factor of the new family (a task
``variant`` operation never is: variants are named per family), held-out
categories of the new family dropped. `bind_roles` finds up to three valid assignments of scene objects to a
program's roles; `bound_factors` names the factors a program changes under one of them.

Example:
    >>> bind_roles(transfer_program(prog, "stack"), stack_scene, catalog)
    [{'top': 0}]
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.engine.interpret import Draft, first_violated, role_used
from coda.memory.factors import factor_name
from coda.memory.programs import ROLE_REQUIRES, ProgramError, validate_generation
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES
from coda.sim.scene import ObjectSpec, SceneSpec

__all__ = ["bind_roles", "bound_factors", "is_graspable", "is_movable", "satisfies", "transfer_program"]

GRASP_WIDTH = 0.07  # graspable: narrower horizontal side at most this wide (Panda opening 0.08 m)
GRASP_MIN_HEIGHT = 0.01  # graspable: at least this tall (half height, m)


def is_movable(obj: ObjectSpec) -> bool:
    return not obj.asset_id.startswith(("fixture/", "articulated/"))


def is_graspable(obj: ObjectSpec, catalog=None) -> bool:
    """A movable object whose narrower side fits the gripper (size test with the catalog; movable without)."""
    if not is_movable(obj):
        return False
    if catalog is None:
        return True
    try:
        half = np.asarray(catalog.by_id(obj.asset_id).half_extents) * obj.scale
    except (KeyError, AttributeError):
        return False
    return bool(2 * min(half[0], half[1]) <= GRASP_WIDTH and half[2] >= GRASP_MIN_HEIGHT)


def satisfies(obj: ObjectSpec, requires: Mapping[str, Any], catalog=None) -> bool:
    """Whether an object meets a role's requirements (movable, graspable, articulated, categories)."""
    if "movable" in requires and is_movable(obj) != requires["movable"]:
        return False
    if requires.get("graspable") and not is_graspable(obj, catalog):
        return False
    if "articulated" in requires and obj.asset_id.startswith("articulated/") != requires["articulated"]:
        return False
    return "categories" not in requires or obj.category in requires["categories"]


def bind_roles(
    program: Mapping[str, Any], scene: SceneSpec, catalog=None, max_bindings: int = 3
) -> list[dict[str, int]]:
    """Up to `max_bindings` assignments of distinct scene objects to the program's roles (Appendix A).

    An object can take a role when it meets the role's requirements and, for every attribute the
    operations change on that role, plays a role of the scene's family that has that factor. Scene-level
    attributes (distractors, instruction) must be factors of the scene's family. Deterministic: the scene's
    own binding of same-named roles first, then by ascending object index.
    """
    prog = validate_generation(program)
    for op in prog["operations"]:
        if op["role"] is None and factor_name(scene.family, None, op["attribute"]) is None:
            return []
    roles = [r for r in prog["roles"] if role_used(prog, r)]
    inverse = {i: r for r, i in scene.task.bindings.items()}
    candidates = []
    for role in roles:
        attrs = {op["attribute"] for op in prog["operations"] if op["role"] == role}
        ok = [
            i
            for i, obj in enumerate(scene.objects)
            if satisfies(obj, prog["roles"][role]["requires"], catalog)
            and all(i in inverse and factor_name(scene.family, inverse[i], a) for a in attrs)
        ]
        default = scene.task.bindings.get(role)
        candidates.append(sorted(ok, key=lambda i: (i != default, i)))
    # without spatial operations the constraints are preconditions the scene itself must meet
    spatial = any(op["attribute"] in ("position", "goal_offset") for op in prog["operations"])
    draft = Draft.of(scene)
    out = []
    for combo in itertools.product(*candidates):
        if len(out) >= max_bindings:
            break
        binding = dict(zip(roles, combo))
        if len(set(combo)) == len(combo) and (
            spatial or first_violated(prog["constraints"], draft, binding) is None
        ):
            out.append(binding)
    return out


def bound_factors(program: Mapping[str, Any], scene: SceneSpec, binding: Mapping[str, int]) -> list[str]:
    """The factors of the scene's family that the program changes under `binding` (its ground truth there)."""
    prog = validate_generation(program)
    inverse = {i: r for r, i in scene.task.bindings.items()}
    out = []
    for op in prog["operations"]:
        role = None if op["role"] is None else inverse.get(binding.get(op["role"], -1))
        factor = factor_name(scene.family, role, op["attribute"])
        if factor is not None and factor not in out:
            out.append(factor)
    return out


def _match_role(requires: Mapping[str, Any], family: str, taken: set[str]) -> str | None:
    """The target family's role whose requirements agree best with `requires` (no contradiction)."""
    best, best_score = None, -1
    for role in REGISTRY[family].roles:
        theirs = ROLE_REQUIRES[family][role]
        shared = [k for k in theirs if k in requires and k != "categories"]
        if role in taken or any(theirs[k] != requires[k] for k in shared):
            continue
        if len(shared) > best_score:
            best, best_score = role, len(shared)
    return best


def transfer_program(program: Mapping[str, Any], family: str) -> dict[str, Any] | None:
    """Lift a generation program to another family: roles renamed by requirements, operations kept when
    their (role, attribute) is a factor there, held-out categories of the new family dropped.

    Returns the validated program (source "transfer", ``parent`` = the original's id), or None when no
    operation carries over. Whether the lifted difficulty is useful is decided by the loop's controls.
    """
    prog = validate_generation(program)
    if family not in REGISTRY:
        raise ProgramError("family", f"unknown family {family!r}; expected one of {sorted(REGISTRY)}")
    if family == prog["family"]:
        return prog
    heldout = set(RANGES[family]["heldout_categories"])
    rename: dict[str, str] = {}
    for role, spec in prog["roles"].items():
        new = _match_role(spec["requires"], family, set(rename.values()))
        if new is not None:
            rename[role] = new
    operations, old_factors = [], []
    for op in prog["operations"]:
        role = None if op["role"] is None else rename.get(op["role"])
        if (op["role"] is not None and role is None) or factor_name(family, role, op["attribute"]) is None:
            continue
        new_op = {**copy.deepcopy(op), "role": role}
        if "categories" in new_op:
            new_op["categories"] = [c for c in new_op["categories"] if c not in heldout]
            if not new_op["categories"]:
                del new_op["categories"]
        operations.append(new_op)
        old_factors.append(factor_name(prog["family"], op["role"], op["attribute"]))
    if not operations:
        return None
    roles = {}
    for old, new in rename.items():
        requires = dict(prog["roles"][old]["requires"])
        if "categories" in requires:
            requires["categories"] = [c for c in requires["categories"] if c not in heldout]
            if not requires["categories"]:
                del requires["categories"]
        roles[new] = {"requires": requires}
    constraints = [
        {**c, "roles": [rename[r] for r in c["roles"]]}
        for c in prog["constraints"]
        if all(r in rename for r in c["roles"])
    ]
    kept = prog["perturbs"] if prog["perturbs"] in old_factors else old_factors[0]
    op = operations[old_factors.index(kept)]
    lifted = {
        "kind": "generation",
        "family": family,
        "mode": prog["mode"],
        "source": "transfer",
        "parent": prog["id"],
        "perturbs": factor_name(family, op["role"], op["attribute"]),
        "roles": {
            r: roles[r]
            for r in roles
            if any(o["role"] == r for o in operations) or any(r in c["roles"] for c in constraints)
        },
        "operations": operations,
        "constraints": constraints,
    }
    return validate_generation(lifted)
