"""The histories a run's model calls see, measured once per run for every framework policy.

A stateless policy's window at a call is a function of the history recorded up to that
call, which is a prefix of what the run appended; replaying nine policies over a run
used to rebuild those prefixes and count every message's tokens nine times over. Here
they are built once: the prefixes (shared, never changed: a policy copies before it
edits, and one that keeps a history whole serves the shared list itself, which the audit
then measures once), each message's tokens and their running sums. Running sums stand
in for ``sum(map(tokens_of, prefix))`` only where every count is an ``int`` (then the
two are the same number); a float counter takes the policies' own loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextledger.read.messages import Message, RunMessages

#: Counts one message's tokens (the caller's tokenizer, or
#: :func:`~contextledger.window.frameworks._common.estimated_tokens_of`).
TokensOf = Callable[[Message], int]


class RunHistory:
    """One run's per-call histories and token counts, for ``tokens_of``."""

    __slots__ = (
        "entered",
        "exact",
        "histories",
        "memo",
        "running",
        "stream",
        "tokens",
        "tokens_of",
    )

    def __init__(self, stream: RunMessages, tokens_of: TokensOf) -> None:
        self.stream = stream
        self.tokens_of = tokens_of
        #: Per call, in call order: the messages the run appended before it.
        self.entered: list[list[Message]] = [
            stream.entering_before(c.ordinal) for c in stream.calls
        ]
        #: Per call: the history it sees (every message appended before it), a prefix of
        #: the last call's. Shared by every policy replayed over the run: read-only.
        self.histories: list[list[Message]] = []
        history: list[Message] = []
        for entering in self.entered:
            if entering or not self.histories:
                history = history + entering
            self.histories.append(history)
        last = self.histories[-1] if self.histories else []
        #: ``tokens_of`` of each message of the last history, and their running sums
        #: (``running[n]``: the first ``n`` messages' tokens, added in order).
        self.tokens: list[int] = [tokens_of(message) for message in last]
        self.running: list[int] = [0]
        total = 0
        for count in self.tokens:
            total += count
            self.running.append(total)
        #: Every count is an ``int``: sums in any order are exact.
        self.exact = all(type(count) is int for count in self.tokens)
        #: What a policy derives once per run from the histories (keyed by the policy).
        self.memo: dict[Any, Any] = {}

    def total(self, call: int) -> int | None:
        """``sum(map(tokens_of, histories[call]))`` where it is exact (else None)."""
        return self.running[len(self.histories[call])] if self.exact else None


#: The last run's :class:`RunHistory`: an audit replays every policy over one run before
#: the next, with one ``tokens_of`` per run.
_last: RunHistory | None = None


def run_history(stream: RunMessages, tokens_of: TokensOf) -> RunHistory:
    """:class:`RunHistory` of ``stream`` for ``tokens_of``, reused while both are the same
    objects as the previous call's (streams are not changed once built)."""
    global _last
    last = _last
    if last is not None and last.stream is stream and last.tokens_of is tokens_of:
        return last
    built = RunHistory(stream, tokens_of)
    _last = built
    return built
