"""SceneSpec: JSON round trip, stable hash, field validation with errors that name the field."""

import json

import numpy as np
import pytest

from coda.data import FAMILIES
from coda.sim.families import REGISTRY
from coda.sim.families.base import SPLITS
from coda.sim.scene import SceneSpec, SceneSpecError


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_and_hash(family, catalog):
    rng = np.random.default_rng(3)
    for split in SPLITS:
        spec = REGISTRY[family].sample(rng, catalog, split)
        again = SceneSpec.from_json(spec.to_json())
        assert again == spec
        assert again.hash == spec.hash
        assert len(spec.hash) == 16


def test_hash_is_content_based(catalog):
    spec = REGISTRY["pick_place"].sample(np.random.default_rng(0), catalog, "seed")
    moved = spec.replace_pose(0, x=spec.spatial.poses[0].x + 0.01)
    assert moved.hash != spec.hash
    # tiny float noise below the canonical rounding does not change the hash
    assert spec.replace_pose(0, x=spec.spatial.poses[0].x + 1e-9).hash == spec.hash


def _spec_dict(catalog):
    return REGISTRY["pick_place"].sample(np.random.default_rng(1), catalog, "seed").to_dict()


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["task"].update(family="juggle"), "task.family"),
        (lambda d: d["task"].update(variant="shelf"), "task.variant"),
        (lambda d: d["task"].update(template_id=99), "task.template_id"),
        (lambda d: d["task"].update(template_id=True), "task.template_id"),
        (lambda d: d["task"]["bindings"].update(target=17), "task.bindings.target"),
        (lambda d: d["task"]["bindings"].pop("container"), "task.bindings.container"),
        (lambda d: d["objects"][0].update(mass=-1.0), "objects[0].mass"),
        (lambda d: d["objects"][0].update(scale="big"), "objects[0].scale"),
        (lambda d: d["objects"][0].update(rgba=[1, 0, 0]), "objects[0].rgba"),
        (lambda d: d["objects"][0].update(colour="red"), "objects[0].colour"),
        (lambda d: d["spatial"]["poses"][0].update(x=5.0), "spatial.poses[0].x"),
        (lambda d: d["spatial"]["poses"].pop(), "spatial.poses"),
        (lambda d: d.update(version=7), "version"),
        (lambda d: d.pop("task"), "task"),
    ],
)
def test_validation_names_the_field(catalog, mutate, field):
    d = _spec_dict(catalog)
    mutate(d)
    with pytest.raises(SceneSpecError) as err:
        SceneSpec.from_dict(d)
    assert str(err.value).startswith(field + ":"), str(err.value)


def test_bad_json_is_a_spec_error():
    with pytest.raises(SceneSpecError, match="not valid JSON"):
        SceneSpec.from_json("{nope")
    with pytest.raises(SceneSpecError, match="expected an object"):
        SceneSpec.from_json(json.dumps([1, 2]))
