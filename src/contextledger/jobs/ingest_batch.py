"""One ingest batch written: what each run read adds, and its files in the archive's layout.

Both accountings' run, offer and use tables split by partition and by first row in
the run, their piece totals and label credit, the window tables ``whatif`` replays, a
trace run's span records, and the manifest rows (run index, sources, quarantine). The
run-identity rule decides which copy of a run counts, against what is archived.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.archive import store
from contextledger.archive.manifest import (
    QUARANTINE,
    RUN_INDEX,
    SOURCES,
    archived_digests,
    archived_executions,
    commits_holding,
)
from contextledger.archive.partitions import partition_value
from contextledger.archive.store import Batch
from contextledger.archive.tables import latest_outcome_files
from contextledger.jobs.ingest_report import IngestReport, Source
from contextledger.ledger.compute import LedgerInputs, SplitRows, label_credit, piece_totals
from contextledger.read.identity import RunIdentity, put_in_slot
from contextledger.read.snapshot import ReadProblem
from contextledger.read.snapshot_files import display_path
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, TableBuilder
from contextledger.tables.files import FileRead, RunRead
from contextledger.tables.window_rows import RunWindow
from contextledger.tables.windows import messages_from_columns

#: Why a trace run archived with other spans, by a version that kept no span records
#: (or whose records could not be encoded), is not merged.
UNMERGEABLE = (
    "archived before with other spans, without the span records a merge needs (archived "
    "by an older version): not merged (ingest every file into a new archive to count "
    "its spans as one run)"
)


@dataclass(frozen=True)
class ArchivedTrace:
    """A trace run the archive holds, that spans read now belong to: where it is."""

    run_id: str
    run_order: int
    digest: str
    partition: str
    #: The number of the commit that added it (its rows are that commit's).
    commit: int


@dataclass
class SourceTally:
    """A trace file's manifest row and quarantine, added up over the batches its runs
    are written in (a range of runs at a time), written once, by the last: one row per
    file, as when every run is written at once."""

    #: The runs it added, each with its place among the trace runs (the row lists them so).
    added: list[tuple[int, str]] = field(default_factory=list)
    runs_read: int = 0
    already: int = 0
    conflicting: int = 0
    #: Its problems (quarantine rows), then its runs' conflicts, each in reading order.
    problems: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def write_batch(
    batch: Batch,
    reads: Sequence[tuple[Source, FileRead]],
    outcomes: Sequence[tuple[Source, pa.Table | None, str | None]],
    report: IngestReport,
    *,
    archived: Mapping[int, ArchivedTrace | str] | None = None,
    ranks: Mapping[int, int] | None = None,
    tallies: Mapping[str, SourceTally] | None = None,
    closing: Sequence[tuple[Source, SourceTally]] = (),
) -> list[tuple[RunRead, ArchivedTrace]]:
    """Decide what each read run adds, and write the batch's files (not yet committed).

    ``archived`` (by ``id()`` of the run read) names the trace runs assembled with spans
    the archive holds: the archived run they grew from (the same spans: already
    archived; more: the run to merge into it, returned for
    :func:`~contextledger.jobs.ingest_merge.replace_runs`), or why they cannot be merged
    (a conflict). ``ranks`` (by ``id()``) orders trace runs after the snapshots' runs
    (their first span's start time, as reading the files orders them). A read whose
    file has a tally in ``tallies`` (by display path) is added to it instead of
    writing its manifest row; ``closing``: the tallies whose rows this batch writes,
    after the others.
    """
    archive = batch.archive
    archived = archived or {}
    extended: list[tuple[RunRead, ArchivedTrace]] = []
    runs = [run for _, read in reads for run in read.runs]
    identity = RunIdentity(
        known=archived_digests(archive, (run.run_id for run in runs)),
        known_executions=archived_executions(archive, (run.execution_id for run in runs)),
    )
    builders = {mode: TableBuilder(mode) for mode in ACCOUNTING_MODES}
    index: dict[str, list[Any]] = {name: [] for name in RUN_INDEX.names}
    sources: dict[str, list[Any]] = {name: [] for name in SOURCES.names}
    quarantine: list[dict[str, Any]] = []
    partitions: list[str] = []
    windows: dict[str, _WindowRows] = {}  # by partition
    # which copy of each run counts, and where: a later copy may take an earlier's place
    counted: list[RunRead] = []
    conflicts: dict[int, list[ReadProblem]] = {}  # by id() of the copy
    for _, read in reads:
        for run in read.runs:
            grown = archived.get(id(run))
            if isinstance(grown, ArchivedTrace):
                if grown.digest != run.digest:
                    extended.append((run, grown))
                conflicts[id(run)] = []
                continue
            known = identity.known.get(run.run_id) if run.spans is not None else None
            if grown is None and known is not None and known[0] != run.digest:
                grown = UNMERGEABLE  # archived with other spans, and no span records kept
            if grown is not None:
                problem = ReadProblem(run.source.path, run.source.line, run.run_id, grown)
                conflicts[id(run)] = [problem]
                continue
            found = len(identity.conflicts)
            slot = identity.place(
                run.run_id, run.source, run.digest or "", run.execution_id, named=run.named
            )
            if slot is not None:
                put_in_slot(counted, slot, run)
            conflicts[id(run)] = identity.conflicts[found:]
    if ranks:  # trace runs after the snapshots', by their first span's start time
        counted.sort(key=lambda run: ranks.get(id(run), -1))
    kept = {id(run) for run in counted}
    merged = {id(run) for run, _ in extended}
    spans: dict[str, list[dict[str, Any]]] = {}  # by partition
    for run in counted:
        order = batch.first_run_order + batch.run_count
        batch.run_count += 1
        partition = partition_value(
            archive.partition_by, batch.ingest_date, run.runner_kind, run.source.path
        )
        partitions.append(partition)
        if run.window is not None:
            windows.setdefault(partition, _WindowRows()).add(run.window, order)
        if run.spans is not None:
            spans.setdefault(partition, []).append(span_row(run, order))
        for mode, facts in run.facts.items():
            builders[mode].add_run(run, order)
            if not facts.metered:
                report.refused[mode] += 1
        _append_index(index, run, order, partition)
    for run, _ in extended:
        for mode, facts in run.facts.items():
            if not facts.metered:
                report.refused[mode] += 1
    for source, read in reads:
        problems = [
            _quarantined(problem, mode, batch.ingest_date) for mode, problem in read.problems
        ]
        added = [run for run in read.runs if id(run) in kept or id(run) in merged]
        conflicted = [
            _quarantined(problem, None, batch.ingest_date)
            for run in read.runs
            for problem in conflicts[id(run)]
        ]
        conflicting = len(conflicted)
        already = len(read.runs) - len(added) - conflicting
        grew = sum(1 for run in read.runs if id(run) in merged)
        report.runs_added += len(added) - grew
        report.runs_extended += grew
        report.runs_already_archived += already
        report.runs_conflicting += conflicting
        tally = (tallies or {}).get(display_path(source.path))
        if tally is not None:
            rank = ranks or {}
            tally.added.extend((rank.get(id(run), -1), run.run_id) for run in added)
            tally.runs_read += len(read.runs)
            tally.already += already
            tally.conflicting += conflicting
            tally.problems.extend(problems)
            tally.conflicts.extend(conflicted)
            continue
        problems.extend(conflicted)
        ids = [run.run_id for run in added]
        _add_source_row(sources, quarantine, report, source, problems, ids, len(read.runs))
        sources["runs_already_archived"][-1] = already
        sources["runs_conflicting"][-1] = conflicting
    for source, tally in closing:
        ids = [run_id for _, run_id in sorted(tally.added, key=_rank)]
        problems = tally.problems + tally.conflicts
        _add_source_row(sources, quarantine, report, source, problems, ids, tally.runs_read)
        sources["runs_already_archived"][-1] = tally.already
        sources["runs_conflicting"][-1] = tally.conflicting
    report.problems.extend(quarantine)
    report.duplicates.extend(identity.duplicates)
    report.duplicates.extend(row for _, read in reads for row in read.duplicates)
    for source, table, label_source in outcomes:  # first: the runs' label credit counts them
        if table is not None:
            write_outcomes(batch, table, label_source or source.path)
        _append_source(sources, source, "outcomes", [], 0, 0, 0)
    by_order = dict(zip(index["run_order"], partitions, strict=True))
    labels = batch_labels(batch)
    for builder in builders.values():
        write_tables(batch, builder.finish(), by_order, labels)
    for partition, rows in windows.items():
        rows.write(batch, partition)
    for partition, span_rows in spans.items():
        table = pa.Table.from_pylist(span_rows, schema=store.TRACE_SPANS)
        batch.write("spans", table, partition=partition)
    batch.write("run_index", pa.table(index, schema=RUN_INDEX), directory="_manifest/runs")
    batch.write("sources", pa.table(sources, schema=SOURCES), directory="_manifest/sources")
    batch.write(
        "quarantine",
        pa.Table.from_pylist(quarantine, schema=QUARANTINE),
        directory="_manifest/quarantine",
    )
    return extended


def _rank(added: tuple[int, str]) -> int:
    return added[0]


def _add_source_row(
    sources: dict[str, list[Any]],
    quarantine: list[dict[str, Any]],
    report: IngestReport,
    source: Source,
    problems: list[dict[str, Any]],
    added: list[str],
    runs_read: int,
) -> None:
    """A file's manifest row (its counts of runs archived and conflicting left at 0),
    its problems quarantined."""
    quarantine.extend(problems)
    _append_source(sources, source, "snapshots", added, runs_read, 0, 0)
    sources["problem_count"][-1] = len(problems)
    sources["status"][-1] = (
        "unreadable"
        if any(p["run_id"] is None and p["line"] is None for p in problems) and not runs_read
        else "read"
    )
    report.bad_files += bool(problems)


def span_row(run: RunRead, order: int) -> dict[str, Any]:
    """A trace run's row of ``store.TRACE_SPANS``."""
    return {
        "run_id": run.run_id,
        "run_order": order,
        "trace_ids": list(run.trace_ids),
        "records": run.spans,
    }


def write_outcomes(batch: Batch, table: pa.Table, source: str) -> None:
    """Write outcome labels from ``source`` into ``batch``, noting the earlier commits
    whose runs they name, or whose labels they change (a new version of ``source``: the
    runs whose labels from it differ, in set or order): those commits' stored label
    credit no longer stands (``Commit.relabels``)."""
    archive = batch.archive
    new = _labels_by_run(pl.DataFrame(table.cast(schema.OUTCOMES)))
    replaced = [
        file
        for file in latest_outcome_files(archive.files("outcomes"))
        if (file.source or file.path) == source
    ]
    if replaced:
        old = _labels_by_run(pl.read_parquet(archive.paths(replaced), glob=False))
        both = old.join(new, on="run_id", how="full", coalesce=True, suffix="_new")
        new = both.filter(~pl.col("label").eq_missing(pl.col("label_new")))
    named = new["run_id"].to_list()
    batch.relabels = (*batch.relabels, *commits_holding(archive, named))
    batch.write("outcomes", table, source=source)


def _labels_by_run(labels: pl.DataFrame) -> pl.DataFrame:
    """Each run's labels, in the order listed, each once."""
    pairs = labels.select("run_id", "label").unique(maintain_order=True)
    return pairs.group_by("run_id", maintain_order=True).agg("label")


def batch_labels(batch: Batch) -> pl.DataFrame:
    """The (run, label) pairs that count once ``batch`` is committed, in the order the
    ledger reads them (its own outcomes files written first): its runs' label credit."""
    files = [*batch.archive.files("outcomes"), *(f for f in batch.files if f.table == "outcomes")]
    paths = batch.archive.paths(latest_outcome_files(files))
    if not paths:
        return pl.DataFrame(schema={"run_id": pl.String, "label": pl.String})
    return (
        pl.scan_parquet(paths, hive_partitioning=False, glob=False)
        .select("run_id", "label")
        .unique(maintain_order=True)
        .collect()
    )


def write_tables(
    batch: Batch,
    tables: RunTables,
    partitions: Mapping[int, str],
    labels: pl.DataFrame | None = None,
) -> None:
    """Write one accounting's run, offer and use tables, split by partition.

    Offers and uses of runs the accounting refused are not stored (they have none);
    both are split by whether the row is its piece's first offer (use) in its run.
    Given ``labels`` (:func:`batch_labels`), each partition's label credit is stored too.
    """
    runs, offers, uses = partition_rows(tables, partitions)
    for value in runs["partition"].unique(maintain_order=True).to_list():
        chosen = pl.col("partition") == value
        write_partition(
            batch,
            tables.mode,
            value,
            (runs.filter(chosen), offers.filter(chosen), uses.filter(chosen)),
            labels,
        )
    if labels is not None:
        batch.label_credit = True


def partition_rows(
    tables: RunTables, partitions: Mapping[int, str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """One accounting's runs, and the offers and uses of its metered runs, each row
    with its ``partition`` (by run order) and the offers and uses with ``first_in_run``."""
    runs = pl.DataFrame(tables.runs).with_columns(
        partition=pl.col("run_order").replace_strict(partitions, return_dtype=pl.String)
    )
    keys = runs.select("run_id", "partition", "metered")
    offers = (
        pl.DataFrame(tables.offers)
        .join(keys, on="run_id", maintain_order="left")
        .filter(pl.col("metered"))
        .with_columns(first_in_run=pl.struct("run_id", "kind", "piece_id").is_first_distinct())
    )
    uses = (
        pl.DataFrame(tables.uses)
        .join(keys, on="run_id", maintain_order="left")
        .filter(pl.col("metered"))
        .with_columns(first_in_run=pl.struct("run_id", "kind", "piece_id").is_first_distinct())
    )
    return runs, offers, uses


def write_partition(
    batch: Batch,
    mode: str,
    value: str,
    rows: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
    labels: pl.DataFrame | None,
    replacing: int | None = None,
) -> None:
    """Write one partition's runs, offers and uses (:func:`partition_rows`) of accounting
    ``mode``, their piece totals, run totals and (given ``labels``) their label credit;
    ``replacing``: as new versions of that earlier commit's files (``Batch.write``)."""
    runs, offers, uses = rows
    batch.write(
        "runs",
        runs.drop("partition").to_arrow().cast(schema.RUNS),
        accounting=mode,
        partition=value,
        replacing=replacing,
    )
    for name, frame, table_schema in (
        ("offers", offers, schema.OFFERS),
        ("uses", uses, schema.USES),
    ):
        for first in (True, False):
            part = frame.filter(pl.col("first_in_run") == first)
            batch.write(
                name,
                part.select(table_schema.names).to_arrow().cast(table_schema),
                accounting=mode,
                partition=value,
                first_in_run=first,
                replacing=replacing,
            )
    orders = runs.select("run_id", "run_order")
    totals = {
        "piece_totals": _piece_totals(runs, offers, uses),
        "run_totals": _run_totals(
            offers.join(orders, on="run_id", maintain_order="left"),
            uses.join(orders, on="run_id", maintain_order="left"),
        ),
    }
    if labels is not None:
        totals["label_credit"] = _label_credit(labels, runs, offers)
    for name, table in totals.items():
        batch.write(name, table, accounting=mode, partition=value, replacing=replacing)


def _label_credit(labels: pl.DataFrame, runs: pl.DataFrame, offers: pl.DataFrame) -> pa.Table:
    """The outcome credit of one partition of a batch, for ``labels``."""
    metered = runs.lazy().filter(pl.col("metered")).select("run_id", "run_order")
    first = offers.lazy().filter(pl.col("first_in_run"))
    credit = label_credit(labels.lazy(), first, metered, ranked=True)
    credit = credit.sort("first_credit", "kind", "piece_id")
    return credit.collect(engine="in-memory").to_arrow().cast(schema.LABEL_CREDIT)


def _piece_totals(runs: pl.DataFrame, offers: pl.DataFrame, uses: pl.DataFrame) -> pa.Table:
    """The ledger's counts over one partition of a batch (what the archive's ledger adds up)."""
    first, later = pl.col("first_in_run"), ~pl.col("first_in_run")
    inputs = LedgerInputs(
        runs=runs.lazy(),
        offers=offers.lazy(),
        uses=uses.lazy(),
        outcomes=pl.LazyFrame(schema={"run_id": pl.String, "label": pl.String}),
        split=SplitRows(
            first_offers=offers.lazy().filter(first),
            later_offers=offers.lazy().filter(later),
            first_uses=uses.lazy().filter(first),
            later_uses=uses.lazy().filter(later),
        ),
        engine="in-memory",
    )
    totals = piece_totals(inputs).sort(pl.min_horizontal("first_offer", "first_use"))
    return totals.collect(engine="in-memory").to_arrow().cast(schema.PIECE_TOTALS)


def _run_totals(offers: pl.DataFrame, uses: pl.DataFrame) -> pa.Table:
    """The ledger's counts per run and piece over one partition of a batch (what a ledger
    of some runs adds up), rows in the order the runs' pieces first appear."""
    key = ["run_id", "kind", "piece_id"]
    first = pl.col("first_in_run")
    offered = offers.group_by(key, maintain_order=True).agg(
        run_order=pl.col("run_order").first(),
        offered=pl.len().cast(pl.Int64),
        approx_tokens_spent=pl.col("approx_tokens").sum().cast(pl.Int64),
        first_offer_seq=pl.col("seq").filter(first).min(),
    )
    used = uses.group_by(key, maintain_order=True).agg(
        run_order=pl.col("run_order").first(),
        used=pl.len().cast(pl.Int64),
        **{
            column: (pl.col("signal") == signal).sum().cast(pl.Int64)
            for signal, column in schema.USED_SIGNAL_COLUMNS.items()
        },
        first_use_seq=pl.col("seq").filter(first).min(),
    )
    counts = [
        name
        for name in schema.RUN_TOTALS.names
        if name not in (*key, "run_order", "first_offer_seq", "first_use_seq")
    ]
    both = [*key, "run_order"]
    totals = offered.join(used, on=both, how="full", coalesce=True, maintain_order="left_right")
    totals = totals.with_columns(pl.col(name).fill_null(0) for name in counts)
    return totals.select(schema.RUN_TOTALS.names).to_arrow().cast(schema.RUN_TOTALS)


class _WindowRows:
    """One partition's rows of the window tables, stored once whatever the accounting."""

    def __init__(self) -> None:
        self.messages: dict[str, list[Any]] = {name: [] for name in schema.MESSAGES.names}
        self.streams: list[dict[str, Any]] = []
        self.standings: list[dict[str, Any]] = []

    def add(self, window: RunWindow, order: int) -> None:
        for name, values in window.messages.items():
            self.messages[name].extend(values)
        self.streams.append({**window.stream, "run_order": order})
        self.standings.extend(window.standings)

    def tables(self) -> dict[str, pa.Table]:
        """The rows as ``streams``, ``messages`` and ``standings`` tables."""
        return {
            "streams": pa.Table.from_pylist(self.streams, schema=schema.STREAMS),
            "messages": messages_from_columns(self.messages),
            "standings": pa.Table.from_pylist(self.standings, schema=schema.STANDINGS),
        }

    def write(self, batch: Batch, partition: str) -> None:
        for name, table in self.tables().items():
            batch.write(name, table, partition=partition)


def _quarantined(problem: ReadProblem, mode: str | None, date: str) -> dict[str, Any]:
    return {
        "path": problem.path,
        "line": problem.line,
        "run_id": problem.run_id,
        "reason": problem.reason,
        "accounting": mode,
        "ingest_date": date,
    }


def _append_index(index: dict[str, list[Any]], run: RunRead, order: int, partition: str) -> None:
    index["run_id"].append(run.run_id)
    index["digest"].append(run.digest or "")
    index["run_order"].append(order)
    index["partition"].append(partition)
    index["source_path"].append(run.source.path)
    index["source_line"].append(run.source.line)
    index["execution_id"].append(run.execution_id)


def _append_source(
    sources: dict[str, list[Any]],
    source: Source,
    kind: str,
    added: list[str],
    read: int,
    already: int,
    conflicting: int,
) -> None:
    row = {
        "path": display_path(source.path),
        "kind": kind,
        "size": source.size,
        "mtime_ns": source.mtime_ns,
        "content_hash": source.content_hash,
        "status": "read",
        "run_ids": added,
        "runs_read": read,
        "runs_already_archived": already,
        "runs_conflicting": conflicting,
        "problem_count": 0,
    }
    for name, value in row.items():
        sources[name].append(value)
