"""AutoGen's model contexts: ``BufferedChatCompletionContext`` and
``HeadAndTailChatCompletionContext``.

Followed: microsoft/autogen python-v0.7.5 (commit 027ecf0),
``python/packages/autogen-core/src/autogen_core/model_context/_buffered_chat_completion_context.py``
and ``_head_and_tail_chat_completion_context.py``. A context keeps every message added
and computes its view at each ``get_messages()``: nothing is dropped from the store.

AutoGen's messages are not ours one for one: the results of one batch of calls are
one ``FunctionExecutionResultMessage``, so consecutive tool messages count as one
message here, and an assistant message that calls tools is a function-call message.
The agent's system message is not in its model context; a leading system message is
kept in front of the view.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import FrameworkPolicy, Key, TokensOf
from contextledger.window.frameworks._history import RunHistory


def autogen_messages(history: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """``(leading system messages, AutoGen's messages)``: consecutive tool results grouped."""
    system: list[Message] = []
    start = 0
    while start < len(history) and history[start].role == "system":
        system.append(history[start])
        start += 1
    units: list[list[Message]] = []
    for message in history[start:]:
        if message.role == "tool" and units and units[-1][0].role == "tool":
            units[-1].append(message)
        else:
            units.append([message])
    return system, units


def unit_starts(run: RunHistory) -> tuple[int, list[int]]:
    """``(system, starts)`` of the run's last history: how many leading system messages,
    and where each of AutoGen's messages starts. A message's grouping reads only the one
    before it, so a call's history has the units starting before its length (the last
    one ends there). Measured once per run."""
    found = run.memo.get(unit_starts)
    if found is None:
        history = run.histories[-1] if run.histories else []
        system = 0
        while system < len(history) and history[system].role == "system":
            system += 1
        starts = [
            position
            for position in range(system, len(history))
            if not (
                history[position].role == "tool"
                and position > system
                and history[position - 1].role == "tool"
            )
        ]
        found = run.memo[unit_starts] = (system, starts)
    return found


def _is_result(unit: list[Message]) -> bool:
    return unit[0].role == "tool"


def _is_call(unit: list[Message]) -> bool:
    return unit[0].role == "assistant" and bool(unit[0].tool_calls)


def _flat(system: list[Message], units: Sequence[list[Message]]) -> list[Message]:
    return system + [m for unit in units for m in unit]


@dataclass(frozen=True)
class AutoGenBuffered(FrameworkPolicy):
    """``BufferedChatCompletionContext(buffer_size)``: the last ``buffer_size`` messages,
    less the first when it is a function-result message (so no result opens the view
    without its call). A view can still end on a call whose result is not yet there.
    """

    NAME = "autogen_buffered"
    SOURCE = "autogen-core 0.7.5, autogen_core/model_context/_buffered_chat_completion_context.py"
    KEYS = (
        Key(
            "buffer_size",
            "int",
            None,
            "messages kept (a batch's results count one)",
            1,
            required=True,
        ),
    )

    buffer_size: int = 1

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        history = run.histories[call]
        system, starts = unit_starts(run)
        units = bisect.bisect_left(starts, len(history))
        first = max(0, units - self.buffer_size)  # the view's first unit
        if first < units and history[starts[first]].role == "tool":
            first += 1
        if first == 0:
            return history  # every message: as recorded
        begin = starts[first] if first < units else len(history)
        return history[:system] + history[begin:]

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        system, units = autogen_messages(history)
        view = units[-self.buffer_size :]
        if view and _is_result(view[0]):
            view = view[1:]
        return _flat(system, view)


@dataclass(frozen=True)
class AutoGenHeadTail(FrameworkPolicy):
    """``HeadAndTailChatCompletionContext(head_size, tail_size)``: the first ``head_size``
    messages (less a trailing function-call message), a user message
    ``Skipped k messages.`` (k = all but head_size + tail_size, counted before those
    adjustments), and the last ``tail_size`` (less a leading function-result message);
    every message when k <= 0. The notice is authored here (``window_authored``).
    """

    NAME = "autogen_head_tail"
    SOURCE = (
        "autogen-core 0.7.5, autogen_core/model_context/_head_and_tail_chat_completion_context.py"
    )
    KEYS = (
        Key("head_size", "int", None, "first messages kept", 0, required=True),
        Key("tail_size", "int", None, "last messages kept", 1, required=True),
    )

    head_size: int = 0
    tail_size: int = 1

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        history = run.histories[call]
        _, starts = unit_starts(run)
        units = bisect.bisect_left(starts, len(history))
        skipped = units - self.head_size - self.tail_size
        if skipped <= 0:
            return history  # every message: as recorded
        head = self.head_size  # units kept at the head, less a trailing call
        if head > 0:
            last = history[starts[head - 1]]
            if last.role == "assistant" and last.tool_calls:
                head -= 1
        tail = units - self.tail_size  # the tail's first unit, past a leading result
        if history[starts[tail]].role == "tool":
            tail += 1
        notice = Message("user", f"Skipped {skipped} messages.", window_authored=True)
        head_end = starts[head] if head < units else len(history)
        tail_begin = starts[tail] if tail < units else len(history)
        return [*history[:head_end], notice, *history[tail_begin:]]

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        system, units = autogen_messages(history)
        head = units[: self.head_size]
        if head and _is_call(head[-1]):
            head = head[:-1]
        tail = units[-self.tail_size :]
        if tail and _is_result(tail[0]):
            tail = tail[1:]
        skipped = len(units) - self.head_size - self.tail_size
        if skipped <= 0:
            return _flat(system, units)
        notice = Message("user", f"Skipped {skipped} messages.", window_authored=True)
        return _flat(system, [*head, [notice], *tail])
