"""Ingest snapshots into an archive once, so later questions read small tables, not JSON.

Both accountings are stored (the ledger's ``--mode`` picks one later), and once
each run's message stream (the ``streams``, ``messages`` and ``standings`` tables
``whatif`` replays). Files are
read by one worker per core and committed in batches; every source's path, size and
content hash goes into the manifest, so naming the same files again reads nothing,
and a run whose id is already archived is added only if it is new: the same
content is counted as already archived, other content is reported as a conflict.
What cannot be read is quarantined (path, line, run, reason) and retried once the
file changes; a quarantined file since deleted leaves the quarantine at the next
ingest. Sources are recorded by absolute path, so an ingest from another folder
knows them (a path an older archive recorded as given keeps that spelling).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any, TextIO

import polars as pl
import pyarrow as pa

from contextledger.archive import store
from contextledger.archive.manifest import (
    KnownSource,
    archived_digests,
    archived_executions,
    commits_holding,
    committed_sources,
    write_quarantine_listing,
)
from contextledger.archive.store import Archive, Batch
from contextledger.archive.tables import ArchiveTables, latest_outcome_files
from contextledger.ledger.compute import LedgerInputs, SplitRows, label_credit, piece_totals
from contextledger.processes import worker_pool
from contextledger.progress import Progress
from contextledger.read.identity import (
    DUPLICATES,
    RunIdentity,
    describe_duplicates,
    describe_unmatched,
    put_in_slot,
)
from contextledger.read.snapshot import ReadProblem, display_path, find_snapshot_files
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, TableBuilder, TraceInputs
from contextledger.tables.files import FileRead, RunRead, read_chunk
from contextledger.tables.window_rows import RunWindow
from contextledger.tables.windows import messages_from_columns

#: Commit a batch once it holds this many runs, or after this many seconds.
BATCH_RUNS = 5000
BATCH_SECONDS = 30.0

#: Reads the files named (with the static-tools sidecar), yielding each with what was read,
#: in the order given: the one step of an ingest another engine may run elsewhere.
Reader = Callable[
    [Sequence["Source"], Mapping[str, Sequence[str]]], Iterator[tuple["Source", "FileRead"]]
]


@dataclass(frozen=True)
class Source:
    """A file named for ingest, as found on disk."""

    path: str
    size: int | None
    mtime_ns: int | None
    content_hash: str | None


@dataclass
class IngestReport:
    """What one ingest did; :meth:`summary` is what the command prints."""

    archive: str
    files_found: int = 0
    #: Files in input folders not read because of their names (``find_snapshot_files``).
    files_skipped: list[str] = field(default_factory=list)
    files_unchanged: int = 0  # already ingested with the same content: not read again
    files_read: int = 0
    bytes_read: int = 0
    runs_read: int = 0
    runs_added: int = 0
    runs_already_archived: int = 0
    runs_conflicting: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACCOUNTING_MODES, 0))
    bad_files: int = 0  # files with at least one problem
    problems: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)  # copies already archived
    outcome_labels_added: int = 0  # (run, label) pairs the archive did not hold yet
    #: Run ids of stored labels that name no run the archive holds (said, not an error:
    #: labels may arrive before their runs).
    unmatched_labels: list[str] = field(default_factory=list)
    commits: int = 0
    leftovers_removed: int = 0
    sources_retired: int = 0  # quarantined files since deleted: out of the quarantine
    seconds: float = 0.0

    def summary(self) -> str:
        """A few lines for people: runs read, refused, bad files, where to look."""
        return "\n".join(self.summary_lines())

    def _repr_html_(self) -> str:
        """In Jupyter: the summary the command prints, not every field."""
        import html

        return f"<pre>{html.escape(self.summary())}</pre>"

    def summary_lines(self) -> list[str]:
        """:meth:`summary`'s lines (a file name in one may hold a newline of its own)."""
        rate = self.runs_read / self.seconds if self.seconds else 0.0
        megabytes = self.bytes_read / 1e6
        lines = [
            f"{self.runs_read} run(s) read from {self.files_read} file(s) "
            f"({self.files_unchanged} unchanged file(s) skipped) in {self.seconds:.1f} s: "
            f"{rate:.0f} runs/s, {megabytes / self.seconds if self.seconds else 0:.1f} MB/s",
            f"  {self.runs_added} added, {self.runs_already_archived} already archived, "
            f"{self.runs_conflicting} conflicting (same run_id, other content: not added)",
            "  refused: "
            + ", ".join(f"{count} under {mode}" for mode, count in self.refused.items()),
            f"  {self.bad_files} bad file(s), {len(self.problems)} problem(s) quarantined"
            + (
                f"; {self.outcome_labels_added} new (run, label) outcome label(s) stored"
                if self.outcome_labels_added
                else ""
            ),
        ]
        unmatched = describe_unmatched(
            "stored outcome label", self.unmatched_labels, runs="run the archive holds"
        )
        if unmatched is not None:
            lines.append(f"  note: {unmatched} (not an error: labels may arrive before their runs)")
        if self.sources_retired:
            lines.append(
                f"  {self.sources_retired} quarantined file(s) since deleted left the quarantine"
            )
        if self.leftovers_removed:
            lines.append(
                f"  removed {self.leftovers_removed} file(s) an interrupted ingest left uncommitted"
            )
        duplicates = pa.Table.from_pylist(self.duplicates, schema=DUPLICATES)
        lines.extend(f"  {line}" for line in describe_duplicates(duplicates))
        for problem in self.problems[:20]:
            lines.append(f"  quarantined {_where(problem)}: {problem['reason']}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        if self.problems:
            lines.append(f"  the quarantine is listed in {Path(self.archive) / 'quarantine.json'}")
        return lines


def _where(problem: Mapping[str, Any]) -> str:
    found = ReadProblem(problem["path"], problem.get("line"), problem.get("run_id"), "")
    where = found.where
    if problem.get("accounting") == "whatif":
        where += " [message stream: whatif only]"
    elif problem.get("accounting"):
        where += f" [{problem['accounting']} accounting]"
    return where


def content_hash(path: str | Path) -> str:
    """blake2b-128 of a file's bytes, hex."""
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
    date = store.ingest_date_or_today(ingest_date)
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
        pending = _Pending(archive, date, report)
        if outcomes is not None:
            pending.add_outcomes(Path(outcomes), known)
        todo = list(_changed(files, known, retry_quarantined, report))
        meter = Progress(progress, started=started)
        last_flush = time.perf_counter()
        read_files = reader or local_reader(workers)
        traces = TraceInputs(ACCOUNTING_MODES, windows=True)
        held: list[tuple[Source, FileRead]] = []  # trace files: runs come once all are read
        for source, read in read_files(todo, dict(static_tools or {})):
            if read.traces is not None:
                traces.take(read)
                held.append((source, FileRead()))
                continue
            pending.add(source, read)
            if meter.due():
                meter.show(_ingest_line(report, pending, len(todo), meter.elapsed))
            due = time.perf_counter() - last_flush >= batch_seconds
            if pending.run_count >= batch_runs or due:
                pending.flush()
                last_flush = time.perf_counter()
        if held:
            for source, read in _runs_to_files(held, traces.finish()):
                pending.add(source, read)
        pending.flush()
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


def _runs_to_files(
    held: Sequence[tuple[Source, FileRead]], assembled: FileRead
) -> Sequence[tuple[Source, FileRead]]:
    """The runs assembled from trace files, each given to the file its first span was
    read from (its manifest row counts it), problems to the file they name."""
    by_path = {display_path(source.path): read for source, read in held}
    first = held[0][1]
    first.duplicates.extend(assembled.duplicates)
    for run in assembled.runs:
        by_path.get(run.source.path, first).runs.append(run)
    for confined, problem in assembled.problems:
        by_path.get(problem.path, first).problems.append((confined, problem))
    return held


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
        yield Source(name, stat.st_size, stat.st_mtime_ns, _safe_hash(path))


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
    rows: dict[str, list[Any]] = {name: [] for name in store.SOURCES.names}
    for path in gone:
        _append_source(rows, Source(path, None, None, None), "snapshots", [], 0, 0, 0)
    rows["status"] = ["deleted"] * len(gone)
    batch = archive.new_batch(date)
    batch.write("sources", pa.table(rows, schema=store.SOURCES), directory="_manifest/sources")
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
        sources: Sequence[Source], sidecar: Mapping[str, Sequence[str]]
    ) -> Iterator[tuple[Source, FileRead]]:
        return _read_in_order(sources, sidecar, workers)

    return read


