"""What counts as a run: one rule, used by every path that reads runs.

A run is its ``run_id``. The first copy read is kept, unless a later copy of the
same recording has more identity: a wrapper's ``run_id`` (the corpus wrapper, which
also carries the static tool names), where the first took its id from its file's
name. That copy takes the first one's place, whatever the file order, and the first
becomes the duplicate (a copy already archived stays: an archive is append-only). A
later copy with the same content (its JSON, insignificant whitespace aside, hashes the same) is a
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

An OpenTelemetry run is put together from spans of many lines and files, so the rule is
applied to its spans first (:class:`contextledger.read.otel.TraceRuns`): a span is its
(trace id, span id), the first copy read counts, a later equal copy is a duplicate and a
later different one a conflict; the assembled run then passes through this rule as any
run does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from contextledger.read.digest import DIGEST_KIND, content_digest, digest_kind, recording_digest
from contextledger.read.snapshot import ReadError, ReadProblem, RunSource, iter_documents

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")


def __getattr__(name: str) -> pa.Schema:
    """``DUPLICATES``: :func:`duplicates_schema`, made when first asked for."""
    if name != "DUPLICATES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return duplicates_schema()


@functools.cache
def duplicates_schema() -> pa.Schema:
    """One row per copy that was not counted because an earlier copy was the same run.

    Made when first asked for (as ``DUPLICATES``): the ledger's process reads runs
    without importing Arrow (``tables.columns`` declares the same columns for Polars;
    a test keeps the two equal).
    """
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("path", pa.string(), nullable=False),
            pa.field("line", pa.int64()),
            pa.field("kept_path", pa.string(), nullable=False),
            pa.field("kept_line", pa.int64()),
            # the kept copy's run id: another when one recording arrived under two ids
            pa.field("kept_run_id", pa.string(), nullable=False),
            # the kept copy is an archive's (ingested before), not one read now (null: no)
            pa.field("kept_archived", pa.bool_()),
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


@dataclass(eq=False)
class _Copy:
    """One copy of a run: where it is, and its digests once computed."""

    source: RunSource
    digest: str | None = None
    snapshot: str | None = None
    #: The run id it was read under.
    run_id: str = ""
    #: Whether its document names its run (a wrapper's ``run_id``), not its file's name.
    named: bool = False
    #: Its place among the runs counted (None: not counted here, or an archived copy).
    slot: int | None = None
    #: The copy that took its place (a copy of the same recording with more identity).
    replaced_by: _Copy | None = None
    #: Whether it is an archive's copy (ingested before): its file may have changed since.
    archived: bool = False

    def kept(self) -> _Copy:
        """The copy counted for this one's recording now."""
        found = self
        while found.replaced_by is not None:
            found = found.replaced_by
        return found

    def content(self, kind: str | None = None) -> str | None:
        """Its content digest: the one it was given (when of ``kind``, if one is asked
        for), else computed from its source read again (None when it can no longer be)."""
        given = self.digest
        if given is not None and (kind is None or not given or digest_kind(given) == kind):
            return given
        if (payload := _payload_at(self.source)) is None:
            return None
        computed = content_digest(payload, kind or DIGEST_KIND)
        if given is None:
            self.digest = computed
        return computed

    def recording(self) -> str | None:
        if self.snapshot is None and (payload := _payload_at(self.source)) is not None:
            self.snapshot = recording_digest(payload)
        return self.snapshot

    def contents(self, other: _Copy) -> tuple[str | None, str | None]:
        """Both copies' content digests, of one kind: an archived copy's as stored (its
        file may have changed since, so it is never computed again), and this copy's
        computed in that kind when it was given another (an archive written before a
        faster hash still knows its runs)."""
        if other.archived and other.digest:
            return self.content(digest_kind(other.digest)), other.digest
        if self.archived and self.digest:
            return self.digest, other.content(digest_kind(self.digest))
        return self.content(), other.content()

    def same_run_as(self, other: _Copy) -> bool:
        """Whether the two copies hold the same recording: the same source, the same
        content, or (only then re-read and decoded) the same snapshot as a JSON value.

        An archived copy's file may have changed since it was ingested (a snapshot
        rewritten, a trace file appended to): at the same source, only the content digest
        stored then can tell, since re-reading the file would read the new content."""
        if self.source == other.source:
            if not (self.archived or other.archived):
                return True  # one file given twice in this read: the same bytes
            mine, theirs = self.contents(other)
            return not mine or not theirs or mine == theirs
        mine, theirs = self.contents(other)
        if mine is not None and mine == theirs:
            return True
        mine, theirs = self.recording(), other.recording()
        return mine is not None and mine == theirs

    def outranks(self, other: _Copy) -> bool:
        """Whether this copy should be counted in ``other``'s place: it names its run and
        ``other``, counted in this read, took its id from a file name."""
        return self.named and not other.named and other.slot is not None


