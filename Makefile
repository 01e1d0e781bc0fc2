# Entry points: `make reproduce` (full pipeline on the default profile) and `make test`.
# Needs only Python 3.11 + pip; everything else is installed into .venv from pinned versions.

PY ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
# Installed on its own first so that pip picks the CPU wheel where this machine's index offers one,
# instead of resolving the multi-GB CUDA build as a dependency. Kept equal to pyproject's pin by tests.
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

export DVC_NO_ANALYTICS := 1
# stages call `coda`, `python` and `dvc` from the virtual environment
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: venv test reproduce reference lab lint clean

venv: $(STAMP)

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Re-install only when pyproject.toml changed since the last successful install.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install $(TORCH)
	$(BIN)/python -m pip install -e '.[dev,libero]'
	$(BIN)/coda report plots-template  # .dvc/config's plots.html_template: `dvc plots show` with no network
	touch $@

# Two workers (pytest-xdist), a test module at a time each, the smoke pipeline first (tests/conftest.py):
# the suite takes about half its one-process time. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: venv
	DVC_NO_ANALYTICS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --no-loadscope-reorder

# First says which stages `dvc repro` will re-run and why (grouped `dvc status`: docs/FRESH_CLONE.md; not fatal)
reproduce: venv
	-coda status
	coda data ensure && dvc repro

# Re-make the reference record (smoke profile, ~2 minutes) that `coda verify records/reference/smoke-coda-0`
# compares against: after any change of the numerics, then commit records/reference/
reference: venv
	coda verify --update records/reference/smoke-coda-0

# JupyterLab in the project environment, at the project root (the notebooks are in notebooks/)
lab: venv
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Removes caches and build metadata; keeps .venv and DVC outputs (use `dvc gc` / `rm -rf .venv` for those).
clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
