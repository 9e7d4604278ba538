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

import contextlib
import itertools
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO

import altair as alt
import polars as pl

from contextledger import charts, progress
from contextledger.archive.location import uri_scheme
from contextledger.archive.tables import (
    ArchiveTables,
    archive_tables,
    runs_without_streams,
    stream_batches,
    unreplayable_runs,
    window_batches,
)
from contextledger.jobs.compare import (
    FRAMEWORK_DEFAULTS,
    comparison_table,
    parse_compared,
    replay_and_audit,
    replay_and_audit_tables,
)
from contextledger.jobs.whatif import WhatIfInputs, read_with_tables
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.gates import gate_what_if
from contextledger.ledger.stats import (
    DEFAULT_MIN_OFFERS,
    ledger_csv_rows,
    outcome_association,
    outcomes_text,
    used_via_text,
    with_uncertainty,
)
from contextledger.processes import map_ahead
from contextledger.read.bundled import Sample, sample
from contextledger.read.messages import RunMessages
from contextledger.read.otel import RUNNER_KIND as TRACE_RUNNER
from contextledger.read.snapshot import SNAPSHOT_SUFFIXES, display_path
from contextledger.report.differences import DIFFERENCES, HEADERS
from contextledger.report.frames import (
    TIMELINE_SCHEMA,
    accounting_comparison,
    gate_rows,
    refused_groups,
    refused_runs,
    timeline_frame,
)
from contextledger.tables import schema
from contextledger.tables.build import RunTables, load_outcomes
from contextledger.tables.standings import load_standings
from contextledger.window.audit import AUDIT_SCHEMA, AnyPolicy, CachePrices, without_tool_text
from contextledger.window.frameworks import framework_name
from contextledger.window.policies import Policy
from contextledger.window.standings import timelines
from contextledger.window.whatif import parse_policies, per_policy

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
#: The share of the facts keeping everything brings to the answer turn that a
#: recommended window policy must bring too (:func:`recommendation`).
NEARLY_ALL_FACTS = 0.95
#: What ``contextledger compare`` and the report's cost chart compare unless told
#: otherwise: agentfootprint's policies above, then one spec per other framework's.
COMPARE_POLICIES = (*DEFAULT_POLICIES, *FRAMEWORK_DEFAULTS)
#: Ledger rows the page's table lists (worst first); ``ledger.csv`` beside it has them all.
LEDGER_ROWS_SHOWN = 300
#: Unreadable inputs, copies and unreplayed runs the page lists, each (the rest counted).
PROBLEMS_LISTED = 50
#: The files :func:`write_report` writes beside the page, by what they hold.
LEDGER_CSV, REFUSED_CSV = "ledger.csv", "refused-runs.csv"
#: From this many runs read, the replay and the audit are spread over worker processes
#: (:func:`collect`'s ``workers``): a worker's start (its imports, about 1 s of CPU)
#: pays back from about a thousand runs (the audit: 2-5 ms of CPU a run).
POOL_FROM_RUNS = 1000
#: Runs a worker replays at once from snapshots (an archive's batches are its own).
REPLAY_BATCH_RUNS = 250
#: Chart names, in the order the page shows them, and the file names they export to.
CHART_NAMES = ("earn_rate", "outcomes", "gates", "policies", "policy_cost", "timeline")


