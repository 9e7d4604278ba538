"""The ledger on Apache Spark, over a contextledger archive: the same numbers by the same rules.

A team that already runs Spark points it at an archive's Parquet files; the views are
the DuckDB views' own SQL (``ledger/sql/*.sql``), transpiled with sqlglot, so there is
no second implementation to drift; the window what-if runs the local replay code on
the executors (:mod:`contextledger.jobs.spark.whatif`), and ingest reads the snapshot
files there (:mod:`contextledger.jobs.spark.reader`). Nothing here imports ``pyspark``
(or ``sqlglot``) until a function is called: importing contextledger, and every local command, works
without the ``spark`` extra. Install it with ``pip install 'contextledger[spark]'``.

Every function takes an optional ``spark`` session; without one, :func:`session`
builds one from the usual conventions (``spark-submit``'s settings, else
``$SPARK_MASTER``, else ``local[*]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import polars as pl
    from pyspark.sql import SparkSession

    from contextledger.archive.tables import ArchiveTables
    from contextledger.jobs.ingest import IngestReport
    from contextledger.jobs.whatif import ArchiveReplay
    from contextledger.ledger.compute import Ledger
    from contextledger.window.policies import Policy

__all__ = [
    "available",
    "ingest",
    "ledger",
    "ledger_rows",
    "register_views",
    "session",
    "sql",
    "whatif_archive",
    "whatif_rows",
]


def available() -> str | None:
    """None when Spark can be used here; else why not (the extra is not installed)."""
    import importlib.util

    missing = [name for name in ("pyspark", "sqlglot") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not installed: "
            "pip install 'contextledger[spark]' (Spark also needs Java 17 or later)"
        )
    return None


def session(master: str | None = None, app_name: str = "contextledger") -> SparkSession:
    """The Spark session to run on (see :mod:`contextledger.jobs.spark.session`)."""
    from contextledger.jobs.spark.session import get_session

    return get_session(master, app_name)


def ingest(
    paths: Sequence[str],
    archive_dir: str,
    spark: SparkSession | None = None,
    **options: Any,
) -> IngestReport:
    """``contextledger.jobs.ingest.ingest`` with the snapshot files read on the executors;
    batches and commits are written by the driver, so the archive is a local ingest's
    (see :mod:`contextledger.jobs.spark.reader`)."""
    from contextledger.jobs.spark.reader import spark_ingest

    return spark_ingest(paths, archive_dir, spark, **options)


def register_views(
    source: str | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> SparkSession:
    """A Spark session with the archive's tables and the ledger views registered as
    temporary views (see :mod:`contextledger.jobs.spark.views`)."""
    from contextledger.jobs.spark.views import register

    return register(source, mode, spark, use_totals=use_totals)


def ledger(
    source: str | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> Ledger:
    """``compute_ledger(ArchiveTables(...))``, computed by Spark SQL."""
    from contextledger.jobs.spark.views import spark_ledger

    return spark_ledger(source, mode, spark, use_totals=use_totals)


def ledger_rows(
    source: str | ArchiveTables,
    mode: str | None = None,
    spark: SparkSession | None = None,
    *,
    use_totals: bool | None = None,
) -> pl.DataFrame:
    """``compute_ledger(ArchiveTables(...)).rows()``, computed by Spark SQL's ``ledger_rows``."""
    from contextledger.jobs.spark.views import spark_ledger_rows

    return spark_ledger_rows(source, mode, spark, use_totals=use_totals)


def sql(
    source: str | ArchiveTables,
    query: str,
    mode: str | None = None,
    spark: SparkSession | None = None,
) -> pl.DataFrame:
    """Run ``query`` (Spark SQL) over the archive's tables and the ledger views."""
    from contextledger.jobs.spark.views import spark_sql

    return spark_sql(source, query, mode, spark)


def whatif_rows(
    source: str | ArchiveTables,
    policies: Sequence[tuple[str, Policy]] | Sequence[str | Policy],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    spark: SparkSession | None = None,
) -> pl.DataFrame:
    """The what-if's per-run rows over an archive (``schema.WHATIF_RUNS``, runs in ingest
    order, policies as given), replayed on the executors a batch of runs at a time."""
    from contextledger.jobs.spark.whatif import whatif_rows as rows

    return rows(source, policies, standings_rows, spark)


def whatif_archive(
    source: str | ArchiveTables,
    policies: Sequence[tuple[str, Policy]] | Sequence[str | Policy],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    spark: SparkSession | None = None,
) -> ArchiveReplay:
    """``contextledger.window.whatif.whatif_archive`` on Spark (rows, speed, runs it could
    not replay): what ``whatif --engine spark`` prints from."""
    from contextledger.jobs.spark.whatif import whatif_archive as replay

    return replay(source, policies, standings_rows, spark)
