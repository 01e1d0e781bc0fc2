"""The co-evolution loop's steps over `FakeDomain` (tests/_fake_domain.py), fast and without a simulator:
allocation → control experiment → generation programs compiled from diagnoses → training programs, and a
three-round run end to end.

The fake domain's policy fails exactly on heavy targets (mass above `MASS_LIMIT`); its diagnoser names mass,
except on slippery scenes, where it wrongly blames friction. So a mass mode is a real difficulty and a
friction mode is not, and the loop must tell them apart.

`step` plays the loop's steps 1–3 (`Loop.round`: build, roll out, record, diagnose, control experiment)
on hand-made requests, without training; the last test runs `Loop.run` itself (without updates). Instructions and causes are
embedded by the hashed n-gram encoder (`coda.learn.text`'s fallback) instead of MiniLM, which would take
seconds to load.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from coda.coevolve.loop import Loop
from coda.coevolve.methods import METHODS
from coda.coevolve.mode_book import rollout_key
from coda.config.coevolve import CoevolveConfig
from coda.engine.generate import EnvRequest, seed_for
from coda.memory.programs import validate_generation
from coda.memory.store import load_snapshot
from tests._fake_domain import FAMILY, MASS_LIMIT, RANGES, SLIPPERY, WINDOW, FakeDomain, FakePotential

# a tiny coda profile: one family, 2 · 8 environments a round, modes decided on 2 pairs
SMALL = dict(
    rounds=3,
    envs_per_family=8,
    min_pairs=2,
    demos_per_family=1,
    rehearsal_per_family=0,
    scheduling="fixed",
    curve_seeds=(),
)
TIMING = ("wall_s", "time_s", "cpu_s", "worker_cpu_s", "schedule_checks")
HEAVY = FakeDomain.scene(mass=0.5, friction=0.6)  # fails; diagnosed as mass
SLIPPERY_HEAVY = FakeDomain.scene(mass=0.55, friction=0.25)  # fails; diagnosed (wrongly) as friction
MASS_MODE, FRICTION_MODE = "push/push/mass/0", "push/push/friction/0"


@pytest.fixture(autouse=True)
def hashed_text_encoder(monkeypatch):
    """The process-wide instruction encoder, and with it the memory's cause embeddings, without MiniLM."""
    from coda.learn import text

    monkeypatch.setattr(text, "_ENCODER", text.InstructionEncoder("fallback"))


def make_loop(out: Path, method: str = "coda", run: str = "run", **overrides) -> Loop:
    """`method`'s loop over a fresh `FakeDomain`, its run directory out/`run` and SFT checkpoint out/sft."""
    c = CoevolveConfig(**{**SMALL, **overrides})
    return Loop(c, METHODS[method], 0, FakeDomain(), out / "sft", out / run, profile="fake")


def step(loop: Loop, r: int, requests: list[EnvRequest]) -> list:
    """The loop's steps 1–3 on `requests` as `Loop.round` does them (build, roll out, record what the method
    keeps, diagnose, decide modes), without training; returns the rollouts (request, environment, record)."""
    method = loop.method
    done = sum(row["round"] == r for row in loop.memory.rows("rollouts"))
    for k, q in enumerate(requests):
        q.slot = done + k
    envs = loop.domain.build(requests, desc="")
    records = loop.domain.rollout({}, [v["scene"] for v in envs], record=True, desc="", seed=r)
    rollouts = list(zip(requests, envs, records))
    for q, v, rec in rollouts:
        if method.writes_memory:
            loop.modes.add_scene(r, q, v)
            loop.modes.add_rollout(r, q, rec)
        loop.state.record_outcome(rec.scene_hash, rec.success)
    loop.modes.diagnose(r, rollouts)
    if method.store_generation:
        loop.modes.validate(r, rollouts)
    elif method.writes_memory:
        loop.modes.validate_by_recurrence(r)
    return rollouts


def replays(r: int, scenes: list[str]) -> list[EnvRequest]:
    return [
        EnvRequest(FAMILY, "replay", seed_for(0, r, FAMILY, "replay", k), base=s)
        for k, s in enumerate(scenes)
    ]


