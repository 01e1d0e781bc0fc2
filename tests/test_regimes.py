"""Regime B's spaces (the widened seed space, the generator-corner suites) and `coda regimes`' arguments."""

import numpy as np
import pytest

from coda import data
from coda.regimes import parse_regime_arg
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES, SUITES, corners, intervals, regime, regime_b_ranges, widened_seed


def _numeric(r) -> bool:
    return not (isinstance(r, (tuple, str)) and r and isinstance(r[0] if isinstance(r, tuple) else r, str))


@pytest.mark.parametrize("family", sorted(RANGES))
def test_widened_seed_contains_regime_a_and_stays_in_the_generator(family):
    a, gen, b = RANGES[family]["seed"], RANGES[family]["generator"], widened_seed(family)
    for key, r in b.items():
        if key in ("categories", "variants", "container_side") or not _numeric(r):
            continue
        lo, hi = r
        assert lo <= a[key][0] and a[key][1] <= hi, key  # B's seeds contain A's
        if key in gen:
            g = intervals(gen[key])
            assert g[0][0] <= lo and hi <= g[-1][1], key
    assert b["variants"] == gen["variants"]  # every generator variant is trained on
    assert b["categories"] == "train"  # held-out categories stay out (Family.pool)
    with pytest.raises(ValueError, match="width"):
        widened_seed(family, 0.0)


@pytest.mark.parametrize("family", sorted(RANGES))
def test_corner_suites_lie_in_the_generator_outside_the_seed_space(family):
    b = regime_b_ranges(family)
    gen = RANGES[family]["generator"]
    for suite in SUITES:
        assert b[suite], f"{family}/{suite}: no corner factors"
        for key, bands in b[suite].items():
            g, s = intervals(gen[key]), b["seed"][key]
            for lo, hi in bands:
                assert g[0][0] - 1e-9 <= lo < hi <= g[-1][1] + 1e-9
                assert hi <= s[0] + 1e-9 or lo >= s[1] - 1e-9  # outside B's seed range
    assert corners(family, next(iter(b["layouts"]))) == b["layouts"][next(iter(b["layouts"]))]


def test_regime_context_swaps_and_restores_the_ranges():
    before = {f: dict(RANGES[f]) for f in RANGES}
    with regime("b"):
        assert REGISTRY["stack"].space("seed")["variants"] == ("on", "on_center")
        assert REGISTRY["stack"].space("tasks")["variants"] == ("on_center",)  # the held-out variant stays
    assert {f: dict(RANGES[f]) for f in RANGES} == before
    with regime("a"):
        assert REGISTRY["stack"].space("seed")["variants"] == ("on",)
    with pytest.raises(ValueError, match="regime"), regime("c"):
        pass


def test_regime_a_slots_draw_what_the_release_drew():
    # regime A's streams are the release's (no regime code); regime B's are its own
    a = data.scene_rng(0, "stack", "seed", 3).random(4)
    legacy = np.random.default_rng(np.random.SeedSequence([0, data.FAMILIES.index("stack"), 0, 3, 0])).random(
        4
    )
    assert np.array_equal(a, legacy)
    assert not np.array_equal(a, data.scene_rng(0, "stack", "seed", 3, regime="b").random(4))
    jobs = data.scene_jobs(0, 8, 1, ("stack", "push"), regime="b")
    assert {j.regime for j in jobs} == {"b"} and len(jobs) == 8 + 2 * len(SUITES)
    with pytest.raises(ValueError, match="regime"):
        data.scene_jobs(0, 8, 1, regime="z")


def test_regime_argument_names_its_parts():
    assert parse_regime_arg("b=runs/x:m.json:scenes_b")[0] == "b"
    for bad in ("b=runs/x:m.json", "c=a:b:c", "runs/x:m.json:s", "a=::s"):
        with pytest.raises(ValueError, match="NAME=POLICY_RUN:SFT_METRICS:DATA"):
            parse_regime_arg(bad)
