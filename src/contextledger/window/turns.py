"""Turns: the unit a window strategy removes.

A turn is one non-``tool`` message plus the ``tool`` messages that follow it, so
an assistant's tool calls and their results always leave together. A ``tool``
message with no turn in progress (only a hand-built window has one) opens a
turn of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextledger.read.messages import Message


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a window."""

    #: Position of the turn in the segmentation.
    index: int
    #: Window index of the turn's first message.
    start: int
    messages: tuple[Message, ...]

    @property
    def length(self) -> int:
        return len(self.messages)

    @property
    def end(self) -> int:
        """Window index just past the turn's last message."""
        return self.start + len(self.messages)

    @property
    def chars(self) -> int:
        """Content chars of the whole turn (UTF-16 code units)."""
        return window_chars(self.messages)

    def holds(self, window_index: int) -> bool:
        return self.start <= window_index < self.end


def segment_turns(window: Sequence[Message]) -> list[Turn]:
    """Split a window into turns.

    >>> from contextledger.read.messages import Message
    >>> w = [Message("user", "go"), Message("assistant", ""), Message("tool", "r"),
    ...      Message("tool", "s"), Message("user", "more")]
    >>> [(t.start, t.length) for t in segment_turns(w)]
    [(0, 1), (1, 3), (4, 1)]
    """
    turns: list[Turn] = []
    start = 0
    for position, message in enumerate(window):
        if position > 0 and message.role != "tool":
            turns.append(Turn(len(turns), start, tuple(window[start:position])))
            start = position
    if window:
        turns.append(Turn(len(turns), start, tuple(window[start:])))
    return turns


def turn_count(window: Sequence[Message]) -> int:
    """``len(segment_turns(window))`` without building the turns (every visit asks it; most
    do not engage): a turn opens at the first message and at each one not a tool result.

    >>> from contextledger.read.messages import Message
    >>> turn_count([Message("user", "go"), Message("tool", "r"), Message("user", "more")])
    2
    """
    if not window:
        return 0
    return 1 + sum(message.role != "tool" for message in window[1:])


def window_chars(window: Sequence[Message]) -> int:
    """Sum of content lengths, in UTF-16 code units. Exact; not tokens."""
    return sum([message.chars for message in window])


def answered_call_ids(window: Sequence[Message]) -> frozenset[str]:
    """Every tool-call id some ``tool`` message in the window answers."""
    return frozenset(m.tool_call_id for m in window if m.role == "tool" and m.tool_call_id)