def pairs(loop: Loop, r: int, mode_id: str, bases: list[str], first: int = 0) -> list[EnvRequest]:
    """A targeted/control pair of `mode_id` on each base, as `coda.engine.generate.memory_requests` makes them."""
    program = loop.memory.program(loop.memory.mode(mode_id).generation_program_id)
    out = []
    for k, base in enumerate(bases, start=first):
        common = {
            "mode_id": mode_id,
            "pair": k,
            "program_id": program["id"],
            "truth_factor": program["perturbs"],
        }
        out.append(
            EnvRequest(
                FAMILY, "targeted", seed_for(0, r, FAMILY, "targeted", k), base, program=program, **common
            )
        )
        out.append(EnvRequest(FAMILY, "control", seed_for(0, r, FAMILY, "control", k), base, **common))
    return out


def mass(scene: str) -> float:
    return json.loads(scene)["mass"]


def control_experiment(loop: Loop) -> list[list]:
    """Round 1: a heavy and a slippery heavy scene fail and open a mass and a friction mode. Rounds 2 and 3: one
    targeted/control pair per mode on a seed base. Returns each round's rollouts."""
    bases = loop.domain.bases(FAMILY)
    played = [step(loop, 1, replays(1, [HEAVY, SLIPPERY_HEAVY]))]
    for r in (2, 3):
        k = 2 * (r - 2)
        played.append(
            step(
                loop,
                r,
                pairs(loop, r, MASS_MODE, [bases[k]]) + pairs(loop, r, FRICTION_MODE, [bases[k + 1]], 1),
            )
        )
    return played


# -- 1. allocation -------------------------------------------------------------------------------------------
def test_allocation_targets_a_validated_mode_in_the_band_and_nothing_outside_it(tmp_path):
    loop = make_loop(tmp_path)
    c, memory = loop.c, loop.memory
    step(loop, 1, replays(1, [HEAVY, SLIPPERY_HEAVY]))  # two modes, and two stored failing scenes
    for mode_id, success in ((MASS_MODE, 0.5), (FRICTION_MODE, 0.0)):
        memory.set_mode_status(mode_id, "validated", {"rule": "by hand"})
        memory.update_mode(mode_id, success=success, n=8, policy_updates=0, round=1)
    failed = {row["scene_hash"] for row in memory.rows("rollouts") if not row["success"]}

    def allocate(r: int) -> list[EnvRequest]:
        requests = loop.method.generation.requests(
            loop.generation_inputs, r, np.random.default_rng([0, r, 0])
        )
        assert len(requests) == 2 * c.envs_per_family  # the budget, whatever the allocation
        splits = [q.split for q in requests]
        assert splits.count("novel") >= 2 * round(c.novel_share * c.envs_per_family)  # the ε floors
        assert splits.count("replay") >= 2 * round(c.replay_share * c.envs_per_family)
        for q in requests:
            if q.split == "replay":  # stored environments worth replaying: those the policy failed
                assert loop.domain.scene_hash(q.base) in failed
        return requests

    requests = allocate(2)
    targeted = [q for q in requests if q.split == "targeted"]
    controls = {q.pair: q for q in requests if q.split == "control"}
    program = memory.program(memory.mode(MASS_MODE).generation_program_id)
    assert targeted and {q.mode_id for q in targeted} == {MASS_MODE}  # in the band: targeted pairs
    assert len(controls) == len(targeted)  # ... each with its control; none for the mode outside the band
    bases, _ = loop.modes.bases(FAMILY)
    for q in targeted:
        ctl = controls[q.pair]
        assert q.program == program and q.truth_factor == "mass" and q.base in bases
        assert (ctl.base, ctl.mode_id, ctl.program_id, ctl.program) == (
            q.base,
            MASS_MODE,
            program["id"],
            None,
        )
    assert len({q.base for q in targeted}) == len(targeted)  # distinct bases while unused ones remain

    for _ in range(2):  # the mode's success falls out of the band (fast EMA 0.5 -> 0.25 -> 0.125)
        memory.update_mode(MASS_MODE, success=0.0, n=8, policy_updates=0, round=2)
    assert 1 - memory.mode(MASS_MODE).hardness < c.success_band[0]
    assert {q.split for q in allocate(3)} <= {"novel", "replay"}  # zero budget outside the band


