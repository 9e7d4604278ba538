"""The ``messages`` table: every message a run put in its window, one row each.

Built from the streams :func:`~contextledger.window.messages.rebuild_messages`
folds out of the commit log (a window's ``compact`` write replaces the live
window, but every appended message is still in the log). Turns are segmented
over the whole table at once, as one Polars expression.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.tables import schema
from contextledger.window.messages import RunMessages


def first_served(stream: RunMessages) -> list[int | None]:
    """For each stream message, the first model call (1-based) whose window held it."""
    first: list[int | None] = [None] * len(stream.messages)
    for call in stream.calls:
        for index in call.window_served:
            if first[index] is None:
                first[index] = call.ordinal
    return first


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
        served = first_served(stream)
        for message in stream.messages:
            row = {
                "run_id": stream.run_id,
                "message_index": message.index,
                "first_call": served[message.index],
                "entered_before_call": message.first_call,
                "turn_index": None,
                "role": message.role,
                "tool_call_id": message.tool_call_id,
                "tool_calls": [{"id": c.id, "name": c.name} for c in message.tool_calls],
                "tool_name": message.resolved_tool_name,
                "tool_name_recovered": message.tool_name is None
                and message.resolved_tool_name is not None,
                "content_chars": message.chars,
                "is_drop_notice": message.is_drop_notice,
                "is_summary": message.is_summary,
                "injected": message.injected,
                "window_authored": message.window_authored,
                "not_dispatched": message.not_dispatched,
                "origin_stage_id": message.origin,
            }
            for name, value in row.items():
                columns[name].append(value)
    table = pa.table(columns, schema=schema.MESSAGES)
    turns = with_turns(pl.from_arrow(table))  # type: ignore[arg-type]
    return table.set_column(
        schema.MESSAGES.get_field_index("turn_index"),
        schema.MESSAGES.field("turn_index"),
        turns["turn_index"].to_arrow().cast(pa.int32()),
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