@dataclass
class RunIdentity:
    """Decides, run by run in reading order, which copy of each ``run_id`` counts, and
    where: :meth:`place` gives each counted copy a slot, the order runs were first read.

    ``known`` seeds it with runs already counted elsewhere (an archive's runs:
    ``run_id -> (content digest, path, line)``); ``known_executions`` with their
    execution ids (``execution id -> (run_id, content digest, path, line)``).

    >>> identity = RunIdentity()
    >>> identity.place("r1", RunSource("a.json"), "d1")
    0
    >>> identity.place("r1", RunSource("b.json"), "d1"), identity.place("r1", RunSource("c"), "d2")
    (None, None)
    >>> len(identity.duplicates), len(identity.conflicts)
    (1, 1)
    """

    known: Mapping[str, tuple[str, str, int | None]] = field(default_factory=dict)
    known_executions: Mapping[str, tuple[str, str, str, int | None]] = field(default_factory=dict)
    conflicts: list[ReadProblem] = field(default_factory=list)
    _seen: dict[str, _Copy] = field(default_factory=dict, repr=False)
    _executions: dict[str, list[_Copy]] = field(default_factory=dict, repr=False)
    #: (the copy not counted, the copy it was counted as), in the order found.
    _copies: list[tuple[_Copy, _Copy]] = field(default_factory=list, repr=False)
    _slots: int = field(default=0, repr=False)
    #: Duplicates found before a copy reached here (a trace's spans read twice).
    _found: list[dict[str, object]] = field(default_factory=list, repr=False)

    def place(
        self,
        run_id: str,
        source: RunSource,
        digest: str | None = None,
        execution_id: str | None = None,
        *,
        named: bool = False,
    ) -> int | None:
        """Where this copy of ``run_id`` counts: a new slot the first time its recording
        is seen, the slot of an earlier copy it takes the place of (it outranks it: see
        the module docstring), or None when it does not count.

        A copy not counted is recorded as a duplicate or a conflict (see the module
        docstring). ``digest``: the copy's :func:`content_digest`, when the caller has it;
        ``execution_id``: its snapshot's ``runId`` (:attr:`Run.execution_id`); ``named``:
        its document names its run (:attr:`Run.named`).
        """
        earlier = self._seen.get(run_id)
        if earlier is None and run_id in self.known:
            known_digest, known_path, known_line = self.known[run_id]
            earlier = _Copy(
                RunSource(known_path, known_line), known_digest, run_id=run_id, archived=True
            )
            self._seen[run_id] = earlier
        copy = _Copy(source, digest, run_id=run_id, named=named)
        if earlier is None:
            twin = self._twin(copy, execution_id)
            if twin is None:
                copy.slot, self._slots = self._slots, self._slots + 1
                self._count(copy, execution_id)
                return copy.slot
            return self._settle(copy, twin.kept(), execution_id)
        if copy.same_run_as(earlier):
            return self._settle(copy, earlier.kept(), execution_id)
        reason = f"run_id {run_id} already read from {earlier.source} {CONFLICT_NOTE}"
        if earlier.archived and earlier.source == source:
            changed = "which changed since it was ingested,"
            reason = f"run_id {run_id} already archived from {source}, {changed} {CONFLICT_NOTE}"
        self.conflicts.append(ReadProblem(source.path, source.line, run_id, reason))
        return None

    def admit(
        self,
        run_id: str,
        source: RunSource,
        digest: str | None = None,
        execution_id: str | None = None,
    ) -> bool:
        """Whether this copy counts, for a caller that keeps the first copy whatever
        comes later (:meth:`place` without ``named``: no copy ever takes another's place).

        >>> RunIdentity().admit("r1", RunSource("a.json"))
        True
        """
        return self.place(run_id, source, digest, execution_id) is not None

    def _settle(self, copy: _Copy, kept: _Copy, execution_id: str | None) -> int | None:
        """``copy`` holds the recording ``kept`` is counted for: it takes ``kept``'s
        slot if it outranks it, else it is a duplicate of it."""
        if not copy.outranks(kept):
            self._copies.append((copy, kept))
            return None
        copy.slot, kept.slot, kept.replaced_by = kept.slot, None, copy
        self._count(copy, execution_id)
        self._copies.append((kept, copy))
        return copy.slot

    def _count(self, copy: _Copy, execution_id: str | None) -> None:
        self._seen.setdefault(copy.run_id, copy)
        if execution_id is not None:
            self._executions.setdefault(execution_id, []).append(copy)

    def _twin(self, copy: _Copy, execution_id: str | None) -> _Copy | None:
        """The copy counted under another id that holds the same recording, if any."""
        if execution_id is None:
            return None
        counted = self._executions.setdefault(execution_id, [])
        if not counted and execution_id in self.known_executions:
            run_id, known_digest, path, line = self.known_executions[execution_id]
            known = _Copy(RunSource(path, line), known_digest, run_id=run_id, archived=True)
            counted.append(known)
        return next((c for c in counted if copy.same_run_as(c)), None)

    def add_duplicates(self, rows: Iterable[dict[str, object]]) -> None:
        """Record copies found not counted before they reached here (rows of
        ``DUPLICATES``: the spans of a trace read twice, found as it is assembled)."""
        self._found.extend({"kept_archived": None, **row} for row in rows)

    @property
    def duplicates(self) -> list[dict[str, object]]:
        """Each copy not counted because another copy of its run counts, and where that
        one is (the copy counted in the end, when one took another's place), then those
        :meth:`add_duplicates` recorded."""
        rows: list[dict[str, object]] = []
        for copy, counted in self._copies:
            kept = counted.kept()
            rows.append(
                {
                    "run_id": copy.run_id,
                    "path": copy.source.path,
                    "line": copy.source.line,
                    "kept_path": kept.source.path,
                    "kept_line": kept.source.line,
                    "kept_run_id": kept.run_id,
                    "kept_archived": kept.archived,
                }
            )
        return rows + self._found

    def duplicate_table(self) -> pa.Table:
        """The duplicates recorded so far, as a table of ``DUPLICATES``."""
        import pyarrow as pa

        return pa.Table.from_pylist(self.duplicates, schema=duplicates_schema())


