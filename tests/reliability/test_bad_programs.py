"""Bad programs (the normal output of a weak LLM): the validator and the interpreter raise nothing but
`ProgramError` on random documents and on mutations of valid programs; no program makes the validity checks
accept a scene that fails one of them; and a round whose program writer returns only garbage continues,
counts the invalid programs and rejects the modes."""

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coda.engine.compile import TemplateCompiler
from coda.engine.interpret import apply_generation
from coda.memory import programs as P
from coda.memory.factors import PHASE_FACTORS
from coda.memory.programs import ProgramError
from coda.memory.store import load_snapshot
from coda.sim.families import REGISTRY
from coda.sim.validity import (
    check_interpenetration,
    check_reach,
    check_scale,
    check_stability,
    validate_scene,
)

# -- valid programs to mutate: the template compiler's, for failures of every family ----------------------------


def _without_id(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "id"}


@pytest.fixture(scope="module")
def corpus(catalog):
    """Generation and training programs compiled from diagnoses of every family, and a seed scene per family
    to apply them to."""
    compiler = TemplateCompiler()
    generation, training, bases = [], [], {}
    for family in sorted(REGISTRY):
        bases[family] = REGISTRY[family].sample(np.random.default_rng(3), catalog, "seed")
        for k in range(2):
            fail = REGISTRY[family].sample(np.random.default_rng(100 + k), catalog, "generator")
            for phase, factors in PHASE_FACTORS[family].items():
                diagnosis = {
                    "family": family,
                    "variant": fail.task.variant,
                    "phase": phase,
                    "factor": factors[k % len(factors)],
                    "cause": f"fails at {phase}",
                }
                res = compiler.compile(diagnosis, fail)
                # without their ids (a content hash that any edit invalidates), as an LLM would write them
                generation += [_without_id(res.generation)] if res.generation else []
                training += [_without_id(res.training)] if res.training else []
    assert len(generation) >= 20 and len(training) >= 20
    return generation, training, bases


words = st.sampled_from(
    ["generation", "training", "target", "container", "top", "base", "goal", "cabinet", "mass", "scale",
     "position", "yaw", "instance", "sample", "set", "shift", "min_distance", "generator", *REGISTRY]
)  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | words
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(words | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def _paths(node, path=()):
    """Every node's path in a JSON document (the root is ())."""
    yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        yield from _paths(child, (*path, key))


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def mutate(data, doc, numbers_only: bool = False):
    """Replace, delete or add one node, chosen uniformly among all nodes of a copy of `doc` (or rescale one
    of its numbers: that keeps a program valid while pushing its values to extremes)."""
    holder = {"root": copy.deepcopy(doc)}
    paths = list(_paths(doc))
    if numbers_only:
        paths = [q for q in paths if q and q[0] != "version" and _is_number(_get(doc, q))] or paths
    path = ("root", *data.draw(st.sampled_from(paths)))
    node = holder
    for key in path[:-1]:
        node = node[key]
    key, target = path[-1], node[path[-1]]
    action = (
        "rescale" if numbers_only else data.draw(st.sampled_from(["replace", "delete", "add", "rescale"]))
    )
    if _is_number(target) and action == "rescale":
        node[key] = target * data.draw(st.sampled_from([-1.0, 0.0, 1e-3, 0.5, 2.0, 10.0, 1e6]))
    elif action == "delete" and isinstance(target, dict | list) and target:
        keys = sorted(target) if isinstance(target, dict) else list(range(len(target)))
        del target[data.draw(st.sampled_from(keys))]
    elif action == "add" and isinstance(target, dict):
        target[data.draw(words)] = data.draw(json_values)
    elif action == "add" and isinstance(target, list):
        target.append(data.draw(json_values))
    else:
        node[key] = data.draw(json_values)
    return holder["root"]


def _validated(doc):
    """The validated generation program, or None; anything but ProgramError propagates (and fails)."""
    for validate in (P.validate_training, P.validate_program):
        try:
            validate(doc)
        except ProgramError:
            pass
    try:
        return P.validate_generation(doc)
    except ProgramError:
        return None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_and_mutated_programs_raise_only_program_errors(corpus, catalog, data):
    generation, training, bases = corpus
    source = data.draw(st.sampled_from(["random", "generation", "training"]))
    if source == "random":
        doc = data.draw(json_values)
    else:
        pool = generation if source == "generation" else training
        doc = pool[data.draw(st.integers(0, len(pool) - 1))]
        for _ in range(data.draw(st.integers(1, 3))):
            doc = mutate(data, doc)
    program = _validated(doc)
    event(f"{source}: {'valid' if program else 'invalid'}")
    if program is None:
        return
    for family, base in bases.items():  # its own family's scene, and every other one (must refuse cleanly)
        try:
            out = apply_generation(
                program, base, np.random.default_rng(data.draw(st.integers(0, 99))), catalog
            )
        except ProgramError:
            continue
        assert out.family == family == program["family"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_scene_that_fails_a_validity_check_is_accepted(corpus, catalog, world, data):
    generation, _, bases = corpus
    doc = generation[data.draw(st.integers(0, len(generation) - 1))]
    for _ in range(data.draw(st.integers(0, 3))):  # mostly programs that stay valid, with extreme values
        doc = mutate(data, doc, numbers_only=data.draw(st.integers(0, 3)) > 0)
    program = _validated(doc)
    if program is None:
        event("invalid")
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    try:
        spec = apply_generation(program, bases[program["family"]], rng, catalog)
    except ProgramError:
        event("does not apply")
        return
    report = validate_scene(world, spec, rng)
    event(report.status)
    if report.scene is None:
        assert report.status == "rejected"
        assert any(t["op"] == "check" and not t["ok"] for t in report.trace)
        return
    # an accepted scene, checked again from scratch: every check passes
    scene = report.scene
    world.load(scene, settle_s=0.0)
    for check, args in (
        (check_scale, (scene, world)),
        (check_reach, (scene, world)),
        (check_interpenetration, (world,)),
    ):
        ok, detail, _ = check(*args)
        assert ok, (check.__name__, detail, scene.to_json())
    state = world.state()
    spawn_pos, spawn_quat = state["obj_pos"].copy(), state["obj_quat"].copy()
    world.settle(0.5)
    ok, detail, _ = check_stability(world, spawn_pos, spawn_quat)
    assert ok, (detail, scene.to_json())


# -- a round whose program writer returns only garbage ---------------------------------------------------------
def test_a_round_with_garbage_programs_continues_counts_and_rejects(faulty_run):
    assert faulty_run.result.returncode == 0, faulty_run.result.stderr[-3000:]
    assert faulty_run.llm_requests > 0  # the program writer was asked
    state = json.loads((faulty_run.out / "rounds" / "round-0001" / "state.json").read_text())
    assert (
        state["tokens"]["invalid"] >= faulty_run.llm_requests
    )  # every reply had at least one invalid program
    assert state["tokens"]["prompt"] > 0  # tokens are still counted
    memory = load_snapshot(faulty_run.out / "memory" / "round-0001")
    assert memory.programs() == {}  # nothing invalid was stored
    modes = memory.modes()
    assert modes and all(m.status == "rejected" for m in modes)
    for m in modes:
        validation = m.validation
        assert validation["reason"] == "no valid generation program" and validation["errors"]
        assert all(e.startswith("openai: ") for e in validation["errors"])
    (metrics,) = json.loads((faulty_run.out / "rounds.json").read_text())
    assert metrics["rejected_modes"] == len(modes) and metrics["generation_programs"] == 0
