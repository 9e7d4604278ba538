"""The ledger's tables declared in Polars types: the one declaration of their columns.

``ledger`` builds these tables and groups them with Polars alone, so its process never
imports Arrow (pyarrow, and the numpy it loads, were a tenth of its CPU over the
corpus); :mod:`~contextledger.tables.schema` derives their Arrow schemas from here, for
Arrow, Parquet, DuckDB and archives. Polars has no nullability: ``nullable`` is Arrow's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import polars as pl

if TYPE_CHECKING:
    from polars.datatypes import DataTypeClass


class Column(NamedTuple):
    """One column: its name, its Polars type, whether Arrow lets it hold nulls."""

    name: str
    dtype: pl.DataType
    nullable: bool = True


#: A table's columns, in order.
Table = tuple[Column, ...]

#: One state key the ledger read, and the codes its answer rests on.
BASIS_ENTRY = pl.Struct({"key": pl.String(), "codes": pl.List(pl.String())})

#: One row per run read (metered or refused) in input order.
RUNS: Table = (
    Column("run_id", pl.String(), False),
    Column("run_order", pl.Int64(), False),  # position in the input, 0-based
    Column("source_path", pl.String(), False),
    Column("source_line", pl.Int32()),  # JSON Lines only
    Column("runner_kind", pl.String()),  # "Agent" / "LLMCall" when the file says
    Column("accounting", pl.String(), False),  # "reference" or "corrected"
    Column("metered", pl.Boolean(), False),
    Column("refused_reason", pl.String()),  # why a run was not metered
    Column("model_call_count", pl.Int32(), False),  # call-llm executions seen
    Column("metered_call_count", pl.Int32(), False),  # calls the accounting metered
    Column("unmetered_kinds", pl.List(pl.String()), False),  # not metered here
    # ``RecordedRun.basis`` (agentfootprint 9.1xx): the keys whose reads rest on a
    # redaction, each with its codes (``read.basis``); empty when every read was exact.
    Column("basis", pl.List(BASIS_ENTRY), False),
    Column("grouped", pl.Boolean(), False),  # model calls inside sf-llm-call subflows
    Column("slice_available", pl.Boolean(), False),
    Column("static_tool_names_from", pl.String(), False),  # wrapper/sidecar/none
    Column("static_tool_name_count", pl.Int32(), False),
)

#: One row per piece offered at a metered model call.
OFFERS: Table = (
    Column("run_id", pl.String(), False),
    Column("call_index", pl.Int32(), False),  # 0-based ordinal of the metered call
    Column("kind", pl.String(), False),  # injection / skill / tool
    Column("piece_id", pl.String(), False),
    Column("approx_tokens", pl.Int64(), False),  # ceil(JSON chars / 4), an estimate
    Column("seq", pl.Int32(), False),  # order of the offer within the run
)

#: One row per structural use of a piece.
USES: Table = (
    Column("run_id", pl.String(), False),
    Column("kind", pl.String(), False),
    Column("piece_id", pl.String(), False),
    Column("signal", pl.String(), False),  # tool-called / skill-activated / ...
    Column("call_index", pl.Int32()),  # the call that made the use; null: the run's
    Column("seq", pl.Int32(), False),  # order of the use within the run
)

#: Consumer-supplied labels; a run may carry several.
OUTCOMES: Table = (
    Column("run_id", pl.String(), False),
    Column("label", pl.String(), False),
)

#: What could not be read, and why.
PROBLEMS: Table = (
    Column("path", pl.String(), False),
    Column("line", pl.Int32()),
    Column("run_id", pl.String()),
    Column("reason", pl.String(), False),
)

#: One row per copy that was not counted because an earlier copy was the same run
#: (``read.identity.DUPLICATES``, which a test keeps equal to this).
DUPLICATES: Table = (
    Column("run_id", pl.String(), False),
    Column("path", pl.String(), False),
    Column("line", pl.Int64()),
    Column("kept_path", pl.String(), False),
    Column("kept_line", pl.Int64()),
    # the kept copy's run id: another when one recording arrived under two ids
    Column("kept_run_id", pl.String(), False),
    # the kept copy is an archive's (ingested before), not one read now (null: no)
    Column("kept_archived", pl.Boolean()),
)

#: The ledger, one row per (kind, piece), worst earn rate first.
LEDGER: Table = (
    Column("id", pl.String(), False),
    Column("kind", pl.String(), False),
    Column("offered", pl.Int64(), False),
    Column("approx_tokens_spent", pl.Int64(), False),
    Column("used", pl.Int64(), False),
    Column("used_tool_called", pl.Int64(), False),
    Column("used_skill_activated", pl.Int64(), False),
    Column("used_answer_slice", pl.Int64(), False),
    Column("used_tool_executed", pl.Int64(), False),
    Column("runs_seen", pl.Int64(), False),
    Column("outcomes", pl.List(pl.Struct({"label": pl.String(), "runs": pl.Int64()})), False),
    Column("earn_rate", pl.Float64(), False),
)

#: Per piece, the ledger's counts over some runs, and where the piece was first offered
#: and first used (``first_offer``, ``first_use``: null when it was not). A first is
#: packed as the ledger orders rows: ``run_order * 2**32 + seq``, plus ``2**31`` for a
#: use, so the earliest first across any set of runs is the smallest. An archive stores
#: these per commit, so the ledger adds them up instead of reading every offer again.
PIECE_TOTALS: Table = (
    Column("kind", pl.String(), False),
    Column("piece_id", pl.String(), False),
    Column("offered", pl.Int64(), False),
    Column("approx_tokens_spent", pl.Int64(), False),
    Column("runs_seen", pl.Int64(), False),
    Column("first_offer", pl.Int64()),
    Column("used", pl.Int64(), False),
    Column("used_tool_called", pl.Int64(), False),
    Column("used_skill_activated", pl.Int64(), False),
    Column("used_answer_slice", pl.Int64(), False),
    Column("used_tool_executed", pl.Int64(), False),
    Column("first_use", pl.Int64()),
)

#: Per metered run and piece, the ledger's counts over that run alone, and the ``seq`` of
#: the piece's first offer and first use in it (null when it was not offered, or not
#: used). An archive stores these per commit, so a ledger of some runs (a ``label`` or
#: ``run_id`` filter) reads one row per run and piece instead of every offer and use:
#: ``runs_seen`` counts the rows with a first offer, whose run and piece are also the
#: first offers outcome labels are credited from.
RUN_TOTALS: Table = (
    Column("run_id", pl.String(), False),
    # the run's place in the archive: the ledger joins on it (an integer) and orders by it
    Column("run_order", pl.Int64(), False),
    Column("kind", pl.String(), False),
    Column("piece_id", pl.String(), False),
    Column("offered", pl.Int64(), False),
    Column("approx_tokens_spent", pl.Int64(), False),
    Column("first_offer_seq", pl.Int32()),
    Column("used", pl.Int64(), False),
    Column("used_tool_called", pl.Int64(), False),
    Column("used_skill_activated", pl.Int64(), False),
    Column("used_answer_slice", pl.Int64(), False),
    Column("used_tool_executed", pl.Int64(), False),
    Column("first_use_seq", pl.Int32()),
)

#: Per piece and outcome label, the labelled metered runs of some runs that offered the
#: piece (``runs``), and the earliest of them as ``run_order * 2**32 + rank``, where
#: ``rank`` orders the run's labels as the outcomes table lists them (``first_credit``):
#: the smallest over any set of runs is the credit the ledger lists first. An archive
#: stores these per commit, for the labels known when the commit was written.
LABEL_CREDIT: Table = (
    Column("kind", pl.String(), False),
    Column("piece_id", pl.String(), False),
    Column("label", pl.String(), False),
    Column("runs", pl.Int64(), False),
    Column("first_credit", pl.Int64(), False),
)

#: The reference's ``usedVia`` signal names, and the ledger column each is counted in.
USED_SIGNAL_COLUMNS = {
    "tool-called": "used_tool_called",
    "skill-activated": "used_skill_activated",
    "answer-slice(slot)": "used_answer_slice",
    # a trace's execute_tool span that no model output names (read.otel)
    "tool-executed": "used_tool_executed",
}

#: The tables a read gives (``RunTables``), by name.
READ_TABLES: Mapping[str, Table] = {
    "runs": RUNS,
    "offers": OFFERS,
    "uses": USES,
    "outcomes": OUTCOMES,
    "problems": PROBLEMS,
    "duplicates": DUPLICATES,
}


def names(table: Table) -> list[str]:
    """The column names of ``table``, in order.

    >>> names(OUTCOMES)
    ['run_id', 'label']
    """
    return [column.name for column in table]


def polars_schema(table: Table) -> pl.Schema:
    """``table``'s columns as a Polars schema."""
    return pl.Schema([(column.name, column.dtype) for column in table])


