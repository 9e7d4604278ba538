"""The stateless framework policies' windows, every call of a batch at once, as message ids.

Replaying a policy costs Python per call (about 106,000 windows in a 2,000-run batch of
the archive, a few microseconds each), whatever the window is built as. For the policies
whose window at a call is a few ranges of the history up to it, the ranges follow from
flat arrays of the batch's histories (each run's last history: roles, token running
sums, where AutoGen's units start; per call, how long its history is) by searches and
cumulative sums over the whole batch, and the window is laid out directly as the ids
:mod:`~contextledger.window.audit_batch` measures: no ``Message`` list, no Python per call.
The rules are the policies' own ``window_at``, read as arrays; a policy or key not listed
in :func:`ranged` is replayed as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Protocol, TypeGuard

import numpy as np

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import FrameworkPolicy
from contextledger.window.frameworks._history import RunHistory
from contextledger.window.frameworks.anthropic import (
    ANTHROPIC_PLACEHOLDER,
    AnthropicClearToolUses,
)
from contextledger.window.frameworks.autogen import AutoGenBuffered, AutoGenHeadTail
from contextledger.window.frameworks.langchain import (
    LANGCHAIN_PLACEHOLDER,
    LangChainClearToolUses,
    LangChainTrim,
    message_type,
)
from contextledger.window.frameworks.mastra import MastraToolCallFilter

#: LangChain's message types as codes (0: any other role).
_TYPES = {"system": 1, "human": 2, "tool": 3, "ai": 4}


#: What AutoGen's "Skipped k messages." notice is, but its text.
_NOTICE = Message("user", "", window_authored=True)


class RewriteId(Protocol):
    """The id of a policy's rewrite of a message, unbuilt (``Layout.rewrite_id``)."""

    def __call__(
        self, message: Message, content: str, edit: str | None, *, calls_kept: bool = True
    ) -> int: ...


#: The clears: their placeholder copies are made per run (:meth:`BatchHistories.add_run`).
Clear = AnthropicClearToolUses | LangChainClearToolUses


def ranged(policy: object) -> TypeGuard[FrameworkPolicy]:
    """Whether :func:`windows` lays out ``policy``'s windows (else it is replayed)."""
    if isinstance(policy, (AutoGenBuffered, AutoGenHeadTail)):
        return True
    if isinstance(policy, (AnthropicClearToolUses, LangChainClearToolUses)):
        # the keys whose fast path (``window_at``) falls back to the policy's own loop
        plain = policy.clear_at_least == 0 and policy.clear_tool_inputs is False
        return plain and (
            isinstance(policy, AnthropicClearToolUses) or policy.keep[0][0] != "tokens"
        )
    if isinstance(policy, MastraToolCallFilter):
        return not policy.exclude and policy.preserve_latest_step
    return (
        isinstance(policy, LangChainTrim)
        and policy.strategy == "last"
        and not policy.end_on
        and not policy.include_system
    )


