"""The ledger as DuckDB SQL views over the run tables, for ad-hoc queries.

The four Arrow tables are registered zero-copy as ``runs``, ``offers``, ``uses`` and
``outcomes``; the views in ``sql/`` (one readable file each) rebuild the Polars ledger
of ``compute.py`` row for row, in the same order, so either can check the other.

Only the base views differ between tables in memory and an archive: ``metered_offers``
and ``metered_uses`` (every row of metered runs) and ``first_offers`` and ``first_uses``
(a piece's first row in each run, with a ``position`` ordering them by run_order, then
seq). In memory they are derived from the tables; an archive stores metered runs' rows
only, already split by first in run (``offers_first_in_run``, ``uses_first_in_run``), so
they read its files as they are: no distinct count, no join of every row with ``runs``.
Under a run-level filter, an archive's stored per-run totals (``run_totals``) give
``piece_totals``, ``piece_outcomes`` and ``first_offers`` of the selected runs instead
(``RUN_TOTALS_VIEWS``), from one temp table adding them up once (``RUN_TOTALS_TABLE``).
An archive also stores per-commit piece totals; when they cover the selection
(``piece_totals`` among its sources), ``piece_offers`` and ``piece_uses`` add them up
instead of counting every row, and its stored label credit, where it stands, gives
``piece_outcomes`` (``credit_piece_outcomes``) with the first offers it does not cover.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any, Protocol, runtime_checkable

import duckdb
import polars as pl

from contextledger.ledger.compute import StoredTables
from contextledger.tables.build import RunTables

#: The base views, by where the tables are: ``sql/NAME.sql`` for each name listed.
BASE_VIEWS = {
    "tables": ("metered_offers", "metered_uses", "first_offers", "first_uses"),
    "archive": (
        "archive_metered_offers",
        "archive_metered_uses",
        "archive_first_offers",
        "archive_first_uses",
    ),
}

#: Per-piece offer and use counts: from the base views' rows, or from an archive's
#: stored piece totals (``piece_totals``) when they stand for every selected run.
PIECE_VIEWS = {
    "rows": ("piece_offers", "piece_uses"),
    "totals": ("totals_piece_offers", "totals_piece_uses"),
}

#: Under a run-level filter, an archive's stored per-run totals (``run_totals``) stand
#: for the rows: ``RUN_TOTALS_TABLE`` adds the selected runs' up once, when the views are
#: made (the ledger reads them three times, and a view is read again each time, which
#: cost DuckDB 4.5x the bare scan at 1M runs); ``piece_totals`` (read by the totals piece
#: views) and ``piece_outcomes`` read it, and ``first_offers`` is their runs' first offers.
RUN_TOTALS_TABLE = "run_totals_pieces"
RUN_TOTALS_VIEWS = ("run_totals_piece_totals", "run_totals_first_offers")
#: ``piece_outcomes`` from ``RUN_TOTALS_TABLE``, under run totals.
RUN_TOTALS_CREDIT_VIEW = "run_totals_piece_outcomes"
#: What ``RUN_TOTALS_TABLE`` reads the labels from: every label row as given, a pair given
#: twice listed twice (it keeps each pair's first row itself, of the selected runs only;
#: ``outcomes`` lists each pair once, made distinct over every run of the archive).
GIVEN_OUTCOMES = "given_outcomes"

#: The views over those, in creation order (each reads only the views before it).
VIEWS = ("outcome_rows", "outcome_positions", "piece_outcomes", "ledger", "ledger_rows")

#: ``piece_outcomes`` from an archive's stored label credit (``label_credit``, with the
#: first offers it does not cover as ``uncredited_offers``), when it is used.
CREDIT_VIEW = "credit_piece_outcomes"
#: What an archive registers for it.
CREDIT_TABLES = ("label_credit", "uncredited_offers")


def credit_views(views: tuple[str, ...]) -> tuple[str, ...]:
    """``views`` with ``piece_outcomes`` read from the stored label credit.

    >>> credit_views(VIEWS)[2]
    'credit_piece_outcomes'
    """
    return tuple(CREDIT_VIEW if name == "piece_outcomes" else name for name in views)


#: The registered tables the views read.
TABLES = ("runs", "offers", "uses", "outcomes")

#: What an archive registers besides: its first_in_run=true files of offers and uses.
ARCHIVE_TABLES = ("offers_first_in_run", "uses_first_in_run")


@runtime_checkable
class HasParquetSources(Protocol):
    """Tables stored as Parquet (an archive): each table is a ``read_parquet`` query, or
    one of Arrow datasets registered first (files on a remote filesystem); with
    ``offers_first_in_run`` and ``uses_first_in_run`` too, the archive's base views are used."""

    def duckdb_sources(self) -> dict[str, str]: ...

    def duckdb_datasets(self) -> dict[str, Any]: ...


def view_sql(name: str) -> str:
    """The ``CREATE VIEW`` statement of view ``name``, as shipped in ``sql/NAME.sql``."""
    return (files("contextledger.ledger") / "sql" / f"{name}.sql").read_text(encoding="utf-8")


def views_sql() -> str:
    """Every view's statement: the base views (in memory, then archive), the piece views
    (from rows, then from totals), then the rest."""
    bases = (*BASE_VIEWS["tables"], *BASE_VIEWS["archive"])
    pieces = (*PIECE_VIEWS["rows"], *PIECE_VIEWS["totals"], RUN_TOTALS_TABLE, *RUN_TOTALS_VIEWS)
    names = (*bases, *pieces, RUN_TOTALS_CREDIT_VIEW, CREDIT_VIEW, *VIEWS)
    return "\n".join(view_sql(name) for name in names)


