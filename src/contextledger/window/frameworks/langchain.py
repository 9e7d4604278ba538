"""LangChain's retention: ``trim_messages``, ``ClearToolUsesEdit`` and ``SummarizationMiddleware``.

Followed: langchain-ai/langchain, ``libs/core/langchain_core/messages/utils.py``
(``trim_messages``, ``_first_max_tokens``, ``_last_max_tokens``; langchain-core 1.x) and
``libs/langchain_v1/langchain/agents/middleware/context_editing.py`` and
``summarization.py`` (langchain 1.x). Our roles map to LangChain's message types as
user → ``human``, assistant → ``ai``, tool → ``tool``, system → ``system``. The token
counter LangChain is given counts a list; ours is the sum of ``tokens_of`` over it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import (
    FrameworkPolicy,
    Key,
    TokensOf,
    rewritten,
    standin,
    total_tokens,
    with_calls_args_cleared,
)
from contextledger.window.frameworks._history import RunHistory

#: ``ClearToolUsesEdit``'s default placeholder (``DEFAULT_TOOL_PLACEHOLDER``).
LANGCHAIN_PLACEHOLDER = "[cleared]"
#: The opening of the message ``SummarizationMiddleware`` puts in place of what it summarized.
SUMMARY_OPENING = "Here is a summary of the conversation to date:\n\n"
MESSAGE_TYPES = ("human", "ai", "tool", "system")
_TYPE_OF_ROLE = {"user": "human", "assistant": "ai", "tool": "tool", "system": "system"}


def message_type(message: Message) -> str:
    """LangChain's ``message.type`` for one of our messages."""
    return _TYPE_OF_ROLE.get(message.role, message.role)


def _first_max_tokens(
    messages: list[Message], max_tokens: int, tokens_of: TokensOf, end_on: tuple[str, ...]
) -> list[Message]:
    """The longest head within ``max_tokens``, then cut back to end on ``end_on``."""
    if not messages:
        return messages
    if total_tokens(messages, tokens_of) <= max_tokens:
        while end_on and messages and message_type(messages[-1]) not in end_on:
            messages = messages[:-1]
        return messages
    idx = 0
    running = 0
    for message in messages:  # a per-message counter: the binary search's answer
        running += tokens_of(message)
        if running > max_tokens:
            break
        idx += 1
    while end_on and idx > 0 and message_type(messages[idx - 1]) not in end_on:
        idx -= 1
    return messages[:idx]


def _fitting(tokens: Sequence[int], order: range, max_tokens: int) -> int:
    """How many messages, taken in ``order``, fit in ``max_tokens`` before the running
    count first exceeds it (:func:`_first_max_tokens`'s loop over counts measured once)."""
    kept = running = 0
    for position in order:
        running += tokens[position]
        if running > max_tokens:
            break
        kept += 1
    return kept


