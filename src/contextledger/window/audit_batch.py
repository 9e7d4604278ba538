"""The audit of any policy's served windows, a batch of runs at once, as arrays of message ids.

:func:`~contextledger.window.audit.audit_table_exact` measures each window in Python; here
each window a replay serves is laid out flat as the ids of its messages (one id per message
object of the run, a policy's rewrites included), so its chars are segment sums, the prefix
it shares with the previous call's window an element-wise comparison of the two, its wire
problems rules over per-message properties and the facts at the answer membership in the
last window, for every window of the batch at once. The stateless framework policies'
windows come as ids for the whole batch (:mod:`~contextledger.window.framework_ranges`);
the others are replayed one run at a time (:func:`~contextledger.window.audit.served_windows`).
The rows are the exact audit's, column for column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from contextledger.read.messages import RunMessages
from contextledger.window import segments
from contextledger.window.audit import (
    AUDIT_SCHEMA,
    WIRE_COLUMNS,
    WIRE_KINDS,
    AnyPolicy,
    CachePrices,
    RunFacts,
    describe_message,
    recorded_cache,
    served_windows,
    serving_alike,
)
from contextledger.window.audit_layout import Layout
from contextledger.window.cache_costs import priced_totals
from contextledger.window.framework_ranges import BatchHistories, ranged, windows
from contextledger.window.frameworks._common import tokens_at_rate
from contextledger.window.frameworks._history import run_history
from contextledger.window.frameworks.anthropic import AnthropicClearToolUses
from contextledger.window.frameworks.autogen import AutoGenHeadTail
from contextledger.window.frameworks.langchain import LangChainClearToolUses
from contextledger.window.frameworks.mastra import MastraToolCallFilter
from contextledger.window.standings import timelines


def audit_served(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    prices: CachePrices | None = None,
) -> pl.DataFrame:
    """:func:`~contextledger.window.audit.audit_table_exact`'s rows (runs in order, policies
    as given), each run's windows replayed as there and audited as arrays over the batch.

    >>> from contextledger.jobs.whatif import read_inputs
    >>> from contextledger.jobs.compare import parse_compared
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> audited = audit_served(streams, parse_compared(["autogen_buffered:buffer_size=4"]))
    >>> audited.select("policy", "wire_problems", "cache_invalidations").row(0)
    ('autogen_buffered:buffer_size=4', 22, 11)
    """
    prices = prices or CachePrices()
    if not streams or not policies:
        return pl.DataFrame(schema=AUDIT_SCHEMA)
    laid = Layout()
    by_run = timelines(standings_rows)
    # the policies laid out for the whole batch at once: a replay each, numbered after
    ranges = list(dict.fromkeys(p for _, p in policies if ranged(p)))
    head_tails = [p for p in ranges if isinstance(p, AutoGenHeadTail)]
    clears = [p for p in ranges if isinstance(p, (AnthropicClearToolUses, LangChainClearToolUses))]
    filtered = any(isinstance(p, MastraToolCallFilter) for p in ranges)
    histories = BatchHistories()
    which: list[int] = []  # per output row, its replay (-1 - n: the nth of ``ranges``)
    for stream in streams:
        timeline = by_run.get(stream.run_id)
        laid.start_run(stream, RunFacts.of(stream, timeline))
        tokens_of = tokens_at_rate(laid.facts[-1].rate)
        if ranges:
            run = run_history(stream, tokens_of)
            histories.add_run(run, laid.message_id, laid.rewrite_id, head_tails, clears, filtered)
        replayed: dict[AnyPolicy, int] = {
            p: -1 - n for n, p in enumerate(ranges) if histories.laid(p)
        }
        for _, policy in policies:
            alike = serving_alike(policy, armed=timeline is not None)
            at = replayed.get(alike)
            if at is None:
                standings = timeline.at if timeline else None
                at = replayed[alike] = laid.add_replay(
                    served_windows(stream, policy, standings, tokens_of)
                )
            which.append(at)
        laid.end_run()
    replays = []  # per policy of ``ranges``, its replay of each run
    if ranges:
        whole = histories.whole()
        laid_out = (*whole, laid.add_windows(*whole))
    for policy in ranges:
        runs = histories.laid_runs(policy)
        served = windows(policy, histories)
        replays.append(laid.add_ranges(served, laid_out, histories.calls_of_run, runs))
    numbered = np.asarray(which, dtype=np.int64)
    if ranges:  # the replays laid out together: the nth policy's of the run
        run_of = np.repeat(np.arange(len(streams)), len(policies))
        later = numbered < 0
        numbered[later] = np.stack(replays)[-1 - numbered[later], run_of[later]]
    rows = _Measured.of(laid).rows(laid, prices)
    out = rows[numbered]
    labels = [label for _ in streams for label, _ in policies]
    return out.with_columns(policy=pl.Series(labels, dtype=pl.String))


# ── the measures, every window at once ─────────────────────────────


@dataclass
class _Measured:
    """Per call's window (row): tokens and their source, cached tokens, a broken prefix,
    wire problems by kind and the first; per replay: the answer's counts."""

    tokens: np.ndarray
    known: np.ndarray
    recorded: np.ndarray
    cached: np.ndarray
    invalidated: np.ndarray
    wire: np.ndarray  # [4, rows]
    first_kind: np.ndarray  # -1: no problem
    first_message: np.ndarray
    answer: np.ndarray  # [5, replays]: verbatim, facts, then each edit's count

    @classmethod
    def of(cls, laid: Layout) -> _Measured:
        message = laid.columns()
        flat = np.asarray(laid.flat, dtype=np.int64)
        sizes = np.asarray(laid.lengths, dtype=np.int64)
        window_starts = np.cumsum(sizes) - sizes
        window = np.asarray(laid.window_of_row, dtype=np.int64)
        lengths, starts = sizes[window], window_starts[window]
        # chars of every prefix of the laid-out windows: a window's, and the part it shares
        running = np.concatenate([[0], np.cumsum(message["chars"][flat], dtype=np.int64)])
        chars = running[starts + lengths] - running[starts]
        replay_of_row = np.asarray(laid.replay_of_row, dtype=np.int64)
        call_of_row = np.asarray(laid.call_of_row, dtype=np.int64)
        run_of_row = np.asarray(laid.run_of_replay, dtype=np.int64)[replay_of_row]
        at_call = np.asarray(laid.first_call, dtype=np.int64)[run_of_row] + call_of_row

        # the provider's count where the call was served the window the run sent
        sent_lengths = np.asarray(laid.sent_lengths, dtype=np.int64)
        sent_starts = (np.cumsum(sent_lengths) - sent_lengths)[at_call]
        sent_lengths = sent_lengths[at_call]
        input_tokens = np.asarray(laid.input_tokens, dtype=np.int64)[at_call]
        recorded = (input_tokens > 0) & (sent_lengths == lengths)
        both = np.concatenate([flat, np.asarray(laid.sent_flat, dtype=np.int64)])
        alike = np.flatnonzero(recorded)
        differ = segments.pairs_differ(
            message["sent_key"][both],
            starts[alike],
            sent_starts[alike] + len(flat),
            lengths[alike],
        )
        recorded[alike] = differ == lengths[alike]
        rates = [np.nan if f.rate is None else f.rate for f in laid.facts]
        rate = np.asarray(rates, dtype=np.float64)[run_of_row]
        has_rate = ~np.isnan(rate)
        rate = np.nan_to_num(rate)
        tokens = np.where(recorded, input_tokens, np.round(rate * chars).astype(np.int64))
        known = recorded | has_rate

        # the prefix shared with the previous call's window of the same replay
        has_previous = call_of_row > 0
        previous = np.roll(window, 1)
        previous_lengths = np.where(has_previous, sizes[previous], 0)
        shared = np.minimum(lengths, previous_lengths)
        other = np.flatnonzero(has_previous & (previous != window))
        shared[other] = segments.pairs_differ(
            message["wire"][flat], starts[other], window_starts[previous[other]], shared[other]
        )
        shared_chars = running[starts + shared] - running[starts]
        invalidated = has_previous & (shared < previous_lengths)
        shared_tokens = np.round(rate * shared_chars).astype(np.int64)
        cached = np.where(has_rate, np.minimum(tokens, shared_tokens), 0)

        request = np.asarray(laid.request, dtype=np.int64)[at_call]
        wire, first_kind, first_message = _wire(laid, message, flat, sizes, window, request)
        last = np.ones(len(window), dtype=bool)
        last[:-1] = replay_of_row[1:] != replay_of_row[:-1]
        answer = np.zeros((5, len(laid.run_of_replay)), dtype=np.int64)
        answer[:, replay_of_row[last]] = _answers(message, flat, sizes)[:, window[last]]
        return cls(
            tokens, known, recorded, cached, invalidated, wire, first_kind, first_message, answer
        )

    def rows(self, laid: Layout, prices: CachePrices) -> pl.DataFrame:
        """One :data:`AUDIT_SCHEMA` row per replay (its ``policy`` left to the caller)."""
        replay_of_row = np.asarray(laid.replay_of_row, dtype=np.int64)
        replays = len(laid.run_of_replay)

        def per_replay(values: np.ndarray) -> np.ndarray:
            return np.bincount(replay_of_row, weights=values, minlength=replays).astype(np.int64)

        wire = np.stack([per_replay(kind) for kind in self.wire])
        rejected = per_replay((self.first_kind >= 0).astype(np.int64))
        unknown = per_replay((~self.known).astype(np.int64)) > 0
        tokens, cached = per_replay(self.tokens), per_replay(self.cached)
        from_recorded = per_replay(self.recorded.astype(np.int64)) > 0
        from_estimate = per_replay((~self.recorded).astype(np.int64)) > 0
        calls = np.bincount(replay_of_row, minlength=replays)
        runs = laid.run_of_replay
        out: dict[str, Any] = {
            "run_id": [laid.streams[r].run_id for r in runs],
            "policy": [None] * replays,
            "model_calls": calls,
            "wire_problems": wire.sum(0),
            **{WIRE_COLUMNS[kind]: wire[k] for k, kind in enumerate(WIRE_KINDS)},
            "calls_rejected": rejected,
        }
        first_row = segments.first_per(
            replay_of_row, self.first_kind >= 0, np.arange(len(replay_of_row)), replays
        )
        firsts: list[tuple[Any, Any, Any]] = []
        for replay, row in enumerate(first_row.tolist()):
            if row < 0:
                firsts.append((None, None, None))
                continue
            stream = laid.streams[runs[replay]]
            call = stream.calls[laid.call_of_row[row]]
            message = laid.message(int(self.first_message[row]))
            kind = WIRE_KINDS[int(self.first_kind[row])]
            firsts.append((call.ordinal, kind, describe_message(message)))
        for n, name in enumerate(("call", "kind", "message")):
            out[f"first_problem_{name}"] = [first[n] for first in firsts]
        out["facts_declared"] = [laid.facts[r].facts_declared for r in runs]
        out["facts_at_answer"] = self.answer[1]
        out["answer_results_verbatim"] = self.answer[0]
        out["answer_placeholders"] = self.answer[2]
        out["answer_previews"] = self.answer[3]
        out["answer_summaries"] = self.answer[4]
        out["tokens_per_char"] = [laid.facts[r].rate for r in runs]
        names = [None, "recorded", "estimated", "recorded+estimated"]
        source = np.where(from_recorded & from_estimate, 3, np.where(from_recorded, 1, 2))
        source *= ~unknown & (calls > 0)
        out["input_tokens"] = tokens
        out["input_tokens_from"] = [names[code] for code in source.tolist()]
        out["cached_tokens"] = cached
        caches = [recorded_cache(stream) for stream in laid.streams]
        out["recorded_cache_read_tokens"] = [caches[r][0] for r in runs]
        out["recorded_cache_write_tokens"] = [caches[r][1] for r in runs]
        out["cache_invalidations"] = per_replay(self.invalidated.astype(np.int64))
        costs = priced_totals(tokens.tolist(), cached.tolist(), prices)
        out["cost_without_cache"] = [bare for bare, _ in costs]
        out["cost_with_cache"] = [cheap for _, cheap in costs]
        blank = ["input_tokens", "cached_tokens", "cost_without_cache", "cost_with_cache"]
        return pl.DataFrame(out, schema=AUDIT_SCHEMA).with_columns(
            pl.when(pl.Series(unknown)).then(None).otherwise(pl.col(name)).alias(name)
            for name in blank
        )


