"""The tables a window replay reads: ``messages`` (every message a run put in its
window, one row each), ``streams`` (per run: its calls and recorded windows) and
``standings``; and the streams rebuilt from them.

Built from the streams :func:`~contextledger.read.messages.rebuild_messages`
folds out of the commit log (a window's ``compact`` write replaces the live
window, but every appended message is still in the log). Turns are segmented
over the whole table at once, as one Polars expression.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.read.cycles import collector_paused
from contextledger.read.messages import Message, ModelCall, RunMessages, ToolCall
from contextledger.tables import schema
from contextledger.tables.window_rows import message_columns


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


def streams_from_tables(streams: pa.Table, messages: pa.Table) -> list[RunMessages]:
    """Rebuild each run of ``streams`` (``schema.STREAMS``, in its order) from its
    ``schema.MESSAGES`` rows: the streams a replay reads, without the snapshots.

    Messages keep only the text a replay compares (``content``; the others carry their
    length, and an assistant's its preview), so a replay over them gives what a replay
    over the snapshot gives.

    >>> from contextledger.read.snapshot import decode_run, iter_documents
    >>> from contextledger.window import rebuild_messages
    >>> from pathlib import Path
    >>> run = decode_run(next(iter_documents(Path("data/sample/s0001-fact-bench.json.gz"))))
    >>> stream = rebuild_messages(run)
    >>> from contextledger.tables.window_rows import stream_row
    >>> rows = pa.Table.from_pylist([stream_row(stream, 0)], schema=schema.STREAMS)
    >>> back = streams_from_tables(rows, messages_table([stream]))[0]
    >>> back.calls == stream.calls, [m.chars for m in back.messages] == [
    ...     m.chars for m in stream.messages]
    (True, True)
    """
    with collector_paused():
        return _rebuilt(streams, messages)


def _rebuilt(streams: pa.Table, messages: pa.Table) -> list[RunMessages]:
    """Column by column: each column converted to Python once, nested lists by their
    offsets, every message built in one pass (a row at a time cost as much as the replay).
    """
    built = _messages_of(messages.select(_READ_BACK).combine_chunks())
    by_run: dict[str, list[Message]] = {}
    for message, run_id in zip(built, messages["run_id"].to_pylist(), strict=True):
        by_run.setdefault(run_id, []).append(message)
    out = []
    table = streams.combine_chunks()
    calls = _calls_of(table["calls"].combine_chunks())
    finals = _lists_of(table["final_window"].combine_chunks())
    notes = (
        _lists_of(table["notes"].combine_chunks())
        if "notes" in table.column_names
        else [()] * table.num_rows
    )
    for run_id, user_message, count, run_calls, final, records, said in zip(
        table["run_id"].to_pylist(),
        table["user_message"].to_pylist(),
        table["message_count"].to_pylist(),
        calls,
        finals,
        table["recorded_records"].to_pylist(),
        notes,
        strict=True,
    ):
        run_messages = by_run.get(run_id, [])
        if any(m.index != i for i, m in enumerate(run_messages)):
            run_messages = sorted(run_messages, key=lambda m: m.index)
        if len(run_messages) != count or any(m.index != i for i, m in enumerate(run_messages)):
            msg = f"run {run_id}: its messages rows are incomplete"
            raise ValueError(msg)
        out.append(
            RunMessages(
                run_id=run_id,
                user_message=user_message,
                messages=run_messages,
                calls=run_calls,
                final_window=final,
                recorded_records=json.loads(records),
                notes=list(said),
            )
        )
    return out


def _spans(array: pa.ListArray) -> tuple[list[tuple[int, int]], pa.Array]:
    """Each list's (start, end) in its values, and the values (a slice's own only)."""
    offsets = array.offsets.to_pylist()
    base = offsets[0] if offsets else 0
    return [(a - base, b - base) for a, b in itertools.pairwise(offsets)], array.flatten()


def _lists_of(array: pa.ListArray) -> list[tuple[Any, ...]]:
    """Each list of ``array`` as a tuple (a null list as an empty one)."""
    spans, values = _spans(array)
    flat = values.to_pylist()
    return [tuple(flat[a:b]) for a, b in spans]


def _calls_of(array: pa.ListArray) -> list[list[ModelCall]]:
    """Each run's ``calls`` (``schema.STREAMS``) as ModelCalls."""
    spans, values = _spans(array)
    fields = dict(zip([f.name for f in values.type], values.flatten(), strict=True))
    columns = [
        fields[name].to_pylist()
        for name in (
            "ordinal",
            "iteration",
            "bundle_index",
            "runtime_stage_id",
            "window_stage_id",
            "input_tokens",
        )
    ]
    seen, served = _lists_of(fields["window_seen"]), _lists_of(fields["window_served"])
    absent = [None] * len(values)  # a file written before the cache fields
    reads, writes = (
        fields[name].to_pylist() if name in fields else absent
        for name in ("cache_read_tokens", "cache_write_tokens")
    )
    built = [
        ModelCall(ordinal, iteration, bundle, runtime, window, tokens, *windows, *cache)
        for ordinal, iteration, bundle, runtime, window, tokens, windows, cache in zip(
            *columns,
            zip(seen, served, strict=True),
            zip(reads, writes, strict=True),
            strict=True,
        )
    ]
    return [built[a:b] for a, b in spans]


def _messages_of(table: pa.Table) -> list[Message]:
    """The Messages of ``schema.MESSAGES`` rows (the :data:`_READ_BACK` columns), in order."""
    columns = {name: table[name].to_pylist() for name in _READ_BACK if name != "tool_calls"}
    spans, listed = _spans(table["tool_calls"].combine_chunks())
    ids, names = (field.to_pylist() for field in listed.flatten())
    calls = [
        tuple(ToolCall(ids[i], names[i]) for i in range(a, b)) if b > a else () for a, b in spans
    ]
    return [
        Message(
            role=role,
            content=content if content is not None else "",
            tool_call_id=tool_call_id,
            tool_calls=tool_calls,
            tool_name=None if recovered else name,
            injected=injected,
            not_dispatched=not_dispatched,
            index=index,
            first_call=first_call,
            origin=origin,
            window_authored=window_authored,
            resolved_tool_name=name if role == "tool" else None,
            stored_chars=chars,
        )
        for (
            role,
            content,
            tool_call_id,
            tool_calls,
            name,
            recovered,
            injected,
            not_dispatched,
            index,
            first_call,
            origin,
            window_authored,
            chars,
        ) in zip(
            columns["role"],
            columns["content"],
            columns["tool_call_id"],
            calls,
            columns["tool_name"],
            columns["tool_name_recovered"],
            columns["injected"],
            columns["not_dispatched"],
            columns["message_index"],
            columns["entered_before_call"],
            columns["origin_stage_id"],
            columns["window_authored"],
            columns["content_chars"],
            strict=True,
        )
    ]


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