@dataclass(frozen=True)
class LangChainTrim(FrameworkPolicy):
    """``trim_messages`` as shipped: removes whole messages (``allow_partial=False``).

    ``strategy=last`` first drops trailing messages until one is of an ``end_on`` type,
    sets a leading system message aside when ``include_system``, keeps the longest
    tail within ``max_tokens`` (less the system message), then drops from that tail's
    front until it starts on a ``start_on`` type. ``strategy=first`` keeps the longest
    head instead. Nothing keeps a tool message with its call: where the documented
    advice (``start_on="human"``) is not followed, a window can open on an orphaned
    tool result. ``allow_partial=true`` (splitting a message's text) is not replayed.
    Used as a pre-model hook, it trims the request only: nothing persists.
    """

    NAME = "langchain_trim"
    SOURCE = "langchain-core 1.x, libs/core/langchain_core/messages/utils.py trim_messages"
    KEYS = (
        Key("max_tokens", "int", None, "token budget of the kept messages", 0, required=True),
        Key(
            "strategy", "choice", "last", "keep the newest or the oldest", choices=("last", "first")
        ),
        Key("start_on", "names", (), "types the window may start on: human|ai|tool|system"),
        Key("end_on", "names", (), "types the window may end on"),
        Key("include_system", "bool", False, "keep a leading system message"),
        Key("allow_partial", "bool", False, "split a message's text (only false replays)"),
    )

    max_tokens: int = 0
    strategy: str = "last"
    start_on: tuple[str, ...] = ()
    end_on: tuple[str, ...] = ()
    include_system: bool = False
    allow_partial: bool = False

    def __post_init__(self) -> None:
        for key, types in (("start_on", self.start_on), ("end_on", self.end_on)):
            unknown = [t for t in types if t not in MESSAGE_TYPES]
            if unknown:
                raise ValueError(f"{key}: {', '.join(unknown)} is not a LangChain message type")
        if self.allow_partial:
            raise ValueError("allow_partial=true is not replayed (it splits a message's text)")
        if self.strategy == "first" and (self.start_on or self.include_system):
            raise ValueError("start_on and include_system go with strategy=last only")

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        """:meth:`window` over index ranges of the run's shared history and token counts
        (no copy, no recount): the same messages kept."""
        history = run.histories[call]
        if not run.exact or not history:
            return self.window(history, tokens_of=run.tokens_of)
        tokens, running = run.tokens, run.running
        if self.strategy == "first":
            end = len(history)
            if running[end] > self.max_tokens:
                end = _fitting(tokens, range(end), self.max_tokens)
            while self.end_on and end > 0 and message_type(history[end - 1]) not in self.end_on:
                end -= 1
            return history if end == len(history) else history[:end]
        end = len(history)
        while self.end_on and end > 0 and message_type(history[end - 1]) not in self.end_on:
            end -= 1
        first = 0
        remaining = self.max_tokens
        if self.include_system and end > 0 and history[0].role == "system":
            first = 1
            remaining = max(0, remaining - tokens[0])
        kept = end - first  # the tail kept: history[end - kept : end]
        if kept > 0 and running[end] - running[first] > remaining:
            kept = _fitting(tokens, range(end - 1, first - 1, -1), remaining)
        while self.start_on and kept > 0 and message_type(history[end - kept]) not in self.start_on:
            kept -= 1
        if first == 0 and kept == len(history):
            return history
        tail = history[end - kept : end] if kept > 0 else []
        return [history[0], *tail] if first else tail

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        messages = list(history)
        if self.strategy == "first":
            return _first_max_tokens(messages, self.max_tokens, tokens_of, self.end_on)
        if not messages:
            return []
        while self.end_on and messages and message_type(messages[-1]) not in self.end_on:
            messages.pop()
        system: Message | None = None
        if self.include_system and messages and messages[0].role == "system":
            system, messages = messages[0], messages[1:]
        remaining = self.max_tokens
        if system is not None:
            remaining = max(0, remaining - tokens_of(system))
        kept = _first_max_tokens(messages[::-1], remaining, tokens_of, self.start_on)[::-1]
        return [system, *kept] if system is not None else kept

    @classmethod
    def from_params(cls, spec: str, rest: str) -> FrameworkPolicy:
        return _built(cls, spec, rest)


def _built(cls: type[FrameworkPolicy], spec: str, rest: str) -> FrameworkPolicy:
    """``cls`` from a spec, its own checks refused as spec errors."""
    from contextledger.window.frameworks._common import FrameworkSpecError, describe, parse_params

    params = parse_params(spec, cls.NAME, cls.KEYS, rest)
    try:
        return cls(**params)
    except ValueError as error:
        raise FrameworkSpecError(spec, str(error), describe(cls.NAME, cls.KEYS)) from None


# ── ClearToolUsesEdit ──────────────────────────────────────────────


