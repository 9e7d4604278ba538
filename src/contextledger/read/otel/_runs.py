"""Spans of any number of files assembled into runs: offers, uses, and the message stream.

A run is a conversation (``gen_ai.conversation.id`` / OpenInference ``session.id``,
when a span of the trace carries one), else a trace. A span is its (trace id, span
id): the first copy read counts, a later equal copy is a duplicate, a later different
one a conflict (the run-identity rule of :mod:`~contextledger.read.identity`, applied
to spans, since a run is put together from many lines). What it deliberately gets
wrong: a run is only as complete as the spans given; nothing is inferred for a model
call whose span was not exported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import zlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contextledger.read.facts import Offer, RunFacts, Use
from contextledger.read.messages import (
    MAX_REPORTED_TOKENS,
    Message,
    ModelCall,
    RunMessages,
    ToolCall,
    common_ends,
)
from contextledger.read.otel._copies import Copies, Place, run_of
from contextledger.read.otel._spans import Said, SpanRecord
from contextledger.read.otel._spill import SpanSpill
from contextledger.read.otel._spill import spans_held as budget
from contextledger.read.otel.functions import TraceFileRead
from contextledger.read.snapshot import ReadProblem, RunSource

#: How a tool use is known: the model's output asked for it (``tool-called``, the
#: snapshot reader's signal), or only an ``execute_tool`` span says it ran.
CALLED, EXECUTED = "tool-called", "tool-executed"

#: Why a run whose model calls carry no tool definitions is left out of the ledger.
NO_DEFINITIONS = (
    "no content on its model calls, so no tool definitions (content capture off, or sent to "
    "log events as semconv 1.30 instrumentations do: record with "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only; OpenInference: leave "
    "OPENINFERENCE_HIDE_LLM_TOOLS and OPENINFERENCE_HIDE_INPUTS unset)"
)
#: Why a run whose calls carried content but no tool definitions is left out.
NO_TOOLS_OFFERED = (
    "no tool offered: its model calls carry content but no tool definitions "
    "(gen_ai.tool.definitions / llm.tools)"
)
#: Why a run whose model called tools none of its calls' spans define is left out.
DEFINITIONS_NOT_RECORDED = (
    "tool definitions not recorded: the model called tools, but its model-call spans carry "
    "no gen_ai.tool.definitions (opentelemetry-instrumentation-openai-v2 never records them: "
    "record with opentelemetry-instrumentation-genai-openai and "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only)"
)
NO_MODEL_CALL = (
    "no model call: no span with gen_ai.operation.name chat, generate_content or "
    "text_completion (nor an OpenInference LLM span)"
)
#: Piece kinds the conventions carry no attribute for (left unmetered, never zero).
UNMETERED_KINDS = ["injection", "skill"]
#: What a run from traces says it was run by (``runs.runner_kind``).
RUNNER_KIND = "otel"


@dataclass
class TraceRun:
    """One run assembled from spans: its facts (one accounting: traces have no other)
    and, when asked for, its message stream."""

    run_id: str
    source: RunSource
    facts: RunFacts
    #: A hash of the run's spans (:func:`_digest`), when asked for (what an archive keeps).
    digest: str | None = None
    messages: RunMessages | None = None
    #: The traces the run is made of, and its span records (:func:`encode_spans`), when
    #: digests are asked for: what an archive keeps to merge spans arriving later.
    trace_ids: tuple[str, ...] = ()
    spans: bytes | None = None

    def facts_as(self, mode: str) -> RunFacts:
        """The facts under accounting ``mode``: the same offers and uses whatever the
        mode (agentfootprint's reference rules have nothing to read in a trace)."""
        if mode == self.facts.accounting:
            return self.facts
        return dataclasses.replace(self.facts, accounting=mode)


@dataclass
class Assembled:
    """What :meth:`TraceRuns.finish` gives: runs in start-time order, problems, and the
    copies of spans read more than once (rows of ``identity.DUPLICATES``)."""

    runs: list[TraceRun] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)
    #: Problems of the message texts alone (what a what-if replays, not the ledger).
    stream_problems: list[ReadProblem] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    #: The run of each trace :meth:`TraceRuns.chunks` was asked to watch, or whose run
    #: it was asked to watch (on the first part): what a caller decides before the
    #: runs arrive (an ingest, which archived runs the spans read now grow).
    watched: dict[str, str] = field(default_factory=dict)