def _wire(
    laid: Layout,
    message: Mapping[str, np.ndarray],
    flat: np.ndarray,
    sizes: np.ndarray,
    window: np.ndarray,
    request: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~contextledger.window.audit.wire_violations` of every row's window
    (``window``: its number; ``request``: the id of the call's current request, -1 for
    none): ``([4, rows]`` counts by kind, the first problem's kind, its message's id)."""
    windows, rows = len(sizes), len(window)
    span, offset = segments.spans(sizes)
    role = message["role"][flat]
    # head-not-user: the first message that is not a system message is not the user's
    head = segments.first_per(span, role != 1, np.arange(len(flat)), windows)
    head_bad = np.zeros(windows, dtype=bool)
    head_bad[head >= 0] = role[head[head >= 0]] != 2
    head_message = np.full(windows, -1, dtype=np.int64)
    head_message[head_bad] = flat[head[head_bad]]

    # the calls each message makes, and the results, by (window, call id), in window order
    counts = message["call_count"]
    call_offsets = np.concatenate([[0], np.cumsum(counts)])
    calling, within = segments.spans(counts[flat])
    asked = np.asarray(laid.call_ids, dtype=np.int64)[call_offsets[flat[calling]] + within]
    results = np.flatnonzero(role == 3)
    ids = max(len(laid.call_numbers), 1)
    key = np.concatenate(
        [span[calling] * ids + asked, span[results] * ids + message["answers"][flat[results]]]
    )
    at = np.concatenate([offset[calling], offset[results]])
    is_ask = np.concatenate(
        [np.ones(len(calling), dtype=np.int64), np.zeros(len(results), dtype=np.int64)]
    )
    answers = np.concatenate(
        [np.zeros(len(calling), dtype=np.int64), message["answers_given"][flat[results]]]
    )
    # a result is checked before its own message's calls count: at one offset, results first
    order = segments.order(key, at, is_ask)
    group = np.zeros(len(order), dtype=np.int64)
    firsts = segments.firsts(key[order])
    group[firsts] = 1
    group = np.cumsum(group) - 1
    asks_so_far = np.cumsum(is_ask[order])
    asks_before = asks_so_far - is_ask[order]
    asks_before -= (asks_so_far - is_ask[order])[firsts][group]
    answering = np.bincount(group, weights=answers[order], minlength=len(firsts))[group] > 0
    problem = np.zeros(len(order), dtype=bool)
    # orphan-result: no earlier message of the window makes its call
    problem[order] = np.where(is_ask[order] == 1, ~answering, asks_before == 0)
    orphan = problem[len(calling) :]
    unanswered = problem[: len(calling)]

    head_count = head_bad.astype(np.int64)
    orphans = np.bincount(span[results[orphan]], minlength=windows)
    unanswered_count = np.bincount(span[calling[unanswered]], minlength=windows)
    first_orphan = segments.first_per(span[results], orphan, flat[results], windows)
    first_unanswered = segments.first_per(span[calling], unanswered, flat[calling], windows)

    # request-dropped: the run's current request is not in the window
    held = np.sort(span * len(message["role"]) + flat, kind="stable")  # (nearly sorted)
    dropped = (request >= 0) & ~segments.member(window * len(message["role"]) + request, held)

    wire = np.stack([head_count[window], orphans[window], unanswered_count[window], dropped])
    # the first problem _violations yields: the head, then results, calls, the request
    first_kind = np.full(rows, -1, dtype=np.int64)
    first_message = np.full(rows, -1, dtype=np.int64)
    found = [
        (head_bad[window], head_message[window]),
        (first_orphan[window] >= 0, first_orphan[window]),
        (first_unanswered[window] >= 0, first_unanswered[window]),
        (dropped, request),
    ]
    for kind in reversed(range(len(found))):
        problem_here, named = found[kind]
        first_kind = np.where(problem_here, kind, first_kind)
        first_message = np.where(problem_here, named, first_message)
    return wire.astype(np.int64), first_kind, first_message


def _answers(message: Mapping[str, np.ndarray], flat: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per window: results kept verbatim, the facts among them, and the messages each edit
    rewrote (``[5, windows]``)."""
    edit = message["edit"][flat]
    counted = [message["verbatim"][flat], message["fact"][flat]]
    counted += [(edit == code).astype(np.int64) for code in (1, 2, 3)]
    return np.stack([segments.sums(values, sizes) for values in counted])
