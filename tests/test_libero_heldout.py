"""What LIBERO-Pro holds out is never generated or trained on: the demonstrated, generated and evaluated
initial states never overlap; generation never draws a held-out instruction; a retarget never makes the `_task`
suite's goal the goal; and the domain rejects any episode that would pose a held-out combination before it is
rolled out or demonstrated. The last tests read the real suites (with the [libero] extra)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from coda.config import load_params
from coda.domains.libero import interpret as lp
from coda.domains.libero.diagnose import LiberoDiagnoser, LiberoReference, nearest_others
from coda.engine.generate import EnvRequest
from coda.sim.libero import heldout

OBJECT = "pick up the alphabet soup and place it in the basket"


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_demonstrated_generated_and_evaluated_states_never_overlap(profile):
    c = load_params("params.yaml", profile=profile).libero
    demo, rounds, evals = (
        set(f(c)) for f in (heldout.demo_states, heldout.round_states, heldout.eval_states)
    )
    assert demo and rounds and evals
    assert not demo & rounds and not demo & evals and not rounds & evals
    assert demo | rounds | evals == set(range(heldout.N_INIT))
    assert max(demo) < min(rounds) and max(rounds) < min(evals)  # demonstrations first, evaluation last
    curve = list(heldout.curve_states(c))
    assert curve == sorted(evals)[: c.curve_states]
    if profile == "cpu":  # the budget: 50 episodes per suite per round, >= 100 at the end
        assert len(c.tasks) * len(curve) == 50 and len(c.tasks) * len(evals) >= 100 and c.rounds >= 5


def test_is_held_out_names_the_reason():
    states = range(10, 40)
    kw = {"held_goal": "cream_cheese_1", "held_texts": frozenset({"grab milk and put into basket"})}
    assert heldout.is_held_out("milk_1", "pick the milk and place it", 12, states=states, **kw) is None
    assert "_task" in heldout.is_held_out("cream_cheese_1", "pick it", 12, states=states, **kw)
    assert "instruction" in heldout.is_held_out(
        "milk_1", "Grab  milk and put into basket", 12, states=states, **kw
    )
    assert "state 45" in heldout.is_held_out("milk_1", "pick the milk", 45, states=states, **kw)


def test_retarget_ranks_skip_the_held_out_goal_in_the_episode_and_the_diagnosis():
    """The ordering of retarget ranks (`nearest_others`) skips the held-out goal; the diagnoser reads a
    rollout's rank in the same ordering and never proposes the held-out goal itself."""
    at = {"milk_1": (0.0, 0.0), "ketchup_1": (0.1, 0.0), "butter_1": (0.2, 0.0), "basket_1": (0.0, 0.3)}
    assert nearest_others(at, "milk_1", ("basket_1",)) == ["ketchup_1", "butter_1"]
    assert nearest_others(at, "milk_1", ("basket_1", "ketchup_1")) == ["butter_1"]
    objects = ("basket_1", "butter_1", "ketchup_1", "milk_1")
    obs = np.zeros(9 + 4 * len(objects), np.float32)
    for i, n in enumerate(objects):
        obs[9 + 4 * i : 13 + 4 * i] = [1.0, *at[n], 0.9]
    ref = LiberoReference()
    ref.add(0, "pick the milk and place it in the basket", obs, objects)
    phases = ("reached", "grasped", "lifted", "above_target", "placed")
    held = LiberoDiagnoser(objects, {0: ("milk_1", "basket_1")}, phases, {0: "ketchup_1"})
    d = held.diagnose(0, obs, "pick the butter and place it in the basket", 0, ref)
    assert (d["role"], d["object"], d["rank"]) == ("retarget", "butter_1", 0)  # ketchup skipped
    d = held.diagnose(0, obs, "pick the ketchup and place it in the basket", 0, ref)
    assert d["factor"] == "instruction" and "role" not in d  # no program recreates the held-out goal


def test_paraphrases_never_draw_a_held_out_instruction():
    doc = lp.validate_generation(
        {
            "family": "libero_object",
            "task": 0,
            "perturbs": "instruction",
            "paraphrase": {"templates": [2, 5], "drop_articles": True},
        }
    )
    rng = np.random.default_rng(0)
    drawn = {lp.instantiate(doc, rng, OBJECT, 12).instruction for _ in range(200)}
    held = sorted(drawn)[:3]  # hold out some of what the program can say: it must say something else
    rng = np.random.default_rng(0)
    again = {
        lp.instantiate(doc, rng, OBJECT, 12, avoid=[h.upper() for h in held]).instruction for _ in range(200)
    }
    assert again and not again & set(held) and again <= drawn
    with pytest.raises(ValueError, match="held-out"):
        lp.instantiate(doc, rng, OBJECT, 12, avoid=drawn)


def _domain(c) -> object:
    """A LiberoDomain of source task 0 without the simulator: what `_variant` and `build` read."""
    from coda.domains.libero.domain import LiberoDomain

    d = LiberoDomain.__new__(LiberoDomain)
    d.c, d.seed = c, 0
    d.states = list(heldout.round_states(c))
    d.instructions = {0: OBJECT}
    d.held_out_goals = {0: "cream_cheese_1"}
    d.held_out_texts = {0: frozenset({"grab alphabet soup and put it into basket"})}
    return d