def _read_in_order(
    sources: Sequence[Source], sidecar: Mapping[str, Sequence[str]], workers: int | None
) -> Iterator[tuple[Source, FileRead]]:
    """Read ``sources`` on ``workers`` processes, yielding in input order; a bounded
    number of chunks is in flight, so memory does not grow with the file count."""
    count = workers if workers is not None else (os.cpu_count() or 1)
    if count <= 1 or len(sources) < 4:
        for source in sources:
            yield source, read_chunk([source.path], sidecar)[0]
        return
    chunk = 4
    chunks = [sources[i : i + chunk] for i in range(0, len(sources), chunk)]
    with worker_pool(min(count, len(chunks))) as pool:  # no process left without a chunk
        in_flight: list[tuple[Sequence[Source], Future[list[FileRead]]]] = []
        queue = iter(chunks)
        for part in queue:
            in_flight.append((part, pool.submit(read_chunk, [s.path for s in part], sidecar)))
            if len(in_flight) >= count * 4:
                break
        while in_flight:
            part, future = in_flight.pop(0)
            reads = future.result()
            following = next(queue, None)
            if following is not None:
                paths = [s.path for s in following]
                in_flight.append((following, pool.submit(read_chunk, paths, sidecar)))
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

    def add(self, source: Source, read: FileRead) -> None:
        self.reads.append((source, read))
        self.run_count += len(read.runs)
        self.report.files_read += 1
        self.report.bytes_read += source.size or 0
        self.report.runs_read += len(read.runs)

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

    def flush(self) -> None:
        if not self.reads and not self.outcomes:
            return
        batch = self.archive.new_batch(self.date)
        write_batch(batch, self.reads, self.outcomes, self.report)
        batch.commit()
        self.report.commits += 1
        self.reads, self.outcomes, self.run_count = [], [], 0


