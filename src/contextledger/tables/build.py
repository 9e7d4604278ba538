"""Read snapshot files into the Arrow tables of ``schema.py``, keeping going past bad files.

One worker reads one file; files are shared across processes when there are
many. A file that cannot be read becomes a row of the ``problems`` table
(path, line, run, reason) and everything else is still read.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pyarrow as pa

from contextledger.processes import worker_pool
from contextledger.read import jsparse
from contextledger.read.facts import RunFacts
from contextledger.read.findings import standings_from_snapshot
from contextledger.read.identity import DUPLICATES, RunIdentity, content_digest, unmatched_ids
from contextledger.read.messages import RunMessages, rebuild_messages
from contextledger.read.otel import (
    PROTOBUF,
    RUNNER_KIND,
    ZSTD,
    Assembled,
    TraceFileRead,
    TraceRuns,
)
from contextledger.read.otel import read_trace_file as _read_trace_file
from contextledger.read.otel import sniff as _sniff
from contextledger.read.reference import record_run
from contextledger.read.snapshot import (
    TOO_DEEP,
    ReadError,
    ReadProblem,
    Run,
    RunSource,
    decode_run,
    display_path,
    find_snapshot_files,
    iter_documents,
)
from contextledger.tables import ACCOUNTING_MODES, schema


def _accounting(mode: str) -> Callable[[Run, Sequence[str]], RunFacts]:
    if mode == "reference":
        return lambda run, names: record_run(run.snapshot, names)
    if mode == "corrected":
        from contextledger.read.corrected import meter_run

        return meter_run
    msg = f"unknown accounting mode {mode!r}: choose one of {', '.join(ACCOUNTING_MODES)}"
    raise ValueError(msg)


@dataclass
class RunTables:
    """The tables read from a batch of runs under one accounting mode.

    Each run appears once (:mod:`~contextledger.read.identity`); ``duplicates`` lists
    the copies that were not counted again.
    """

    mode: str
    runs: pa.Table
    offers: pa.Table
    uses: pa.Table
    outcomes: pa.Table = field(default_factory=lambda: schema.empty(schema.OUTCOMES))
    problems: pa.Table = field(default_factory=lambda: schema.empty(schema.PROBLEMS))
    duplicates: pa.Table = field(default_factory=lambda: schema.empty(DUPLICATES))
    #: Files in input folders not read because of their names (``find_snapshot_files``).
    skipped: tuple[str, ...] = ()
    #: The order the runs come in, said where a result depends on it (the gates' replay).
    order: ClassVar[str] = "input order"

    def with_outcomes(self, outcomes: pa.Table) -> RunTables:
        """The same tables with ``outcomes`` (run_id, label) added; a (run, label) pair
        counts once, however often it is given."""
        combined = distinct_labels(
            pa.concat_tables([self.outcomes, outcomes.cast(schema.OUTCOMES)])
        )
        return dataclasses.replace(self, outcomes=combined)

    def known_run_ids(self) -> list[str]:
        """Every run id these tables were read from (labels naming others match no run)."""
        return [str(run_id) for run_id in self.runs["run_id"].to_pylist()]

    def unmatched_label_ids(self) -> list[str]:
        """The run ids of outcome labels that name none of :meth:`known_run_ids`, in order
        (a typo, or a run not read: said on stderr, never an error)."""
        return unmatched_ids(self.outcomes["run_id"].to_pylist(), self.known_run_ids())

    def _repr_html_(self) -> str:
        """In Jupyter: what was read and what was not (each unreadable input where and
        why, the first ten), not every table's columns."""
        import pyarrow.compute as pc

        from contextledger.read.snapshot import ReadProblem
        from contextledger.tables.display import summary_html

        read = self.runs.num_rows
        metered = pc.sum(self.runs["metered"].cast("int64")).as_py() or 0
        facts = [
            ("accounting", self.mode),
            ("runs", f"{read:,} ({metered:,} metered, {read - metered:,} refused)"),
            ("offers, uses", f"{self.offers.num_rows:,}, {self.uses.num_rows:,} rows"),
            ("outcome labels", f"{self.outcomes.num_rows:,} (run, label) pairs"),
            ("duplicate copies", f"{self.duplicates.num_rows:,}"),
            ("inputs not read", f"{self.problems.num_rows:,}"),
        ]
        shown = self.problems.slice(0, 10).to_pylist()
        facts += [(ReadProblem(**row).where, row["reason"]) for row in shown]
        if self.problems.num_rows > len(shown):
            facts.append(("…", f"{self.problems.num_rows - len(shown):,} more in .problems"))
        return summary_html("Run tables", facts)


