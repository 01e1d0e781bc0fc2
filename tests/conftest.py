import atexit
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("CODA_NO_PROGRESS", "1")
if "CODA_TEXT_CACHE" not in os.environ:  # the session's own instruction-embedding cache, not the user's
    os.environ["CODA_TEXT_CACHE"] = tempfile.mkdtemp(prefix="coda-text-cache-")
    atexit.register(shutil.rmtree, os.environ["CODA_TEXT_CACHE"], ignore_errors=True)


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """A small but complete data/ (assets, 12 seed layouts, 2 scenes per held-out suite), built once."""
    from coda import data

    out = tmp_path_factory.mktemp("data") / "data"
    data.build(out, seed=0, n_seed_layouts=12, suite_size=2, workers=2)
    return out


@pytest.fixture(scope="session")
def catalog(small_data):
    from coda.sim.assets import load_catalog

    return load_catalog(small_data)


@pytest.fixture(scope="session")
def world(small_data):
    from coda.sim.world import World

    w = World(small_data)
    yield w
    w.close()
