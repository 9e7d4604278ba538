"""The archive's manifest: the schemas of its tables (the sources read, the runs held,
what is quarantined), and the readers that answer from them.

Every ingest (and ``synth``) appends manifest rows in its commit; these readers
answer from them without reading any run's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from contextledger.archive.durable import write_atomically
from contextledger.archive.store import Archive
from contextledger.tables import schema

#: The manifest: every source read (a file, an outcomes file, a synthetic batch).
SOURCES = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # snapshots / outcomes / synth
        pa.field("size", pa.int64()),  # bytes; null: could not be opened
        pa.field("mtime_ns", pa.int64()),
        pa.field("content_hash", pa.string()),  # blake2b-128 of the file's bytes
        pa.field("status", pa.string(), nullable=False),  # read / unreadable / deleted
        pa.field("run_ids", pa.list_(pa.string()), nullable=False),  # runs it added
        pa.field("runs_read", pa.int64(), nullable=False),
        pa.field("runs_already_archived", pa.int64(), nullable=False),  # same id, same content
        pa.field("runs_conflicting", pa.int64(), nullable=False),  # same id, other content
        pa.field("problem_count", pa.int64(), nullable=False),
    ]
)

#: The manifest's run index: one row per run the archive holds.
RUN_INDEX = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),  # read.digest.content_digest
        pa.field("run_order", pa.int64(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("source_line", pa.int32()),
        # the snapshot's footprintjs runId (read.identity: one recording under two ids);
        # null in archives written before it was stored, and for a snapshot without one
        pa.field("execution_id", pa.string()),
    ]
)

#: What a batch could not take in: schema.PROBLEMS, plus the mode it is confined to.
QUARANTINE = pa.schema(
    [
        *schema.PROBLEMS,
        pa.field("accounting", pa.string()),  # null: every mode
        pa.field("ingest_date", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class KnownSource:
    """What the manifest last recorded of a source file."""

    size: int | None
    mtime_ns: int | None
    content_hash: str | None
    clean: bool  # read, and nothing in it was quarantined
    kind: str = "snapshots"
    #: ``read``, ``unreadable``, or ``deleted`` (a quarantined file since deleted, retired).
    status: str = "read"


def committed_sources(archive: Archive) -> dict[str, KnownSource]:
    """The latest manifest entry of every source path."""
    files = archive.paths(archive.files("sources"))
    if not files:
        return {}
    latest = (
        archive.location.scan(files)
        .select("path", "kind", "size", "mtime_ns", "content_hash", "status", "problem_count")
        .group_by("path", maintain_order=True)
        .last()
        .collect()
    )
    return {
        row["path"]: KnownSource(
            row["size"],
            row["mtime_ns"],
            row["content_hash"],
            row["status"] == "read" and row["problem_count"] == 0,
            row["kind"],
            row["status"],
        )
        for row in latest.iter_rows(named=True)
    }


def _run_index(
    archive: Archive,
    key: str,
    values: Iterable[str | None],
    columns: Sequence[str],
    ordered: bool = True,
) -> pl.DataFrame:
    """``columns`` of the run index's rows whose ``key`` is one of ``values``, in run
    order if ``ordered`` (filtered as they are read, by a join: the ids are hashed once
    however many files; a column older archives lack reads as null)."""
    files = archive.paths(archive.files("run_index"))
    given = values if isinstance(values, pl.Series) else list(values)
    wanted = pl.Series(key, given, dtype=pl.String).drop_nulls().unique()
    if not files or wanted.is_empty():
        return pl.DataFrame(schema={name: pl.String for name in columns})
    found = archive.location.scan(files, RUN_INDEX)
    found = found.join(wanted.to_frame().lazy(), on=key, how="semi")
    return (found.sort("run_order") if ordered else found).select(columns).collect()


def indexed_runs(archive: Archive, run_ids: Iterable[str], columns: Sequence[str]) -> pl.DataFrame:
    """``columns`` of the run index's rows of ``run_ids``, in run order."""
    return _run_index(archive, "run_id", run_ids, columns)


