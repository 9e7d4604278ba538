"""What each engaged visit's record lists, read from the kernel's sets of turns.

:func:`~contextledger.window.kernel.advance` keeps, per engaged visit, the turns in the
window, the ones its record names and the ones that left; these turn them into the rows
``window_visit`` files: refusals in its order, the ledger-fact pins, the dropped results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextledger.window import turn_sets
from contextledger.window.kernel import (
    REFUSAL_REASONS,
    VISIT_NOTICE,
    VISIT_REFUSED_WHOLE,
    VISIT_SECOND,
    KernelResult,
)
from contextledger.window.turn_arrays import TurnArrays


@dataclass
class Refusals:
    """Every engaged visit's refusals, visits in ``KernelResult`` order: ``counts[v]`` rows
    for visit v, each a ``reason`` (an index into ``REFUSAL_REASONS``), ``turn_index`` and
    ``message_index``."""

    counts: np.ndarray
    reason: np.ndarray
    turn_index: np.ndarray
    message_index: np.ndarray


def refusal_rows(arrays: TurnArrays, result: KernelResult, chunk: int = 1 << 15) -> Refusals:
    """The refusals each engaged visit's record lists, as ``window_visit`` files them.

    ``replacement-not-smaller`` when a span was refused whole, then the candidates that
    refused (oldest first, up to the one that ended the span), then the turns inside the
    keep window; indexes are the window's before the visit, where a drop notice is a turn
    of one message.

    >>> from contextledger.window.kernel import advance
    >>> from contextledger.window.policies import parse_policy
    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> steps = [[Batch((Result("look", 300),))] for _ in range(3)]
    >>> from contextledger.window.turn_arrays import turn_arrays
    >>> arrays = turn_arrays([build_stream("r", [Said("user", "go")], steps)])
    >>> result = advance(arrays, [parse_policy("sliding:keep=1,last_tool_results=0")])
    >>> rows = refusal_rows(arrays, result)
    >>> rows.counts.tolist(), [REFUSAL_REASONS[n] for n in rows.reason[:2]]
    ([2, 2], ['current-request', 'inside-keep-window'])
    """
    turns = max(arrays.msgs.shape[1], 1)
    chunk = max(1, chunk * 64 // (64 * turn_sets.words_for(turns)))  # pages per chunk alike
    parts = [
        _refusal_chunk(arrays, result, slice(start, start + chunk))
        for start in range(0, max(result.visit_run.size, 1), chunk)
    ]  # in chunks: a VM pays for every page a large temporary touches
    return Refusals(
        *(
            np.concatenate([getattr(part, name) for part in parts])
            for name in Refusals.__dataclass_fields__
        )
    )


def _refusal_chunk(arrays: TurnArrays, result: KernelResult, visits: slice) -> Refusals:
    turns = arrays.msgs.shape[1]
    runs, present = result.visit_run[visits], result.visit_present[:, visits]
    words = present.shape[0]
    flags = result.visit_flags[visits]
    notice = (flags & VISIT_NOTICE) != 0
    second = (flags & VISIT_SECOND) != 0
    whole = (flags & VISIT_REFUSED_WHOLE) != 0
    keeps = np.array([p.keep_recent_turns for p in result.policies], dtype=np.int64)
    before_visit = result.visit_values["turns_before"][visits]
    candidates = np.maximum(before_visit - keeps[result.visit_policy[visits]], 0)
    notice_kept = notice & (second >= candidates)
    chosen = turn_sets.lowest(present, candidates - (notice & ~notice_kept), turns)
    listed_refused = result.visit_listed[:, visits]
    listed_ltr = result.visit_listed_ltr[:, visits]
    listed = listed_refused | (present & ~chosen)
    # every turn in the window before each visit, visit by visit, oldest first
    visit, turn = np.nonzero(turn_sets.unpack(present, turns))
    in_window = turn_sets.count(present)
    first = np.cumsum(in_window) - in_window
    msgs = arrays.msgs[runs[visit], turn].astype(np.int64)
    before = np.cumsum(msgs) - msgs
    # the ones the record lists
    shown = np.flatnonzero(turn_sets.contains(listed[:, visit], turn))
    of, turn, start_of = visit[shown], turn[shown], first[visit[shown]]
    rank = shown - start_of
    notice_before = notice[of] & (~second[of] | (rank >= 1))
    turn_index = rank + notice_before
    message_index = before[shown] - before[start_of] + notice_before
    system = np.zeros_like(arrays.refuses) if arrays.system is None else arrays.system
    reasons = (  # the order ``refusal_for`` asks in
        turn_sets.single(arrays.request, words),
        turn_sets.as_sets(system, words),
        turn_sets.as_sets(arrays.refuses & ~system, words),
    )
    run_of = runs[of]
    code = np.select(
        [turn_sets.contains(masks[:, run_of], turn) for masks in reasons]
        + [turn_sets.contains(listed_ltr[:, of], turn)],
        [0, 1, 2, 3],
        4,
    )
    code = np.where(turn_sets.contains(listed_refused[:, of], turn), code, 5)
    listed_count = turn_sets.count(listed)
    counts = whole + listed_count + notice_kept
    start = np.cumsum(counts) - counts
    notice_at = second.astype(np.int64)
    position = (
        start[of]
        + whole[of]
        + np.arange(shown.size)
        - (np.cumsum(listed_count) - listed_count)[of]
        + (notice_kept[of] & (turn_index > notice_at[of]))
    )
    total = int(counts.sum())
    reason = np.zeros(total, dtype=np.uint8)
    turn_out = np.zeros(total, dtype=np.int32)
    message_out = np.zeros(total, dtype=np.int32)
    reason[position] = code
    turn_out[position] = turn_index
    message_out[position] = message_index
    kept = np.flatnonzero(notice_kept)
    if kept.size:  # the notice, inside the keep window at the head
        lowest = turn_sets.low_bit(present[:, kept])
        after_first = second[kept] & turn_sets.nonempty(listed[:, kept] & lowest)
        head = np.minimum(turn_sets.position(lowest), turns - 1)
        at = start[kept] + whole[kept] + after_first
        reason[at] = REFUSAL_REASONS.index("inside-keep-window")
        turn_out[at] = second[kept]
        message_out[at] = arrays.msgs[runs[kept], head] * second[kept]
    refused = np.flatnonzero(whole)
    reason[start[refused]] = REFUSAL_REASONS.index("replacement-not-smaller")
    return Refusals(counts, reason, turn_out, message_out)


@dataclass
class FactPins:
    """Every engaged visit's ``ledgerFacts.pinned``, visits in ``KernelResult`` order:
    ``counts[v]`` pins for visit v, newest first, each its run's ``turn`` (the turn the
    kernel knows it by) and its ``turn_index`` in the window before the visit."""

    counts: np.ndarray
    turn: np.ndarray
    turn_index: np.ndarray


def fact_pin_rows(arrays: TurnArrays, result: KernelResult) -> FactPins:
    """The turns each visit's ledger-fact pin held, as ``window_visit`` names them: newest
    first, indexed in the window before the visit (a drop notice counts as a turn)."""
    turns = arrays.msgs.shape[1]
    held = result.visit_fact_held
    visit, turn = np.nonzero(turn_sets.unpack(held, turns))
    order = np.lexsort((-turn, visit))  # within a visit, newest first
    visit, turn = visit[order], turn[order]
    below = turn_sets.below(turn_sets.single(turn, held.shape[0]))
    rank = turn_sets.count(result.visit_present[:, visit] & below)
    flags = result.visit_flags[visit]
    notice, second = (flags & VISIT_NOTICE) != 0, (flags & VISIT_SECOND) != 0
    turn_index = rank + (notice & (~second | (rank >= 1)))
    counts = np.bincount(visit, minlength=held.shape[1]).astype(np.int64)
    return FactPins(counts, turn.astype(np.int64), turn_index.astype(np.int64))


def dropped_results(arrays: TurnArrays, result: KernelResult) -> tuple[np.ndarray, np.ndarray]:
    """``(visit, result)`` for every tool result that left at a visit of an armed run, visits
    in ``KernelResult`` order and results in stream order (``result`` indexes
    ``arrays.result_ids``): what the record's ``droppedStandings`` lists. Only the turns
    that left are visited, each giving its results (a run's are in turn order)."""
    turns = max(arrays.msgs.shape[1], 1)
    armed = arrays.armed[result.visit_run] & turn_sets.nonempty(result.visit_gone)
    visits = np.flatnonzero(armed)
    at, turn = np.nonzero(turn_sets.unpack(result.visit_gone[:, visits], turns))
    visit = visits[at]  # each (visit, turn that left), turns oldest first
    key = arrays.result_run * turns + arrays.result_turn  # ascending: runs, then turns
    wanted = result.visit_run[visit] * turns + turn
    first = np.searchsorted(key, wanted, side="left")
    sizes = np.searchsorted(key, wanted, side="right") - first
    offset = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.repeat(visit, sizes), np.repeat(first, sizes) + offset
