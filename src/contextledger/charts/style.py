"""What every chart shares: titles, colours, short count axes, numbers as text."""

from __future__ import annotations

import altair as alt
import polars as pl

#: Colours per piece kind, the same in every chart.
KIND_COLOURS = {"tool": "#4c78a8", "injection": "#f58518", "skill": "#54a24b"}
#: Colours per window-timeline cell status, in legend order.
TIMELINE_COLOURS = {
    "kept": "#c7e9c0",
    "pinned": "#3182bd",
    "refused": "#fdae6b",
    "dropped": "#de2d26",
    "dropped earlier": "#f0f0f0",
}
#: agentfootprint's gate floor: a judged piece earning less than this is demoted.
GATE_FLOOR = 0.05

#: A count axis with short labels (2k, 40M) and a plain 0, whole numbers only.
_SHORT_AXIS = alt.Axis(
    tickCount=4, tickMinStep=1, labelExpr="datum.value == 0 ? '0' : format(datum.value, '~s')"
)


def _kind_scale(kinds: pl.Series) -> alt.Scale:
    """The kind colours, the legend naming only the kinds drawn (runs recorded as
    traces offer tools only: a legend of skills and injections would mislead)."""
    present = set(kinds.to_list())
    domain = [kind for kind in KIND_COLOURS if kind in present] or list(KIND_COLOURS)
    return alt.Scale(domain=domain, range=[KIND_COLOURS[kind] for kind in domain])


def _title(text: str, subtitle: str | list[str]) -> alt.TitleParams:
    return alt.TitleParams(
        text,
        subtitle=subtitle,
        anchor="start",
        fontSize=15,
        subtitleFontSize=12,
        subtitleColor="#555",
    )


def _largest_float(values: pl.Series) -> float:
    """The largest of ``values``, nulls and NaN left out (0 when there is none)."""
    found = pl.DataFrame({"v": values}).select(pl.col("v").fill_nan(None).max()).item()
    return float(found or 0.0)


def _largest(values: pl.Series) -> int:
    """The largest of ``values`` (0 when there is none)."""
    return int(pl.DataFrame({"v": values}).select(pl.col("v").max()).item() or 0)


def _thousands(column: str | pl.Expr) -> pl.Expr:
    """Whole numbers as text with thousands separators (1,234,567), for the labels."""
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.map_elements(lambda value: f"{value:,}", return_dtype=pl.String)