class Progress(progress.Progress):
    """The shared one-line meter (:mod:`contextledger.progress`, shown once a report has
    run :data:`~contextledger.progress.SLOW_SECONDS`) told the report's stages (reading,
    replaying, drawing): a quick report says nothing, a slow one says where it is.

    >>> import io
    >>> meter = Progress(io.StringIO(), delay=0)
    >>> meter.stage("reading", 3)
    >>> meter.close()
    >>> meter.stream.getvalue().strip()
    'report: reading 3  0 s'
    """

    def __init__(
        self,
        stream: TextIO | None,
        *,
        delay: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        delay = progress.SLOW_SECONDS if delay is None else delay
        super().__init__(stream, delay=delay, clock=clock)
        self.what: str | None = None

    def stage(self, what: str, done: int | None = None, total: int | None = None) -> None:
        """Say the report is at ``what`` (``done`` of ``total``, when counted): a new
        stage is drawn at once, a stage's next count at most five times a second."""
        if self.stream is None:
            return
        count = "" if done is None else f" {done:,}" + ("" if total is None else f"/{total:,}")
        new, now = what != self.what, self.clock()
        self.show(f"report: {what}{count}  {now - self.started:.0f} s", force=new, now=now)
        if self.drawn and new:
            self.what = what


def _quiet() -> Progress:
    return Progress(None)


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
    #: The audit of every (run, policy) (:func:`~contextledger.window.audit.audit_table`).
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
    progress: Progress | None = None,
    frameworks: Sequence[str] = FRAMEWORK_DEFAULTS,
    workers: int | None = None,
) -> ReportData:
    """Read the runs under ``paths`` (default: the bundled sample, with its outcomes and
    standings) and compute what the report shows.

    ``timeline_run`` / ``timeline_policy`` pick the run and policy of the window
    timeline (default: the windowed policy keeping the most facts for the answer, and
    the run it removed most from). ``compare_reference`` also reads the runs under
    the reference accounting, for the page's comparison. ``frameworks`` (other
    frameworks' policy specs) are audited beside ``policies`` for the cost chart only.
    ``progress`` is told each stage (:class:`Progress`). The replay and the audit are
    spread over ``workers`` processes (default: one per core) from
    :data:`POOL_FROM_RUNS` runs; the rows are the same either way.

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
    meter = progress or _quiet()
    meter.stage("reading the runs")
    stored_labels_from: list[str] = []
    windows_note: str | None = None
    policies_left_out: list[str] = []
    archived = archive_tables(names, mode)
    inputs: WhatIfInputs | None = None
    workers = workers if workers is not None else os.cpu_count() or 1
    compared = compare_reference and mode != "reference"
    reference: RunTables | None = None
    if archived is not None:
        archived.check_all()  # the report reads every table: damage anywhere leaves out
        tables: RunTables = archived
        reference = archive_tables(names, "reference") if compared else None
        if reference is not None:
            reference.check_all()
        batches, unreplayed = _archive_batches(archived)
        audited_policies, policies_left_out = without_tool_text(audited_policies)
        stored_labels_from = archived.outcome_sources()
        missing = runs_without_streams(archived.commits)
        if missing:
            windows_note = (
                f"The window policies are left out: {missing:,} archived run(s) have no "
                "message stream to replay (ingested before archives stored them, or written "
                "by synth --no-streams). Ingest the snapshots again into a new archive to "
                "compare window policies."
            )
            batches, unreplayed = _no_batches, []
    else:
        files = itertools.count(1)
        read, inputs = read_with_tables(
            paths,
            [mode, "reference"] if compared else [mode],
            each_file=lambda _: meter.stage("reading files", next(files)),
        )
        tables, reference = read[mode], read.get("reference") if compared else None
        batches, unreplayed = _snapshot_batches(inputs, tables)
    if timeline_run is not None and timeline_run not in tables.runs.column("run_id").to_pylist():
        msg = f"--timeline-run {timeline_run!r}: no such run among the inputs"  # before the work
        raise ValueError(msg)
    _bundle_soon()  # after the read pass: no worker is forked while it runs
    if outcomes is not None:
        tables = tables.with_outcomes(load_outcomes(outcomes))
    meter.stage("computing the ledger and the gates")
    rows = with_uncertainty(compute_ledger(tables).rows(), min_offers=min_offers)
    gate_pieces, gate_total = gate_what_if(tables, min_offers=min_offers)

    given = load_standings(standings).to_pylist() if standings is not None else []

    runs_read = tables.runs.num_rows
    meter.stage(f"replaying {runs_read:,} runs under {len(parsed)} window policies")
    if windows_note is not None:
        parts = []
    elif workers > 1 and runs_read >= POOL_FROM_RUNS:
        parts = _replayed_in_workers(
            archived, inputs, parsed, audited_policies, given, workers, meter
        )
    else:
        parts = [
            replay_and_audit(streams, parsed, audited_policies, [*held, *given])
            for streams, held in batches()
        ]
    parts = parts or [replay_and_audit([], parsed, audited_policies)]
    per_run = pl.concat(part for part, _ in parts)
    audited = pl.concat(audit for _, audit in parts)

    meter.stage("drawing the timeline")
    label, run_id = _timeline_choice(per_run, parsed, timeline_policy, timeline_run)
    timeline = pl.DataFrame(schema=TIMELINE_SCHEMA)
    if run_id is not None and windows_note is None:
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
        timeline = timeline_frame(
            stream,
            dict(parsed)[label],
            known.at if known else None,
            last_calls=charts.TIMELINE_CALLS,
        )
    return ReportData(
        inputs=[display_path(name) for name in names],
        tables=tables,
        rows=rows,
        association=shown_association(tables),
        labels_read=_label_count(tables),
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
        stored_labels_from=stored_labels_from,
        windows_note=windows_note,
        policies_left_out=policies_left_out,
    )


#: A label no labels file holds: the runs carrying none of the labels drawn.
_OTHER_LABEL = "\x00other"


def _carried(tables: RunTables) -> pl.DataFrame:
    """Each label on a metered run, with how many runs carried it, most first."""
    runs = pl.DataFrame(tables.runs).filter(pl.col("metered")).select("run_id")
    outcomes = pl.DataFrame(tables.outcomes).unique().join(runs, on="run_id")
    return (
        outcomes.group_by("label")
        .agg(runs=pl.len())
        .sort("runs", "label", descending=[True, False])
    )


def _label_count(tables: RunTables) -> int:
    return _carried(tables).height


def shown_association(tables: RunTables, labels: int = charts.LABELS_SHOWN) -> pl.DataFrame:
    """:func:`~contextledger.ledger.stats.outcome_association` of the ``labels`` labels
    the most runs carried: the ones the chart draws, with the same counts as over every
    label. A labels file of ids has thousands, and the association is one row per piece
    and label (10,000 pieces by 1,000 labels: ten million rows, for six drawn); the other
    labels are read as one, so every labelled run keeps its place in the denominators.

    >>> from contextledger.tables.build import read_runs, load_outcomes
    >>> tables = read_runs("data/sample").with_outcomes(load_outcomes("data/sample-outcomes.csv"))
    >>> shown = shown_association(tables, labels=1)
    >>> shown["label"].unique().to_list(), shown.equals(
    ...     outcome_association(tables).filter(pl.col("label") == "good"))
    (['good'], True)
    """
    carried = _carried(tables)
    if carried.height <= labels:
        return outcome_association(tables)
    drawn = carried["label"].head(labels)
    outcomes = pl.DataFrame(tables.outcomes).unique()
    kept = outcomes.filter(pl.col("label").is_in(drawn.implode()))
    others = (
        outcomes.select("run_id")
        .unique()
        .join(kept.select("run_id"), on="run_id", how="anti")
        .with_columns(label=pl.lit(_OTHER_LABEL))
    )
    read_as = pl.concat([kept, others.select(outcomes.columns)])
    association = outcome_association(
        RunTables(
            mode=tables.mode,
            runs=tables.runs,
            offers=tables.offers,
            uses=schema.empty(schema.USES),  # not read: the association counts offers
            outcomes=read_as.to_arrow(),
        )
    )
    return association.filter(pl.col("label") != _OTHER_LABEL)


#: Message streams and snapshot standings, a batch at a time; given a run id, that run's.
Batches = Callable[..., Iterator[tuple[list[RunMessages], list[dict[str, Any]]]]]


def _replayed_in_workers(
    archived: ArchiveTables | None,
    inputs: WhatIfInputs | None,
    parsed: list[tuple[str, Policy]],
    audited: list[tuple[str, AnyPolicy]],
    given: list[dict[str, Any]],
    workers: int,
    meter: Progress,
) -> list[tuple[pl.DataFrame, pl.DataFrame]]:
    """:func:`~contextledger.jobs.compare.replay_and_audit` of every run, spread over
    ``workers`` processes a batch at a time: an archive's batches of window tables (each
    worker rebuilds its streams), or the snapshots' streams in :data:`REPLAY_BATCH_RUNS`.
    The rows are those of one process replaying them all (each run is replayed alone)."""
    calls: Iterator[tuple[Any, ...]]
    if archived is not None:
        function: Callable[..., tuple[pl.DataFrame, pl.DataFrame]] = replay_and_audit_tables
        calls = (
            (streams, messages, [*held.to_pylist(), *given], parsed, audited)
            for streams, messages, held in window_batches(archived.archive, archived.selection)
        )
    else:
        assert inputs is not None
        function = replay_and_audit
        streams = inputs.streams
        size = max(REPLAY_BATCH_RUNS, math.ceil(len(streams) / (workers * 4)))
        standing_rows = [*inputs.standings, *given]

        def batch(first: int) -> tuple[Any, ...]:
            chosen = streams[first : first + size]
            ids = {stream.run_id for stream in chosen}
            held = [row for row in standing_rows if row["run_id"] in ids]
            return chosen, parsed, audited, held

        calls = (batch(first) for first in range(0, len(streams), size))
    parts = []
    replayed = 0
    for part in map_ahead(function, calls, workers):
        parts.append(part)
        replayed += part[0]["run_id"].n_unique()
        meter.stage(f"replaying runs under {len(parsed)} window policies", replayed)
    return parts


def _snapshot_batches(
    inputs: WhatIfInputs, tables: RunTables
) -> tuple[Batches, list[dict[str, Any]]]:
    """The snapshots' streams, read once and kept (the timeline takes one of them), and
    the runs read whose stream could not be (unreadable inputs the tables name)."""

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


def _no_batches(run_id: str | None = None) -> Iterator[tuple[list[RunMessages], list[Any]]]:
    """No stream to replay (an archive that stored none)."""
    yield from ()


def _timeline_choice(
    per_run: pl.DataFrame,
    parsed: list[tuple[str, Any]],
    policy: str | None,
    run_id: str | None,
) -> tuple[str, str | None]:
    """The (policy label, run) the timeline shows; no run when nothing was read."""
    if policy is not None:
        if framework_name(policy) is not None:
            msg = (
                f"--timeline-policy {policy!r}: the timeline is drawn under agentfootprint's "
                "policies (none, sliding, token_budget); another framework's is in the cost chart"
            )
            raise ValueError(msg)
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
        "earn_rate": lambda: charts.earn_rate_chart(data.rows, min_offers=data.min_offers),
        "outcomes": lambda: charts.outcome_chart(data.association, label_count=data.labels_read),
        "gates": lambda: charts.gate_chart(data.gate_pieces),
        "policies": lambda: charts.policy_chart(data.per_run, named=named_policy(data)),
        "policy_cost": lambda: charts.compare_chart(
            comparison_table(data.audit, data.compared or data.policies),
            named=named_policy(data),
        ),
        "timeline": lambda: charts.timeline_chart(data.timeline),
    }
    return {name: build[name]() for name in CHART_NAMES if drawable[name]}


def findings(data: ReportData) -> list[str]:
    """The page's opening sentences: what a reader should take away, with numbers."""
    runs = pl.DataFrame(data.tables.runs)
    metered = int(runs["metered"].sum()) if runs.height else 0
    spent = int(data.rows["approx_tokens_spent"].sum())
    offered = int((data.rows["offered"] > 0).sum())  # a piece only called is no offer
    out = [
        f"{runs.height:,} run(s) read: {metered:,} metered, {runs.height - metered:,} refused, "
        f"{data.tables.problems.num_rows:,} input(s) unreadable ({data.tables.mode} accounting). "
        f"{offered:,} context pieces were offered, ~{spent:,} approx tokens in all."
    ]
    never = data.rows.filter(pl.col("offered") == 0)
    if never.height:
        tools = never.filter(pl.col("kind") == "tool").height
        what = "tool(s) called" if tools == never.height else "piece(s) used"
        names = ", ".join(never["id"].head(3).to_list())
        out.append(
            f"{never.height:,} {what} but never offered: {names}"
            f"{', ...' if never.height > 3 else ''} (not counted among the offered)."
        )
    if data.unreplayed:
        out.append(
            f"{len(data.unreplayed):,} run(s) are in the ledger but not in the window policies: "
            "their message stream could not be read (listed at the end)."
        )
    idle = charts.never_used(data.rows)
    if idle.height:
        cost = int(idle["approx_tokens_spent"].sum())
        worst = ", ".join(
            f"{row['id']} (~{row['approx_tokens_spent']:,})" for row in idle.head(3).to_dicts()
        )
        out.append(
            f"{idle.height:,} piece(s) offered at least {data.min_offers} times were never used: "
            f"~{cost:,} approx tokens ({cost / max(spent, 1):.1%} of all) bought nothing. "
            f"Most expensive: {worst}."
        )
    total = data.gate_total.row(0, named=True)
    if total["offers_gated"]:
        share = total["approx_tokens_saved"] / max(total["approx_tokens_spent"], 1)
        out.append(
            f"agentfootprint's ledger gates would have left out {total['offers_gated']:,} "
            f"offers, saving ~{total['approx_tokens_saved']:,} approx tokens ({share:.1%}), "
            f"at the cost of {total['uses_lost']:,} of {total['used']:,} uses."
        )
    advice = recommendation(data)
    if advice:
        out.append(advice)
    if data.windows_note:
        out.append(data.windows_note)
        return out
    violations = int(data.per_run["wire_violations"].sum())
    ours = (
        "Every window replayed under agentfootprint's policies is one a provider accepts"
        if violations == 0
        else f"{violations:,} window(s) replayed under agentfootprint's policies would be "
        "rejected by a provider (see the window-policy chart)"
    )
    frameworks = data.audit.filter(~pl.col("policy").is_in(data.policies))
    others = (
        frameworks.group_by("policy", maintain_order=True)
        .agg(pl.col("wire_problems").sum())
        .filter(pl.col("wire_problems") > 0)
        .sort("wire_problems", descending=True, maintain_order=True)
    )
    if others.height:
        most = [f"{row['policy']} ({row['wire_problems']:,})" for row in others.head(2).to_dicts()]
        compared = frameworks["policy"].n_unique()
        ours += (
            f"; {others.height} of the other frameworks' {compared} policies would send windows "
            f"a provider rejects, most often {' and '.join(most)} wire problems "
            "(the cost chart names each)"
        )
    out.append(ours + ".")
    return out