class TraceRuns:
    """Collects the spans of trace files, in reading order, and assembles their runs.

    Past ``spans_held`` span records (:data:`~contextledger.read.otel._spill.SPANS_HELD`)
    they are written to temporary files under ``spill_folder`` (default: the system's),
    partitioned by trace, and runs are assembled a range of runs at a time: what is held
    is bounded by the budget, not the input (one run larger than it is held whole).
    """

    def __init__(
        self,
        *,
        messages: bool = False,
        digests: bool = False,
        spans_held: int | None = None,
        spill_folder: str | None = None,
    ) -> None:
        self.messages = messages
        self.digests = digests
        self.spans_held = budget(spans_held)
        self.spill_folder = spill_folder
        self._copies = Copies()
        self._problems: list[ReadProblem] = []
        self._files = 0
        self._spill: SpanSpill | None = None

    def __bool__(self) -> bool:
        return bool(self._copies.kept or self._problems or self._spill is not None)

    @property
    def spilled(self) -> bool:
        """Whether span records were written to disk (the budget was passed)."""
        return self._spill is not None

    def add(self, read: TraceFileRead) -> None:
        """Take in one file's spans (a span read before is a duplicate or a conflict)."""
        ordinal = self._files
        self._files += 1
        self._problems.extend(read.problems)
        if read.spilled is not None:
            self._spilling().adopt(read.spilled, ordinal)
        if self._spill is not None:
            self._spill.add((ordinal, record) for record in read.spans)
            return
        for record in read.spans:
            self._copies.take((ordinal, record.position), record)
        if len(self._copies.kept) > self.spans_held:
            self._spilling()

    def _spilling(self) -> SpanSpill:
        """The spill, started (the records held so far written out) if it was not."""
        if self._spill is None:
            self._spill = SpanSpill(self.spans_held, self.spill_folder)
            kept = self._copies.kept
            self._spill.add((sequence[0], record) for sequence, record in kept.values())
            self._copies.kept = {}
        return self._spill

    def finish(self) -> Assembled:
        """The runs of every span taken in, in the order of their first span's start time
        (ties: by run id), whatever order the files were read in."""
        out = Assembled()
        for part in self.chunks():
            out.runs.extend(part.runs)
            out.problems.extend(part.problems)
            out.stream_problems.extend(part.stream_problems)
            out.duplicates.extend(part.duplicates)
        return out

    def chunks(
        self, runs: int = 1000, *, traces: Collection[str] = (), run_ids: Collection[str] = ()
    ) -> Iterator[Assembled]:
        """:meth:`finish` a part of at most ``runs`` runs at a time (the first part also
        carries the problems and copies not of one run, and the run of each of
        ``traces``, and of each trace whose run is one of ``run_ids``:
        :attr:`Assembled.watched`), letting go of each run's spans once it is
        assembled: what is held is the records not yet made runs. Takes the spans: a
        second call gives nothing."""
        if self._spill is not None:
            spill, self._spill = self._spill, None
            try:
                yield from self._spilled_chunks(spill, runs, traces, run_ids)
            finally:
                spill.close()
            return
        by_trace: dict[str, list[tuple[Place, SpanRecord]]] = {}
        for sequence, record in self._copies.kept.values():
            by_trace.setdefault(record.trace_id, []).append((sequence, record))
        run_of_trace = {trace: run_of(trace, spans) for trace, spans in by_trace.items()}
        by_run: dict[str, list[tuple[Place, SpanRecord]]] = {}
        for trace, spans in by_trace.items():
            by_run.setdefault(run_of_trace[trace], []).extend(spans)
        del by_trace
        copies, self._copies = self._copies, Copies()
        part = self._first_part(copies.conflicts, copies.copies, run_of_trace)
        part.watched = _watched(run_of_trace, traces, run_ids)
        order = sorted(by_run, key=lambda run_id: (min(r.start for _, r in by_run[run_id]), run_id))
        for run_id in order:
            records = sorted((record for _, record in by_run.pop(run_id)), key=_span_order)
            self._assemble(run_id, records, part)
            if len(part.runs) >= runs:
                yield part
                part = Assembled()
        if part.runs or part.problems or part.stream_problems or part.duplicates:
            yield part

    def _first_part(
        self,
        conflicts: list[tuple[Place, str, ReadProblem]],
        copies: dict[tuple[str, int | None, str], tuple[Place, SpanRecord, SpanRecord]],
        run_of_trace: dict[str, str],
    ) -> Assembled:
        """The part that carries the problems not of one run: the files', then the
        conflicting copies, and the copies of spans, each in reading order."""
        part = Assembled(problems=self._problems)
        self._problems = []
        for _, trace, problem in sorted(conflicts, key=lambda found: found[0]):
            problem.run_id = run_of_trace.get(trace)
            part.problems.append(problem)
        named: set[tuple[str, str, int | None]] = set()
        for (path, _, trace), (_, copy, kept) in sorted(
            copies.items(), key=lambda item: item[1][0]
        ):
            run_id = run_of_trace.get(trace, trace)
            if (run_id, path, copy.line) in named:  # two traces of one conversation
                continue
            named.add((run_id, path, copy.line))
            part.duplicates.append(
                {
                    "run_id": run_id,
                    "path": path,
                    "line": copy.line,
                    "kept_path": kept.path,
                    "kept_line": kept.line,
                    "kept_run_id": run_id,
                }
            )
        return part

    def _assemble(self, run_id: str, records: list[SpanRecord], part: Assembled) -> None:
        """One run (its records in span order) and its spans' problems, added to ``part``."""
        part.runs.append(self._run(run_id, records, part.stream_problems))
        seen: set[str] = set()
        for record in records:
            for number, reason in enumerate(record.problems):
                if reason not in seen:
                    seen.add(reason)
                    problem = ReadProblem(record.path, record.line, run_id, reason)
                    ledger = number < record.ledger_problems
                    (part.problems if ledger else part.stream_problems).append(problem)

    def _spilled_chunks(
        self, spill: SpanSpill, runs: int, traces: Collection[str], run_ids: Collection[str]
    ) -> Iterator[Assembled]:
        """:meth:`chunks` of records on disk, a range of runs at a time
        (:meth:`~contextledger.read.otel._spill.SpanSpill.arrange`)."""
        before, self._copies = self._copies, Copies()  # found before the records spilled
        arranged = spill.arrange(before)
        run_of_trace = {trace: facts.run_id for trace, facts in arranged.traces.items()}
        part = self._first_part(arranged.conflicts, arranged.copies, run_of_trace)
        part.watched = _watched(run_of_trace, traces, run_ids)
        del run_of_trace
        for index, run_ids in enumerate(arranged.ranges):
            by_run = spill.range_runs(index, arranged.traces, _span_order)
            for run_id in run_ids:
                self._assemble(run_id, by_run.pop(run_id), part)
                if len(part.runs) >= runs:
                    yield part
                    part = Assembled()
        if part.runs or part.problems or part.stream_problems or part.duplicates:
            yield part

    def _run(self, run_id: str, records: list[SpanRecord], problems: list[ReadProblem]) -> TraceRun:
        first = records[0]
        calls = model_calls(records)
        facts = meter(calls, records)
        digest = _digest(records) if self.digests else None
        spans = encode_spans(records) if self.digests else None
        trace_ids = tuple(sorted({record.trace_id for record in records}))
        source = RunSource(first.path, first.line)
        messages = None
        if self.messages:
            calls, problem = _usage_in_range(calls, run_id)
            messages = stream(run_id, calls)
            if problem is not None:  # read, but no call reaches it: a note, not a problem
                messages.notes.append(f"{problem.where}: {problem.reason}")
            doubt = input_check(messages, calls)
            if doubt is not None:
                where = ReadProblem(source.path, source.line, run_id, doubt).where
                messages.notes.append(f"{where}: {doubt}")
        return TraceRun(run_id, source, facts, digest, messages, trace_ids, spans)