def distinct_labels(outcomes: pa.Table) -> pa.Table:
    """Each (run_id, label) pair once, in first-given order.

    >>> rows = pa.table({"run_id": ["r", "r", "s"], "label": ["good", "good", "good"]})
    >>> distinct_labels(rows).num_rows
    2
    """
    import polars as pl

    frame = pl.DataFrame(outcomes.cast(schema.OUTCOMES)).unique(maintain_order=True)
    return frame.to_arrow().cast(schema.OUTCOMES)


@dataclass(frozen=True)
class RunRead:
    """What a worker sends back for one run: small, so no snapshot crosses processes.

    ``facts`` holds the run under each accounting mode it was read in; ``digest`` is a
    hash of the document's bytes when the reader was asked for one (the archive uses it
    to tell a run that arrives again from a different run under the same id).
    """

    run_id: str
    source: RunSource
    runner_kind: str | None
    static_tool_names_from: str
    static_tool_name_count: int
    facts: dict[str, RunFacts]
    digest: str | None = None
    #: The run's message stream as table rows (``read_file(windows=True)``), for archives.
    window: Any = None
    #: Its snapshot's footprintjs ``runId`` (:attr:`~contextledger.read.snapshot.Run.execution_id`).
    execution_id: str | None = None


@dataclass
class FileRead:
    """One file read under one or more accounting modes.

    ``problems`` pairs each problem with the mode it is confined to (None: every mode,
    the document itself could not be read).
    """

    runs: list[RunRead] = field(default_factory=list)
    problems: list[tuple[str | None, ReadProblem]] = field(default_factory=list)
    #: Every decoded run's message stream (``read_file(streams=True)``), for what-ifs.
    streams: list[RunStream] = field(default_factory=list)
    #: A trace file's spans, made runs only once every file is read (:class:`TraceInputs`).
    traces: TraceFileRead | None = None
    #: Copies of runs (rows of ``identity.DUPLICATES``) found while assembling traces.
    duplicates: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class RunStream:
    """One run's message stream and the standings its snapshot files, as ``whatif``
    replays them (folded whether or not an accounting could meter the run)."""

    run_id: str
    source: RunSource
    messages: RunMessages
    standings: list[dict[str, Any]]
    execution_id: str | None = None


def _static_names(run: Run, sidecar: Mapping[str, Sequence[str]]) -> tuple[list[str], str]:
    if run.run_id in sidecar:
        return list(sidecar[run.run_id]), "sidecar"
    if run.static_tool_names is not None:
        return list(run.static_tool_names), "wrapper"
    return [], "none"


#: What a snapshot that decodes but whose values break the fold raises.
FOLD_ERRORS = (TypeError, ValueError, KeyError, AttributeError, RecursionError)


def fold_failure(error: Exception) -> str:
    """The reason a problem gives for a run that could not be folded (the reading
    layer's own reason for nesting too deep, so every path words it the same)."""
    if isinstance(error, RecursionError):
        return TOO_DEEP
    return f"unreadable snapshot content ({type(error).__name__}: {error})"


#: Formats told by their content and named, not read.
_UNREAD_FORMATS = {"otlp-protobuf": PROTOBUF, "zstd": ZSTD}


