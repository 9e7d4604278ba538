"""The audit of agentfootprint's policies read from the what-if kernel, a batch of runs at once.

A served window is ``[notice] + whole turns``, so :func:`~contextledger.window.audit.audit_run`'s
measures follow from sets of turns: chars and answer facts are the kernel's, the cache prefix
stops at the first turn or notice that differs, a turn carries the same wire problems in every
window holding it. Where that may not hold (ids shared by turns, turns entering out of order, a
new notice perhaps equal to the old) the run keeps the per-window audit: its windows replayed
one by one, then measured as the other frameworks' are (``window/audit_batch.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from contextledger.read.messages import Message, RunMessages
from contextledger.window import turn_sets
from contextledger.window.audit import (
    AUDIT_SCHEMA,
    WIRE_COLUMNS,
    WIRE_KINDS,
    AnyPolicy,
    CachePrices,
    CallCost,
    RunFacts,
    audit_run,
    current_requests,
    describe_message,
    priced,
    recorded_cache,
    wire_frame,
    wire_violations,
)
from contextledger.window.audit_batch import audit_served
from contextledger.window.kernel import CallWindows, KernelResult, advance
from contextledger.window.policies import Policy
from contextledger.window.replay import Replay
from contextledger.window.standings import timelines
from contextledger.window.turn_arrays import TurnArrays, take_runs, turn_arrays
from contextledger.window.whatif import kernel_groups, whatif_arrays, whatif_table

_HEAD, _ORPHAN, _UNANSWERED, _REQUEST = range(4)  # positions in WIRE_KINDS


def audit_table(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    prices: CachePrices | None = None,
) -> pl.DataFrame:
    """:func:`~contextledger.window.audit.audit_table_exact`'s rows, agentfootprint's
    policies audited from the kernel wherever it holds the run, the rest replayed window by
    window (:func:`~contextledger.window.audit_batch.audit_served`).

    >>> from contextledger.jobs.whatif import read_inputs
    >>> from contextledger.window.whatif import parse_policies
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> audit_table(streams, parse_policies(["sliding:keep=2"]))["cache_invalidations"].to_list()
    [8]
    """
    prices = prices or CachePrices()
    own = [(label, policy) for label, policy in policies if isinstance(policy, Policy)]
    if not own or not streams:
        return audit_served(streams, policies, standings_rows, prices)
    arrays = turn_arrays(streams, timelines(standings_rows))
    audit = KernelAudit(streams, arrays, prices)
    parsed = [policy for _, policy in own]
    for group in kernel_groups(arrays, audit.runs):
        laid = arrays if len(group) == len(streams) else take_runs(arrays, group)
        audit.kernel(group, laid, parsed)
    return audit.table(policies, own, standings_rows)


def wire_check(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
) -> pl.DataFrame:
    """Per (run, policy): how many problems :func:`wire_violations` finds in the windows the
    policy would have served (``wire_violations``), and which kinds.

    >>> from contextledger.jobs.whatif import read_inputs
    >>> from contextledger.window.whatif import parse_policies
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> wire_check(streams, parse_policies(["sliding:keep=1"])).row(0)
    ('s0003-loop', 'sliding:keep=1', 0, [])
    """
    return wire_frame(audit_table(streams, policies, standings_rows))


def whatif_and_audit(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, Policy]],
    audited: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    prices: CachePrices | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(whatif_table(streams, policies), audit_table(streams, audited))`` from one kernel
    pass when every agentfootprint policy ``audited`` names is among ``policies`` (the
    report's case); else the two one after the other.

    >>> from contextledger.jobs.whatif import read_inputs
    >>> from contextledger.window.whatif import parse_policies
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> per_run, audit = whatif_and_audit(streams, parse_policies(["sliding:keep=2"]),
    ...                                   parse_policies(["sliding:keep=2"]))
    >>> per_run["removed_messages"].to_list(), audit["cache_invalidations"].to_list()
    ([20], [8])
    """
    prices = prices or CachePrices()
    own = [(label, policy) for label, policy in audited if isinstance(policy, Policy)]
    by_run = timelines(standings_rows)
    if not streams or not own or not set(own) <= set(policies):
        per_run = whatif_table(streams, policies, standings_rows)
        return per_run, audit_table(streams, audited, standings_rows, prices)
    arrays = turn_arrays(streams, by_run)
    audit = KernelAudit(streams, arrays, prices)
    per_run = whatif_arrays(
        arrays,
        policies,
        by_run,
        lambda rows: [streams[r] for r in rows],
        audit.kernel,
        audit.keep_replay,
    )
    return per_run, audit.table(audited, list(policies), standings_rows)


