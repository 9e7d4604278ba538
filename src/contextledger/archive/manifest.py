"""The archive's manifest, read back: which sources were read, which runs are held,
and what is quarantined now.

Every ingest (and ``synth``) appends manifest rows in its commit; these readers
answer from them without reading any run's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from contextledger.archive import store
from contextledger.archive.durable import write_atomically
from contextledger.archive.store import Archive


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
    found = archive.location.scan(files, store.RUN_INDEX)
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
    empty = pl.DataFrame(pa.Table.from_pylist([], schema=store.QUARANTINE))
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
