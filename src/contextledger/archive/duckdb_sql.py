"""DuckDB's reading of an archive's Parquet files, whichever version wrote them.

The archive's DuckDB views query its files with ``read_parquet`` (or a registered
dataset, for remote archives), by column name, so a file written before a column
existed reads it as a typed NULL, and under a run-level filter keep only the rows of
the runs in :data:`SELECTED_RUNS`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from contextledger.tables import schema

#: The table of the selected run ids (one ``run_id`` column) the DuckDB views join
#: against under a run-level filter (a list of ids written into the SQL is parsed anew
#: and grows with the selection: 599,033 ids for ``label=good`` at 1M runs).
SELECTED_RUNS = "archive_selected_runs"


def read_parquet_sql(
    files: Sequence[str], table_schema: pa.Schema, selected: bool, source: str | None = None
) -> str:
    """A query of ``files``' columns in ``table_schema``, rows of the selected runs only
    (``selected``: those in :data:`SELECTED_RUNS`); read from the registered ``source``
    when given, else with ``read_parquet``."""
    absent = _absent_columns(files, table_schema) if files and source is None else set()
    columns = ", ".join(_column_sql(f, absent) for f in table_schema)
    if not files:
        return f"SELECT {columns} FROM ({_empty_sql(table_schema)})"
    listed = ", ".join("'" + path.replace("'", "''") + "'" for path in files)
    # by name: a file written before a column existed (runs.basis) reads it as NULL
    body = (
        f"SELECT {columns} FROM read_parquet([{listed}], hive_partitioning = false, "
        "union_by_name = true)"
    )
    if source is not None:
        body = f'SELECT {columns} FROM "{source}"'
    if selected:
        body += f" WHERE run_id IN (SELECT run_id FROM {SELECTED_RUNS})"
    return body


def _column_sql(column: pa.Field, absent: set[str]) -> str:
    """One column of a query over files written by any version: a column no file has
    (every one written before it existed) is a typed NULL, a list column that cannot be
    null an empty list where a file lacks it."""
    typed = _DUCKDB_TYPES[column.type]
    value = f"CAST(NULL AS {typed})" if column.name in absent else f'"{column.name}"'
    if not column.nullable and pa.types.is_list(column.type):
        value = f"COALESCE({value}, CAST([] AS {typed}))"
    return value if value == f'"{column.name}"' else f'{value} AS "{column.name}"'


def _absent_columns(files: Sequence[str], table_schema: pa.Schema) -> set[str]:
    """The columns of ``table_schema`` none of the local Parquet ``files`` holds (their
    footers read until every column is found: one, for an archive of this version)."""
    import pyarrow.parquet as pq

    missing = set(table_schema.names)
    for path in files:
        missing -= set(pq.read_schema(path).names)
        if not missing:
            break
    return missing


_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.bool_(): "BOOLEAN",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.list_(schema.BASIS_ENTRY): "STRUCT(key VARCHAR, codes VARCHAR[])[]",
}


def _empty_sql(table_schema: pa.Schema) -> str:
    columns = ", ".join(
        f'CAST(NULL AS {_DUCKDB_TYPES[f.type]}) AS "{f.name}"' for f in table_schema
    )
    return f"SELECT {columns} WHERE false"