def recommendation(data: ReportData) -> str | None:
    """The window policy a user would pick, with the trade-off in numbers.

    The baseline keeps everything (``none``; when it was not compared, the policy
    bringing the most facts). Recommended: the windowed policy with the fewest input
    tokens among those bringing at least :data:`NEARLY_ALL_FACTS` of the baseline's
    facts to the answer turn (rounded up: with 6 facts, all 6). With no fact declared
    (no standings), none is recommended: facts kept cannot be weighed. The pick weighs
    input tokens, not a prompt cache; the sentence says what the pick costs with one
    against the baseline (the audit's ``cost_with_cache``), since a window that moves
    breaks the cached prefix and may cost more than keeping everything.

    >>> advice = recommendation(collect(policies=["none", "sliding:keep=3", "sliding:keep=6"]))
    >>> advice.split(":")[0], advice.split(": ")[2]
    ('Recommended window policy', '6 of 6 declared facts (none')
    """
    return _advice(data)[0]


def named_policy(data: ReportData) -> str | None:
    """The policy the findings name (:func:`recommendation`): the one recommended, else
    the closest to it, else the cheapest; the window charts draw its row apart.

    >>> named_policy(collect(policies=["none", "sliding:keep=3", "sliding:keep=6"]))
    'sliding:keep=6'
    """
    return _advice(data)[1]