class KernelAudit:
    """The audit of the runs ``arrays`` lays out (the runs of ``streams``) under
    agentfootprint's policies, tallied while the kernel replays them: hand
    :meth:`kernel` to each kernel pass, then read the rows with :meth:`table`."""

    def __init__(
        self, streams: Sequence[RunMessages], arrays: TurnArrays, prices: CachePrices
    ) -> None:
        self.streams, self.arrays, self.prices = streams, arrays, prices
        self.wire = _TurnWire.of(streams, arrays)
        #: The runs the kernel can audit (others are replayed window by window).
        self.runs = [r for r in range(len(streams)) if self.wire.local[r]]
        self.passes: list[tuple[np.ndarray, _Tally, KernelResult]] = []
        #: Exact replays already made (by the what-if), by (run, policy given to passes).
        self.replays: dict[tuple[int, int], Replay] = {}
        #: ``[run, policy]``: the rows :meth:`table` read from the tallies.
        self.tallied = np.zeros((len(streams), 0), dtype=bool)

    def kernel(
        self, group: Sequence[int], laid: TurnArrays, policies: Sequence[Policy]
    ) -> KernelResult:
        """:func:`~contextledger.window.kernel.advance` over the runs ``group`` (laid out
        as ``laid``), the audit tallied as it goes."""
        index = np.asarray(group, dtype=np.int64)
        tally = _Tally(laid, self.wire.take(index, laid.msgs.shape[1]), list(policies))
        result = advance(laid, policies, tally.observe)
        self.passes.append((index, tally, result))
        return result

    def keep_replay(self, run: int, policy: int, exact: Replay) -> None:
        """Keep an exact replay the what-if made (``policy``: its place among the policies
        given to the passes), so the audit reads its windows instead of replaying."""
        self.replays[run, policy] = exact

    def table(
        self,
        policies: Sequence[tuple[str, AnyPolicy]],
        replayed: Sequence[tuple[str, Policy]],
        standings_rows: Sequence[Mapping[str, Any]],
    ) -> pl.DataFrame:
        """:data:`AUDIT_SCHEMA` rows of ``policies``, runs in order, policies as given:
        from the tallies where a pass replayed the policy (``replayed``: the policies
        every pass was given, in order) over a run it can audit, else from replays window by
        window (:func:`~contextledger.window.audit_batch.audit_served`)."""
        count = len(policies)
        at: dict[tuple[str, AnyPolicy], int] = {pair: n for n, pair in enumerate(replayed)}
        wanted = [(p, at[pair]) for p, pair in enumerate(policies) if pair in at]
        frames: list[pl.DataFrame] = []
        keys: list[np.ndarray] = []
        tallied = self.tallied = np.zeros((len(self.streams), count), dtype=bool)
        for index, tally, result in self.passes:
            held = np.isin(index, self.runs)
            for p, n in wanted:
                audited = held & tally.audited(n)
                if not audited.any():
                    continue
                streams = [self.streams[r] for r in index.tolist()]
                rows = tally.rows(n, policies[p][0], result, streams, self.prices)
                frames.append(rows.filter(audited))
                keys.append(index[audited] * count + p)
                tallied[index[audited], p] = True
        by_run = timelines(standings_rows) if self.replays else {}
        reread: list[dict[str, Any]] = []  # rows audited from the what-if's exact replays
        reread_keys: list[int] = []
        exact: dict[tuple[int, ...], list[int]] = {}  # policies left -> runs, for one call
        for r in range(len(self.streams)):
            missing = np.flatnonzero(~tallied[r]).tolist()
            done = {p: self.replays.get((r, at.get(policies[p], -1))) for p in missing}
            served = {p: replay.served for p, replay in done.items() if replay is not None}
            if served:
                stream = self.streams[r]
                timeline = by_run.get(stream.run_id)
                facts = RunFacts.of(stream, timeline)
                for p, windows in served.items():
                    label = policies[p][0]
                    reread.append(audit_run(stream, label, windows, timeline, self.prices, facts))
                    reread_keys.append(r * count + p)
            left = tuple(p for p in missing if p not in served)
            if left:
                exact.setdefault(left, []).append(r)
        if reread:
            frames.append(pl.DataFrame(reread, schema=AUDIT_SCHEMA, orient="row"))
            keys.append(np.asarray(reread_keys, dtype=np.int64))
        for left, runs in exact.items():
            chosen = [policies[p] for p in left]
            streams = [self.streams[r] for r in runs]
            frames.append(audit_served(streams, chosen, standings_rows, self.prices))
            where = np.asarray(runs, dtype=np.int64)[:, None] * count + np.asarray(left)
            keys.append(where.reshape(-1))
        if not frames:
            return pl.DataFrame(schema=AUDIT_SCHEMA)
        order = np.argsort(np.concatenate(keys), kind="stable")
        return pl.concat(frames)[order]


