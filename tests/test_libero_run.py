"""The LIBERO experiment's pieces that need no simulator (observation layout, potential, replay view,
demonstration packing, success tables), and, with the [libero] extra, a tiny SFT + one CoDA round that
resumes after its last complete round."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from coda.domains.libero import episodes as le
from coda.domains.libero import interpret as lp
from coda.domains.libero.domain import LiberoRollout, PhasePotential
from coda.learn.demos import pack_demos, unpack_demos
from coda.libero_pro import run as lr


def test_suite_observation_marks_present_objects_relative_to_the_hand():
    obs = le.SuiteObservation(("basket_1", "ketchup_1", "milk_1"))
    state = {
        "ee_pos": np.array([0.1, 0.0, 1.0]),
        "ee_quat": np.array([0, 0, 0, 1.0]),
        "grip": np.array([0.04, -0.04]),
        "objects": {"milk_1": np.array([0.2, 0.1, 0.9]), "basket_1": np.array([0.0, 0.0, 0.9])},
    }
    v = obs(state)
    assert v.shape == (obs.dim,) == (le.PROPRIO + 12,)
    slots = v[le.PROPRIO :].reshape(3, 4)
    assert slots[:, 0].tolist() == [1.0, 0.0, 1.0]  # ketchup absent
    np.testing.assert_allclose(slots[2, 1:], [0.1, 0.1, -0.1], atol=1e-6)


def _record(success: bool, steps: int = 20) -> dict:
    phases = np.zeros((steps, len(lp.PHASES)), int)
    phases[5:, 0] = 1
    phases[12:, 1] = 1
    return {
        "obs": np.arange((steps + 1) * 3, dtype=float).reshape(steps + 1, 3).tolist(),
        "actions": np.zeros((steps, 7)).tolist(),
        "chunk_starts": list(range(0, steps, 8)),
        "phases": phases.tolist(),
        "phase_names": list(lp.PHASES),
        "steps": steps,
        "success": success,
        "instruction": "pick up the milk and place it in the basket",
    }


def test_phase_potential_and_replay_view():
    from coda.learn.replay import ChunkReplay

    view = LiberoRollout.of({"record": _record(False), "success": False}, "libero_object_task0", "abc")
    assert view.steps == 20 and view.success_step is None and len(view.phases) == 21
    phi = PhasePotential((1.0, 3.0, 1.0, 1.0, 1.0)).phi_along(view)
    np.testing.assert_allclose(phi, [0.0, 1 / 7, 4 / 7, 4 / 7])  # chunk ends at steps 0, 8, 16, 20
    replay = ChunkReplay(100, obs_dim=3)
    assert replay.add_record(view, PhasePotential((1.0,) * 5)) == 3
    assert not replay.data["reward"][:3].any()
    won = LiberoRollout.of({"record": _record(True), "success": True}, "libero_object_task0", "abc")
    assert replay.add_record(won) == 3 and replay.data["reward"][5] == 1.0


def test_demo_packing_round_trips_and_tables_count_by_kind():
    demos = [
        {
            "success": True,
            "instruction": f"i{k}",
            "obs": np.ones((n, 3), np.float32) * k,
            "labels": np.zeros((n, 7), np.float32),
        }
        for k, n in ((1, 4), (2, 6))
    ]
    back = unpack_demos(pack_demos(demos, obs_dim=3))
    assert [d["instruction"] for d in back] == ["i1", "i2"]
    assert [len(d["obs"]) for d in back] == [4, 6] and back[1]["obs"][0, 0] == 2
    table = le.success_table(
        [
            ("standard", 0, 45, {"success": True}),
            ("standard", 1, 45, {"success": False}),
            ("position", 0, 46, {}),
        ]
    )
    assert table["standard"] == {
        "mean": 0.5,
        "n": 2,
        "by_task": {"0": 1.0, "1": 0.0},
        "episodes": [[0, 45, 1], [1, 45, 0]],
    }
    assert table["position"]["mean"] == 0.0 and "instruction" not in table
    assert le.success_table([("new_task", 3, 49, {"success": True})])["new_task"]["by_task"] == {"3": 1.0}
    assert le.suite_of("libero_object", "new_task") == "libero_object_task"
    assert set(le.OOD_KINDS) == set(le.KINDS) - {"standard"}


def test_retarget_variants_round_trip_and_leave_other_keys_unchanged():
    plain = lp.Variant(2, 7, {"object": [0.01, 0.0]}, None, "gp-x", 1)
    assert "retarget" not in plain.to_dict()  # hashes of existing variants are unchanged
    new = lp.Variant(2, 7, retarget=1)
    assert new.perturbed and not new.control().perturbed
    assert lp.Variant.from_dict(json.loads(json.dumps(new.to_dict()))) == new
    assert new.key() != lp.Variant(2, 7).key()
    text = lp.retarget_instruction("pick up the alphabet soup and place it in the basket", "cream_cheese_1")
    assert text == "pick the cream cheese and place it in the basket"
    assert lp.parse_instruction(text) == ("cream cheese", "in", "basket")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"rehearsal_share": 1.5}, "rehearsal_share"),
        ({"rehearsal_share": -0.1}, "rehearsal_share"),
        ({"rehearsal_share": "half"}, "rehearsal_share"),
        ({"curve_states": 0}, "curve_states"),
        ({"eval_states": 4, "curve_states": 5}, "curve_states"),
        ({"lr": 0.0}, "lr"),
        ({"lr": "1e-4"}, "lr"),
        ({"awr_weight": -0.5}, "awr_weight"),
    ],
)
def test_libero_config_checks_the_rehearsal_share_and_the_curve_states(change, field):
    from coda.config import ConfigError, load_params

    c = load_params("params.yaml", profile="cpu").libero
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(c, **change)
    assert field in str(err.value), str(err.value)


def test_rounds_rehearse_every_sft_demonstration_with_the_libero_share_and_evaluate_every_round():
    from coda.config import load_params

    cfg = load_params("params.yaml", profile="cpu")
    cfg = dataclasses.replace(
        cfg,
        libero=dataclasses.replace(cfg.libero, rehearsal_share=0.8),
        coevolve=dataclasses.replace(cfg.coevolve, rehearsal_share=0.1, eval_every=5),
    )
    c = lr.rounds_config(cfg)
    assert c.rehearsal_share == 0.8  # LIBERO's own share, not coevolve's
    assert c.rehearsal_per_family == cfg.libero.demo_states * cfg.libero.demo_repeats  # all of them
    assert c.eval_every == 1 and c.final_eval == "full" and c.rounds == cfg.libero.rounds


def test_rounds_take_libero_s_learning_rate_and_awr_weight_where_set_and_coevolve_s_otherwise():
    from coda.config import load_params

    cfg = load_params("params.yaml", profile="cpu")
    unset = dataclasses.replace(cfg, libero=dataclasses.replace(cfg.libero, lr=None, awr_weight=None))
    c = lr.rounds_config(unset)
    assert (c.lr, c.awr_weight) == (cfg.coevolve.lr, cfg.coevolve.awr_weight)
    own = dataclasses.replace(cfg, libero=dataclasses.replace(cfg.libero, lr=2.5e-5, awr_weight=0.25))
    c = lr.rounds_config(own)
    assert (c.lr, c.awr_weight) == (2.5e-5, 0.25)
    assert c.batch_size == cfg.coevolve.batch_size  # the rest of the recipe is coevolve's


def test_the_domain_evaluates_the_curve_states_every_round_and_all_of_them_at_the_end(monkeypatch):
    """After every round: every suite on the curve's states, critic-guided; after the last round: every
    evaluation state, and the policy alone too. The round's coverage comes with either."""
    from coda.config import load_params
    from coda.domains.libero import domain as ld

    cfg = load_params("params.yaml", profile="cpu")
    calls = []

    def fake_evaluate(pool, cfg, policy, critic, seed, desc, states):
        calls.append((critic is not None, list(states)))
        return le.success_table(
            (k, t, i, {"success": True}) for k in le.KINDS for t in cfg.libero.tasks for i in states
        )

    monkeypatch.setattr(ld, "evaluate", fake_evaluate)
    domain = ld.LiberoDomain.__new__(ld.LiberoDomain)
    domain.cfg, domain.c, domain.seed, domain.pool = cfg, cfg.libero, 0, None
    domain._coverage = {"n": 3}
    actor = {"policy": "p", "critic": "c"}
    curve = domain.evaluate(actor, final=False)
    assert calls == [(True, [40, 41, 42, 43, 44])] and curve["libero_policy_only"] is None
    assert all(v["n"] == 50 for v in curve["libero"].values()) and curve["coverage"] == {"n": 3}
    final = domain.evaluate(actor, final=True)
    assert calls[1:] == [(True, list(range(40, 50))), (False, list(range(40, 50)))]
    assert all(v["n"] == 100 for v in final["libero"].values()) and final["coverage"] is None
    assert domain.no_evaluation()["libero"] is None