def _advice(data: ReportData) -> tuple[str | None, str | None]:
    """:func:`recommendation`'s sentence and the policy it names."""
    kinds = {label: policy.kind for label, policy in parse_policies(data.policies)}
    policies = data.per_policy.join(
        pl.DataFrame({"policy": list(kinds), "kind": list(kinds.values())}),
        on="policy",
        how="left",
        maintain_order="left",
    )
    if policies.height == 0:
        return None, None
    declared = int(policies.select(pl.col("facts_declared_total").max()).item() or 0)
    facts, tokens = "answer_facts_verbatim_total", "input_tokens_total"
    everything = policies.filter(pl.col("kind") == "none")
    if everything.height == 0:
        everything = policies.sort(facts, descending=True, maintain_order=True)
    base = everything.row(0, named=True)
    windowed = policies.filter(pl.col("kind") != "none").sort(tokens, maintain_order=True)
    if windowed.height == 0:
        return None, None
    if not declared:
        cheapest = windowed.row(0, named=True)
        return (
            "No tool result was declared a fact (give --standings, or runs whose findings "
            "ledger files them), so no window policy is recommended on the facts it keeps; "
            f"the cheapest compared, {cheapest['policy']}, sends "
            f"~{cheapest[tokens]:,} input tokens instead of ~{base[tokens]:,} "
            f"({base['policy']}{_fewer(cheapest[tokens], base[tokens])})."
            f"{_with_cache(data, cheapest['policy'], base['policy'])}"
        ), cheapest["policy"]
    needed = math.ceil(NEARLY_ALL_FACTS * base[facts] - 1e-9)
    source = "keeping everything" if base["kind"] == "none" else "the policy bringing the most"
    rule = (
        f"at least {NEARLY_ALL_FACTS:.0%} of the facts {source} ({base['policy']}) brings "
        "to the answer turn"
    )
    enough = windowed.filter(pl.col(facts) >= needed)
    if enough.height == 0:
        closest = windowed.sort(facts, descending=True, maintain_order=True).row(0, named=True)
        return (
            f"No window policy compared brings {rule} (that is, {needed:,} or more of the "
            f"{base[facts]:,} facts {base['policy']} brings): the closest, "
            f"{closest['policy']}, brings {closest[facts]:,} "
            f"({base['policy']}: {base[facts]:,}) for ~{closest[tokens]:,} input tokens "
            f"instead of ~{base[tokens]:,}{_fewer(closest[tokens], base[tokens], ' (', ')')}."
            f"{_with_cache(data, closest['policy'], base['policy'])}"
        ), closest["policy"]
    pick = enough.row(0, named=True)
    versus = (
        ""
        if pick["policy"] == base["policy"]
        else f" instead of ~{base[tokens]:,}{_fewer(pick[tokens], base[tokens], ' (', ')')}"
    )
    return (
        f"Recommended window policy: {pick['policy']}, the cheapest compared that brings "
        f"{rule}: {pick[facts]:,} of {declared:,} declared facts ({base['policy']}: "
        f"{base[facts]:,}) for ~{pick[tokens]:,} input tokens{versus}."
        f"{_with_cache(data, pick['policy'], base['policy'])}"
    ), pick["policy"]


