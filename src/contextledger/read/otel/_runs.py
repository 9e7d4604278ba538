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
import zlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contextledger.read.facts import RunFacts
from contextledger.read.messages import RunMessages
from contextledger.read.otel._calls import (
    input_check,
    meter,
    model_calls,
    stream,
    usage_in_range,
)
from contextledger.read.otel._copies import Copies, Place, run_of
from contextledger.read.otel._spans import SpanRecord
from contextledger.read.otel._spill import SpanSpill
from contextledger.read.otel._spill import spans_held as budget
from contextledger.read.otel.functions import TraceFileRead
from contextledger.read.snapshot import ReadProblem, RunSource

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
            calls, problem = usage_in_range(calls, run_id)
            messages = stream(run_id, calls)
            if problem is not None:  # read, but no call reaches it: a note, not a problem
                messages.notes.append(f"{problem.where}: {problem.reason}")
            doubt = input_check(messages, calls)
            if doubt is not None:
                where = ReadProblem(source.path, source.line, run_id, doubt).where
                messages.notes.append(f"{where}: {doubt}")
        return TraceRun(run_id, source, facts, digest, messages, trace_ids, spans)


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
