"""The notebooks run top to bottom against the sample, so they never rot, and are stored
without outputs, so a diff shows only what someone wrote. Executed, their charts are
drawn in the kernel (SVG), so the notebook and its ``jupyter nbconvert --to html`` page
show them offline: nothing names a CDN (Altair's default renderer loads Vega from one,
and showed "Error loading script" wherever it cannot be reached)."""

from __future__ import annotations

import os
import re
import sys
from functools import cache
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from .conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
#: A script loaded from elsewhere, or a CDN named anywhere.
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"']?(?:https?:)?//[^\"' >]+", re.I)
CDN = re.compile(r"cdn\.jsdelivr|unpkg\.com|vega@|vega-lite@|vega-embed@", re.I)


@cache
def executed(path: Path) -> nbformat.NotebookNode:
    """The notebook run top to bottom once, by this interpreter (the package installed)."""
    bin_dir = str(Path(sys.executable).parent)
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{saved}"  # the kernel spec starts "python"
    try:
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            timeout=120,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
    finally:
        os.environ["PATH"] = saved
    return notebook


def outputs(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [output for cell in notebook.cells for output in cell.get("outputs", [])]


def remote_scripts(page: str) -> set[str]:
    return {
        match.group(0).split("src=", 1)[1].strip("\"'") for match in REMOTE_SCRIPT.finditer(page)
    }


@cache
def template_scripts() -> set[str]:
    """What nbconvert's own page loads (MathJax, require.js), with no output in it."""
    empty = nbformat.v4.new_notebook()
    return remote_scripts(HTMLExporter().from_notebook_node(empty)[0])


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
def test_a_notebook_runs_top_to_bottom(path: Path):
    errors = [output for output in outputs(executed(path)) if output.output_type == "error"]
    assert errors == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_chart_is_drawn_in_the_kernel_and_nothing_names_a_cdn(path: Path):
    notebook = executed(path)
    charts = [
        output
        for output in outputs(notebook)
        if output.get("data", {}).get("text/plain", "").startswith("alt.")
    ]
    assert charts, "each notebook draws at least one chart"
    for chart in charts:
        assert set(chart["data"]) == {"image/svg+xml", "text/plain"}
        drawn = chart["data"]["image/svg+xml"]
        assert drawn.lstrip().startswith("<svg") and "<path" in drawn
    stored = nbformat.writes(notebook)
    assert not CDN.search(stored) and "https://" not in stored


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_exported_to_html_the_charts_are_in_the_page_and_it_loads_no_chart_script(path: Path):
    notebook = executed(path)
    page, _ = HTMLExporter().from_notebook_node(notebook)
    drawn = sum(1 for output in outputs(notebook) if "image/svg+xml" in output.get("data", {}))
    # nbconvert puts each SVG in the page as a data URL (or inline): nothing to fetch.
    in_page = page.count('src="data:image/svg+xml;base64,') + page.count("<svg")
    assert drawn > 0 and in_page >= drawn
    assert not CDN.search(page)
    # nbconvert's own page may load MathJax and require.js; the outputs add nothing.
    assert remote_scripts(page) == template_scripts()


def test_the_cdn_checks_catch_altairs_default_renderer():
    import altair as alt

    chart = alt.Chart(alt.Data(values=[{"x": 1}])).mark_point().encode(x="x:Q")
    with alt.renderers.enable("default"):
        bundle = chart._repr_mimebundle_()
    html = bundle[0]["text/html"] if isinstance(bundle, tuple) else bundle["text/html"]
    assert CDN.search(html)
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            outputs=[nbformat.v4.new_output("display_data", data={"text/html": html})]
        )
    )
    page, _ = HTMLExporter().from_notebook_node(notebook)
    assert CDN.search(page) or remote_scripts(page) != template_scripts()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_result_shows_as_a_table_a_chart_or_plain_values_never_an_object_repr(path: Path):
    shown = [output for output in outputs(executed(path)) if output.output_type == "execute_result"]
    for output in shown:
        if {"text/html", "image/svg+xml", "image/png"} & set(output["data"]):
            continue
        text = output["data"]["text/plain"]
        assert not re.match(r"<?[\w.]*[A-Z]\w*[( ]", text), text[:200]  # Ledger(...), <...>
    html = [output["data"]["text/html"] for output in shown if "text/html" in output["data"]]
    summaries = sum("contextledger-summary" in page for page in html)
    assert (
        summaries
        == {"01-ledger-tour": 1, "02-policy-whatif": 0, "03-archive-at-scale": 2}[path.stem]
    )
