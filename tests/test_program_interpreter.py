"""The generation-program interpreter (`coda.engine.interpret`: generator space, family invariants, nothing held
out ever produced, determinism), role binding and cross-family transfer (`coda.engine.transfer`, Appendix A)."""

import numpy as np
import pytest

from coda.engine import interpret, transfer
from coda.memory import programs as P
from coda.memory.factors import FACTORS
from coda.memory.programs import ProgramError
from coda.sim.families import REGISTRY
from coda.sim.families.base import is_heldout_instance
from coda.sim.families.naming import describe
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from tests._program_helpers import RICH, gen, mass_program, seed_scene


# -- interpreter ---------------------------------------------------------------------------------------------
def test_apply_samples_clamps_and_keeps_family_invariants(catalog):
    base = seed_scene(catalog, "pick_place")
    out = interpret.apply_generation(RICH, base, np.random.default_rng(0), catalog)
    t, c = out.role("target"), out.role("container")
    assert 0.5 <= out.objects[t].mass <= 0.8
    assert out.spatial.poses[t].yaw == 1.2
    assert out.objects[t].scale == pytest.approx(min(base.objects[t].scale * 1.3, 1.5), abs=1e-4)
    assert out.spatial.poses[t].x == pytest.approx(base.spatial.poses[t].x + 0.05, abs=1e-4)
    assert out.task.template_id < TRAIN_TEMPLATES and out.task.template_id != base.task.template_id
    names = {"target": describe(out.objects[t]), "container": "bin"}
    assert out.task.instruction == REGISTRY["pick_place"].instruction(out.task.template_id, names)
    assert (
        np.hypot(
            out.spatial.poses[t].x - out.spatial.poses[c].x, out.spatial.poses[t].y - out.spatial.poses[c].y
        )
        >= 0.15
    )
    # values outside the generator space are clamped to it
    space = REGISTRY["pick_place"].space("generator")
    far = gen(
        operations=[
            {"op": "set", "role": "target", "attribute": "mass", "value": 50},
            {"op": "set", "role": "target", "attribute": "position", "value": [5, -5]},
            {"op": "set", "role": "container", "attribute": "position", "value": [0.0, 0.01]},
        ],
        perturbs="mass",
        constraints=[],
    )
    out = interpret.apply_generation(far, base, np.random.default_rng(0), catalog)
    assert out.objects[t].mass == space["mass"][1]
    assert (out.spatial.poses[t].x, out.spatial.poses[t].y) == (space["target_x"][1], space["target_y"][0])
    assert (out.spatial.poses[c].x, out.spatial.poses[c].y) == (
        space["container_x"][0],
        space["container_y"][0],
    )
    assert out.task.goal[0] == out.spatial.poses[c].yaw  # pick_place.validate_spec holds (SceneSpec built)


def test_apply_is_deterministic_given_the_generator(catalog):
    base = seed_scene(catalog, "pick_place", 3)
    prog = gen(
        operations=[
            *RICH["operations"],
            {"op": "sample", "attribute": "distractors", "range": [2, 3]},
            {"op": "sample", "role": "target", "attribute": "instance"},
        ]
    )
    a = interpret.apply_generation(prog, base, np.random.default_rng(7), catalog)
    b = interpret.apply_generation(prog, base, np.random.default_rng(7), catalog)
    assert a.hash == b.hash and a != base


def test_push_goal_follows_the_target_and_goal_offset_moves_goal_and_region(catalog):
    base = seed_scene(catalog, "push", 1)
    t, g = base.role("target"), base.role("goal")
    offset = np.subtract(base.task.goal, [base.spatial.poses[t].x, base.spatial.poses[t].y])
    moved = interpret.apply_generation(
        {
            "family": "push",
            "operations": [{"op": "shift", "role": "target", "attribute": "position", "by": [0.03, 0.05]}],
        },
        base,
        np.random.default_rng(0),
        catalog,
    )
    new_offset = np.subtract(moved.task.goal, [moved.spatial.poses[t].x, moved.spatial.poses[t].y])
    assert np.allclose(new_offset, offset, atol=2e-4)
    prog = {
        "family": "push",
        "operations": [{"op": "set", "attribute": "goal_offset", "value": [-0.1, 0.12]}],
    }
    out = interpret.apply_generation(prog, base, np.random.default_rng(0), catalog)
    assert out.task.goal == (out.spatial.poses[g].x, out.spatial.poses[g].y)
    assert out.task.goal == pytest.approx(
        (base.spatial.poses[t].x - 0.1, base.spatial.poses[t].y + 0.12), abs=1e-4
    )
    far = interpret.apply_generation(
        {**prog, "operations": [{"op": "scale", "attribute": "goal_offset", "by": 10}]},
        base,
        np.random.default_rng(0),
        catalog,
    )
    dx, dy = np.subtract(far.task.goal, [far.spatial.poses[t].x, far.spatial.poses[t].y])
    assert abs(dx) <= 0.14 + 1e-9 and abs(dy) <= 0.14 + 1e-9


