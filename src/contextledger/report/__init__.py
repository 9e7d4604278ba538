"""One self-contained HTML page that answers the users' questions about a batch of runs.

:func:`collect` computes every frame the page shows (ledger, outcomes, gates,
window policies, one run's timeline, refused runs, the reference's numbers);
:func:`write_report` renders the page with the charts' JavaScript inlined, so it
opens offline, and exports each chart as SVG and PNG for slides.

>>> data = collect()  # the bundled sample
>>> sorted(build_charts(data))
['earn_rate', 'gates', 'outcomes', 'policies', 'policy_cost', 'timeline']
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from contextledger import charts
from contextledger.archive.location import uri_scheme
from contextledger.archive.tables import (
    ArchiveTables,
    archive_tables,
    stream_batches,
    unreplayable_runs,
)
from contextledger.jobs.compare import FRAMEWORK_DEFAULTS, comparison_table, parse_compared
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.gates import describe_total, gate_what_if
from contextledger.ledger.stats import (
    DEFAULT_MIN_OFFERS,
    outcome_association,
    outcomes_text,
    used_via_text,
    with_uncertainty,
)
from contextledger.read.bundled import Sample, sample
from contextledger.read.messages import RunMessages
from contextledger.read.snapshot import SNAPSHOT_SUFFIXES, display_path
from contextledger.report.differences import DIFFERENCES, HEADERS
from contextledger.report.frames import (
    TIMELINE_SCHEMA,
    accounting_comparison,
    refused_runs,
    timeline_frame,
)
from contextledger.tables.build import RunTables, load_outcomes, read_runs
from contextledger.tables.standings import load_standings
from contextledger.window.audit import AUDIT_SCHEMA, CachePrices, audit_table, wire_frame
from contextledger.window.standings import timelines
from contextledger.window.whatif import parse_policies, per_policy, whatif_table

#: Window policies the report compares unless told otherwise: no window; agentfootprint
#: 9.62's sliding window (recency pin only); the same with the newer fact pin; a tighter
#: window; a token budget.
DEFAULT_POLICIES = (
    "none",
    "sliding:keep=6,ledger_facts=0",
    "sliding:keep=6",
    "sliding:keep=3",
    "token_budget:threshold=500",
)
#: What ``contextledger compare`` and the report's cost chart compare unless told
#: otherwise: agentfootprint's policies above, then one spec per other framework's.
COMPARE_POLICIES = (*DEFAULT_POLICIES, *FRAMEWORK_DEFAULTS)
#: Chart names, in the order the page shows them, and the file names they export to.
CHART_NAMES = ("earn_rate", "outcomes", "gates", "policies", "policy_cost", "timeline")


@dataclass
class ReportData:
    """Every frame the page shows, computed once."""

    inputs: list[str]
    tables: RunTables
    rows: pl.DataFrame
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
    #: The audit of every (run, policy) (:func:`~contextledger.window.audit.audit_table`).
    audit: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=AUDIT_SCHEMA))
    #: The audited policies in order: ``policies``, then the other frameworks' compared.
    compared: list[str] = field(default_factory=list)
    min_offers: int = DEFAULT_MIN_OFFERS
    bundled: bool = False

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


def collect(
    paths: list[str | Path] | None = None,
    *,
    outcomes: str | Path | None = None,
    standings: str | Path | None = None,
    policies: list[str] | tuple[str, ...] = DEFAULT_POLICIES,
    mode: str = "corrected",
    timeline_run: str | None = None,
    timeline_policy: str | None = None,
    compare_reference: bool = True,
    min_offers: int = DEFAULT_MIN_OFFERS,
    frameworks: Sequence[str] = FRAMEWORK_DEFAULTS,
) -> ReportData:
    """Read the runs under ``paths`` (default: the bundled sample, with its outcomes and
    standings) and compute what the report shows.

    ``timeline_run`` / ``timeline_policy`` pick the run and policy of the window
    timeline (default: the windowed policy keeping the most facts for the answer, and
    the run it removed most from). ``compare_reference`` also reads the runs under
    the reference accounting, for the page's comparison. ``frameworks`` (other
    frameworks' policy specs) are audited beside ``policies`` for the cost chart only.

    >>> data = collect(policies=["none", "sliding:keep=3"])
    >>> data.per_policy["policy"].to_list(), data.timeline["run_id"][0]
    (['none', 'sliding:keep=3'], 's0001-fact-bench')
    """
    bundled = not paths
    if not paths:
        found = sample()
        paths = [found.runs]
        outcomes = found.outcomes if outcomes is None else outcomes
        standings = found.standings if standings is None else standings
    parsed = parse_policies(policies)
    others = parse_compared(frameworks) if frameworks else []
    audited_policies = parsed + [pair for pair in others if pair[0] not in dict(parsed)]
    names = [str(path) for path in paths]
    archived = archive_tables(names, mode)
    tables = archived if archived is not None else read_runs(paths, mode=mode)
    if timeline_run is not None and timeline_run not in tables.runs.column("run_id").to_pylist():
        msg = f"--timeline-run {timeline_run!r}: no such run among the inputs"  # before the work
        raise ValueError(msg)
    if outcomes is not None:
        tables = tables.with_outcomes(load_outcomes(outcomes))
    rows = with_uncertainty(compute_ledger(tables).rows(), min_offers=min_offers)
    gate_pieces, gate_total = gate_what_if(tables, min_offers=min_offers)
    reference = None
    if compare_reference and mode != "reference":
        reference = archive_tables(names, "reference") or read_runs(paths, mode="reference")

    given = load_standings(standings).to_pylist() if standings is not None else []
    batches, unreplayed = (
        _archive_batches(archived) if archived is not None else _snapshot_batches(paths, tables)
    )

    def replayed(
        streams: list[RunMessages], standing_rows: list[dict[str, Any]]
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        per_run = whatif_table(streams, parsed, standing_rows)
        audited = audit_table(streams, audited_policies, standing_rows)
        wire = wire_frame(audited)
        joined = per_run.join(wire, on=["run_id", "policy"], how="left", maintain_order="left")
        return joined, audited

    parts = [replayed(streams, [*held, *given]) for streams, held in batches()] or [
        replayed([], [])
    ]
    per_run = pl.concat(part for part, _ in parts)
    audited = pl.concat(audit for _, audit in parts)

    label, run_id = _timeline_choice(per_run, parsed, timeline_policy, timeline_run)
    timeline = pl.DataFrame(schema=TIMELINE_SCHEMA)
    if run_id is not None:
        chosen = [
            (stream, [*snapshot_standings, *given])
            for streams, snapshot_standings in batches(run_id)
            for stream in streams
            if stream.run_id == run_id
        ]
        if not chosen:
            msg = f"--timeline-run {run_id!r}: no such run among the inputs"
            raise ValueError(msg)
        stream, standing_rows = chosen[0]
        known = timelines(standing_rows).get(run_id)
        timeline = timeline_frame(stream, dict(parsed)[label], known.at if known else None)
    return ReportData(
        inputs=[display_path(name) for name in names],
        tables=tables,
        rows=rows,
        association=outcome_association(tables),
        gate_pieces=gate_pieces,
        gate_total=gate_total,
        per_run=per_run,
        per_policy=per_policy(per_run),
        audit=audited,
        policies=[label for label, _ in parsed],
        compared=[label for label, _ in audited_policies],
        timeline=timeline,
        standings_from=display_path(standings) if standings is not None else None,
        outcomes_from=display_path(outcomes) if outcomes is not None else None,
        reference=reference,
        unreplayed=unreplayed,
        min_offers=min_offers,
        bundled=bundled,
    )


#: Message streams and snapshot standings, a batch at a time; given a run id, that run's.
Batches = Callable[..., Iterator[tuple[list[RunMessages], list[dict[str, Any]]]]]


def _snapshot_batches(
    paths: list[str | Path], tables: RunTables
) -> tuple[Batches, list[dict[str, Any]]]:
    """The snapshots' streams, read once and kept (the timeline takes one of them), and
    the runs read whose stream could not be (unreadable inputs the tables name)."""
    inputs = read_inputs(list(paths))

    def batches(run_id: str | None = None) -> Iterator[tuple[list[RunMessages], list[Any]]]:
        yield inputs.streams, inputs.standings

    named = {(p["path"], p["line"], p["run_id"]) for p in tables.problems.to_pylist()}
    unreplayed = [
        asdict(problem)
        for problem in inputs.problems
        if (problem.path, problem.line, problem.run_id) not in named
    ]
    return batches, unreplayed


def _archive_batches(tables: ArchiveTables) -> tuple[Batches, list[dict[str, Any]]]:
    """The archive's streams, read a batch at a time each time they are asked for, and
    the selected runs archived without one."""

    def batches(run_id: str | None = None) -> Iterator[tuple[list[RunMessages], list[Any]]]:
        selection = (
            tables.selection if run_id is None else replace(tables.selection, run_ids=(run_id,))
        )
        yield from stream_batches(tables.archive, selection)

    return batches, unreplayable_runs(tables.archive, tables.selection)


def _timeline_choice(
    per_run: pl.DataFrame,
    parsed: list[tuple[str, Any]],
    policy: str | None,
    run_id: str | None,
) -> tuple[str, str | None]:
    """The (policy label, run) the timeline shows; no run when nothing was read."""
    if policy is not None:
        label = parse_policies([policy])[0][0]
        if label not in dict(parsed):
            msg = f"--timeline-policy {policy!r} is not among the compared policies"
            raise ValueError(msg)
    else:
        windowed = [label for label, p in parsed if p.kind != "none"] or [parsed[0][0]]
        facts = (
            per_run.filter(pl.col("policy").is_in(windowed))
            .group_by("policy", maintain_order=True)
            .agg(pl.col("answer_facts_verbatim").sum())
            .sort("answer_facts_verbatim", descending=True, maintain_order=True)
        )
        label = facts["policy"][0] if facts.height else windowed[0]
    if run_id is None:
        runs = per_run.filter(pl.col("policy") == label)
        most_removed = runs.sort("removed_messages", descending=True, maintain_order=True)
        run_id = most_removed["run_id"][0] if runs.height else None
    return label, run_id


def build_charts(data: ReportData) -> dict[str, alt.TopLevelMixin]:
    """The page's charts by name, in :data:`CHART_NAMES` order; one with nothing to draw
    (no outcome labels, no piece the gates touched, no run) is left out."""
    drawable = {
        "earn_rate": data.rows.height > 0,
        "outcomes": data.association.height > 0,
        "gates": charts.gate_touched(data.gate_pieces).height > 0,
        "policies": data.per_run.height > 0,
        "policy_cost": data.audit.height > 0,
        "timeline": data.timeline.height > 0,
    }
    build: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "earn_rate": lambda: charts.earn_rate_chart(data.rows),
        "outcomes": lambda: charts.outcome_chart(data.association),
        "gates": lambda: charts.gate_chart(data.gate_pieces),
        "policies": lambda: charts.policy_chart(data.per_run),
        "policy_cost": lambda: charts.compare_chart(
            comparison_table(data.audit, data.compared or data.policies)
        ),
        "timeline": lambda: charts.timeline_chart(data.timeline),
    }
    return {name: build[name]() for name in CHART_NAMES if drawable[name]}


def findings(data: ReportData) -> list[str]:
    """The page's opening sentences: what a reader should take away, with numbers."""
    runs = pl.DataFrame(data.tables.runs)
    metered = int(runs["metered"].sum()) if runs.height else 0
    spent = int(data.rows["approx_tokens_spent"].sum())
    out = [
        f"{runs.height} run(s) read: {metered} metered, {runs.height - metered} refused, "
        f"{data.tables.problems.num_rows} input(s) unreadable ({data.tables.mode} accounting). "
        f"{data.rows.height} context pieces were offered, ~{spent:,} approx tokens in all."
    ]
    if data.unreplayed:
        out.append(
            f"{len(data.unreplayed)} run(s) are in the ledger but not in the window policies: "
            "their message stream could not be read (listed at the end)."
        )
    idle = data.rows.filter(pl.col("judged") & (pl.col("used") == 0)).sort(
        "approx_tokens_spent", descending=True
    )
    if idle.height:
        cost = int(idle["approx_tokens_spent"].sum())
        worst = ", ".join(
            f"{row['id']} (~{row['approx_tokens_spent']:,})" for row in idle.head(3).to_dicts()
        )
        out.append(
            f"{idle.height} piece(s) offered at least {data.min_offers} times were never used: "
            f"~{cost:,} approx tokens ({cost / max(spent, 1):.1%} of all) bought nothing. "
            f"Most expensive: {worst}."
        )
    total = data.gate_total.row(0, named=True)
    if total["offers_gated"]:
        share = total["approx_tokens_saved"] / max(total["approx_tokens_spent"], 1)
        out.append(
            f"agentfootprint's ledger gates would have left out {total['offers_gated']} offers, "
            f"saving ~{total['approx_tokens_saved']:,} approx tokens ({share:.1%}), "
            f"at the cost of {total['uses_lost']} of {total['used']} uses."
        )
    policies = data.per_policy
    declared = int(policies.select(pl.col("facts_declared_total").max()).item() or 0)
    if declared:
        best = policies.sort(
            ["answer_facts_verbatim_total", "input_tokens_total"], descending=[True, False]
        ).row(0, named=True)
        out.append(
            f"Of the window policies compared, {best['policy']} brings "
            f"{best['answer_facts_verbatim_total']} of {declared} declared facts to the answer "
            f"turn for ~{best['input_tokens_total']:,} input tokens."
        )
    violations = int(data.per_run["wire_violations"].sum())
    out.append(
        "Every replayed window is one a provider accepts."
        if violations == 0
        else f"{violations} replayed window problem(s) a provider would reject (see the chart)."
    )
    return out