def empty_frame(table: Table) -> pl.DataFrame:
    """A frame of ``table``'s columns and no rows.

    >>> empty_frame(OUTCOMES).shape
    (0, 2)
    """
    return pl.DataFrame(schema=polars_schema(table))


def frame(columns: Mapping[str, Sequence[Any]], table: Table) -> pl.DataFrame:
    """A frame of ``table`` from one Python list per column (Arrow is not imported).

    >>> frame({"run_id": ["r"], "label": ["good"]}, OUTCOMES).rows()
    [('r', 'good')]
    """
    return pl.DataFrame(
        [_series(column.name, columns[column.name], column.dtype) for column in table]
    )


def _series(name: str, values: Sequence[Any], dtype: pl.DataType | DataTypeClass) -> pl.Series:
    """A column from Python values. A nested one is built from its flattened items: Polars
    builds it from Python a row at a time (10 of the 12 ms the corpus's 301-run ``runs``
    took, growing with the runs); a list holding None is left to Polars."""
    if values and isinstance(dtype, pl.List) and all(isinstance(v, list | tuple) for v in values):
        owners = pl.Series(
            [row for row, value in enumerate(values) for _ in value], dtype=pl.UInt32
        )
        items = _series("item", [item for value in values for item in value], dtype.inner)
        lists = pl.DataFrame({"row": owners, "item": items}).group_by("row").agg("item")
        rows = pl.DataFrame({"row": pl.Series(range(len(values)), dtype=pl.UInt32)})
        listed = rows.join(lists, on="row", how="left", maintain_order="left")
        return (
            listed.select(pl.col("item").fill_null(pl.lit([], dtype=dtype))).to_series().alias(name)
        )
    if values and isinstance(dtype, pl.Struct) and all(isinstance(v, dict) for v in values):
        fields = [_series(f.name, [v.get(f.name) for v in values], f.dtype) for f in dtype.fields]
        return pl.DataFrame(fields).to_struct(name)
    return pl.Series(name, values, dtype=dtype)
