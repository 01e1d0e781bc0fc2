"""Targeting as the paper states it (issue #27): programs are regions of factor values compiled from all of a
mode's diagnoses, the task variant is programmable (held-out material stays ungeneratable), and targeted pairs
start from seed scenes and the generated scenes the policy has solved."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from coda.coevolve.mode_book import ModeBook
from coda.engine import compile as C
from coda.engine import generate as gen
from coda.engine import interpret, transfer
from coda.memory import programs as P
from coda.memory.programs import ProgramError
from coda.memory.store import Memory
from coda.sim.families import REGISTRY
from coda.sim.families.base import is_heldout_instance
from coda.sim.families.drawer import INIT_OPEN
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from coda.sim.scene import SceneSpec


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """The asset catalog: the repository's built data/ when present (0.5 s), else built here (~8 s)."""
    from coda.sim.assets import build_assets, load_catalog

    repo_data = Path(__file__).resolve().parents[1] / "data"
    if (repo_data / "assets" / "catalog.json").exists():
        return load_catalog(repo_data)
    return build_assets(tmp_path_factory.mktemp("assets"))


def sample(catalog, family, split, seed):
    return REGISTRY[family].sample(np.random.default_rng(seed), catalog, split)


def diagnosis(scene, phase="lift", factor="mass"):
    return {
        "family": scene.family,
        "variant": scene.task.variant,
        "phase": phase,
        "factor": factor,
        "cause": "the object slips out when lifted",
        "confidence": 0.8,
        "evidence_steps": [3],
    }


# -- programs as regions ------------------------------------------------------------------------------------------
def test_a_mode_program_is_the_padded_hull_of_all_its_failing_values(catalog):
    fails = [sample(catalog, "pick_place", "generator", 10 + k) for k in range(4)]
    first = C.make_compiler("template").compile(diagnosis(fails[0]), fails[0]).generation
    (lo, hi), pad = RANGES["pick_place"]["generator"]["mass"], C.WINDOW
    masses = [s.objects[s.role("target")].mass for s in fails]
    window = first["operations"][-1]["range"]  # compiled from the first diagnosis: a window around it
    assert window[0] <= masses[0] <= window[1] and window[1] - window[0] <= 2 * pad * (hi - lo) + 1e-3
    region = C.region(first, fails)  # recompiled as the mode gains diagnoses
    op = region["operations"][-1]
    assert op["range"] == [
        round(max(min(masses) - pad * (hi - lo), lo), 4),
        round(min(max(masses) + pad * (hi - lo), hi), 4),
    ]
    assert region["perturbs"] == "mass" and region["id"] != first["id"]
    assert C.region(region, fails) == region  # deterministic, a function of the failing scenes
    variants = sorted({s.task.variant for s in fails})
    task = region["operations"][0]
    assert task["attribute"] == "variant"
    assert (task.get("values") or [task.get("value")]) == variants
    assert all(gen.exhibits(region, s) for s in fails)
    base = sample(catalog, "pick_place", "seed", 3)
    for k in range(5):
        out = interpret.apply_generation(region, base, np.random.default_rng(k), catalog)
        assert op["range"][0] <= out.objects[out.role("target")].mass <= op["range"][1]
        assert out.task.variant in variants and gen.exhibits(region, out)
    llm = {**first, "source": "openai"}
    assert C.region(llm, fails) == P.validate_generation(llm)  # an LLM's program is not recompiled


@pytest.mark.parametrize("family", sorted(REGISTRY))
def test_the_task_variant_is_programmable_as_the_sampler_builds_it(family, catalog):
    base = sample(catalog, family, "seed", 1)
    for variant in P.generator_variants(family):
        prog = {"family": family, "operations": [{"op": "set", "attribute": "variant", "value": variant}]}
        out = interpret.apply_generation(prog, base, np.random.default_rng(0), catalog)
        assert out.task.variant == variant and out.task.template_id == base.task.template_id
        assert P.validate_generation(prog)["perturbs"] == "variant"
        if variant == base.task.variant:
            assert out == base
            continue
        if family == "pick_place":
            container = out.objects[out.role("container")]
            assert container.asset_id == f"fixture/{variant}" and container.category == variant
            assert ("bin" in out.task.instruction) == (variant == "bin")
        if family == "drawer":
            assert INIT_OPEN[0] <= out.task.goal[1] <= INIT_OPEN[1]
            assert out.task.instruction != base.task.instruction
        if family == "push":
            t, g = out.spatial.poses[out.role("target")], out.spatial.poses[out.role("goal")]
            assert (g.x, g.y) == tuple(out.task.goal[:2]) and (g.x, g.y) != (t.x, t.y)
    other = next(
        v for f in REGISTRY for v in P.generator_variants(f) if v not in P.generator_variants(family)
    )
    with pytest.raises(ProgramError, match=r"^operations\[0\]\.value"):
        P.validate_generation(
            {"family": family, "operations": [{"op": "set", "attribute": "variant", "value": other}]}
        )
    with pytest.raises(ProgramError, match=r"^operations\[0\]\.role"):
        P.validate_generation(
            {"family": family, "operations": [{"op": "sample", "role": "target", "attribute": "variant"}]}
        )