@dataclass
class BatchHistories:
    """Each run's last history laid end to end (a position each), per call its length."""

    ids: list[int] = field(default_factory=list)  # the message's id in the layout
    types: list[int] = field(default_factory=list)  # its LangChain type (_TYPES; 0 other)
    calls: list[bool] = field(default_factory=list)  # an assistant message making calls
    tokens: list[int] = field(default_factory=list)
    starts: list[bool] = field(default_factory=list)  # one of AutoGen's messages starts here
    run_base: list[int] = field(default_factory=list)  # per run: its first position
    run_size: list[int] = field(default_factory=list)
    history_lengths: list[int] = field(default_factory=list)  # per call of the batch
    calls_of_run: list[int] = field(default_factory=list)
    #: Per head-and-tail policy: the ids of "Skipped k messages." for k = 1.., per run
    notices: dict[AutoGenHeadTail, list[list[int]]] = field(default_factory=dict)
    #: Per clear: per position, the id of its cleared copy (-1: never cleared)
    copies: dict[Clear, list[int]] = field(default_factory=dict)
    #: For Mastra's filter: per position, the position of the message making the call a
    #: result answers (-1: none), and the id of a calling message without its calls (-1:
    #: left with nothing); per run, whether its calls are plain (else it is replayed)
    caller: list[int] = field(default_factory=list)
    uncalled: list[int] = field(default_factory=list)
    plain: list[bool] = field(default_factory=list)

    def add_run(
        self,
        run: RunHistory,
        message_id: Callable[[Message], int],
        rewrite_id: RewriteId,
        head_tails: list[AutoGenHeadTail],
        clears: list[Clear],
        filtered: bool = False,
    ) -> None:
        """One run's history (``message_id``: its messages' ids in the layout, asked while
        the run is the layout's current one), the notices its head-and-tail views hold and
        the clears' copies (``rewrite_id``: the id of a rewrite, unbuilt)."""
        last = run.histories[-1] if run.histories else []
        self.run_base.append(len(self.ids))
        self.run_size.append(len(last))
        self.ids += map(message_id, last)
        types = [_TYPES.get(message_type(message), 0) for message in last]
        self.types += types
        self.calls += [m.role == "assistant" and bool(m.tool_calls) for m in last]
        if not run.exact:
            msg = f"{run.stream.run_id}: token counts that are not whole numbers"
            raise ValueError(msg)
        self.tokens += run.tokens
        system = 0
        while system < len(last) and types[system] == 1:
            system += 1
        self.starts += [
            position >= system
            and not (position > system and types[position] == 3 and types[position - 1] == 3)
            for position in range(len(last))
        ]
        # AutoGen's units in each call's history (a unit's count up to its start)
        counted = list(accumulate(self.starts[len(self.starts) - len(last) :], initial=0))
        units = [counted[len(history)] for history in run.histories]
        for policy in head_tails:
            skipped = sorted({n - policy.head_size - policy.tail_size for n in units})
            notices = [-1] * (skipped[-1] if skipped and skipped[-1] > 0 else 0)
            for k in skipped:
                if k > 0:
                    notices[k - 1] = rewrite_id(_NOTICE, f"Skipped {k} messages.", None)
            self.notices.setdefault(policy, []).append(notices)
        for clear in clears:
            copies = [-1] * len(last)
            if run.histories and _fires(clear, len(last), run.running[-1]):
                anthropic = isinstance(clear, AnthropicClearToolUses)
                placeholder = ANTHROPIC_PLACEHOLDER if anthropic else LANGCHAIN_PLACEHOLDER
                positions, eligible = clear.clearable(last)[:2]
                for position, clearable in zip(
                    positions[: max(0, len(positions) - _kept(clear))], eligible, strict=False
                ):
                    if clearable:
                        copies[position] = rewrite_id(last[position], placeholder, "placeholder")
            self.copies.setdefault(clear, []).extend(copies)
        if filtered:
            self._add_steps(last, rewrite_id)
        self.history_lengths += map(len, run.histories)
        self.calls_of_run.append(len(run.histories))

    def _add_steps(self, last: list[Message], rewrite_id: RewriteId) -> None:
        """What Mastra's filter (every tool, the latest step kept) reads of a run. Where
        every call has an id and a name, no id is made twice and a recorded call list
        names no other, a result stays exactly while its call's message is the latest
        step, and a calling message before that step loses all its calls (removed when
        it says nothing else); other runs are replayed."""
        base = len(self.caller)
        caller: dict[str, int] = {}
        plain = True
        for position, message in enumerate(last):
            if message.role == "assistant" and message.tool_calls:
                ids = [call.id for call in message.tool_calls]
                recorded = message.raw.get("toolCalls") if message.raw is not None else None
                plain = plain and all(call.id and call.name for call in message.tool_calls)
                plain = plain and len(set(ids)) == len(ids) and not caller.keys() & set(ids)
                plain = plain and not (
                    isinstance(recorded, list)
                    and any(isinstance(c, dict) and c.get("id") not in ids for c in recorded)
                )
                caller.update((call_id, base + position) for call_id in ids)
        self.plain.append(plain)
        self.caller += [
            caller.get(m.tool_call_id or "", -1) if m.role == "tool" else -1 for m in last
        ]
        self.uncalled += [
            rewrite_id(m, m.content, "placeholder", calls_kept=False)
            if plain and m.role == "assistant" and m.tool_calls and m.content.strip()
            else -1
            for m in last
        ]

    def laid(self, policy: object) -> bool:
        """Whether ``policy``'s windows of the run just added are laid out as ranges."""
        return not isinstance(policy, MastraToolCallFilter) or self.plain[-1]

    def laid_runs(self, policy: object) -> np.ndarray:
        """Per run, whether ``policy``'s windows are laid out as ranges."""
        if isinstance(policy, MastraToolCallFilter):
            return np.asarray(self.plain, dtype=bool)
        return np.ones(len(self.calls_of_run), dtype=bool)

    def whole(self) -> tuple[np.ndarray, np.ndarray]:
        """Every call's whole history, as :func:`windows` lays out a window."""
        rows = _Rows.of(self)
        return _pieces(np.asarray(self.ids, dtype=np.int64), [(rows.base, rows.end)])


