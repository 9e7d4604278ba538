"""Charts as files and in notebooks, drawn without a browser (vl-convert)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt


def draw_offline() -> None:
    """Draw Altair charts in Jupyter as SVG made in the kernel (vl-convert, as the
    report's exports): Altair's default renderer loads Vega from a public CDN, so on an
    offline or locked-down machine, and in a notebook exported with ``jupyter nbconvert
    --to html``, every chart showed "Error loading script". Importing this module calls
    it unless a renderer was already chosen; ``alt.renderers.enable("default")`` brings
    back the interactive (online) one.

    >>> draw_offline()
    >>> alt.renderers.active
    'svg'
    """
    alt.renderers.enable("svg")


if alt.renderers.active == "default":
    draw_offline()


def save_chart(chart: alt.TopLevelMixin, path: str | Path, *, scale: float = 2.0) -> Path:
    """Write ``chart`` as PNG or SVG (by the file's suffix) for slides; no browser needed.

    >>> import tempfile
    >>> import polars as pl
    >>> chart = alt.Chart(pl.DataFrame({"x": [1, 2]})).mark_point().encode(x="x:Q")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_chart(chart, f"{folder}/x.svg").read_text()[:4]
    '<svg'
    """
    path = Path(path)
    kind = path.suffix[1:]
    if kind not in ("svg", "png"):
        msg = f"{path}: save a chart as .png or .svg"
        raise ValueError(msg)
    path.write_bytes(chart_images(chart.to_dict(), (kind,), scale=scale)[kind])
    return path


def chart_images(
    spec: dict[str, Any], formats: Sequence[str], *, scale: float = 2.0
) -> dict[str, bytes]:
    """A chart's Vega-Lite ``spec`` drawn as each of ``formats`` (``svg``, ``png``).

    Vega lays the chart out once, as SVG; the PNG is that SVG rasterized (the bytes
    vl-convert's own PNG export gives, at half the cost).

    >>> import polars as pl
    >>> spec = alt.Chart(pl.DataFrame({"x": [1]})).mark_point().encode(x="x:Q").to_dict()
    >>> sorted(chart_images(spec, ("png", "svg")))
    ['png', 'svg']
    """
    from altair.utils._importers import vl_version_for_vl_convert

    from contextledger.drawing import draw

    return draw(spec, formats, scale=scale, vl_version=vl_version_for_vl_convert())
