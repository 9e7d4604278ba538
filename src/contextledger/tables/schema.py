"""Every table contextledger builds, its columns and their Arrow types: the one source of truth.

Adapters fill these tables; everything downstream (the ledger in Polars and in
DuckDB, the archive) reads only them, never a snapshot.
"""

from __future__ import annotations

import pyarrow as pa

#: One row per run read (metered or refused) in input order.
RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_order", pa.int64(), nullable=False),  # position in the input, 0-based
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("source_line", pa.int32()),  # JSON Lines only
        pa.field("runner_kind", pa.string()),  # "Agent" / "LLMCall" when the file says
        pa.field("accounting", pa.string(), nullable=False),  # "reference" or "corrected"
        pa.field("metered", pa.bool_(), nullable=False),
        pa.field("refused_reason", pa.string()),  # why a run was not metered
        pa.field("model_call_count", pa.int32(), nullable=False),  # call-llm executions seen
        pa.field("metered_call_count", pa.int32(), nullable=False),  # calls the accounting metered
        pa.field("unmetered_kinds", pa.list_(pa.string()), nullable=False),  # not metered here
        pa.field("grouped", pa.bool_(), nullable=False),  # model calls inside sf-llm-call subflows
        pa.field("slice_available", pa.bool_(), nullable=False),
        pa.field("static_tool_names_from", pa.string(), nullable=False),  # wrapper/sidecar/none
        pa.field("static_tool_name_count", pa.int32(), nullable=False),
    ]
)

#: One row per piece offered at a metered model call.
OFFERS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("call_index", pa.int32(), nullable=False),  # 0-based ordinal of the metered call
        pa.field("kind", pa.string(), nullable=False),  # injection / skill / tool
        pa.field("piece_id", pa.string(), nullable=False),
        pa.field("approx_tokens", pa.int64(), nullable=False),  # ceil(JSON chars / 4), an estimate
        pa.field("seq", pa.int32(), nullable=False),  # order of the offer within the run
    ]
)

#: One row per structural use of a piece.
USES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("piece_id", pa.string(), nullable=False),
        pa.field("signal", pa.string(), nullable=False),  # tool-called / skill-activated / ...
        pa.field("call_index", pa.int32()),  # the call that made the use; null: the run's
        pa.field("seq", pa.int32(), nullable=False),  # order of the use within the run
    ]
)

#: Consumer-supplied labels; a run may carry several.
OUTCOMES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
    ]
)

#: What could not be read, and why.
PROBLEMS = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("line", pa.int32()),
        pa.field("run_id", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)

#: The ledger, one row per (kind, piece), worst earn rate first.
LEDGER = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("offered", pa.int64(), nullable=False),
        pa.field("approx_tokens_spent", pa.int64(), nullable=False),
        pa.field("used", pa.int64(), nullable=False),
        pa.field("used_tool_called", pa.int64(), nullable=False),
        pa.field("used_skill_activated", pa.int64(), nullable=False),
        pa.field("used_answer_slice", pa.int64(), nullable=False),
        pa.field("runs_seen", pa.int64(), nullable=False),
        pa.field(
            "outcomes",
            pa.list_(pa.struct([pa.field("label", pa.string()), pa.field("runs", pa.int64())])),
            nullable=False,
        ),
        pa.field("earn_rate", pa.float64(), nullable=False),
    ]
)

#: The reference's ``usedVia`` signal names, and the ledger column each is counted in.
USED_SIGNAL_COLUMNS = {
    "tool-called": "used_tool_called",
    "skill-activated": "used_skill_activated",
    "answer-slice(slot)": "used_answer_slice",
}

TABLES = {
    "runs": RUNS,
    "offers": OFFERS,
    "uses": USES,
    "outcomes": OUTCOMES,
    "problems": PROBLEMS,
}


def empty(schema: pa.Schema) -> pa.Table:
    """A table with ``schema`` and no rows."""
    return schema.empty_table()
