"""Budget allocation, the control experiment and the generation strategies (no simulator needed)."""

import numpy as np

from coda.engine import generate as gen


def test_largest_remainder_sums_to_total_and_follows_weights():
    counts = gen.largest_remainder([3.0, 1.0, 0.0], 8)
    assert sum(counts) == 8
    assert counts == [6, 2, 0]
    assert gen.largest_remainder([0.0, 0.0], 3) in ([2, 1], [1, 2])
    assert gen.largest_remainder([1.0], 0) == [0]


def _mode(status, hardness, lp, mode_id="m", recurrence=2, source="template"):
    program = {"perturbs": "mass", "id": "gp-x", "source": source}
    return gen.ModeView(mode_id, "pick_place", status, hardness, lp, program, "mass", recurrence)


def _allocate(n, modes, *, has_stored=True, min_pairs=3, progress=None):
    return gen.allocate(
        n,
        modes,
        novel_share=0.15,
        replay_share=0.10,
        has_stored=has_stored,
        band=(0.2, 0.8),
        min_pairs=min_pairs,
        progress=progress,
    )


def test_novel_and_replay_shares_are_floors_and_unearned_slots_fall_back_to_novel():
    plan = _allocate(64, [])
    assert (plan.novel, plan.replay, plan.modes) == (58, 6, [])  # no mode: all but replay's floor to novel
    assert _allocate(64, [], has_stored=False).novel == 64  # nothing stored: replay's floor goes to novel
    # replay earns slots beyond its floor only by its measured learning progress
    assert _allocate(64, [], progress={"replay": 0.2}).replay > 6
    # modes that stop paying (success outside the band) leave their slots to the novel stream
    solved, hopeless = _mode("validated", 0.0, 0.3, "a"), _mode("validated", 1.0, 0.3, "b")
    plan = _allocate(64, [solved, hopeless])
    assert plan.modes == [0, 0] and (plan.novel, plan.replay) == (58, 6)
    # in-band validated modes share the rest with the novel stream; the floors always hold
    paying = [_mode("validated", 0.5, 0.2, k) for k in "abcd"]
    plan = _allocate(64, paying)
    assert plan.novel >= 10 and plan.replay >= 6 and plan.novel + plan.replay + sum(plan.modes) == 64
    assert sum(plan.modes) > plan.novel - 10
    # when the novel stream shows more progress, it takes slots from the modes
    assert _allocate(64, paying, progress={"novel": 0.5}).novel > plan.novel


def test_validated_modes_outside_the_band_get_no_budget():
    band = (0.2, 0.8)
    flat = gen.mode_weight(_mode("validated", 0.5, 0.0), band)
    learning = gen.mode_weight(_mode("validated", 0.5, 0.3), band)
    edge = gen.mode_weight(_mode("validated", 0.79, 0.0), band)
    assert learning > flat > edge > 0
    assert gen.mode_weight(_mode("validated", 0.0, 0.5), band) == 0.0  # solved: success 1.0
    assert gen.mode_weight(_mode("validated", 0.9, 0.5), band) == 0.0  # too hard: success 0.1
    assert gen.stream_weight("novel", 0.0) > gen.stream_weight("replay", 0.0) == 0.0


def test_candidate_testing_is_capped_and_needs_recurrence():
    candidates = [_mode("candidate", 0.5, 0.0, f"c{k}", recurrence=3) for k in range(6)]
    once = _mode("candidate", 0.5, 0.0, "z", recurrence=1)
    plan = _allocate(64, [*candidates, once])  # 48 mode slots: at most 12 test candidates, 3 pairs each
    assert sum(plan.modes) <= 0.25 * 48 and plan.modes == [3, 3, 3, 3, 0, 0, 0]
    assert _allocate(64, [once]).modes == [0]  # a failure seen once is not tested ...
    lifted = _mode("candidate", 0.5, 0.0, "t", recurrence=0, source="transfer")
    assert _allocate(64, [lifted]).modes == [3]  # ... but a program lifted from a validated mode is
    # the smoke profile (3 slots, 1 pair per test) still tests a candidate, even one of one diagnosis
    assert _allocate(3, [once], min_pairs=1).modes == [1]
    # most recurrent first, ties by id
    rec = [_mode("candidate", 0.5, 0.0, "b", 2), _mode("candidate", 0.5, 0.0, "a", 2)]
    rec.append(_mode("candidate", 0.5, 0.0, "c", 5))
    assert _allocate(32, rec).modes == [0, 3, 3]  # 24 mode slots: two tests, "a" before "b"