# -- 2. the control experiment -----------------------------------------------------------------------------------
def test_the_control_experiment_accumulates_pairs_and_validates_only_a_real_difficulty(tmp_path):
    loop = make_loop(tmp_path)
    memory = loop.memory
    step(loop, 1, replays(1, [HEAVY, SLIPPERY_HEAVY]))
    assert [(m.mode_id, m.status) for m in memory.modes()] == [
        (FRICTION_MODE, "candidate"),
        (MASS_MODE, "candidate"),
    ]
    bases = loop.domain.bases(FAMILY)
    step(loop, 2, pairs(loop, 2, MASS_MODE, [bases[0]]) + pairs(loop, 2, FRICTION_MODE, [bases[1]], 1))
    # one pair each is below min_pairs: undecided, the pairs are kept for the next round
    assert {m.status for m in memory.modes()} == {"candidate"}
    assert dict(loop.control.pairs) == {MASS_MODE: [[0, 1]], FRICTION_MODE: [[1, 1]]}  # [targeted, control]
    step(loop, 3, pairs(loop, 3, MASS_MODE, [bases[2]]) + pairs(loop, 3, FRICTION_MODE, [bases[3]], 1))
    assert dict(loop.control.pairs) == {MASS_MODE: [[0, 1], [0, 1]], FRICTION_MODE: [[1, 1], [1, 1]]}
    heavy, slippery = memory.mode(MASS_MODE), memory.mode(FRICTION_MODE)
    # mass: targeted variants fail where their controls succeed (drop 1, McNemar p = 0.25 <= alpha)
    assert heavy.status == "validated"
    assert heavy.validation["pairs"] == 2 and heavy.validation["drop"] == 1.0
    assert heavy.validation["mcnemar_p"] <= loop.c.validate_alpha
    # friction: the diagnoser's wrong factor; its variants succeed like their controls (drop 0)
    assert slippery.status == "rejected" and slippery.validation["drop"] == 0.0
    assert heavy.hardness == 1.0 and slippery.hardness == 0.0  # measured on the targeted variants
    status = {d["mode_id"]: set() for d in memory.rows("diagnoses")}
    for d in memory.rows("diagnoses"):
        status[d["mode_id"]].add(d["status"])
    assert status == {MASS_MODE: {"validated"}, FRICTION_MODE: {"rejected"}}
    # a decided mode: a new diagnosis is confirmed only where its scene exhibits the validated difficulty
    # (mass 0.6 lies beyond the program's region), and later pairs never reopen the mode
    program = heavy.generation_program_id
    outside, inside = FakeDomain.scene(mass=0.6), FakeDomain.scene(mass=0.52)
    light = FakeDomain.scene(mass=0.1)
    step(loop, 4, replays(4, [outside, inside]) + pairs(loop, 4, FRICTION_MODE, [light]))
    hashes = {d["scene_hash"]: d["status"] for d in memory.rows("diagnoses") if d["round"] == 4}
    assert hashes == {
        loop.domain.scene_hash(outside): "rejected",
        loop.domain.scene_hash(inside): "validated",
    }
    assert memory.mode(MASS_MODE).generation_program_id == program  # the rejected one does not widen it
    assert memory.mode(FRICTION_MODE).status == "rejected"
    assert loop.control.pairs[FRICTION_MODE] == [[1, 1], [1, 1]]


