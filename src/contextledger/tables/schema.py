"""Every table contextledger builds, its columns and their Arrow types: the one source of truth.

Adapters fill these tables; everything downstream (the ledger in Polars and in
DuckDB, the archive) reads only them, never a snapshot. The ledger's own tables are
declared in Polars types in :mod:`~contextledger.tables.columns` (the ledger runs
without Arrow) and given here as Arrow; the window's are declared here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from contextledger.tables import columns
from contextledger.tables.columns import USED_SIGNAL_COLUMNS as USED_SIGNAL_COLUMNS  # re-exported

if TYPE_CHECKING:
    from polars.datatypes import DataTypeClass


def arrow_type(dtype: pl.DataType | DataTypeClass) -> pa.DataType:
    """The Arrow type of a Polars type of :mod:`~contextledger.tables.columns` (strings and
    lists as Arrow's 32-bit-offset ``string`` and ``list``).

    >>> arrow_type(columns.BASIS_ENTRY)
    StructType(struct<key: string, codes: list<item: string>>)
    """
    if isinstance(dtype, pl.List):
        return pa.list_(arrow_type(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return pa.struct([pa.field(field.name, arrow_type(field.dtype)) for field in dtype.fields])
    return _ARROW_TYPES[str(dtype)]


#: The Arrow type of each flat Polars type the tables use, by its name.
_ARROW_TYPES = {
    "String": pa.string(),
    "Boolean": pa.bool_(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "Float64": pa.float64(),
}


def arrow_schema(table: columns.Table) -> pa.Schema:
    """The Arrow schema of a table of :mod:`~contextledger.tables.columns`.

    >>> arrow_schema(columns.OUTCOMES).names
    ['run_id', 'label']
    """
    return pa.schema(
        [pa.field(column.name, arrow_type(column.dtype), column.nullable) for column in table]
    )


#: The ledger's tables, declared in :mod:`~contextledger.tables.columns`.
BASIS_ENTRY = arrow_type(columns.BASIS_ENTRY)
RUNS = arrow_schema(columns.RUNS)
OFFERS = arrow_schema(columns.OFFERS)
USES = arrow_schema(columns.USES)
OUTCOMES = arrow_schema(columns.OUTCOMES)
PROBLEMS = arrow_schema(columns.PROBLEMS)
LEDGER = arrow_schema(columns.LEDGER)
PIECE_TOTALS = arrow_schema(columns.PIECE_TOTALS)
RUN_TOTALS = arrow_schema(columns.RUN_TOTALS)
LABEL_CREDIT = arrow_schema(columns.LABEL_CREDIT)

TABLES = {
    "runs": RUNS,
    "offers": OFFERS,
    "uses": USES,
    "outcomes": OUTCOMES,
    "problems": PROBLEMS,
}


# pyarrow's constructors from Python objects (``pa.table``, ``pa.array``,
# ``Schema.empty_table``) import pandas, to ask whether they were handed a pandas frame:
# 0.3 s of CPU, a fifth of a whole ``ledger`` over the corpus. The two below do not.


def empty(schema: pa.Schema) -> pa.Table:
    """A table with ``schema`` and no rows.

    >>> empty(OUTCOMES).num_rows, empty(OUTCOMES).schema == OUTCOMES
    (0, True)
    """
    return pa.Table.from_batches([], schema=schema)


def from_columns(columns: Mapping[str, Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from one Python list per column, built through Polars.

    >>> from_columns({"run_id": ["r"], "label": ["good"]}, OUTCOMES).to_pylist()
    [{'run_id': 'r', 'label': 'good'}]
    """
    import polars as pl

    polars_schema = pl.DataFrame(empty(schema)).schema
    nested = {
        field.name: _list_column(columns[field.name], field.type)
        for field in schema
        if pa.types.is_list(field.type)
    }
    nested = {name: array for name, array in nested.items() if array is not None}
    flat = [name for name in schema.names if name not in nested]
    frame = pl.DataFrame(
        {name: columns[name] for name in flat}, schema={name: polars_schema[name] for name in flat}
    ).to_arrow()
    arrays = [nested[name] if name in nested else frame[name] for name in schema.names]
    return pa.Table.from_arrays(arrays, names=schema.names).cast(schema)


def _list_column(values: Sequence[Any], list_type: pa.DataType) -> pa.Array | None:
    """A list column built from its flattened values and offsets; None when a value is
    not a list (a null: Polars builds that column). Polars builds a nested column from
    Python values a row at a time: 17 ms of the 20 ms a 456-run ``runs`` table took."""
    import polars as pl

    offsets = [0]
    items: list[Any] = []
    for value in values:
        if not isinstance(value, list | tuple):
            return None
        items.extend(value)
        offsets.append(len(items))
    child = _child_column(items, list_type.value_type)
    if child is None:
        return None
    return pa.ListArray.from_arrays(pl.Series(offsets, dtype=pl.Int32).to_arrow(), child)


def _child_column(items: list[Any], item_type: pa.DataType) -> pa.Array | None:
    import polars as pl

    if pa.types.is_list(item_type):
        return _list_column(items, item_type)
    if pa.types.is_struct(item_type):
        if not all(isinstance(item, dict) for item in items):
            return None
        children = [_child_column([item.get(f.name) for item in items], f.type) for f in item_type]
        if any(child is None for child in children):
            return None
        return pa.StructArray.from_arrays(children, fields=list(item_type))
    polars_type = pl.DataFrame(empty(pa.schema([pa.field("item", item_type)]))).schema["item"]
    return pl.Series("item", items, dtype=polars_type).to_arrow().cast(item_type)


def from_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from rows given as dicts (:func:`from_columns`).

    >>> from_rows([{"run_id": "r", "label": "good"}], OUTCOMES).num_rows
    1
    """
    return from_columns({name: [row[name] for row in rows] for name in schema.names}, schema)


# ── the window: messages, standings, what-if results ───────────────

#: A tool call an assistant message makes.
TOOL_CALL = pa.struct([pa.field("id", pa.string()), pa.field("name", pa.string())])

#: One row per message a run ever put in its window, in the order it entered (the commit
#: log keeps every message, including those a window strategy later removed).
MESSAGES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("message_index", pa.int32(), nullable=False),  # position in the run's stream
        pa.field("first_call", pa.int32()),  # 1-based model call first served it; null: none
        pa.field("entered_before_call", pa.int32()),  # first call made after it entered
        pa.field("turn_index", pa.int32()),  # turn among the messages the run appended
        pa.field("role", pa.string(), nullable=False),
        pa.field("tool_call_id", pa.string()),  # tool results: the call answered
        pa.field("tool_calls", pa.list_(TOOL_CALL), nullable=False),  # assistant messages
        pa.field("tool_name", pa.string()),  # tool results: carried, else the asking call's
        pa.field("tool_name_recovered", pa.bool_(), nullable=False),  # from the asking call
        pa.field("content_chars", pa.int64(), nullable=False),  # UTF-16 code units
        pa.field("is_drop_notice", pa.bool_(), nullable=False),  # library-authored
        pa.field("is_summary", pa.bool_(), nullable=False),  # library-authored
        pa.field("injected", pa.bool_(), nullable=False),  # library-authored
        pa.field("window_authored", pa.bool_(), nullable=False),  # written by this run's window
        pa.field("not_dispatched", pa.bool_(), nullable=False),  # a batch settlement message
        pa.field("origin_stage_id", pa.string(), nullable=False),  # runtimeStageId that wrote it
        # The text, where a replay reads more than its length: user messages (the current
        # request, notices, summaries) and what a window stage wrote; of other messages
        # but tool results, its preview (read.messages.text_preview: what names it in
        # compare's problems, empty or not); null otherwise.
        pa.field("content", pa.string()),
    ]
)

#: A model call of a run, and the windows around it (``read.messages.ModelCall``).
MODEL_CALL = pa.struct(
    [
        pa.field("ordinal", pa.int32()),  # 1-based among the run's model calls
        pa.field("iteration", pa.int32()),
        pa.field("bundle_index", pa.int32()),  # commit-log index of its first bundle
        pa.field("runtime_stage_id", pa.string()),
        pa.field("window_stage_id", pa.string()),  # the window stage before it; null: none
        pa.field("input_tokens", pa.int64()),  # reported by the provider; 0: none reported
        pa.field("window_seen", pa.list_(pa.int32())),  # message_index of the window seen
        pa.field("window_served", pa.list_(pa.int32())),  # message_index of the window served
        # Prompt-cache input tokens the provider recorded as read / written for the call;
        # null: not recorded (snapshots; a trace attribute left out, or an archive older
        # than these fields).
        pa.field("cache_read_tokens", pa.int64()),
        pa.field("cache_write_tokens", pa.int64()),
    ]
)

#: One row per run: what a window replay needs besides its ``MESSAGES`` rows (an
#: archive stores both, so ``whatif`` replays it without the snapshots).
STREAMS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_order", pa.int64(), nullable=False),  # ingest order
        pa.field("user_message", pa.string()),  # the run's userMessage (the current request)
        pa.field("message_count", pa.int32(), nullable=False),  # its MESSAGES rows
        pa.field("calls", pa.list_(MODEL_CALL), nullable=False),
        pa.field("final_window", pa.list_(pa.int32()), nullable=False),  # history at the end
        pa.field("recorded_records", pa.string(), nullable=False),  # its WindowRecords, JSON
        # what the reader doubts about the run it still replays (RunMessages.notes: a trace
        # run's rebuilt input far from its recorded input tokens, a usage count no call
        # reaches), said over an archive as over its files; empty in older archives
        pa.field("notes", pa.list_(pa.string()), nullable=False),
    ]
)

#: The model's declared standing of a tool result; the last row per ``tool_call_id``
#: counts from the visit after ``iteration``.
STANDINGS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("tool_call_id", pa.string(), nullable=False),
        pa.field("standing", pa.string(), nullable=False),  # fact / open / noise / ruled-out
        pa.field("iteration", pa.int32(), nullable=False),  # the declaring iteration (0: before)
        pa.field("source", pa.string(), nullable=False),  # "snapshot" or the file it came from
        pa.field("source_line", pa.int32()),  # file rows only
    ]
)

WHATIF_REFUSAL = pa.struct(
    [
        pa.field("reason", pa.string()),
        pa.field("turn_index", pa.int32()),
        pa.field("message_index", pa.int32()),
    ]
)

#: One turn the ledger-fact pin held: ``WindowRecord.ledgerFacts.pinned[]``.
WHATIF_FACT_PIN = pa.struct(
    [
        pa.field("tool_name", pa.string()),
        pa.field("turn_index", pa.int32()),
        pa.field("chars", pa.int64()),  # the whole turn's content chars
    ]
)

#: What the fact pin held at a visit, what its ceiling turned away, and its stand-down.
WHATIF_LEDGER_FACTS = pa.struct(
    [
        pa.field("pinned", pa.list_(WHATIF_FACT_PIN)),  # newest first
        pa.field("yielded", pa.int32()),
        pa.field("limit", pa.int32()),
        pa.field("stand_down", pa.bool_()),  # ``standDown: true`` in the record
    ]
)

#: A tool result that left the window, and the model's standing of it at that visit.
WHATIF_DROPPED_STANDING = pa.struct(
    [pa.field("tool_call_id", pa.string()), pa.field("standing", pa.string())]
)

#: One window-stage visit at which a policy engaged.
WHATIF_VISIT = pa.struct(
    [
        pa.field("iteration", pa.int32()),
        pa.field("removed_message_count", pa.int32()),
        pa.field("turns_before", pa.int32()),
        pa.field("turns_after", pa.int32()),
        pa.field("window_chars_before", pa.int64()),
        pa.field("window_chars_after", pa.int64()),
        pa.field("refusals", pa.list_(WHATIF_REFUSAL)),
        # agentfootprint 9.102.0 ``WindowRecord.ledgerFacts``: null where the record has
        # none (no standings given, or the fact pin held nothing and did not stand down).
        pa.field("ledger_facts", WHATIF_LEDGER_FACTS),
        # 9.102.0 ``WindowRecord.droppedStandings``: null where the record has none (no
        # standings given, or no tool result left); a null standing is undeclared.
        pa.field("dropped_standings", pa.list_(WHATIF_DROPPED_STANDING)),
    ]
)

#: The window served to a run's last model call.
WHATIF_ANSWER = pa.struct(
    [
        pa.field("message_count", pa.int32()),
        pa.field("content_chars", pa.int64()),
        pa.field("tool_call_ids_verbatim", pa.list_(pa.string())),
    ]
)

#: The counts a policy comparison reads, per (run, policy); ``whatif`` aggregates them.
WHATIF_METRICS = (
    "model_calls",
    "engaged_visits",
    "removed_messages",
    "input_chars",
    "input_tokens",
    "input_tokens_estimated_calls",
    "results_dropped",
    "results_dropped_fact",
    "results_dropped_open",
    "results_dropped_noise",
    "results_dropped_ruled_out",
    "results_dropped_undeclared",
    "pins_held_last_tool_result",
    "pins_yielded_last_tool_result",
    "pins_held_ledger_fact",
    "pins_yielded_ledger_fact",
    "pin_stand_downs",
    "facts_declared",
    "answer_message_count",
    "answer_content_chars",
    "answer_results_verbatim",
    "answer_facts_verbatim",
)

#: One row per (run, policy): what the policy would have done to the run.
WHATIF_RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),  # the spec as given
        pa.field("visits", pa.list_(WHATIF_VISIT), nullable=False),
        pa.field("answer", WHATIF_ANSWER),  # null: the run made no model call
        # "recorded" / "estimated" / "recorded+estimated": what a token budget measured
        # its decisions with; null for other policies or when nothing was measured.
        pa.field("budget_tokens_from", pa.string()),
        pa.field("tokens_per_char", pa.float64()),  # the run's calibration; null: no counts
        pa.field("model_calls", pa.int32(), nullable=False),
        pa.field("engaged_visits", pa.int32(), nullable=False),
        pa.field("removed_messages", pa.int64(), nullable=False),
        pa.field("input_chars", pa.int64(), nullable=False),  # served chars, all calls
        pa.field("input_tokens", pa.int64()),  # recorded where the window was, else estimated
        pa.field("input_tokens_estimated_calls", pa.int32(), nullable=False),
        pa.field("results_dropped", pa.int32(), nullable=False),  # tool results removed
        pa.field("results_dropped_fact", pa.int32(), nullable=False),  # by final standing
        pa.field("results_dropped_open", pa.int32(), nullable=False),
        pa.field("results_dropped_noise", pa.int32(), nullable=False),
        pa.field("results_dropped_ruled_out", pa.int32(), nullable=False),
        pa.field("results_dropped_undeclared", pa.int32(), nullable=False),
        pa.field("pins_held_last_tool_result", pa.int32(), nullable=False),  # summed over visits
        pa.field("pins_yielded_last_tool_result", pa.int32(), nullable=False),
        pa.field("pins_held_ledger_fact", pa.int32(), nullable=False),
        pa.field("pins_yielded_ledger_fact", pa.int32(), nullable=False),
        pa.field("pin_stand_downs", pa.int32(), nullable=False),
        pa.field("facts_declared", pa.int32(), nullable=False),  # results whose standing is fact
        pa.field("answer_message_count", pa.int32(), nullable=False),
        pa.field("answer_content_chars", pa.int64(), nullable=False),
        pa.field("answer_results_verbatim", pa.int32(), nullable=False),
        pa.field("answer_facts_verbatim", pa.int32(), nullable=False),
    ]
)
