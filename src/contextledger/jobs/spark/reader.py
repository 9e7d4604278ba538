"""Ingest with Spark reading the snapshot files: the archive a local ingest makes.

Reading (decompressing, parsing and folding each snapshot, both accountings, its message
stream) is what an ingest spends its time on, and is all Spark does here: the files are
handed to the executors a wave at a time (``parallelize(paths).mapPartitions(read_chunk)``,
the reader local worker processes run), and the small ``FileRead`` results come back
pickled, in file order. Everything after is :func:`contextledger.jobs.ingest.ingest`'s
own code on the driver: which files changed, run identity against the archive, the
batch's tables in the archive's layout, piece totals, and the commit, written last. So
the archive holds the same runs, digests and ledger, and a killed ingest leaves nothing
counted that no commit lists. Executors read the files by the absolute paths the
manifest records: on a cluster, put them on a file system every executor sees.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextledger.jobs.ingest import IngestReport, Reader, Source, ingest
from contextledger.jobs.spark.session import get_session
from contextledger.read.otel import SpillTo
from contextledger.read.snapshot import MAX_DOCUMENT_MB_ENV
from contextledger.tables.files import FileRead, read_chunk

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Files one Spark task reads (a local worker reads 4 per chunk; a task costs more to start).
FILES_PER_TASK = 8
#: Tasks per wave, per core Spark has: enough to keep every core busy while the driver
#: writes, few enough that a wave's results (held on the driver) stay small.
TASKS_PER_CORE = 2


def spark_reader(
    spark: SparkSession | None = None,
    files_per_task: int = FILES_PER_TASK,
    tasks_per_wave: int | None = None,
) -> Reader:
    """A reader for :func:`~contextledger.jobs.ingest.ingest` that reads on Spark's
    executors, yielding in file order; the next wave is read while the driver writes
    this one's batches, and at most two waves' results are held at once."""

    def read(
        sources: Sequence[Source], sidecar: Mapping[str, Sequence[str]], spill: SpillTo | None
    ) -> Iterator[tuple[Source, FileRead]]:
        if not sources:
            return
        context = (spark or get_session()).sparkContext
        tasks = tasks_per_wave or context.defaultParallelism * TASKS_PER_CORE
        size = files_per_task * tasks
        waves = [sources[i : i + size] for i in range(0, len(sources), size)]
        # executors on this machine write a big trace file's records where the driver
        # reads them; a cluster's return them (a trace file is held whole, twice)
        local = (context.master or "").startswith("local")
        task = partial(
            _read_task,
            sidecar=dict(sidecar),
            cap=os.environ.get(MAX_DOCUMENT_MB_ENV),
            spill=spill if local else None,
        )

        def collect(wave: Sequence[Source]) -> list[FileRead]:
            paths = [source.path for source in wave]
            slices = math.ceil(len(paths) / files_per_task)
            # parallelize keeps the list's order within and across partitions; collect
            # returns partitions in order: the reads line up with ``wave``.
            reads: list[FileRead] = context.parallelize(paths, slices).mapPartitions(task).collect()
            return reads

        with ThreadPoolExecutor(max_workers=1) as pool:
            following: Future[list[FileRead]] = pool.submit(collect, waves[0])
            for number, wave in enumerate(waves):
                reads = following.result()
                if number + 1 < len(waves):
                    following = pool.submit(collect, waves[number + 1])
                yield from zip(wave, reads, strict=True)

    return read


def _read_task(
    paths: Iterator[str],
    sidecar: Mapping[str, Sequence[str]],
    cap: str | None,
    spill: SpillTo | None = None,
) -> list[FileRead]:
    """One task's files, read under the driver's document size cap (an executor does not
    inherit the driver's environment); ``spill``: where a trace file's records past the
    budget go (an executor on the driver's machine)."""
    before = os.environ.get(MAX_DOCUMENT_MB_ENV)
    _set_cap(cap)
    try:
        return read_chunk(list(paths), sidecar, spill)
    finally:
        _set_cap(before)


def _set_cap(value: str | None) -> None:
    if value is None:
        os.environ.pop(MAX_DOCUMENT_MB_ENV, None)
    else:
        os.environ[MAX_DOCUMENT_MB_ENV] = value


def spark_ingest(
    paths: Sequence[str | Path],
    archive_dir: str | Path,
    spark: SparkSession | None = None,
    **options: Any,
) -> IngestReport:
    """:func:`~contextledger.jobs.ingest.ingest` (same ``options``, but ``workers``: the
    session's parallelism reads) with the files read on Spark."""
    if options.get("workers") is not None:
        raise ValueError("workers: a Spark ingest reads with the session's executors")
    return ingest(paths, archive_dir, reader=spark_reader(spark), **options)