# -- 3. generation programs are data compiled from diagnoses -----------------------------------------------------
def test_generation_programs_are_data_compiled_from_the_diagnoses(tmp_path):
    loop = make_loop(tmp_path)
    memory, domain = loop.memory, loop.domain
    failing = [FakeDomain.scene(mass=m) for m in (0.5, 0.45, 0.58)]
    programs = []
    for r, scene in enumerate(failing, start=1):
        step(loop, r, replays(r, [scene]))
        (mode,) = memory.modes()
        programs.append(memory.program(mode.generation_program_id))
    assert (mode.mode_id, mode.status, mode.n_diagnoses, mode.factor) == (MASS_MODE, "candidate", 3, "mass")
    assert {(d["factor"], d["phase"], d["mode_id"]) for d in memory.rows("diagnoses")} == {
        ("mass", "push", MASS_MODE)
    }
    for p in programs:  # JSON documents in the program schema, keyed by their content
        assert json.loads(json.dumps(p)) == p and validate_generation(p) == p
        assert p["kind"] == "generation" and p["perturbs"] == "mass" and p["source"] == "template"
    # compiled from the first diagnosis (a window around its mass), then recompiled over all of them
    lo, hi = RANGES["mass"]
    ranges = [p["operations"][-1]["range"] for p in programs]
    assert ranges[0] == [round(0.5 - WINDOW * (hi - lo), 4), round(0.5 + WINDOW * (hi - lo), 4)]
    assert ranges[-1] == [round(0.45 - WINDOW * (hi - lo), 4), hi]
    assert all(a[0] >= b[0] and a[1] <= b[1] for a, b in zip(ranges, ranges[1:]))  # it only widens
    assert (
        len({p["id"] for p in programs}) == 3
        and memory.mode(MASS_MODE).generation_program_id == programs[-1]["id"]
    )
    assert all(domain.exhibits(programs[-1], s) for s in failing)
    assert not any(domain.exhibits(programs[-1], s) for s in domain.bases(FAMILY))
    # the program recreates the difficulty: its variants of the (light) seed bases are heavy and fail
    rollouts = step(loop, 4, pairs(loop, 4, MASS_MODE, domain.bases(FAMILY)[:2]))
    for q, v, rec in rollouts:
        if q.split == "targeted":
            assert ranges[-1][0] <= mass(v["scene"]) <= ranges[-1][1] and not rec.success
        else:
            assert v["scene"] == q.base and rec.success
    # the diagnoser named mass without seeing the program: the targeted failures carry it as ground truth
    scored = [d for d in memory.rows("diagnoses") if d["truth_factor"] is not None]
    assert len(scored) == 2 and all(d["factor"] == d["truth_factor"] == "mass" for d in scored)


# -- 4. training programs of validated modes -----------------------------------------------------------------------
def test_a_validated_mode_gets_a_training_program_that_shapes_and_is_refined(tmp_path):
    loop = make_loop(tmp_path)
    memory, modes = loop.memory, loop.modes
    assert loop.trainer.imitation_weight() == loop.c.imitation_weight
    played = control_experiment(loop)
    heavy, slippery = memory.mode(MASS_MODE), memory.mode(FRICTION_MODE)
    assert slippery.status == "rejected" and slippery.training_program_id is None
    assert modes.training_program(FRICTION_MODE) is None
    program = memory.program(heavy.training_program_id)
    assert program == modes.training_program(MASS_MODE)
    assert program["kind"] == "training" and program["family"] == FAMILY
    assert [sg["predicate"] for sg in program["potential"]["subgoals"]] == [
        "reach",
        "contact",
        "push_progress",
    ]
    assert program["tools"]["planner_demos"] == 4
    assert loop.trainer.imitation_weight() == 1.5  # its tools: imitation 1.5 against critic 1.0
    # shaping (``programs``): a targeted rollout of the mode takes its training program's potential
    q, _, rec = next(x for x in played[2] if x[0].split == "targeted" and x[0].mode_id == MASS_MODE)
    pot = modes.potential_for(q, rec, {})
    assert pot == FakePotential(program["id"], 4.0) and pot.phi_along(rec)[-1] == 2.0  # 2 of 4 stages
    q, _, rec = next(x for x in played[2] if x[0].mode_id == FRICTION_MODE)
    assert modes.potential_for(q, rec, {}).source == "task"
    # progress is measured on the targeted rollouts; a program that stalls is refined
    assert modes.refine(3, played[2]) == 0  # one measurement: no stall yet
    rollouts = step(loop, 4, pairs(loop, 4, MASS_MODE, [FakeDomain.scene(mass=0.12)]))
    assert modes.refine(4, rollouts) == 1
    refined = memory.program(memory.mode(MASS_MODE).training_program_id)
    assert refined["parent"] == program["id"] and refined["tools"]["planner_demos"] == 6
    assert [(s["program_id"], s["round"], s["progress"]) for s in memory.rows("program_stats")] == [
        (program["id"], 3, 2.0),
        (program["id"], 4, 2.0),
    ]