#: Settings that shut a connection off from files, the network and extensions, in order:
#: the last locks every setting, these included, for the connection's life.
LOCKED_DOWN = (
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


def connect(
    tables: RunTables,
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    external_access: bool = True,
) -> duckdb.DuckDBPyConnection:
    """Register ``tables`` on ``con`` (a new in-memory database by default) and create the views.

    Row order (``ledger``, and ties in ``ledger_rows``) relies on DuckDB's default
    ``preserve_insertion_order = true``.

    ``external_access=False`` is for a query from someone else: once the views exist,
    DuckDB may no longer read or write files (``read_csv``, ``COPY ... TO``, ``ATTACH``),
    install or load extensions, or change a setting (:data:`LOCKED_DOWN`). An
    archive's tables are then collected in memory first, since its views read its
    files (and DuckDB cannot allow reading them without allowing writing them).

    Examples
    --------
    >>> from contextledger.tables.build import read_runs
    >>> con = connect(read_runs("data/sample", mode="reference"))
    >>> con.sql("SELECT kind, count(*) FROM ledger_rows GROUP BY kind ORDER BY kind").fetchall()
    [('injection', 7), ('skill', 5), ('tool', 31)]
    """
    con = con if con is not None else duckdb.connect()
    if not external_access and isinstance(tables, HasParquetSources):
        tables = RunTables(
            tables.mode, tables.runs, tables.offers, tables.uses, tables.outcomes, tables.problems
        )
    sources = tables.duckdb_sources() if isinstance(tables, HasParquetSources) else {}
    if isinstance(tables, HasParquetSources):
        for name, dataset in tables.duckdb_datasets().items():
            con.register(name, dataset)
    for name in TABLES:
        if name in sources:  # an archive: read its Parquet files in place
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sources[name]}")
        elif name == "outcomes" and isinstance(tables, StoredTables):
            # read when a query reads it: the stored label credit may leave it unread
            con.register(name, tables.outcome_scan())
        else:
            con.register(name, getattr(tables, name))
    base = "tables"
    if all(name in sources for name in ARCHIVE_TABLES):
        base = "archive"
        for name in ARCHIVE_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sources[name]}")
    pieces = "rows"
    if "piece_totals" in sources:
        pieces = "totals"
        con.execute(f"CREATE OR REPLACE VIEW piece_totals AS {sources['piece_totals']}")
    run_totals = "run_totals" in sources and "piece_totals" not in sources
    if run_totals:
        pieces = "totals"
        con.execute(f"CREATE OR REPLACE VIEW run_totals AS {sources['run_totals']}")
        if isinstance(tables, StoredTables):  # always, with run totals (an archive)
            con.register(GIVEN_OUTCOMES, tables.outcome_scan(distinct=False))
    views: tuple[str, ...] = VIEWS
    if all(name in sources for name in CREDIT_TABLES):
        views = credit_views(VIEWS)
        for name in CREDIT_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sources[name]}")
    bases: tuple[str, ...] = BASE_VIEWS[base]
    if run_totals:  # after the base views: its first_offers replaces theirs
        bases = (*bases, RUN_TOTALS_TABLE, *RUN_TOTALS_VIEWS)
        views = tuple(
            RUN_TOTALS_CREDIT_VIEW if name == "piece_outcomes" else name for name in views
        )
    for name in (*bases, *PIECE_VIEWS[pieces], *views):
        con.execute(view_sql(name))
    if not external_access:
        for statement in LOCKED_DOWN:
            con.execute(statement)
    return con


#: DuckDB types Polars cannot import (INTERVAL, UNION) or write as JSON or CSV (BLOB,
#: BIT, VARIANT, VARINT/BIGNUM), wherever they appear in a column's type.
_TEXT_ONLY_TYPES = re.compile(r"\b(INTERVAL|BLOB|BIT|BITSTRING|UNION|VARIANT|VARINT|BIGNUM)\b")


def result_frame(relation: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """``relation``'s rows as a Polars frame every output format can write.

    A column of a type Polars cannot take or write (an ``INTERVAL``, a ``BLOB``, a
    ``VARIANT`` such as ``duckdb_settings().typed_value``, or a list or struct holding
    one) is converted by DuckDB to its own text of each value.

    >>> con = duckdb.connect()
    >>> result_frame(con.sql("SELECT INTERVAL 1 DAY AS i, 'ab'::BLOB AS b, 1 AS n")).rows()
    [('1 day', 'ab', 1)]
    """
    columns = list(relation.columns)
    text_only = [bool(_TEXT_ONLY_TYPES.search(str(kind))) for kind in relation.types]
    if any(text_only):

        def quoted(name: str) -> str:
            return '"' + name.replace('"', '""') + '"'

        relation = relation.project(
            ", ".join(
                f"CAST({quoted(name)} AS VARCHAR) AS {quoted(name)}" if text else quoted(name)
                for name, text in zip(columns, text_only, strict=True)
            )
        )
    return relation.pl()


def ledger_rows_sql(tables: RunTables) -> pl.DataFrame:
    """``compute_ledger(tables).rows()``, computed by the ``ledger_rows`` view."""
    con = connect(tables)
    try:
        return con.sql("SELECT * FROM ledger_rows").pl()
    finally:
        con.close()