@dataclass(frozen=True)
class LangChainClearToolUses(FrameworkPolicy):
    """``ContextEditingMiddleware`` with one ``ClearToolUsesEdit`` (LangChain's port of
    Anthropic's ``clear_tool_uses_20250919``), applied to each model request.

    When the request's tokens exceed an int ``trigger`` (``>``), or meet any of the
    ``tokens:N`` / ``messages:N`` conditions (``>=``; ``|`` between them is OR), every
    tool message but the ``keep`` most recent (an int, ``messages:N``, or ``tokens:N``:
    as many recent results as fit in N characters, LangChain's own approximation) has
    its content replaced by ``[cleared]``, oldest first. A result is skipped when the
    nearest AI message before it does not hold its call, or its tool is in
    ``exclude_tools``; with ``clear_at_least`` the clearing stops once that many tokens
    are freed. ``clear_tool_inputs`` empties the cleared calls' arguments. The edit
    changes the request, not the agent's state: each call starts from the full history.
    """

    NAME = "langchain_clear"
    SOURCE = (
        "langchain 1.x, libs/langchain_v1/langchain/agents/middleware/context_editing.py "
        "ClearToolUsesEdit"
    )
    KEYS = (
        Key(
            "trigger",
            "condition",
            (("int", 100_000),),
            "N tokens (>), or tokens:N|messages:N (>=, any)",
            1,
            choices=("tokens", "messages"),
        ),
        Key(
            "keep",
            "condition",
            (("int", 3),),
            "N or messages:N results, or tokens:N chars",
            0,
            choices=("messages", "tokens"),
        ),
        Key("clear_at_least", "int", 0, "stop once this many tokens are freed (0: clear all)", 0),
        Key("exclude_tools", "names", (), "tools whose results are never cleared"),
        Key("clear_tool_inputs", "bool", False, "also empty the cleared calls' arguments"),
    )

    trigger: tuple[tuple[str, int], ...] = (("int", 100_000),)
    keep: tuple[tuple[str, int], ...] = (("int", 3),)
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False

    def __post_init__(self) -> None:
        if len(self.keep) != 1:
            raise ValueError("keep takes one value")
        if len(self.trigger) > 1 and any(kind == "int" for kind, _ in self.trigger):
            raise ValueError("a bare N trigger stands alone; combine tokens:N|messages:N")

    def _triggers(self, messages: Sequence[Message], tokens: int) -> bool:
        for kind, value in self.trigger:
            if kind == "int" and tokens > value:
                return True
            if kind == "tokens" and tokens >= value:
                return True
            if kind == "messages" and len(messages) >= value:
                return True
        return False

    @property
    def reads_tool_text(self) -> bool:
        return self.keep[0][0] == "tokens"  # keep=tokens:N counts outputs' Python characters

    def _keep_count(self, messages: Sequence[Message]) -> int:
        kind, value = self.keep[0]
        if kind != "tokens":
            return value
        count = used = 0
        for message in reversed([m for m in messages if m.role == "tool"]):
            size = len(message.content)
            if used + size > max(1, value) and count > 0:
                break
            used += size
            count += 1
        return count

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        history, total = run.histories[call], run.total(call)
        if total is None:
            return self.window(history, tokens_of=run.tokens_of)
        if not history or not self._triggers(history, total):
            return history  # nothing cleared: as recorded
        if self.clear_at_least > 0 or self.clear_tool_inputs or self.keep[0][0] == "tokens":
            return self.window(history, tokens_of=run.tokens_of)
        # Whether a result can be cleared reads only the messages before it: measured
        # once per run, over the last history, for every call's.
        clearable = run.memo.get(self)
        if clearable is None:
            clearable = run.memo[self] = self.clearable(run.histories[-1])
        positions, eligible, copies = clearable
        results = bisect.bisect_left(positions, len(history))
        keep = self.keep[0][1]
        cleared = 0 if keep >= results else results - keep
        out = history
        for result in range(cleared):
            if not eligible[result]:
                continue
            position, copy = positions[result], copies[result]
            if copy is None:  # cleared for the first time in this run
                copy = rewritten(history[position], LANGCHAIN_PLACEHOLDER, "placeholder")
                copies[result] = copy
            if out is history:
                out = list(history)
            out[position] = copy
        return out

    def clearable(
        self, history: Sequence[Message]
    ) -> tuple[list[int], list[bool], list[Message | None]]:
        """The positions of the tool results in ``history``; whether each may be cleared
        (its call is in the nearest AI message before it, and its tool is not excluded);
        its cleared copy, filled in when it is first cleared."""
        positions: list[int] = []
        eligible: list[bool] = []
        at: int | None = None  # the nearest assistant message so far
        for position, result in enumerate(history):
            if result.role == "assistant":
                at = position
            if result.role != "tool":
                continue
            positions.append(position)
            call = None
            if at is not None:
                call = next(
                    (c for c in history[at].tool_calls if c.id == result.tool_call_id), None
                )
            eligible.append(
                call is not None and (result.tool_name or call.name) not in self.exclude_tools
            )
        return positions, eligible, [None] * len(positions)

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        messages = list(history)
        if not messages:
            return messages
        tokens = total_tokens(messages, tokens_of)
        if not self._triggers(messages, tokens):
            return messages
        candidates = [i for i, m in enumerate(messages) if m.role == "tool"]
        keep = self._keep_count(messages)
        if keep >= len(candidates):
            candidates = []
        elif keep > 0:
            candidates = candidates[:-keep]
        for i in candidates:
            result = messages[i]
            at = next((j for j in range(i - 1, -1, -1) if messages[j].role == "assistant"), None)
            if at is None:
                continue
            call = next((c for c in messages[at].tool_calls if c.id == result.tool_call_id), None)
            if call is None:
                continue
            if (result.tool_name or call.name) in self.exclude_tools:
                continue
            messages[i] = rewritten(result, LANGCHAIN_PLACEHOLDER, "placeholder")
            if self.clear_tool_inputs:
                messages[at] = with_calls_args_cleared(messages[at], {call.id})
            if self.clear_at_least > 0:
                freed = max(0, tokens - total_tokens(messages, tokens_of))
                if freed >= self.clear_at_least:
                    break
        return messages

    @classmethod
    def from_params(cls, spec: str, rest: str) -> FrameworkPolicy:
        return _built(cls, spec, rest)


