"""The window replay vectorized across runs: every run's window advances one call at a time.

A replayed window only ever loses whole turns of the run's own conversation and
gains at most one drop notice at its head, so its state is one bit per turn (a set
of turns, :mod:`~contextledger.window.turn_sets`: a word of 64 turns each, any number
of them) plus a notice slot. :func:`advance` keeps that
state for every (policy, run) in NumPy arrays over the runs laid out by
:mod:`~contextledger.window.turn_arrays`, and applies ``window_visit``'s rules
to all of them per call. It reproduces :func:`~contextledger.window.replay.replay`
visit for visit on the runs :func:`~contextledger.window.turn_arrays.turn_arrays`
accepts (its ``fallback`` names the others). Each engaged visit keeps what its
record's refusals need (the window's turns, the candidates, the pins), and
:mod:`~contextledger.window.visit_records` lists them as ``window_visit`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from contextledger.tables.schema import WHATIF_METRICS
from contextledger.window import turn_sets
from contextledger.window.kernel_runs import MSG_BITS, MSG_LIMIT, runs_as_sets
from contextledger.window.notice import MAX_NAMED_TOOLS
from contextledger.window.notice_length import (
    ELLIPSIS_EXTRA,
    KEPT_EXTRA,
    NAMES_EXTRA,
    PLAIN_FIXED,
    digits,
)
from contextledger.window.policies import Policy
from contextledger.window.turn_arrays import TurnArrays
from contextledger.window.turn_sets import ALL, ZERO

_BIG = np.iinfo(np.int64).max  # (ranks a tool that is not in a span after every one that is)

#: Per (policy, run) counts :func:`advance` returns, named as in ``schema.WHATIF_RUNS``.
KERNEL_METRICS = tuple(
    name for name in WHATIF_METRICS if name not in ("model_calls", "facts_declared")
)  # those two are the run's own, not a policy's: whatif adds them
#: What each engaged visit's record says, as ``KernelResult.visit_values`` names it
#: (``engaged`` is the dense view's own flag).
VISIT_FIELDS = (
    "engaged",
    "removed_message_count",
    "turns_before",
    "turns_after",
    "window_chars_before",
    "window_chars_after",
)
#: A refusal's reason, as :func:`refusal_rows` codes it.
REFUSAL_REASONS = (
    "current-request",
    "system-envelope",
    "unresolved-tool-call",
    "last-tool-result",
    "ledger-fact",
    "inside-keep-window",
    "replacement-not-smaller",
)
#: ``KernelResult.visit_flags`` bits: the window held a notice before the visit, the notice
#: sat after the request (else first), the span was refused whole.
VISIT_NOTICE, VISIT_SECOND, VISIT_REFUSED_WHOLE = 1, 2, 4


@dataclass
class KernelResult:
    """What :func:`advance` found: ``metrics[name][policy, run]``; for token budgets whether
    decisions used recorded or estimated counts; and every engaged visit (``visit_*``, one
    entry per visit, in call order), with what its record's refusals need."""

    policies: list[Policy]
    metrics: dict[str, np.ndarray]
    input_tokens_known: np.ndarray  # [P, R]
    budget_recorded: np.ndarray  # [P, R]
    budget_estimated: np.ndarray  # [P, R]
    answer_turns: np.ndarray  # [W, P, R] the set of turns served to the run's last call
    calls_max: int
    visit_policy: np.ndarray  # [V] index into ``policies``
    visit_run: np.ndarray  # [V]
    visit_call: np.ndarray  # [V] the call's position (0: the first call)
    visit_values: dict[str, np.ndarray]  # VISIT_FIELDS[1:] -> [V]
    visit_present: np.ndarray  # [W, V] the run's turns in the window before the visit
    visit_listed: np.ndarray  # [W, V] the candidates the record lists as refused
    visit_listed_ltr: np.ndarray  # [W, V] ... held by the recency pin
    visit_flags: np.ndarray  # [V] uint8: VISIT_NOTICE | VISIT_SECOND | VISIT_REFUSED_WHOLE
    visit_fact_held: np.ndarray  # [W, V] the turns the ledger-fact pin admitted
    visit_fact_yielded: np.ndarray  # [V] fact turns its ceiling turned away
    visit_fact_stand_down: np.ndarray  # [V] bool: the fact pin stood down
    visit_gone: np.ndarray  # [W, V] the run's turns that left

    @cached_property
    def visits(self) -> dict[str, np.ndarray]:
        """``visits[name][policy, call, run]``, dense (zero where the policy did not engage)."""
        runs = self.input_tokens_known.shape[1]
        shape = (len(self.policies), self.calls_max, runs)
        where = (self.visit_policy, self.visit_call, self.visit_run)
        dense = {"engaged": np.zeros(shape, dtype=np.int64)}
        dense["engaged"][where] = 1
        for name, values in self.visit_values.items():
            dense[name] = np.zeros(shape, dtype=np.int64)
            dense[name][where] = values
        return dense


