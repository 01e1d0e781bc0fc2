"""params.yaml loads for every profile, and every kind of mistake is reported as one line naming its key."""

import copy
import dataclasses
import hashlib
from pathlib import Path

import pytest
import yaml

from coda.config import (
    FAMILIES,
    Config,
    ConfigError,
    DataConfig,
    PlannerConfig,
    SimConfig,
    config_hash,
    load_params,
)

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def raw_params() -> dict:
    return yaml.safe_load(PARAMS.read_text())


# ------------------------------------------------------------------------------------------ the real file


@pytest.mark.parametrize(
    ("profile", "workers", "n_seed_layouts", "suite_size", "max_chunks", "n_check", "ik"),
    [("smoke", 2, 40, 4, 6, 5, 20), ("cpu", 2, 500, 50, 12, 50, 20), ("paper", 2, 500, 100, 12, 50, 100)],
)
def test_real_params_load_every_profile(
    profile, workers, n_seed_layouts, suite_size, max_chunks, n_check, ik
):
    cfg = load_params(PARAMS, profile=profile)
    assert isinstance(cfg, Config)
    assert (cfg.profile, cfg.seed) == (profile, 0)
    assert (cfg.data.n_seed_layouts, cfg.data.suite_size) == (n_seed_layouts, suite_size)
    assert cfg.data.families == FAMILIES
    assert cfg.sim.workers == workers
    assert (cfg.sim.control_hz, cfg.sim.physics_hz, cfg.sim.substeps) == (10, 240, 24)
    assert (cfg.sim.chunk_len, cfg.sim.max_chunks, cfg.sim.max_steps) == (8, max_chunks, 8 * max_chunks)
    assert cfg.planner == PlannerConfig(n_check=n_check, ik_iterations=ik, ik_threshold=1e-4)
    assert isinstance(cfg.planner.ik_threshold, float) and isinstance(cfg.sim.episode_timeout_s, float)


def test_default_profile_comes_from_base():
    assert raw_params()["base"]["profile"] == "cpu"
    assert load_params(PARAMS) == load_params(PARAMS, profile="cpu")


def test_dataclass_defaults_are_the_cpu_profile():
    cpu = load_params(PARAMS, profile="cpu")
    assert (cpu.data, cpu.sim, cpu.planner) == (DataConfig(), SimConfig(), PlannerConfig())