#: How far (either way) a run's rebuilt input may be from its recorded input tokens
#: before it is named: chars / 4 is rough, an incomplete stream is far off.
INPUT_RATIO_LIMIT = 4.0


def input_check(messages: RunMessages, calls: Sequence[SpanRecord]) -> str | None:
    """Why the run's rebuilt windows look incomplete, or None: over the calls that
    recorded ``gen_ai.usage.input_tokens``, the windows' estimated tokens (``ceil(chars /
    4)``, plus each call's tool definitions as the ledger estimates them) against the
    recorded count, named when the ratio is past :data:`INPUT_RATIO_LIMIT` either way."""
    recorded = estimated = counted = 0
    for model_call, span in zip(messages.calls, calls, strict=True):
        if not span.input_tokens or span.input_tokens <= 0:
            continue
        counted += 1
        recorded += span.input_tokens
        chars = sum(messages.messages[i].chars for i in model_call.window_served)
        estimated += math.ceil(chars / 4) + sum(tokens for _, tokens in span.tools or ())
    if not recorded:
        return None
    ratio = estimated / recorded
    if 1 / INPUT_RATIO_LIMIT <= ratio <= INPUT_RATIO_LIMIT:
        return None
    return (
        f"the input rebuilt from its spans, about {estimated:,} tokens (chars / 4, and the "
        f"tool definitions), is {ratio:.2f}x the {recorded:,} its {counted} model call(s) "
        "recorded (gen_ai.usage.input_tokens): its message stream is likely incomplete "
        "(content capture off, attributes cut or hidden, tool definitions not recorded); "
        "replayed as read"
    )


