"""Which copy of a span counts, and which run a trace belongs to.

A span is its (trace id, span id): the first copy read counts, a later equal copy is a
duplicate, a later different one a conflict (the run-identity rule of
:mod:`~contextledger.read.identity`, applied to spans). Reading order is each record's
:data:`Place`, so the rule gives the same answer to records put back in that order from
disk as to records taken in as they were read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from contextledger.read.otel._spans import SpanRecord
from contextledger.read.snapshot import ReadProblem

#: A span's place in reading order: its file's ordinal, its position in the file.
Place = tuple[int, int]


class Started(Protocol):
    """What :func:`run_of` reads of a span (a record, or a record on disk unread)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def conversation_id(self) -> str | None: ...


class Copies:
    """Each span's first copy in reading order (``kept``); a later equal copy is a copy
    of it, a later different one a conflict (named, not counted)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], tuple[Place, SpanRecord]] = {}
        self.conflicts: list[tuple[Place, str, ReadProblem]] = []
        #: The first copy read from each line of each trace, with the copy it repeats.
        self.copies: dict[tuple[str, int | None, str], tuple[Place, SpanRecord, SpanRecord]] = {}

    def take(self, sequence: Place, record: SpanRecord) -> None:
        key = (record.trace_id, record.span_id)
        earlier = self.kept.get(key)
        if earlier is None:
            self.kept[key] = (sequence, record)
            return
        kept = earlier[1]
        if kept.same_content(record):
            here = (record.path, record.line, record.position)
            if (kept.path, kept.line, kept.position) == here:
                return  # the same line read again (a grown file): no copy
            where = (record.path, record.line, record.trace_id)
            self.copies.setdefault(where, (sequence, record, kept))
        else:
            reason = (
                f"span {record.span_id} of trace {record.trace_id} already read from "
                f"{_where(kept)} with different content; this copy was not counted "
                "(the first copy is kept)"
            )
            problem = ReadProblem(record.path, record.line, None, reason)
            self.conflicts.append((sequence, record.trace_id, problem))


def run_of(trace: str, spans: Sequence[tuple[Place, Started]]) -> str:
    """The trace's conversation id (the earliest span carrying one; ties: the least id),
    else the trace id."""
    carrying = [(r.start, r.conversation_id) for _, r in spans if r.conversation_id]
    return str(min(carrying)[1]) if carrying else trace


def _where(record: SpanRecord) -> str:
    return record.path if record.line is None else f"{record.path}:{record.line}"