def test_configs_are_frozen_and_lists_become_tuples():
    cfg = load_params(PARAMS, profile="smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sim.workers = 3
    assert DataConfig(families=["stack", "push"]).families == ("stack", "push")


# ------------------------------------------------------------------------------------------ hashing


def test_config_hash_is_sha256_of_canonical_json():
    expected = hashlib.sha256(b'{"ik_iterations":100,"ik_threshold":0.0001,"n_check":50}').hexdigest()
    assert config_hash(PlannerConfig(n_check=50, ik_iterations=100, ik_threshold=1e-4)) == expected
    # An int given for a float field normalises to the same config, hence the same hash.
    assert config_hash(SimConfig(episode_timeout_s=60)) == config_hash(SimConfig(episode_timeout_s=60.0))
    assert config_hash(SimConfig(workers=1)) != config_hash(SimConfig(workers=2))
    assert config_hash(DataConfig(families=["stack"])) == config_hash(DataConfig(families=("stack",)))
    with pytest.raises(TypeError):
        config_hash({"n_check": 50})


# ------------------------------------------------------------------------------------------ errors


def set_key(tree: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree[key]
    tree[last] = value


def del_key(tree: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree[key]
    del tree[last]


def load_modified(tmp_path: Path, edit, profile=None) -> Config:
    tree = copy.deepcopy(raw_params())
    edit(tree)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return load_params(path, profile=profile)


def assert_config_error(excinfo, key_path: str, *fragments: str) -> None:
    error = excinfo.value
    assert error.key_path == key_path
    text = str(error)
    assert "\n" not in text
    assert text.startswith(f"{key_path}: ")
    for fragment in fragments:
        assert fragment in text, text


DELETE = object()  # marks a key to remove instead of set
CPU, SMOKE, PAPER = "profiles.cpu", "profiles.smoke", "profiles.paper"

# (dotted key to edit, new value or DELETE, expected fragment of the message); the error must name that key.
MISTAKES = {
    # unknown key or section
    "unknown key": (f"{CPU}.sim.wrokers", 2, "unknown key"),
    "unknown section": (f"{SMOKE}.training", {}, "unknown section"),
    "unknown top-level key": ("stages", {}, "unknown key"),
    "unknown base key": ("base.seeds", [0, 1], "unknown key"),
    # wrong type
    "bool is not int": (f"{CPU}.sim.workers", True, "(bool)"),
    "str is not int": (f"{CPU}.sim.workers", "2", "(str)"),
    "float is not int": (f"{PAPER}.data.n_seed_layouts", 2.5, "integer"),
    "families not a list": (f"{CPU}.data.families", "stack", "list"),
    "obs not a str": (f"{CPU}.sim.obs", 3, "'state', 'rgb'"),
    "ray_address not a str": (f"{PAPER}.sim.ray_address", 6379, "string or null"),
    "float written as str": (f"{CPU}.planner.ik_threshold", "1e-4", "1.0e-4"),
    "bool is not float": (f"{CPU}.sim.episode_timeout_s", False, "(bool)"),
    "seed is bool": ("base.seed", True, "integer"),
    # out of range or not an allowed value
    "negative seed": ("base.seed", -1, ">= 0"),
    "zero suite": (f"{SMOKE}.data.suite_size", 0, ">= 1, got 0"),
    "negative retries": (f"{CPU}.sim.retries", -1, ">= 0"),
    "zero timeout": (f"{CPU}.sim.episode_timeout_s", 0, "> 0"),
    "infinite timeout": (f"{CPU}.sim.episode_timeout_s", float("inf"), "finite"),
    "negative threshold": (f"{PAPER}.planner.ik_threshold", -1e-4, "> 0"),
    "unknown obs": (f"{CPU}.sim.obs", "depth", "'depth'"),
    "unknown backend": (f"{PAPER}.sim.backend", "slurm", "'local', 'ray'"),
    "no families": (f"{CPU}.data.families", [], "non-empty"),
    "physics not a multiple": (f"{CPU}.sim.physics_hz", 245, "multiple of control_hz"),
    "unknown finetune": (f"{CPU}.coevolve.finetune", "adapters", "'full', 'lora'"),
    "rehearsal share above 1": (f"{CPU}.coevolve.rehearsal_share", 1.5, "[0, 1]"),
    "curve larger than the final evaluation": (
        f"{CPU}.coevolve.curve_ood_per_suite",
        60,
        "at most eval_ood_per_suite",
    ),
    "scaling ns not increasing": (f"{CPU}.scaling.ns", [0, 64, 16], "increasing"),
    "scaling modes not a list": (f"{CPU}.scaling.modes", "uniform", "non-empty list"),
    # missing
    "missing key": (f"{CPU}.sim.retries", DELETE, "missing key"),
    "missing section": (f"{PAPER}.planner", DELETE, "missing section"),
    "missing base": ("base", DELETE, "missing key"),
    "missing seed": ("base.seed", DELETE, "missing key"),
    "no profiles": ("profiles", {}, "at least one"),
    # unknown profile
    "unknown base.profile": ("base.profile", "gpu", "'gpu'; available: cpu, paper, smoke"),
    # not a mapping
    "section is a list": (f"{CPU}.sim", [1, 2], "mapping"),
    "profile is null": (SMOKE, None, "mapping"),
    "profiles is a number": ("profiles", 3, "mapping"),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_each_mistake_names_its_key(tmp_path, case):
    key, value, fragment = MISTAKES[case]
    edit = (lambda t: del_key(t, key)) if value is DELETE else (lambda t: set_key(t, key, value))
    with pytest.raises(ConfigError) as excinfo:
        load_modified(tmp_path, edit)
    assert_config_error(excinfo, key, fragment)


@pytest.mark.parametrize(
    ("families", "fragment"),
    [(["stack", "pour"], "got 'pour'"), (["push", "push"], "duplicate entry 'push'")],
)
def test_bad_family_entry_names_its_index(tmp_path, families, fragment):
    with pytest.raises(ConfigError) as excinfo:
        load_modified(tmp_path, lambda t: set_key(t, f"{CPU}.data.families", families))
    assert_config_error(excinfo, f"{CPU}.data.families[1]", fragment)


def test_message_format_is_exact(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_modified(tmp_path, lambda t: set_key(t, "profiles.cpu.sim.workers", -2))
    assert str(excinfo.value) == "profiles.cpu.sim.workers: expected an integer >= 1, got -2"


def test_mistake_in_unselected_profile_is_still_reported(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_modified(tmp_path, lambda t: set_key(t, "profiles.paper.sim.workers", 0), profile="smoke")
    assert_config_error(excinfo, "profiles.paper.sim.workers", ">= 1")


def test_unknown_requested_profile(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_modified(tmp_path, lambda t: None, profile="gpu")
    assert_config_error(excinfo, "profiles.gpu", "unknown profile", "cpu, paper, smoke")


def test_top_level_not_a_mapping(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("- base\n- profiles\n")
    with pytest.raises(ConfigError) as excinfo:
        load_params(path)
    assert_config_error(excinfo, str(path), "mapping", "(list)")


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("base:\n  seed: 0\n   profile: cpu\n", ("invalid YAML at line 3",)),
        ("base: {seed: 0, profile: [cpu\n", ("invalid YAML",)),
        ("base:\n  seed: 0\n  seed: 1\n", ("line 3", "duplicate key 'seed'")),
    ],
)
def test_yaml_syntax_errors_name_the_file_and_line(tmp_path, text, fragments):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as excinfo:
        load_params(path)
    assert_config_error(excinfo, str(path), *fragments)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as excinfo:
        load_params(path)
    assert_config_error(excinfo, str(path), "cannot read")


def test_direct_construction_validates_with_field_names():
    with pytest.raises(ConfigError) as excinfo:
        SimConfig(workers=0)
    assert excinfo.value.key_path == "workers"
    with pytest.raises(ConfigError) as excinfo:
        DataConfig(families=("stack", 7))
    assert excinfo.value.key_path == "families[1]"


def test_experiment_methods_match_the_coevolve_methods():
    # config.METHODS names the methods without importing the (torch-heavy) co-evolution loop; keep them equal
    from coda import config
    from coda.coevolve import METHODS

    assert config.METHODS == tuple(METHODS)
