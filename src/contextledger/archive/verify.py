"""Reading an archive through: the damage only reading every row can show.

Apart from :mod:`.store` because opening an archive must stay cheap (commit files,
sizes, checksums); this reads every file to its last row, for ``check`` and the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from contextledger.archive.damage import ArchiveProblem
from contextledger.archive.location import ArchiveError, Location, locate
from contextledger.archive.store import COMMITS_DIR, Archive


def verify_archive(root: str | Path | Location | Archive) -> list[ArchiveProblem]:
    """Everything found wrong with the archive at ``root``, each naming its file (empty:
    nothing). Reads every committed file through.

    Beyond what opening an archive checks (:attr:`Archive.damage`: every commit file
    readable and numbered without a gap up to the head, every file it lists there, with
    the size it was written with), it checks that every file reads to its last row and
    holds the rows its commit says, and that each commit's run index, and its runs
    table under each accounting, hold exactly the runs its commit counts (run orders
    ``first_run_order`` on, with no gap from the commit before): a run the manifest holds
    that no commit counts, or the reverse, is named.

    >>> import tempfile
    >>> from contextledger.jobs.ingest import ingest
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = ingest(["data/sample"], folder, workers=1)
    ...     verify_archive(folder)
    []
    """
    location = root.location if isinstance(root, Archive) else root
    try:
        archive = Archive.open(location)
    except ArchiveError as error:
        named = location if isinstance(location, Location) else locate(location)
        return [ArchiveProblem(named.name("archive.json"), str(error))]
    every_file = [file for commit in archive.commits for file in commit.files]
    archive.verify_content(every_file, remembered=False)
    problems = list(archive.damage)
    modes = {file.accounting for file in archive.files("runs")}
    where = archive.location
    for commit in archive.commits:
        for file in commit.files:
            why = _unreadable_rows(where, where.path(file.path), file.rows)
            if why is not None:
                problems.append(ArchiveProblem(where.name(file.path), why, commit.ingest_date))
        expected = list(range(commit.first_run_order, commit.next_run_order))
        for table, accounting in [("run_index", None), *(("runs", mode) for mode in modes)]:
            files = [f for f in archive.files(table, [commit]) if f.accounting == accounting]
            orders = _run_orders(where, archive.paths(files))
            if orders is not None and orders != expected:
                held = f"{table}" + (f" ({accounting})" if accounting else "")
                reason = (
                    f"its {held} holds {len(orders)} run(s) ({_span(orders)}), but the commit "
                    f"counts {commit.run_count} ({_span(expected)})"
                )
                listed = where.name(f"{COMMITS_DIR}/{commit.seq:08d}-{commit.token}.json")
                problems.append(ArchiveProblem(listed, reason, commit.ingest_date))
    return problems


def _unreadable_rows(location: Location, path: str, rows: int) -> str | None:
    """Why ``path`` does not read through to ``rows`` rows (None: it does)."""
    try:
        batches = location.parquet_file(path).iter_batches(1 << 16)
        found = sum(batch.num_rows for batch in batches)
    except (OSError, pa.ArrowException) as error:
        return f"not a readable Parquet file ({error})"
    return None if found == rows else f"{found} rows, its commit says {rows}"


def _run_orders(location: Location, paths: Sequence[str]) -> list[int] | None:
    """The sorted run orders ``paths`` hold (None: one cannot be read; named elsewhere)."""
    try:
        columns = [location.read_table(path, columns=["run_order"])["run_order"] for path in paths]
    except (OSError, pa.ArrowException, KeyError):
        return None
    return sorted(value for column in columns for value in column.to_pylist())


def _span(orders: Sequence[int]) -> str:
    """``run_order A-B``, or ``none``."""
    return f"run_order {orders[0]}-{orders[-1]}" if orders else "none"
