"""The ledger as DuckDB SQL views over the run tables, for ad-hoc queries.

The four Arrow tables are registered zero-copy as ``runs``, ``offers``, ``uses`` and
``outcomes``; the views in ``sql/`` (one readable file each) rebuild the Polars ledger
of ``compute.py`` row for row, in the same order, so either can check the other.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Protocol, runtime_checkable

import duckdb
import polars as pl

from contextledger.tables.build import RunTables

#: The views, in creation order (each reads only the tables and the views before it).
VIEWS = (
    "metered_offers",
    "metered_uses",
    "outcome_positions",
    "piece_offers",
    "piece_uses",
    "piece_outcomes",
    "ledger",
    "ledger_rows",
)

#: The registered tables the views read.
TABLES = ("runs", "offers", "uses", "outcomes")


@runtime_checkable
class HasParquetSources(Protocol):
    """Tables stored as Parquet (an archive): each table is a ``read_parquet`` query."""

    def duckdb_sources(self) -> dict[str, str]: ...


def view_sql(name: str) -> str:
    """The ``CREATE VIEW`` statement of view ``name``, as shipped in ``sql/NAME.sql``."""
    return (files("contextledger.ledger") / "sql" / f"{name}.sql").read_text(encoding="utf-8")


def views_sql() -> str:
    """Every view's statement, in creation order, one blank line apart."""
    return "\n".join(view_sql(name) for name in VIEWS)


def connect(
    tables: RunTables, con: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """Register ``tables`` on ``con`` (a new in-memory database by default) and create the views.

    Row order (``ledger``, and ties in ``ledger_rows``) relies on DuckDB's default
    ``preserve_insertion_order = true``.

    Examples
    --------
    >>> from contextledger.tables.build import read_runs
    >>> con = connect(read_runs("data/sample", mode="reference"))
    >>> con.sql("SELECT kind, count(*) FROM ledger_rows GROUP BY kind ORDER BY kind").fetchall()
    [('injection', 7), ('skill', 5), ('tool', 31)]
    """
    con = con if con is not None else duckdb.connect()
    sources = tables.duckdb_sources() if isinstance(tables, HasParquetSources) else {}
    for name in TABLES:
        if name in sources:  # an archive: read its Parquet files in place
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sources[name]}")
        else:
            con.register(name, getattr(tables, name))
    for name in VIEWS:
        con.execute(view_sql(name))
    return con


def ledger_rows_sql(tables: RunTables) -> pl.DataFrame:
    """``compute_ledger(tables).rows()``, computed by the ``ledger_rows`` view."""
    con = connect(tables)
    try:
        return con.sql("SELECT * FROM ledger_rows").pl()
    finally:
        con.close()
