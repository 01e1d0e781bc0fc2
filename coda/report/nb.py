"""Helpers for the notebooks: find the project root, and show what a section wrote to figures/."""

from __future__ import annotations

import os
from pathlib import Path


def setup() -> Path:
    """Change to the project root (the folder holding params.yaml and dvc.yaml, found upwards from the
    notebook's folder) so that a notebook opened in JupyterLab and one run by papermill see the same paths."""
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "params.yaml").is_file() and (d / "dvc.yaml").is_file():
            os.chdir(d)
            os.environ.setdefault("CODA_NO_PROGRESS", "1")
            return d
    raise FileNotFoundError(f"no params.yaml + dvc.yaml above {here}: open the notebook inside the project")


def require(*paths: str | Path, hint: str = "run `dvc repro` or `dvc pull`") -> bool:
    """True when every path exists; else print one line naming the missing ones and return False (a notebook
    cell then skips its work instead of failing or writing placeholders)."""
    gone = [str(p) for p in paths if not Path(p).exists()]
    if gone:
        print(f"missing {', '.join(gone)} ({hint}); skipped")
    return not gone


def show(name: str, figures: str | Path = "figures") -> None:
    """Display figures/<name>.md (a table) or figures/<name>.png (a figure)."""
    from IPython.display import Image, Markdown, display

    figures = Path(figures)
    if (figures / f"{name}.md").is_file():
        display(Markdown((figures / f"{name}.md").read_text()))
    elif (figures / f"{name}.png").is_file():
        display(Image(filename=str(figures / f"{name}.png")))
    else:
        print(f"{figures}/{name}: not written")