# ── what each turn carries onto the wire ───────────────────────────


@dataclass
class _TurnWire:
    """Per run and turn (``[R, T]``, the kernel's turns): what the turn puts on the wire
    when it is in a window whole. ``local[r]``: each of run r's tool-call ids that is
    both called and answered lives in one turn, and its turns enter in stream order (so
    a window's problems are the sum of its turns' problems, in turn order)."""

    local: np.ndarray  # [R] bool
    orphans: np.ndarray  # [R, T] results whose call is not before them in the turn
    unanswered: np.ndarray  # [R, T] calls no result in the turn answers
    first_orphan: np.ndarray  # [R, T] stream index of the first such result
    first_unanswered: np.ndarray  # [R, T] stream index of the first message with one
    speaks: np.ndarray  # [R, T] the turn holds a message that is not a system message
    user_speaks: np.ndarray  # [R, T] ... and the first such is the user's
    first_speaker: np.ndarray  # [R, T] its stream index

    @classmethod
    def of(cls, streams: Sequence[RunMessages], arrays: TurnArrays) -> _TurnWire:
        runs, turns = arrays.msgs.shape
        shape = (runs, turns)
        out = cls(
            np.zeros(runs, dtype=bool),
            np.zeros(shape, dtype=np.int64),
            np.zeros(shape, dtype=np.int64),
            np.full(shape, -1, dtype=np.int64),
            np.full(shape, -1, dtype=np.int64),
            np.zeros(shape, dtype=bool),
            np.zeros(shape, dtype=bool),
            np.full(shape, -1, dtype=np.int64),
        )
        msgs = arrays.msgs.tolist()
        for r, stream in enumerate(streams):
            if r not in arrays.fallback:
                out.local[r] = out._lay_out(r, stream, msgs[r])
        return out

    def _lay_out(self, r: int, stream: RunMessages, msgs: list[int]) -> bool:
        conversation = [m for m in stream.messages if not m.window_authored]
        starts = [i for i, m in enumerate(conversation) if i == 0 or m.role != "tool"]
        entered = 0
        called: dict[str | None, int] = {}
        answered: dict[str | None, int] = {}
        if sum(msgs) != len(conversation):
            return False
        bounds = zip(starts, [*starts[1:], len(conversation)][: len(starts)], strict=True)
        for t, (start, end) in enumerate(bounds):
            members = conversation[start:end]
            if msgs[t] != len(members):
                return False
            speaker = next((m for m in members if m.role != "system"), None)
            if speaker is not None:
                self.speaks[r, t] = True
                self.user_speaks[r, t] = speaker.role == "user"
                self.first_speaker[r, t] = speaker.index
            tooling = False
            for m in members:
                if m.first_call is not None:
                    if m.first_call < entered:
                        return False  # (the window's order is not the stream's)
                    entered = m.first_call
                for call in m.tool_calls:
                    tooling = True
                    if called.setdefault(call.id, t) != t:
                        called[call.id] = -1
                if m.role == "tool":
                    tooling = True
                    if answered.setdefault(m.tool_call_id, t) != t:
                        answered[m.tool_call_id] = -1
            if tooling:
                self._problems(r, t, members)
        for call_id, t in called.items():
            if call_id in answered and (t < 0 or answered[call_id] != t):
                return False
        return True

    def _problems(self, r: int, t: int, members: list[Message]) -> None:
        for violation in wire_violations(members):
            if violation.kind == "orphan-result":
                counts, first = self.orphans, self.first_orphan
            elif violation.kind == "unanswered-call":
                counts, first = self.unanswered, self.first_unanswered
            else:
                continue
            if counts[r, t] == 0:
                first[r, t] = violation.message.index
            counts[r, t] += 1

    def take(self, runs: np.ndarray, turns: int) -> _TurnWire:
        """The runs ``runs`` (in that order), turns trimmed as ``take_runs`` trims them."""
        return _TurnWire(
            self.local[runs],
            *(
                getattr(self, name)[runs, :turns]
                for name in (
                    "orphans",
                    "unanswered",
                    "first_orphan",
                    "first_unanswered",
                    "speaks",
                    "user_speaks",
                    "first_speaker",
                )
            ),
        )


