"""Which turns may not leave the window, and the span a removal takes.

Every rule here is a pure function over a window (a list of messages) and its
turns. The order of the refusal reasons, the pins and the span rule are
agentfootprint 9.62's (``window/turns.ts``, ``currentRequest.ts``,
``lastToolResult.ts``); the ledger-fact pin is the newer version's
(``ledgerFactPins.ts``), armed only when standings are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextledger.read.messages import Message
from contextledger.window.notice import tool_name_of
from contextledger.window.turns import Turn

#: The refusal reasons, in the order a turn is asked about them.
REFUSAL_ORDER = (
    "current-request",
    "system-envelope",
    "paused-tool",
    "pending-check-in",
    "unresolved-tool-call",
    "last-tool-result",
    "ledger-fact",
)

# ── the current request ────────────────────────────────────────────


def said_by_a_person(message: Message) -> bool:
    """A user message nobody but a person wrote: no notice, no summary, not injected."""
    return message.role == "user" and not message.library_authored


def current_request_index(window: Sequence[Message], said: str | None = None) -> int:
    """Index of the current request in the window, or -1 when it holds none.

    The last message a person said whose text is ``said`` (the run's
    ``userMessage``); failing that, the last message a person said at all.
    """
    latest = -1
    for position in range(len(window) - 1, -1, -1):
        message = window[position]
        if not said_by_a_person(message):
            continue
        if said is not None and message.content == said:
            return position
        if latest == -1:
            latest = position
    return latest


# ── pins ───────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Pin:
    """A turn a pin would hold: the tool it is named for, where it is, what it costs."""

    tool_name: str
    turn_index: int
    message_index: int
    chars: int
    #: Ledger-fact pins only: every tool result the turn holds.
    tool_call_ids: tuple[str, ...] = ()

    def observed(self) -> dict[str, Any]:
        return {"toolName": self.tool_name, "turnIndex": self.turn_index, "chars": self.chars}


def tool_result_pins(
    turns: Sequence[Turn], window: Sequence[Message], after: int = -1
) -> list[Pin]:
    """Each tool's latest result after the current request, one pin per turn, newest first."""
    pins: list[Pin] = []
    named: set[str] = set()
    pinned_turns: set[int] = set()
    for turn in reversed(turns):
        for offset in range(turn.length - 1, -1, -1):
            if turn.start + offset <= after:
                continue
            name = tool_name_of(turn.messages[offset], window)
            if name is None or name in named:
                continue
            named.add(name)
            if turn.index in pinned_turns:
                continue
            pinned_turns.add(turn.index)
            pins.append(Pin(name, turn.index, turn.start, turn.chars))
    return pins


def rank_standing(standing: str | None) -> int:
    """``fact > open > undeclared (None) > ruled-out > noise``, as a number to compare."""
    return {"fact": 4, "open": 3, None: 2, "ruled-out": 1, "noise": 0}.get(standing, 2)


def is_result(message: Message) -> bool:
    """A tool result the model could have judged (a settlement message is not one)."""
    return message.role == "tool" and not message.not_dispatched


def turn_standing(turn: Turn, standing_of_call: Callable[[str], str | None]) -> str | None:
    """A turn's standing: its most valuable result's (None when it has no judged result)."""
    best: str | None = None
    best_rank = -1
    for message in turn.messages:
        if not is_result(message) or not message.tool_call_id:
            continue
        standing = standing_of_call(message.tool_call_id)
        rank = rank_standing(standing)
        if rank > best_rank:
            best, best_rank = standing, rank
    return best


def ledger_fact_pins(
    turns: Sequence[Turn],
    window: Sequence[Message],
    standing_of: Callable[[Turn], str | None],
    after: int = -1,
) -> list[Pin]:
    """Turns standing ``fact`` with a result after the current request, newest first."""
    pins: list[Pin] = []
    for turn in reversed(turns):
        if standing_of(turn) != "fact":
            continue
        ids: list[str] = []
        name: str | None = None
        for offset, message in enumerate(turn.messages):
            if turn.start + offset <= after:
                continue
            if not is_result(message) or not message.tool_call_id:
                continue
            ids.append(message.tool_call_id)
            name = tool_name_of(message, window) or name
        if ids and name is not None:
            pins.append(Pin(name, turn.index, turn.start, turn.chars, tuple(ids)))
    return pins


# ── guards and the plan ────────────────────────────────────────────