@dataclass
class CallWindows:
    """The window every (policy, run) was served at one model call, as the kernel holds it:
    ``[notice] + turns`` (``second``: the notice sits after the window's first turn).
    Policies are in the kernel's order: row i is the given policy ``order[i]``."""

    call: int  # the call's position (0: the first call)
    order: list[int]
    active: np.ndarray  # [R] the run has this call
    served: np.ndarray  # [W, P, R] the run's turns in the window
    notice: np.ndarray  # [P, R] a drop notice is in it
    second: np.ndarray  # [P, R]
    notice_chars: np.ndarray  # [P, R]
    chars: np.ndarray  # [P, R] the window's content chars
    recorded: np.ndarray  # [P, R] the run sent this window and the provider counted it
    fresh: np.ndarray  # [P, R] the notice was written at this call's visit


#: What :func:`advance` calls with each call's :class:`CallWindows` (the arrays are the
#: kernel's own: read them, copy what is kept).
CallObserver = Callable[[CallWindows], None]


def _names_printed(
    holds: np.ndarray, lengths: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For spans given as ``[tool, span]`` arrays (``holds``: a safe name of the tool is in
    the span; ``lengths``: its name's length; ``keys``: its order of appearance), the names
    a notice may print and the length they take: the first four, then ``, …``."""
    named = holds.sum(0)
    wire = (holds * lengths).sum(0) + 2 * np.maximum(named - 1, 0)
    many = np.flatnonzero(named > MAX_NAMED_TOOLS)
    if many.size:
        ranked = np.where(holds[:, many], keys[:, many], _BIG)
        shown = np.argsort(ranked, axis=0, kind="stable")[:MAX_NAMED_TOOLS]
        picked = np.take_along_axis(lengths[:, many], shown, axis=0).sum(0)
        wire[many] = picked + 2 * (MAX_NAMED_TOOLS - 1) + ELLIPSIS_EXTRA
    return named, wire


class _Advance:
    """Every (policy, run) window, advanced together one call at a time.

    State arrays are ``[P, R]`` (sets of turns ``[W, P, R]``), policies in the order
    sliding, token budget, none: the visit reads the first ``engaging`` rows (a window
    under ``none`` never changes).
    """

    def __init__(
        self, arrays: TurnArrays, policies: Sequence[Policy], observe: CallObserver | None = None
    ) -> None:
        runs, turns = arrays.msgs.shape
        self.observe = observe
        kinds = ("sliding", "token_budget", "none")
        self.order = sorted(range(len(policies)), key=lambda p: kinds.index(policies[p].kind))
        ordered = [policies[p] for p in self.order]
        self.arrays = arrays
        self.policies = list(policies)
        self.runs, self.turns = runs, turns
        self.words = turn_sets.words_for(turns)
        self.calls_max = arrays.iterations.shape[1]
        self.sliding = sum(p.kind == "sliding" for p in ordered)
        self.engaging = sum(p.kind != "none" for p in ordered)
        self.narrow = turns <= turn_sets.FLOAT_BITS
        self.bits = runs_as_sets(arrays)

        def column(values: Sequence[float], dtype: type) -> np.ndarray:
            return np.asarray(values, dtype=dtype)[:, None]

        engaging = ordered[: self.engaging]
        self.keep = column([p.keep_recent_turns for p in engaging], np.int64)
        self.threshold = column([float(p.threshold or 0) for p in engaging], np.float64)
        self.strategy_chars = np.array([len(p.strategy or "") for p in engaging], dtype=np.int64)
        self.ltr_limit = np.array([p.last_tool_results for p in engaging], dtype=np.int64)
        self.ltr_rows = np.flatnonzero(self.ltr_limit > 0)
        self.fact_limit = np.array([p.ledger_facts for p in engaging], dtype=np.int64)
        self.r_of = np.tile(np.arange(runs), max(self.engaging, 1))
        self.e_of = np.repeat(np.arange(max(self.engaging, 1)), runs)
        self.ltr_ceiling = self.ltr_limit[self.e_of] if self.engaging else self.e_of
        self.fact_ceiling = self.fact_limit[self.e_of] if self.engaging else self.e_of
        self.iteration_digits = digits(arrays.iterations.T)
        self.known_rate = ~np.isnan(arrays.rate)
        self.rate0 = np.nan_to_num(arrays.rate)
        self.tokens = arrays.tokens.T.copy()
        self.recorded_full = arrays.recorded_full.T.copy()
        shape = (len(policies), runs)
        self.alive = np.full((self.words, *shape), ALL)
        self.entered = np.zeros((self.words, runs), dtype=np.uint64)  # by the current call
        self.facts = np.zeros((self.words, runs), dtype=np.uint64)  # standing `fact` now
        self.notice = np.zeros(shape, dtype=bool)
        self.second = np.zeros(shape, dtype=bool)
        self.notice_chars = np.zeros(shape, dtype=np.int64)
        self.fresh = np.zeros(shape, dtype=bool)  # the notice was written at this visit
        self.chars = np.zeros(shape, dtype=np.int64)
        self.window_turns = np.zeros(shape, dtype=np.int64)
        self.dropped = np.zeros(shape, dtype=bool)
        self.blocked_ltr = np.zeros((2, *shape), dtype=bool)  # the last two records: removed
        self.blocked_any = np.zeros((2, *shape), dtype=bool)  # nothing, named the pin(s)
        self.metric = {name: np.zeros(shape, dtype=np.int64) for name in KERNEL_METRICS}
        self.tokens_known = np.ones(shape, dtype=bool)
        self.budget_recorded = np.zeros(shape, dtype=bool)
        self.budget_estimated = np.zeros(shape, dtype=bool)
        self.recorded: list[tuple[np.ndarray, ...]] = []

    # ── sets ──

    def _highest(self, x: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
        """The highest ``ceiling[e * R + r]`` turns of each set of ``x`` (``[W, E, R]``)."""
        flat = x.reshape(self.words, -1)
        return turn_sets.highest(flat, ceiling, self.narrow).reshape(x.shape)

    def _span_sums(self, gone: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Messages and chars of the turns ``gone`` holds: the run's prefix sums from its
        lowest to its highest turn, less the turns between that left before."""
        flat = gone.reshape(self.words, -1)
        index = np.flatnonzero(turn_sets.nonempty(flat))
        totals = [np.zeros(flat.shape[1], dtype=np.int64) for _ in self.bits.cum]
        if index.size:
            span = flat.take(index, axis=1)
            runs = self.r_of.take(index)
            low, high = turn_sets.low_bit(span), turn_sets.high_bit(span, self.narrow)
            base = runs * (self.turns + 1)
            start = base + turn_sets.position(low)
            end = base + turn_sets.position(high) + 1
            sums = [cum.take(end) - cum.take(start) for cum in self.bits.cum]
            holes = turn_sets.span(low, high) & ~span
            inside = np.flatnonzero(turn_sets.nonempty(holes))
            if inside.size:
                left = turn_sets.sums(
                    list(self.bits.per_turn), runs[inside], holes.take(inside, axis=1)
                )
                for total, hole in zip(sums, left, strict=True):
                    total[inside] -= hole
            for total, values in zip(totals, sums, strict=True):
                total[index] = values
        if len(totals) == 1:  # packed
            msgs, chars = totals[0] & (MSG_LIMIT - 1), totals[0] >> MSG_BITS
        else:
            msgs, chars = totals
        return msgs.reshape(gone.shape[1:]), chars.reshape(gone.shape[1:])

    def _wire_chars(self, gone: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(safe tool names in each span of ``gone`` (``[W, N]``), length of the names a
        notice prints); a span of one turn reads them from the turn."""
        one = turn_sets.count(gone) <= 1
        turn = np.minimum(turn_sets.position(gone), self.turns - 1)
        at = runs * self.turns + turn
        some = turn_sets.nonempty(gone)
        named = self.bits.turn_named.take(at) * some
        wire = self.bits.turn_wire.take(at) * some
        several = np.flatnonzero(~one)
        if several.size:
            span, runs = gone.take(several, axis=1), runs[several]
            tools = self.bits.tools[:, :, runs] & span[:, None, :]
            holds = turn_sets.nonempty(tools) & self.bits.safe[:, runs]
            t = turn_sets.position(turn_sets.low_bit(tools))
            b = np.arange(tools.shape[1])[:, None]
            order = self.arrays.name_order[runs[None, :], np.minimum(t, self.turns - 1), b]
            named[several], wire[several] = _names_printed(
                holds, self.arrays.name_chars.T[:, runs], t * 128 + order.astype(np.int64)
            )
        return named, wire

    def _facts_at(self, k: int) -> None:
        """The turns standing `fact` at the visit before call k."""
        self.bits.facts_from.add(self.facts, k)
        at, bit, run, since = self.bits.facts_rechecked
        if at.size:  # a run whose iterations go back: its facts as of this call
            self.facts[:, np.unique(run)] = ZERO
            calls = self.arrays.calls.astype(np.int64)[run]
            reached = (k - 1 >= calls) | (
                self.arrays.iterations[run, min(k - 1, self.calls_max - 1)] >= since
            )
            np.add.at(self.facts.reshape(-1), at[reached], bit[reached])

    # ── the calls ──

    def run(self) -> KernelResult:
        bits = self.bits
        calls = self.arrays.calls
        sliding, budgets = slice(0, self.sliding), slice(self.sliding, self.engaging)
        served_before = np.zeros_like(self.chars[budgets])
        same_before = np.zeros(served_before.shape, dtype=bool)
        bits.entering.add(self.entered, 0)
        for k in range(1, self.calls_max + 1):
            bits.entering.add(self.entered, k)
            self._facts_at(k)
            active = calls >= k
            self.chars += bits.enter_chars[k]
            self.window_turns += bits.enter_turns[k]
            on = np.zeros((self.engaging, self.runs), dtype=bool)
            on[sliding] = active & (self.window_turns[sliding] > self.keep[sliding])
            if k >= 2 and self.engaging > self.sliding:
                tokens_before = self.tokens[k - 2]
                estimate = np.round(self.rate0 * served_before)
                measured = estimate + same_before * (tokens_before - estimate)
                budget = active & (tokens_before > 0) & (same_before | self.known_rate)
                self.budget_recorded[budgets] |= budget & same_before
                self.budget_estimated[budgets] |= budget & ~same_before
                on[budgets] = budget & (measured > self.threshold[budgets])
            self.fresh[:] = False
            if self.engaging and on.any():
                self._visit(k, on)
            reported = self.tokens[k - 1]
            same = self.recorded_full[k - 1] & ~self.dropped
            recorded = same & (reported > 0)
            if self.observe is not None:
                self.observe(
                    CallWindows(
                        k - 1,
                        self.order,
                        active,
                        self.alive & self.entered[:, None],
                        self.notice,
                        self.second,
                        self.notice_chars,
                        self.chars,
                        recorded,
                        self.fresh,
                    )
                )
            estimated = active & ~recorded
            self.metric["input_chars"] += self.chars * active
            self.metric["input_tokens_estimated_calls"] += estimated
            self.tokens_known &= ~(estimated & ~self.known_rate)
            guess = np.round(self.rate0 * self.chars).astype(np.int64)
            self.metric["input_tokens"] += recorded * reported + estimated * guess
            served_before = self.chars[budgets].copy()
            same_before = same[budgets]
        return self._result()

    def _visit(self, k: int, on: np.ndarray) -> None:
        """One window-stage visit, the rules of ``window_visit``, computed for every engaging
        (policy, run) at once; only those ``on`` (whose strategy engaged) change. Sets of
        turns are ``[W, E, R]``; a run's own sets enter as ``[W, 1, R]``."""
        bits, rows, words = self.bits, slice(0, self.engaging), self.words
        alive, notice, second = self.alive[:, rows], self.notice[rows], self.second[rows]
        turns_before, chars_before = self.window_turns[rows], self.chars[rows]
        notice_chars = self.notice_chars[rows]
        plain = bits.plain[:, None]
        present = alive & self.entered[:, None]
        candidates = np.maximum(turns_before - self.keep, 0)
        notice_removable = on & notice & (second < candidates)
        cand = turn_sets.lowest(present, (candidates - notice_removable) * on, self.turns)
        after_request = present & bits.after_request[:, None]
        # the recency pin: each tool's latest result after the request, one pin per turn
        ltr = (self.ltr_limit > 0)[:, None]
        stand_ltr = on & ltr & self.blocked_ltr[0, rows] & self.blocked_ltr[1, rows]
        contested = np.zeros(present.shape, dtype=np.uint64)
        pinning = self.ltr_rows
        if pinning.size:  # only the policies with a recency pin
            each = turn_sets.high_bit(
                after_request[:, None, pinning] & bits.tools[:, :, None, :], self.narrow
            )
            latest = np.bitwise_or.reduce(each, axis=1)
            contested[:, pinning] = (latest & cand[:, pinning]) * ~stand_ltr[pinning]
        held_ltr = self._highest(contested, self.ltr_ceiling)
        ltr_held = turn_sets.count(held_ltr)
        ltr_yielded = turn_sets.count(contested) - ltr_held
        # the fact pin: turns standing `fact`, newest first
        facts_on = (self.fact_limit > 0)[:, None] & self.arrays.armed
        stand_fact = on & facts_on & self.blocked_any[0, rows] & self.blocked_any[1, rows]
        facts = (after_request & self.facts[:, None] & cand) * (facts_on & ~stand_fact)
        held_fact = self._highest(facts, self.fact_ceiling)
        fact_held = turn_sets.count(held_fact)
        fact_yielded = turn_sets.count(facts) - fact_held
        refused = cand & (~plain | held_ltr | held_fact)
        # the span: from the oldest removable turn (or the notice) to the next refusal
        first_turn = turn_sets.low_bit(cand ^ refused) * ~notice_removable
        before_first_turn = turn_sets.below(first_turn)
        has_span = notice_removable | turn_sets.nonempty(first_turn)
        lowest_present = turn_sets.low_bit(present)
        rank = turn_sets.count(present & before_first_turn)  # turns before the span's first
        notice_first = notice & ~second
        at_0 = (notice_removable & ~second) | (~notice_removable & (rank == 0) & ~notice_first)
        at_1 = (notice_removable & second) | (
            ~notice_removable & (((rank == 1) & ~notice) | ((rank == 0) & notice_first))
        )
        lead = lowest_present * (notice_removable & second)
        above = present & ~(lead | ((first_turn | before_first_turn) * ~notice_removable))
        stop = turn_sets.low_bit(refused & above)
        gone = cand & (above | first_turn) & turn_sets.below(stop)
        span_msgs, span_chars = self._span_sums(gone)
        span_msgs += notice_removable
        span_chars += notice_chars * notice_removable
        request_first = (
            turn_sets.nonempty(bits.request)
            & turn_sets.equal(bits.request[:, None], lowest_present)
            & ~notice_first
        )
        kept = has_span & at_1 & request_first
        at_head = has_span & (at_0 | kept)
        inserted = np.zeros(on.shape, dtype=bool)
        new_chars = np.zeros(on.shape, dtype=np.int64)
        refused_whole = np.zeros(on.shape, dtype=bool)
        notice_gone = notice_removable.copy()
        heads = np.flatnonzero(at_head)
        if heads.size:  # the notice: rich if it fits, else plain, else none
            runs = self.r_of[heads]

            def flat(a: np.ndarray) -> np.ndarray:
                return a.reshape(-1)[heads]

            plain_chars = (
                PLAIN_FIXED
                + digits(flat(span_msgs))
                + self.iteration_digits[k - 1, runs]
                + self.strategy_chars[self.e_of[heads]]
                + flat(kept) * KEPT_EXTRA
            )
            span = gone.reshape(words, -1).take(heads, axis=1)
            named, wire = self._wire_chars(span, runs)
            rich = plain_chars + NAMES_EXTRA + wire
            fits = flat(span_chars)
            use_rich = (named > 0) & (rich < fits)
            use_plain = ~use_rich & (plain_chars < fits)
            written = use_rich | use_plain
            inserted.reshape(-1)[heads] = written
            new_chars.reshape(-1)[heads] = rich * use_rich + plain_chars * use_plain
            next_head = turn_sets.low_bit(above.reshape(words, -1).take(heads, axis=1) & ~span)
            head_is_user = turn_sets.nonempty(next_head & bits.user.take(runs, axis=1))
            whole = ~written & flat(at_0) & ~head_is_user
            if whole.any():  # replacement-not-smaller: nothing leaves
                back = heads[whole]
                gone.reshape(words, -1)[:, back] = ZERO
                for values in (notice_gone, span_msgs, span_chars):
                    values.reshape(-1)[back] = 0
                refused_whole.reshape(-1)[back] = True
        # what the record names, for the next visits' stand-down
        before_first = lead | (before_first_turn * ~notice_removable)
        listed = cand & (before_first | stop) & refused
        named_ltr = turn_sets.nonempty(listed & held_ltr & plain)
        named_fact = turn_sets.nonempty(listed & held_fact & ~held_ltr & plain)
        nothing = span_msgs == 0
        for blocked, named_now in (
            (self.blocked_ltr, named_ltr),
            (self.blocked_any, named_ltr | named_fact),
        ):
            last = blocked[0, rows].copy()
            blocked[0, rows] = (on & nothing & named_now) | (~on & last)
            blocked[1, rows] = (on & last) | (~on & blocked[1, rows])
        turns_after = turns_before - turn_sets.count(gone) - notice_gone + inserted
        chars_after = chars_before - span_chars + new_chars
        index = np.flatnonzero(on)

        def taken(values: np.ndarray, dtype: Any = None) -> np.ndarray:
            out = values.reshape(-1).take(index)
            return out if dtype is None else out.astype(dtype)

        def taken_set(values: np.ndarray) -> np.ndarray:
            return values.reshape(words, -1).take(index, axis=1)

        self.recorded.append(
            (
                index.astype(np.int64),
                np.full(index.size, k - 1, dtype=np.int32),
                taken(span_msgs, np.int32),
                taken(turns_before, np.int32),
                taken(turns_after, np.int32),
                taken(chars_before),
                taken(chars_after),
                taken_set(present),
                taken_set(listed),
                taken_set(listed & held_ltr),
                taken(notice, np.uint8)
                | taken(second, np.uint8) << 1
                | taken(refused_whole, np.uint8) << 2,
                taken_set(held_fact),
                taken(fact_yielded, np.int32),
                taken(stand_fact),
                taken_set(gone),
            )
        )
        # apply (every change below is zero for the states not ``on``)
        alive &= ~gone
        self.notice[rows] = inserted | (notice & ~notice_gone)
        self.fresh[rows] = inserted
        self.second[rows] = (inserted & kept) | (~inserted & second)
        self.notice_chars[rows] = new_chars + notice_chars * (~inserted & ~notice_gone)
        self.chars[rows] = chars_after
        self.window_turns[rows] = turns_after
        self.dropped[rows] |= ~nothing | inserted
        metric = self.metric
        metric["engaged_visits"][rows] += on
        metric["removed_messages"][rows] += span_msgs
        metric["pins_held_last_tool_result"][rows] += ltr_held
        metric["pins_yielded_last_tool_result"][rows] += ltr_yielded * (ltr_held > 0)
        metric["pins_held_ledger_fact"][rows] += fact_held
        metric["pins_yielded_ledger_fact"][rows] += fact_yielded * (fact_held > 0)
        metric["pin_stand_downs"][rows] += stand_ltr.astype(np.int64) + stand_fact

    def _result(self) -> KernelResult:
        arrays, bits, metric = self.arrays, self.bits, self.metric
        runs, turns, words = self.runs, self.turns, self.words
        offered_by = bits.offered
        # per turn: messages, chars, results, then results by final standing
        values = np.concatenate(
            [
                arrays.msgs[:, :, None],
                arrays.chars[:, :, None],
                arrays.final_counts.sum(2, keepdims=True),
                arrays.final_counts,
            ],
            axis=2,
            dtype=np.float64,
        )

        def sums(turns_of: np.ndarray) -> np.ndarray:  # exact: every sum is below 2**53
            held = turn_sets.unpack(turns_of, turns).astype(np.float64)[:, None, :]
            return np.rint(np.matmul(held, values)[:, 0, :]).astype(np.int64)

        entered = sums(offered_by)
        columns = ("fact", "open", "noise", "ruled_out", "undeclared")
        for p in range(self.alive.shape[1]):
            served = sums(self.alive[:, p] & offered_by)
            left = entered - served
            metric["answer_message_count"][p] = served[:, 0] + self.notice[p]
            metric["answer_content_chars"][p] = served[:, 1] + self.notice_chars[p] * self.notice[p]
            metric["answer_results_verbatim"][p] = served[:, 2]
            metric["answer_facts_verbatim"][p] = served[:, 3]
            metric["results_dropped"][p] = left[:, 2]
            for n, column in enumerate(columns):
                metric[f"results_dropped_{column}"][p] = left[:, 3 + n]
        back = np.argsort(self.order)  # given policy p is row back[p]
        if self.recorded:
            state, call, *fields = (
                np.concatenate(part, axis=-1) for part in zip(*self.recorded, strict=True)
            )
        else:
            no_sets = np.zeros((words, 0), dtype=np.uint64)
            state, call = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
            fields = [np.zeros(0, dtype=np.int64)] * 5 + [no_sets] * 3
            fields.append(np.zeros(0, dtype=np.uint8))
            fields += [no_sets, np.zeros(0, dtype=np.int32)]
            fields += [np.zeros(0, dtype=bool), no_sets]
        order = np.asarray(self.order, dtype=np.int64)
        return KernelResult(
            policies=self.policies,
            metrics={name: values[back] for name, values in metric.items()},
            input_tokens_known=self.tokens_known[back],
            budget_recorded=self.budget_recorded[back],
            budget_estimated=self.budget_estimated[back],
            answer_turns=(self.alive & offered_by[:, None])[:, back],
            calls_max=self.calls_max,
            visit_policy=order[state // runs],
            visit_run=state % runs,
            visit_call=call,
            visit_values=dict(zip(VISIT_FIELDS[1:], fields[:5], strict=True)),
            visit_present=fields[5],
            visit_listed=fields[6],
            visit_listed_ltr=fields[7],
            visit_flags=fields[8],
            visit_fact_held=fields[9],
            visit_fact_yielded=fields[10],
            visit_fact_stand_down=fields[11],
            visit_gone=fields[12],
        )


def advance(
    arrays: TurnArrays, policies: Sequence[Policy], observe: CallObserver | None = None
) -> KernelResult:
    """Replay every policy over every run, all (policy, run) windows advancing together;
    ``observe`` (if given) sees the windows served at each call (:class:`CallWindows`).

    Runs of any length: sets of turns take a word of 64 turns each, so a batch costs what
    its longest run needs (``whatif`` batches runs by length).

    >>> from contextledger.window.policies import parse_policy
    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> steps = [[Batch((Result("look", 300),))] for _ in range(6)]
    >>> from contextledger.window.turn_arrays import turn_arrays
    >>> arrays = turn_arrays([build_stream("r", [Said("user", "go")], steps)])
    >>> result = advance(arrays, [parse_policy("sliding:keep=2,last_tool_results=0")])
    >>> result.metrics["removed_messages"].tolist(), result.metrics["answer_message_count"].tolist()
    ([[6]], [[5]])
    """
    return _Advance(arrays, policies, observe).run()
