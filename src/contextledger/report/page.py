"""The page itself: its charts, the HTML rendered from ``template.html`` with the
chart script inlined, and the files written beside it (CSVs, each chart as SVG and PNG).
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from contextledger.ledger.stats import ledger_csv_rows, outcomes_text, used_via_text
from contextledger.read.otel import RUNNER_KIND as TRACE_RUNNER
from contextledger.read.snapshot_files import SNAPSHOT_SUFFIXES
from contextledger.report.advice import NEARLY_ALL_FACTS, findings
from contextledger.report.data import Progress, _quiet, collect  # noqa: F401
from contextledger.report.differences import DIFFERENCES, HEADERS
from contextledger.report.figures import (  # noqa: F401
    CHART_NAMES,
    build_charts,
    chart_specs,
    spec_of,
)
from contextledger.report.frames import (
    accounting_comparison,
    gate_rows,
    refused_groups,
    refused_runs,
)
from contextledger.report.model import ReportData, _shown
from contextledger.report.script import _bundle_soon
from contextledger.window.audit import CachePrices

#: Ledger rows the page's table lists (worst first); ``ledger.csv`` beside it has them all.
LEDGER_ROWS_SHOWN = 300
#: Unreadable inputs, copies and unreplayed runs the page lists, each (the rest counted).
PROBLEMS_LISTED = 50
#: The files :func:`write_report` writes beside the page, by what they hold.
LEDGER_CSV, REFUSED_CSV = "ledger.csv", "refused-runs.csv"


#: Outcome labels a ledger row of the page names (those the most of its runs carried).
LABELS_PER_ROW = 6


def _ledger_rows(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """The ledger's rows with the nested and per-signal columns as short text; a piece
    seen under thousands of labels names the :data:`LABELS_PER_ROW` most carried."""
    out = []
    labels = pl.col("outcomes").list.len()
    most = pl.col("outcomes").list.eval(
        pl.element().sort_by(
            pl.element().struct.field("runs"), descending=True, maintain_order=True
        )
    )
    texts = rows.with_columns(
        used_via=used_via_text(),
        outcome_text=pl.when(labels > LABELS_PER_ROW)
        .then(
            pl.concat_str(
                rows.select(outcomes=most.list.head(LABELS_PER_ROW))
                .select(outcomes_text())
                .to_series(),
                pl.format(" and {} more labels", labels - LABELS_PER_ROW),
            )
        )
        .otherwise(outcomes_text()),
    )
    for row in texts.to_dicts():
        low, high = row["earn_rate_low"], row["earn_rate_high"]
        out.append(
            {
                **row,
                "interval": "" if low is None else f"{_bound(low)} to {_bound(high)}",
                "idle": row["judged"] and row["used"] == 0,
            }
        )
    return out


def _bound(share: float) -> str:
    """An interval's bound as a percentage that never rounds to the ends: 0 < 0.004% is
    "<0.1%", not "0.0%", which reads as certain."""
    if 0 < share < 0.001:
        return "<0.1%"
    if 0.999 < share < 1:
        return ">99.9%"
    return f"{share:.1%}"


def _ledger_csv(rows: pl.DataFrame) -> str:
    """Every ledger row as ``ledger --format csv`` writes it, worst first: the page's
    table lists the first :data:`LEDGER_ROWS_SHOWN`."""
    return ledger_csv_rows(rows).write_csv()


def _refused_csv(data: ReportData) -> str | None:
    """Every run an accounting refused, one a line (None when none was): the page
    groups them by reason."""
    parts = [refused_runs(data.tables).with_columns(accounting=pl.lit(data.tables.mode))]
    if data.reference is not None and data.tables.mode != "reference":
        parts.append(refused_runs(data.reference).with_columns(accounting=pl.lit("reference")))
    refused = pl.concat(parts)
    if refused.height == 0:
        return None
    return refused.select(
        "accounting", "run_id", "runner_kind", "model_call_count", "refused_reason", "source_path"
    ).write_csv()


def _inline_markdown(text: str) -> Any:
    """Escape ``text``, then render its `code` and **bold** spans (docs/ledger.md's table)."""
    import markupsafe

    html = str(markupsafe.escape(text))
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    html = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", html)
    return markupsafe.Markup(html)


def _spec_json(spec: dict[str, Any]) -> str:
    """A chart's Vega-Lite spec as JSON safe inside a ``<script>`` element."""
    text = json.dumps(spec, ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(data: ReportData, built: dict[str, alt.TopLevelMixin] | None = None) -> str:
    """The whole page as one HTML string: styles and scripts inline, nothing fetched.

    >>> page = render_html(collect(policies=["none", "sliding:keep=6"]))
    >>> "<script src=" in page, page.count('class="chart"')
    (False, 6)
    """
    built = build_charts(data) if built is None else built
    return _render(data, {name: spec_of(chart) for name, chart in built.items()})


def _render(
    data: ReportData, specs: dict[str, dict[str, Any]], files: dict[str, str] | None = None
) -> str:
    """The page, with the charts' specs (each computed once: the exports draw them too)
    and links to the ``files`` written beside it (``ledger``, ``refused``: their names)."""
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("contextledger.report", "."),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["markdown"] = _inline_markdown
    template = environment.get_template("template.html")
    runs = pl.DataFrame(data.tables.runs)
    comparison = (
        accounting_comparison(data.reference, data.tables).to_dicts()
        if data.reference is not None
        else []
    )
    wire = data.per_run.group_by("policy", maintain_order=True).agg(pl.col("wire_violations").sum())
    policy_rows = data.per_policy.join(wire, on="policy", maintain_order="left").to_dicts()
    return template.render(
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=version("contextledger"),
        shown=_shown,
        data=data,
        findings=findings(data),
        nearly_all_facts=f"{NEARLY_ALL_FACTS:.0%}",
        runs_read=runs.height,
        ledger_rows=_ledger_rows(data.rows.head(LEDGER_ROWS_SHOWN)),
        ledger_count=data.rows.height,
        gate_rows=gate_rows(data.gate_total, data.tables.order),
        policy_rows=policy_rows,
        timeline_run=data.timeline["run_id"][0] if data.timeline.height else None,
        timeline_policy=data.timeline["policy"][0] if data.timeline.height else None,
        refused=refused_groups(data.tables).to_dicts(),
        refused_count=runs.height - int(runs["metered"].sum()) if runs.height else 0,
        traces_only=runs.height > 0 and bool(runs["runner_kind"].eq_missing(TRACE_RUNNER).all()),
        refused_reference=(
            refused_groups(data.reference).to_dicts() if data.reference is not None else None
        ),
        refused_reference_count=(
            refused_runs(data.reference).height if data.reference is not None else 0
        ),
        ledger_shown=LEDGER_ROWS_SHOWN,
        listed=PROBLEMS_LISTED,
        files=files or {},
        problems=data.tables.problems.to_pylist(),
        duplicates=data.tables.duplicates.to_pylist(),
        skipped=list(data.tables.skipped),
        empty=list(data.tables.empty),
        snapshot_suffixes=", ".join(sorted(SNAPSHOT_SUFFIXES)),
        unreplayed=data.unreplayed,
        comparison=comparison,
        comparison_differs=any(row["difference"] for row in comparison),
        differences=DIFFERENCES,
        difference_headers=HEADERS,
        charts=[(name, _spec_json(spec)) for name, spec in specs.items()],
        chart_names=list(specs),
        vega_script=_bundle_soon().result(),
        cache_prices=CachePrices(),
    )


def write_report(
    data: ReportData,
    out_dir: str | Path,
    *,
    formats: tuple[str, ...] = ("svg", "png"),
    progress: Progress | None = None,
) -> Path:
    """Write ``report.html`` into ``out_dir``, with ``ledger.csv`` (every ledger row) and
    ``refused-runs.csv`` (every refused run, when any was) beside it, and each chart as
    ``charts/NAME.svg`` / ``.png``.

    Missing folders are made; each file is written whole or not at all
    (:func:`~contextledger.output.atomic_path`). Returns the page's path. ``progress``
    is told each stage (:class:`Progress`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     page = write_report(collect(policies=["none"]), folder, formats=("svg",))
    ...     page.name, sorted(p.name for p in (page.parent / "charts").iterdir())[:2]
    ('report.html', ['earn_rate.svg', 'gates.svg'])
    """
    from altair.utils._importers import vl_version_for_vl_convert

    from contextledger.drawing import draw_all
    from contextledger.output import atomic_path

    meter = progress or _quiet()
    out = Path(out_dir)
    meter.stage("writing the page")
    # drawn in worker processes while this one writes the page (vl-convert holds the GIL):
    # the one collect started, when it draws these formats, else workers started now
    drawing, data.drawing = data.drawing, None
    try:
        specs = chart_specs(data)
    except BaseException:
        if drawing is not None:  # its worker would draw on, for nothing
            drawing.close()
        raise
    if drawing is not None and drawing.formats == tuple(formats):
        drawing.add({name: spec for name, spec in specs.items() if name not in drawing.specs})
    else:
        if drawing is not None:
            drawing.close()
        drawing = draw_all(specs, formats, vl_version=vl_version_for_vl_convert())
    with drawing:
        page = _write_page(data, out, specs)
        for done, name in enumerate(specs):
            if formats:
                meter.stage("drawing the charts", done, len(specs))
            for suffix, image in drawing.images(name).items():
                with atomic_path(out / "charts" / f"{name}.{suffix}") as temporary:
                    temporary.write_bytes(image)
    return page


def _write_page(data: ReportData, out: Path, specs: dict[str, dict[str, Any]]) -> Path:
    """Write the page and the CSVs beside it; returns the page's path."""
    from contextledger.output import write_text_atomically

    files = {"ledger": LEDGER_CSV}
    write_text_atomically(out / LEDGER_CSV, _ledger_csv(data.rows))
    refused = _refused_csv(data)
    if refused is not None:
        files["refused"] = REFUSED_CSV
        write_text_atomically(out / REFUSED_CSV, refused)
    else:  # a report written here before may have left one: it is not this page's
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (out / REFUSED_CSV).unlink()
    return write_text_atomically(out / "report.html", _render(data, specs, files))
