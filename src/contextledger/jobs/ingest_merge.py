"""Trace runs whose spans arrive over several ingests, merged into the run archived first.

A collector appends to its files, or rotates them: spans of one conversation arrive
today and tomorrow. The archive keeps each trace run's span records (``spans``), so an
ingest takes in the archived records of the runs its spans belong to (found by trace
id and conversation id) before its own, assembles the runs as one read of every file
would, and a run that grew replaces its archived version in place: same run order,
commit, partition and ingest date; the commit that added it gets new versions of its
files of that partition (``Batch.write(replacing=...)``), its piece totals and label
credit recomputed. What it deliberately does not do: merge a run archived before span
records were kept (still a conflict), or two archived runs that new spans join (named,
not merged).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.archive import store
from contextledger.archive.manifest import RUN_INDEX, commits_of, indexed_runs
from contextledger.archive.store import Archive, Batch, Commit, DataFile
from contextledger.jobs.ingest_batch import (
    ArchivedTrace,
    _append_index,
    _WindowRows,
    partition_rows,
    span_row,
    write_partition,
)
from contextledger.read.otel import TraceFileRead, decode_spans
from contextledger.read.otel._spans import SpanRecord
from contextledger.read.otel._spill import spans_held
from contextledger.read.snapshot_files import display_path
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, TableBuilder
from contextledger.tables.files import FileRead, RunRead


class ArchivedTraces:
    """The archive's trace runs, looked up by the traces and conversations of spans
    read now, their span records handed out once each (to be taken in first: an
    archived span is the first copy read)."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self._keys: pl.DataFrame | None = None
        #: The archived runs whose records were handed out, by run id.
        self.runs: dict[str, ArchivedTrace] = {}
        self._traces: dict[str, str] = {}  # trace id -> archived run id
        #: The files the records handed out were read from (in earlier ingests).
        self._paths: set[str] = set()

    def _key_table(self) -> pl.DataFrame:
        """``run_id, run_order, trace_id`` of every archived trace run (light columns)."""
        if self._keys is None:
            files = self.archive.paths(self.archive.files("spans"))
            if not files:
                self._keys = pl.DataFrame(
                    schema={"run_id": pl.String, "run_order": pl.Int64, "trace_id": pl.String}
                )
            else:
                self._keys = (
                    self.archive.location.scan(files, store.TRACE_SPANS)
                    .select("run_id", "run_order", pl.col("trace_ids").alias("trace_id"))
                    .explode("trace_id")
                    .collect()
                )
        return self._keys

    def records_for(self, read: TraceFileRead) -> Iterator[list[SpanRecord]]:
        """The span records of the archived runs the spans of ``read`` may belong to
        (same trace, or a run named by their conversation; spans spilled to disk too),
        those not handed out before: a group of whole runs at a time, each of at most
        the reader's budget of records (one run past it alone), in the order archived,
        so that an ingest that joins every archived run never holds them all."""
        if not self.archive.files("spans"):
            return
        traces = read.trace_ids()
        names = traces | read.conversation_ids()
        keys = self._key_table()
        found = keys.filter(pl.col("trace_id").is_in(traces) | pl.col("run_id").is_in(names))
        wanted = {
            run_id: order
            for run_id, order in found.select("run_id", "run_order").unique().iter_rows()
            if run_id not in self.runs
        }
        if not wanted:
            return
        index = indexed_runs(self.archive, wanted, ("run_id", "digest", "run_order", "partition"))
        by_order = {
            order: (run_id, digest, partition)
            for run_id, digest, order, partition in (
                index.select("run_id", "digest", "run_order", "partition").iter_rows()
            )
        }
        commits = commits_of(self.archive, wanted.values())
        chosen = [c for c in self.archive.commits if c.seq in commits]
        orders = list(wanted.values())
        budget = spans_held(None)
        group: list[SpanRecord] = []
        for file in self.archive.files("spans", chosen):  # one commit's partition each
            rows = (
                self.archive.location.scan(self.archive.paths([file]), store.TRACE_SPANS)
                .filter(pl.col("run_order").is_in(orders))
                .select("run_id", "run_order", "trace_ids", "records")
                .collect()
            )
            for run_id, order, trace_ids, data in rows.iter_rows():
                if order not in by_order:  # not in the run index: not a run the archive holds
                    continue
                _, digest, partition = by_order[order]
                (commit,) = commits_of(self.archive, [order])
                self.runs[run_id] = ArchivedTrace(run_id, order, digest, partition, commit)
                self._traces.update(dict.fromkeys(trace_ids, run_id))
                records = decode_spans(data)
                self._paths.update(record.path for record in records)
                if group and len(group) + len(records) > budget:
                    yield group
                    group = []
                group.extend(records)
            del rows
        if group:
            yield group

    def watch(self) -> tuple[set[str], set[str]]:
        """The traces and run ids of the archived runs handed out: whose runs
        :meth:`grown` is told (``TraceInputs.parts``)."""
        return set(self._traces), set(self.runs)

    def said_before(self, assembled: FileRead, sources: Sequence[Any]) -> FileRead:
        """``assembled`` without the problems of archived spans (a cut attribute of a
        file an earlier ingest read, quarantined then under that file), said again only
        when that file is read now too (one of ``sources``)."""
        if not self._paths:
            return assembled
        now = {display_path(source.path) for source in sources}
        earlier = self._paths - now
        assembled.problems = [
            (confined, problem)
            for confined, problem in assembled.problems
            if problem.path not in earlier
        ]
        return assembled

    def grown(self, watched: Mapping[str, str]) -> dict[str, ArchivedTrace | str]:
        """For each run assembled with archived spans (by run id), told the run of each
        trace :meth:`watch` names (``watched``, before any run is assembled): the
        archived run it grew from, or why it cannot be merged: it joins two archived
        runs, or an archived run's traces went to two runs (a conversation id arriving
        later)."""
        holding: dict[str, set[str]] = {}  # run assembled -> the archived runs it holds
        for trace, archived in self._traces.items():
            run_id = watched.get(trace)
            if run_id is not None:
                holding.setdefault(run_id, set()).add(archived)
        for run_id in set(watched.values()):
            if run_id in self.runs and run_id not in holding:
                holding[run_id] = {run_id}
        holders: dict[str, list[str]] = {}
        for run_id, held in holding.items():
            for archived in held:
                holders.setdefault(archived, []).append(run_id)
        found: dict[str, ArchivedTrace | str] = {}
        for archived, grown in holders.items():
            for run_id in grown:
                held = holding[run_id]
                if len(held) > 1:
                    listed = ", ".join(sorted(held))
                    found[run_id] = (
                        f"its spans join the archived runs {listed} into one run: not merged "
                        "(each stays as archived; ingest every file into a new archive to "
                        "count them as one)"
                    )
                elif len(grown) > 1:
                    found[run_id] = (
                        f"it holds traces of archived run {archived}, whose other traces went "
                        "to another run: not merged (the archived run stays as it was)"
                    )
                else:
                    found[run_id] = self.runs[archived]
        return found


