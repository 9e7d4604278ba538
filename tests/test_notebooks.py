"""The notebooks run top to bottom against the sample, so they never rot, and are stored
without outputs, so a diff shows only what someone wrote."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_are_there():
    assert [path.name for path in NOTEBOOKS] == [
        "01-ledger-tour.ipynb",
        "02-policy-whatif.ipynb",
        "03-archive-at-scale.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_notebook_is_stored_without_outputs(path: Path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_notebook_runs_top_to_bottom(path: Path, monkeypatch: pytest.MonkeyPatch):
    # The kernel spec starts "python": make it this interpreter, with the package installed.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert errors == []