def _watched(
    run_of_trace: dict[str, str], traces: Collection[str], run_ids: Collection[str]
) -> dict[str, str]:
    """The run of each of ``traces`` read, and of each trace whose run is one of ``run_ids``."""
    if not traces and not run_ids:
        return {}
    wanted = set(run_ids)
    found = {trace: run_of_trace[trace] for trace in traces if trace in run_of_trace}
    found.update((t, run) for t, run in run_of_trace.items() if run in wanted)
    return found


def _span_order(record: SpanRecord) -> tuple[int, int, str]:
    """A run's spans in start-time order, ties by their place in their file, then by span
    id: an order of the spans themselves, not of the files they came in."""
    return record.start, record.position, record.span_id


def _digest(records: Sequence[SpanRecord]) -> str:
    """A hash of the run's spans as read (where aside), so an archive tells a run that
    arrives again from the same run with more spans."""
    ordered = sorted(records, key=lambda r: (r.trace_id, r.span_id))
    hasher = hashlib.blake2b(digest_size=16)
    for record in ordered:
        fields = msgspec.structs.astuple(record)
        hasher.update(msgspec.json.encode(fields[:4] + fields[7:-1]))
    return hasher.hexdigest()


_SPANS = msgspec.json.Decoder(list[SpanRecord])


def encode_spans(records: Sequence[SpanRecord]) -> bytes | None:
    """A run's span records as bytes, as an archive keeps them: JSON (a count past 64
    bits stays as read), deflated (a twelfth of the JSON on the recordings: an ingest
    holds every trace run's until it commits them). None when they cannot be encoded
    (text no UTF-8 holds): the run is archived, but spans of it arriving later cannot be
    merged into it.

    >>> record = SpanRecord("ab" * 16, "cd" * 8, "", 7, "t.jsonl", 1, 0, input_tokens=10**23)
    >>> decode_spans(encode_spans([record])) == [record]
    True
    """
    try:
        return zlib.compress(msgspec.json.encode(list(records)))
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError):
        return None