#: The per-accounting tables a merged run's partition is written again for.
_PER_MODE = ("runs", "offers", "uses", "piece_totals", "label_credit")
#: The tables stored once per run, written again likewise.
_ONCE = ("streams", "messages", "standings", "spans")


def replace_runs(
    batch: Batch, merged: Sequence[tuple[RunRead, ArchivedTrace]], labels: pl.DataFrame
) -> None:
    """Write, in ``batch``, new versions of the files of each commit that added one of
    the archived runs ``merged`` replaces: the partition of each such run, every table
    (both accountings, piece totals, label credit, window tables, span records) and the
    commit's run index, with the merged run in the archived run's place."""
    by_commit: dict[int, list[tuple[RunRead, ArchivedTrace]]] = {}
    for run, old in merged:
        by_commit.setdefault(old.commit, []).append((run, old))
    commits = {commit.seq: commit for commit in batch.archive.commits}
    for seq, items in sorted(by_commit.items()):
        commit = commits[seq]
        _replace_in_commit(batch, commit, items, labels if commit.label_credit else None)


def _replace_in_commit(
    batch: Batch,
    commit: Commit,
    items: Sequence[tuple[RunRead, ArchivedTrace]],
    labels: pl.DataFrame | None,
) -> None:
    archive = batch.archive
    items = sorted(items, key=lambda item: item[1].run_order)
    orders = [old.run_order for _, old in items]
    old_ids = [old.run_id for _, old in items]
    partition_of = {old.run_order: old.partition for _, old in items}
    builders = {mode: TableBuilder(mode) for mode in ACCOUNTING_MODES}
    windows: dict[str, _WindowRows] = {}
    spans: dict[str, list[dict[str, Any]]] = {}
    index: dict[str, list[Any]] = {name: [] for name in RUN_INDEX.names}
    for run, old in items:
        for mode in run.facts:
            builders[mode].add_run(run, old.run_order)
        if run.window is not None:
            windows.setdefault(old.partition, _WindowRows()).add(run.window, old.run_order)
        if run.spans is not None:
            spans.setdefault(old.partition, []).append(span_row(run, old.run_order))
        _append_index(index, run, old.run_order, old.partition)
    retired: list[DataFile] = []

    def current(table: str, **where: Any) -> tuple[list[DataFile], pl.DataFrame | None]:
        files = [
            file
            for file in commit.files
            if file.table == table
            and all(getattr(file, name) == value for name, value in where.items())
        ]
        retired.extend(files)
        if not files:
            return files, None
        table_schema = _SCHEMAS[table]
        frame = archive.location.scan(archive.paths(files), table_schema).collect()
        return files, frame

    for mode, builder in builders.items():
        runs, offers, uses = partition_rows(builder.finish(), partition_of)
        for partition in dict.fromkeys(partition_of.values()):
            kept = _kept_rows(current, mode, partition, orders, old_ids)
            chosen = pl.col("partition") == partition
            runs_now = _spliced(kept[0], runs.filter(chosen), {})
            order_of = dict(zip(runs_now["run_id"], runs_now["run_order"], strict=True))
            rows = (
                runs_now,
                _spliced(kept[1], offers.filter(chosen), order_of),
                _spliced(kept[2], uses.filter(chosen), order_of),
            )
            for table in ("piece_totals", "run_totals", "label_credit"):
                current(table, accounting=mode, partition=partition)
            write_partition(batch, mode, partition, rows, labels, replacing=commit.seq)
    for partition in dict.fromkeys(partition_of.values()):
        new = windows.get(partition, _WindowRows()).tables()
        new["spans"] = pa.Table.from_pylist(spans.get(partition, []), schema=store.TRACE_SPANS)
        _, streams = current("streams", partition=partition)
        streams_now = _spliced_table(streams, new["streams"], orders, old_ids)
        order_of = dict(
            zip(
                streams_now["run_id"].to_pylist(), streams_now["run_order"].to_pylist(), strict=True
            )
        )
        batch.write("streams", streams_now, partition=partition, replacing=commit.seq)
        for table in ("messages", "standings", "spans"):
            _, frame = current(table, partition=partition)
            spliced = _spliced_table(frame, new[table], orders, old_ids, order_of)
            batch.write(table, spliced, partition=partition, replacing=commit.seq)
    _, run_index = current("run_index")
    new_index = pa.table(index, schema=RUN_INDEX)
    spliced_index = _spliced_table(run_index, new_index, orders, old_ids)
    batch.write("run_index", spliced_index, directory="_manifest/runs", replacing=commit.seq)
    batch.retire(commit.seq, [file.path for file in retired])


