"""The tables a window replay reads: ``messages`` (every message a run put in its
window, one row each), ``streams`` (per run: its calls and recorded windows) and
``standings``; and the streams rebuilt from them.

Built from the streams :func:`~contextledger.read.messages.rebuild_messages`
folds out of the commit log (a window's ``compact`` write replaces the live
window, but every appended message is still in the log). Turns are segmented
over the whole table at once, as one Polars expression.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.read.findings import standings_from_snapshot
from contextledger.read.messages import (
    Message,
    ModelCall,
    RunMessages,
    ToolCall,
    collector_paused,
    rebuild_messages,
)
from contextledger.read.snapshot import Run
from contextledger.tables import schema


@dataclass(frozen=True)
class RunWindow:
    """One run's rows of the tables a replay reads (``MESSAGES`` columns, its ``STREAMS``
    row without ``run_order``, its snapshot's ``STANDINGS`` rows): small to send back
    from a worker."""

    messages: dict[str, list[Any]]
    stream: dict[str, Any]
    standings: list[dict[str, Any]]


def run_window(run: Run) -> RunWindow:
    """Fold ``run``'s commit log into the rows an archive stores for ``whatif``."""
    stream = rebuild_messages(run)
    row = stream_row(stream, 0)
    del row["run_order"]
    return RunWindow(message_columns(stream), row, standings_from_snapshot(run))


def first_served(stream: RunMessages) -> list[int | None]:
    """For each stream message, the first model call (1-based) whose window held it."""
    first: list[int | None] = [None] * len(stream.messages)
    for call in stream.calls:
        for index in call.window_served:
            if first[index] is None:
                first[index] = call.ordinal
    return first


def message_columns(stream: RunMessages) -> dict[str, list[Any]]:
    """One run's ``schema.MESSAGES`` rows, column by column (``turn_index`` not yet set)."""
    messages = stream.messages
    served = first_served(stream)
    columns: dict[str, list[Any]] = {
        "run_id": [stream.run_id] * len(messages),
        "message_index": [m.index for m in messages],
        "first_call": [served[m.index] for m in messages],
        "entered_before_call": [m.first_call for m in messages],
        "turn_index": [None] * len(messages),
        "role": [m.role for m in messages],
        "tool_call_id": [m.tool_call_id for m in messages],
        "tool_calls": [[{"id": c.id, "name": c.name} for c in m.tool_calls] for m in messages],
        "tool_name": [m.resolved_tool_name for m in messages],
        "tool_name_recovered": [
            m.tool_name is None and m.resolved_tool_name is not None for m in messages
        ],
        "content_chars": [m.chars for m in messages],
        "is_drop_notice": [m.is_drop_notice for m in messages],
        "is_summary": [m.is_summary for m in messages],
        "injected": [m.injected for m in messages],
        "window_authored": [m.window_authored for m in messages],
        "not_dispatched": [m.not_dispatched for m in messages],
        "origin_stage_id": [m.origin for m in messages],
        "content": [m.content if m.role == "user" or m.window_authored else None for m in messages],
    }
    return columns


def messages_table(streams: Iterable[RunMessages]) -> pa.Table:
    """One row per message of each run's stream, in conversation order (``schema.MESSAGES``).

    >>> from contextledger.read.snapshot import decode_run, iter_documents
    >>> from contextledger.window import rebuild_messages
    >>> from pathlib import Path
    >>> run = decode_run(next(iter_documents(Path("data/sample/s0001-fact-bench.json.gz"))))
    >>> table = messages_table([rebuild_messages(run)])
    >>> table.num_rows, table.column("role").to_pylist()[:3]
    (41, ['user', 'assistant', 'tool'])
    """
    columns: dict[str, list[Any]] = {name: [] for name in schema.MESSAGES.names}
    for stream in streams:
        for name, values in message_columns(stream).items():
            columns[name].extend(values)
    return messages_from_columns(columns)


def messages_from_columns(columns: Mapping[str, list[Any]]) -> pa.Table:
    """``schema.MESSAGES`` from the columns of :func:`message_columns`, turns numbered."""
    return with_turn_index(pa.table(dict(columns), schema=schema.MESSAGES))


def with_turn_index(table: pa.Table) -> pa.Table:
    """``schema.MESSAGES`` rows (each run's in stream order) with ``turn_index`` set."""
    turns = with_turns(pl.from_arrow(table))  # type: ignore[arg-type]
    return table.set_column(
        schema.MESSAGES.get_field_index("turn_index"),
        schema.MESSAGES.field("turn_index"),
        turns["turn_index"].to_arrow().cast(pa.int32()),
    )


