"""What a window policy does to the wire, the facts and the cache, at every model call.

Everything here reads one shape only: the windows a policy would have served, one per
model call in call order (``served``), and the run's :class:`RunMessages` stream. A
policy's replay gives that shape whichever framework it imitates, so one audit judges
them all; :func:`served_windows` is the one place a policy spec is turned into it.

Per (run, policy), :func:`audit_run` counts

* **wire validity** (:func:`wire_violations`): what a provider rejects in a request;
* **what reached the answer**: tool results verbatim in the last call's window, the
  facts among them (the what-if's standings rule), and results a policy rewrote in
  place (``Message.edit``: placeholders, previews, summaries);
* **cost**: input tokens over all calls, and prefix-cache invalidations priced with a
  :class:`CachePrices` model; beside it, the cache reads and writes the provider
  recorded (:func:`recorded_cache`), which only the run as sent has (the per-call rules:
  :mod:`~contextledger.window.cache_costs`).

Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from contextledger.read.messages import Message, ModelCall, RunMessages, text_preview
from contextledger.window.cache_costs import MAX_CACHE_PRICE as MAX_CACHE_PRICE  # re-exported
from contextledger.window.cache_costs import (
    CachePrices,
    CallCost,
    priced,
    recorded_cache,
    shared_prefix,
)
from contextledger.window.cache_costs import call_costs as call_costs  # re-exported
from contextledger.window.frameworks import (
    FrameworkPolicy,
    parse_any_policy,
    replay_framework,
)
from contextledger.window.frameworks._common import TokensOf, tokens_at_rate
from contextledger.window.policies import Policy
from contextledger.window.refusals import current_request_index, is_result
from contextledger.window.replay import Standings, replay, same_window
from contextledger.window.standings import StandingsTimeline, timelines
from contextledger.window.turns import window_chars

#: A policy of any family the audit replays: agentfootprint's or another framework's.
AnyPolicy = Policy | FrameworkPolicy


# ── which windows a policy serves ──────────────────────────────────


def parse_audit_policy(spec: str | AnyPolicy) -> AnyPolicy:
    """A policy spec of any family the audit replays: another framework's by the name it
    starts with (``anthropic_clear:...``), else agentfootprint's (``none``,
    ``sliding:...``, ``token_budget:...``); raises ``PolicySpecError`` naming it."""
    return parse_any_policy(spec)


def served_windows(
    stream: RunMessages,
    policy: str | AnyPolicy,
    standings: Standings | None = None,
    tokens_of: TokensOf | None = None,
) -> list[list[Message]]:
    """The window each model call of ``stream`` would have been served under ``policy``.

    The one dispatch from a policy to its replay: agentfootprint's policies go to
    :func:`~contextledger.window.replay.replay` (``standings`` arms their fact pin);
    another framework's policy goes to :func:`~contextledger.window.frameworks.replay_framework`
    (standings do not change what those frameworks keep) with ``tokens_of`` (default: its
    estimate at the run's own rate).

    >>> from contextledger.jobs.whatif import read_inputs
    >>> stream = read_inputs("data/sample/s0003-loop.json.gz").streams[0]
    >>> [len(w) for w in served_windows(stream, "sliding:keep=2")][:5]
    [1, 4, 6, 8, 8]
    """
    parsed = parse_audit_policy(policy)
    if isinstance(parsed, FrameworkPolicy):
        return replay_framework(stream, parsed, tokens_of).served
    return replay(stream, parsed, standings).served


def without_tool_text(
    policies: Sequence[tuple[str, AnyPolicy]],
) -> tuple[list[tuple[str, AnyPolicy]], list[str]]:
    """``(policies, notes)``: those that can be replayed over an archive (which keeps a
    tool output's length, not its text), and a line naming each left out and why."""
    kept, notes = [], []
    for label, policy in policies:
        if isinstance(policy, FrameworkPolicy) and policy.reads_tool_text:
            notes.append(
                f"{label}: not replayed over an archive: it reads tool outputs' text, which "
                "an archive does not keep (only their length); compare the snapshots"
            )
        else:
            kept.append((label, policy))
    return kept, notes


# ── wire validity ──────────────────────────────────────────────────

#: What a provider rejects, each counted per message per call.
WIRE_KINDS = ("head-not-user", "orphan-result", "unanswered-call", "request-dropped")
#: The column counting each kind in :func:`audit_run`'s row.
WIRE_COLUMNS = {kind: "wire_" + kind.replace("-", "_") for kind in WIRE_KINDS}


@dataclass(frozen=True)
class WireViolation:
    """One thing a provider would reject in one window."""

    kind: str
    #: The message it is about (for ``request-dropped``: the request no longer there).
    message: Message
    #: Its position in the window; -1 when it is not in the window.
    position: int


def wire_violations(
    window: Sequence[Message], request: Message | None = None
) -> list[WireViolation]:
    """What a provider would reject in a window, in window order, each problem once per
    message.

    ``head-not-user``: the first message after any system messages is not the user's
    (a tool result or an assistant turn opens it). ``orphan-result``: a tool result
    whose call is not earlier in the window. ``unanswered-call``: a tool call whose
    result is not in the window while the call stays. ``request-dropped``: ``request``
    (the run's current request at this call) is not in the window.

    >>> from contextledger.read.messages import Message, ToolCall
    >>> call = Message("assistant", "", tool_calls=(ToolCall("c1", "probe"),))
    >>> ask = Message("user", "go")
    >>> wire_violations([ask, call, Message("tool", "r", tool_call_id="c1")], ask)
    []
    >>> [v.kind for v in wire_violations([Message("tool", "r", tool_call_id="c0"), call], ask)]
    ['head-not-user', 'orphan-result', 'unanswered-call', 'request-dropped']
    """
    return list(_violations(window, request))


def _violations(window: Sequence[Message], request: Message | None) -> Iterator[WireViolation]:
    """:func:`wire_violations`' problems one at a time, in its order (the audit counts
    them and keeps the first, without listing them)."""
    for head, message in enumerate(window):
        if message.role != "system":
            if message.role != "user":
                yield WireViolation("head-not-user", message, head)
            break
    asked: set[str | None] = set()
    answered: set[str | None] = set()
    calling: list[int] = []  # positions of the messages making calls
    for position, message in enumerate(window):  # one pass; most windows have no problem
        if message.role == "tool":
            call_id = message.tool_call_id
            if call_id not in asked:
                yield WireViolation("orphan-result", message, position)
            if call_id:
                answered.add(call_id)
        if message.tool_calls:
            calling.append(position)
            for call in message.tool_calls:
                asked.add(call.id)
    if not asked <= answered:  # some call is unanswered: name each, in window order
        for position in calling:
            message = window[position]
            for call in message.tool_calls:
                if call.id not in answered:
                    yield WireViolation("unanswered-call", message, position)
    if request is not None and request not in window:  # Message compares by identity
        yield WireViolation("request-dropped", request, -1)


def current_requests(stream: RunMessages) -> list[Message | None]:
    """The run's current request at each model call: in the window no policy trimmed (every
    message the run appended before the call), the last message a person said whose text
    is the run's ``userMessage`` (else the last a person said); None where there is none.
    """
    out: list[Message | None] = []
    entered: list[Message] = []
    for call in stream.calls:
        entered += stream.entering_before(call.ordinal)
        position = current_request_index(entered, stream.user_message)
        out.append(entered[position] if position >= 0 else None)
    return out


def describe_message(message: Message) -> str:
    """A message as a user finds it again: what it is, and its place in the run's stream.

    >>> from contextledger.read.messages import Message
    >>> describe_message(Message("tool", "r", tool_call_id="c1", tool_name="probe", index=7))
    'tool result c1 (probe), stream message 7'
    """
    if message.role == "tool":
        name = message.resolved_tool_name or message.tool_name
        what = f"tool result {message.tool_call_id or '(no call id)'}" + (
            f" ({name})" if name else ""
        )
    elif message.tool_calls:
        calls = ", ".join(f"{c.id} ({c.name})" for c in message.tool_calls[:3])
        more = len(message.tool_calls) - 3
        what = f"assistant calling {calls}" + (f" and {more} more" if more > 0 else "")
    else:
        text = text_preview(message.content)
        what = f"{message.role} message" + (f" {text!r}" if text else "")
    where = "written by the policy" if message.index < 0 else f"stream message {message.index}"
    return f"{what}, {where}"


# ── one row per (run, policy) ──────────────────────────────────────

#: Columns of :func:`audit_run`'s rows, in order.
AUDIT_SCHEMA: dict[str, Any] = {
    "run_id": pl.String,
    "policy": pl.String,
    "model_calls": pl.Int64,
    "wire_problems": pl.Int64,
    **{column: pl.Int64 for column in WIRE_COLUMNS.values()},
    "calls_rejected": pl.Int64,
    "first_problem_call": pl.Int64,
    "first_problem_kind": pl.String,
    "first_problem_message": pl.String,
    "facts_declared": pl.Int64,
    "facts_at_answer": pl.Int64,
    "answer_results_verbatim": pl.Int64,
    "answer_placeholders": pl.Int64,
    "answer_previews": pl.Int64,
    "answer_summaries": pl.Int64,
    "tokens_per_char": pl.Float64,
    "input_tokens": pl.Int64,
    "input_tokens_from": pl.String,
    "cached_tokens": pl.Int64,
    "recorded_cache_read_tokens": pl.Int64,
    "recorded_cache_write_tokens": pl.Int64,
    "cache_invalidations": pl.Int64,
    "cost_without_cache": pl.Float64,
    "cost_with_cache": pl.Float64,
}


@dataclass(frozen=True)
class RunFacts:
    """What the audit reads of a run whatever the policy: measured once per run."""

    #: :func:`current_requests`: the run's current request at each model call.
    requests: list[Message | None]
    #: ``stream.tokens_per_char()``.
    rate: float | None
    #: Each tool call's last filed standing.
    final: Mapping[str, str]
    #: Tool results in the run's stream whose last standing is ``fact``.
    facts_declared: int
    #: The run the facts are of.
    stream: RunMessages
    #: :class:`WindowFacts` already measured, by call and window (policies often serve
    #: the same window at a call: every policy before it engages).
    measured: dict[tuple[int, ...], WindowFacts] = field(default_factory=dict)
    #: The same, by call and the window's list itself (a list several policies serve:
    #: a framework policy that keeps a call's history whole serves the run's shared
    #: one); holds the list, so its id stays its own.
    measured_lists: dict[tuple[int, int], tuple[list[Message], WindowFacts]] = field(
        default_factory=dict
    )
    #: :class:`CallCost` by the ids of the previous call's and this call's
    #: :class:`WindowFacts` (held in ``measured``, so their ids stay theirs).
    steps: dict[tuple[int, int], CallCost] = field(default_factory=dict)

    @classmethod
    def of(cls, stream: RunMessages, timeline: StandingsTimeline | None) -> RunFacts:
        final = timeline.final() if timeline else {}
        results = {m.tool_call_id for m in stream.messages if is_result(m) and m.tool_call_id}
        return cls(
            requests=current_requests(stream),
            rate=stream.tokens_per_char(),
            final=final,
            facts_declared=sum(final.get(call_id) == "fact" for call_id in results),
            stream=stream,
        )

    @functools.cached_property
    def sent(self) -> list[list[Message]]:
        """The window each model call was sent, as recorded (what ``recorded`` tokens
        need): made when first read (the batch audit reads them from the calls' indices)."""
        return [self.stream.window(call.window_served) for call in self.stream.calls]

    def window_facts(self, position: int, call: ModelCall, window: list[Message]) -> WindowFacts:
        """:class:`WindowFacts` of ``window`` served at the call at ``position``, measured
        once per run for each distinct window (messages compared by identity)."""
        held = self.measured_lists.get((position, id(window)))
        if held is not None:
            return held[1]
        key = (position, *map(id, window))
        found = self.measured.get(key)
        if found is None:
            wire, first = _wire_counts(window, self.requests[position])
            sent = self.sent[position]
            recorded = (
                call.input_tokens > 0
                and len(window) == len(sent)
                and (window == sent or same_window(window, sent))
            )
            found = WindowFacts(
                window, wire, first, sum([message.chars for message in window]), recorded
            )
            self.measured[key] = found
        self.measured_lists[position, id(window)] = (window, found)
        return found


_NO_PROBLEM = (0, 0, 0, 0)


def _wire_counts(
    window: Sequence[Message], request: Message | None
) -> tuple[tuple[int, ...], WireViolation | None]:
    """What :func:`wire_violations` finds, as the count of each of :data:`WIRE_KINDS` and
    the first problem it lists, without listing them all."""
    counts = [0, 0, 0, 0]
    first: WireViolation | None = None
    for violation in _violations(window, request):
        first = first or violation
        counts[_WIRE_POSITION[violation.kind]] += 1
    if first is None:
        return _NO_PROBLEM, None
    return tuple(counts), first


#: Where each wire kind counts in :attr:`WindowFacts.wire`.
_WIRE_POSITION = {kind: position for position, kind in enumerate(WIRE_KINDS)}


@dataclass(slots=True)
class WindowFacts:
    """What the audit reads of one window served at one call, whatever policy served it."""

    #: The window itself: held so that the message ids in its key stay its own.
    window: list[Message]
    #: Problems of each :data:`WIRE_KINDS`.
    wire: tuple[int, ...]
    #: The first problem :func:`wire_violations` lists, if any.
    first: WireViolation | None
    #: :func:`~contextledger.window.turns.window_chars`.
    chars: int
    #: It is the window the run sent, and the provider reported its tokens.
    recorded: bool


def _costs(
    stream: RunMessages, served: Sequence[Sequence[Message]], run_facts: RunFacts
) -> tuple[list[WindowFacts], list[CallCost]]:
    """Each call's :class:`WindowFacts` and :func:`call_costs`'s row, from measures taken
    once per distinct window; the previous window's shared prefix is found at C speed
    when the new window starts with the very same messages (a window that only grew)."""
    rate = run_facts.rate
    measure = run_facts.window_facts
    steps = run_facts.steps
    facts: list[WindowFacts] = []
    out: list[CallCost] = []
    previous: WindowFacts | None = None
    for position, (call, given) in enumerate(zip(stream.calls, served, strict=True)):
        window = given if type(given) is list else list(given)
        measured = measure(position, call, window)
        facts.append(measured)
        # A call's cost reads its window and the previous one only: policies that serve
        # the same two windows share it (facts are measured once per distinct window).
        step = (id(previous), id(measured))
        cost = steps.get(step)
        if cost is None:
            cost = steps[step] = _call_cost(call, measured, previous, rate)
        out.append(cost)
        previous = measured
    return facts, out


def _call_cost(
    call: ModelCall, measured: WindowFacts, previous: WindowFacts | None, rate: float | None
) -> CallCost:
    """:func:`call_costs`'s row for one call, from its window's facts and the previous's."""
    tokens: int | None
    if measured.recorded:
        tokens = call.input_tokens
    else:
        tokens = None if rate is None else round(rate * measured.chars)
    invalidated = False
    window = measured.window
    if previous is None:
        shared_chars = 0
    else:
        before = previous.window
        if window[: len(before)] == before:  # identity, message by message
            shared_chars = previous.chars
        else:
            shared = shared_prefix(before, window)
            shared_chars = window_chars(window[:shared])
            invalidated = shared < len(before)
    cached: int | None = None
    if tokens is not None and rate is not None:
        cached = min(tokens, round(rate * shared_chars))
    elif tokens is not None:
        cached = 0
    return CallCost(tokens, measured.recorded, cached, invalidated)


def audit_run(
    stream: RunMessages,
    label: str,
    served: Sequence[Sequence[Message]],
    timeline: StandingsTimeline | None = None,
    prices: CachePrices | None = None,
    run_facts: RunFacts | None = None,
) -> dict[str, Any]:
    """One :data:`AUDIT_SCHEMA` row: what the windows ``served`` (one per model call) did.

    Wire problems are counted per kind over every call (a problem a window carries for
    five calls counts five times); ``calls_rejected`` counts the calls with any;
    ``first_problem_*`` names the earliest (call ordinal, kind, the message). Facts are
    the what-if's: a tool result is a fact when its last filed standing is ``fact``;
    ``facts_at_answer`` counts those in the last call's window verbatim (not rewritten
    by the policy), ``facts_declared`` those in the run's stream. ``input_tokens_from``
    says whether the token counts are the provider's (``recorded``), estimated
    (``estimated``) or both. ``run_facts``: the run's :class:`RunFacts`, when the caller
    audits it under several policies (measured here otherwise). The counts are those of
    :func:`wire_violations` and :func:`call_costs` on each window.
    """
    prices = prices or CachePrices()
    run_facts = run_facts or RunFacts.of(stream, timeline)
    if len(served) != len(stream.calls):
        msg = f"{stream.run_id}: {len(served)} windows for {len(stream.calls)} model calls"
        raise ValueError(msg)
    row: dict[str, Any] = dict.fromkeys(AUDIT_SCHEMA)
    row.update(run_id=stream.run_id, policy=label, model_calls=len(stream.calls))
    measured, costs = _costs(stream, served, run_facts)
    counts = [0, 0, 0, 0]
    rejected = 0
    for call, window in zip(stream.calls, measured, strict=True):
        first = window.first
        if first is None:
            continue
        rejected += 1
        for position, count in enumerate(window.wire):
            counts[position] += count
        if row["first_problem_call"] is None:
            row["first_problem_call"] = call.ordinal
            row["first_problem_kind"] = first.kind
            row["first_problem_message"] = describe_message(first.message)
    row["wire_problems"] = sum(counts)
    row.update({WIRE_COLUMNS[kind]: count for kind, count in zip(WIRE_KINDS, counts, strict=True)})
    row["calls_rejected"] = rejected

    final = run_facts.final
    row["facts_declared"] = run_facts.facts_declared
    answer = served[-1] if served else []
    verbatim = [m.tool_call_id for m in answer if is_result(m) and m.tool_call_id and not m.edit]
    row["answer_results_verbatim"] = len(verbatim)
    row["facts_at_answer"] = sum(final.get(call_id) == "fact" for call_id in verbatim)
    edits = [m.edit for m in answer]
    row["answer_placeholders"] = edits.count("placeholder")
    row["answer_previews"] = edits.count("preview")
    row["answer_summaries"] = edits.count("summary")

    rate = run_facts.rate
    row["tokens_per_char"] = rate
    known = all(c.tokens is not None for c in costs)
    row["input_tokens"] = sum(c.tokens or 0 for c in costs) if known else None
    sources = {c.recorded for c in costs}
    row["input_tokens_from"] = (
        None
        if not costs or not known
        else "recorded+estimated"
        if len(sources) == 2
        else "recorded"
        if True in sources
        else "estimated"
    )
    row["cached_tokens"] = sum(c.cached or 0 for c in costs) if known else None
    row["recorded_cache_read_tokens"], row["recorded_cache_write_tokens"] = recorded_cache(stream)
    row["cache_invalidations"] = sum(c.invalidated for c in costs)
    row["cost_without_cache"], row["cost_with_cache"] = priced(costs, prices)
    return row


def audit_table_exact(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    prices: CachePrices | None = None,
) -> pl.DataFrame:
    """One :func:`audit_run` row per (run, policy), each run's windows replayed and audited
    one by one, runs in order, policies as given.

    >>> from contextledger.jobs.whatif import read_inputs
    >>> from contextledger.window.whatif import parse_policies
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> audited = audit_table_exact(streams, parse_policies(["none"]))
    >>> audited.select("policy", "wire_problems").row(0)
    ('none', 0)
    """
    by_run = timelines(standings_rows)
    rows = []
    for stream in streams:
        timeline = by_run.get(stream.run_id)
        run_facts = RunFacts.of(stream, timeline)
        tokens_of = tokens_at_rate(run_facts.rate)
        audited: dict[AnyPolicy, dict[str, Any]] = {}
        # A row by the windows served, messages by identity (policies that do not engage
        # on a run serve the very windows ``none`` does); ``kept`` holds the windows, so
        # their messages' ids stay theirs while the run is audited.
        by_windows: dict[tuple[tuple[int, ...], ...], dict[str, Any]] = {}
        kept = []
        for label, policy in policies:
            alike = serving_alike(policy, armed=timeline is not None)
            row = audited.get(alike)
            if row is None:
                standings = timeline.at if timeline else None
                served = served_windows(stream, policy, standings, tokens_of)
                kept.append(served)
                windows = tuple(tuple(map(id, window)) for window in served)
                row = by_windows.get(windows)
                if row is None:
                    row = audit_run(stream, label, served, timeline, prices, run_facts)
                    by_windows[windows] = row
                audited[alike] = row
            rows.append({**row, "policy": label})
    return pl.DataFrame(rows, schema=AUDIT_SCHEMA, orient="row")


def serving_alike(policy: AnyPolicy, *, armed: bool) -> AnyPolicy:
    """A policy equal to every other that serves a run the very same windows: on a run with
    no standings (``armed`` False) agentfootprint's fact pin holds nothing, so its
    ceiling (``ledger_facts``) changes nothing there; the audit replays one of them.

    >>> from contextledger.window.policies import parse_policy
    >>> six = parse_policy("sliding:keep=6")
    >>> unpinned = parse_policy("sliding:keep=6,ledger_facts=0")
    >>> serving_alike(six, armed=False) == serving_alike(unpinned, armed=False)
    True
    >>> serving_alike(six, armed=True) == serving_alike(unpinned, armed=True)
    False
    """
    if isinstance(policy, Policy) and not armed:
        return dataclasses.replace(policy, ledger_facts=0)
    return policy


def wire_frame(audited: pl.DataFrame) -> pl.DataFrame:
    """:func:`~contextledger.window.audit_arrays.wire_check`'s columns from audit rows."""
    kinds = [
        pl.when(pl.col(column) > 0).then(pl.lit(kind))
        for kind, column in sorted(WIRE_COLUMNS.items())
    ]
    return audited.select(
        "run_id",
        "policy",
        wire_violations=pl.col("wire_problems"),
        wire_violation_kinds=pl.concat_list(kinds).list.drop_nulls(),
    )