@dataclass(frozen=True)
class Guards:
    """What a removal must respect beyond the turn itself."""

    answered: frozenset[str]
    current_request: int = -1
    paused_tool_call_id: str | None = None
    paused_check_in: bool = False
    tool_result_pins: tuple[Pin, ...] = ()
    keep_last_tool_results: int = 0
    ledger_fact_pins: tuple[Pin, ...] = ()
    keep_ledger_facts: int = 0
    #: Admitted pins by turn index (what :func:`refusal_for` reads).
    pinned_turns: frozenset[int] = field(default_factory=frozenset)
    fact_pinned_turns: frozenset[int] = field(default_factory=frozenset)


def refusal_for(turn: Turn, guards: Guards) -> str | None:
    """Why this turn may not leave, or None when it may (first reason in REFUSAL_ORDER)."""
    if guards.current_request >= 0 and turn.holds(guards.current_request):
        return "current-request"
    if any(m.role == "system" for m in turn.messages):
        return "system-envelope"
    paused = guards.paused_tool_call_id
    if paused:
        for message in turn.messages:
            if message.tool_call_id == paused or any(c.id == paused for c in message.tool_calls):
                return "pending-check-in" if guards.paused_check_in else "paused-tool"
    for message in turn.messages:
        if any(call.id not in guards.answered for call in message.tool_calls):
            return "unresolved-tool-call"
    if turn.index in guards.pinned_turns:
        return "last-tool-result"
    if turn.index in guards.fact_pinned_turns:
        return "ledger-fact"
    return None


def spend_ceiling(
    pins: Sequence[Pin], limit: int, candidate_count: int
) -> tuple[frozenset[int], dict[str, Any] | None]:
    """Admit pins outside the keep window, newest first, up to ``limit``.

    A pin inside the keep window is free and spends nothing. Returns the
    admitted turn indexes and the observations block (None when nothing was
    admitted).
    """
    if limit <= 0 or not pins:
        return frozenset(), None
    contested = [pin for pin in pins if pin.turn_index < candidate_count]
    admitted = contested[:limit]
    if not admitted:
        return frozenset(), None
    observed = {
        "pinned": [pin.observed() for pin in admitted],
        "yielded": len(contested) - len(admitted),
        "limit": limit,
    }
    return frozenset(pin.turn_index for pin in admitted), observed


def refusal(reason: str, turn: Turn) -> dict[str, Any]:
    return {"reason": reason, "turnIndex": turn.index, "messageIndex": turn.start}


@dataclass(frozen=True)
class RemovalPlan:
    """The span a removal takes (turn indexes, inclusive) and every refusal named."""

    first: int
    last: int
    refusals: list[dict[str, Any]]
    #: The last-tool-result pin's block, when it admitted something.
    observations: dict[str, Any] | None = None
    #: The ledger-fact pin's block, when it admitted something.
    ledger_facts: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return self.first == -1


def plan_removal(turns: Sequence[Turn], keep_recent: int, guards: Guards) -> RemovalPlan:
    """The longest contiguous removable span starting at the oldest removable turn.

    The last ``keep_recent`` turns refuse as ``inside-keep-window``. Among the
    older ones an unremovable turn before the span is stepped over and one
    after it began ends it. Refusals: the older turns that refused (oldest
    first, up to the one that ended the span), then the keep window.
    """
    candidate_count = max(0, len(turns) - keep_recent)
    kept = [refusal("inside-keep-window", turn) for turn in turns[candidate_count:]]
    if candidate_count == 0:
        return RemovalPlan(-1, -1, kept)
    pinned, observations = spend_ceiling(
        guards.tool_result_pins, guards.keep_last_tool_results, candidate_count
    )
    fact_pinned, ledger_facts = spend_ceiling(
        guards.ledger_fact_pins, guards.keep_ledger_facts, candidate_count
    )
    effective = Guards(
        answered=guards.answered,
        current_request=guards.current_request,
        paused_tool_call_id=guards.paused_tool_call_id,
        paused_check_in=guards.paused_check_in,
        pinned_turns=pinned or guards.pinned_turns,
        fact_pinned_turns=fact_pinned or guards.fact_pinned_turns,
    )
    before: list[dict[str, Any]] = []
    first = last = -1
    for turn in turns[:candidate_count]:
        reason = refusal_for(turn, effective)
        if reason is None:
            if first == -1:
                first = turn.index
            last = turn.index
            continue
        before.append(refusal(reason, turn))
        if first != -1:
            break
    return RemovalPlan(first, last, before + kept, observations, ledger_facts)


def standing_lookup(
    standings: Mapping[str, str] | None,
) -> Callable[[Turn], str | None] | None:
    """A turn's standing from ``{toolCallId: standing}`` (None: no ledger at all)."""
    if standings is None:
        return None

    def of_turn(turn: Turn) -> str | None:
        return turn_standing(turn, standings.get)

    return of_turn
