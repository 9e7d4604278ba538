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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from contextledger.read.jsjson import utf16_length
from contextledger.read.messages import Message, RunMessages
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
from contextledger.window.cache_costs import priced_totals, rewritten_wire_key, wire_key
from contextledger.window.framework_ranges import BatchHistories, ranged, windows
from contextledger.window.frameworks._common import rewritten, tokens_at_rate
from contextledger.window.frameworks._history import run_history
from contextledger.window.frameworks.anthropic import AnthropicClearToolUses
from contextledger.window.frameworks.autogen import AutoGenHeadTail
from contextledger.window.frameworks.langchain import LangChainClearToolUses
from contextledger.window.frameworks.mastra import MastraToolCallFilter, _calls_removed
from contextledger.window.refusals import is_result
from contextledger.window.replay import window_key
from contextledger.window.standings import timelines

_EDITS = {None: 0, "placeholder": 1, "preview": 2, "summary": 3}


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
    laid = _Layout()
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


# ── the batch laid out ─────────────────────────────────────────────


#: Per message, in :attr:`_Layout.properties`: its chars, role (0 other, 1 system, 2 user,
#: 3 tool), the call id it answers, whether that id is given, whether it is a result kept
#: verbatim, a fact among those, its edit, what a cache compares (``wire_key``) and what
#: ``same_window`` compares (``window_key``), interned, and how many calls it makes.
_PROPERTIES = (
    "chars",
    "role",
    "answers",
    "answers_given",
    "verbatim",
    "fact",
    "edit",
    "wire",
    "sent_key",
    "call_count",
)
_ROLES = {"system": 1, "user": 2, "tool": 3}