def test_programs_cannot_produce_heldout_instances_categories_or_templates_from_any_base(catalog):
    """Bases now include generated scenes (any generator variant): whatever a program does to them, held-out
    instances, categories and instruction templates never appear."""
    for family in sorted(REGISTRY):
        heldout = set(RANGES[family]["heldout_categories"])
        role = {"pick_place": "target", "stack": "top", "push": "target", "drawer": "cabinet"}[family]
        ops = [
            {"op": "sample", "attribute": "variant"},
            {"op": "sample", "role": role, "attribute": "instance"},
            {"op": "sample", "attribute": "instruction"},
        ]
        bases = [sample(catalog, family, split, k) for k in range(3) for split in ("seed", "generator")]
        rng = np.random.default_rng(0)
        variants = set()
        for k in range(120):
            out = interpret.apply_generation(
                {"family": family, "operations": ops}, bases[k % 6], rng, catalog
            )
            variants.add(out.task.variant)
            assert out.task.template_id < TRAIN_TEMPLATES
            for obj in out.objects:
                if not obj.asset_id.startswith("fixture/"):
                    assert obj.category not in heldout and not is_heldout_instance(obj.asset_id), obj
        assert variants == set(P.generator_variants(family))  # the held-out task variant is reachable
    with pytest.raises(ProgramError, match=r"^operations\[0\]\.value"):
        P.validate_generation(
            {
                "family": "stack",
                "operations": [{"op": "set", "attribute": "instruction", "value": TRAIN_TEMPLATES}],
            }
        )


def test_a_transferred_program_drops_the_task_variant(catalog):
    fail = sample(catalog, "pick_place", "generator", 2)
    prog = C.make_compiler("template").compile(diagnosis(fail, "reach", "target_position"), fail).generation
    assert prog["operations"][0]["attribute"] == "variant"
    lifted = transfer.transfer_program(prog, "stack")
    assert [op["attribute"] for op in lifted["operations"]] == ["position"]


# -- the loop's side: bases, stream progress, recompilation --------------------------------------------------------
def _book(seeds: list[SceneSpec], generator_space: bool = True, domain=None) -> ModeBook:
    memory = Memory(encoder=lambda texts: np.ones((len(texts), 4)))  # every cause alike: one mode per key
    return ModeBook(
        settings=None,
        method=SimpleNamespace(store_generation=True),
        domain=domain or SimpleNamespace(generator_space=generator_space),
        state=SimpleNamespace(memory=memory, base_stats={}, tokens={"prompt": 0, "completion": 0}),
        control=None,
        bases={"push": [s.to_json() for s in seeds]},
        base_hashes={"push": [s.hash for s in seeds]},
    )


def test_bases_are_seeds_and_solved_generated_scenes(catalog):
    seeds = [sample(catalog, "push", "seed", k) for k in range(2)]
    novel = [sample(catalog, "push", "generator", 20 + k) for k in range(4)]
    book = _book(seeds)
    stats = book.state.base_stats
    for k, (s, split) in enumerate(zip(novel, ["novel", "novel", "targeted", "control"])):
        book.memory.add_scene(s.hash, "push", 1, split, s.to_json())
        stats[s.hash] = [int(k != 1), 1]  # novel[1] failed; the control novel[3] succeeded
    scenes, hashes = book.bases("push")
    # seeds first; then solved non-control scenes, in the memory's canonical order (round, split, hash)
    solved = sorted([(1, "novel", novel[0].hash), (1, "targeted", novel[2].hash)])
    assert hashes == [s.hash for s in seeds] + [h for _, _, h in solved]
    assert scenes[:2] == [s.to_json() for s in seeds]
    assert _book(seeds, generator_space=False).bases("push")[1] == [s.hash for s in seeds]


def test_stream_progress_uses_pooled_counts_with_a_noise_floor(catalog):
    book = _book([sample(catalog, "push", "seed", 0)])
    for r, successes in ((1, [0] * 10), (2, [1] * 5 + [0] * 5)):
        for k, ok in enumerate(successes):
            book.memory.add_rollout(f"h{r}{k}", "push", r, "novel", bool(ok), 1, 10, 0)
    book.memory.add_rollout("x", "push", 1, "replay", True, 1, 10, 0)
    assert book.stream_progress("push") == {"novel": 0.5, "replay": 0.0}


def test_a_mode_program_is_recompiled_as_the_mode_gains_diagnoses(catalog):
    def region(program, scenes):
        return C.region(program, [SceneSpec.from_json(s) for s in scenes])

    def compile_(d, scene):
        return C.make_compiler("template").compile(d, SceneSpec.from_json(scene))

    domain = SimpleNamespace(generator_space=True, region=region, compile=compile_)
    book = _book([sample(catalog, "push", "seed", 0)], domain=domain)
    fails = [sample(catalog, "push", "generator", 40 + k) for k in range(3)]
    programs = []
    for r, s in enumerate(fails, start=1):
        book.memory.add_scene(s.hash, "push", r, "novel", s.to_json())
        d = diagnosis(s, "push", "mass")
        did = book.memory.add_diagnosis(
            f"r{r}", s.hash, "push", r, d["variant"], "push", "mass", d["cause"], 0.8
        )
        mode_id = book.memory.assign_mode(did)
        book._compile_mode(mode_id, book._scene_index(), (d, s.to_json()))
        programs.append(book.memory.program(book.memory.mode(mode_id).generation_program_id))
    assert (
        programs[0] == C.make_compiler("template").compile(diagnosis(fails[0], "push"), fails[0]).generation
    )
    assert programs[-1] == C.region(programs[0], fails)
    widths = [p["operations"][-1]["range"][1] - p["operations"][-1]["range"][0] for p in programs]
    assert widths[0] <= widths[1] <= widths[2] and all(gen.exhibits(programs[-1], s) for s in fails)