def test_generated_variants_start_from_round_states_only():
    """Novel, targeted and mutated requests alike: every variant's initial state is a round state (never a
    demonstrated or evaluated one) and no paraphrase is a held-out instruction."""
    c = load_params("params.yaml", profile="cpu").libero
    d = _domain(c)
    held = d.held_out_texts[0]
    variants = [d._variant(EnvRequest("libero_object_task0", "novel", [0, k, 7])) for k in range(300)]
    for k, init in enumerate([10, 25, 39]):
        base = json.dumps(lp.Variant(0, init).to_dict())
        rng = np.random.default_rng(k)
        for j in range(50):
            program = lp.random_program(rng, "libero_object", 0)
            variants.append(d._variant(EnvRequest("libero_object_task0", "targeted", [k, j], base, program)))
    assert {v.init_index for v in variants} <= set(heldout.round_states(c))
    assert not {(v.instruction or "").lower() for v in variants} & held
    ops = ("shifts", "places", "swap", "retarget", "instruction")
    kinds = {k for v in variants for k in ops if getattr(v, k) not in (None, {})}
    assert kinds == {"shifts", "places", "swap", "retarget", "instruction"}  # every operator was drawn


def test_the_domain_rejects_an_episode_that_poses_a_held_out_combination():
    """`LiberoDomain.build` checks each certifying episode (the goal it had to pick, the instruction it was
    given, its initial state) and rejects held-out ones before they reach rollouts, memory or demonstrations;
    the round's coverage counts only what it accepted."""
    c = load_params("params.yaml", profile="cpu").libero
    d = _domain(c)
    objects = ("alphabet_soup_1", "basket_1", "cream_cheese_1")
    d.objects = objects
    obs = np.zeros(9 + 4 * len(objects))
    for i, xy in enumerate([(0.0, 0.0), (0.0, 0.3), (0.1, 0.0)]):
        obs[9 + 4 * i : 13 + 4 * i] = [1.0, *xy, 0.9]
    d.reference = LiberoReference()
    trained = "pick the alphabet soup and place it in the basket"
    d.reference.add(0, trained, obs, objects)
    d.diagnoser = LiberoDiagnoser(
        objects, {0: ("alphabet_soup_1", "basket_1")}, ("reached",), {0: "cream_cheese_1"}
    )
    record = {"obs": [obs.tolist()], "instruction": trained, "steps": 0}

    def result(goal, instruction):
        return {
            "success": True,
            "valid": True,
            "goal": goal,
            "instruction": instruction,
            "record": record,
            "labels": [],
        }

    episodes = [
        result("alphabet_soup_1", trained),  # the source task itself: accepted, standard region
        result("cream_cheese_1", "pick the cream cheese and place it in the basket"),  # `_task` 0's episode
        result("alphabet_soup_1", "grab alphabet soup and put it into basket"),  # `_lan` 0's instruction
    ]
    d._run = lambda eps, desc: episodes[: len(eps)]
    d.cfg = SimpleNamespace(coevolve=SimpleNamespace(j=2, temperature=0.5))
    base = json.dumps(lp.Variant(0, 12).to_dict())
    requests = [EnvRequest("libero_object_task0", "control", [k], base) for k in range(3)]
    built = d.build(requests, desc="test")
    assert built[0]["validity"] == "pass" and built[0]["scene"] is not None
    for b in built[1:]:
        assert b["validity"] == "rejected" and b["scene"] is None and b["demo"] is None
        assert b["trace"][-1]["op"] == "held_out"
    coverage = d._take_coverage()
    assert coverage["n"] == 1 and coverage["standard"] == 1 and coverage["new_task"] == 0


# -- with the simulator: the real held-out suites ------------------------------------------------------------
def _libero():
    from coda.sim import libero

    if not libero.available():
        pytest.skip(f"LIBERO is not installed ({libero.EXTRA_HINT})")
    return libero


def test_held_out_goals_and_instructions_are_the_pro_suites():
    lib = _libero()
    assert heldout.held_out_goal("libero_object", 0) == lib.get_task("libero_object_task", 0).goal.obj
    env = lib.LiberoEnv("libero_object_lan", 4)
    try:
        assert env.instruction in heldout.held_out_instructions("libero_object", 4)
    finally:
        env.close()
    std = lib.LiberoEnv("libero_object", 4)
    try:  # the instruction the SFT demonstrations carry (the domain's training reference keys on it)
        assert lib.env.instruction_of("libero_object", 4) == std.instruction
    finally:
        std.close()


@pytest.mark.slow
def test_no_retarget_or_paraphrase_of_any_source_task_is_a_held_out_combination():
    """For every libero_object source task and every round state of the cpu profile: the retarget candidates
    (the goal's neighbours, in rank order) never include the `_task` suite's goal, so no rank names it, and no
    retarget instruction or paraphrase (every template, wording of in/on, with and without articles) reads as
    a held-out `_lan`/`_task` instruction once the held-out ones are avoided."""
    lib = _libero()
    from coda.domains.libero import episodes as le

    c = load_params("params.yaml", profile="cpu").libero
    for t in range(lib.n_tasks("libero_object")):
        held_goal = heldout.held_out_goal("libero_object", t)
        held_texts = heldout.held_out_instructions("libero_object", t)
        env = le._env("libero_object", t)
        assert held_goal in env.object_names and held_goal != env.task.goal.obj
        language = env.task.language
        for i in heldout.round_states(c):
            _, candidates = le._neighbours(env, i, (held_goal,))
            assert held_goal not in candidates and len(candidates) == 4
            for name in candidates:
                said = lp.retarget_instruction(language, name)
                assert not any(lp.same_text(said, h) for h in held_texts), (t, i, name)
        doc = lp.validate_generation(
            {
                "family": "libero_object",
                "task": t,
                "perturbs": "instruction",
                "paraphrase": {"templates": list(range(len(lp.TEMPLATES))), "drop_articles": True},
            }
        )
        rng = np.random.default_rng(t)
        said = {lp.instantiate(doc, rng, language, 12, held_texts).instruction for _ in range(300)}
        assert not {s.lower() for s in said} & held_texts
