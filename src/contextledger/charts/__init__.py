"""Altair charts of the package's frames: what a user shares after exploring.

Each function takes a frame the package already computes (the ledger rows, the
outcome association, the gate and window what-ifs, a replayed window's
timeline) and returns a chart with a title and axis titles a newcomer can read.
:func:`save_chart` writes one as PNG or SVG for slides (vl-convert, no browser).
"""

from contextledger.charts.export import chart_images, draw_offline, save_chart
from contextledger.charts.labels import _overlap, place_labels
from contextledger.charts.ledger import (
    GATE_POINTS,
    LABELS_SHOWN,
    NEVER_USED_SHOWN,
    OUTCOME_FACETS_PER_ROW,
    PIECES_SHOWN,
    earn_rate_chart,
    gate_chart,
    gate_touched,
    never_used,
    outcome_chart,
)
from contextledger.charts.style import GATE_FLOOR, KIND_COLOURS, TIMELINE_COLOURS
from contextledger.charts.window import (
    ROLE_COLOURS,
    TIMELINE_CALLS,
    TIMELINE_TURNS,
    compare_chart,
    policy_chart,
    timeline_chart,
)

__all__ = [
    "GATE_FLOOR",
    "GATE_POINTS",
    "KIND_COLOURS",
    "LABELS_SHOWN",
    "NEVER_USED_SHOWN",
    "OUTCOME_FACETS_PER_ROW",
    "PIECES_SHOWN",
    "ROLE_COLOURS",
    "TIMELINE_CALLS",
    "TIMELINE_COLOURS",
    "TIMELINE_TURNS",
    "_overlap",
    "chart_images",
    "compare_chart",
    "draw_offline",
    "earn_rate_chart",
    "gate_chart",
    "gate_touched",
    "never_used",
    "outcome_chart",
    "place_labels",
    "policy_chart",
    "save_chart",
    "timeline_chart",
]
