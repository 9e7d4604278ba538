"""Every frame the report shows, computed once: :func:`collect`, giving a
:class:`~contextledger.report.model.ReportData`.

The ledger and the gates from the tables; the window policies replayed and audited
(spread over worker processes from
:data:`~contextledger.jobs.compare.POOL_FROM_RUNS` runs); one run's timeline.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from contextledger import charts, progress
from contextledger.archive.tables import ArchiveTables, archive_tables
from contextledger.archive.windows import (
    runs_without_streams,
    stream_batches,
    unreplayable_runs,
    window_batches,
)
from contextledger.drawing import Drawing
from contextledger.jobs.compare import (
    FRAMEWORK_DEFAULTS,
    POOL_FROM_RUNS,
    parse_compared,
    replay_and_audit,
    replay_and_audit_tables,
    spread_batches,
)
from contextledger.jobs.whatif import WhatIfInputs, read_with_tables
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.gates import gate_what_if
from contextledger.ledger.stats import (
    DEFAULT_MIN_OFFERS,
    outcome_association,
    with_uncertainty,
)
from contextledger.processes import map_ahead
from contextledger.read.bundled import sample
from contextledger.read.messages import RunMessages
from contextledger.read.snapshot_files import display_path
from contextledger.report.frames import TIMELINE_SCHEMA, timeline_frame
from contextledger.report.model import ReportData
from contextledger.report.script import _bundle_soon
from contextledger.tables import schema
from contextledger.tables.build import RunTables
from contextledger.tables.sidecars import load_outcomes
from contextledger.tables.standings import load_standings
from contextledger.window.audit import AnyPolicy, without_tool_text
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
#: What ``contextledger compare`` and the report's cost chart compare unless told
#: otherwise: agentfootprint's policies above, then one spec per other framework's.
COMPARE_POLICIES = (*DEFAULT_POLICIES, *FRAMEWORK_DEFAULTS)


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
    draw: Sequence[str] = (),
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
    :data:`~contextledger.jobs.compare.POOL_FROM_RUNS` runs; the rows are the same
    either way. ``draw`` (chart formats, as :func:`~contextledger.report.write_report`
    will be given them): the ledger's charts are built as soon as the gates are known
    and drawn, in a worker process, while the runs are replayed (``write_report`` hands
    that worker the rest).

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

    association, labels_read = shown_association(tables), _label_count(tables)
    chart_specs, drawing = _drawn_early(
        draw, rows, association, gate_pieces, labels_read=labels_read, min_offers=min_offers
    )
    try:
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
    except BaseException:
        if drawing is not None:
            drawing.close()
        raise
    return ReportData(
        inputs=[display_path(name) for name in names],
        tables=tables,
        rows=rows,
        association=association,
        labels_read=labels_read,
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
        chart_specs=chart_specs,
        drawing=drawing,
    )


def _drawn_early(
    formats: Sequence[str],
    rows: pl.DataFrame,
    association: pl.DataFrame,
    gate_pieces: pl.DataFrame,
    *,
    labels_read: int,
    min_offers: int,
) -> tuple[dict[str, dict[str, Any]], Drawing | None]:
    """The ledger's chart specs, handed to a drawing started now (one worker process:
    vl-convert starts once, and these are drawn while the runs are replayed); none
    without ``formats``."""
    if not formats:
        return {}, None
    from altair.utils._importers import vl_version_for_vl_convert

    from contextledger.drawing import start_drawing
    from contextledger.report.figures import ledger_charts, spec_of

    built = ledger_charts(
        rows, association, gate_pieces, labels_read=labels_read, min_offers=min_offers
    )
    specs = {name: spec_of(chart) for name, chart in built.items()}
    drawing = start_drawing(formats, vl_version=vl_version_for_vl_convert())
    drawing.add(specs)
    return specs, drawing


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

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.tables.sidecars import load_outcomes
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
    worker rebuilds its streams), or the snapshots' streams
    (:func:`~contextledger.jobs.compare.spread_batches`). The rows are those of one
    process replaying them all (each run is replayed alone)."""
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
        standing_rows = [*inputs.standings, *given]
        calls = (
            (streams, parsed, audited, held)
            for streams, held in spread_batches(inputs.streams, standing_rows, workers)
        )
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
