"""Span records past a budget kept on disk, partitioned by trace, until runs are assembled.

A run is assembled only once all of its spans are read, and a trace may be spread over
files in any order: held in memory, the records grow with the input. Past
:data:`SPANS_HELD` records they are written to temporary files (msgpack batches),
partitioned by a hash of their trace id so that each trace's spans meet in one
partition, and each partition past the budget is split again. Each record travels with
its file's ordinal, so a partition is put back in reading order (the first copy of a
span counts). What it deliberately gets wrong: one run larger than the budget is held
whole when it is assembled.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from contextledger.read.cycles import collector_paused
from contextledger.read.otel._copies import Copies, Place, Started, run_of
from contextledger.read.otel._spans import SpanRecord
from contextledger.read.otel._spill_files import (
    PARTITIONS,
    Entry,
    LightEntry,
    Spilled,
    append_light,
    load,
    load_light,
    new_token,
    part_path,
    read_batches,
    write_parts,
)
from contextledger.read.snapshot import ReadProblem

#: Span records a process holds before it writes them to disk: about 6 MiB of the
#: ledger's records (a few times more with a what-if's message texts).
SPANS_HELD = 1 << 13
#: A spill folder's name in the system's temporary folder: what it is for, the id of the
#: process it belongs to, a unique part (:func:`spill_folder`).
SPILL_NAME = re.compile(r"contextledger-spill-[a-z]+-(\d+)-[0-9a-f]{32}")
#: A spill folder of a process that is gone is removed once left this long untouched.
ABANDONED_AFTER_SECONDS = 600.0


@dataclass(frozen=True)
class SpillTo:
    """Where a reader writes span records past ``spans`` (default :data:`SPANS_HELD`):
    a folder its caller removes, made by the first writer (:func:`made`), so that a
    read that writes nothing leaves nothing behind, even when it is killed."""

    folder: str
    spans: int | None = None

    @classmethod
    def budgeted(cls, folder: str) -> SpillTo:
        """A spill to ``folder`` with this process's budget (a worker is told it)."""
        return cls(folder, spans_held(None))


def spill_folder(purpose: str) -> str:
    """A new folder name in the system's temporary folder for span records past the
    budget, not made here (:class:`SpillTo`: the first writer makes it). It carries this
    process's id, so that a later command removes it if this process was killed before
    it could (:func:`sweep_abandoned`, run here first)."""
    sweep_abandoned()
    name = f"contextledger-spill-{purpose}-{os.getpid()}-{uuid.uuid4().hex}"
    return os.path.join(tempfile.gettempdir(), name)


def removed_with(owner: object, folder: str) -> weakref.finalize:
    """Remove ``folder`` (if it was made) when ``owner`` is collected or at exit; call the
    result to remove it now."""
    return weakref.finalize(owner, shutil.rmtree, folder, ignore_errors=True)


class OwnFolder:
    """A :func:`spill_folder` made now (as :class:`tempfile.TemporaryDirectory`, but swept
    by a later command if this process is killed): removed by :meth:`cleanup`, or when
    collected, or at exit."""

    def __init__(self, purpose: str) -> None:
        self.name = made(spill_folder(purpose))
        self.cleanup = removed_with(self, self.name)


