"""The window tables an archive stores, read back for ``whatif`` and the report.

Ingest stores each run's message stream as rows (``schema.STREAMS``, ``MESSAGES``,
``STANDINGS``); these read the selected runs' rows a batch at a time, so replaying an
archive holds one batch in memory, and name the selected runs archived without one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from contextledger.archive.selection import Selection
from contextledger.archive.store import Archive, ArchiveError, Commit
from contextledger.archive.tables import ArchiveTables
from contextledger.read.messages import RunMessages
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES

#: Runs rebuilt and replayed at a time when ``whatif`` reads an archive.
STREAM_BATCH_RUNS = 2000


def stream_batches(
    archive: Archive, selection: Selection | None = None, batch_runs: int = STREAM_BATCH_RUNS
) -> Iterator[tuple[list[RunMessages], list[dict[str, Any]]]]:
    """The selected runs' message streams and snapshot standings, a batch at a time:
    :func:`window_batches` with each batch's streams rebuilt as ``Message`` objects.

    >>> import tempfile
    >>> from contextledger.jobs.ingest import ingest
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = ingest(["data/sample"], folder, workers=1)
    ...     sizes = [len(s) for s, _ in stream_batches(Archive.open(folder), batch_runs=10)]
    >>> sizes
    [10, 4]
    """
    from contextledger.tables.windows import streams_from_tables

    for streams, messages, standings in window_batches(archive, selection, batch_runs):
        yield streams_from_tables(streams, messages), standings.to_pylist()


def window_batches(
    archive: Archive, selection: Selection | None = None, batch_runs: int = STREAM_BATCH_RUNS
) -> Iterator[tuple[pa.Table, pa.Table, pa.Table]]:
    """The selected runs' window tables, a batch at a time: ``(streams, messages,
    standings)``, the ``schema.STREAMS`` rows in ingest order and the others' rows of
    those runs.

    Reads one commit's window tables at a time (a commit holds at most the ingest's
    ``--batch-runs``) and yields at most ``batch_runs`` runs at once, in ingest order,
    so memory does not grow with the archive. Raises :class:`ArchiveError` when a
    selected batch was written without message streams (an archive ingested before
    they were stored, or written by ``synth --archive --no-streams``). A run whose
    stream could not be stored is left out: :func:`unreplayable_runs` names them.
    """
    import pyarrow.compute as pc

    selection = selection or Selection()
    ids = ArchiveTables(archive, ACCOUNTING_MODES[0], selection).run_id_filter()
    chosen = [commit for commit in archive.commits if selection.keeps(commit)]
    archive.verify_content([f for c in chosen for f in c.files if f.table in _WINDOW_SCHEMAS])
    commits = [commit for commit in archive.commits if selection.keeps(commit)]
    require_streams(archive, commits)
    wanted = pa.array(ids, type=pa.string()) if ids is not None else None

    # the selected runs' rows are kept as they are read: the report's one timeline run
    # costs a fifth of reading its commit's messages whole
    kept = {} if wanted is None else {"filters": pc.field("run_id").isin(wanted)}

    def read(commit: Commit, table: str) -> pa.Table:
        table_schema = _WINDOW_SCHEMAS[table]
        paths = archive.paths(archive.files(table, [commit]))
        parts = [archive.location.read_table(path, schema=table_schema, **kept) for path in paths]
        return pa.concat_tables(parts) if parts else table_schema.empty_table()

    for commit in commits:
        streams = read(commit, "streams")
        if not streams.num_rows:
            continue
        streams = streams.sort_by("run_order")
        messages, standings = read(commit, "messages"), read(commit, "standings")
        for start in range(0, streams.num_rows, batch_runs):
            part = streams.slice(start, batch_runs)
            chosen_messages, chosen_standings = messages, standings
            if part.num_rows < streams.num_rows:
                chosen = part["run_id"].combine_chunks()
                chosen_messages = messages.filter(pc.is_in(messages["run_id"], value_set=chosen))
                chosen_standings = standings.filter(pc.is_in(standings["run_id"], value_set=chosen))
            yield part, chosen_messages, chosen_standings


def runs_without_streams(commits: Sequence[Commit]) -> int:
    """How many runs ``commits`` archived without storing their message streams."""
    return sum(
        commit.run_count
        for commit in commits
        if commit.run_count and not any(file.table == "streams" for file in commit.files)
    )


def require_streams(archive: Archive, commits: Sequence[Commit]) -> None:
    """Raise :class:`ArchiveError` (saying what to do) when one of ``commits`` holds runs
    but no message streams: ``whatif`` cannot replay them."""
    without = runs_without_streams(commits)
    if without:
        raise ArchiveError(
            f"{archive.location}: {without} archived run(s) have no "
            "message streams (ingested before archives stored them, or written by "
            "synth --archive --no-streams), so whatif cannot replay them; ingest the "
            "snapshots again into a new archive (contextledger ingest PATH... --archive "
            "NEW_DIR) and point whatif at that"
        )


_WINDOW_SCHEMAS = {
    "streams": schema.STREAMS,
    "messages": schema.MESSAGES,
    "standings": schema.STANDINGS,
}


def _rows(archive: Archive, commit: Commit, table: str) -> int:
    """The rows of ``table`` that ``commit`` recorded writing (one a run, for the run
    index and the streams)."""
    return sum(file.rows for file in archive.files(table, [commit]))


#: Why a selected run without a stored stream is left out, when ingest did not say.
NO_STREAM = "no message stream stored for this run, so whatif cannot replay it"


def unreplayable_runs(archive: Archive, selection: Selection | None = None) -> list[dict[str, Any]]:
    """The selected runs :func:`stream_batches` leaves out: archived (their ledger rows
    are there) without a stored message stream, in ingest order, as ``schema.PROBLEMS``
    rows (path, line, run_id, reason).

    Each is named as its quarantine row names it (a stream ingest could not fold is
    quarantined for ``whatif`` only, with the reason), else by the run's source with
    :data:`NO_STREAM`. Reads one commit's run ids at a time.
    """
    import pyarrow.compute as pc

    selection = selection or Selection()
    ids = ArchiveTables(archive, ACCOUNTING_MODES[0], selection).run_id_filter()
    wanted = pa.array(ids, type=pa.string()) if ids is not None else None
    columns = ["run_id", "run_order", "source_path", "source_line"]
    missing: list[dict[str, Any]] = []
    for commit in archive.commits:
        if not commit.run_count or not selection.keeps(commit):
            continue
        if wanted is None and _rows(archive, commit, "streams") == _rows(
            archive, commit, "run_index"
        ):
            continue  # a stream for each run, by the rows the commit records: none read
        paths = archive.paths(archive.files("run_index", [commit]))
        read = archive.location.read_table
        index = pa.concat_tables([read(path, columns=columns) for path in paths])
        if wanted is not None:
            index = index.filter(pc.is_in(index["run_id"], value_set=wanted))
        paths = archive.paths(archive.files("streams", [commit]))
        stored = [read(path, columns=["run_id"])["run_id"] for path in paths]
        if stored:
            held = pa.chunked_array(stored).combine_chunks()
            index = index.filter(pc.invert(pc.is_in(index["run_id"], value_set=held)))
        missing.extend(index.to_pylist())
    if not missing:
        return []
    said: dict[str, dict[str, Any]] = {}  # the latest whatif quarantine row of each run
    for path in archive.paths(archive.files("quarantine")):
        for row in archive.location.read_table(path).to_pylist():
            if row["accounting"] == "whatif" and row["run_id"] is not None:
                said[row["run_id"]] = row
    problems = []
    for row in sorted(missing, key=lambda row: row["run_order"]):
        quarantined = said.get(row["run_id"])
        if quarantined is not None:
            where = (quarantined["path"], quarantined["line"], quarantined["reason"])
        else:
            where = (row["source_path"], row["source_line"], NO_STREAM)
        problems.append(
            {"path": where[0], "line": where[1], "run_id": row["run_id"], "reason": where[2]}
        )
    return problems