def test_drawer_yaw_and_instance_keep_the_goal_consistent(catalog):
    base = seed_scene(catalog, "drawer", 2)
    prog = {
        "family": "drawer",
        "operations": [
            {"op": "set", "role": "cabinet", "attribute": "yaw", "value": 2.0},
            {"op": "sample", "role": "cabinet", "attribute": "instance", "categories": ["drawer_triple"]},
        ],
    }
    out = interpret.apply_generation(prog, base, np.random.default_rng(0), catalog)
    cab = out.objects[out.role("cabinet")]
    assert out.spatial.poses[0].yaw == out.task.goal[2] == 0.45  # clamped to the generator's cabinet_yaw
    assert cab.category == "drawer_triple" and out.task.goal[0] == 2.0  # the top of three drawers
    assert "top drawer" in out.task.instruction


def test_distractors_are_dropped_or_added_from_the_training_pool(catalog):
    base = seed_scene(catalog, "stack", 4)
    pool = {a.asset_id for a in REGISTRY["stack"].pool(catalog, "generator")}
    for n in (0, 3, 1):
        prog = {"family": "stack", "operations": [{"op": "set", "attribute": "distractors", "value": n}]}
        out = interpret.apply_generation(prog, base, np.random.default_rng(n), catalog)
        extra = [i for i in range(len(out.objects)) if i not in out.task.bindings.values()]
        assert len(extra) == n
        assert out.objects[out.role("top")] == base.objects[base.role("top")]
        assert all(out.objects[i].asset_id in pool or out.objects[i] in base.objects for i in extra)


def test_interpreter_never_produces_heldout_instances_categories_or_templates(catalog):
    for family in ("pick_place", "stack", "push", "drawer"):
        heldout = set(RANGES[family]["heldout_categories"])
        role = {"pick_place": "target", "stack": "top", "push": "target", "drawer": "cabinet"}[family]
        ops = [
            {"op": "sample", "role": role, "attribute": "instance"},
            {"op": "sample", "attribute": "instruction"},
        ]
        if "distractors" in FACTORS[family]:
            ops.append({"op": "sample", "attribute": "distractors", "range": [0, 2]})
        prog = {"family": family, "operations": ops}
        base = seed_scene(catalog, family, 5)
        rng = np.random.default_rng(0)
        seen = set()
        for _ in range(150):
            out = interpret.apply_generation(prog, base, rng, catalog)
            assert out.task.template_id < TRAIN_TEMPLATES
            for obj in out.objects:
                if not obj.asset_id.startswith("fixture/"):
                    assert obj.category not in heldout and not is_heldout_instance(obj.asset_id), obj
            seen.add(out.objects[out.role(role)].category)
        assert len(seen) >= 2  # it does sample across training categories
    # the held-out category cannot even be asked for, and a held-out base is refused
    with pytest.raises(ProgramError, match=r"^operations\[0\].categories\[0\]"):
        P.validate_generation(
            {
                "family": "stack",
                "operations": [{"op": "sample", "attribute": "instance", "categories": ["cylinder"]}],
            }
        )
    base = seed_scene(catalog, "stack")
    suite = REGISTRY["stack"].sample(np.random.default_rng(0), catalog, "tasks")
    with pytest.raises(ProgramError, match=r"^base\.task\.template_id"):
        interpret.apply_generation(
            {"family": "stack", "operations": [{"op": "set", "attribute": "mass", "value": 0.1}]},
            suite,
            np.random.default_rng(0),
            catalog,
        )
    assert base.task.template_id < TRAIN_TEMPLATES


def test_cannot_apply_errors(catalog):
    stack = seed_scene(catalog, "stack")
    with pytest.raises(ProgramError, match="^family: "):
        interpret.apply_generation(mass_program(), stack, np.random.default_rng(0), catalog)
    pp = seed_scene(catalog, "pick_place")
    with pytest.raises(ProgramError, match=r"^bindings\.target"):
        interpret.apply_generation(
            mass_program(), pp, np.random.default_rng(0), catalog, bindings={"target": 99}
        )
    with pytest.raises(
        ProgramError, match=r"^operations\[0\]\.role"
    ):  # the bin plays no role with a mass factor
        interpret.apply_generation(
            mass_program(), pp, np.random.default_rng(0), catalog, bindings={"target": pp.role("container")}
        )
    impossible = mass_program(
        constraints=[{"relation": "max_distance", "roles": ["target", "container"], "value": 0.01}]
    )
    with pytest.raises(ProgramError, match=r"^constraints\[0\]"):
        interpret.apply_generation(impossible, pp, np.random.default_rng(0), catalog)
    drawer = seed_scene(catalog, "drawer")
    prog = {"family": "pick_place", "operations": [{"op": "set", "attribute": "distractors", "value": 1}]}
    assert transfer.bind_roles(prog, drawer, catalog) == []  # drawer scenes have no distractors factor