def sweep_abandoned(root: str | None = None) -> list[str]:
    """Remove the spill folders under ``root`` (the system's temporary folder) of this
    user's processes that are gone: a process killed outright (SIGKILL, the machine
    stopping) cannot remove its own. A folder touched in the last
    :data:`ABANDONED_AFTER_SECONDS` is left, in case its process id belongs to a process
    this one cannot see (another container sharing the folder). Returns those removed."""
    removed = []
    with contextlib.suppress(OSError), os.scandir(root or tempfile.gettempdir()) as entries:
        for entry in entries:
            matched = SPILL_NAME.fullmatch(entry.name)
            if matched is None or _alive(int(matched[1])):
                continue
            try:
                stat = entry.stat(follow_symlinks=False)
                if not entry.is_dir(follow_symlinks=False) or stat.st_uid != os.getuid():
                    continue
                if time.time() - _last_touched(entry.path, stat.st_mtime) < ABANDONED_AFTER_SECONDS:
                    continue
            except OSError:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (this user's or another's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _last_touched(folder: str, modified: float) -> float:
    """The latest change time of ``folder`` and of everything in it."""
    latest = modified
    for path, folders, files in os.walk(folder):
        for name in folders + files:
            with contextlib.suppress(OSError):
                latest = max(latest, os.stat(os.path.join(path, name)).st_mtime)
    return latest


def made(folder: str) -> str:
    """``folder``, made (private to this user) if it is not there yet."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def spans_held(given: int | None) -> int:
    """``given``, or the budget :data:`SPANS_HELD` says now (a test may lower it)."""
    return SPANS_HELD if given is None else given


class SpanSpill:
    """Span records on disk: those a :class:`~contextledger.read.otel.TraceRuns` let go
    of (``held`` at a time), and those its files' readers wrote (:class:`Spilled`), in a
    temporary folder of its own (under ``folder``, when given) removed by :meth:`close`,
    or when it is collected, or at exit."""

    def __init__(self, spans: int, folder: str | None = None) -> None:
        self.spans = spans
        self.folder = made(
            spill_folder("runs")
            if folder is None
            else os.path.join(made(folder), f"runs-{uuid.uuid4().hex}")
        )
        self._remove = removed_with(self, self.folder)
        self._token = new_token()
        self._counts = [0] * PARTITIONS
        self._adopted: list[tuple[Spilled, int]] = []
        self._held: list[Entry] = []

    def add(self, entries: Iterable[Entry]) -> None:
        """Take in ``entries``, writing them out once :attr:`spans` are held."""
        self._held.extend(entries)
        if len(self._held) >= self.spans:
            self._write()

    def adopt(self, spilled: Spilled, ordinal: int) -> None:
        """Take in the records a file's reader wrote (the file's ``ordinal``)."""
        self._adopted.append((spilled, ordinal))

    def _write(self) -> None:
        if self._held:
            written = write_parts(self.folder, self._token, self._held, PARTITIONS)
            self._counts = [a + b for a, b in zip(self._counts, written, strict=True)]
            self._held = []

    def groups(self) -> list[list[tuple[str, int | None]]]:
        """The files of each group of traces, in partition order: every span of a trace
        is in one group, and a group holds at most :attr:`spans` records unless one
        trace holds more (a partition past it is split again)."""
        self._write()
        out: list[list[tuple[str, int | None]]] = []
        for part in range(PARTITIONS):
            files: list[tuple[str, int | None]] = []
            count = self._counts[part]
            if count:
                files.append((part_path(self.folder, self._token, part), None))
            for spilled, ordinal in self._adopted:
                if spilled.counts[part]:
                    files.append((part_path(spilled.folder, spilled.token, part), ordinal))
                    count += spilled.counts[part]
            if count:
                out.extend(self._fitted(files, count, 1))
        return out

    def _fitted(
        self, files: list[tuple[str, int | None]], count: int, level: int
    ) -> list[list[tuple[str, int | None]]]:
        if count <= self.spans:
            return [files]
        parts = 2 * -(-count // self.spans)
        token = new_token()
        counts = [0] * parts
        for path, ordinal in files:
            for batch in read_batches(path, ordinal):
                written = write_parts(self.folder, token, batch, parts, level)
                counts = [a + b for a, b in zip(counts, written, strict=True)]
            remove(path)
        out = []
        for part, held in enumerate(counts):
            if held == count:  # one trace past the budget: held whole
                return [[(part_path(self.folder, token, part), None)]]
            if held:
                out.extend(
                    self._fitted([(part_path(self.folder, token, part), None)], held, level + 1)
                )
        return out

    def arrange(self, before: Copies) -> Arranged:
        """Runs put in order, their records in files of at most :attr:`spans` each.

        Each group of traces is read back in reading order and its copies told apart
        (``before``: those told apart before the records spilled); the run of each
        trace, its first start and its count are kept. Runs are ordered by their first
        start (ties: run id) and cut into ranges; each group is read again and its kept
        records written to their range's file (:meth:`range_runs` reads it). Only a
        group holding copies of a span has its records decoded before then (to tell a
        copy from a conflict); the others are sorted and moved as bytes."""
        out = Arranged(conflicts=before.conflicts, copies=before.copies)
        groups = self.groups()
        for files in groups:
            spans = _kept_light(load_light(files))
            if spans is None:  # copies of a span: told apart by their content
                with collector_paused():
                    found = _read_group(files)
                out.conflicts.extend(found.conflicts)
                for where, copy in found.copies.items():
                    if where not in out.copies or copy[0] < out.copies[where][0]:
                        out.copies[where] = copy
                spans = [(place, record) for place, record in found.kept.values()]
            by_trace: dict[str, list[tuple[Place, Started]]] = {}
            for place, span in spans:
                by_trace.setdefault(span.trace_id, []).append((place, span))
            for trace, held in by_trace.items():
                start = min(span.start for _, span in held)
                out.traces[trace] = TraceFacts(run_of(trace, held), start, len(held), held[0][0])
        range_of = self._cut(out)
        for files in groups:
            buckets: dict[int, list[LightEntry]] = {}
            seen: set[tuple[str, str]] = set()
            for tools, entry in load_light(files):
                key = (entry.trace_id, entry.span_id)
                if key not in seen:  # the first copy read is the one kept
                    seen.add(key)
                    index = range_of[out.traces[entry.trace_id].run_id]
                    buckets.setdefault(index, []).append((tools, entry))
            for index, entries in buckets.items():
                append_light(self._range_path(index), entries)
            for path, _ in files:
                remove(path)
        return out

    def _cut(self, out: Arranged) -> dict[str, int]:
        """``out.ranges``: runs in order, cut into ranges of at most :attr:`spans`
        records (one run past it alone); each run's range."""
        started: dict[str, int] = {}
        counts: dict[str, int] = {}
        for facts in out.traces.values():
            earlier = started.get(facts.run_id)
            started[facts.run_id] = facts.start if earlier is None else min(earlier, facts.start)
            counts[facts.run_id] = counts.get(facts.run_id, 0) + facts.count
        range_of: dict[str, int] = {}
        held = 0
        for run_id in sorted(started, key=lambda run_id: (started[run_id], run_id)):
            if not out.ranges or (held and held + counts[run_id] > self.spans):
                out.ranges.append([])
                held = 0
            out.ranges[-1].append(run_id)
            range_of[run_id] = len(out.ranges) - 1
            held += counts[run_id]
        return range_of

    def range_runs(
        self,
        index: int,
        traces: dict[str, TraceFacts],
        span_order: Callable[[SpanRecord], tuple[Any, ...]],
    ) -> dict[str, list[SpanRecord]]:
        """The records of the ``index``-th range of runs, by run, each run's in
        ``span_order`` (ties: as they were taken in: by trace, in reading order)."""
        path = self._range_path(index)
        by_run: dict[str, list[tuple[tuple[Any, ...], SpanRecord]]] = {}
        with collector_paused():
            for ordinal, record in load([(path, None)]):
                facts = traces[record.trace_id]
                key = (span_order(record), facts.first, (ordinal, record.position))
                by_run.setdefault(facts.run_id, []).append((key, record))
        remove(path)
        out = {}
        for run_id, keyed in by_run.items():
            keyed.sort(key=_first)
            out[run_id] = [record for _, record in keyed]
        return out

    def _range_path(self, index: int) -> str:
        return os.path.join(self.folder, f"runs.{index}")

    def close(self) -> None:
        """Remove every file written (also the files' readers' once adopted)."""
        for spilled, _ in self._adopted:
            for part, count in enumerate(spilled.counts):
                if count:
                    remove(part_path(spilled.folder, spilled.token, part))
        self._adopted = []
        self._held = []
        self._remove()


