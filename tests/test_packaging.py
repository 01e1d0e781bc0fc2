"""pyproject.toml, environment.yml and the Makefile pin the same package versions, and .venv has them."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*$")


def normalise(name: str) -> str:
    """PEP 503 name normalisation: `huggingface_hub` and `Huggingface-Hub` are the same package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(requirements: list[str], source: str) -> dict[str, str]:
    pins = {}
    for requirement in requirements:
        match = PIN.match(requirement)
        assert match, f"{source}: {requirement!r} is not pinned as name==version"
        name = normalise(match.group(1))
        assert name not in pins, f"{source}: {name} listed twice"
        pins[name] = match.group(2)
    return pins


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject_pins() -> dict[str, str]:
    project = pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return parse_pins(requirements, "pyproject.toml")


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def environment_pins() -> dict[str, str]:
    pip_sections = [item["pip"] for item in environment()["dependencies"] if isinstance(item, dict)]
    assert len(pip_sections) == 1, "environment.yml needs exactly one pip section"
    # pip options (`-e .`, `--extra-index-url ...`) are not packages.
    entries = [entry for entry in pip_sections[0] if not entry.lstrip().startswith("-")]
    return parse_pins(entries, "environment.yml")


def test_pyproject_and_environment_pin_the_same_versions():
    ours, conda = pyproject_pins(), environment_pins()
    assert {n: v for n, v in ours.items() if conda.get(n) != v} == {}, (
        "pinned in pyproject, not in environment.yml"
    )
    assert {n: v for n, v in conda.items() if ours.get(n) != v} == {}, (
        "pinned in environment.yml, not in pyproject"
    )


def test_python_version_agrees():
    assert pyproject()["project"]["requires-python"] == ">=3.11,<3.12"
    assert "python=3.11" in environment()["dependencies"]


def test_makefile_installs_the_pinned_torch_first():
    match = re.search(r"^TORCH\s*:?=\s*torch==(\S+)\s*$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile must define TORCH := torch==<version>"
    assert match.group(1) == pyproject_pins()["torch"]


@pytest.mark.parametrize("name", sorted(pyproject_pins()))
def test_installed_versions_match_pins(name):
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        pytest.fail(f"{name} is pinned but not installed; run `make venv`")
    # A local version label (torch 2.13.0+cpu) satisfies the pin 2.13.0.
    assert installed.split("+")[0] == pyproject_pins()[name]