# -- binding and transfer (Appendix A) ------------------------------------------------------------------------
def test_transfer_pick_place_to_stack_and_push_binds_and_applies(catalog):
    prog = P.validate_generation(
        gen(
            operations=[
                {"op": "sample", "role": "target", "attribute": "mass", "range": [0.3, 0.4]},
                {
                    "op": "sample",
                    "role": "container",
                    "attribute": "position",
                    "range": [[0.5, 0.55], [0.2, 0.25]],
                },
                {"op": "set", "attribute": "distractors", "value": 2},
            ],
            constraints=[],
        )
    )
    for family, role in (("stack", "top"), ("push", "target")):
        lifted = transfer.transfer_program(prog, family)
        assert (
            lifted["family"] == family and lifted["source"] == "transfer" and lifted["parent"] == prog["id"]
        )
        assert lifted["perturbs"] == "mass"
        assert [(op["role"], op["attribute"]) for op in lifted["operations"]] == [
            (role, "mass"),
            (None, "distractors"),
        ]
        scene = seed_scene(catalog, family, 6)
        bindings = transfer.bind_roles(lifted, scene, catalog)
        assert bindings and bindings[0] == {role: scene.role(role)}
        out = interpret.apply_generation(lifted, scene, np.random.default_rng(0), catalog, bindings[0])
        assert 0.3 <= out.objects[out.role(role)].mass <= 0.4
        assert len(out.objects) == len(out.task.bindings) + 2
        assert transfer.bound_factors(lifted, scene, bindings[0]) == ["mass", "distractors"]
    # the bin's position has no counterpart in stack; instruction carries over to drawers
    only_bin = gen(operations=[prog["operations"][1]], constraints=[], perturbs="container_position")
    assert transfer.transfer_program(only_bin, "stack") is None
    assert transfer.transfer_program(RICH, "drawer")["operations"] == [
        {"op": "sample", "role": None, "attribute": "instruction"}
    ]
    # held-out categories of the new family are dropped (cylinder is held out for stack)
    inst = {
        "family": "pick_place",
        "operations": [{"op": "sample", "attribute": "instance", "categories": ["cube", "cylinder"]}],
    }
    assert transfer.transfer_program(inst, "stack")["operations"][0]["categories"] == ["cube"]


def test_bind_roles_returns_at_most_three_distinct_bindings(catalog):
    scene = REGISTRY["stack"].sample(np.random.default_rng(11), catalog, "generator")
    scene = interpret.apply_generation(
        {"family": "stack", "operations": [{"op": "set", "attribute": "distractors", "value": 3}]},
        scene,
        np.random.default_rng(0),
        catalog,
    )
    # constraint-only roles: any movable graspable objects qualify, so there are many assignments
    prog = {
        "family": "stack",
        "operations": [{"op": "sample", "attribute": "instruction"}],
        "constraints": [{"relation": "max_distance", "roles": ["top", "base"], "value": 2.0}],
    }
    bindings = transfer.bind_roles(prog, scene, catalog)
    assert len(bindings) == 3 and bindings[0] == {"top": scene.role("top"), "base": scene.role("base")}
    assert (
        all(len(set(b.values())) == len(b) for b in bindings)
        and len({tuple(sorted(b.items())) for b in bindings}) == 3
    )
    assert len(transfer.bind_roles(prog, scene, catalog, max_bindings=1)) == 1
    # a position operation on "top" may bind the top or the base block (both have a position factor), never a distractor
    pos = {
        "family": "stack",
        "operations": [{"op": "set", "role": "top", "attribute": "position", "value": [0.4, 0.25]}],
    }
    assert transfer.bind_roles(pos, scene, catalog) == [
        {"top": scene.role("top")},
        {"top": scene.role("base")},
    ]
    for b in transfer.bind_roles(pos, scene, catalog):
        out = interpret.apply_generation(pos, scene, np.random.default_rng(0), catalog, b)
        moved = [i for i, (p, q) in enumerate(zip(out.spatial.poses, scene.spatial.poses)) if p != q]
        assert moved == [b["top"]] and (out.spatial.poses[b["top"]].x, out.spatial.poses[b["top"]].y) == (
            0.4,
            0.25,
        )
