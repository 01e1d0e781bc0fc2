"""The committed notebooks: one per paper section, thin, outputs stripped, one `parameters` cell of literals."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from coda.report.build import SECTIONS

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_one_notebook_per_section():
    numbers = [p.name[:2] for p in NOTEBOOKS]
    assert numbers == [f"{i:02d}" for i in range(1, 11)]
    assert set(SECTIONS) <= set(numbers)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped_and_parameterised(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), (
        "outputs not stripped"
    )
    params = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged `parameters`"
    tree = ast.parse("".join(params[0]["source"]))
    for node in tree.body:  # literals only, so papermill can override every one of them
        assert isinstance(node, ast.Assign), ast.dump(node)
        ast.literal_eval(node.value)
    lines = sum(len("".join(c["source"]).splitlines()) for c in code)
    assert lines < 80, f"{lines} lines of code: notebooks stay thin and call coda"
