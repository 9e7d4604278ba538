"""What counts as a run: one rule, used by every path that reads runs.

A run is its ``run_id``. The first copy read is kept. A later copy with the same
content (its JSON, insignificant whitespace aside, hashes the same) is a
*duplicate*: counted once and named. A later copy with other content is a
*conflict*: not counted, named as a problem, so the exit status says something
was wrong. Reading folders that overlap, a file beside its copy or its JSON Lines
twin, or an archive and the files it came from, therefore never multiplies a
run's counts. Content is compared only when an id arrives twice (the reader's fast
path pays nothing; ingest stores each run's content digest): first with insignificant
whitespace removed, and, only where that differs, as the snapshots' decoded JSON
values, the wrapper around them aside, so a copy re-serialized with other escapes or
number spellings, or a bare copy of a wrapped run, is still the same run.

A run's id may come from its file's name (a bare snapshot), so one recording can
arrive under two ids: a copy under another name, a symlink, a bare copy of a wrapped
run. The recording itself says which execution it is (footprintjs's ``runId``, the
*execution id*): a later copy under another id whose execution id was already read,
with the same snapshot (its wrapper aside), is a duplicate of the first too. Two
different snapshots of one execution id are two runs (ids can repeat across
machines); only the same recording is folded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from contextledger.read.digest import content_digest, recording_digest
from contextledger.read.snapshot import ReadError, ReadProblem, RunSource, iter_documents

#: One row per copy that was not counted because an earlier copy was the same run.
DUPLICATES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("kept_path", pa.string(), nullable=False),
        pa.field("kept_line", pa.int64()),
        # the kept copy's run id: another when one recording arrived under two ids
        pa.field("kept_run_id", pa.string(), nullable=False),
    ]
)


def _payload_at(source: RunSource) -> bytes | None:
    """The document at ``source`` (its file, and line for JSON Lines), read again; None
    when it can no longer be read."""
    from pathlib import Path

    try:
        for document in iter_documents(Path(source.path)):
            if document.source.line == source.line:
                return document.payload
    except ReadError:
        return None
    return None


#: How a conflict's reason ends (:func:`is_conflict` reads it back).
CONFLICT_NOTE = "with different content; this copy was not counted (the first copy is kept)"


def is_conflict(reason: str) -> bool:
    """Whether a problem's ``reason`` is a conflicting copy's (read, and not counted: a run
    id that other content already holds), not an unreadable input's.

    >>> is_conflict(f"run_id r already read from a.json {CONFLICT_NOTE}")
    True
    >>> is_conflict("invalid JSON: truncated")
    False
    """
    return reason.startswith("run_id ") and reason.endswith(CONFLICT_NOTE)


@dataclass
class _Copy:
    """One copy of a run: where it is, and its digests once computed."""

    source: RunSource
    digest: str | None = None
    snapshot: str | None = None
    #: The run id it was read under.
    run_id: str = ""

    def content(self) -> str | None:
        if self.digest is None and (payload := _payload_at(self.source)) is not None:
            self.digest = content_digest(payload)
        return self.digest

    def recording(self) -> str | None:
        if self.snapshot is None and (payload := _payload_at(self.source)) is not None:
            self.snapshot = recording_digest(payload)
        return self.snapshot

    def same_run_as(self, other: _Copy) -> bool:
        """Whether the two copies hold the same recording: the same source, the same
        content, or (only then re-read and decoded) the same snapshot as a JSON value."""
        if self.source == other.source:
            return True
        mine, theirs = self.content(), other.content()
        if mine is not None and mine == theirs:
            return True
        mine, theirs = self.recording(), other.recording()
        return mine is not None and mine == theirs


@dataclass
class RunIdentity:
    """Decides, run by run in reading order, which copy of each ``run_id`` counts.

    ``known`` seeds it with runs already counted elsewhere (an archive's runs:
    ``run_id -> (content digest, path, line)``); ``known_executions`` with their
    execution ids (``execution id -> (run_id, content digest, path, line)``).

    >>> identity = RunIdentity()
    >>> identity.admit("r1", RunSource("a.json"), "d1")
    True
    >>> identity.admit("r1", RunSource("b.json"), "d1"), identity.admit("r1", RunSource("c"), "d2")
    (False, False)
    >>> len(identity.duplicates), len(identity.conflicts)
    (1, 1)
    """

    known: Mapping[str, tuple[str, str, int | None]] = field(default_factory=dict)
    known_executions: Mapping[str, tuple[str, str, str, int | None]] = field(default_factory=dict)
    duplicates: list[dict[str, object]] = field(default_factory=list)
    conflicts: list[ReadProblem] = field(default_factory=list)
    _seen: dict[str, _Copy] = field(default_factory=dict, repr=False)
    _executions: dict[str, list[_Copy]] = field(default_factory=dict, repr=False)

    def admit(
        self,
        run_id: str,
        source: RunSource,
        digest: str | None = None,
        execution_id: str | None = None,
    ) -> bool:
        """Whether this copy of ``run_id`` counts: True the first time the id is seen,
        unless it is a recording already counted under another id.

        A later copy is recorded as a duplicate or a conflict (see the module docstring).
        ``digest``: the copy's :func:`content_digest`, when the caller has it;
        ``execution_id``: its snapshot's ``runId`` (:attr:`Run.execution_id`).
        """
        earlier = self._seen.get(run_id)
        if earlier is None and run_id in self.known:
            known_digest, known_path, known_line = self.known[run_id]
            earlier = _Copy(RunSource(known_path, known_line), known_digest, run_id=run_id)
            self._seen[run_id] = earlier
        copy = _Copy(source, digest, run_id=run_id)
        if earlier is None:
            twin = self._twin(copy, execution_id)
            if twin is not None:
                self._duplicate(copy, twin)
                return False
            self._seen[run_id] = copy
            if execution_id is not None:
                self._executions.setdefault(execution_id, []).append(copy)
            return True
        if copy.same_run_as(earlier):
            self._duplicate(copy, earlier)
        else:
            reason = f"run_id {run_id} already read from {earlier.source} {CONFLICT_NOTE}"
            self.conflicts.append(ReadProblem(source.path, source.line, run_id, reason))
        return False

    def _twin(self, copy: _Copy, execution_id: str | None) -> _Copy | None:
        """The copy counted under another id that holds the same recording, if any."""
        if execution_id is None:
            return None
        counted = self._executions.setdefault(execution_id, [])
        if not counted and execution_id in self.known_executions:
            run_id, known_digest, path, line = self.known_executions[execution_id]
            counted.append(_Copy(RunSource(path, line), known_digest, run_id=run_id))
        return next((c for c in counted if copy.same_run_as(c)), None)

    def _duplicate(self, copy: _Copy, kept: _Copy) -> None:
        self.duplicates.append(
            {
                "run_id": copy.run_id,
                "path": copy.source.path,
                "line": copy.source.line,
                "kept_path": kept.source.path,
                "kept_line": kept.source.line,
                "kept_run_id": kept.run_id,
            }
        )

    def duplicate_table(self) -> pa.Table:
        """The duplicates recorded so far, as a table of ``DUPLICATES``."""
        return pa.Table.from_pylist(self.duplicates, schema=DUPLICATES)


def describe_duplicates(duplicates: pa.Table, *, limit: int = 5) -> list[str]:
    """Lines for people: each duplicate copy (the first ``limit``) and where the kept one is.

    >>> rows = [{"run_id": "r", "path": "b.json", "line": None, "kept_path": "a.json",
    ...          "kept_line": None, "kept_run_id": "r"}]
    >>> describe_duplicates(pa.Table.from_pylist(rows, schema=DUPLICATES))
    ['duplicate b.json (run r): the same run as a.json, counted once']
    >>> rows[0].update(path="link.json", run_id="link")
    >>> describe_duplicates(pa.Table.from_pylist(rows, schema=DUPLICATES))
    ['duplicate link.json (run link): the same recording as a.json (run r), counted once']
    >>> rows[0].update(path="a.json", run_id="r")
    >>> describe_duplicates(pa.Table.from_pylist(rows, schema=DUPLICATES))
    ['duplicate a.json (run r): the same file given twice, counted once']
    """
    lines = []
    rows = duplicates.to_pylist()
    for row in rows[:limit]:
        copy = ReadProblem(row["path"], row["line"], row["run_id"], "").where
        kept = RunSource(row["kept_path"], row["kept_line"])
        if (row["path"], row["line"]) == (row["kept_path"], row["kept_line"]):
            lines.append(f"duplicate {copy}: the same file given twice, counted once")
        elif row["kept_run_id"] == row["run_id"]:
            lines.append(f"duplicate {copy}: the same run as {kept}, counted once")
        else:
            twin = f"{kept} (run {row['kept_run_id']})"
            lines.append(f"duplicate {copy}: the same recording as {twin}, counted once")
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more duplicate copies, each counted once")
    return lines


def unmatched_ids(ids: Iterable[str], runs: Iterable[str]) -> list[str]:
    """The distinct ``ids`` (labels', standings') that name no run in ``runs``, in order.

    >>> unmatched_ids(["a", "x", "x", "b"], ["a", "b"])
    ['x']
    """
    known = set(runs)
    return list(dict.fromkeys(i for i in ids if i not in known))


def describe_unmatched(
    what: str, ids: list[str], *, limit: int = 3, runs: str = "run read"
) -> str | None:
    """One line naming how many ``what`` rows name no run, and the first few ids
    (``runs``: which runs they were matched against).

    >>> describe_unmatched("outcome label", ["x", "y"])
    'outcome label rows for 2 run id(s) that match no run read: x, y'
    """
    if not ids:
        return None
    shown = ", ".join(ids[:limit]) + (", ..." if len(ids) > limit else "")
    return f"{what} rows for {len(ids)} run id(s) that match no {runs}: {shown}"