def _with_cache(data: ReportData, policy: str, base: str) -> str:
    """What ``policy`` costs with a prompt cache against ``base`` (the audit's
    ``cost_with_cache`` summed over the runs it prices), said because the pick weighs
    input tokens only; '' when either was not audited or priced, or they are one policy.
    """
    if policy == base or data.audit.height == 0:
        return ""
    costs = data.audit.group_by("policy").agg(
        pl.col("cost_with_cache").sum(), pl.col("cost_with_cache").is_not_null().sum().alias("n")
    )
    found = {row["policy"]: row for row in costs.to_dicts()}
    if policy not in found or base not in found or not found[policy]["n"] or not found[base]["n"]:
        return ""
    mine, theirs = found[policy]["cost_with_cache"], found[base]["cost_with_cache"]
    if mine > theirs:
        return (
            f" Input tokens are not the whole cost: with a prompt cache it costs "
            f"~{mine:,.0f} against ~{theirs:,.0f} for {base} ({(mine - theirs) / theirs:.1%} "
            "more), as a window that drops or rewrites messages breaks the cached prefix "
            "(see the cost chart)."
        )
    return (
        f" With a prompt cache it costs less too: ~{mine:,.0f} against ~{theirs:,.0f} for "
        f"{base} (see the cost chart)."
    )


