"""The archive's committed files as Spark tables, and the ledger views over them.

The tables Spark reads are exactly those the DuckDB path reads (``ArchiveTables``
picks the committed files of the selection, so a crashed ingest's leftovers are never
counted); the views are the DuckDB views' SQL, transpiled (:mod:`.dialect`). Spark keeps
no row order; the views order by stored keys (``run_order``, ``seq``) throughout, except
``outcome_rows``: DuckDB numbers the outcomes table's rows in insertion order (see
``outcome_rows.sql``), so Spark registers them with the same order made explicit:
outcomes files as :meth:`ArchiveTables.outcome_files` lists them, each row's place in its
file (``file_index``, and ``file_row_number`` from Spark's ``_metadata.row_index``), then
the labels given in Python; each (run, label) pair once, numbered by its first row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import pyarrow as pa

from contextledger.archive.location import Location
from contextledger.archive.store import ArchiveError
from contextledger.archive.tables import ArchiveTables, archive_tables
from contextledger.jobs.spark.dialect import to_spark
from contextledger.jobs.spark.session import get_session
from contextledger.ledger.compute import Ledger
from contextledger.ledger.duckdb_views import (
    BASE_VIEWS,
    PIECE_VIEWS,
    VIEWS,
    credit_views,
    view_sql,
)
from contextledger.tables import schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Views DuckDB alone creates, and why (Spark registers their rows from explicit keys).
DUCKDB_ONLY = {
    "outcome_rows": "numbers the outcomes rows in insertion order, which Spark does not keep",
}

#: A row's place: its file's in the list read, and its own in the file.
_POSITIONED = pa.schema(
    [pa.field("file_index", pa.int64()), pa.field("file_row_number", pa.int64())]
)


def view_files(pieces: str, credit: bool = False) -> list[str]:
    """The ``ledger/sql`` files whose views Spark registers, in creation order: the
    archive's base views, the piece views (``"totals"`` or ``"rows"``), then the rest
    (``piece_outcomes`` from the stored label credit, given ``credit``)."""
    names = (
        *BASE_VIEWS["archive"],
        *PIECE_VIEWS[pieces],
        *(credit_views(VIEWS) if credit else VIEWS),
    )
    return [name for name in names if name not in DUCKDB_ONLY]


def archive_of(source: str | Path | ArchiveTables, mode: str | None) -> ArchiveTables:
    """``source`` as ArchiveTables: an ``ArchiveTables`` as it is, or an archive path
    (``DIR`` or ``DIR?since=..&label=..``) read under ``mode`` (default corrected)."""
    if isinstance(source, ArchiveTables):
        if mode is not None and mode != source.mode:
            raise ValueError(f"mode {mode!r} given for tables read under {source.mode!r}")
        return source
    tables = archive_tables([str(source)], mode or "corrected")
    if tables is None:
        raise ArchiveError(
            f"{source}: Spark reads an archive (contextledger ingest PATH... --archive DIR); "
            "this is not one"
        )
    return tables


def register(
    source: str | Path | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> SparkSession:
    """A new session of ``spark`` (its own temporary views) holding the tables ``runs``,
    ``offers``, ``uses``, ``outcomes``, ``offers_first_in_run``, ``uses_first_in_run``,
    ``outcome_rows`` (and ``piece_totals``, ``label_credit`` and ``uncredited_offers``
    where the stored totals and label credit are used), and every ledger view.

    ``use_totals``: None adds up the stored piece totals when they cover the selection
    (as the DuckDB and Polars paths do); False reads every offer and use; True insists
    on the totals (raises :class:`ArchiveError` when they do not cover the selection).
    """
    tables = archive_of(source, mode)
    session = (spark or get_session()).newSession()
    totals = tables.totals_files() if use_totals is not False else None
    if use_totals and totals is None:
        raise ArchiveError("the stored piece totals do not cover this selection")
    credit = tables.credit_files() if totals is not None else None
    for name, frame in _sources(session, tables, totals).items():
        frame.createOrReplaceTempView(name)
    if credit is not None:
        for name, frame in _credit_sources(session, tables, credit).items():
            frame.createOrReplaceTempView(name)
    for file in view_files("rows" if totals is None else "totals", credit is not None):
        name, query = to_spark(view_sql(file), lambda table: session.table(table).columns)
        session.sql(query).createOrReplaceTempView(name)
    return session


def _sources(
    spark: SparkSession, tables: ArchiveTables, totals: list[str] | None
) -> dict[str, DataFrame]:
    def read(table: str, table_schema: pa.Schema) -> DataFrame:
        return read_table(spark, tables, table, table_schema)

    sources = {
        "runs": read("runs", schema.RUNS),
        "offers": read("offers", schema.OFFERS),
        "uses": read("uses", schema.USES),
        "offers_first_in_run": read_table(spark, tables, "offers", schema.OFFERS, True),
        "uses_first_in_run": read_table(spark, tables, "uses", schema.USES, True),
    }
    where = tables.archive.location
    if totals is not None:
        sources["piece_totals"] = _read(spark, where, totals, schema.PIECE_TOTALS, False)
    rows = _outcome_rows(spark, tables)
    sources["outcome_rows"] = rows
    sources["outcomes"] = rows.orderBy("row_position").select("run_id", "label")
    return sources


def _credit_sources(
    spark: SparkSession, tables: ArchiveTables, credit: tuple[list[str], list[str], list[str]]
) -> dict[str, DataFrame]:
    """The stored label credit that stands, and the first offers it does not cover."""
    stored, uncovered, _ = credit
    where = tables.archive.location
    return {
        "label_credit": _read(spark, where, stored, schema.LABEL_CREDIT, False),
        "uncredited_offers": _read(spark, where, uncovered, schema.OFFERS, False),
    }


def _literal(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped: Spark reads a path as a pattern, so
    an archive under a folder named ``runs [1]`` would otherwise match no file.

    >>> _literal("/data/runs [1]/a.parquet")
    '/data/runs \\\\[1\\\\]/a.parquet'
    """
    return "".join(f"\\{char}" if char in "\\*?[]{}" else char for char in path)