def test_the_domain_rehearses_every_sft_demonstration_of_every_task():
    from coda.domains.libero.domain import LiberoDomain

    domain = LiberoDomain.__new__(LiberoDomain)
    domain.sft_demos = [{"instruction": f"task {t}", "k": k} for t in range(3) for k in range(4)]
    assert domain.rehearsal(4) == domain.sft_demos
    assert [d["k"] for d in domain.rehearsal(2)] == [0, 1] * 3


def test_the_cli_runs_coda_or_uniform():
    import argparse

    from coda.libero_pro.commands import add_libero_commands

    parser = argparse.ArgumentParser()
    add_libero_commands(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["libero", "run", "--sft", "s", "--out", "o", "--method", "uniform"])
    assert args.method == "uniform"
    assert parser.parse_args(["libero", "run", "--sft", "s", "--out", "o"]).method == "coda"
    with pytest.raises(SystemExit):
        parser.parse_args(["libero", "run", "--sft", "s", "--out", "o", "--method", "sr_guided"])
    with pytest.raises(ValueError, match="sr_guided"):
        lr.run_rounds(None, "s", "o", method="sr_guided")


# -- with the simulator -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_libero_sft_and_a_resumed_round(tmp_path):
    from coda.sim import libero

    if not libero.available():
        pytest.skip(f"LIBERO is not installed ({libero.EXTRA_HINT})")
    from coda.config import load_params

    cfg = load_params("params.yaml", profile="smoke")
    cfg = dataclasses.replace(
        cfg,
        libero=dataclasses.replace(
            cfg.libero,
            demo_states=1,
            eval_states=2,
            curve_states=1,
            epochs=5,
            rounds=2,
            envs_per_task=1,
            rehearsal_share=0.7,
        ),
    )
    sft = lr.run_sft(cfg, tmp_path / "sft")
    assert sft["planner"]["0"]["n"] == 1 and sft["demos"] >= 1
    assert set(sft["eval"]) == set(le.KINDS) == {"standard", "position", "instruction", "new_task"}
    first = dataclasses.replace(cfg, libero=dataclasses.replace(cfg.libero, rounds=1))
    lr.run_rounds(first, tmp_path / "sft", tmp_path / "coda")  # stops after round 1 ...
    assert (tmp_path / "coda" / "rounds" / "round-0001").is_dir()
    out = lr.run_rounds(cfg, tmp_path / "sft", tmp_path / "coda")  # ... and this resumes at round 2
    history = json.loads((tmp_path / "coda" / "rounds.json").read_text())
    assert [h["round"] for h in history] == [1, 2] and out["rounds"] == 2
    assert set(out["after"]) == set(le.KINDS)
    # the shared loop's per-round record: the same budget and keys as a PyBullet run
    assert all(h["envs_requested"] == 2 * cfg.libero.envs_per_task for h in history)
    assert history[1]["libero"] == out["after"]  # the final evaluation, in the shared loop's record
    run = json.loads((tmp_path / "coda" / "run.json").read_text())
    assert run["method"] == "coda" and run["coevolve"]["envs_per_family"] == cfg.libero.envs_per_task
    # every round measures every suite (here round 1 was the last round of the first call: both states)
    assert all(set(h["libero"]) == set(le.KINDS) for h in history)
    assert history[0]["libero_policy_only"] is not None and out["after_policy_only"]["standard"]["n"] == 2
    # the SFT demonstrations are rehearsed with libero's share
    assert run["coevolve"]["rehearsal_share"] == 0.7 == out["rehearsal_share"]
    with np.load(tmp_path / "coda" / "rounds" / "round-0002" / "rehearsal.npz") as z:
        assert len(unpack_demos(z)) == sft["demos"]
    # coverage of the held-out suites' regions, per round, over the accepted environments
    for h in history:
        cov = h["coverage"]
        assert cov["n"] == h["envs_accepted"] and set(cov) >= {"standard", "position", "new_task", "by_split"}
    assert [c["round"] for c in out["coverage"]] == [1, 2]
    # uniform: novel programs only, no memory, the same budget, from the same SFT policy
    uni = lr.run_rounds(first, tmp_path / "sft", tmp_path / "uniform", method="uniform")
    rounds = json.loads((tmp_path / "uniform" / "rounds.json").read_text())
    assert uni["method"] == "uniform" and uni["modes_validated"] == 0 and set(uni["after"]) == set(le.KINDS)
    assert rounds[0]["envs_requested"] == history[0]["envs_requested"]
    assert set(rounds[0]["coverage"]["by_split"]) <= {"novel"} and uni["coverage"][0]["round"] == 1