def read_file(
    path: Path,
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    *,
    digest: bool = False,
    windows: bool = False,
    streams: bool = False,
) -> FileRead:
    """Read one snapshot file under each accounting in ``modes`` (each document decoded once).

    A document that cannot be read, or that one accounting cannot fold, becomes a
    problem (``strict``: raises :class:`ReadError`); the rest of the file is still read.
    ``windows``: also fold each run's message stream into table rows
    (:class:`~contextledger.tables.windows.RunWindow`; a stream that cannot be folded is
    a problem confined to ``whatif``). ``streams``: also fold every decoded run's
    message stream for a what-if (:class:`RunStream`; the same confinement), so one
    pass serves the accountings and the replay.

    >>> read = read_file(Path("data/sample/s0003-loop.json.gz"), ACCOUNTING_MODES, {}, False)
    >>> [(run.run_id, sorted(run.facts)) for run in read.runs], read.problems
    ([('s0003-loop', ['corrected', 'reference'])], [])
    """
    meters = {mode: _accounting(mode) for mode in modes}
    result = FileRead()
    found = _sniff(path)
    if found == "otlp-json":
        result.traces = _read_trace_file(path, messages=streams or windows)
        return result
    if found in _UNREAD_FORMATS:
        source = RunSource(display_path(path))
        if strict:
            raise ReadError(source, _UNREAD_FORMATS[found])
        result.problems.append((None, _problem(source, _UNREAD_FORMATS[found], None)))
        return result
    try:
        for document in iter_documents(path):
            try:
                run = decode_run(document)
                names, names_from = _static_names(run, sidecar)
            except ReadError as error:
                if strict:
                    raise
                result.problems.append((None, _problem(error.source, error.reason, error.run_id)))
                continue
            except FOLD_ERRORS as error:
                if strict:
                    raise ReadError(document.source, fold_failure(error)) from None
                result.problems.append((None, _problem(document.source, fold_failure(error), None)))
                continue
            if streams:
                try:
                    stream = RunStream(
                        run.run_id,
                        run.source,
                        rebuild_messages(run),
                        standings_from_snapshot(run),
                        run.execution_id,
                    )
                    result.streams.append(stream)
                except FOLD_ERRORS as error:  # a stream no replay can hold
                    problem = _problem(run.source, fold_failure(error), run.run_id)
                    result.problems.append(("whatif", problem))
            facts: dict[str, RunFacts] = {}
            for mode, meter in meters.items():
                try:
                    facts[mode] = meter(run, names)
                except FOLD_ERRORS as error:
                    if strict:
                        raise ReadError(document.source, fold_failure(error)) from None
                    confined = mode if len(meters) > 1 else None
                    problem = _problem(document.source, fold_failure(error), None)
                    result.problems.append((confined, problem))
            window = None
            if facts and windows:
                from contextledger.tables.windows import run_window

                try:
                    window = run_window(run)
                except FOLD_ERRORS as error:
                    problem = _problem(document.source, fold_failure(error), run.run_id)
                    result.problems.append(("whatif", problem))
            named = _lone_surrogate_in_a_name(run, names, facts) if run.lone_surrogates else None
            if named is not None:
                if strict:
                    raise ReadError(document.source, named, run.run_id)
                if result.streams and result.streams[-1].source == run.source:
                    result.streams.pop()  # not replayed either
                result.problems.append((None, _problem(document.source, named, run.run_id)))
                continue
            if facts:
                result.runs.append(
                    RunRead(
                        run.run_id,
                        run.source,
                        run.runner_kind,
                        names_from,
                        len(names),
                        facts,
                        content_digest(document.payload) if digest else None,
                        window,
                        run.execution_id,
                    )
                )
    except ReadError as error:
        if strict:
            raise
        result.problems.append((None, _problem(error.source, error.reason, error.run_id)))
    return result