# ── the tally, call by call ────────────────────────────────────────


class _Tally:
    """Per (policy, run), in the kernel's policy order: the audit's sums over the calls,
    fed one call at a time by :func:`~contextledger.window.kernel.advance`."""

    def __init__(self, arrays: TurnArrays, wire: _TurnWire, policies: list[Policy]) -> None:
        runs, turns = arrays.msgs.shape
        words = turn_sets.words_for(turns)
        self.arrays, self.wire, self.turns, self.policies = arrays, wire, turns, policies
        self.order: list[int] = list(range(len(policies)))
        shape = (len(policies), runs)
        self.rate_known = ~np.isnan(arrays.rate)
        self.rate = np.nan_to_num(arrays.rate)
        self.sets = {
            "speaks": turn_sets.as_sets(wire.speaks, words),
            "user_speaks": turn_sets.as_sets(wire.user_speaks, words),
            "orphans": turn_sets.as_sets(wire.orphans > 0, words),
            "unanswered": turn_sets.as_sets(wire.unanswered > 0, words),
            "request": turn_sets.single(arrays.request, words),
        }
        self.has_request = arrays.request >= 0
        self.turn_chars = arrays.chars
        iterations = arrays.iterations.astype(np.int64)
        valid = np.arange(iterations.shape[1])[None, :] < arrays.calls[:, None]
        self.rising = np.asarray(((np.diff(iterations, axis=1) > 0) | ~valid[:, 1:]).all(1))
        self.wire_counts = np.zeros((len(WIRE_KINDS), *shape), dtype=np.int64)
        self.rejected = np.zeros(shape, dtype=np.int64)
        self.first_call = np.full(shape, -1, dtype=np.int64)
        self.first_kind = np.zeros(shape, dtype=np.int64)
        self.first_message = np.full(shape, -1, dtype=np.int64)
        self.tokens = np.zeros(shape, dtype=np.int64)
        self.cached = np.zeros(shape, dtype=np.int64)
        self.known = np.ones(shape, dtype=bool)
        self.from_recorded = np.zeros(shape, dtype=bool)
        self.from_estimate = np.zeros(shape, dtype=bool)
        self.invalidations = np.zeros(shape, dtype=np.int64)
        self.ambiguous = np.zeros(shape, dtype=bool)
        self.previous: tuple[np.ndarray, ...] | None = None

    def observe(self, state: CallWindows) -> None:
        self.order = state.order
        active = state.active[None, :]
        self._wire(state, active)
        self._costs(state, active)
        self.previous = (
            state.served.copy(),
            state.notice.copy(),
            state.second.copy(),
            state.notice_chars.copy(),
            state.chars.copy(),
        )

    def _set_sums(self, values: np.ndarray, sets: np.ndarray) -> np.ndarray:
        """``values[r, t]`` summed over the turns of ``sets`` (``[W, P, R]``), for the sets
        that hold any."""
        flat = sets.reshape(sets.shape[0], -1)
        out = np.zeros(flat.shape[1], dtype=np.int64)
        index = np.flatnonzero(turn_sets.nonempty(flat))
        if index.size:
            runs = index % sets.shape[2]
            held = turn_sets.unpack(flat.take(index, axis=1), self.turns)
            out[index] = (held * values[runs]).sum(1)
        return out.reshape(sets.shape[1:])

    def _at(self, values: np.ndarray, lowest: np.ndarray) -> np.ndarray:
        """``values[r, t]`` at the turn of each set of one turn ``lowest`` (``[W, P, R]``)."""
        runs = np.broadcast_to(np.arange(values.shape[0]), lowest.shape[1:])
        turn = np.minimum(turn_sets.position(lowest), self.turns - 1)
        return values[runs, turn]

    def _wire(self, state: CallWindows, active: np.ndarray) -> None:
        served, sets, wire = state.served, self.sets, self.wire
        first_turn = turn_sets.low_bit(served)
        speaker = turn_sets.low_bit(served & sets["speaks"][:, None])
        head = turn_sets.nonempty(speaker) & ~turn_sets.nonempty(
            speaker & sets["user_speaks"][:, None]
        )
        notice, second = state.notice, state.second
        head &= ~(notice & ~second)  # the notice (a user's message) opens the window
        head &= ~(notice & second & ~turn_sets.nonempty(first_turn & sets["speaks"][:, None]))
        orphaned = served & sets["orphans"][:, None]
        orphans = self._set_sums(wire.orphans, orphaned)
        unanswering = served & sets["unanswered"][:, None]
        unanswered = self._set_sums(wire.unanswered, unanswering)
        dropped = self.has_request[None, :] & ~turn_sets.nonempty(served & sets["request"][:, None])
        counts = (head.astype(np.int64), orphans, unanswered, dropped.astype(np.int64))
        for kind, values in enumerate(counts):
            self.wire_counts[kind] += values * active
        problem = (head | (orphans > 0) | (unanswered > 0) | dropped) & active
        self.rejected += problem
        new = problem & (self.first_call < 0)
        if not new.any():
            return
        kinds = np.select(
            [head, orphans > 0, unanswered > 0], [_HEAD, _ORPHAN, _UNANSWERED], _REQUEST
        )
        message = np.select(
            [kinds == _HEAD, kinds == _ORPHAN, kinds == _UNANSWERED],
            [
                self._at(wire.first_speaker, speaker),
                self._at(wire.first_orphan, turn_sets.low_bit(orphaned)),
                self._at(wire.first_unanswered, turn_sets.low_bit(unanswering)),
            ],
            -1,
        )
        self.first_call[new] = state.call
        self.first_kind[new] = kinds[new]
        self.first_message[new] = message[new]

    def _costs(self, state: CallWindows, active: np.ndarray) -> None:
        k, rate, known_rate = state.call, self.rate[None, :], self.rate_known[None, :]
        recorded = state.recorded
        estimate = np.round(rate * state.chars).astype(np.int64)
        tokens = np.where(recorded, self.arrays.tokens[:, k][None, :], estimate)
        known = recorded | known_rate
        if self.previous is None:
            shared_chars = np.zeros(tokens.shape, dtype=np.int64)
            invalidated = np.zeros(tokens.shape, dtype=bool)
        else:
            shared_chars, invalidated = self._shared(state)
        cached = np.where(
            known_rate, np.minimum(tokens, np.round(rate * shared_chars).astype(np.int64)), 0
        )
        self.tokens += tokens * active
        self.cached += np.where(known, cached, 0) * active
        self.known &= known | ~active
        self.from_recorded |= recorded & active
        self.from_estimate |= ~recorded & active
        self.invalidations += invalidated & active

    def _shared(self, state: CallWindows) -> tuple[np.ndarray, np.ndarray]:
        """Chars of the prefix the window shares with the previous call's, and whether it
        broke it (the previous window is not all shared)."""
        assert self.previous is not None
        before, notice_before, second_before, notice_chars_before, chars_before = self.previous
        served, notice, second = state.served, state.notice, state.second
        # the turns both windows hold in the same places, before any notice
        differ = turn_sets.low_bit(before ^ served)
        common = before & turn_sets.below(differ)
        same_notice: np.ndarray = notice_before & notice & (second_before == second)
        self.ambiguous |= (
            same_notice
            & state.fresh
            & (notice_chars_before == state.notice_chars)
            & ~self.rising[None, :]
        )  # a new notice of the same length, at an iteration seen before: maybe the same text
        same_notice &= ~state.fresh
        alike = same_notice | (~notice_before & ~notice)
        # where the notices differ the prefix stops at the first notice: after the first
        # turn when both windows open with it, else at once
        stop = np.minimum(np.where(notice_before, second_before, 2), np.where(notice, second, 2))
        first = turn_sets.low_bit(common)
        shared = np.where(alike, common, first * (stop >= 1))
        notice_shared = same_notice & (~second_before | turn_sets.nonempty(common))
        whole = turn_sets.equal(shared, before)
        turn_chars = chars_before - notice_chars_before * notice_before
        partial = np.where(whole, 0, 1)
        chars = np.where(whole, turn_chars, 0)
        if partial.any():
            chars = chars + self._set_sums(self.turn_chars, shared * partial.astype(np.uint64))
        chars = chars + notice_chars_before * notice_shared
        invalidated = ~(whole & (notice_shared | ~notice_before))
        return chars, invalidated

    # ── the rows ──

    def audited(self, n: int) -> np.ndarray:
        """``[R]``: the runs whose rows under the given policy ``n`` the tally answers: not
        a windowed policy over a run recorded with a window (not comparable), nor a notice
        that may read like the one it replaced."""
        row = self.order.index(n)
        windowed = self.arrays.windowed
        if windowed is None or self.policies[n].kind == "none":
            windowed = np.zeros(len(self.arrays.run_ids), dtype=bool)
        return ~self.ambiguous[row] & ~windowed

    def rows(
        self,
        n: int,
        label: str,
        result: KernelResult,
        streams: Sequence[RunMessages],
        prices: CachePrices,
    ) -> pl.DataFrame:
        """:data:`AUDIT_SCHEMA` rows of the given policy ``n`` (named ``label``) over every
        run of the pass, in order (``result``: the pass's, whose answer counts are the
        last call's window's; ``streams``: the pass's runs)."""
        row = self.order.index(n)
        arrays = self.arrays
        runs = len(arrays.run_ids)
        index = np.arange(runs)
        out: dict[str, Any] = {}
        out["run_id"] = arrays.run_ids
        out["policy"] = [label] * runs
        out["model_calls"] = np.asarray(arrays.calls, dtype=np.int64)
        counts = self.wire_counts[:, row]
        out["wire_problems"] = counts.sum(0)
        for kind, values in zip(WIRE_KINDS, counts, strict=True):
            out[WIRE_COLUMNS[kind]] = values
        out["calls_rejected"] = self.rejected[row]
        calls: list[Any] = [None] * runs
        kinds: list[Any] = [None] * runs
        messages: list[Any] = [None] * runs
        first_call, first_kind = self.first_call[row], self.first_kind[row]
        for r in np.flatnonzero(first_call >= 0).tolist():
            stream, k, code = streams[r], int(first_call[r]), int(first_kind[r])
            calls[r] = stream.calls[k].ordinal
            kinds[r] = WIRE_KINDS[code]
            message = (
                current_requests(stream)[k]
                if code == _REQUEST
                else stream.messages[self.first_message[row, r]]
            )
            messages[r] = None if message is None else describe_message(message)
        out["first_problem_call"], out["first_problem_kind"] = calls, kinds
        out["first_problem_message"] = messages
        if arrays.facts_declared is None:
            msg = "lay the runs out with turn_arrays (it counts the facts declared)"
            raise ValueError(msg)
        out["facts_declared"] = arrays.facts_declared
        out["facts_at_answer"] = result.metrics["answer_facts_verbatim"][n]
        out["answer_results_verbatim"] = result.metrics["answer_results_verbatim"][n]
        zeros = np.zeros(runs, dtype=np.int64)
        out["answer_placeholders"] = out["answer_previews"] = out["answer_summaries"] = zeros
        rate = arrays.rate
        out["tokens_per_char"] = pl.Series(rate, dtype=pl.Float64, nan_to_null=True)
        known = self.known[row]
        tokens, cached = self.tokens[row], self.cached[row]
        recorded, estimated = self.from_recorded[row], self.from_estimate[row]
        source = np.where(recorded & estimated, 3, np.where(recorded, 1, 2))
        source *= known & (arrays.calls > 0)
        names = [None, "recorded", "estimated", "recorded+estimated"]
        out["input_tokens_from"] = [names[code] for code in source.tolist()]
        out["input_tokens"] = np.where(known, tokens, 0)
        out["cached_tokens"] = np.where(known, cached, 0)
        caches = [recorded_cache(streams[r]) for r in index.tolist()]
        out["recorded_cache_read_tokens"] = [read for read, _ in caches]
        out["recorded_cache_write_tokens"] = [written for _, written in caches]
        out["cache_invalidations"] = self.invalidations[row]
        costs = [
            priced([CallCost(t, True, c, False)], prices)
            for t, c in zip(tokens.tolist(), cached.tolist(), strict=True)
        ]
        out["cost_without_cache"] = [bare for bare, _ in costs]
        out["cost_with_cache"] = [cheap for _, cheap in costs]
        unknown = pl.Series(~known)
        frame = pl.DataFrame(out, schema=AUDIT_SCHEMA)
        blank = ["input_tokens", "cached_tokens", "cost_without_cache", "cost_with_cache"]
        return frame.with_columns(
            pl.when(unknown).then(None).otherwise(pl.col(name)).alias(name) for name in blank
        )