def decode_spans(data: bytes) -> list[SpanRecord]:
    """The span records :func:`encode_spans` kept, as they were read."""
    return _SPANS.decode(zlib.decompress(data))


def model_calls(records: Sequence[SpanRecord]) -> list[SpanRecord]:
    """The run's model calls in start-time order (ties: place in the file), one per call
    that reached the model.

    A span is its (trace id, span id): a run of many traces may reuse a span id.
    Stacked instrumentations (a framework's ``chat`` span around the client's) record
    one call twice: a model-call span with a model-call span below it is not counted
    (the innermost is the request as sent), and what the innermost lacks (its tool
    definitions, its messages) is taken from the nearest one above it. Two model-call
    spans side by side are one call only when they share a ``gen_ai.response.id`` and
    agree on what both recorded of the call (:func:`_same_call`): servers such as
    Ollama's reuse response ids (``chatcmpl-<0..998>``), so an id alone is no proof.
    """
    calls: dict[tuple[str, str], SpanRecord] = {}
    order: dict[tuple[str, str], int] = {}  # each call's place among the records
    for position, r in enumerate(records):
        if r.role == "call":
            key = (r.trace_id, r.span_id)
            calls[key] = r
            order[key] = position
    if not calls:
        return []
    parents = {(r.trace_id, r.span_id): (r.trace_id, r.parent_id) for r in records}
    above: dict[tuple[str, str], tuple[str, str]] = {}  # call -> nearest call above it
    for key in calls:
        parent = parents.get(key, ("", ""))
        hops = 0
        while parent[1] and parent not in calls and hops < len(parents):
            parent = parents.get(parent, ("", ""))
            hops += 1
        if parent in calls:
            above[key] = parent
    outer = set(above.values())
    kept: list[SpanRecord] = []
    responses: dict[str, list[SpanRecord]] = {}
    for key, record in calls.items():
        if key in outer:
            continue
        merged = record
        ancestor = above.get(key)
        while ancestor is not None:
            merged = _fill(merged, calls[ancestor])
            ancestor = above.get(ancestor)
        if merged.response_id:
            same_id = responses.setdefault(merged.response_id, [])
            if any(_same_call(merged, other) for other in same_id):
                continue
            same_id.append(merged)
        kept.append(merged)
    kept.sort(key=lambda r: (r.start, order[(r.trace_id, r.span_id)]))
    return kept


#: What two spans of one call both say, when both recorded it.
_CALL_FIELDS = ("input_tokens", "tool_calls", "inputs", "outputs", "system")


def _same_call(one: SpanRecord, other: SpanRecord) -> bool:
    """Whether two model-call spans with one response id record the same call: same
    trace, and equal in each of the request and response fields both recorded (the
    tools offered compared by name, their token estimates being dialect-specific)."""
    if one.trace_id != other.trace_id:
        return False
    for name in _CALL_FIELDS:
        mine, theirs = getattr(one, name), getattr(other, name)
        if mine is not None and theirs is not None and mine != theirs:
            return False
    if one.tools is not None and other.tools is not None:
        return {n for n, _ in one.tools} == {n for n, _ in other.tools}
    return True


_FILLED = (
    "tools",
    "tool_calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "system",
    "inputs",
    "outputs",
)
_FLAGS = ("tools_unreadable", "captured")
_COUNTS = ("dropped_attributes",)


def _fill(record: SpanRecord, outer: SpanRecord) -> SpanRecord:
    """``record`` with the fields it lacks taken from ``outer`` (the same call, recorded
    by an instrumentation above it)."""
    missing = {
        name: getattr(outer, name)
        for name in _FILLED
        if getattr(record, name) is None and getattr(outer, name) is not None
    }
    for name in _FLAGS:
        if getattr(outer, name) and not getattr(record, name):
            missing[name] = True
    for name in _COUNTS:
        if getattr(outer, name) > getattr(record, name):
            missing[name] = getattr(outer, name)
    return msgspec.structs.replace(record, **missing) if missing else record


