"""One run's rows of the window tables, folded where the run is read (a worker).

Pure Python over :func:`~contextledger.read.messages.rebuild_messages`' stream: no
engine and no Arrow, so a worker process folds it without importing either; the tables
are built from these rows in :mod:`contextledger.tables.windows`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contextledger.read.findings import standings_from_snapshot
from contextledger.read.messages import Message, RunMessages, rebuild_messages, text_preview
from contextledger.read.snapshot import Run


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
    return stream_window(rebuild_messages(run), standings_from_snapshot(run))


def stream_window(stream: RunMessages, standings: list[dict[str, Any]]) -> RunWindow:
    """The rows an archive stores for ``whatif`` of a stream however it was rebuilt (a
    snapshot's commit log, a trace's calls)."""
    row = stream_row(stream, 0)
    del row["run_order"]
    return RunWindow(message_columns(stream), row, standings)


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
        "content": [_stored_text(m) for m in messages],
    }
    return columns


def _stored_text(message: Message) -> str | None:
    """The text an archive keeps of a message: all of it where a replay compares it (a
    user's message, what a window stage wrote), else its preview, which names it in
    ``compare``'s problems as over the snapshot; none of a tool result (named by its call)."""
    if message.role == "user" or message.window_authored:
        return message.content
    if message.role == "tool":
        return None
    return text_preview(message.content) or None


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
                "cache_read_tokens": call.cache_read_tokens,
                "cache_write_tokens": call.cache_write_tokens,
            }
            for call in stream.calls
        ],
        "final_window": list(stream.final_window),
        "recorded_records": json.dumps(stream.recorded_records, ensure_ascii=False),
        "notes": list(stream.notes),
    }