def _labels_from(path: Path) -> pa.Table:
    """The labels in ``path``; an ``OSError`` naming it, or an ``ArchiveError`` saying which
    row is bad."""
    from contextledger.tables.build import load_outcomes

    try:
        return load_outcomes(path)
    except ValueError as error:
        raise store.ArchiveError(str(error)) from None


def write_batch(
    batch: Batch,
    reads: Sequence[tuple[Source, FileRead]],
    outcomes: Sequence[tuple[Source, pa.Table | None, str | None]],
    report: IngestReport,
) -> None:
    """Decide what each read run adds, and write the batch's files (not yet committed)."""
    archive = batch.archive
    runs = [run for _, read in reads for run in read.runs]
    identity = RunIdentity(
        known=archived_digests(archive, (run.run_id for run in runs)),
        known_executions=archived_executions(archive, (run.execution_id for run in runs)),
    )
    builders = {mode: TableBuilder(mode) for mode in ACCOUNTING_MODES}
    index: dict[str, list[Any]] = {name: [] for name in store.RUN_INDEX.names}
    sources: dict[str, list[Any]] = {name: [] for name in store.SOURCES.names}
    quarantine: list[dict[str, Any]] = []
    partitions: list[str] = []
    windows: dict[str, _WindowRows] = {}  # by partition
    # which copy of each run counts, and where: a later copy may take an earlier's place
    counted: list[RunRead] = []
    conflicts: dict[int, list[ReadProblem]] = {}  # by id() of the copy
    for _, read in reads:
        for run in read.runs:
            found = len(identity.conflicts)
            slot = identity.place(
                run.run_id, run.source, run.digest or "", run.execution_id, named=run.named
            )
            if slot is not None:
                put_in_slot(counted, slot, run)
            conflicts[id(run)] = identity.conflicts[found:]
    kept = {id(run) for run in counted}
    for run in counted:
        order = batch.first_run_order + batch.run_count
        batch.run_count += 1
        partition = store.partition_value(
            archive.partition_by, batch.ingest_date, run.runner_kind, run.source.path
        )
        partitions.append(partition)
        if run.window is not None:
            windows.setdefault(partition, _WindowRows()).add(run.window, order)
        for mode, facts in run.facts.items():
            builders[mode].add_run(run, order)
            if not facts.metered:
                report.refused[mode] += 1
        _append_index(index, run, order, partition)
    for source, read in reads:
        problems = [
            _quarantined(problem, mode, batch.ingest_date) for mode, problem in read.problems
        ]
        added = [run.run_id for run in read.runs if id(run) in kept]
        conflicting = 0
        for run in read.runs:
            for problem in conflicts[id(run)]:
                conflicting += 1
                problems.append(_quarantined(problem, None, batch.ingest_date))
        already = len(read.runs) - len(added) - conflicting
        quarantine.extend(problems)
        _append_source(sources, source, "snapshots", added, len(read.runs), already, conflicting)
        sources["problem_count"][-1] = len(problems)
        sources["status"][-1] = (
            "unreadable"
            if any(p["run_id"] is None and p["line"] is None for p in problems) and not read.runs
            else "read"
        )
        report.runs_added += len(added)
        report.runs_already_archived += already
        report.runs_conflicting += conflicting
        report.bad_files += bool(problems)
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
    batch.write("run_index", pa.table(index, schema=store.RUN_INDEX), directory="_manifest/runs")
    batch.write("sources", pa.table(sources, schema=store.SOURCES), directory="_manifest/sources")
    batch.write(
        "quarantine",
        pa.Table.from_pylist(quarantine, schema=store.QUARANTINE),
        directory="_manifest/quarantine",
    )


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
    runs = pl.DataFrame(tables.runs).with_columns(
        partition=pl.col("run_order").replace_strict(partitions, return_dtype=pl.String)
    )
    keys = runs.select("run_id", "partition", "metered", "run_order")
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
    for value in runs["partition"].unique(maintain_order=True).to_list():
        chosen = pl.col("partition") == value
        batch.write(
            "runs",
            runs.filter(chosen).drop("partition").to_arrow().cast(schema.RUNS),
            accounting=tables.mode,
            partition=value,
        )
        for name, frame, table_schema in (
            ("offers", offers, schema.OFFERS),
            ("uses", uses, schema.USES),
        ):
            for first in (True, False):
                part = frame.filter(chosen & (pl.col("first_in_run") == first))
                batch.write(
                    name,
                    part.select(table_schema.names).to_arrow().cast(table_schema),
                    accounting=tables.mode,
                    partition=value,
                    first_in_run=first,
                )
        batch.write(
            "piece_totals",
            _piece_totals(runs.filter(chosen), offers.filter(chosen), uses.filter(chosen)),
            accounting=tables.mode,
            partition=value,
        )
        batch.write(
            "run_totals",
            _run_totals(offers.filter(chosen), uses.filter(chosen)),
            accounting=tables.mode,
            partition=value,
        )
        if labels is not None:
            batch.write(
                "label_credit",
                _label_credit(labels, runs.filter(chosen), offers.filter(chosen)),
                accounting=tables.mode,
                partition=value,
            )
    if labels is not None:
        batch.label_credit = True


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

    def write(self, batch: Batch, partition: str) -> None:
        streams = pa.Table.from_pylist(self.streams, schema=schema.STREAMS)
        batch.write("streams", streams, partition=partition)
        batch.write("messages", messages_from_columns(self.messages), partition=partition)
        standings = pa.Table.from_pylist(self.standings, schema=schema.STANDINGS)
        batch.write("standings", standings, partition=partition)


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
