"""dvc.yaml names its code dependencies precisely: the PyBullet stages list coda/sim entry by entry (without
coda/sim/libero, so LIBERO work leaves them up to date), and that list must name every entry of coda/sim."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _stage_deps() -> dict[str, list[str]]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name, body in stages.items():
        body = body.get("do", body)  # foreach stages
        out[name] = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
    return out


def test_pybullet_stages_depend_on_every_sim_entry_but_libero():
    entries = {
        f"coda/sim/{p.name}"
        for p in (ROOT / "coda" / "sim").iterdir()
        if p.name not in ("libero", "__pycache__")
    }
    pybullet = [
        n for n, deps in _stage_deps().items() if any(d.startswith("coda/sim/world.py") for d in deps)
    ]
    assert {"scenes", "planner_check", "sft", "table1", "ablation", "budget", "data_scaling"} <= set(pybullet)
    for name in pybullet:
        deps = set(_stage_deps()[name])
        assert entries <= deps, f"{name} misses {sorted(entries - deps)}"
        assert "coda/sim" not in deps and "coda/sim/libero" not in deps, name


def test_run_stages_depend_on_every_memory_module_but_libero_schema_and_commands():
    entries = {
        f"coda/memory/{p.name}"
        for p in (ROOT / "coda" / "memory").iterdir()
        if p.name not in ("libero_programs.py", "commands.py", "__pycache__")
    }
    runs = [n for n, deps in _stage_deps().items() if "coda/memory/store.py" in deps]
    assert {"table1", "ablation", "budget", "long", "backbone", "sft_eval"} <= set(runs)
    for name in runs:
        deps = set(_stage_deps()[name])
        assert entries <= deps, f"{name} misses {sorted(entries - deps)}"
        assert "coda/memory" not in deps and "coda/memory/libero_programs.py" not in deps, name


def test_no_stage_depends_on_the_command_line_parser():
    """`coda.cli` only parses; the stages depend on `coda.commands` (or their own package), so adding a
    command does not invalidate finished runs."""
    for name, deps in _stage_deps().items():
        assert "coda/cli.py" not in deps, name


def test_run_stages_depend_on_their_own_domain_only():
    """A PyBullet run stage reads the PyBullet domain and the registry, not the LIBERO-Pro domain; a LIBERO stage
    the LIBERO-Pro domain."""
    deps = _stage_deps()
    runs = [n for n, d in deps.items() if "coda/memory/store.py" in d]
    for name in runs:
        assert {"coda/domains/__init__.py", "coda/domains/pybullet.py"} <= set(deps[name]), name
        assert not any(d.startswith("coda/domains/libero") for d in deps[name]), name
    for name in ("libero_sft", "libero_coda", "libero_uniform"):
        assert {"coda/domains/libero"} <= set(deps[name]), name


def test_the_libero_sft_stage_names_only_the_sft_keys_of_libero():
    """Choosing the rounds' budget or recipe (rounds, rehearsal share, learning rate, ...) leaves the LIBERO SFT
    up to date; every key it names is a field of `LiberoConfig`."""
    import dataclasses

    from coda.config.sections import LiberoConfig

    params = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["libero_sft"]["params"]
    prefix = "profiles.${base.profile}.libero"
    assert prefix not in params
    keys = {p.removeprefix(prefix + ".") for p in params if p.startswith(prefix + ".")}
    assert keys <= {f.name for f in dataclasses.fields(LiberoConfig)}, keys
    assert {"suite", "tasks", "demo_states", "demo_repeats", "eval_states", "epochs"} <= keys
    assert not keys & {"rounds", "envs_per_task", "demos_per_task", "rehearsal_share", "lr", "awr_weight"}
