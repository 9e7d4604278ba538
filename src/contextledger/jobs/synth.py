"""Synthetic runs at scale, written: tables straight into an archive, or snapshot files.

For trying the tool (and benchmarking it) on millions of runs without recording
them. ``synth_archive`` writes the runs of :mod:`~contextledger.jobs.synth_model`
(everything follows from ``seed``) with their message streams for ``whatif DIR``;
``synth_snapshots`` instead writes agentfootprint snapshot files, copies of real
recorded runs (the corpus, or the bundled sample) under fresh run ids, for timing
ingest on the real decoding work.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contextledger.archive import store
from contextledger.archive.manifest import (
    RUN_INDEX,
    SOURCES,
    archived_digests,
    committed_sources,
    write_quarantine_listing,
)
from contextledger.archive.partitions import ingest_date_or_today, partition_value
from contextledger.archive.store import Archive
from contextledger.jobs.ingest import IngestReport, Source
from contextledger.jobs.ingest_batch import (
    _append_source,
    batch_labels,
    write_outcomes,
    write_tables,
)
from contextledger.jobs.synth_model import (
    DRAWS,
    MODEL_VERSION,
    synth_parts,
    synth_streams,
    synth_tables,
)
from contextledger.processes import worker_pool
from contextledger.progress import Progress
from contextledger.read.cycles import collector_paused
from contextledger.read.gunzip import GZIP_MAGIC
from contextledger.read.messages import RunMessages
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables
from contextledger.tables.window_rows import message_columns, stream_row
from contextledger.tables.windows import with_turn_index
from contextledger.window.synthetic import (
    Scripts,
    script_streams,
)

#: Runs generated and committed together.
SYNTH_BATCH_RUNS = 50_000
#: Runs whose message streams are built (as Python objects) at a time.
STREAM_CHUNK_RUNS = 2000


# ── into an archive ────────────────────────────────────────────────
def synth_archive(
    archive_dir: str | Path,
    runs: int,
    *,
    seed: int = 0,
    partition_by: str | None = None,
    ingest_date: str | None = None,
    batch_runs: int = SYNTH_BATCH_RUNS,
    progress: TextIO | None = None,
    streams: bool = True,
    workers: int | None = None,
) -> IngestReport:
    """Write ``runs`` synthetic runs (both accountings, with outcome labels) into an archive,
    with their message streams (``streams``) for ``whatif``, built on ``workers``
    processes (default: one per core) while the tables are written; a progress line is
    drawn on ``progress`` (a terminal) as batches are committed.

    Each batch is a manifest source (``synth://seed=S/runs=A-B``), so the same command
    run again, or after being killed, adds only what is missing (``streams`` applies to
    the runs it adds); a run's content and labels follow from ``seed`` and its number
    alone, so a larger ``runs`` adds the runs beyond those there, as a fresh archive of
    ``runs`` holds them. Runs of these ids that another version of the model (or another
    source) wrote are refused (``ValueError``), before anything of their batch is written.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = synth_archive(folder, 300, seed=3, batch_runs=200)
    ...     again = synth_archive(folder, 300, seed=3, batch_runs=200)
    >>> first.runs_added, first.commits, again.runs_added
    (300, 2, 0)
    """
    started = time.perf_counter()
    date = ingest_date_or_today(ingest_date)
    archive = Archive.create(archive_dir, partition_by)
    report = IngestReport(str(archive_dir))
    processes = workers if workers is not None else (os.cpu_count() or 1)
    pooled = streams and processes > 1 and min(runs, batch_runs) > STREAM_CHUNK_RUNS
    with (
        archive.writing() as removed,
        worker_pool(processes) if pooled else contextlib.nullcontext() as pool,
    ):
        report.leftovers_removed = removed
        known = committed_sources(archive)
        meter = Progress(progress, started=started)
        for first in range(0, runs, batch_runs):
            count = min(batch_runs, runs - first)
            path = f"synth://seed={seed}/runs={first}-{first + count - 1}"
            digest = hashlib.blake2b(f"{MODEL_VERSION}:{path}".encode(), digest_size=16).hexdigest()
            before = known.get(path)
            if before is not None and before.content_hash == digest:
                report.files_unchanged += 1
                continue
            source = Source(path, None, None, digest)
            _synth_batch(archive, date, seed, first, count, source, report, streams, pool)
            if meter.due():
                meter.show(_synth_line(first + count, runs, report, meter.elapsed))
        meter.close(_synth_line(runs, runs, report, meter.elapsed))
        write_quarantine_listing(archive)
    report.seconds = time.perf_counter() - started
    return report


def _synth_line(done: int, runs: int, report: IngestReport, elapsed: float) -> str:
    """The synth's progress line: runs done and how fast they are added."""
    return f"{done:,}/{runs:,} runs  {report.runs_added / elapsed:,.0f} runs/s"


def _synth_batch(
    archive: Archive,
    date: str,
    seed: int,
    first: int,
    count: int,
    source: Source,
    report: IngestReport,
    streams: bool,
    pool: ProcessPoolExecutor | None,
) -> None:
    parts = list(synth_parts(seed, first, count, scripts=streams))
    ids = [r for part in parts for r in part.tables["corrected"].runs["run_id"].to_pylist()]
    present = archived_digests(archive, ids)
    _refuse_other_models(archive, seed, present)
    keep = [run_id not in present for run_id in ids]
    batch = archive.new_batch(date)
    added = [run_id for run_id, kept in zip(ids, keep, strict=True) if kept]
    order = {run_id: batch.first_run_order + i for i, run_id in enumerate(added)}
    chosen = pa.array(added, pa.string())
    stream_parts = []
    if streams:  # built (on the pool) while the tables are written
        for part in parts:
            assert part.scripts is not None
            part_ids = part.scripts.run_ids
            kinds = part.tables["corrected"].runs["runner_kind"].to_pylist()
            numbers = [number for number, run_id in enumerate(part_ids) if run_id in order]
            stream_parts += _stream_parts(
                pool,
                part.scripts,
                numbers,
                [order[part_ids[number]] for number in numbers],
                [
                    partition_value(archive.partition_by, date, kinds[number], source.path)
                    for number in numbers
                ],
            )
    # Only the added runs' labels: a run already there keeps the labels it came with.
    labels = pa.concat_tables(part.labels for part in parts)
    if len(added) < len(ids):
        labels = _keep(labels, chosen)
    write_outcomes(batch, labels, source.path)  # first: the runs' label credit counts them
    batch_labelled = batch_labels(batch)
    partitions: dict[int, str] = {}
    for mode in ACCOUNTING_MODES:
        runs = pa.concat_tables(part.tables[mode].runs for part in parts).filter(pa.array(keep))
        runs = runs.set_column(
            1,
            schema.RUNS.field("run_order"),
            pa.array([order[r] for r in runs["run_id"].to_pylist()], pa.int64()),
        )
        kinds = runs["runner_kind"].to_pylist()
        for position, run_order in enumerate(runs["run_order"].to_pylist()):
            partitions[run_order] = partition_value(
                archive.partition_by, date, kinds[position], source.path
            )
        offers = pa.concat_tables(part.tables[mode].offers for part in parts)
        uses = pa.concat_tables(part.tables[mode].uses for part in parts)
        if len(added) < len(ids):
            offers, uses = _keep(offers, chosen), _keep(uses, chosen)
        write_tables(batch, RunTables(mode, runs, offers, uses), partitions, batch_labelled)
        if mode == "reference":
            report.refused[mode] += runs.num_rows - sum(runs["metered"].to_pylist())
    del parts, offers, uses
    _write_streams(batch, stream_parts)
    batch.run_count = len(added)
    index = pa.table(
        {
            "run_id": added,
            "digest": [_digest(r) for r in added],
            "run_order": [order[r] for r in added],
            "partition": [partitions[order[r]] for r in added],
            "source_path": [source.path] * len(added),
            "source_line": pa.nulls(len(added), pa.int32()),
            "execution_id": pa.nulls(len(added), pa.string()),  # no snapshot behind them
        },
        schema=RUN_INDEX,
    )
    batch.write("run_index", index, directory="_manifest/runs")
    sources: dict[str, list[object]] = {name: [] for name in SOURCES.names}
    _append_source(sources, source, "synth", added, count, count - len(added), 0)
    batch.write("sources", pa.table(sources, schema=SOURCES), directory="_manifest/sources")
    batch.commit()
    report.commits += 1
    report.runs_read += count
    report.runs_added += len(added)
    report.runs_already_archived += count - len(added)


def _digest(run_id: str) -> str:
    """A synthetic run's content hash: its content follows from its id and the model."""
    return hashlib.blake2b(f"{MODEL_VERSION}:{run_id}".encode(), digest_size=16).hexdigest()


def _refuse_other_models(
    archive: Archive, seed: int, present: dict[str, tuple[str, str, int | None]]
) -> None:
    """Refuse to add to an archive whose runs of these ids another version of the model
    (or another source) wrote: their tables and labels differ from what synth writes now,
    and adding beside them would mix two generations under one seed."""
    other = sorted(run_id for run_id, (digest, *_) in present.items() if digest != _digest(run_id))
    if other:
        raise ValueError(
            f"{archive.root}: {len(other):,} run(s) of seed {seed} ({other[0]}"
            f"{', ...' if len(other) > 1 else ''}) were written by another version of synth "
            "(or another source), with other content and labels than it writes now: "
            "synth into a new archive"
        )


class _StreamRows:
    """Some runs' rows of the window tables, as ingest stores them (``run_window``)."""

    def __init__(self) -> None:
        self.messages: dict[str, list[Any]] = {name: [] for name in schema.MESSAGES.names}
        self.streams: list[dict[str, Any]] = []
        self.standings: list[dict[str, Any]] = []

    def add(self, stream: RunMessages, standings: list[dict[str, Any]], run_order: int) -> None:
        for name, values in message_columns(stream).items():
            self.messages[name].extend(values)
        self.streams.append(stream_row(stream, run_order))
        self.standings.extend(standings)

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        """``streams``, ``messages`` (turns not yet numbered), ``standings``: in
        ``store.WINDOW_TABLES``' order, built with Arrow alone (no Polars in a worker)."""
        return (
            pa.Table.from_pylist(self.streams, schema=schema.STREAMS),
            pa.table(self.messages, schema=schema.MESSAGES),
            pa.Table.from_pylist(self.standings, schema=schema.STANDINGS),
        )


#: A chunk's window tables by partition: ``streams``, ``messages``, ``standings``.
StreamTables = dict[str, tuple[pa.Table, pa.Table, pa.Table]]


def _stream_chunk(
    scripts: Scripts, orders: Sequence[int], partitions: Sequence[str]
) -> StreamTables:
    """The window tables of every run of ``scripts`` (its ``run_order``, its partition).

    Runs on a worker forked from a process that runs Polars, so it uses none (a forked
    child cannot rely on the parent's thread pool): turns are numbered when written."""
    rows: dict[str, _StreamRows] = {}
    with collector_paused():
        built = script_streams(scripts)
        for (stream, standings), run_order, partition in zip(
            built, orders, partitions, strict=True
        ):
            rows.setdefault(partition, _StreamRows()).add(stream, standings, run_order)
    return {partition: found.tables() for partition, found in rows.items()}


def _stream_parts(
    pool: ProcessPoolExecutor | None,
    scripts: Scripts,
    numbers: Sequence[int],
    orders: Sequence[int],
    partitions: Sequence[str],
) -> list[Callable[[], StreamTables]]:
    """The window tables of runs ``numbers`` of ``scripts``, a chunk at a time: each
    chunk's tables when called (built on ``pool`` when there is one, else then)."""
    parts: list[Callable[[], StreamTables]] = []
    for start in range(0, len(numbers), STREAM_CHUNK_RUNS):
        end = start + STREAM_CHUNK_RUNS
        chunk = (scripts.take(numbers[start:end]), orders[start:end], partitions[start:end])
        if pool is None:
            parts.append(functools.partial(_stream_chunk, *chunk))
        else:
            parts.append(pool.submit(_stream_chunk, *chunk).result)
    return parts


def _write_streams(batch: store.Batch, parts: Sequence[Callable[[], StreamTables]]) -> None:
    """Write the chunks' window tables, one file per table and partition; a chunk is
    built as Python objects and kept as Arrow, so memory stays that of the tables."""
    by_partition: dict[str, list[tuple[pa.Table, pa.Table, pa.Table]]] = {}
    for part in parts:
        for partition, tables in part().items():
            by_partition.setdefault(partition, []).append(tables)
    for partition, tables_list in by_partition.items():
        for position, name in enumerate(store.WINDOW_TABLES):
            table = pa.concat_tables(tables[position] for tables in tables_list)
            if name == "messages":
                table = with_turn_index(table)  # what messages_from_columns does
            batch.write(name, table, partition=partition)


def _keep(table: pa.Table, run_ids: pa.Array) -> pa.Table:
    return table.filter(pc.is_in(table["run_id"], value_set=run_ids))


# ── snapshot files ─────────────────────────────────────────────────
def synth_snapshots(
    out_dir: str | Path, runs: int, templates: str | Path | None = None, *, seed: int = 0
) -> list[Path]:
    """Write ``runs`` snapshot files (gzip JSON) into ``out_dir``: real recorded runs from
    ``templates`` (snapshot files or directories; by default the bundled sample, found in
    the installed package, not the working folder) under fresh run ids.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = synth_snapshots(folder, 3, "data/sample", seed=1)
    >>> [path.name for path in written]
    ['synth-1-000000000.json.gz', 'synth-1-000000001.json.gz', 'synth-1-000000002.json.gz']
    """
    from contextledger.read.bundled import sample
    from contextledger.read.snapshot_files import find_snapshot_files

    if templates is None:
        templates = sample().runs
    sources = [p for p in find_snapshot_files([templates]).files if not p.name.endswith(".jsonl")]
    if not sources:
        raise ValueError(f"no snapshot files under {templates} to copy")
    order = np.random.default_rng([seed, DRAWS, 2]).permutation(len(sources))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    payloads: dict[int, list[bytes | None]] = {}
    for index in range(runs):
        template = int(order[index % len(order)])
        if template not in payloads:
            payloads[template] = _template_parts(_read(sources[template]))
        run_id = f"synth-{seed}-{index:09d}"
        target = out / f"{run_id}.json.gz"
        # No timestamp in the gzip header, and a file already there as it would be
        # written is left alone: the same seed again changes nothing for ingest to read.
        data = gzip.compress(_fill(payloads[template], run_id), 1, mtime=0)
        if not _holds(target, data):
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, target)
        written.append(target)
    return written