def _fewer(tokens: int, base: int, before: str = ", ", after: str = "") -> str:
    """How many fewer input tokens, as a share of the baseline's."""
    if not base or tokens == base:
        return ""
    share = abs(base - tokens) / base
    return f"{before}{share:.1%} {'fewer' if tokens < base else 'more'}{after}"


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
                "interval": "" if low is None else f"{low:.0%} to {high:.0%}",
                "idle": row["judged"] and row["used"] == 0,
            }
        )
    return out


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


#: The bundled script's entry point: vega-embed as a global the page calls.
_ENTRY = "window.vegaEmbed = vegaEmbed;"


@cache
def _vega_script() -> str:
    """Vega, Vega-Lite and vega-embed as one script, for the version Altair writes.

    Bundling takes seconds (longer than reading a few hundred runs), and the result
    depends only on the versions: it is kept in :func:`_script_cache` and read from
    there by later reports (rebuilt when missing or unreadable).
    """
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    from contextledger.output import write_text_atomically

    version = vl_version_for_vl_convert()
    kept = _script_cache() / f"vega-embed-{_vl_convert_version()}-{version}.js"
    try:
        text = kept.read_text(encoding="utf-8")
        if "window.vegaEmbed=" in text[-200:]:  # written whole (atomically), by us
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = vlc.javascript_bundle(_ENTRY, version)
    with contextlib.suppress(OSError):  # a read-only home: bundle again next time
        write_text_atomically(kept, text)
    return text


