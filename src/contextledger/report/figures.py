"""The page's charts, built from what :func:`~contextledger.report.data.collect` computes.

The ledger's charts (:data:`LEDGER_CHARTS`) need only the ledger, the outcomes and the
gates, known before any run is replayed: the report builds them then and has them drawn
while the runs are replayed; the window charts follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import altair as alt
import polars as pl

from contextledger import charts
from contextledger.jobs.compare import comparison_table

if TYPE_CHECKING:
    from contextledger.report.model import ReportData

#: Chart names, in the order the page shows them, and the file names they export to.
CHART_NAMES = ("earn_rate", "outcomes", "gates", "policies", "policy_cost", "timeline")
#: The charts drawn from the ledger, the outcomes and the gates alone.
LEDGER_CHARTS = CHART_NAMES[:3]


def ledger_charts(
    rows: pl.DataFrame,
    association: pl.DataFrame,
    gate_pieces: pl.DataFrame,
    *,
    labels_read: int,
    min_offers: int,
) -> dict[str, alt.TopLevelMixin]:
    """The charts of :data:`LEDGER_CHARTS` with something to draw, in that order."""
    drawable = {
        "earn_rate": rows.height > 0,
        "outcomes": association.height > 0,
        "gates": charts.gate_touched(gate_pieces).height > 0,
    }
    build: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "earn_rate": lambda: charts.earn_rate_chart(rows, min_offers=min_offers),
        "outcomes": lambda: charts.outcome_chart(association, label_count=labels_read),
        "gates": lambda: charts.gate_chart(gate_pieces),
    }
    return {name: build[name]() for name in LEDGER_CHARTS if drawable[name]}


def build_charts(data: ReportData) -> dict[str, alt.TopLevelMixin]:
    """The page's charts by name, in :data:`CHART_NAMES` order; one with nothing to draw
    (no outcome labels, no piece the gates touched, no run) is left out."""
    built = ledger_charts(
        data.rows,
        data.association,
        data.gate_pieces,
        labels_read=data.labels_read,
        min_offers=data.min_offers,
    )
    return built | _window_charts(data)


def _window_charts(data: ReportData) -> dict[str, alt.TopLevelMixin]:
    """The charts after :data:`LEDGER_CHARTS` with something to draw, in order."""
    from contextledger.report.advice import named_policy  # advice imports data, which imports this

    drawable = {
        "policies": data.per_run.height > 0,
        "policy_cost": data.audit.height > 0,
        "timeline": data.timeline.height > 0,
    }
    build: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "policies": lambda: charts.policy_chart(data.per_run, named=named_policy(data)),
        "policy_cost": lambda: charts.compare_chart(
            comparison_table(data.audit, data.compared or data.policies),
            named=named_policy(data),
        ),
        "timeline": lambda: charts.timeline_chart(data.timeline),
    }
    return {name: build[name]() for name in drawable if drawable[name]}


def spec_of(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """``chart``'s Vega-Lite spec, unvalidated: Altair's own ``to_dict`` checks it against
    the Vega-Lite JSON schema each time, more than half its cost (0.1 s of the corpus's
    report), for the charts this package builds; the tests validate them instead
    (tests/test_report.py), and the spec is the same dict either way.

    >>> spec_of(alt.Chart(pl.DataFrame({"x": [1]})).mark_point().encode(x="x:Q"))["mark"]
    {'type': 'point'}
    """
    return chart.to_dict(validate=False)


def chart_specs(data: ReportData) -> dict[str, dict[str, Any]]:
    """Each chart's Vega-Lite spec, in :data:`CHART_NAMES` order: those
    :func:`~contextledger.report.data.collect` built early (``data.chart_specs``) as
    they were, the others built now."""
    early = data.chart_specs
    if not early:
        return {name: spec_of(chart) for name, chart in build_charts(data).items()}
    later = _window_charts(data)
    specs = {**early, **{name: spec_of(chart) for name, chart in later.items()}}
    return {name: specs[name] for name in CHART_NAMES if name in specs}
