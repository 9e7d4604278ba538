"""Mastra's input processors: ``ToolCallFilter`` and ``TokenLimiterProcessor``.

Followed: mastra-ai/mastra ``packages/core/src/processors/processors/tool-call-filter.ts``
(the ``processInput``/``processInputStep`` version with ``preserveLatestStep``, default
true) and ``token-limiter.ts`` (``processInputStep``, trim modes ``best-fit`` and
``contiguous``), as stored in 2026; the exact @mastra/core release was not pinned.
Newer sources move both to ``processLLMRequest``: the filter then keeps every call the
current run made, and the limiter trims call/result groups together (the fix for
mastra#24110); those versions are not replayed here.

In Mastra a call and its results sit in one assistant message as tool-invocation
parts; ours are an assistant message and tool messages, so removing a tool's parts
removes its call from the assistant message and its result messages.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import FrameworkPolicy, Key, TokensOf, call_names


def _without_calls(message: Message, dropped: set[str]) -> Message | None:
    """The assistant message without the calls in ``dropped``; None when nothing is left."""
    kept = tuple(c for c in message.tool_calls if c.id not in dropped)
    if len(kept) == len(message.tool_calls):
        return message
    if not kept and not message.content.strip():
        return None
    recorded = message.raw.get("toolCalls") if message.raw is not None else None
    removed: set[Any] = {c.id for c in message.tool_calls if c.id in dropped}
    if isinstance(recorded, list):
        removed.update(
            c.get("id") for c in recorded if isinstance(c, dict) and c.get("id") in dropped
        )
    return calls_removed(message, frozenset(removed))


@functools.lru_cache(maxsize=4096)
def calls_removed(message: Message, removed: frozenset[Any]) -> Message:
    """``message`` without its calls in ``removed`` (the same copy for the same removal:
    the filter runs afresh at every call, over the same messages)."""
    kept = tuple(c for c in message.tool_calls if c.id not in removed)
    raw: dict[str, Any] = dict(message.raw) if message.raw is not None else {"role": message.role}
    calls = raw.get("toolCalls")
    if isinstance(calls, list):
        raw["toolCalls"] = [
            c for c in calls if not (isinstance(c, dict) and c.get("id") in removed)
        ]
        if not raw["toolCalls"]:
            del raw["toolCalls"]
    return replace(message, tool_calls=kept, raw=raw, edit="placeholder")


@dataclass(frozen=True)
class MastraToolCallFilter(FrameworkPolicy):
    """``ToolCallFilter``: removes the calls and results of the ``exclude``d tools (every
    tool when ``exclude`` is not given), call and result together; a message left with
    nothing is removed. With ``preserve_latest_step`` (Mastra's default) the calls and
    results of the latest step (the last assistant message that called tools) stay, so
    the model sees the result it just asked for. An assistant message that loses only
    some calls is rewritten (``edit="placeholder"``). It shapes each step's model
    context, not the stored messages: nothing persists.
    """

    NAME = "mastra_tool_filter"
    SOURCE = "@mastra/core, packages/core/src/processors/processors/tool-call-filter.ts"
    KEYS = (
        Key("exclude", "names", (), "tools whose calls and results are removed (none: all)"),
        Key("preserve_latest_step", "bool", True, "keep the latest step's calls and results"),
    )

    exclude: tuple[str, ...] = ()
    preserve_latest_step: bool = True

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        names = call_names(history)
        preserved: set[str] = set()
        if self.preserve_latest_step:
            latest = next(
                (m for m in reversed(history) if m.role == "assistant" and m.tool_calls), None
            )
            preserved = {c.id for c in latest.tool_calls} if latest is not None else set()
        dropped = {
            call_id
            for call_id, name in names.items()
            if call_id not in preserved and (not self.exclude or name in self.exclude)
        }
        for message in history:  # results whose call is not in the history
            call_id = message.tool_call_id or ""
            if message.role == "tool" and call_id not in names and call_id not in preserved:
                name = message.resolved_tool_name or message.tool_name or ""
                if not self.exclude or name in self.exclude:
                    dropped.add(call_id)
        out: list[Message] = []
        for message in history:
            if message.role == "tool" and (message.tool_call_id or "") in dropped:
                continue
            if message.role == "assistant" and message.tool_calls:
                kept = _without_calls(message, dropped)
                if kept is not None:
                    out.append(kept)
                continue
            out.append(message)
        return out


#: Mastra's per-message and per-request overheads (``TOKENS_PER_MESSAGE``,
#: ``TOKENS_PER_CONVERSATION``).
TOKENS_PER_MESSAGE = 3.8
TOKENS_PER_CONVERSATION = 24


@dataclass(frozen=True)
class MastraTokenLimiter(FrameworkPolicy):
    """``TokenLimiterProcessor`` as an input processor: system messages are kept and
    counted; the others are taken newest first while they fit in ``limit`` less the
    system messages and the request overhead (each message counts its tokens plus 3.8,
    the request 24). ``best_fit`` skips a message that does not fit and goes on;
    ``contiguous`` stops at the first. Nothing keeps a call with its results.

    The removal is from the run's message list, so it **persists**: later steps start
    from what was kept. When nothing fits (or the system messages alone exceed the
    limit) Mastra aborts the request with a TripWire: the replay serves an empty
    window for that call and keeps the history as it was.
    """

    NAME = "mastra_token_limit"
    SOURCE = "@mastra/core, packages/core/src/processors/processors/token-limiter.ts"
    KEYS = (
        Key("limit", "int", None, "token budget of the request", 1, required=True),
        Key(
            "trim_mode",
            "choice",
            "best_fit",
            "skip what does not fit, or stop at it",
            choices=("best_fit", "contiguous"),
        ),
    )

    limit: int = 1
    trim_mode: str = "best_fit"

    def advance(
        self, history: Sequence[Message], *, tokens_of: TokensOf
    ) -> tuple[list[Message], list[Message]]:
        system = [m for m in history if m.role == "system"]
        system_tokens = sum(tokens_of(m) + TOKENS_PER_MESSAGE for m in system)
        if not history or system_tokens + TOKENS_PER_CONVERSATION >= self.limit:
            return [], list(history)
        budget = self.limit - system_tokens - TOKENS_PER_CONVERSATION
        keep: set[int] = set()
        used = 0.0
        for i in range(len(history) - 1, -1, -1):
            message = history[i]
            if message.role == "system":
                continue
            cost = tokens_of(message) + TOKENS_PER_MESSAGE
            if used + cost <= budget:
                keep.add(i)
                used += cost
            elif self.trim_mode == "contiguous":
                break
        if not keep:
            return [], list(history)
        kept = [m for i, m in enumerate(history) if m.role == "system" or i in keep]
        return kept, kept

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        return self.advance(history, tokens_of=tokens_of)[0]
