"""DuckDB view SQL to Spark SQL, by rule: each view is written once, in ``ledger/sql``.

sqlglot transpiles the files; three DuckDB forms need a rule of their own, because
sqlglot would otherwise drop their meaning silently or Spark has no such form:

- an ordered list aggregate, ``list(x ORDER BY k)``: sqlglot writes ``COLLECT_LIST(x)``,
  whose order Spark does not define; the rule collects ``(k, x)`` pairs, sorts them and
  keeps ``x`` (``TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT(k, x))), e -> e.v)``);
- ``* EXCLUDE (c)``: Spark has no star exclusion; the rule lists the source's columns;
- a window with no ``ORDER BY`` (``row_number() OVER ()``) means "in insertion order",
  which Spark does not keep: refused (:class:`DialectError`), so such a view is DuckDB's
  alone and Spark registers its rows from explicit keys instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sqlglot comes with the spark extra: imported when a view is transpiled
    from sqlglot import exp


class DialectError(ValueError):
    """A DuckDB view that cannot be expressed in Spark SQL with the same meaning."""


def to_spark(duckdb_sql: str, columns_of: Callable[[str], list[str]]) -> tuple[str, str]:
    """``(view name, Spark SELECT)`` of one ``CREATE VIEW`` statement in DuckDB SQL.

    ``columns_of(table)`` lists a registered table's columns (for ``* EXCLUDE``).
    """
    import sqlglot
    from sqlglot import exp

    statement = sqlglot.parse_one(duckdb_sql, read="duckdb")
    if not isinstance(statement, exp.Create) or statement.kind != "VIEW":
        raise DialectError(f"not a CREATE VIEW statement: {duckdb_sql[:60]!r}")
    name = statement.this.name
    query = statement.expression.copy()
    for window in list(query.find_all(exp.Window)):
        if window.args.get("order") is None:
            raise DialectError(
                f"view {name}: {window.sql('duckdb')} numbers rows in insertion order, "
                "which Spark does not keep"
            )
    for aggregate in list(query.find_all(exp.ArrayAgg)):
        if isinstance(aggregate.this, exp.Order):
            aggregate.replace(_sorted_collect(name, aggregate.this))
    for star in list(query.find_all(exp.Star)):
        excluded = star.args.get("except_") or star.args.get("except")
        if excluded:
            _expand_star(name, star, [column.name for column in excluded], columns_of)
    for node in query.walk():  # comments would land inside Spark's SELECT text
        node.comments = None
    spark_sql = query.sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)
    return name, spark_sql


def _sorted_collect(view: str, order: exp.Order) -> Any:
    keys = []
    for index, ordered in enumerate(order.expressions):
        if ordered.args.get("desc"):
            raise DialectError(f"view {view}: a descending list order has no rule yet")
        keys.append(f"{ordered.this.sql('spark')} AS k{index}")
    import sqlglot

    value = order.this.sql("spark")
    text = f"TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT({', '.join(keys)}, {value} AS v))), e -> e.v)"
    return sqlglot.parse_one(text, read="spark")


def _expand_star(
    view: str, star: exp.Star, excluded: list[str], columns_of: Callable[[str], list[str]]
) -> None:
    from sqlglot import exp

    select = star.find_ancestor(exp.Select)
    source = select.args.get("from_") or select.args.get("from") if select else None
    if select is None or source is None or not isinstance(source.this, exp.Table):
        raise DialectError(f"view {view}: * EXCLUDE needs a single table to list")
    kept = [name for name in columns_of(source.this.name) if name not in excluded]
    columns = [exp.column(name) for name in kept]
    position = select.expressions.index(star)
    select.set(
        "expressions",
        [*select.expressions[:position], *columns, *select.expressions[position + 1 :]],
    )