def _kept_rows(
    current: Any, mode: str, partition: str, orders: Sequence[int], old_ids: Sequence[str]
) -> tuple[pl.DataFrame | None, pl.DataFrame | None, pl.DataFrame | None]:
    """The commit's runs, offers and uses of one partition and accounting, as
    :func:`partition_rows` gives them, without the runs at ``orders``."""
    _, runs = current("runs", accounting=mode, partition=partition)
    if runs is not None:
        runs = runs.filter(~pl.col("run_order").is_in(orders)).with_columns(
            partition=pl.lit(partition)
        )
    kept = []
    for table in ("offers", "uses"):
        parts = []
        for first in (True, False):
            _, frame = current(table, accounting=mode, partition=partition, first_in_run=first)
            if frame is not None:
                parts.append(
                    frame.filter(~pl.col("run_id").is_in(old_ids)).with_columns(
                        partition=pl.lit(partition),
                        metered=pl.lit(True),
                        first_in_run=pl.lit(first),
                    )
                )
        kept.append(pl.concat(parts) if parts else None)
    return runs, kept[0], kept[1]


def _spliced(old: pl.DataFrame | None, new: pl.DataFrame, order_of: dict[str, int]) -> pl.DataFrame:
    """``old`` rows with ``new`` rows in their run's place (rows in run order: by their
    ``run_order``, else their run's in ``order_of``; a run's own rows keep their order)."""
    if old is None:
        return new
    rows = pl.concat([old.select(new.columns), new])
    if "run_order" in rows.columns:
        return rows.sort("run_order", maintain_order=True)
    key = pl.col("run_id").replace_strict(order_of, default=-1, return_dtype=pl.Int64)
    return rows.sort(key, maintain_order=True)


def _spliced_table(
    old: pl.DataFrame | None,
    new: pa.Table,
    orders: Sequence[int],
    old_ids: Sequence[str],
    order_of: dict[str, int] | None = None,
) -> pa.Table:
    """A stored table's rows (``old``) without the replaced runs (by ``run_order``, or
    by run id for a table without one), ``new`` rows in their run's place (by
    ``order_of``, the run orders of the runs it names, for a table without one)."""
    fresh = pl.DataFrame(new)
    if old is None:
        return new
    if "run_order" in old.columns:
        rows = pl.concat([old.filter(~pl.col("run_order").is_in(orders)), fresh])
        return rows.sort("run_order", maintain_order=True).to_arrow().cast(new.schema)
    key = pl.col("run_id").replace_strict(order_of or {}, default=-1, return_dtype=pl.Int64)
    rows = pl.concat([old.filter(~pl.col("run_id").is_in(old_ids)), fresh])
    return rows.sort(key, maintain_order=True).to_arrow().cast(new.schema)


_SCHEMAS = {
    **schema.TABLES,
    "piece_totals": schema.PIECE_TOTALS,
    "label_credit": schema.LABEL_CREDIT,
    "run_totals": schema.RUN_TOTALS,
    "streams": schema.STREAMS,
    "messages": schema.MESSAGES,
    "standings": schema.STANDINGS,
    "spans": store.TRACE_SPANS,
    "run_index": RUN_INDEX,
}
