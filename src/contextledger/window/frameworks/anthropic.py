"""Anthropic's server-side context editing, ``clear_tool_uses_20250919``.

Followed: the Claude API documentation page "Context editing"
(docs.claude.com/en/docs/build-with-claude/context-editing, beta header
``context-management-2025-06-27``, strategy ``clear_tool_uses_20250919``), read 2026.
The edit runs server-side on every request; the client keeps its full history, so
nothing persists between calls and each call is edited afresh.

``clear_thinking_20251015`` is not replayed: it clears thinking blocks, and the
agentfootprint 9.62 corpus records none (messages carry ``content``, ``toolCalls``,
``toolCallId`` and ``toolName`` only), so it would change nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import (
    FrameworkPolicy,
    Key,
    TokensOf,
    rewritten,
    total_tokens,
    with_calls_args_cleared,
)
from contextledger.window.frameworks._history import RunHistory

#: The API replaces a cleared result with placeholder text it does not publish; this
#: stands in for it (its size, not its wording, is what a replay measures).
ANTHROPIC_PLACEHOLDER = "[tool result cleared]"


@dataclass(frozen=True)
class AnthropicClearToolUses(FrameworkPolicy):
    """``clear_tool_uses_20250919``: once the request's input tokens exceed ``trigger``,
    the oldest tool results (all but the ``keep`` most recent tool uses) are replaced
    by a placeholder, not removed, so every call keeps its result.

    ``clear_at_least``: the documentation says the edit must clear at least that many
    tokens; when the eligible results weigh less, nothing is cleared. ``exclude_tools``:
    their results are never cleared (they still count among the ``keep`` most recent,
    as LangChain's port of this edit counts them). ``clear_tool_inputs``: ``true``
    also empties the arguments of the cleared calls, or a ``|`` list names the tools
    whose arguments are emptied. Input tokens are the sum of ``tokens_of`` over the
    history (an estimate unless a tokenizer is given); the trigger in tool uses is
    not replayed.
    """

    NAME = "anthropic_clear"
    SOURCE = (
        "Claude API docs, Context editing, clear_tool_uses_20250919 "
        "(beta context-management-2025-06-27)"
    )
    KEYS = (
        Key("trigger", "int", 100_000, "input tokens above which results are cleared", 1),
        Key("keep", "int", 3, "most recent tool uses kept", 0),
        Key("clear_at_least", "int", 0, "fewest tokens a clearing must free, else none", 0),
        Key("exclude_tools", "names", (), "tools whose results are never cleared"),
        Key("clear_tool_inputs", "bool_or_names", False, "also empty the calls' arguments"),
    )

    trigger: int = 100_000
    keep: int = 3
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool | tuple[str, ...] = False

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        history, total = run.histories[call], run.total(call)
        if total is None or self.clear_tool_inputs:
            return self.window(history, tokens_of=run.tokens_of)
        if total <= self.trigger:  # below the trigger: as recorded
            return history
        # Which results clear, and what each frees, are measured once per run: a
        # result's place among the results is the same in every history holding it.
        clearable = run.memo.get(self)
        if clearable is None:
            clearable = run.memo[self] = self.clearable(run.histories[-1])
        positions, eligible, copies, frees = clearable
        results = bisect.bisect_left(positions, len(history))
        out = list(history)
        freed = 0
        replaced = False
        for result in range(max(0, results - self.keep)):
            if not eligible[result]:
                continue
            position, copy = positions[result], copies[result]
            if copy is None:  # cleared for the first time in this run
                copy = rewritten(history[position], ANTHROPIC_PLACEHOLDER, "placeholder")
                copies[result] = copy
                frees[result] = run.tokens[position] - run.tokens_of(copy)
            out[position] = copy
            freed += frees[result]
            replaced = True
        if not replaced or (self.clear_at_least > 0 and freed < self.clear_at_least):
            return history
        return out

    def clearable(
        self, history: Sequence[Message]
    ) -> tuple[list[int], list[bool], list[Message | None], list[int]]:
        """The positions of the tool results in ``history``; whether each may be cleared
        (its tool is not excluded); its cleared copy and the tokens clearing it frees,
        filled in when it is first cleared."""
        positions = [i for i, message in enumerate(history) if message.role == "tool"]
        eligible = [
            (history[i].resolved_tool_name or history[i].tool_name or "") not in self.exclude_tools
            for i in positions
        ]
        return positions, eligible, [None] * len(positions), [0] * len(positions)

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        out = list(history)
        if total_tokens(out, tokens_of) <= self.trigger:
            return out
        results = [i for i, m in enumerate(out) if m.role == "tool"]
        eligible = results[: max(0, len(results) - self.keep)]
        freed = 0
        inputs_of: dict[int, set[str]] = {}
        position_of_call = {
            call.id: i for i, m in enumerate(out) if m.role == "assistant" for call in m.tool_calls
        }
        for i in eligible:
            message = out[i]
            name = message.resolved_tool_name or message.tool_name or ""
            if name in self.exclude_tools:
                continue
            cleared = rewritten(message, ANTHROPIC_PLACEHOLDER, "placeholder")
            freed += tokens_of(message) - tokens_of(cleared)
            out[i] = cleared
            clears_input = (
                self.clear_tool_inputs
                if isinstance(self.clear_tool_inputs, bool)
                else name in self.clear_tool_inputs
            )
            at = position_of_call.get(message.tool_call_id or "")
            if clears_input and at is not None:
                inputs_of.setdefault(at, set()).add(message.tool_call_id or "")
        if self.clear_at_least > 0 and freed < self.clear_at_least:
            return list(history)
        for at, ids in inputs_of.items():
            out[at] = with_calls_args_cleared(out[at], ids)
        return out