def put_in_slot(slots: list[T], slot: int, item: T) -> None:
    """Set ``slots[slot]``: a new slot at the end, or an earlier one taken over
    (:meth:`RunIdentity.place`).

    >>> counted: list[str] = []
    >>> for slot, run in [(0, "loop:1"), (1, "s0001"), (0, "s0003-loop")]:
    ...     put_in_slot(counted, slot, run)
    >>> counted
    ['s0003-loop', 's0001']
    """
    if slot == len(slots):
        slots.append(item)
    else:
        slots[slot] = item


def describe_duplicates(
    duplicates: pa.Table | Iterable[Mapping[str, Any]], *, limit: int = 5
) -> list[str]:
    """Lines for people: one per file and the file its kept copies are in (the first
    ``limit`` such pairs), so a copied folder of traces, many runs a file, says each file
    once with a count; a pair of one copy names its line and run. ``duplicates``: a
    table of ``DUPLICATES``, or its rows.

    >>> rows = [{"run_id": "r", "path": "b.json", "line": None, "kept_path": "a.json",
    ...          "kept_line": None, "kept_run_id": "r"}]
    >>> describe_duplicates(rows)
    ['duplicate b.json (run r): the same run as a.json, counted once']
    >>> rows[0].update(path="link.json", run_id="link")
    >>> describe_duplicates(rows)
    ['duplicate link.json (run link): the same recording as a.json (run r), counted once']
    >>> rows[0].update(path="a.json", run_id="r")
    >>> import pyarrow as pa
    >>> describe_duplicates(pa.Table.from_pylist(rows, schema=duplicates_schema()))
    ['duplicate a.json (run r): the same file given twice, counted once']
    >>> rows[0].update(kept_archived=True)
    >>> describe_duplicates(rows)
    ['duplicate a.json (run r): already archived from this file, which changed since ...']
    >>> spans = [{"run_id": f"t{i}", "path": "b.jsonl", "line": 1, "kept_path": "a.jsonl",
    ...           "kept_line": 1, "kept_run_id": f"t{i}"} for i in range(3)]
    >>> describe_duplicates(spans)
    ['duplicate b.jsonl: 3 runs the same as in a.jsonl, each counted once']
    """
    listed = getattr(duplicates, "to_pylist", None)
    pairs: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in listed() if listed is not None else duplicates:
        pairs.setdefault((row["path"], row["kept_path"], _how_duplicate(row)), []).append(row)
    lines = []
    for (path, kept_path, how), rows in list(pairs.items())[:limit]:
        runs = len({row["run_id"] for row in rows})
        if len(rows) == 1:
            lines.append(_one_duplicate(rows[0], how))
        elif how == "archived":
            lines.append(
                f"duplicate {path}: {runs} runs already archived from this file, which "
                "changed since it was ingested (read again), each counted once"
            )
        elif how == "twice":
            lines.append(
                f"duplicate {path}: the same file given twice, {runs} runs each counted once"
            )
        elif how == "run":
            lines.append(
                f"duplicate {path}: {runs} runs the same as in {kept_path}, each counted once"
            )
        else:
            lines.append(
                f"duplicate {path}: {runs} recordings read from {kept_path} under other run "
                "ids, each counted once"
            )
    if len(pairs) > limit:
        rest = list(pairs.values())[limit:]
        copies = sum(len(rows) for rows in rest)
        lines.append(
            f"... and {len(rest)} more file(s) with duplicate copies ({copies} copies in all), "
            "each counted once"
        )
    return lines


def _how_duplicate(row: Mapping[str, Any]) -> str:
    """Why a copy is a duplicate: ``twice`` (its own file read again in this read),
    ``archived`` (its own file, changed since an ingest), ``run`` (the same run
    elsewhere) or ``recording`` (the same recording under another run id)."""
    if (row["path"], row["line"]) == (row["kept_path"], row["kept_line"]):
        return "archived" if row.get("kept_archived") else "twice"
    return "run" if row["kept_run_id"] == row["run_id"] else "recording"


def _one_duplicate(row: Mapping[str, Any], how: str) -> str:
    copy = ReadProblem(row["path"], row["line"], row["run_id"], "").where
    kept = RunSource(row["kept_path"], row["kept_line"])
    if how == "archived":
        changed = "which changed since it was ingested (read again)"
        return f"duplicate {copy}: already archived from this file, {changed}, counted once"
    if how == "twice":
        return f"duplicate {copy}: the same file given twice, counted once"
    if how == "run":
        return f"duplicate {copy}: the same run as {kept}, counted once"
    return (
        f"duplicate {copy}: the same recording as {kept} (run {row['kept_run_id']}), counted once"
    )


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