def archived_digests(
    archive: Archive, run_ids: Iterable[str]
) -> dict[str, tuple[str, str, int | None]]:
    """``run_id -> (digest, source_path, source_line)`` for those of ``run_ids`` the
    archive holds."""
    found = _run_index(
        archive, "run_id", run_ids, ("run_id", "digest", "source_path", "source_line")
    )
    return {run_id: (digest, path, line) for run_id, digest, path, line in found.iter_rows()}


def archived_executions(
    archive: Archive, execution_ids: Iterable[str | None]
) -> dict[str, tuple[str, str, str, int | None]]:
    """``execution id -> (run_id, digest, source_path, source_line)`` of the first run the
    archive holds with each of ``execution_ids`` (none from archives written before
    execution ids were stored: their runs are known by run id only)."""
    columns = ("execution_id", "run_id", "digest", "source_path", "source_line")
    found = _run_index(archive, "execution_id", execution_ids, columns)
    first = found.unique("execution_id", keep="first", maintain_order=True)
    return {row[0]: (row[1], row[2], row[3], row[4]) for row in first.iter_rows()}


def commits_holding(archive: Archive, run_ids: Iterable[str]) -> set[int]:
    """The numbers of the commits that hold any of ``run_ids`` (by the run index)."""
    return commits_of(archive, held_runs(archive, run_ids)["run_order"])


def runs_held(archive: Archive, run_ids: Iterable[str]) -> dict[str, int]:
    """Those of ``run_ids`` the archive holds, each with its ``run_order``."""
    found = held_runs(archive, run_ids)
    return dict(zip(found["run_id"].to_list(), found["run_order"].to_list(), strict=True))


def held_runs(archive: Archive, run_ids: Iterable[str]) -> pl.DataFrame:
    """Those of ``run_ids`` the archive holds, with their ``run_order``, in no order."""
    return _run_index(archive, "run_id", run_ids, ("run_id", "run_order"), ordered=False)


def commits_of(archive: Archive, run_orders: Iterable[int] | pl.Series) -> set[int]:
    """The numbers of the commits that added the runs at ``run_orders``."""
    import numpy as np

    commits = [commit for commit in archive.commits if commit.run_count]
    orders = (
        pl.Series(run_orders, dtype=pl.Int64)
        if not isinstance(run_orders, pl.Series)
        else run_orders
    )
    if not commits or orders.is_empty():
        return set()
    starts = np.array([commit.first_run_order for commit in commits], dtype=np.int64)
    at = np.searchsorted(starts, orders.unique().to_numpy(), side="right") - 1
    return {commits[i].seq for i in np.unique(at).tolist()}


def current_quarantine(archive: Archive) -> pl.DataFrame:
    """What is quarantined now: the problems of each source's latest ingest."""
    empty = pl.DataFrame(pa.Table.from_pylist([], schema=QUARANTINE))
    rows = []
    latest: dict[str, int] = {}
    for commit in archive.commits:
        for file in commit.files:
            if file.table == "sources":
                scan = archive.location.scan(archive.paths([file]))
                paths = scan.select("path").collect()
                latest.update(dict.fromkeys(paths["path"].to_list(), commit.seq))
    for commit in archive.commits:
        for file in commit.files:
            if file.table == "quarantine":
                table = archive.location.scan(archive.paths([file])).collect()
                rows.append(
                    table.filter(
                        pl.col("path").replace_strict(latest, default=-1, return_dtype=pl.Int64)
                        == commit.seq
                    )
                )
    return pl.concat([empty, *rows]) if rows else empty


def write_quarantine_listing(archive: Archive) -> None:
    """``quarantine.json``: the current quarantine, for people and scripts."""
    import json

    rows = current_quarantine(archive).to_dicts()
    text = json.dumps({"quarantined": rows}, indent=1, ensure_ascii=False) + "\n"
    write_atomically(archive.root / "quarantine.json", text.encode())


# ── progress ───────────────────────────────────────────────────────
