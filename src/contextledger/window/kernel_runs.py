"""The runs as the what-if kernel reads them: each run's turns as sets, and sums over turns.

:mod:`~contextledger.window.kernel` advances every (policy, run) window as a set of the
run's turns (:mod:`~contextledger.window.turn_sets`: ``[W, ...]`` words of 64 bits).
What it reads of the runs is laid out here once, before the first call: the turns joining
at each call, the fact turns from when they count, the request's turn, the turns holding
each tool's results, and running sums of messages and chars per turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextledger.window import turn_sets
from contextledger.window.notice import MAX_NAMED_TOOLS
from contextledger.window.notice_length import ELLIPSIS_EXTRA
from contextledger.window.turn_arrays import ABSENT, NEVER, TurnArrays
from contextledger.window.turn_sets import ONE

# Sums of messages and chars packed into one int64 (a run's totals below the limits).
MSG_BITS = 20
MSG_LIMIT = 1 << MSG_BITS
CHAR_LIMIT = 1 << (62 - MSG_BITS)


@dataclass
class _Events:
    """Turns joining a set call by call: at call k, ``bit[bounds[k]:bounds[k + 1]]`` is
    or-ed in at ``at`` (``word * runs + run`` of the flattened ``[W, R]`` set; the turns
    of one word joining at one call are given as one word, so each call's ``at`` are
    distinct and one indexed ``|=`` adds them)."""

    at: np.ndarray
    bit: np.ndarray
    bounds: np.ndarray

    def add(self, into: np.ndarray, k: int) -> None:
        lo, hi = self.bounds[k], self.bounds[k + 1]
        if hi > lo:
            into.reshape(-1)[self.at[lo:hi]] |= self.bit[lo:hi]


def _events(runs: int, turns: np.ndarray, run: np.ndarray, slot: np.ndarray, slots: int) -> _Events:
    """The turns ``turns[n]`` of runs ``run[n]`` joining at call ``slot[n]`` (of ``slots``),
    given run by run, each run's turns in order: after a stable sort by call, the turns of
    one word of one run joining at one call are neighbours."""
    small = slot.astype(np.int16) if slots < np.iinfo(np.int16).max else slot
    order = np.argsort(small, kind="stable")  # (a radix sort for 16-bit keys)
    turns, run, slot = turns[order], run[order], slot[order]
    at = (turns // turn_sets.WORD_BITS) * runs + run
    bit = np.left_shift(ONE, (turns % turn_sets.WORD_BITS).astype(np.uint64))
    first = np.flatnonzero((np.diff(slot, prepend=-1) != 0) | (np.diff(at, prepend=-1) != 0))
    return _Events(
        at=at[first],
        bit=np.bitwise_or.reduceat(bit, first) if first.size else bit,
        bounds=np.searchsorted(slot[first], np.arange(slots + 1)),
    )


@dataclass
class Runs:
    """What the kernel reads about each run: turns as sets, and sums over turns."""

    entering: _Events  # turns offered from call k on (k = 0 .. K + 1)
    facts_from: _Events  # turns standing `fact` from the visit before call k on
    #: Fact turns of runs whose iterations go back: ``(at, bit, run, since)``, rechecked
    #: at every call.
    facts_rechecked: tuple[np.ndarray, ...]
    offered: np.ndarray  # [W, R] turns offered by the run's last call
    enter_chars: np.ndarray  # [K + 2, R] chars entering before call k
    enter_turns: np.ndarray  # [K + 2, R]
    user: np.ndarray  # [W, R] turns whose first message is a user message
    plain: np.ndarray  # [W, R] turns that neither hold the request nor refuse
    request: np.ndarray  # [W, R] the request's turn (empty: none)
    after_request: np.ndarray  # [W, R] turns a pin may hold (the request's and after)
    tools: np.ndarray  # [W, B, R] turns holding a result of tool b
    safe: np.ndarray  # [B, R] tool b may be printed
    #: [R * (T + 1)] messages and chars of the turns before t, packed into one integer
    #: (``chars << MSG_BITS | msgs``; both columns apart when a run is too large for that).
    cum: tuple[np.ndarray, ...]
    #: [R, T] each turn's messages and chars, packed the same way.
    per_turn: tuple[np.ndarray, ...]
    turn_named: np.ndarray  # [R * T] safe tool names in the turn
    turn_wire: np.ndarray  # [R * T] chars of the names a notice for the turn alone prints


def _fact_events(
    arrays: TurnArrays, runs: int, calls_max: int
) -> tuple[_Events, tuple[np.ndarray, ...]]:
    """When each turn standing `fact` counts: from the first call whose iteration reached
    its own. Where a run's iterations never go back that call is found once, by search;
    a run whose iterations go back is rechecked call by call."""
    fact_runs, fact_turns = np.nonzero(arrays.pinnable & (arrays.fact_from < NEVER))
    since = arrays.fact_from[fact_runs, fact_turns].astype(np.int64)
    iterations = arrays.iterations.astype(np.int64)
    calls = arrays.calls.astype(np.int64)
    valid = np.arange(calls_max)[None, :] < calls[:, None]
    rising = (np.diff(iterations, axis=1) >= 0) | ~valid[:, 1:]
    steady = np.asarray(rising.all(1) & ((iterations >= 0) | ~valid).all(1))
    by_search = steady[fact_runs]
    call_run, call_at = np.nonzero(valid & steady[:, None])  # in run order, then call order
    key = call_run * (1 << 32) + iterations[call_run, call_at]
    start = np.searchsorted(call_run, np.arange(runs))
    wanted = fact_runs[by_search]
    first = np.searchsorted(key, wanted * (1 << 32) + since[by_search]) - start[wanted]
    found = _events(runs, fact_turns[by_search], wanted, first + 1, calls_max + 2)
    again = ~by_search
    turns = fact_turns[again]
    rechecked = (
        (turns // turn_sets.WORD_BITS) * runs + fact_runs[again],
        np.left_shift(ONE, (turns % turn_sets.WORD_BITS).astype(np.uint64)),
        fact_runs[again],
        since[again],
    )
    return found, rechecked


def runs_as_sets(arrays: TurnArrays) -> Runs:
    runs, turns = arrays.msgs.shape
    words = turn_sets.words_for(turns)
    calls_max = arrays.iterations.shape[1]
    slot_of = np.minimum(arrays.entered, calls_max + 1).astype(np.int64)
    slot = (np.arange(runs)[:, None] * (calls_max + 2) + slot_of).reshape(-1)
    size = runs * (calls_max + 2)

    def per_call(values: np.ndarray) -> np.ndarray:
        summed = np.bincount(slot, weights=values.reshape(-1), minlength=size)
        return np.rint(summed).astype(np.int64).reshape(runs, calls_max + 2).T.copy()

    run_of, turn_of = np.divmod(np.arange(runs * turns), turns)
    joins = slot_of.reshape(-1) <= calls_max  # (later: never in a window)
    entering = _events(
        runs, turn_of[joins], run_of[joins], slot_of.reshape(-1)[joins], calls_max + 2
    )
    facts_from, facts_rechecked = _fact_events(arrays, runs, calls_max)
    request = turn_sets.single(arrays.request, words)
    names = arrays.name_chars.shape[1]
    has_tool = arrays.name_order < ABSENT  # [R, T, B]
    tools = turn_sets.as_sets(
        has_tool.transpose(2, 0, 1).reshape(names * runs, turns), words
    ).reshape(words, names, runs)
    safe = np.ascontiguousarray(arrays.name_safe.T)
    cum_msgs = np.zeros((runs, turns + 1), dtype=np.int64)
    cum_chars = np.zeros((runs, turns + 1), dtype=np.int64)
    np.cumsum(arrays.msgs, axis=1, out=cum_msgs[:, 1:])
    np.cumsum(arrays.chars, axis=1, out=cum_chars[:, 1:])
    msgs, chars = arrays.msgs.astype(np.int64), arrays.chars
    if cum_msgs[:, -1].max(initial=0) < MSG_LIMIT and cum_chars[:, -1].max(initial=0) < CHAR_LIMIT:
        cum: tuple[np.ndarray, ...] = ((cum_chars << MSG_BITS | cum_msgs).reshape(-1),)
        per_turn: tuple[np.ndarray, ...] = (chars << MSG_BITS | msgs,)
    else:
        cum, per_turn = (cum_msgs.reshape(-1), cum_chars.reshape(-1)), (msgs, chars)
    turn_named, turn_wire = _turn_names(arrays, has_tool)
    return Runs(
        entering=entering,
        facts_from=facts_from,
        facts_rechecked=facts_rechecked,
        offered=turn_sets.as_sets(arrays.entered <= arrays.calls[:, None], words),
        enter_chars=per_call(arrays.chars.astype(np.float64)),
        enter_turns=per_call((arrays.msgs > 0).astype(np.float64)),
        user=turn_sets.as_sets(arrays.user_head, words),
        plain=~(request | turn_sets.as_sets(arrays.refuses, words)),
        request=request,
        after_request=np.where(
            turn_sets.nonempty(request), ~turn_sets.below(request), turn_sets.ALL
        ),
        tools=tools,
        safe=safe,
        cum=cum,
        per_turn=per_turn,
        turn_named=turn_named,
        turn_wire=turn_wire,
    )


def _turn_names(arrays: TurnArrays, has_tool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each turn (``[R * T]``), the safe tool names a notice for it alone may print and
    the length they take (:func:`_names_printed` of one turn), from its (turn, tool) pairs
    alone: a run offering hundreds of tools costs what its results name."""
    runs, turns, _ = arrays.name_order.shape
    run, turn, tool = np.nonzero(has_tool & arrays.name_safe[:, None, :])
    at = run * turns + turn  # ascending (row-major)
    length = arrays.name_chars[run, tool]
    named = np.bincount(at, minlength=runs * turns)
    shown = np.ones(at.size, dtype=bool)
    many = np.flatnonzero(named[at] > MAX_NAMED_TOOLS)
    if many.size:  # only there does the order of appearance pick the names printed
        came = many[np.lexsort((arrays.name_order[run[many], turn[many], tool[many]], at[many]))]
        rank = np.arange(came.size) - np.searchsorted(at[came], at[came])
        shown[many] = False
        shown[came[rank < MAX_NAMED_TOOLS]] = True
    wire = np.bincount(at[shown], weights=length[shown], minlength=runs * turns)
    wire = np.rint(wire).astype(np.int64) + 2 * np.maximum(
        np.minimum(named, MAX_NAMED_TOOLS) - 1, 0
    )
    return named, wire + ELLIPSIS_EXTRA * (named > MAX_NAMED_TOOLS)