def meter(calls: Sequence[SpanRecord], records: Sequence[SpanRecord]) -> RunFacts:
    """Offers and uses of a run's model calls (``calls``, in order) and tool spans.

    A run none of whose calls carries tool definitions is refused (its offers are
    unknown, or none: never offered zero), saying which: content capture was off, the
    model called tools its instrumentation did not record, or the calls carried content
    but offered no tool; so is a run that lost attributes to
    the SDK's span limit. Offered: each tool
    definition on a call, once per name per call. Used: each tool
    call in a call's output messages (``tool-called``); an ``execute_tool`` span counts
    (``tool-executed``) only when no output message holds its call id, and one without
    a call id only when the run recorded no output messages at all.
    """
    facts = RunFacts("corrected", model_call_count=len(calls))
    if not calls:
        facts.refused_reason = NO_MODEL_CALL
        return facts
    unreadable = [index for index, call in enumerate(calls, start=1) if call.tools_unreadable]
    if unreadable:
        facts.refused_reason = (
            f"the tool definitions of model call {unreadable[0]} could not be read "
            "(named among the problems): the run is not counted in part"
        )
        return facts
    dropped = [
        (index, call) for index, call in enumerate(calls, start=1) if call.dropped_attributes
    ]
    if dropped:
        index, call = dropped[0]
        facts.refused_reason = (
            f"model call {index} lost {call.dropped_attributes} attribute(s) to the SDK's span "
            "attribute limit (128 by default), so its tool definitions may be incomplete: "
            "raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (or SpanLimits(max_span_attributes=...))"
        )
        return facts
    if all(call.tools is None for call in calls):
        if not any(call.captured for call in calls):
            facts.refused_reason = NO_DEFINITIONS
        elif any(call.tool_calls for call in calls):
            facts.refused_reason = DEFINITIONS_NOT_RECORDED
        else:
            facts.refused_reason = NO_TOOLS_OFFERED
        return facts
    offers: list[Offer] = []
    uses: list[Use] = []
    called: set[str] = set()
    for index, call in enumerate(calls):
        offers.extend(_call_offers(index, call.tools or ()))
        for call_id, name in call.tool_calls or ():
            uses.append(("tool", name, CALLED, index))
            if call_id:
                called.add(call_id)
    outputs_recorded = any(call.tool_calls is not None for call in calls)
    starts = [call.start for call in calls]
    for record in records:
        if record.role != "tool" or record.executed is None:
            continue
        call_id, name = record.executed
        if not name or call_id in called or (not call_id and outputs_recorded):
            continue
        if call_id:
            called.add(call_id)
        before = sum(1 for start in starts if start <= record.start) - 1
        uses.append(("tool", name, EXECUTED, before if before >= 0 else None))
    facts.metered = True
    facts.metered_call_count = len(calls)
    facts.unmetered_kinds = list(UNMETERED_KINDS)
    facts.offers = offers
    facts.uses = uses
    return facts


#: The offer rows of a call, by its index and its tools tuple (the reader shares one tuple
#: among the calls sending the same definitions): most calls of most runs repeat one.
_CALL_OFFERS: dict[tuple[int, int], tuple[tuple[tuple[str, int], ...], list[Offer]]] = {}
_CALL_OFFERS_KEPT = 4096


def _call_offers(index: int, tools: tuple[tuple[str, int], ...]) -> list[Offer]:
    """Offer rows of call ``index`` offering ``tools``: each name once, its first time."""
    key = (index, id(tools))
    hit = _CALL_OFFERS.get(key)
    if hit is not None and hit[0] is tools:
        return hit[1]
    named: set[str] = set()
    rows: list[Offer] = []
    for name, tokens in tools:
        if name not in named:
            named.add(name)
            rows.append((index, "tool", name, tokens))
    if len(_CALL_OFFERS) >= _CALL_OFFERS_KEPT:
        _CALL_OFFERS.clear()
    _CALL_OFFERS[key] = (tools, rows)  # keeps ``tools`` alive: its id is not reused
    return rows