def test_methods_without_training_programs_shape_by_diagnosis_or_not_at_all(tmp_path):
    for method, source in (("gen_store_only", "diagnosis"), ("uniform", None)):
        loop = make_loop(tmp_path / method, method)
        played = (
            control_experiment(loop) if method == "gen_store_only" else [step(loop, 1, replays(1, [HEAVY]))]
        )
        assert all(m.training_program_id is None for m in loop.memory.modes())
        q, v, rec = next(x for x in played[-1] if not x[2].success)
        diagnosis = loop.domain.diagnose(rec, v)
        pot = loop.modes.potential_for(q, rec, {rollout_key(q, rec): diagnosis})
        assert (pot and pot.source) == source  # per rollout: its own diagnosis; sparse: none
    assert loop.memory.rows("diagnoses") == [] and loop.memory.rows("scenes") == []  # uniform keeps no memory


# -- 5. the loop end to end -----------------------------------------------------------------------------------------
def no_updates(r: int, rollouts: list, clock=None) -> tuple[int, list]:
    """`Trainer.train` without updates: the fake policy's outcome is scripted, so updates cannot change what
    the loop decides, and the first optimizer alone imports torch._dynamo (1.5 s of CPU)."""
    return 0, []


def test_three_rounds_of_the_loop_over_the_fake_domain_are_deterministic(tmp_path, monkeypatch):
    """`Loop.run` end to end, twice, with real learners (a width-16 regression policy as the SFT checkpoint, the
    critic and replay `RunState.fresh` makes: rollouts enter the replay, the actor is published and every
    round checkpointed) and no updates."""
    from coda.learn.policies import make_policy

    make_policy("regression", obs_dim=4, hidden=16, n_blocks=1).save_pretrained(tmp_path / "sft" / "policy")
    runs = []
    for name in ("a", "b"):
        loop = make_loop(tmp_path, run=name)
        monkeypatch.setattr(loop.trainer, "train", no_updates)
        final = loop.run()
        runs.append((loop, final, json.loads((tmp_path / name / "rounds.json").read_text())))
    (loop, final, history), (_, _, history_b) = runs
    assert [m["round"] for m in history] == [1, 2, 3] and final["round"] == 3
    assert all(m["envs_requested"] == 2 * SMALL["envs_per_family"] for m in history)

    # identical memory tables, programs and snapshot files; identical metrics up to timing
    snaps = [tmp_path / name / "memory" / "round-0003" for name in ("a", "b")]
    assert load_snapshot(snaps[0]) == load_snapshot(snaps[1]) == loop.memory
    files = [json.loads((s / "manifest.json").read_text())["files"] for s in snaps]
    assert files[0] == files[1]
    strip = lambda h: [{k: v for k, v in m.items() if k not in TIMING} for m in h]
    assert strip(history) == strip(history_b)

    # what the loop did: the success it reports is the scripted rule's on the scenes it built; the mass mode
    # diagnosed in round 1 was validated by its control experiment, and the friction mode the diagnoser
    # opened on a slippery scene was rejected; every targeted variant has its control
    memory = loop.memory
    scenes = memory.rows("scenes")
    chunks = sum(2 if x["success"] else 3 for x in memory.rows("rollouts"))  # `FakeDomain.record`
    assert len(loop.state.replay) == chunks and history[-1]["updates"] == 0
    spec = {s["scene_hash"]: json.loads(s["spec_json"]) for s in scenes}
    for m in history:
        rows = [x for x in memory.rows("rollouts") if x["round"] == m["round"]]
        assert all(x["success"] == (spec[x["scene_hash"]]["mass"] <= MASS_LIMIT) for x in rows)
        for split, rate in m["success_by_split"].items():
            assert rate == pytest.approx(
                np.mean([x["success"] for x in rows if x["split"] == split]), abs=1e-4
            )
    assert history[0]["diagnoses"] > 0 and history[0]["validated_modes"] == 0
    assert {m.mode_id: m.status for m in memory.modes()} == {
        MASS_MODE: "validated",
        FRICTION_MODE: "rejected",
    }
    assert memory.mode(MASS_MODE).training_program_id and not memory.mode(FRICTION_MODE).training_program_id
    for d in memory.rows("diagnoses"):  # the diagnoser's rule, read from the scene
        assert d["factor"] == ("friction" if spec[d["scene_hash"]]["friction"] < SLIPPERY else "mass")
    controls = {(s["program_id"], s["base_hash"]) for s in scenes if s["split"] == "control"}
    targeted = [s for s in scenes if s["split"] == "targeted"]
    assert targeted and all((s["program_id"], s["base_hash"]) in controls for s in targeted)
    assert memory.scenes_without_lineage() == []