def _fires(clear: Clear, messages: int | np.ndarray, tokens: int | np.ndarray) -> Any:
    """Whether ``clear`` clears a history of ``messages`` and ``tokens`` (histories'
    arrays: per history)."""
    if isinstance(clear, AnthropicClearToolUses):
        return tokens > clear.trigger
    fires: Any = False
    for kind, value in clear.trigger:
        measured = messages if kind == "messages" else tokens
        fires = fires | (measured > value if kind == "int" else measured >= value)
    return fires & (messages > 0)


def _kept(clear: Clear) -> int:
    """How many of the most recent results ``clear`` keeps (LangChain's ``keep`` is a
    count here, an int or ``messages:N``: :func:`ranged` takes no ``tokens:N``)."""
    return clear.keep if isinstance(clear, AnthropicClearToolUses) else clear.keep[0][1]


@dataclass
class _Rows:
    """Per call of the batch: its run, its run's first position, its history's end."""

    run: np.ndarray
    base: np.ndarray
    end: np.ndarray  # exclusive, a batch position

    @classmethod
    def of(cls, batch: BatchHistories) -> _Rows:
        run = np.repeat(np.arange(len(batch.calls_of_run)), batch.calls_of_run)
        base = np.asarray(batch.run_base, dtype=np.int64)[run]
        return cls(run, base, base + np.asarray(batch.history_lengths, dtype=np.int64))


def windows(policy: FrameworkPolicy, batch: BatchHistories) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, lengths)``: every call's window under ``policy`` (one of :func:`ranged`),
    calls of the batch in order, laid end to end as message ids."""
    rows = _Rows.of(batch)
    ids = np.asarray(batch.ids, dtype=np.int64)
    if isinstance(policy, AutoGenBuffered):
        return _pieces(ids, _buffered(policy, batch, rows))
    if isinstance(policy, AutoGenHeadTail):
        return _head_tail(policy, batch, rows, ids)
    if isinstance(policy, LangChainTrim):
        return _pieces(ids, _trimmed(policy, batch, rows))
    if isinstance(policy, (AnthropicClearToolUses, LangChainClearToolUses)):
        return _cleared(policy, batch, rows, ids)
    if isinstance(policy, MastraToolCallFilter):
        return _filtered(batch, rows, ids)
    raise TypeError(f"{policy}: not laid out as ranges")


def _pieces(
    ids: np.ndarray, bounds: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per call, the ranges ``[begin, end)`` of ``ids`` in ``bounds`` (in window order)
    laid end to end: ``(ids, lengths)``."""
    begins = np.stack([begin for begin, _ in bounds], axis=1).ravel()
    sizes = np.stack([np.maximum(end - begin, 0) for begin, end in bounds], axis=1)
    lengths = sizes.sum(axis=1)
    sizes = sizes.ravel()
    piece = np.repeat(np.arange(len(sizes)), sizes)
    offset = np.arange(len(piece)) - (np.cumsum(sizes) - sizes)[piece]
    return ids[begins[piece] + offset], lengths


