"""Snapshot reading started before the engines are imported, so the two overlap.

A command that reads snapshots imports Polars and Arrow (0.3-0.4 s of the parent's
time) and waits while its workers read (about 1 s of CPU for the corpus's 301 runs).
Started here first, the workers read while the parent imports: this module imports
neither engine, only what the forkserver's workers hold already. Small inputs are read
in this process, where a pool would cost more to start than it saves
(docs/benchmarks.md: the ledger against agentfootprint).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contextledger.processes import worker_pool
from contextledger.read.otel import SpillTo, removed_with, spill_folder
from contextledger.read.snapshot_files import SnapshotFiles, find_snapshot_files
from contextledger.tables.files import FileRead, read_for_tables

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: Below this much JSON to decode, files are read in this process. A pool's forkserver
#: costs about 0.1-0.2 s of CPU once; the corpus's JSON is read at roughly 250 MB per
#: CPU-second, so a pool pays back from some 50 MB (about 50 corpus runs).
POOL_FROM_JSON_BYTES = 48 << 20

#: How much larger a gzipped snapshot is once inflated (the corpus: 16 MB to 297 MB).
GZIP_EXPANSION = 18


@dataclass
class Reading:
    """Snapshot files found and being read, in file order, one :class:`FileRead` each;
    trace files' span records past the budget wait in :attr:`spill`'s folder, removed by
    :meth:`close` (or at exit)."""

    found: SnapshotFiles
    results: Iterator[FileRead]
    #: Where the readers write span records past the budget (a folder made by the
    #: first that does).
    spill: SpillTo

    def __post_init__(self) -> None:
        self._remove = removed_with(self, self.spill.folder)

    def close(self) -> None:
        """Stop reading (the workers finish what they hold) and remove what they wrote."""
        close = getattr(self.results, "close", None)
        if close is not None:
            close()
        self._remove()


def start_reading(
    paths: Sequence[str | Path],
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    workers: int | None,
    streams: bool,
) -> Reading:
    """Find the snapshot files under ``paths`` and, when they are worth a pool, hand them
    all to its workers now; the results come in file order as they are iterated."""
    found = find_snapshot_files(paths)
    files = found.files
    spill = SpillTo.budgeted(spill_folder("read"))
    count = workers if workers is not None else (os.cpu_count() or 1)
    if count <= 1 or json_bytes(files) < POOL_FROM_JSON_BYTES:
        here = (read_for_tables(path, modes, sidecar, strict, streams, spill) for path in files)
        return Reading(found, here, spill)
    pool = worker_pool(count)
    total = len(files)
    submitted: list[Iterator[FileRead] | BaseException] = []

    def submit() -> None:
        # Starting the first worker waits for the forkserver to import the reader
        # (0.1-0.2 s); on this thread the caller imports the engines meanwhile.
        try:
            submitted.append(
                pool.map(  # submits every file now: the workers read at once
                    read_for_tables,
                    files,
                    [modes] * total,
                    [sidecar] * total,
                    [strict] * total,
                    [streams] * total,
                    [spill] * total,
                    chunksize=max(1, total // (count * 8)),
                )
            )
        except BaseException as error:  # raised where the results are read
            submitted.append(error)

    starter = threading.Thread(target=submit, name="contextledger-start-workers", daemon=True)
    starter.start()
    return Reading(found, _then_closed(starter, submitted, pool), spill)


def _then_closed(
    starter: threading.Thread,
    submitted: list[Iterator[FileRead] | BaseException],
    pool: ProcessPoolExecutor,
) -> Iterator[FileRead]:
    """The results ``starter`` submitted for, then the pool shut down (also when the
    reader stops early or the start failed)."""
    try:
        starter.join()
        (results,) = submitted
        if isinstance(results, BaseException):
            raise results
        yield from results
    finally:
        pool.shutdown(cancel_futures=True)


def json_bytes(files: Sequence[Path]) -> int:
    """About how many bytes of JSON ``files`` hold: gzipped ones at their inflated size
    (estimated), a file that cannot be sized as none (its reader names the problem)."""
    total = 0
    for path in files:
        try:
            size = path.stat().st_size
        except OSError:
            continue
        total += size * GZIP_EXPANSION if path.name.lower().endswith(".gz") else size
    return total
