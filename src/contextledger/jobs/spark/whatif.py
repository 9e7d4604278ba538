"""Window what-if on Spark: the same replay code, run on the executors a batch of runs at a time.

Each run's ``STREAMS`` row is joined with its ``MESSAGES`` and ``STANDINGS`` rows
(nested, one row per run) and ``mapInArrow`` hands the executors batches of runs; each
batch is rebuilt into message streams and replayed by :func:`whatif_table`, the function
``whatif`` runs locally (kernel and exact replay alike), so the rows cannot drift. Spark
keeps no order, so the order is made explicit: standings rows by (file, row in file), as
the local path reads them, and the result by ``run_order``, then policy as given.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contextledger.archive.tables import ArchiveTables
from contextledger.archive.windows import require_streams
from contextledger.jobs.spark.session import get_session
from contextledger.jobs.spark.views import archive_of, read_table, to_polars
from contextledger.jobs.whatif import ArchiveReplay, with_problems
from contextledger.tables import schema
from contextledger.tables.windows import streams_from_tables
from contextledger.window.policies import Policy
from contextledger.window.whatif import parse_policies, whatif_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: What the executors return: the per-run rows, and the keys that order them.
_ORDERED = schema.WHATIF_RUNS.append(pa.field("_run_order", pa.int64())).append(
    pa.field("_policy", pa.int32())
)
_POSITION = ["file_index", "file_row_number"]


def whatif_rows(
    source: str | Path | ArchiveTables,
    policies: Sequence[tuple[str, Policy]] | Sequence[str | Policy],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    spark: SparkSession | None = None,
) -> pl.DataFrame:
    """``whatif_archive(source, policies, standings_rows).per_run``, replayed on Spark.

    ``standings_rows`` (``schema.STANDINGS``-like dicts) add to the findings ledgers the
    archive stores, as ``--standings FILE`` does. Raises ``ArchiveError`` for an archive
    without message streams.
    """
    tables = archive_of(source, None)
    require_streams(tables.archive, tables.commits)
    parsed = _parsed(policies)
    session = spark or get_session()
    runs = _runs(session, tables)
    replay = _replayer(parsed, [dict(row) for row in standings_rows])
    from pyspark.sql.pandas.types import from_arrow_schema

    out = runs.mapInArrow(replay, from_arrow_schema(_ORDERED))
    ordered = out.orderBy("_run_order", "_policy").drop("_run_order", "_policy")
    return to_polars(ordered, schema.WHATIF_RUNS)


def whatif_archive(
    source: str | Path | ArchiveTables,
    policies: Sequence[tuple[str, Policy]] | Sequence[str | Policy],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    spark: SparkSession | None = None,
) -> ArchiveReplay:
    """:func:`~contextledger.window.whatif.whatif_archive` on Spark: the rows, how fast,
    and the selected runs without a stored stream (named, as the local path names them)."""
    started = time.perf_counter()
    tables = archive_of(source, None)
    rows = whatif_rows(tables, policies, standings_rows, spark)
    runs = rows["run_id"].n_unique() if rows.height else 0
    return with_problems(ArchiveReplay(rows.lazy(), runs, time.perf_counter() - started), tables)


def _parsed(
    policies: Sequence[tuple[str, Policy]] | Sequence[str | Policy],
) -> list[tuple[str, Policy]]:
    """``(label, policy)`` pairs: as given when already parsed, else parsed."""
    if policies and all(isinstance(item, tuple) for item in policies):
        return [item for item in policies if isinstance(item, tuple)]
    return parse_policies([item for item in policies if not isinstance(item, tuple)])


def _runs(spark: SparkSession, tables: ArchiveTables) -> DataFrame:
    """One row per selected run with a stream: its ``STREAMS`` columns, ``_messages`` and
    ``_standings`` (its rows of those tables, nested)."""
    from pyspark.sql import functions as F

    streams = read_table(spark, tables, "streams", schema.STREAMS)
    messages = read_table(spark, tables, "messages", schema.MESSAGES)
    standings = read_table(spark, tables, "standings", schema.STANDINGS, positioned=True)
    nested_messages = messages.groupBy("run_id").agg(
        F.collect_list(F.struct(*schema.MESSAGES.names)).alias("_messages")
    )
    nested_standings = standings.groupBy("run_id").agg(
        F.collect_list(F.struct(*schema.STANDINGS.names, *_POSITION)).alias("_standings")
    )
    return streams.join(nested_messages, "run_id", "left").join(nested_standings, "run_id", "left")


def _replayer(
    policies: list[tuple[str, Policy]], given: list[dict[str, Any]]
) -> Any:  # Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], shipped to executors
    count = len(policies)

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not batch.num_rows:
                continue
            table = pa.Table.from_batches([batch])
            streams = table.select(schema.STREAMS.names).cast(schema.STREAMS)
            messages = _flattened(table["_messages"], schema.MESSAGES)
            standings = _flattened(table["_standings"], schema.STANDINGS, by=_POSITION)
            rows = whatif_table(
                streams_from_tables(streams, messages),
                policies,
                [*standings.select(schema.STANDINGS.names).to_pylist(), *given],
            ).to_arrow()
            orders = np.asarray(streams["run_order"].to_numpy(), dtype=np.int64)
            rows = rows.cast(schema.WHATIF_RUNS)
            rows = rows.append_column("_run_order", pa.array(np.repeat(orders, count)))
            rows = rows.append_column(
                "_policy", pa.array(np.tile(np.arange(count, dtype=np.int32), len(orders)))
            )
            yield from rows.to_batches()

    return replay


def _flattened(
    nested: pa.ChunkedArray, table_schema: pa.Schema, by: Sequence[str] = ()
) -> pa.Table:
    """A list-of-struct column's elements as a table of ``table_schema``, sorted ``by``
    the given fields first (standings: file, then row in file, as the local path reads)."""
    table = pa.Table.from_struct_array(pc.list_flatten(nested.combine_chunks()))
    if by:
        table = table.sort_by([(name, "ascending") for name in by])
    return table.select(table_schema.names).cast(table_schema)