def _read(
    spark: SparkSession,
    where: Location,
    files: Sequence[str],
    table_schema: pa.Schema,
    positioned: bool,
) -> DataFrame:
    """``files``' columns in ``table_schema``; ``positioned`` adds ``file_index`` (the
    file's place in ``files``) and ``file_row_number`` (the row's in its file). Spark
    reads them with its own (Hadoop) filesystems, by path or by the archive's URI."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    names = table_schema.names
    if not files:
        empty = table_schema
        for field in _POSITIONED if positioned else ():
            empty = empty.append(field)
        return spark.createDataFrame(empty.empty_table())
    reader = spark.read.schema(from_arrow_schema(table_schema))  # no job to infer it
    if not positioned:
        return reader.parquet(*(_literal(where.spark_path(f)) for f in files)).select(*names)
    # Spark names a row's file by URI (file:/..., s3a://...); the archive by its path
    # under the root. Archive paths hold only [A-Za-z0-9._%=/-] (hive values are
    # percent-quoted), of which a URI escapes only '%', so the last segments of the URI,
    # '%25' read back as '%', are the relative path.
    relative = [where.relative(file) for file in files]
    index = pa.table({"_file_key": relative, "file_index": pa.array(range(len(files)), pa.int64())})
    keys = spark.createDataFrame(index)
    parts = []
    for depth in sorted({key.count("/") + 1 for key in relative}):
        group = [f for f, key in zip(files, relative, strict=True) if key.count("/") + 1 == depth]
        segments = F.slice(F.split(F.col("_metadata.file_path"), "/"), -depth, depth)
        key = F.regexp_replace(F.concat_ws("/", segments), "%25", "%")
        frame = reader.parquet(*(_literal(where.spark_path(f)) for f in group)).select(
            *names,
            key.alias("_file_key"),
            F.col("_metadata.row_index").cast("bigint").alias("file_row_number"),
        )
        parts.append(frame.join(F.broadcast(keys), "_file_key").drop("_file_key"))
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    return frame.select(*names, "file_index", "file_row_number")


def read_table(
    spark: SparkSession,
    tables: ArchiveTables,
    table: str,
    table_schema: pa.Schema,
    first_in_run: bool | None = None,
    positioned: bool = False,
) -> DataFrame:
    """The selected files of ``table`` (committed only; offers and uses: those of
    ``first_in_run`` if given), the selection's run ids kept; ``positioned`` adds each
    row's ``file_index`` and ``file_row_number``."""
    from pyspark.sql import functions as F

    files = tables.files(table, first_in_run)
    frame = _read(spark, tables.archive.location, files, table_schema, positioned)
    ids = tables.run_id_filter()
    if ids is None:
        return frame
    chosen = spark.createDataFrame(pa.table({"run_id": pa.array(ids, pa.string())}))
    return frame.join(F.broadcast(chosen), "run_id", "left_semi")


