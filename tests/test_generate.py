"""Budget allocation, the control experiment and the generation strategies (no simulator needed)."""

import numpy as np

from coda.engine import generate as gen


def test_largest_remainder_sums_to_total_and_follows_weights():
    counts = gen.largest_remainder([3.0, 1.0, 0.0], 8)
    assert sum(counts) == 8
    assert counts == [6, 2, 0]
    assert gen.largest_remainder([0.0, 0.0], 3) in ([2, 1], [1, 2])
    assert gen.largest_remainder([1.0], 0) == [0]


def test_split_budget_uses_paper_shares_and_gives_unused_mode_share_to_novel():
    assert gen.split_budget(64, 0.15, 0.10, n_modes=5) == (10, 6, 48)
    assert gen.split_budget(64, 0.15, 0.10, n_modes=0) == (58, 6, 0)


def _mode(status, hardness, lp, mode_id="m"):
    return gen.ModeView(mode_id, "pick_place", status, hardness, lp, {"perturbs": "mass", "id": "gp-x"})


def test_mode_weight_prefers_learning_progress_and_in_band_success():
    band = (0.2, 0.8)
    flat = gen.mode_weight(_mode("validated", 0.5, 0.0), band)
    learning = gen.mode_weight(_mode("validated", 0.5, 0.3), band)
    solved = gen.mode_weight(_mode("validated", 0.0, 0.0), band)
    assert learning > flat > solved


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
            4,
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