def test_memory_requests_pair_every_targeted_variant_with_its_control():
    rng = np.random.default_rng(0)
    modes = [_mode("candidate", 0.5, 0.0, "a"), _mode("validated", 0.5, 0.2, "b")]
    reqs = gen.memory_requests(
        "pick_place",
        8,
        modes,
        ["{}"],
        ["{}"],
        seed=0,
        round_=2,
        novel_share=0.15,
        replay_share=0.1,
        band=(0.2, 0.8),
        rng=rng,
    )
    assert len(reqs) == 16  # two environments per slot
    targeted = [q for q in reqs if q.split == "targeted"]
    controls = [q for q in reqs if q.split == "control"]
    assert len(targeted) == len(controls) > 0
    assert sorted((q.mode_id, q.pair) for q in targeted) == sorted((q.mode_id, q.pair) for q in controls)
    assert all(q.program is None for q in controls) and all(q.program for q in targeted)
    assert all(q.truth_factor == "mass" for q in targeted)


def test_a_family_round_draws_distinct_bases_for_its_pairs():
    # a control is the base itself under the round's deterministic actor: a repeated base adds no control
    p = np.array([0.7, 0.1, 0.1, 0.1])
    for seed in range(20):
        picks = gen.draw_bases(np.random.default_rng(seed), 4, 6, p)
        assert sorted(picks[:4]) == [0, 1, 2, 3] and len(set(picks[4:])) == 2  # one cycle, then the next
    # without repeats it draws exactly what independent draws do (same random stream)
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    assert gen.draw_bases(rng, 100, 3) == [int(ref.choice(100)) for _ in range(3)]
    zero = gen.draw_bases(np.random.default_rng(0), 3, 3, np.array([0.5, 0.5, 0.0]))
    assert sorted(zero[:2]) == [0, 1] and 2 not in zero  # a base of weight 0 is never drawn
    modes = [_mode("candidate", 0.5, 0.0, "a"), _mode("candidate", 0.5, 0.0, "b")]
    bases = [f'{{"base": {i}}}' for i in range(4)]
    for seed in range(10):
        reqs = gen.memory_requests(
            "pick_place",
            16,  # a quarter of the slots test candidates: 2 modes x 2 pairs
            modes,
            bases,
            [],
            seed=0,
            round_=2,
            novel_share=0.0,
            replay_share=0.0,
            band=(0.2, 0.8),
            rng=np.random.default_rng(seed),
            min_pairs=2,
        )
        controls = [q.base for q in reqs if q.split == "control"]
        assert sorted(controls) == sorted(bases)  # 4 pairs over 2 modes: every base once


def test_sr_guided_prefers_intermediate_success():
    buf = [
        gen.SceneStats("easy", "push", successes=10, trials=10),
        gen.SceneStats("mid", "push", successes=5, trials=10),
        gen.SceneStats("hard", "push", successes=0, trials=10),
    ]
    picks = []
    for s in range(30):
        reqs = gen.sr_guided_requests(
            "push",
            8,
            buf,
            seed=s,
            round_=2,
            novel_share=0.15,
            replay_share=0.1,
            rng=np.random.default_rng(s),
        )
        assert len(reqs) == 16
        picks += [q.base for q in reqs if q.split == "replay"]
    assert picks.count("mid") > picks.count("easy") and picks.count("mid") > picks.count("hard")
