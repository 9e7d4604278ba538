"""Read OTLP JSON trace files: which files are traces, and their spans as small records.

A file is a trace file by its content, not its name: its first JSON document is an
object with the key ``"resourceSpans"`` (what every ``ExportTraceServiceRequest`` is),
plain or gzip. Such a file is read a line at a time whatever its suffix (the
collector's file exporter writes JSON Lines into ``.json`` files), except a file whose
first line cannot end a document (one request, pretty-printed), read whole. Runs are
assembled only once every file is read (:class:`~contextledger.read.otel.TraceRuns`),
since a trace may be spread over many files; past a budget, the records wait on disk.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from contextledger.read.gunzip import GZIP_MAGIC, GzipError, inflated_head
from contextledger.read.otel._otlp import decode_request
from contextledger.read.otel._spans import SpanRecord, span_record
from contextledger.read.otel._spill import SpillTo, made, spans_held
from contextledger.read.otel._spill_files import (
    PARTITIONS,
    UNPLACED,
    Spilled,
    new_token,
    write_parts,
)
from contextledger.read.snapshot import BOM, ReadError, ReadProblem, iter_documents
from contextledger.read.snapshot_files import display_path

#: Bytes of a file (decompressed) looked at to tell its format.
SNIFF_BYTES = 1 << 16
_OTLP_JSON = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"resourceSpans"\s*:')
#: An object opening the file (its key ``resourceSpans`` may come after others).
_OBJECT = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*\{")
_KEY = re.compile(rb'"resourceSpans"\s*:')
_SNAKE_KEY = re.compile(rb'"resource_spans"\s*:')

#: The reason a zstd-compressed file (the collector's ``compression: zstd``) is not read.
ZSTD = (
    "zstd-compressed: not read (decompress it with zstd -d, or export with gzip or no compression)"
)
#: The reason OTLP written with protobuf's field names (``resource_spans``) is not read.
SNAKE_CASE = (
    "looks like OTLP with protobuf's snake_case field names (resource_spans, as "
    "MessageToJson(preserving_proto_field_name=True) writes), which OTLP JSON does not "
    "allow: not read (export with the lowerCamelCase names, resourceSpans)"
)
#: The reason an OTLP protobuf file is not read.
PROTOBUF = (
    "an OTLP protobuf file (binary), not OTLP JSON: export traces as JSON (the "
    "collector's file exporter with format json, or opentelemetry-exporter-otlp-json-file)"
)


def sniff(path: Path) -> str | None:
    """``"otlp-json"``, ``"otlp-snake-case"``, ``"otlp-protobuf"``, ``"zstd"`` or None
    (anything else: a snapshot, or a file the snapshot reader names) for the file at
    ``path``, by its first bytes: a JSON object with the key ``resourceSpans`` (first,
    or after other keys within the first 64 KiB) is OTLP JSON.

    >>> sniff(Path("data/sample/s0003-loop.json.gz")) is None
    True
    """
    head = _head(path, SNIFF_BYTES)
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if _OTLP_JSON.match(head):
        return "otlp-json"
    if _OBJECT.match(head):
        keys = _top_keys(head)
        if keys is None and b"commitLog" not in head:  # a snapshot's key: none of ours
            keys = {"resourceSpans"} if _KEY.search(head) else set()
            keys |= {"resource_spans"} if _SNAKE_KEY.search(head) else set()
        if "resourceSpans" in (keys or ()):
            return "otlp-json"
        if "resource_spans" in (keys or ()):
            return "otlp-snake-case"
    if head[:1] == b"\x0a" and (b"service.name" in head or not _is_text(head)):
        return "otlp-protobuf"
    return None


_OBJECT_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _top_keys(head: bytes) -> set[str] | None:
    """The keys of the first line's object when that line is whole in ``head`` and one
    JSON object; None when it cannot be told from the line alone."""
    first, newline, _ = head.removeprefix(BOM).partition(b"\n")
    if not newline:
        return None
    try:
        return set(_OBJECT_KEYS.decode(first))
    except (msgspec.MsgspecError, RecursionError):
        return None


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > len(head) - 4  # a character cut at the end of the sample
    return True


@dataclass
class TraceFileRead:
    """One trace file's spans as records, and what in it could not be read."""

    spans: list[SpanRecord] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)
    #: The records read before ``spans``, written to disk past the budget
    #: (``read_trace_file(spill=...)``).
    spilled: Spilled | None = None
    #: The trace ids and conversation ids of the records in :attr:`spilled` (what an
    #: ingest looks archived runs up by, without reading the records back).
    spilled_traces: set[str] = field(default_factory=set)
    spilled_conversations: set[str] = field(default_factory=set)

    def trace_ids(self) -> set[str]:
        """The trace ids of every record read, in memory or spilled."""
        return {record.trace_id for record in self.spans} | self.spilled_traces

    def conversation_ids(self) -> set[str]:
        """The conversation ids of every record read, in memory or spilled."""
        held = {record.conversation_id for record in self.spans if record.conversation_id}
        return held | self.spilled_conversations