def _lone_surrogate_in_a_name(
    run: Run, static_names: Sequence[str], facts: Mapping[str, RunFacts]
) -> str | None:
    """Why a run read with lone surrogates cannot be tabled: a name it is counted under
    holds one (:func:`~contextledger.read.jsparse.unstorable_name`); None when only
    text does (a message cut inside an emoji), which is read as the reference reads it."""
    named: list[tuple[str, str | None]] = [("run id", run.run_id), ("run id", run.execution_id)]
    named += [("runner kind", run.runner_kind), *(("tool name", name) for name in static_names)]
    for accounting in facts.values():
        named += [(f"{kind} name", piece) for _, kind, piece, _ in accounting.offers]
        named += [(f"{kind} name", piece) for kind, piece, _, _ in accounting.uses]
    return jsparse.unstorable_name(named)


def _read_file(
    path: Path,
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    streams: bool,
) -> FileRead:
    return read_file(path, modes, sidecar, strict, streams=streams)


def _problem(source: RunSource, reason: str, run_id: str | None) -> ReadProblem:
    return ReadProblem(source.path, source.line, run_id, reason)


def _read_all(
    files: Sequence[Path],
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    workers: int,
    streams: bool,
) -> Iterable[FileRead]:
    if workers <= 1 or len(files) < 8:
        for path in files:
            yield _read_file(path, modes, sidecar, strict, streams)
        return
    with worker_pool(workers) as pool:
        chunk = max(1, len(files) // (workers * 8))
        count = len(files)
        yield from pool.map(
            _read_file,
            files,
            [modes] * count,
            [sidecar] * count,
            [strict] * count,
            [streams] * count,
            chunksize=chunk,
        )


def read_runs(
    paths: Sequence[str | Path] | str | Path,
    *,
    mode: str = "corrected",
    static_tools: Mapping[str, Sequence[str]] | None = None,
    strict: bool = False,
    workers: int | None = None,
) -> RunTables:
    """Read every snapshot under ``paths`` into the run, offer and use tables.

    Parameters
    ----------
    paths
        Files (``.json``, ``.json.gz``, JSON Lines) or directories, read recursively.
    mode
        ``"corrected"`` (default) or ``"reference"`` (agentfootprint 9.62's own numbers).
    static_tools
        ``run_id -> static tool names``, overriding the corpus wrapper's
        ``static_tool_names`` (the reference reads these from the runner).
    strict
        Raise :class:`~contextledger.read.snapshot.ReadError` at the first bad file
        instead of listing it in ``problems``; else each is listed there and said in a
        warning (``skipped PATH: reason``), as is reading no run at all.
    workers
        Processes to read with; default: one per core.

    Examples
    --------
    >>> tables = read_runs("data/sample", mode="reference")
    >>> tables.runs.num_rows > 0, tables.problems.num_rows
    (True, 0)
    """
    found = read_accountings(
        paths, (mode,), static_tools=static_tools, strict=strict, workers=workers
    )
    _warn_unread(found[mode], paths)
    return found[mode]


def _warn_unread(tables: RunTables, paths: Sequence[str | Path] | str | Path) -> None:
    """Say in a warning what a caller would otherwise find only in ``tables.problems``:
    each input not read (``read_runs("data/sampel")``), and that no run was read."""
    import warnings

    for problem in tables.problems.to_pylist():
        where = ReadProblem(**problem).where
        warnings.warn(f"skipped {where}: {problem['reason']}", stacklevel=3)
    if tables.runs.num_rows == 0:
        names = [paths] if isinstance(paths, str | Path) else list(paths)
        warnings.warn(f"no run read from {' '.join(map(str, names))}", stacklevel=3)


def read_accountings(
    paths: Sequence[str | Path] | str | Path,
    modes: Sequence[str],
    *,
    static_tools: Mapping[str, Sequence[str]] | None = None,
    strict: bool = False,
    workers: int | None = None,
    each_file: Callable[[FileRead], None] | None = None,
) -> dict[str, RunTables]:
    """:func:`read_runs` under each of ``modes`` at once: every document is read and
    decoded once, whatever the number of accountings; each accounting's tables are
    what :func:`read_runs` under it alone would give.

    ``each_file``: also fold every run's message stream (:class:`RunStream`) and hand
    each file's :class:`FileRead` here, in file order (how the report gets its
    what-if streams from the same pass).

    >>> both = read_accountings("data/sample", ACCOUNTING_MODES)
    >>> [tables.runs.num_rows for tables in both.values()] == [
    ...     read_runs("data/sample", mode=mode).runs.num_rows for mode in ACCOUNTING_MODES]
    True
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    for mode in modes:
        _accounting(mode)  # fail fast on an unknown mode
    found = find_snapshot_files(paths)
    files = found.files
    sidecar = dict(static_tools or {})
    worker_count = workers if workers is not None else (os.cpu_count() or 1)
    builders = {mode: TableBuilder(mode) for mode in modes}
    identities = {mode: RunIdentity() for mode in modes}
    reads = _read_all(files, modes, sidecar, strict, worker_count, each_file is not None)
    traces = TraceInputs(modes, messages=each_file is not None)
    for result in traces.after(reads):
        if strict and result.problems and result.traces is None:
            _, problem = result.problems[0]
            raise ReadError(RunSource(problem.path, problem.line), problem.reason, problem.run_id)
        for confined, problem in result.problems:
            for mode, builder in builders.items():
                if confined in (None, mode):
                    builder.add_problem(problem)
        for row in result.runs:
            for mode, builder in builders.items():
                if mode in row.facts and identities[mode].admit(
                    row.run_id, row.source, row.digest, row.execution_id
                ):
                    builder.add_run(row, builder.run_count)
        for mode in modes:
            identities[mode].duplicates.extend(result.duplicates)
        if each_file is not None:
            each_file(result)
    out = {}
    for mode, builder in builders.items():
        identity = identities[mode]
        if strict and identity.conflicts:
            conflict = identity.conflicts[0]
            source = RunSource(conflict.path, conflict.line)
            raise ReadError(source, conflict.reason, conflict.run_id)
        for problem in identity.conflicts:
            builder.add_problem(problem)
        out[mode] = dataclasses.replace(
            builder.finish(),
            duplicates=schema.from_rows(identity.duplicates, DUPLICATES),
            skipped=tuple(found.skipped),
        )
    return out


class TraceInputs:
    """Trace files' spans, held until every file is read (a trace may be spread over
    many files), then handed on as one more :class:`FileRead` of assembled runs.

    ``messages``: also rebuild each run's message stream (:class:`RunStream`);
    ``windows``: also give each run what an archive stores (its stream's rows, and a
    digest of its spans to tell a run that arrives again from another under its id).
    """

    def __init__(
        self, modes: Sequence[str], *, messages: bool = False, windows: bool = False
    ) -> None:
        self.modes = tuple(modes)
        self.messages = messages
        self.windows = windows
        self._runs = TraceRuns(messages=messages or windows, digests=windows)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def take(self, read: FileRead) -> FileRead:
        """``read``, its trace spans (if it is a trace file's) taken in."""
        if read.traces is not None:
            self._runs.add(read.traces)
        return read

    def after(self, reads: Iterable[FileRead]) -> Iterable[FileRead]:
        """``reads`` as they come (a trace file's spans taken in), then the runs of
        every trace file, if there were any."""
        yield from map(self.take, reads)
        if self._runs:
            for part in self._runs.chunks():
                yield self._file_read(part)

    def finish(self) -> FileRead:
        """The runs of the spans taken in, as a file's read (in first-read order)."""
        return self._file_read(self._runs.finish())

    def _file_read(self, assembled: Assembled) -> FileRead:
        result = FileRead(duplicates=assembled.duplicates)
        result.problems = [(None, problem) for problem in assembled.problems]
        for run in assembled.runs:
            window = None
            if self.windows and run.messages is not None:
                from contextledger.tables.windows import stream_window

                window = stream_window(run.messages, [])
            if self.modes:
                result.runs.append(
                    RunRead(
                        run.run_id,
                        run.source,
                        RUNNER_KIND,
                        "none",
                        0,
                        {mode: run.facts_as(mode) for mode in self.modes},
                        run.digest,
                        window,
                    )
                )
            if run.messages is not None and self.messages:
                result.streams.append(RunStream(run.run_id, run.source, run.messages, []))
        return result


class TableBuilder:
    """Collects runs (each with its ``run_order``) into the Arrow tables of one accounting.

    >>> read = read_file(Path("data/sample/s0003-loop.json.gz"), ["corrected"], {}, False)
    >>> builder = TableBuilder("corrected")
    >>> builder.add_run(read.runs[0], run_order=7)
    >>> tables = builder.finish()
    >>> tables.runs["run_order"].to_pylist(), tables.offers.num_rows > 0
    ([7], True)
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.run_count = 0
        self._runs: dict[str, list[Any]] = {name: [] for name in schema.RUNS.names}
        self._offers: dict[str, list[Any]] = {name: [] for name in schema.OFFERS.names}
        self._uses: dict[str, list[Any]] = {name: [] for name in schema.USES.names}
        self._problems: dict[str, list[Any]] = {name: [] for name in schema.PROBLEMS.names}
        #: Offer and use rows already made Arrow, a part at a time (:data:`PART_ROWS`).
        self._offer_parts: list[pa.Table] = []
        self._use_parts: list[pa.Table] = []

    def add_run(self, run: RunRead, run_order: int) -> None:
        """Add ``run`` as read under this builder's accounting."""
        _append_run(self._runs, self._offers, self._uses, run, run.facts[self.mode], run_order)
        self.run_count += 1
        if len(self._offers["run_id"]) >= PART_ROWS:
            self._offer_parts.append(schema.from_columns(self._offers, schema.OFFERS))
            self._offers = {name: [] for name in schema.OFFERS.names}
        if len(self._uses["run_id"]) >= PART_ROWS:
            self._use_parts.append(schema.from_columns(self._uses, schema.USES))
            self._uses = {name: [] for name in schema.USES.names}

    def add_problem(self, problem: ReadProblem) -> None:
        """Add a row to the ``problems`` table."""
        for name in schema.PROBLEMS.names:
            self._problems[name].append(getattr(problem, name))

    def finish(self) -> RunTables:
        """The tables collected so far."""
        return RunTables(
            mode=self.mode,
            runs=schema.from_columns(self._runs, schema.RUNS),
            offers=_joined(self._offer_parts, schema.from_columns(self._offers, schema.OFFERS)),
            uses=_joined(self._use_parts, schema.from_columns(self._uses, schema.USES)),
            problems=schema.from_columns(self._problems, schema.PROBLEMS),
        )


#: Offer and use rows held as Python lists before they are made Arrow: a million rows
#: as lists, made a table at once, peaked at five times the table's size (a 1 GiB trace
#: file's 1.3 million offers).
PART_ROWS = 1 << 16


def _joined(parts: list[pa.Table], last: pa.Table) -> pa.Table:
    """``parts`` and ``last`` as one table in one chunk, as one build would give it."""
    if not parts:
        return last
    return pa.concat_tables([*parts, last])


def _append_run(
    runs: dict[str, list[Any]],
    offers: dict[str, list[Any]],
    uses: dict[str, list[Any]],
    run: RunRead,
    facts: RunFacts,
    order: int,
) -> None:
    row = {
        "run_id": run.run_id,
        "run_order": order,
        "source_path": run.source.path,
        "source_line": run.source.line,
        "runner_kind": run.runner_kind,
        "accounting": facts.accounting,
        "metered": facts.metered,
        "refused_reason": facts.refused_reason,
        "model_call_count": facts.model_call_count,
        "metered_call_count": facts.metered_call_count,
        "unmetered_kinds": facts.unmetered_kinds,
        "basis": [{"key": key, "codes": codes} for key, codes in facts.basis.items()],
        "grouped": facts.grouped,
        "slice_available": facts.slice_available,
        "static_tool_names_from": run.static_tool_names_from,
        "static_tool_name_count": run.static_tool_name_count,
    }
    for name, value in row.items():
        runs[name].append(value)
    # Each list of tuples transposed in one go (a run of traces offers hundreds).
    if facts.offers:
        call_indexes, kinds, piece_ids, tokens = zip(*facts.offers, strict=True)
        offers["run_id"].extend([run.run_id] * len(facts.offers))
        offers["call_index"].extend(call_indexes)
        offers["kind"].extend(kinds)
        offers["piece_id"].extend(piece_ids)
        offers["approx_tokens"].extend(tokens)
        offers["seq"].extend(range(len(facts.offers)))
    if facts.uses:
        kinds, piece_ids, signals, use_calls = zip(*facts.uses, strict=True)
        uses["run_id"].extend([run.run_id] * len(facts.uses))
        uses["call_index"].extend(use_calls)
        uses["kind"].extend(kinds)
        uses["piece_id"].extend(piece_ids)
        uses["signal"].extend(signals)
        uses["seq"].extend(range(len(facts.uses)))


#: Suffixes read as JSON Lines by :func:`read_rows` (anything else is CSV with a header).
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".json")