# ── SummarizationMiddleware ────────────────────────────────────────


def safe_cutoff_point(messages: Sequence[Message], cutoff: int) -> int:
    """Move a cutoff that lands on a tool message back to the AI message that called it
    (so the pair is summarized together), else forward past the tool messages."""
    if cutoff >= len(messages) or messages[cutoff].role != "tool":
        return cutoff
    ids: set[str] = set()
    idx = cutoff
    while idx < len(messages) and messages[idx].role == "tool":
        if messages[idx].tool_call_id:
            ids.add(messages[idx].tool_call_id or "")
        idx += 1
    for i in range(cutoff - 1, -1, -1):
        message = messages[i]
        if message.role == "assistant" and ids & {c.id for c in message.tool_calls if c.id}:
            return i
    return idx


@dataclass(frozen=True)
class LangChainSummarize(FrameworkPolicy):
    """``SummarizationMiddleware``: before a model call, when the state's messages meet
    ``trigger`` (``tokens:N`` or a bare N: tokens >= N; ``messages:N``: count >= N; any
    of several), the messages before a cutoff are replaced **in the agent's state** by
    one human message holding a model-written summary; the ``keep`` most recent
    (``messages:N``, default 20, or ``tokens:N``) stay. A cutoff that would split an AI
    message from its tool results moves back to the AI message.

    The summary cannot be replayed without the model, so it is **stood in** by one
    message of a stated size, ``summary_tokens`` (default 500, our assumption, not
    LangChain's), marked ``edit="summary"``. The replacement persists: later calls
    see the stand-in, the kept messages and what came after.
    """

    NAME = "langchain_summarize"
    SOURCE = (
        "langchain 1.x, libs/langchain_v1/langchain/agents/middleware/summarization.py "
        "SummarizationMiddleware"
    )
    KEYS = (
        Key(
            "trigger",
            "condition",
            None,
            "tokens:N|messages:N (>=, any); N = tokens:N",
            1,
            choices=("tokens", "messages"),
            required=True,
        ),
        Key(
            "keep",
            "condition",
            (("messages", 20),),
            "messages:N or tokens:N kept",
            0,
            choices=("messages", "tokens"),
        ),
        Key("summary_tokens", "int", 500, "size of the summary stand-in (ours)", 0),
    )

    trigger: tuple[tuple[str, int], ...] = (("tokens", 100_000),)
    keep: tuple[tuple[str, int], ...] = (("messages", 20),)
    summary_tokens: int = 500

    def __post_init__(self) -> None:
        if len(self.keep) != 1:
            raise ValueError("keep takes one value")
        # A bare N means tokens (the middleware's ``("tokens", N)``).
        object.__setattr__(
            self, "trigger", tuple(("tokens" if k == "int" else k, v) for k, v in self.trigger)
        )
        kind, value = self.keep[0]
        object.__setattr__(self, "keep", (("messages" if kind == "int" else kind, value),))

    def _cutoff(self, messages: Sequence[Message], tokens_of: TokensOf) -> int:
        kind, value = self.keep[0]
        if kind == "messages":
            if len(messages) <= value:
                return 0
            return safe_cutoff_point(messages, len(messages) - value)
        if total_tokens(messages, tokens_of) <= value:
            return 0
        left, right, candidate = 0, len(messages), len(messages)
        suffix = [0] * (len(messages) + 1)
        for i in range(len(messages) - 1, -1, -1):
            suffix[i] = suffix[i + 1] + tokens_of(messages[i])
        for _ in range(len(messages).bit_length() + 1):
            if left >= right:
                break
            mid = (left + right) // 2
            if suffix[mid] <= value:
                candidate, right = mid, mid
            else:
                left = mid + 1
        if candidate == len(messages):
            candidate = left
        if candidate >= len(messages):
            if len(messages) == 1:
                return 0
            candidate = len(messages) - 1
        return safe_cutoff_point(messages, candidate)

    def advance(
        self, history: Sequence[Message], *, tokens_of: TokensOf
    ) -> tuple[list[Message], list[Message]]:
        messages = list(history)
        return self._step(messages, total_tokens(messages, tokens_of), tokens_of)[:2]

    def replay(self, run: RunHistory) -> tuple[list[list[Message]], list[Message]]:
        """:meth:`advance` call by call, the history's tokens carried from one call to the
        next (the run's running sums add what entered) rather than counted again."""
        if not run.exact:
            return super().replay(run)
        history: list[Message] = []
        served = []
        tokens: int | None = 0
        counted = 0  # messages of the run's history whose tokens are in ``tokens``
        for call, entering in enumerate(run.entered):
            history = history + entering
            length = len(run.histories[call])
            if type(tokens) is int:
                tokens += run.running[length] - run.running[counted]
            else:
                tokens = total_tokens(history, run.tokens_of)
            counted = length
            window, history, tokens = self._step(history, tokens, run.tokens_of)
            served.append(window)
        return served, history

    def _step(
        self, messages: list[Message], tokens: Any, tokens_of: TokensOf
    ) -> tuple[list[Message], list[Message], Any]:
        """``(window, history kept, its tokens)`` at a call whose history is ``messages``
        (a list of its own), of ``tokens`` tokens; None: the kept history's are not known."""
        fires = any(
            (kind == "tokens" and tokens >= value)
            or (kind == "messages" and len(messages) >= value)
            for kind, value in self.trigger
        )
        if not fires:
            return messages, messages, tokens
        cutoff = self._cutoff(messages, tokens_of)
        if cutoff <= 0:
            return messages, messages, tokens
        text = (
            f"{SUMMARY_OPENING}[stand-in for a model-written summary of {cutoff} messages, "
            f"sized at {self.summary_tokens} tokens]"
        )
        summary = standin(text, self.summary_tokens, tokens_of, "summary")
        kept = [summary, *messages[cutoff:]]
        return kept, kept, None

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        return self.advance(history, tokens_of=tokens_of)[0]

    @classmethod
    def from_params(cls, spec: str, rest: str) -> FrameworkPolicy:
        return _built(cls, spec, rest)
