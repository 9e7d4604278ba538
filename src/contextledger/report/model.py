"""What the page shows, computed once by :func:`~contextledger.report.data.collect`:
:class:`ReportData`, read by the findings, the charts and the page alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from contextledger.archive.location import uri_scheme
from contextledger.drawing import Drawing
from contextledger.ledger.stats import DEFAULT_MIN_OFFERS
from contextledger.tables.build import RunTables
from contextledger.window.audit import AUDIT_SCHEMA


@dataclass
class ReportData:
    """Every frame the page shows, computed once."""

    inputs: list[str]
    tables: RunTables
    rows: pl.DataFrame
    #: The outcome association of the labels the chart draws (:func:`shown_association`).
    association: pl.DataFrame
    gate_pieces: pl.DataFrame
    gate_total: pl.DataFrame
    per_run: pl.DataFrame
    per_policy: pl.DataFrame
    policies: list[str]
    timeline: pl.DataFrame
    standings_from: str | None
    outcomes_from: str | None
    reference: RunTables | None = None
    #: Runs read whose message stream could not be (path, line, run_id, reason): in the
    #: ledger, left out of the window policies.
    unreplayed: list[dict[str, Any]] = field(default_factory=list)
    #: The audit of every (run, policy) (:func:`~contextledger.window.audit_arrays.audit_table`).
    audit: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=AUDIT_SCHEMA))
    #: The audited policies in order: ``policies``, then the other frameworks' compared.
    compared: list[str] = field(default_factory=list)
    min_offers: int = DEFAULT_MIN_OFFERS
    #: Distinct outcome labels on metered runs (the chart draws the most carried).
    labels_read: int = 0
    bundled: bool = False
    #: Over an archive: the outcomes files its stored labels came from.
    stored_labels_from: list[str] = field(default_factory=list)
    #: Why the window policies (and the timeline) are left out: None when they are shown.
    windows_note: str | None = None
    #: A line per compared policy left out, and why (over an archive: those reading
    #: tool outputs' text, :func:`~contextledger.window.audit.without_tool_text`).
    policies_left_out: list[str] = field(default_factory=list)
    #: The ledger's chart specs :func:`collect` built early to have them drawn while the
    #: runs were replayed (its ``draw``), by name; the page shows these very specs.
    chart_specs: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: Where they are being drawn; :func:`~contextledger.report.write_report` takes it.
    drawing: Drawing | None = field(default=None, repr=False, compare=False)

    def labels_text(self) -> str:
        """Where the outcome labels came from, and which they are, for the page's header
        (Markdown: names in backticks)."""
        sources = [f"`{_shown(self.outcomes_from)}`"] if self.outcomes_from else []
        if self.stored_labels_from:
            files = ", ".join(f"`{_shown(name)}`" for name in self.stored_labels_from)
            sources.append(f"the archive's stored labels (from {files})")
        if not sources:
            return "none given"
        names = sorted(self.tables.outcomes.column("label").unique().to_pylist())
        listed = ", ".join(f"`{name}`" for name in names[:8])
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        return f"{' and '.join(sources)}: {listed or 'no label'}{more}"

    def command(self) -> str:
        """The command line that regenerates this page."""
        if self.bundled:
            return "contextledger report -o DIR"
        parts = ["contextledger report", *map(_shown, self.inputs)]
        if self.outcomes_from:
            parts.append(f"--outcomes {_shown(self.outcomes_from)}")
        if self.standings_from:
            parts.append(f"--standings {_shown(self.standings_from)}")
        return " ".join([*parts, "-o DIR"])


def _shown(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies inside it; a URI as given."""
    if uri_scheme(str(path)) is not None:
        return str(path)
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