def _holds(path: Path, data: bytes) -> bool:
    """Whether the file at ``path`` holds exactly ``data``."""
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == GZIP_MAGIC else data


def _fill(parts: list[bytes | None], run_id: str) -> bytes:
    value = json.dumps(run_id).encode()
    return b"".join(value if part is None else part for part in parts)


def _template_parts(payload: bytes) -> list[bytes | None]:
    """A template document cut where a run's id goes (``None``): the wrapper's ``run_id``
    (a bare snapshot is wrapped) and the snapshot's execution id, ``runId``; cut once per
    template, filled once per run (:func:`_fill`). With the template's ``runId`` every
    copy would be one recording (``read.identity``), counted once.

    >>> template = b'{"run_id":"s1","snapshot":{"commitLog":[],"runId":"17-1"}}'
    >>> _fill(_template_parts(template), "synth-1-0")
    b'{"run_id":"synth-1-0","snapshot":{"commitLog":[],"runId":"synth-1-0"}}'
    """
    document = msgspec.json.decode(payload)
    if isinstance(document, dict) and isinstance(document.get("snapshot"), dict):
        wrapper = {key: value for key, value in document.items() if key != "run_id"}
    else:
        wrapper = {"snapshot": document}  # a bare snapshot, wrapped
    marker = "\x00contextledger-run-id\x00"
    if isinstance(wrapper["snapshot"], dict):
        wrapper["snapshot"]["runId"] = marker
    pieces = msgspec.json.encode({"run_id": marker, **wrapper}).split(json.dumps(marker).encode())
    parts: list[bytes | None] = [pieces[0]]
    for piece in pieces[1:]:
        parts += [None, piece]
    return parts


def describe(report: IngestReport) -> str:
    """The synth summary line."""
    rate = report.runs_added / report.seconds if report.seconds else 0.0
    return (
        f"{report.runs_added} synthetic run(s) written ({report.runs_already_archived} already "
        f"there, {report.files_unchanged} batch(es) skipped) in {report.seconds:.1f} s, "
        f"{rate:,.0f} runs/s"
    )


__all__ = [
    "describe",
    "synth_archive",
    "synth_parts",
    "synth_snapshots",
    "synth_streams",
    "synth_tables",
]