def read_rows(
    path: Path,
    *,
    required: Sequence[str] = (),
    header: str = "",
    error: type[ValueError] = ValueError,
) -> list[tuple[int, Any]]:
    """Every row of :func:`iter_rows`, as a list."""
    return list(iter_rows(path, required=required, header=header, error=error))


def iter_rows(
    path: Path,
    *,
    required: Sequence[str] = (),
    header: str = "",
    error: type[ValueError] = ValueError,
) -> Iterator[tuple[int, Any]]:
    """``(line number, row)`` of a CSV (with a header) or JSON Lines file, one at a time
    (a reader may stop early: nothing after is parsed).

    JSON Lines is chosen by the ``.jsonl`` / ``.ndjson`` / ``.json`` suffix; lines end
    at ``\\n`` only (U+2028 and its kin are valid inside JSON). CSV is parsed strictly:
    blank lines are skipped; a quote left open, a value that runs over several lines,
    or more values than the header has columns is refused. Raises ``error`` naming the
    file and line of the first such row, of invalid JSON, of text that is not UTF-8,
    and, when ``required`` columns are named, of a CSV header that lacks one
    (``header`` describes the header the file should have).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    ...     _ = f.write('run_id,label\\nr1,"good\\nr2,bad\\n')
    >>> read_rows(Path(f.name))
    Traceback (most recent call last):
    ...
    ValueError: ...csv:2: a quoted value is never closed (an unbalanced quote?)
    >>> os.unlink(f.name)
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as problem:
        number = path.read_bytes()[: problem.start].count(b"\n") + 1
        msg = f"{path}:{number}: not UTF-8 text ({problem.reason})"
        raise error(msg) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if path.suffix in JSON_LINES_SUFFIXES:
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as problem:
                    msg = f"{path}:{number}: invalid JSON ({problem.msg})"
                    raise error(msg) from None
        return
    yield from _csv_rows(path, text, required, header, error)


def _csv_rows(
    path: Path, text: str, required: Sequence[str], header: str, error: type[ValueError]
) -> Iterator[tuple[int, dict[str, str | None]]]:
    reader = csv.reader(io.StringIO(text, newline="\n"), strict=True)
    columns: list[str] | None = None

    def lacking(found: list[str]) -> None:
        missing = [column for column in required if column not in found]
        if missing:
            wanted = header or ", ".join(required)
            msg = f"{path}:1: the header needs {wanted}; missing {', '.join(missing)}"
            raise error(msg)

    while True:
        first_line = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as problem:
            reason = str(problem)
            if reason == "unexpected end of data":
                reason = "a quoted value is never closed (an unbalanced quote?)"
            raise error(f"{path}:{first_line}: {reason}") from None
        if reader.line_num != first_line:
            msg = (
                f"{path}:{first_line}: a quoted value runs on to line {reader.line_num} "
                "(an unbalanced quote?); values here hold no line breaks"
            )
            raise error(msg)
        if not values:
            continue
        if columns is None:
            columns = values
            lacking(columns)
            continue
        if len(values) > len(columns):
            msg = (
                f"{path}:{first_line}: {len(values)} values for the header's {len(columns)} columns"
            )
            raise error(msg)
        row: dict[str, str | None] = dict.fromkeys(columns)
        row.update(zip(columns, values, strict=False))
        yield first_line, row
    if columns is None:
        lacking([])


def _label_text(row: Mapping[str, Any], key: str) -> str | None:
    """``row[key]`` as an outcome row's text, or None when it is missing or empty."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        return None
    return str(value)