def _outcome_rows(spark: SparkSession, tables: ArchiveTables) -> DataFrame:
    """Each (run, label) pair once with ``row_position``: its first row's place among the
    archived outcomes files' rows, then the labels given in Python (see the module)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    files = tables.outcome_files()
    rows = _read(spark, tables.archive.location, files, schema.OUTCOMES, True)
    if tables.extra_outcomes is not None and tables.extra_outcomes.num_rows:
        extra = tables.extra_outcomes.cast(schema.OUTCOMES)
        count = extra.num_rows
        extra = extra.append_column("file_index", pa.array([len(files)] * count, pa.int64()))
        extra = extra.append_column("file_row_number", pa.array(range(count), pa.int64()))
        rows = rows.unionByName(spark.createDataFrame(extra))
    first = rows.groupBy("run_id", "label").agg(
        F.min(F.struct("file_index", "file_row_number")).alias("_first")
    )
    number = F.row_number().over(Window.orderBy("_first")) - 1
    return first.select("run_id", "label", number.cast("bigint").alias("row_position"))


def to_polars(frame: DataFrame, table_schema: pa.Schema | None = None) -> pl.DataFrame:
    """A Spark result as a Polars frame, row order kept (cast to ``table_schema`` if given)."""
    table = frame.toArrow()
    if table_schema is not None:
        table = table.select(table_schema.names).cast(table_schema)
    return pl.DataFrame(pl.from_arrow(table))


def spark_ledger(
    source: str | Path | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> Ledger:
    """``compute_ledger(tables)`` by Spark SQL: the ``ledger`` view (insertion order) and
    the metered runs counted."""
    session = register(source, mode, spark, use_totals=use_totals)
    recorded = session.table("runs").where("metered").count()
    if recorded == 0:
        return Ledger(pl.DataFrame(schema.LEDGER.empty_table()), 0)
    frame = session.table("ledger").orderBy("insertion_order").drop("insertion_order")
    return Ledger(to_polars(frame, schema.LEDGER), int(recorded))


def spark_ledger_rows(
    source: str | Path | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> pl.DataFrame:
    """``compute_ledger(tables).rows()`` by Spark SQL's ``ledger_rows`` view."""
    session = register(source, mode, spark, use_totals=use_totals)
    return to_polars(session.table("ledger_rows"), schema.LEDGER)


def spark_sql(
    source: str | Path | ArchiveTables,
    query: str,
    mode: str | None = None,
    spark: SparkSession | None = None,
) -> pl.DataFrame:
    """``query`` (Spark SQL) over the tables and views :func:`register` creates."""
    session = register(source, mode, spark)
    return to_polars(session.sql(query))