def _ledger_rows(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """The ledger's rows with the nested and per-signal columns as short text."""
    out = []
    texts = rows.with_columns(used_via=used_via_text(), outcome_text=outcomes_text())
    for row in texts.to_dicts():
        low, high = row["earn_rate_low"], row["earn_rate_high"]
        out.append(
            {
                **row,
                "interval": "" if low is None else f"{low:.0%} to {high:.0%}",
                "idle": row["judged"] and row["used"] == 0,
            }
        )
    return out


def _inline_markdown(text: str) -> Any:
    """Escape ``text``, then render its `code` and **bold** spans (the README's table)."""
    import markupsafe

    html = str(markupsafe.escape(text))
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    html = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", html)
    return markupsafe.Markup(html)


def _spec_json(chart: alt.TopLevelMixin) -> str:
    """The chart's Vega-Lite spec as JSON safe inside a ``<script>`` element."""
    text = json.dumps(chart.to_dict(), ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


@cache
def _vega_script() -> str:
    """Vega, Vega-Lite and vega-embed as one script, for the version Altair writes."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    return vlc.javascript_bundle("window.vegaEmbed = vegaEmbed;", vl_version_for_vl_convert())


def render_html(data: ReportData, built: dict[str, alt.TopLevelMixin] | None = None) -> str:
    """The whole page as one HTML string: styles and scripts inline, nothing fetched.

    >>> page = render_html(collect(policies=["none", "sliding:keep=6"]))
    >>> "<script src=" in page, page.count('class="chart"')
    (False, 6)
    """
    import jinja2

    built = build_charts(data) if built is None else built
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
        runs_read=runs.height,
        ledger_rows=_ledger_rows(data.rows),
        gate_text=describe_total(data.gate_total),
        policy_rows=policy_rows,
        timeline_run=data.timeline["run_id"][0] if data.timeline.height else None,
        timeline_policy=data.timeline["policy"][0] if data.timeline.height else None,
        refused=refused_runs(data.tables).to_dicts(),
        refused_reference=(
            refused_runs(data.reference).to_dicts() if data.reference is not None else None
        ),
        problems=data.tables.problems.to_pylist(),
        duplicates=data.tables.duplicates.to_pylist(),
        skipped=list(data.tables.skipped),
        snapshot_suffixes=", ".join(sorted(SNAPSHOT_SUFFIXES)),
        unreplayed=data.unreplayed,
        comparison=comparison,
        differences=DIFFERENCES,
        difference_headers=HEADERS,
        charts=[(name, _spec_json(chart)) for name, chart in built.items()],
        chart_names=list(built),
        vega_script=_vega_script(),
        cache_prices=CachePrices(),
    )


def write_report(
    data: ReportData, out_dir: str | Path, *, formats: tuple[str, ...] = ("svg", "png")
) -> Path:
    """Write ``report.html`` into ``out_dir`` and each chart as ``charts/NAME.svg`` / ``.png``.

    Missing folders are made; each file is written whole or not at all
    (:func:`~contextledger.output.atomic_path`). Returns the page's path.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     page = write_report(collect(policies=["none"]), folder, formats=("svg",))
    ...     page.name, sorted(p.name for p in (page.parent / "charts").iterdir())[:2]
    ('report.html', ['earn_rate.svg', 'gates.svg'])
    """
    from contextledger.output import atomic_path, write_text_atomically

    out = Path(out_dir)
    built = build_charts(data)
    page = write_text_atomically(out / "report.html", render_html(data, built))
    for name, chart in built.items():
        for suffix in formats:
            with atomic_path(out / "charts" / f"{name}.{suffix}") as temporary:
                charts.save_chart(chart, temporary)
    return page


__all__ = [
    "CHART_NAMES",
    "COMPARE_POLICIES",
    "DEFAULT_POLICIES",
    "ReportData",
    "Sample",
    "build_charts",
    "collect",
    "findings",
    "render_html",
    "sample",
    "write_report",
]