#: The most distinct labels an outcomes file may hold. Labels are categories (good, bad,
#: escalated); every piece is compared with every label, so a column of run ids or free
#: text given as the label would ask for pieces x rows answers (1M labels over the 14
#: sample runs went past 8 GB). 2,000 labels over the sample: 0.5 GB, 13 s.
MAX_DISTINCT_LABELS = 2_000


def load_outcomes(path: str | Path) -> pa.Table:
    """Read outcome labels from CSV (header ``run_id,label``) or JSON Lines.

    A run may carry several labels (one row each). Raises ``ValueError`` naming
    the file and line of a row that is not valid CSV or JSON (see :func:`read_rows`)
    or lacks a ``run_id`` or ``label`` (missing, empty or blank), and a file of more
    than :data:`MAX_DISTINCT_LABELS` distinct labels, at the first label past it.
    """
    path = Path(path)
    rows = iter_rows(path, required=("run_id", "label"))
    run_ids, labels = [], []
    distinct: set[str] = set()
    for number, row in rows:
        run_id = _label_text(row, "run_id") if isinstance(row, Mapping) else None
        label = _label_text(row, "label") if isinstance(row, Mapping) else None
        if run_id is None or label is None:
            msg = f"{path}:{number}: an outcome row needs a run_id and a label (non-empty)"
            raise ValueError(msg)
        distinct.add(label)
        if len(distinct) > MAX_DISTINCT_LABELS:
            msg = (
                f"{path}:{number}: more than {MAX_DISTINCT_LABELS:,} distinct labels; labels "
                "are categories (good, bad, ...): is the label column run ids or free text?"
            )
            raise ValueError(msg)
        run_ids.append(run_id)
        labels.append(label)
    return schema.from_columns({"run_id": run_ids, "label": labels}, schema.OUTCOMES)


def load_static_tools(path: str | Path) -> dict[str, list[str]]:
    """Read a static-tool-names sidecar: ``{run_id: [names]}`` JSON, or JSON Lines of
    ``{"run_id": ..., "static_tool_names": [...]}``."""
    path = Path(path)
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM is no JSON
    try:
        if path.suffix in (".jsonl", ".ndjson"):
            lines = [msgspec.json.decode(line) for line in data.splitlines() if line.strip()]
            mapping = {str(item["run_id"]): item["static_tool_names"] for item in lines}
        else:
            mapping = msgspec.json.decode(data)
    except (msgspec.DecodeError, KeyError, TypeError) as error:
        msg = f"{path}: not a static tool names sidecar ({error})"
        raise ValueError(msg) from None
    if not isinstance(mapping, dict) or not all(
        isinstance(names, list) and all(isinstance(n, str) for n in names)
        for names in mapping.values()
    ):
        msg = f"{path}: a sidecar maps each run_id to a list of tool names"
        raise ValueError(msg)
    return mapping
