"""The ledger on Apache Spark, over a contextledger archive: the same numbers by the same rules.

A team that already runs Spark points it at an archive's Parquet files; the views are
the DuckDB views' own SQL (``ledger/sql/*.sql``), transpiled with sqlglot, so there is
no second implementation to drift. Nothing here imports ``pyspark`` (or ``sqlglot``)
until a function is called: importing contextledger, and every local command, works
without the ``spark`` extra. Install it with ``pip install 'contextledger[spark]'``.

Every function takes an optional ``spark`` session; without one, :func:`session`
builds one from the usual conventions (``spark-submit``'s settings, else
``$SPARK_MASTER``, else ``local[*]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["available", "session"]


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
    """The Spark session to run on (see :mod:`contextledger.spark.session`)."""
    from contextledger.spark.session import get_session

    return get_session(master, app_name)
