"""Synthetic runs: message streams built from a script, for property tests and the bench.

A script is what happened after each model call: parallel tool batches (a
result may be missing: an unanswered call), assistant text, user turns. The
stream is what :func:`~contextledger.window.messages.rebuild_messages` would
fold out of such a run recorded without a window; the provider's input tokens
are the mock's estimate (``ceil(chars / 4)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from contextledger.window.messages import Message, ModelCall, RunMessages, ToolCall


@dataclass(frozen=True)
class Result:
    """One call of a parallel batch: its tool, its result's size (None: never answered),
    and whether the result carries the tool's name."""

    tool: str
    chars: int | None
    named: bool = True


@dataclass(frozen=True)
class Batch:
    """An assistant message calling tools in parallel, and the results that came back."""

    results: tuple[Result, ...]


@dataclass(frozen=True)
class Said:
    """A message with text: a user turn, or assistant text."""

    role: str
    text: str


Entry = Batch | Said


def build_stream(
    run_id: str,
    opening: Sequence[Said],
    steps: Sequence[Sequence[Entry]],
    *,
    request: str | None = None,
) -> RunMessages:
    """The stream of a run that opened with ``opening`` and, after call ``k``, appended
    ``steps[k-1]``; it makes ``len(steps)`` calls (the last step is what came after the
    last call, and is never served).

    >>> stream = build_stream("r", [Said("user", "go")], [[Batch((Result("look", 9),))], []])
    >>> [(m.role, m.first_call) for m in stream.messages], len(stream.calls)
    ([('user', 1), ('assistant', 2), ('tool', 2)], 2)
    """
    messages: list[Message] = []
    call_count = len(steps)

    def add(message: Message, after_call: int, origin: str) -> None:
        first = after_call + 1 if after_call < call_count else None
        messages.append(
            Message(
                message.role,
                message.content,
                message.tool_call_id,
                message.tool_calls,
                message.tool_name,
                index=len(messages),
                first_call=first,
                origin=origin,
                resolved_tool_name=message.resolved_tool_name,
            )
        )

    for said in opening:
        add(Message(said.role, said.text), 0, "seed#0")
    for step, entries in enumerate(steps, start=1):
        for number, entry in enumerate(entries):
            origin = f"tool-calls#{step}.{number}"
            if isinstance(entry, Said):
                add(Message(entry.role, entry.text), step, origin)
                continue
            ids = [f"c{step}.{number}.{i}" for i in range(len(entry.results))]
            asked = tuple(ToolCall(i, r.tool) for i, r in zip(ids, entry.results, strict=True))
            add(Message("assistant", "", tool_calls=asked), step, origin)
            for call_id, result in zip(ids, entry.results, strict=True):
                if result.chars is None:
                    continue
                content = "x" * result.chars
                name = result.tool if result.named else None
                add(
                    Message(
                        "tool",
                        content,
                        call_id,
                        tool_name=name,
                        resolved_tool_name=result.tool,
                    ),
                    step,
                    origin,
                )
    calls = []
    for ordinal in range(1, call_count + 1):
        served = tuple(
            m.index for m in messages if m.first_call is not None and m.first_call <= ordinal
        )
        chars = sum(messages[i].chars for i in served)
        calls.append(
            ModelCall(
                ordinal=ordinal,
                iteration=ordinal,
                bundle_index=ordinal,
                runtime_stage_id=f"call-llm#{ordinal}",
                window_stage_id=f"compact#{ordinal}",
                input_tokens=math.ceil(chars / 4),
                window_seen=served,
                window_served=served,
            )
        )
    if request is None:
        request = next((s.text for s in reversed(opening) if s.role == "user"), None)
    return RunMessages(
        run_id=run_id,
        user_message=request,
        messages=messages,
        calls=calls,
        final_window=tuple(m.index for m in messages),
        recorded_records=[],
    )
