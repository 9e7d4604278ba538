"""One self-contained HTML page that answers the users' questions about a batch of runs.

:func:`collect` computes every frame the page shows (ledger, outcomes, gates,
window policies, one run's timeline, refused runs, the reference's numbers);
:func:`write_report` renders the page with the charts' JavaScript inlined, so it
opens offline, and exports each chart as SVG and PNG for slides.

The package holds one idea a module: :mod:`~contextledger.report.data` (what the page
shows, computed), :mod:`~contextledger.report.advice` (the findings' sentences),
:mod:`~contextledger.report.page` (the charts, the HTML and the files beside it),
:mod:`~contextledger.report.script` (the charts' script, bundled once), and
:mod:`~contextledger.report.frames` (the frames no other module computes).

>>> data = collect()  # the bundled sample
>>> sorted(build_charts(data))
['earn_rate', 'gates', 'outcomes', 'policies', 'policy_cost', 'timeline']
"""

from __future__ import annotations

from contextledger.read.bundled import Sample, sample
from contextledger.report.advice import NEARLY_ALL_FACTS, findings, named_policy, recommendation
from contextledger.report.data import (
    COMPARE_POLICIES,
    DEFAULT_POLICIES,
    FRAMEWORK_DEFAULTS,
    Progress,
    collect,
    shown_association,
)
from contextledger.report.model import ReportData
from contextledger.report.page import CHART_NAMES, build_charts, render_html, write_report

__all__ = [
    "CHART_NAMES",
    "COMPARE_POLICIES",
    "DEFAULT_POLICIES",
    "FRAMEWORK_DEFAULTS",
    "NEARLY_ALL_FACTS",
    "Progress",
    "ReportData",
    "Sample",
    "build_charts",
    "collect",
    "findings",
    "named_policy",
    "recommendation",
    "render_html",
    "sample",
    "shown_association",
    "write_report",
]
