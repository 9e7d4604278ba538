"""Ingest snapshots into an archive once, so later questions read small tables, not JSON.

Both accountings are stored (the ledger's ``--mode`` picks one later), and once
each run's message stream (the ``streams``, ``messages`` and ``standings`` tables
``whatif`` replays). Files are
read by one worker per core and committed in batches; every source's path, size and
content hash goes into the manifest, so naming the same files again reads nothing,
and a run whose id is already archived is added only if it is new: the same
content is counted as already archived, other content is reported as a conflict
(but a trace run whose spans arrive in a later ingest is merged into its archived
version: :mod:`~contextledger.jobs.ingest_merge`). What cannot be read is
quarantined (path, line, run, reason) and retried once the file changes; a
quarantined file since deleted leaves the quarantine at the next ingest. Sources are
recorded by absolute path, so an ingest from another folder knows them (a path an
older archive recorded as given keeps that spelling).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from stat import S_ISREG
from typing import Any, TextIO

import polars as pl
import pyarrow as pa

from contextledger.archive import store
from contextledger.archive.manifest import (
    SOURCES,
    KnownSource,
    committed_sources,
    write_quarantine_listing,
)
from contextledger.archive.partitions import ingest_date_or_today
from contextledger.archive.store import Archive
from contextledger.archive.tables import ArchiveTables
from contextledger.jobs.ingest_batch import (
    ArchivedTrace,
    SourceTally,
    _append_source,
    batch_labels,
    write_batch,
)
from contextledger.jobs.ingest_merge import ArchivedTraces, replace_runs
from contextledger.jobs.ingest_report import IngestReport, Source
from contextledger.processes import worker_pool
from contextledger.progress import Progress
from contextledger.read.cycles import collector_paused
from contextledger.read.otel import SpillTo, TraceFileRead, spill_folder
from contextledger.read.snapshot_files import display_path, find_snapshot_files
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, TraceInputs
from contextledger.tables.files import FileRead, read_chunk

#: Commit a batch once it holds this many runs, or after this many seconds.
BATCH_RUNS = 5000
BATCH_SECONDS = 30.0

#: Reads the files named (with the static-tools sidecar), yielding each with what was read,
#: in the order given: the one step of an ingest another engine may run elsewhere. A
#: trace file's span records past the budget may be written to the spill's folder (on
#: this machine: a reader elsewhere returns them instead).
Reader = Callable[
    [Sequence["Source"], Mapping[str, Sequence[str]], SpillTo | None],
    Iterator[tuple["Source", "FileRead"]],
]


def content_hash(path: str | Path) -> str:
    """blake2b-128 of a file's bytes, hex (read a megabyte at a time; the same as
    :func:`~contextledger.read.digest.file_digest` of them)."""
    digest = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def ingest(
    paths: Sequence[str | Path],
    archive_dir: str | Path,
    *,
    partition_by: str | None = None,
    outcomes: str | Path | None = None,
    static_tools: Mapping[str, Sequence[str]] | None = None,
    ingest_date: str | None = None,
    workers: int | None = None,
    batch_runs: int = BATCH_RUNS,
    batch_seconds: float = BATCH_SECONDS,
    retry_quarantined: bool = False,
    progress: TextIO | None = None,
    reader: Reader | None = None,
) -> IngestReport:
    """Append the runs of the snapshots under ``paths`` to the archive at ``archive_dir``.

    Idempotent: files already ingested with the same content are not read again, and
    a run already archived is not added twice. ``outcomes`` (CSV or JSON Lines of
    run_id,label) are stored too; a changed outcomes file replaces its earlier labels.

    ``reader`` reads the files (default: :func:`local_reader` of ``workers`` processes;
    ``contextledger.jobs.spark.reader`` reads them on Spark's executors); whatever reads
    them, what each batch adds, its files and its commit are decided here, in file order.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = ingest(["data/sample"], folder, workers=1)
    ...     again = ingest(["data/sample"], folder, workers=1)
    >>> first.runs_added, again.runs_added, again.files_unchanged
    (14, 0, 14)
    """
    started = time.perf_counter()
    date = ingest_date_or_today(ingest_date)
    if outcomes is not None:  # a missing or bad labels file leaves no archive behind
        _labels_from(Path(outcomes))
    archive = Archive.create(archive_dir, partition_by)
    report = IngestReport(str(archive_dir))
    with archive.writing() as removed:
        report.leftovers_removed = removed
        known = committed_sources(archive)
        found = find_snapshot_files(list(paths))
        files = found.files
        report.files_found, report.files_skipped = len(files), found.skipped
        report.files_empty = found.empty
        pending = _Pending(archive, date, report)
        if outcomes is not None:
            pending.add_outcomes(Path(outcomes), known)
        todo = list(_changed(files, known, retry_quarantined, report))
        meter = Progress(progress, started=started)
        last_flush = time.perf_counter()
        read_files = reader or local_reader(workers)
        # a big trace file's span records wait on disk here (read.otel's budget): in its
        # reader's process as it is read, then until its runs are assembled; the folder
        # is made by the first that spills (none: nothing to leave behind if killed)
        spill = spill_folder("ingest")
        try:
            # what a batch's reads hold is trees that reference counting frees: the cycle
            # collector only walked them, batch after batch (a quarter of this process's
            # CPU); each flush collects once instead (read/cycles.py)
            with collector_paused():
                traces = TraceInputs(ACCOUNTING_MODES, windows=True, spill_folder=spill)
                archived = ArchivedTraces(archive)  # spans of runs archived before count first
                held: list[Source] = []  # trace files: runs come once all are read
                sidecar = dict(static_tools or {})
                for given, read in read_files(todo, sidecar, SpillTo.budgeted(spill)):
                    source = _hashed(given, read)
                    if read.traces is not None:
                        for earlier in archived.records_for(read.traces):
                            traces.take(FileRead(traces=TraceFileRead(spans=earlier)))
                        traces.take(read)
                        read.traces = None  # its records are the spill's to let go of
                        held.append(source)
                        pending.count_file(source)
                        continue
                    pending.add(source, read)
                    if meter.due():
                        meter.show(_ingest_line(report, pending, len(todo), meter.elapsed))
                    due = time.perf_counter() - last_flush >= batch_seconds
                    if pending.run_count >= batch_runs or due:
                        pending.flush()
                        last_flush = time.perf_counter()
                if held:
                    _add_trace_runs(pending, traces, archived, held, batch_runs)
                pending.flush()
        finally:
            shutil.rmtree(spill, ignore_errors=True)
        meter.close(_ingest_line(report, pending, len(todo), meter.elapsed))
        named = {source.path for source in todo} | {str(path) for path in files}
        report.sources_retired = retire_deleted_sources(archive, known, named, date)
        write_quarantine_listing(archive)
        if report.commits:  # runs or labels arrived: which labels still name no run
            tables = ArchiveTables(archive, ACCOUNTING_MODES[0])
            report.unmatched_labels = tables.unmatched_label_ids()
    report.seconds = time.perf_counter() - started
    return report


def _new_labels(archive: Archive, table: pa.Table) -> int:
    """How many distinct (run, label) pairs of ``table`` the archive does not count yet
    (the same labels given again under another file name add none)."""
    stored = ArchiveTables(archive, ACCOUNTING_MODES[0]).outcome_scan()
    given = pl.DataFrame(table.cast(schema.OUTCOMES)).lazy().unique()
    new = given.join(stored, on=["run_id", "label"], how="anti", nulls_equal=True)
    return int(new.select(pl.len()).collect().item())


#: Trace runs assembled at a time (``TraceRuns.chunks``): handed to the pending batch,
#: which commits once it holds ``batch_runs`` and the next part is assembled (so a
#: batch's runs and one part are held at once: a part is small beside a batch).
TRACE_PART_RUNS = 256


def _add_trace_runs(
    pending: _Pending,
    traces: TraceInputs,
    archived: ArchivedTraces,
    held: Sequence[Source],
    batch_runs: int,
) -> None:
    """The runs of the trace files ``held`` assembled a range at a time, in the order of
    their first span's start time, and added to ``pending``, committed each time it
    holds ``batch_runs``: what is held is a batch, not the input. Which archived runs
    they grow is decided before any is written (from the run of each archived trace);
    each file's manifest row is added up over the batches and written by the last."""
    pending.tallies = {display_path(source.path): SourceTally() for source in held}
    pending.closing = [(source, pending.tallies[display_path(source.path)]) for source in held]
    watched_traces, watched_runs = archived.watch()
    rank = 0
    grown: dict[str, ArchivedTrace | str] = {}
    parts = traces.parts(traces=watched_traces, run_ids=watched_runs, runs=TRACE_PART_RUNS)
    for number, (part, watched) in enumerate(parts):
        if number == 0:
            grown = archived.grown(watched)
        if pending.run_count >= batch_runs:  # full, and more to come: the last closes
            pending.flush(closing=False)
        part = archived.said_before(part, held)
        for run in part.runs:
            pending.ranks[id(run)] = rank
            rank += 1
            if run.run_id in grown:
                pending.archived[id(run)] = grown[run.run_id]
        for source, read in _runs_to_files(held, part):
            pending.add(source, read, counted=True)


def _runs_to_files(held: Sequence[Source], assembled: FileRead) -> list[tuple[Source, FileRead]]:
    """The runs of a range assembled from trace files, each given to the file its first
    span was read from (its manifest row counts it), problems to the file they name."""
    reads = [(source, FileRead()) for source in held]
    by_path = {display_path(source.path): read for source, read in reads}
    first = reads[0][1]
    first.duplicates.extend(assembled.duplicates)
    for run in assembled.runs:
        by_path.get(run.source.path, first).runs.append(run)
    for confined, problem in assembled.problems:
        by_path.get(problem.path, first).problems.append((confined, problem))
    return [pair for pair in reads if pair[1].runs or pair[1].problems or pair[1].duplicates]


# ── which files to read ────────────────────────────────────────────
def _changed(
    files: Sequence[Path],
    known: Mapping[str, KnownSource],
    retry_quarantined: bool,
    report: IngestReport,
) -> Iterator[Source]:
    """The files to read: new ones, and those whose content changed since last time.

    Each is named by :func:`source_name`."""
    for path in files:
        name = source_name(path, known)
        try:
            stat = path.stat()
        except OSError:
            yield Source(name, None, None, None)  # the reader names the problem
            continue
        if not S_ISREG(stat.st_mode):  # a FIFO, a device, a folder: never opened
            yield Source(name, None, None, None)  # the reader names the problem
            continue
        before = known.get(display_path(name))
        skippable = before is not None and (before.clean or not retry_quarantined)
        if skippable and before is not None and before.size == stat.st_size:
            if before.mtime_ns == stat.st_mtime_ns:
                report.files_unchanged += 1
                continue
            digest = _safe_hash(path)
            if digest is not None and digest == before.content_hash:
                report.files_unchanged += 1
                continue
            yield Source(name, stat.st_size, stat.st_mtime_ns, digest)
            continue
        yield Source(name, stat.st_size, stat.st_mtime_ns, None)  # hashed as it is read


def _hashed(source: Source, read: FileRead) -> Source:
    """``source`` with the content hash its manifest row keeps: the hash of the bytes its
    reader read (:attr:`FileRead.file_digest`), else of the file as it is now (a file
    never read whole; a file whose stat failed keeps none)."""
    if source.content_hash is not None or source.size is None:
        return source
    found = read.file_digest or _safe_hash(Path(source.path))
    return dataclasses.replace(source, content_hash=found)


def source_name(path: Path, known: Mapping[str, KnownSource]) -> str:
    """The manifest's name for ``path``: absolute (``..`` folded, symlinks kept as named,
    so a linked file is shown under the name the user gave), so an ingest from any folder
    finds it; as given when the manifest already holds it so (an archive written when
    sources were recorded as given).

    >>> source_name(Path("data/sample"), {}) == str(Path("data/sample").absolute())
    True
    """
    given = str(path)
    return given if display_path(given) in known else os.path.abspath(given)


def retire_deleted_sources(
    archive: Archive, known: Mapping[str, KnownSource], named: Iterable[str], date: str
) -> int:
    """Commit a manifest row for each quarantined snapshot file since deleted, so its
    quarantine clears: status ``deleted``, no problems (the runs it added stay). Paths
    recorded relative (older archives) are left alone: from this folder they may name
    another file. Files ``named`` in this ingest were just read. Returns how many.
    """
    skip = {display_path(path) for path in named}
    gone = [
        path
        for path, before in known.items()
        if before.kind == "snapshots"
        and not before.clean
        and before.status != "deleted"  # retired already: once is enough
        and path not in skip
        and Path(path).is_absolute()
        and not Path(path).exists()
    ]
    if not gone:
        return 0
    rows: dict[str, list[Any]] = {name: [] for name in SOURCES.names}
    for path in gone:
        _append_source(rows, Source(path, None, None, None), "snapshots", [], 0, 0, 0)
    rows["status"] = ["deleted"] * len(gone)
    batch = archive.new_batch(date)
    batch.write("sources", pa.table(rows, schema=SOURCES), directory="_manifest/sources")
    batch.commit()
    return len(gone)


def _safe_hash(path: Path) -> str | None:
    try:
        return content_hash(path)
    except OSError:
        return None


# ── reading, both cores, results in file order ─────────────────────
def local_reader(workers: int | None = None) -> Reader:
    """The reader of a local ingest: ``workers`` processes (default: one per core)."""

    def read(
        sources: Sequence[Source], sidecar: Mapping[str, Sequence[str]], spill: SpillTo | None
    ) -> Iterator[tuple[Source, FileRead]]:
        return _read_in_order(sources, sidecar, workers, spill)

    return read


def _read_in_order(
    sources: Sequence[Source],
    sidecar: Mapping[str, Sequence[str]],
    workers: int | None,
    spill: SpillTo | None = None,
) -> Iterator[tuple[Source, FileRead]]:
    """Read ``sources`` on ``workers`` processes, yielding in input order; a bounded
    number of chunks is in flight, so memory does not grow with the file count (nor
    with a trace file's size: its records past the budget go to ``spill``)."""
    count = workers if workers is not None else (os.cpu_count() or 1)
    if count <= 1 or len(sources) < 4:
        for source in sources:
            yield source, read_chunk([source.path], sidecar, spill)[0]
        return
    chunk = 4
    chunks = [sources[i : i + chunk] for i in range(0, len(sources), chunk)]
    with worker_pool(min(count, len(chunks))) as pool:  # no process left without a chunk
        in_flight: list[tuple[Sequence[Source], Future[list[FileRead]]]] = []
        queue = iter(chunks)
        for part in queue:
            paths = [s.path for s in part]
            in_flight.append((part, pool.submit(read_chunk, paths, sidecar, spill)))
            if len(in_flight) >= count * 4:
                break
        while in_flight:
            part, future = in_flight.pop(0)
            reads = future.result()
            following = next(queue, None)
            if following is not None:
                paths = [s.path for s in following]
                in_flight.append((following, pool.submit(read_chunk, paths, sidecar, spill)))
            yield from zip(part, reads, strict=True)


# ── batches ────────────────────────────────────────────────────────
class _Pending:
    """Reads waiting to be committed as one batch."""

    def __init__(self, archive: Archive, date: str, report: IngestReport) -> None:
        self.archive = archive
        self.date = date
        self.report = report
        self.reads: list[tuple[Source, FileRead]] = []
        self.outcomes: list[tuple[Source, pa.Table | None, str | None]] = []
        self.run_count = 0
        #: Trace runs assembled with archived spans (``write_batch``'s ``archived``).
        self.archived: dict[int, ArchivedTrace | str] = {}
        #: Trace runs' places, by their first span's start time (``write_batch``'s ``ranks``).
        self.ranks: dict[int, int] = {}
        #: Trace files' manifest rows, added up over batches (``write_batch``'s ``tallies``),
        #: and written by the last (``closing``).
        self.tallies: dict[str, SourceTally] = {}
        self.closing: list[tuple[Source, SourceTally]] = []

    def add(self, source: Source, read: FileRead, *, counted: bool = False) -> None:
        """Add a file's read (``counted``: a part of a file :meth:`count_file` counted)."""
        self.reads.append((source, read))
        self.run_count += len(read.runs)
        if not counted:
            self.count_file(source)
        self.report.runs_read += len(read.runs)

    def count_file(self, source: Source) -> None:
        """Count a file as read (a trace file once, whatever batches its runs go to)."""
        self.report.files_read += 1
        self.report.bytes_read += source.size or 0

    def add_outcomes(self, path: Path, known: Mapping[str, KnownSource]) -> None:
        stat = path.stat()  # an OSError naming the file: the caller says it as it says others
        digest = content_hash(path)
        name = source_name(path, known)
        before = known.get(display_path(name))
        if before is not None and before.content_hash == digest:
            return
        source = Source(name, stat.st_size, stat.st_mtime_ns, digest)
        table = _labels_from(path)
        self.outcomes.append((source, table, None))
        self.report.outcome_labels_added += _new_labels(self.archive, table)

    def flush(self, *, closing: bool = True) -> None:
        """Commit what is pending; ``closing``: with the trace files' manifest rows."""
        closed = self.closing if closing else []
        if not self.reads and not self.outcomes and not closed:
            return
        batch = self.archive.new_batch(self.date)
        merged = write_batch(
            batch,
            self.reads,
            self.outcomes,
            self.report,
            archived=self.archived,
            ranks=self.ranks,
            tallies=self.tallies,
            closing=closed,
        )
        if merged:
            replace_runs(batch, merged, batch_labels(batch))
        batch.commit()
        self.report.commits += 1
        self.reads, self.outcomes, self.run_count = [], [], 0
        self.archived, self.ranks = {}, {}  # by id(): the runs committed are let go of
        if closing:
            self.tallies, self.closing = {}, []
        gc.collect(0)  # cycles the batch left (the collector is paused while it is read)


def _labels_from(path: Path) -> pa.Table:
    """The labels in ``path``; an ``OSError`` naming it, or an ``ArchiveError`` saying which
    row is bad."""
    from contextledger.tables.sidecars import load_outcomes

    try:
        return load_outcomes(path)
    except ValueError as error:
        raise store.ArchiveError(str(error)) from None


# ── the progress line ─────────────────────────────────────────────
def _ingest_line(report: IngestReport, pending: _Pending, total: int, elapsed: float) -> str:
    """The ingest's progress line: files done, runs/s, MB/s, bad files."""
    done = report.files_read
    share = done / total if total else 1.0
    bar = "#" * int(share * 24)
    return (
        f"[{bar:<24}] {share:4.0%} {done}/{total} files  {report.runs_read} runs  "
        f"{report.runs_read / elapsed:,.0f} runs/s  {report.bytes_read / 1e6 / elapsed:.1f} "
        f"MB/s  {report.bad_files + _pending_bad(pending)} bad "
    )


def _pending_bad(pending: _Pending) -> int:
    return sum(1 for _, read in pending.reads if read.problems)
