"""Tables built from Python columns: the nested columns, built from offsets and flattened
values, are what Polars builds from the rows one at a time; the ledger's tables, declared
once in Polars types, read as Arrow and as Polars alike."""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from contextledger.read import identity
from contextledger.tables import build, columns, schema
from contextledger.tables.build import ACCOUNTING_MODES, read_accountings


def _row_by_row(columns: dict[str, list[Any]], table_schema: pa.Schema) -> pa.Table:
    """How every column was built before: Polars from the Python values, row by row."""
    polars_schema = pl.DataFrame(schema.empty(table_schema)).schema
    frame = pl.DataFrame({name: columns[name] for name in table_schema.names}, schema=polars_schema)
    return frame.to_arrow().cast(table_schema)


@pytest.mark.parametrize("source", ["data/sample", "data/otel/traces"])
@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_runs_table_is_built_as_polars_builds_it_row_by_row(source: str, mode: str) -> None:
    runs = read_accountings(source, [mode])[mode].runs
    columns = runs.to_pydict()
    built = schema.from_columns(columns, schema.RUNS)
    assert built.equals(_row_by_row(columns, schema.RUNS))
    assert built.equals(runs)


def test_a_basis_with_codes_keeps_every_key_and_code_in_order() -> None:
    base = schema.from_columns(
        read_accountings("data/sample", ["corrected"])["corrected"].runs.slice(0, 3).to_pydict(),
        schema.RUNS,
    ).to_pydict()
    base["basis"] = [
        [{"key": "tools", "codes": ["redacted", "cut"]}, {"key": "history", "codes": []}],
        [],
        [{"key": "skills", "codes": None}],
    ]
    base["unmetered_kinds"] = [["skill"], [], ["injection", "skill"]]
    built = schema.from_columns(base, schema.RUNS)
    assert built.equals(_row_by_row(base, schema.RUNS))
    assert built["basis"].to_pylist() == base["basis"]


def test_a_null_list_value_is_left_to_polars() -> None:
    nullable = pa.schema(
        [pa.field("run_id", pa.string()), pa.field("codes", pa.list_(pa.string()))]
    )
    columns = {"run_id": ["a", "b"], "codes": [["x"], None]}
    assert schema.from_columns(columns, nullable).equals(_row_by_row(columns, nullable))


@pytest.mark.parametrize("source", ["data/sample", "data/otel/traces"])
def test_offers_and_uses_made_a_part_at_a_time_equal_one_build(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = read_accountings(source, ACCOUNTING_MODES)
    monkeypatch.setattr(build, "PART_ROWS", 7)
    parts = read_accountings(source, ACCOUNTING_MODES)
    for mode in ACCOUNTING_MODES:
        assert parts[mode].offers.column(0).num_chunks > 1
        for name in ("runs", "offers", "uses", "problems"):
            assert getattr(parts[mode], name).equals(getattr(whole[mode], name)), name


@pytest.mark.parametrize(
    "name",
    [
        *("RUNS", "OFFERS", "USES", "OUTCOMES", "PROBLEMS", "DUPLICATES", "LEDGER"),
        *("PIECE_TOTALS", "RUN_TOTALS", "LABEL_CREDIT"),
    ],
)
def test_an_arrow_schema_reads_in_polars_as_the_columns_it_is_made_from(name: str) -> None:
    declared = getattr(columns, name)
    arrow = schema.arrow_schema(declared)
    assert pl.DataFrame(schema.empty(arrow)).schema == columns.polars_schema(declared)
    assert [field.nullable for field in arrow] == [column.nullable for column in declared]


def test_the_duplicates_are_declared_alike_for_arrow_and_for_polars() -> None:
    assert identity.DUPLICATES.equals(schema.arrow_schema(columns.DUPLICATES))


@pytest.mark.parametrize("source", ["data/sample", "data/otel/traces"])
def test_a_read_gives_each_table_as_polars_and_as_the_same_arrow(source: str) -> None:
    for tables in read_accountings(source, ACCOUNTING_MODES).values():
        for name, declared in columns.READ_TABLES.items():
            arrow = getattr(tables, name)
            assert arrow.schema.equals(schema.arrow_schema(declared)), name
            assert pl.DataFrame(arrow).equals(tables.frame(name)), name


def _polars_row_by_row(values: dict[str, list[Any]], table: columns.Table) -> pl.DataFrame:
    names = columns.names(table)
    return pl.DataFrame({name: values[name] for name in names}, schema=columns.polars_schema(table))


def test_a_frame_builds_nested_columns_as_polars_builds_them_row_by_row() -> None:
    runs = read_accountings("data/sample", ["corrected"])["corrected"].frame("runs")
    values = runs.head(4).to_dict(as_series=False)
    values["basis"] = [
        [{"key": "tools", "codes": ["redacted", "cut"]}, {"key": "history", "codes": []}],
        [],
        [{"key": "skills", "codes": None}],
        [{"key": "tools", "codes": ["cut"]}],
    ]
    values["unmetered_kinds"] = [["skill"], [], ["injection", "skill"], []]
    built = columns.frame(values, columns.RUNS)
    assert built.equals(_polars_row_by_row(values, columns.RUNS))
    assert built["basis"].to_list() == values["basis"]
    values["unmetered_kinds"][1] = None  # a null list: left to Polars, as it is
    assert columns.frame(values, columns.RUNS).equals(_polars_row_by_row(values, columns.RUNS))
