"""The spill's files: span records as length-framed msgpack batches, one file per writer
(its token) and partition of the trace ids, read back in reading order.

Apart from :mod:`._spill` (when to spill, and putting partitions back together into
runs) because this is only the format: what a batch holds, written and read back.
"""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import msgspec

from contextledger.read.cycles import collector_paused
from contextledger.read.otel._spans import SpanRecord

#: Partitions by trace id: a trace's spans meet in one of them.
PARTITIONS = 64
#: The ordinal of records a file's reader wrote, given when the file is taken in.
UNPLACED = -1

#: One record and the ordinal of the file it was read from (its reading order is the
#: ordinal, then the record's position in its file).
Entry = tuple[int, SpanRecord]

#: A call's tools offered, as a record holds them.
Tools = tuple[tuple[str, int], ...]


class _Placed(msgspec.Struct, array_like=True, gc=False):
    """What an entry holds before its record: where it was read and what assembling runs
    sorts it by, and its record's tools by their place in the batch's list."""

    ordinal: int
    trace_id: str
    span_id: str
    position: int
    start: int
    conversation_id: str | None
    tools: int  # -1: None


class _Stored(_Placed, array_like=True, gc=False):
    """An entry as written: its place, then its record (a pass that only sorts records
    and moves them leaves them undecoded: :class:`_Light`)."""

    record: SpanRecord


class _Batch(msgspec.Struct, array_like=True, gc=False):
    """Entries written at once. The calls of an agent send the same tools (hundreds of
    definitions, with OpenInference's): written once a batch, read back as one tuple."""

    tools: list[Tools]
    entries: list[_Stored]


class _Light(_Placed, array_like=True, gc=False):
    """A :class:`_Stored` with its record left as bytes."""

    record: msgspec.Raw


class _LightBatch(msgspec.Struct, array_like=True, gc=False):
    tools: list[Tools]
    entries: list[_Light]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Batch)
_LIGHT = msgspec.msgpack.Decoder(_LightBatch)
_FRAME = struct.Struct("<I")


@dataclass(frozen=True)
class Spilled:
    """Span records a file's reader wrote to ``folder/token.{k}``: ``counts[k]`` records
    of partition ``k``, in reading order, ordinal :data:`UNPLACED`."""

    folder: str
    token: str
    counts: tuple[int, ...]


def partition_of(trace_id: str, parts: int, level: int = 0) -> int:
    """The partition of a trace among ``parts``; ``level`` > 0 splits a partition again
    with a hash unrelated to the first (CRC-32's is linear: a prefix would not do).

    >>> trace = "5b8efff798038103d269b633813fc60c"
    >>> partition_of(trace, PARTITIONS), partition_of(trace, PARTITIONS, level=1)
    (33, 44)
    """
    if level == 0:
        return zlib.crc32(trace_id.encode()) % parts
    digest = hashlib.blake2b(f"{level}:{trace_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % parts


def new_token() -> str:
    """A name no other writer in the folder uses."""
    return uuid.uuid4().hex


def part_path(folder: str, token: str, part: int) -> str:
    return os.path.join(folder, f"{token}.{part}")


def write_parts(
    folder: str, token: str, entries: Iterable[Entry], parts: int, level: int = 0
) -> list[int]:
    """Append ``entries`` to ``folder/token.{k}`` by the partition of their trace; the
    count written to each."""
    grouped: list[list[Entry]] = [[] for _ in range(parts)]
    for entry in entries:
        grouped[partition_of(entry[1].trace_id, parts, level)].append(entry)
    counts = []
    for part, group in enumerate(grouped):
        counts.append(len(group))
        if group:
            append_batch(part_path(folder, token, part), group)
    return counts


def append_batch(path: str, entries: Sequence[Entry]) -> None:
    """Append one batch of entries to the file at ``path``."""
    places: dict[int, int] = {}  # id of a tools tuple (held by ``table``) -> its place
    table: list[Tools] = []
    stored = []
    for ordinal, record in entries:
        tools = record.tools
        place = -1
        if tools is not None:
            place = places.get(id(tools), -1)
            if place < 0:
                place = places[id(tools)] = len(table)
                table.append(tools)
        stored.append(
            _Stored(
                ordinal,
                record.trace_id,
                record.span_id,
                record.position,
                record.start,
                record.conversation_id,
                place,
                record,
            )
        )
        record.tools = None
    try:
        payload = _ENCODER.encode(_Batch(table, stored))
    finally:
        for entry in stored:
            entry.record.tools = table[entry.tools] if entry.tools >= 0 else None
    _append(path, payload)


def _append(path: str, payload: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(_FRAME.pack(len(payload)))
        handle.write(payload)


#: An entry read light: its record's tools (the tuple), and the entry.
LightEntry = tuple[Tools | None, _Light]


def load_light(files: Iterable[tuple[str, int | None]]) -> list[LightEntry]:
    """The entries of ``files`` as :func:`load` reads them, records left as bytes, in
    reading order."""
    shared: dict[Tools, Tools] = {}
    entries: list[LightEntry] = []
    with collector_paused():
        for path, ordinal in files:
            for payload in _payloads(path):
                batch = _LIGHT.decode(payload)
                table = [shared.setdefault(tools, tools) for tools in batch.tools]
                for entry in batch.entries:
                    if entry.ordinal == UNPLACED and ordinal is not None:
                        entry.ordinal = ordinal
                    entries.append((table[entry.tools] if entry.tools >= 0 else None, entry))
    entries.sort(key=_reading_order)
    return entries


def _reading_order(entry: LightEntry) -> tuple[int, int]:
    return entry[1].ordinal, entry[1].position


def append_light(path: str, entries: Sequence[LightEntry]) -> None:
    """Append entries read light to the file at ``path`` (their records as read)."""
    places: dict[int, int] = {}
    table: list[Tools] = []
    for tools, entry in entries:
        place = -1
        if tools is not None:
            place = places.get(id(tools), -1)
            if place < 0:
                place = places[id(tools)] = len(table)
                table.append(tools)
        entry.tools = place
    _append(path, _ENCODER.encode(_LightBatch(table, [entry for _, entry in entries])))


def _payloads(path: str) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while header := handle.read(_FRAME.size):
            (size,) = _FRAME.unpack(header)
            yield handle.read(size)


def read_batches(
    path: str, ordinal: int | None = None, shared: dict[Tools, Tools] | None = None
) -> Iterator[list[Entry]]:
    """The batches of the file at ``path``; ``ordinal``: given to its unplaced entries;
    ``shared``: equal tool lists made one tuple, across batches."""
    for payload in _payloads(path):
        batch = _DECODER.decode(payload)
        table = batch.tools
        if shared is not None:
            table = [shared.setdefault(tools, tools) for tools in table]
        entries = []
        for entry in batch.entries:
            record = entry.record
            record.tools = table[entry.tools] if entry.tools >= 0 else None
            placed = entry.ordinal
            if placed == UNPLACED and ordinal is not None:
                placed = ordinal
            entries.append((placed, record))
        yield entries


def load(files: Iterable[tuple[str, int | None]]) -> list[Entry]:
    """Every entry of ``files`` (each a path and the ordinal of its unplaced entries),
    equal tool lists made one tuple each, as the reader makes them (the ledger's offer
    rows are shared by the calls that send the same tools)."""
    shared: dict[Tools, Tools] = {}
    with collector_paused():
        return [
            entry
            for path, ordinal in files
            for batch in read_batches(path, ordinal, shared)
            for entry in batch
        ]