@dataclass
class _Layout:
    """Every message object met in the batch's windows (an id each) and its properties;
    each call's window as a span of those ids; per call of a run, the window the run sent
    there, its current request and the tokens the provider counted."""

    facts: list[RunFacts] = field(default_factory=list)
    streams: list[RunMessages] = field(default_factory=list)
    messages: list[Message | None] = field(default_factory=list)  # None: a rewrite unbuilt
    properties: list[int] = field(default_factory=list)  # _PROPERTIES of each, in a row
    call_ids: list[int] = field(default_factory=list)  # the calls each message makes, flat
    # per distinct window of a run (by the list served): its message ids, laid end to end
    flat: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    # per call's window (a row)
    window_of_row: list[int] = field(default_factory=list)
    replay_of_row: list[int] = field(default_factory=list)
    call_of_row: list[int] = field(default_factory=list)
    # per replay
    run_of_replay: list[int] = field(default_factory=list)
    # per run, and per call of the batch's runs, in order
    first_call: list[int] = field(default_factory=list)
    sent_flat: list[int] = field(default_factory=list)
    sent_lengths: list[int] = field(default_factory=list)
    request: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    # call ids interned; the run's keys interned, message ids by object, windows by list
    call_numbers: dict[str | None, int] = field(default_factory=dict)
    _keys: dict[Any, int] = field(default_factory=dict)
    _ids: dict[Message, int] = field(default_factory=dict)  # (a message hashes by identity)
    _lists: dict[int, tuple[Sequence[Message], int]] = field(default_factory=dict)
    _rewrites: dict[tuple[Message, str, str | None, bool], int] = field(default_factory=dict)
    _unbuilt: dict[int, tuple[Message, str, str | None, bool]] = field(default_factory=dict)

    def start_run(self, stream: RunMessages, facts: RunFacts) -> None:
        self.streams.append(stream)
        self.facts.append(facts)
        self._ids, self._lists, self._keys, self._rewrites = {}, {}, {}, {}
        numbered = [self.message_id(message) for message in stream.messages]
        self.first_call.append(len(self.input_tokens))
        for call, request in zip(stream.calls, facts.requests, strict=True):
            # the window the call was sent: stream messages, so ids by their index
            self.sent_flat += map(numbered.__getitem__, call.window_served)
            self.sent_lengths.append(len(call.window_served))
            self.request.append(-1 if request is None else self.message_id(request))
            self.input_tokens.append(call.input_tokens)

    def end_run(self) -> None:
        self._ids, self._lists, self._keys, self._rewrites = {}, {}, {}, {}

    def add_replay(self, served: Sequence[Sequence[Message]]) -> int:
        """Lay out one replay's windows (one per call of the current run); its number."""
        run = len(self.streams) - 1
        stream = self.streams[run]
        if len(served) != len(stream.calls):
            msg = f"{stream.run_id}: {len(served)} windows for {len(stream.calls)} model calls"
            raise ValueError(msg)
        replay = len(self.run_of_replay)
        self.run_of_replay.append(run)
        self.window_of_row += map(self._window, served)
        self.replay_of_row += [replay] * len(served)
        self.call_of_row += range(len(served))
        return replay

    def add_windows(self, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Lay out windows (``lengths[n]`` ids of ``flat`` each, no replay's yet); their
        numbers."""
        window = len(self.lengths)
        self.flat += flat.tolist()
        self.lengths += lengths.tolist()
        return np.arange(window, window + len(lengths))

    def add_ranges(
        self,
        served: tuple[np.ndarray, np.ndarray],
        histories: tuple[np.ndarray, np.ndarray, np.ndarray],
        calls: Sequence[int],
        runs: np.ndarray,
    ) -> np.ndarray:
        """Lay out one replay of each run of the batch where ``runs`` holds (once every run
        is started), a window each call (``served``: every run's, ids laid end to end, and
        their lengths), ``calls`` a run; the replay of each run (-1: not laid out). A
        window that is the call's whole history, id for id, is the history's
        (``histories``: as ``served``, and their numbers from :meth:`add_windows`): laid
        out once for every policy that serves it, as the replays' shared lists are."""
        flat, lengths = served
        history_flat, history_lengths, history_windows = histories
        counts = np.asarray(calls, dtype=np.int64)
        taken = np.repeat(runs, counts)  # per row
        flat, lengths = flat[np.repeat(taken, lengths)], lengths[taken]
        history_flat = history_flat[np.repeat(taken, history_lengths)]
        history_lengths, history_windows = history_lengths[taken], history_windows[taken]
        starts = np.cumsum(lengths) - lengths
        history_starts = np.cumsum(history_lengths) - history_lengths
        alike = np.flatnonzero(lengths == history_lengths)
        differ = _pairs_differ(
            np.concatenate([flat, history_flat]),
            starts[alike],
            history_starts[alike] + len(flat),
            lengths[alike],
        )
        whole = np.zeros(len(lengths), dtype=bool)
        whole[alike] = differ == lengths[alike]
        own = self.add_windows(flat[np.repeat(~whole, lengths)], lengths[~whole])
        window = np.empty(len(lengths), dtype=np.int64)
        window[whole], window[~whole] = history_windows[whole], own
        laid = np.flatnonzero(runs)
        replay = np.full(len(runs), -1, dtype=np.int64)
        replay[laid] = np.arange(len(laid)) + len(self.run_of_replay)
        self.run_of_replay += laid.tolist()
        self.window_of_row += window.tolist()
        self.replay_of_row += np.repeat(replay[laid], counts[laid]).tolist()
        self.call_of_row += _spans(counts[laid])[1].tolist()
        return replay

    def _window(self, window: Sequence[Message]) -> int:
        """The number of ``window`` (a list several calls or policies may serve)."""
        held = self._lists.get(id(window))
        if held is not None:
            return held[1]
        try:
            ids = list(map(self._ids.__getitem__, window))
        except KeyError:  # messages a policy wrote: numbered as they are met
            known, number_of = self._ids.get, self.message_id
            ids = [n if (n := known(m)) is not None else number_of(m) for m in window]
        number = len(self.lengths)
        self.flat += ids
        self.lengths.append(len(ids))
        self._lists[id(window)] = (window, number)  # the window held: its id stays its own
        return number

    def message_id(self, message: Message) -> int:
        """The id of ``message`` (a message of the current run's windows), numbered when
        first met."""
        found = self._ids.get(message)
        if found is not None:
            return found
        number = self._ids[message] = len(self.messages)
        self.messages.append(message)
        call_id = message.tool_call_id
        verbatim = bool(call_id) and is_result(message) and not message.edit
        fact = verbatim and self.facts[-1].final.get(call_id or "") == "fact"
        keys = self._keys
        wire = keys.setdefault(wire_key(message), len(keys))
        sent = keys.setdefault(("sent", window_key(message)), len(keys))
        calls = self.call_numbers
        self.properties += (
            message.chars,
            _ROLES.get(message.role, 0),
            calls.setdefault(call_id, len(calls)),
            bool(call_id),
            verbatim,
            fact,
            _EDITS.get(message.edit, 0),
            wire,
            sent,
            len(message.tool_calls),
        )
        for call in message.tool_calls:
            self.call_ids.append(calls.setdefault(call.id, len(calls)))
        return number

    def rewrite_id(
        self, message: Message, content: str, edit: str | None, *, calls_kept: bool = True
    ) -> int:
        """The id of ``rewritten(message, content, edit)`` (a result cleared, or a notice
        from a template), or with ``calls_kept`` False of ``message`` without its calls
        (Mastra's filter: ``content`` its own), its properties those of ``message`` with
        the content, edit and calls replaced; the copy is built only if a row names it
        (:meth:`message`)."""
        key = (message, content, edit, calls_kept)
        found = self._rewrites.get(key)
        if found is not None:
            return found
        base = self.message_id(message) * len(_PROPERTIES)
        row = self.properties[base : base + len(_PROPERTIES)]
        number = self._rewrites[key] = len(self.messages)
        self.messages.append(None)
        self._unbuilt[number] = key
        # a copy keeps the original's stored length unless its content is new (rewritten)
        chars = utf16_length(content) if calls_kept else message.chars
        keys = self._keys
        tool_calls = message.tool_calls if calls_kept else ()
        row[0] = chars
        verbatim = row[3] and is_result(message) and not edit  # (row[3]: a call id given)
        row[4] = verbatim
        row[5] = verbatim and self.facts[-1].final.get(message.tool_call_id or "") == "fact"
        row[6] = _EDITS.get(edit, 0)
        wire = rewritten_wire_key(message, content, chars, edit, tool_calls)
        row[7] = keys.setdefault(wire, len(keys))
        if message.window_authored:  # window_key: an authored message is its text
            row[8] = keys.setdefault(("sent", ("authored", content)), len(keys))
        row[9] = len(tool_calls)
        self.properties += row
        calls = self.call_numbers
        for call in tool_calls:
            self.call_ids.append(calls.setdefault(call.id, len(calls)))
        return number

    def message(self, number: int) -> Message:
        """The message of id ``number`` (a rewrite built now: the same copy the policy's
        own replay makes)."""
        found = self.messages[number]
        if found is None:
            message, content, edit, calls_kept = self._unbuilt.pop(number)
            found = self.messages[number] = (
                rewritten(message, content, edit)
                if calls_kept
                else _calls_removed(message, frozenset(call.id for call in message.tool_calls))
            )
        return found

    def columns(self) -> dict[str, np.ndarray]:
        """:data:`_PROPERTIES` of every message, a column each."""
        table = np.asarray(self.properties, dtype=np.int64).reshape(-1, len(_PROPERTIES))
        return {name: table[:, n] for n, name in enumerate(_PROPERTIES)}


def _spans(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(span, offset)`` of every element of spans of ``lengths`` laid end to end."""
    span = np.repeat(np.arange(len(lengths)), lengths)
    firsts = np.cumsum(lengths) - lengths
    return span, np.arange(len(span)) - firsts[span]


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``ordered`` (sorted) begins."""
    starts = np.ones(len(ordered), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return np.flatnonzero(starts)


def _first_per(span: np.ndarray, mask: np.ndarray, value: np.ndarray, spans: int) -> np.ndarray:
    """Per span (``span`` sorted), ``value`` at its first element where ``mask`` holds (-1
    where none)."""
    out = np.full(spans, -1, dtype=np.int64)
    where = np.flatnonzero(mask)
    first = where[_firsts(span[where])]
    out[span[first]] = value[first]
    return out


def _sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of ``values`` over consecutive spans of ``lengths`` (exact, in int64)."""
    running = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    ends = np.cumsum(lengths)
    return running[ends] - running[ends - lengths]


def _order(key: np.ndarray, at: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The order sorting by ``key``, then ``at``, then ``last`` (0 or 1): one int64 sort
    where the three fit in one number, else a lexical sort."""
    width = 2 * (int(at.max(initial=0)) + 1)
    if int(key.max(initial=0)) < (1 << 62) // width:
        return np.argsort(key * width + at * 2 + last)
    return np.lexsort((last, at, key))


def _member(values: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``ordered`` (sorted)."""
    if not len(ordered):
        return np.zeros(len(values), dtype=bool)
    found = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return ordered[found] == values


def _pairs_differ(
    keys: np.ndarray, left: np.ndarray, right: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Per pair of spans of ``keys`` starting at ``left`` and ``right``, the first offset
    below ``lengths`` where they differ (``lengths`` where they do not)."""
    span, offset = _spans(lengths)
    broken = np.flatnonzero(keys[left[span] + offset] != keys[right[span] + offset])
    first = broken[_firsts(span[broken])]
    out = lengths.copy()
    out[span[first]] = offset[first]
    return out


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
    def of(cls, laid: _Layout) -> _Measured:
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
        differ = _pairs_differ(
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
        shared[other] = _pairs_differ(
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

    def rows(self, laid: _Layout, prices: CachePrices) -> pl.DataFrame:
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
        first_row = _first_per(
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
    laid: _Layout,
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
    span, offset = _spans(sizes)
    role = message["role"][flat]
    # head-not-user: the first message that is not a system message is not the user's
    head = _first_per(span, role != 1, np.arange(len(flat)), windows)
    head_bad = np.zeros(windows, dtype=bool)
    head_bad[head >= 0] = role[head[head >= 0]] != 2
    head_message = np.full(windows, -1, dtype=np.int64)
    head_message[head_bad] = flat[head[head_bad]]

    # the calls each message makes, and the results, by (window, call id), in window order
    counts = message["call_count"]
    call_offsets = np.concatenate([[0], np.cumsum(counts)])
    calling, within = _spans(counts[flat])
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
    order = _order(key, at, is_ask)
    group = np.zeros(len(order), dtype=np.int64)
    firsts = _firsts(key[order])
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
    first_orphan = _first_per(span[results], orphan, flat[results], windows)
    first_unanswered = _first_per(span[calling], unanswered, flat[calling], windows)

    # request-dropped: the run's current request is not in the window
    held = np.sort(span * len(message["role"]) + flat, kind="stable")  # (nearly sorted)
    dropped = (request >= 0) & ~_member(window * len(message["role"]) + request, held)

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
    return np.stack([_sums(values, sizes) for values in counted])