def _units(batch: BatchHistories, rows: _Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(unit_starts, first_unit, units)``: every unit's start (a batch position), per
    call the index of its run's first unit there and how many units its history holds."""
    unit_starts = np.flatnonzero(np.asarray(batch.starts, dtype=bool))
    first_unit = np.searchsorted(unit_starts, rows.base)
    units = np.searchsorted(unit_starts, rows.end) - first_unit
    return unit_starts, first_unit, units


def _system(
    batch: BatchHistories, rows: _Rows, unit_starts: np.ndarray, first_unit: np.ndarray
) -> np.ndarray:
    """Per call, where its leading system messages end (a batch position)."""
    run_end = rows.base + np.asarray(batch.run_size, dtype=np.int64)[rows.run]
    found = _at(unit_starts, first_unit)  # the run's first unit, if it has one
    held = (first_unit < len(unit_starts)) & (found < run_end)
    return np.minimum(np.where(held, found, run_end), rows.end)


def _buffered(
    policy: AutoGenBuffered, batch: BatchHistories, rows: _Rows
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:meth:`AutoGenBuffered.window_at`: the system head, then the last units."""
    unit_starts, first_unit, units = _units(batch, rows)
    types = np.asarray(batch.types, dtype=np.int64)
    first = np.maximum(0, units - policy.buffer_size)
    inside = first < units
    start = _start_of(unit_starts, first_unit + first, inside, rows.end)
    first += inside & (_at(types, start) == 3)
    begin = _start_of(unit_starts, first_unit + first, first < units, rows.end)
    whole = first == 0
    system = _system(batch, rows, unit_starts, first_unit)
    return [
        (rows.base, np.where(whole, rows.end, system)),
        (np.where(whole, rows.end, begin), rows.end),
    ]


def _start_of(
    unit_starts: np.ndarray, unit: np.ndarray, inside: np.ndarray, otherwise: np.ndarray
) -> np.ndarray:
    """The start of ``unit`` (a batch index into ``unit_starts``) where ``inside``, else
    ``otherwise``."""
    return np.where(inside, _at(unit_starts, unit), otherwise)


def _at(values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``values`` at ``positions`` clipped into range (the caller reads them only where
    they are in range)."""
    if not len(values):
        return np.zeros(len(positions), dtype=values.dtype)
    return values[np.clip(positions, 0, len(values) - 1)]


def _head_tail(
    policy: AutoGenHeadTail, batch: BatchHistories, rows: _Rows, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`AutoGenHeadTail.window_at`: the head's units, a notice, the tail's units."""
    unit_starts, first_unit, units = _units(batch, rows)
    types = np.asarray(batch.types, dtype=np.int64)
    calls = np.asarray(batch.calls, dtype=bool)
    skipped = units - policy.head_size - policy.tail_size
    cut = skipped > 0
    head = np.full(len(units), policy.head_size, dtype=np.int64)
    if policy.head_size > 0:
        last = _start_of(unit_starts, first_unit + head - 1, cut, rows.base)
        head -= cut & _at(calls, last)
    tail = units - policy.tail_size
    tail_start = _start_of(unit_starts, first_unit + tail, cut, rows.base)
    tail += cut & (_at(types, tail_start) == 3)
    head_end = _start_of(unit_starts, first_unit + head, cut & (head < units), rows.end)
    tail_begin = _start_of(unit_starts, first_unit + tail, cut & (tail < units), rows.end)
    # the notices after the histories: "Skipped k messages." of each run at k - 1
    notices = batch.notices.get(policy, [])
    notice_base = len(ids) + np.concatenate([[0], np.cumsum([len(n) for n in notices])])[:-1]
    every = np.concatenate([ids, np.asarray([i for n in notices for i in n], dtype=np.int64)])
    at = notice_base[rows.run] + skipped - 1 if len(notices) else rows.end
    return _pieces(
        every,
        [
            (rows.base, np.where(cut, head_end, rows.end)),
            (at, at + cut),
            (np.where(cut, tail_begin, rows.end), rows.end),
        ],
    )


def _trimmed(
    policy: LangChainTrim, batch: BatchHistories, rows: _Rows
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:meth:`LangChainTrim.window_at` (``strategy=last``): the longest tail within the
    budget (the first position whose running sum leaves at most ``max_tokens`` to the
    end: counts are whole and not negative), then on to a ``start_on`` type."""
    tokens = np.asarray(batch.tokens, dtype=np.int64)
    running = np.concatenate([[0], np.cumsum(tokens)])
    begin = np.searchsorted(running, running[rows.end] - policy.max_tokens, side="left")
    begin = np.clip(begin, rows.base, rows.end)
    if policy.start_on:
        allowed = np.isin(
            np.asarray(batch.types, dtype=np.int64), [_TYPES[t] for t in policy.start_on]
        )
        # per position, the first allowed position at or after it (its run's end if none)
        size = len(allowed)
        nearest = np.where(allowed, np.arange(size), size)
        nearest = np.minimum.accumulate(nearest[::-1])[::-1]
        nearest = np.append(nearest, size)
        begin = np.minimum(nearest[begin], rows.end)
    return [(begin, rows.end)]


def _cleared(
    policy: Clear, batch: BatchHistories, rows: _Rows, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The clears' ``window_at``: the whole history, where the trigger fires each result
    but the ``keep`` most recent (that may be cleared) in its cleared copy."""
    flat, lengths = _pieces(np.arange(len(ids)), [(rows.base, rows.end)])
    row = np.repeat(np.arange(len(lengths)), lengths)
    tokens = np.concatenate([[0], np.cumsum(np.asarray(batch.tokens, dtype=np.int64))])
    results = np.concatenate([[0], np.cumsum(np.asarray(batch.types, dtype=np.int64) == 3)])
    fires = _fires(policy, rows.end - rows.base, tokens[rows.end] - tokens[rows.base])
    keep = _kept(policy)
    # a result is cleared when fewer than keep + 1 results follow it in the call's history
    later = results[rows.end][row] - results[flat + 1]
    copies = np.asarray(batch.copies[policy], dtype=np.int64)[flat]
    swapped = fires[row] & (copies >= 0) & (later >= keep)
    return np.where(swapped, copies, ids[flat]), lengths


def _filtered(batch: BatchHistories, rows: _Rows, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:class:`MastraToolCallFilter` (every tool, the latest step kept) of a plain run
    (:meth:`BatchHistories._add_steps`; the other runs' windows are laid out, unread):
    the results of the latest step's calls, the other messages but calling ones, the
    latest step itself, and every earlier calling message that says something, without
    its calls."""
    positions, lengths = _pieces(np.arange(len(ids)), [(rows.base, rows.end)])
    row = np.repeat(np.arange(len(lengths)), lengths)
    steps = np.asarray(batch.calls, dtype=bool)
    # per call, the latest step of its history (-1: none)
    latest = np.maximum.accumulate(np.where(steps, np.arange(len(steps)), -1))
    latest = _at(latest, rows.end - 1)
    latest = np.where((rows.end > rows.base) & (latest >= rows.base), latest, -1)[row]
    result = np.asarray(batch.types, dtype=np.int64)[positions] == 3
    step = steps[positions]
    uncalled = np.asarray(batch.uncalled, dtype=np.int64)[positions]
    earlier = step & (positions != latest)
    caller = np.asarray(batch.caller, dtype=np.int64)[positions]
    kept = np.where(result, (caller == latest) & (latest >= 0), ~earlier | (uncalled >= 0))
    out = np.where(earlier, uncalled, ids[positions])
    return out[kept], np.bincount(row[kept], minlength=len(lengths))