_bundling: Future[str] | None = None
_bundling_lock = threading.Lock()


def _bundle_soon() -> Future[str]:
    """:func:`_vega_script` on a thread of its own, started once: a machine's first
    report bundles it (seconds, outside the GIL) while the runs are replayed."""
    global _bundling
    with _bundling_lock:
        if _bundling is None:
            future: Future[str] = Future()

            def bundle() -> None:
                try:
                    future.set_result(_vega_script())
                except BaseException as error:  # handed to whoever waits for it
                    future.set_exception(error)

            threading.Thread(target=bundle, name="vega-bundle", daemon=True).start()
            _bundling = future
        return _bundling


def _vl_convert_version() -> str:
    return version("vl-convert-python")


def _script_cache() -> Path:
    """Where the bundled chart script is kept: ``$CONTEXTLEDGER_CACHE``, else
    ``$XDG_CACHE_HOME/contextledger``, else ``~/.cache/contextledger``."""
    configured = os.environ.get("CONTEXTLEDGER_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "contextledger"


def render_html(data: ReportData, built: dict[str, alt.TopLevelMixin] | None = None) -> str:
    """The whole page as one HTML string: styles and scripts inline, nothing fetched.

    >>> page = render_html(collect(policies=["none", "sliding:keep=6"]))
    >>> "<script src=" in page, page.count('class="chart"')
    (False, 6)
    """
    built = build_charts(data) if built is None else built
    return _render(data, {name: chart.to_dict() for name, chart in built.items()})


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
    specs = {name: chart.to_dict() for name, chart in build_charts(data).items()}
    # drawn in worker processes while this one writes the page (vl-convert holds the GIL)
    with draw_all(specs, formats, vl_version=vl_version_for_vl_convert()) as drawing:
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


__all__ = [
    "CHART_NAMES",
    "COMPARE_POLICIES",
    "DEFAULT_POLICIES",
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
    "write_report",
]