def remove(path: str) -> None:
    """Remove the file at ``path`` if it is still there."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _kept_light(entries: list[LightEntry]) -> list[tuple[Place, Started]] | None:
    """Each entry's place and itself, in reading order; None when a span is there twice."""
    seen: set[tuple[str, str]] = set()
    spans: list[tuple[Place, Started]] = []
    for _, entry in entries:
        key = (entry.trace_id, entry.span_id)
        if key in seen:
            return None
        seen.add(key)
        spans.append(((entry.ordinal, entry.position), entry))
    return spans


def _first(keyed: tuple[tuple[Any, ...], SpanRecord]) -> tuple[Any, ...]:
    return keyed[0]


def _read_group(files: list[tuple[str, int | None]]) -> Copies:
    """The records of one group of traces on disk, told apart in reading order."""
    found = Copies()
    entries = load(files)
    entries.sort(key=lambda entry: (entry[0], entry[1].position))
    for ordinal, record in entries:
        found.take((ordinal, record.position), record)
    return found


@dataclass(slots=True)
class TraceFacts:
    """What is held of each trace while its records are on disk."""

    run_id: str
    start: int
    count: int
    #: Its first kept span's place in reading order (ties between a run's spans).
    first: Place


@dataclass
class Arranged:
    """What :meth:`SpanSpill.arrange` gives: each trace's facts, the runs of each
    range in order, and the conflicting copies and the copies, with their places."""

    traces: dict[str, TraceFacts] = field(default_factory=dict)
    ranges: list[list[str]] = field(default_factory=list)
    conflicts: list[tuple[Place, str, ReadProblem]] = field(default_factory=list)
    copies: dict[tuple[str, int | None, str], tuple[Place, SpanRecord, SpanRecord]] = field(
        default_factory=dict
    )
