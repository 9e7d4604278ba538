"""What counts as a run: one rule, used by every path that reads runs.

A run is its ``run_id``. The first copy read is kept. A later copy with the same
content (its JSON, insignificant whitespace aside, hashes the same) is a
*duplicate*: counted once and named. A later copy with other content is a
*conflict*: not counted, named as a problem, so the exit status says something
was wrong. Reading folders that overlap, a file beside its copy or its JSON Lines
twin, or an archive and the files it came from, therefore never multiplies a
run's counts. Content is compared only when an id arrives twice (the reader's fast
path pays nothing; ingest stores each run's content digest): first with insignificant
whitespace removed, and, only where that differs, as decoded JSON values, so a copy
re-serialized with other escapes or number spellings is still the same run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
import pyarrow as pa

from contextledger.read.snapshot import ReadError, ReadProblem, RunSource, iter_documents

#: One row per copy that was not counted because an earlier copy was the same run.
DUPLICATES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("kept_path", pa.string(), nullable=False),
        pa.field("kept_line", pa.int64()),
    ]
)


def content_digest(payload: bytes) -> str:
    """blake2b-128 of a JSON document with insignificant whitespace removed (fast).

    A pretty-printed snapshot and its one-line JSON Lines twin hash the same.

    >>> content_digest(b'{"a": [1, 2]}\\n') == content_digest(b'{"a":[1,2]}')
    True
    """
    try:
        canonical = msgspec.json.format(payload, indent=-1)
    except msgspec.DecodeError:  # not JSON: hash the bytes as they are
        canonical = payload.strip()
    return _hash(canonical)


def value_digest(payload: bytes) -> str:
    """blake2b-128 of a JSON document's value: escapes, number spellings and key order
    aside (``"\\u00e9"`` and ``"é"``, ``1.50`` and ``1.5``, ``jq -S``'s sorted keys hash
    the same). Slower than :func:`content_digest`; asked for only when two copies'
    content digests differ.

    >>> escaped = b'{"name": "caf\\\\u00e9", "x": 1.50}'
    >>> value_digest(escaped) == value_digest('{"x":1.5,"name":"café"}'.encode())
    True
    """
    try:
        return _hash(msgspec.json.encode(msgspec.json.decode(payload), order="sorted"))
    except msgspec.MsgspecError:
        return _hash(payload.strip())


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


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


@dataclass
class _Copy:
    """One copy of a run: where it is, and its digests once computed."""

    source: RunSource
    digest: str | None = None
    deep: str | None = None

    def content(self) -> str | None:
        if self.digest is None and (payload := _payload_at(self.source)) is not None:
            self.digest = content_digest(payload)
        return self.digest

    def value(self) -> str | None:
        if self.deep is None and (payload := _payload_at(self.source)) is not None:
            self.deep = value_digest(payload)
        return self.deep

    def same_run_as(self, other: _Copy) -> bool:
        """Whether the two copies hold the same run: the same source, the same content,
        or (only then re-read and decoded) the same JSON value."""
        if self.source == other.source:
            return True
        mine, theirs = self.content(), other.content()
        if mine is not None and mine == theirs:
            return True
        mine, theirs = self.value(), other.value()
        return mine is not None and mine == theirs


@dataclass
class RunIdentity:
    """Decides, run by run in reading order, which copy of each ``run_id`` counts.

    ``known`` seeds it with runs already counted elsewhere (an archive's runs:
    ``run_id -> (content digest, path, line)``).

    >>> identity = RunIdentity()
    >>> identity.admit("r1", RunSource("a.json"), "d1")
    True
    >>> identity.admit("r1", RunSource("b.json"), "d1"), identity.admit("r1", RunSource("c"), "d2")
    (False, False)
    >>> len(identity.duplicates), len(identity.conflicts)
    (1, 1)
    """

    known: Mapping[str, tuple[str, str, int | None]] = field(default_factory=dict)
    duplicates: list[dict[str, object]] = field(default_factory=list)
    conflicts: list[ReadProblem] = field(default_factory=list)
    _seen: dict[str, _Copy] = field(default_factory=dict, repr=False)

    def admit(self, run_id: str, source: RunSource, digest: str | None = None) -> bool:
        """Whether this copy of ``run_id`` counts: True the first time the id is seen.

        A later copy is recorded as a duplicate or a conflict (see the module docstring).
        ``digest``: the copy's :func:`content_digest`, when the caller has it.
        """
        earlier = self._seen.get(run_id)
        if earlier is None and run_id in self.known:
            known_digest, known_path, known_line = self.known[run_id]
            earlier = self._seen[run_id] = _Copy(RunSource(known_path, known_line), known_digest)
        if earlier is None:
            self._seen[run_id] = _Copy(source, digest)
            return True
        same = _Copy(source, digest).same_run_as(earlier)
        if same:
            self.duplicates.append(
                {
                    "run_id": run_id,
                    "path": source.path,
                    "line": source.line,
                    "kept_path": earlier.source.path,
                    "kept_line": earlier.source.line,
                }
            )
        else:
            reason = (
                f"run_id {run_id} already read from {earlier.source} with different content; "
                "this copy was not counted (the first copy is kept)"
            )
            self.conflicts.append(ReadProblem(source.path, source.line, run_id, reason))
        return False

    def duplicate_table(self) -> pa.Table:
        """The duplicates recorded so far, as a table of ``DUPLICATES``."""
        return pa.Table.from_pylist(self.duplicates, schema=DUPLICATES)


def describe_duplicates(duplicates: pa.Table, *, limit: int = 5) -> list[str]:
    """Lines for people: each duplicate copy (the first ``limit``) and where the kept one is.

    >>> rows = [{"run_id": "r", "path": "b.json", "line": None, "kept_path": "a.json",
    ...          "kept_line": None}]
    >>> describe_duplicates(pa.Table.from_pylist(rows, schema=DUPLICATES))
    ['duplicate b.json (run r): the same run as a.json, counted once']
    """
    lines = []
    rows = duplicates.to_pylist()
    for row in rows[:limit]:
        copy = ReadProblem(row["path"], row["line"], row["run_id"], "").where
        kept = RunSource(row["kept_path"], row["kept_line"])
        lines.append(f"duplicate {copy}: the same run as {kept}, counted once")
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