def stream_row(stream: RunMessages, run_order: int) -> dict[str, Any]:
    """The run's ``schema.STREAMS`` row: what a replay needs besides its messages."""
    return {
        "run_id": stream.run_id,
        "run_order": run_order,
        "user_message": stream.user_message,
        "message_count": len(stream.messages),
        "calls": [
            {
                "ordinal": call.ordinal,
                "iteration": call.iteration,
                "bundle_index": call.bundle_index,
                "runtime_stage_id": call.runtime_stage_id,
                "window_stage_id": call.window_stage_id,
                "input_tokens": call.input_tokens,
                "window_seen": list(call.window_seen),
                "window_served": list(call.window_served),
            }
            for call in stream.calls
        ],
        "final_window": list(stream.final_window),
        "recorded_records": json.dumps(stream.recorded_records, ensure_ascii=False),
    }


def streams_from_tables(streams: pa.Table, messages: pa.Table) -> list[RunMessages]:
    """Rebuild each run of ``streams`` (``schema.STREAMS``, in its order) from its
    ``schema.MESSAGES`` rows: the streams a replay reads, without the snapshots.

    Messages keep only the text a replay compares (``content``; the others carry their
    length), so a replay over them gives what a replay over the snapshot gives.

    >>> from contextledger.read.snapshot import decode_run, iter_documents
    >>> from contextledger.window import rebuild_messages
    >>> from pathlib import Path
    >>> run = decode_run(next(iter_documents(Path("data/sample/s0001-fact-bench.json.gz"))))
    >>> stream = rebuild_messages(run)
    >>> rows = pa.Table.from_pylist([stream_row(stream, 0)], schema=schema.STREAMS)
    >>> back = streams_from_tables(rows, messages_table([stream]))[0]
    >>> back.calls == stream.calls, [m.chars for m in back.messages] == [
    ...     m.chars for m in stream.messages]
    (True, True)
    """
    with collector_paused():
        return _rebuilt(streams, messages)


def _rebuilt(streams: pa.Table, messages: pa.Table) -> list[RunMessages]:
    columns = messages.select(_READ_BACK).to_pydict()
    by_run: dict[str, list[int]] = {}
    for row, run_id in enumerate(columns["run_id"]):
        by_run.setdefault(run_id, []).append(row)
    out = []
    for run in streams.to_pylist():
        rows = sorted(by_run.get(run["run_id"], []), key=columns["message_index"].__getitem__)
        built = [_message(columns, row) for row in rows]
        if len(built) != run["message_count"] or any(m.index != i for i, m in enumerate(built)):
            msg = f"run {run['run_id']}: its messages rows are incomplete"
            raise ValueError(msg)
        calls = [
            ModelCall(
                ordinal=call["ordinal"],
                iteration=call["iteration"],
                bundle_index=call["bundle_index"],
                runtime_stage_id=call["runtime_stage_id"],
                window_stage_id=call["window_stage_id"],
                input_tokens=call["input_tokens"],
                window_seen=tuple(call["window_seen"]),
                window_served=tuple(call["window_served"]),
            )
            for call in run["calls"]
        ]
        out.append(
            RunMessages(
                run_id=run["run_id"],
                user_message=run["user_message"],
                messages=built,
                calls=calls,
                final_window=tuple(run["final_window"]),
                recorded_records=json.loads(run["recorded_records"]),
            )
        )
    return out


_READ_BACK = [
    "run_id",
    "message_index",
    "entered_before_call",
    "role",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "tool_name_recovered",
    "content_chars",
    "injected",
    "window_authored",
    "not_dispatched",
    "origin_stage_id",
    "content",
]


def _message(columns: Mapping[str, list[Any]], row: int) -> Message:
    role = columns["role"][row]
    name = columns["tool_name"][row]
    content = columns["content"][row]
    return Message(
        role=role,
        content=content if content is not None else "",
        tool_call_id=columns["tool_call_id"][row],
        tool_calls=tuple(ToolCall(c["id"], c["name"]) for c in columns["tool_calls"][row]),
        tool_name=None if columns["tool_name_recovered"][row] else name,
        injected=columns["injected"][row],
        not_dispatched=columns["not_dispatched"][row],
        index=columns["message_index"][row],
        first_call=columns["entered_before_call"][row],
        origin=columns["origin_stage_id"][row],
        window_authored=columns["window_authored"][row],
        resolved_tool_name=name if role == "tool" else None,
        stored_chars=columns["content_chars"][row],
    )


def turn_starts() -> pl.Expr:
    """True where a turn starts: every non-``tool`` message, and a run's first message."""
    return (pl.col("role") != "tool") | (pl.int_range(pl.len()).over("run_id") == 0)


def with_turns(messages: pl.DataFrame) -> pl.DataFrame:
    """Number the turns of every run's conversation in one pass over the whole table.

    A turn starts at every non-``tool`` message; the messages the run's own window
    stage wrote (drop notices it left) are not part of the conversation and get
    no turn. ``messages`` is in stream order within each run.
    """
    conversation = messages.filter(~pl.col("window_authored")).select(
        "run_id",
        "message_index",
        turn_index=(turn_starts().cast(pl.Int32).cum_sum().over("run_id") - 1).cast(pl.Int32),
    )
    return messages.drop("turn_index", strict=False).join(
        conversation, on=["run_id", "message_index"], how="left", maintain_order="left"
    )