def read_trace_file(
    path: Path, *, messages: bool = False, spill: SpillTo | None = None
) -> TraceFileRead:
    """Every span of the OTLP JSON file at ``path`` as a :class:`SpanRecord` (``messages``:
    with the message texts a what-if replays). A line that is not OTLP JSON is a problem
    naming its line; the other lines are still read. ``spill``: write the records to
    files in its folder, partitioned by trace, whenever ``spill.spans`` are held
    (:attr:`TraceFileRead.spilled`), so that a file of any size is read in bounded memory.
    """
    result = TraceFileRead()
    writer = _Spiller(spill) if spill is not None else None
    shown = display_path(path)
    whole = _pretty(path)
    position = 0
    try:
        for document in iter_documents(path, lines=not whole):
            line = document.source.line
            if document.refused is not None:
                result.problems.append(ReadProblem(shown, line, None, document.refused))
                continue
            try:
                request = decode_request(document.payload)
            except msgspec.ValidationError as error:
                reason = f"not OTLP JSON of the expected shape: {error}"
                reason += _traces_held(document.payload)
                result.problems.append(ReadProblem(shown, line, None, reason))
                continue
            except msgspec.DecodeError as error:
                reason = f"invalid JSON: {error}{_traces_held(document.payload)}"
                result.problems.append(ReadProblem(shown, line, None, reason))
                continue
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        record = span_record(span, shown, line, position, messages=messages)
                        position += 1
                        if not record.trace_id or not record.span_id:
                            reason = "a span without a valid trace id and span id: not read"
                            result.problems.append(ReadProblem(shown, line, None, reason))
                            continue
                        result.spans.append(record)
            if writer is not None and len(result.spans) >= writer.spans:
                writer.write(result.spans)
                result.spans = []
    except ReadError as error:
        result.problems.append(
            ReadProblem(error.source.path, error.source.line, None, error.reason)
        )
    if writer is not None and writer.counts:
        result.spilled = Spilled(writer.spill.folder, writer.token, tuple(writer.counts))
        result.spilled_traces = writer.traces
        result.spilled_conversations = writer.conversations
    return result


class _Spiller:
    """A file's records written out past the budget, under a name of their own."""

    def __init__(self, spill: SpillTo) -> None:
        self.spill = spill
        self.spans = spans_held(spill.spans)
        self.token = new_token()
        self.counts: list[int] = []
        self.traces: set[str] = set()
        self.conversations: set[str] = set()

    def write(self, records: list[SpanRecord]) -> None:
        self.traces.update(record.trace_id for record in records)
        self.conversations.update(r.conversation_id for r in records if r.conversation_id)
        entries = ((UNPLACED, record) for record in records)
        folder = self.spill.folder if self.counts else made(self.spill.folder)
        written = write_parts(folder, self.token, entries, PARTITIONS)
        self.counts = [a + b for a, b in zip(self.counts or [0] * PARTITIONS, written, strict=True)]


_TRACE_ID = re.compile(rb'"traceId"\s*:\s*"([0-9a-fA-F]{32})"')
#: Trace ids a problem names before it says how many more.
_TRACES_NAMED = 5


def _traces_held(payload: bytes) -> str:
    """What a line that could not be read held, so a user knows which runs lack its spans:
    ``; it held spans of trace(s) ...`` (the trace ids legible in it, in order), or ``""``.

    >>> _traces_held(b'{"spans":[{"traceId":"' + b"ab" * 16 + b'","spanId":"0')
    '; it held spans of trace(s) abababababababababababababababab: their runs lack them'
    """
    found = dict.fromkeys(m.group(1).decode().lower() for m in _TRACE_ID.finditer(payload))
    if not found:
        return ""
    named = list(found)[:_TRACES_NAMED]
    more = len(found) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more else "")
    return f"; it held spans of trace(s) {listed}: their runs lack them"


def _pretty(path: Path) -> bool:
    """Whether the file holds one request written over many lines: its first line cannot
    end a JSON document (a lone ``{``, or ``{"resourceSpans": [``) and its second does not
    open one, as each line of JSON Lines does."""
    head = _head(path, SNIFF_BYTES).removeprefix(BOM)
    first, newline, rest = head.partition(b"\n")
    if not newline:
        return False
    second = rest.partition(b"\n")[0]
    return first.rstrip().endswith((b"{", b"[", b",", b":")) and not second.startswith(b'{"')


def _head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a regular file, decompressed if gzip; ``b""`` for anything
    else (a FIFO or a device is never opened: the snapshot reader names it).

    Only the head is inflated: inflating a megabyte to look at 64 KiB cost as much as
    reading the whole corpus snapshot after it (docs/benchmarks.md)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return b""
        with path.open("rb") as handle:
            packed = handle.read(2) == GZIP_MAGIC
            handle.seek(0)
            if not packed:
                return handle.read(size)
            return inflated_head(handle, size)
    except (OSError, GzipError):
        return b""  # the snapshot reader says why it cannot be read