#: The usage counts a model call's span records, and the attribute each is read from.
_USAGE_FIELDS = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_write.input_tokens",
}


def _usage_in_range(
    calls: Sequence[SpanRecord], run_id: str
) -> tuple[list[SpanRecord], ReadProblem | None]:
    """The calls with each usage count that is negative or past
    :data:`~contextledger.read.messages.MAX_REPORTED_TOKENS` read as not reported, and
    the first such count named (once per run: only the what-if reads usage)."""
    out: list[SpanRecord] = []
    problem = None
    for ordinal, call in enumerate(calls, start=1):
        for field_name, attribute in _USAGE_FIELDS.items():
            tokens = getattr(call, field_name)
            if tokens is None or 0 <= tokens <= MAX_REPORTED_TOKENS:
                continue
            call = msgspec.structs.replace(call, **{field_name: None})
            if problem is None:
                reason = (
                    f"{attribute} of model call {ordinal} is {tokens}, "
                    f"{'negative' if tokens < 0 else 'past 2**40, which no real call reaches'}"
                    ": read as not reported (the what-if leaves it out of its token figures)"
                )
                problem = ReadProblem(call.path, call.line, run_id, reason)
        out.append(call)
    return out, problem


def stream(run_id: str, calls: Sequence[SpanRecord]) -> RunMessages:
    """The run's message stream rebuilt from what each call sent and received.

    A chat API is sent the whole window each call: a call's input is aligned with the
    window before it (the previous input and its output), and what differs enters the
    stream there. Tool results are linked to their calls by id.
    """
    said: list[Said] = []
    origins: list[str] = []
    entered: list[int] = []  # calls made before each message entered
    live: list[int] = []
    model_calls_out: list[ModelCall] = []

    def enter(items: Sequence[Said], origin: str, before: int) -> list[int]:
        added = []
        for item in items:
            said.append(item)
            origins.append(origin)
            entered.append(before)
            added.append(len(said) - 1)
        return added

    for ordinal, call in enumerate(calls, start=1):
        sent = list(call.inputs or ())
        if call.system and not (sent and sent[0].role == "system"):
            sent = list(call.system) + sent
        old = [said[i] for i in live]
        head, tail = common_ends(old, sent)
        added = enter(sent[head : len(sent) - tail], f"input#{ordinal}", ordinal - 1)
        live = live[:head] + added + (live[len(live) - tail :] if tail else [])
        served = tuple(live)
        model_calls_out.append(
            ModelCall(
                ordinal=ordinal,
                iteration=ordinal,
                bundle_index=ordinal - 1,
                runtime_stage_id=call.span_id,
                window_stage_id=None,
                input_tokens=max(0, call.input_tokens or 0),
                window_seen=served,
                window_served=served,
                cache_read_tokens=call.cache_read_tokens,
                cache_write_tokens=call.cache_write_tokens,
            )
        )
        live = live + enter(call.outputs or (), f"output#{ordinal}", ordinal)
    names = {cid: name for item in said for cid, name in item.tool_calls if cid and name}
    count = len(calls)
    messages = []
    for index, item in enumerate(said):
        before = entered[index]
        resolved = names.get(item.tool_call_id or "") if item.role == "tool" else None
        messages.append(
            Message(
                role=item.role,
                content=item.content,
                tool_call_id=item.tool_call_id,
                tool_calls=tuple(ToolCall(cid, name) for cid, name in item.tool_calls),
                index=index,
                first_call=before + 1 if before < count else None,
                origin=origins[index],
                resolved_tool_name=resolved,
            )
        )
    return RunMessages(
        run_id=run_id,
        user_message=None,
        messages=messages,
        calls=model_calls_out,
        final_window=tuple(live),
        recorded_records=[],
    )
