"""One snapshot file read under each accounting: what a worker process runs.

It imports the reading layer and msgspec, no engine and no Arrow, so the process that
starts workers (:mod:`contextledger.processes`) preloads it cheaply and a worker has
nothing left to import before it reads. What comes back is small: no snapshot crosses
processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextledger.read import jsparse, memo
from contextledger.read.cycles import collector_paused
from contextledger.read.digest import content_digest
from contextledger.read.facts import RunFacts
from contextledger.read.findings import standings_from_snapshot
from contextledger.read.messages import RunMessages, rebuild_messages
from contextledger.read.otel import PROTOBUF, SNAKE_CASE, ZSTD, SpillTo, TraceFileRead
from contextledger.read.otel import read_trace_file as _read_trace_file
from contextledger.read.otel import sniff as _sniff
from contextledger.read.otel.functions import SNIFF_BYTES
from contextledger.read.reference import record_run
from contextledger.read.snapshot import (
    BOM,
    TOO_DEEP,
    ReadError,
    ReadProblem,
    Run,
    RunSource,
    decode_run,
    iter_documents,
    read_whole_document,
)
from contextledger.read.snapshot_files import display_path
from contextledger.tables import ACCOUNTING_MODES


def accounting(mode: str) -> Callable[[Run, Sequence[str]], RunFacts]:
    if mode == "reference":
        return lambda run, names: record_run(run.snapshot, names)
    if mode == "corrected":
        from contextledger.read.corrected import meter_run

        return meter_run
    msg = f"unknown accounting mode {mode!r}: choose one of {', '.join(ACCOUNTING_MODES)}"
    raise ValueError(msg)


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
    #: Whether its document names it (:attr:`~contextledger.read.snapshot.Run.named`).
    named: bool = False
    #: A trace run's traces and its span records, encoded (what an archive keeps to
    #: merge spans of it that arrive in a later ingest); empty and None for a snapshot.
    trace_ids: tuple[str, ...] = ()
    spans: bytes | None = None


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
    #: A trace file's spans, made runs only once every file is read
    #: (:class:`~contextledger.tables.build.TraceInputs`).
    traces: TraceFileRead | None = None
    #: Copies of runs (rows of ``identity.DUPLICATES``) found while assembling traces.
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    #: blake2b-128 of the file's bytes when it was read whole with ``digest`` (the
    #: manifest's content hash, :func:`~contextledger.read.digest.file_digest`); else None.
    file_digest: str | None = None


@dataclass(frozen=True)
class RunStream:
    """One run's message stream and the standings its snapshot files, as ``whatif``
    replays them (folded whether or not an accounting could meter the run)."""

    run_id: str
    source: RunSource
    messages: RunMessages
    standings: list[dict[str, Any]]
    execution_id: str | None = None
    named: bool = False


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
_UNREAD_FORMATS = {"otlp-protobuf": PROTOBUF, "otlp-snake-case": SNAKE_CASE, "zstd": ZSTD}


def read_file(
    path: Path,
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    *,
    digest: bool = False,
    windows: bool = False,
    streams: bool = False,
    spill: SpillTo | None = None,
) -> FileRead:
    """Read one snapshot file under each accounting in ``modes`` (each document decoded once).

    A document that cannot be read, or that one accounting cannot fold, becomes a
    problem (``strict``: raises :class:`ReadError`); the rest of the file is still read.
    ``windows``: also fold each run's message stream into table rows
    (:class:`~contextledger.tables.windows.RunWindow`; a stream that cannot be folded is
    a problem confined to ``whatif``). ``streams``: also fold every decoded run's
    message stream for a what-if (:class:`RunStream`; the same confinement), so one
    pass serves the accountings and the replay. ``spill``: a trace file's span records
    past its budget are written there (:attr:`TraceFileRead.spilled`).

    >>> read = read_file(Path("data/sample/s0003-loop.json.gz"), ACCOUNTING_MODES, {}, False)
    >>> [(run.run_id, sorted(run.facts)) for run in read.runs], read.problems
    ([('s0003-loop', ['corrected', 'reference'])], [])
    """
    with collector_paused():  # a tenth of reading's CPU otherwise (read/cycles.py)
        try:
            return _read_file(path, modes, sidecar, strict, digest, windows, streams, spill)
        finally:  # nothing of its snapshots left for the collector to walk (read/memo.py)
            memo.forget()


def _read_file(
    path: Path,
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    digest: bool,
    windows: bool,
    streams: bool,
    spill: SpillTo | None,
) -> FileRead:
    meters = {mode: accounting(mode) for mode in modes}
    result = FileRead()
    try:
        whole = read_whole_document(path, head_is_a_snapshot, SNIFF_BYTES, digest=digest)
    except ReadError as error:
        if strict:
            raise
        result.problems.append((None, _problem(error.source, error.reason, error.run_id)))
        return result
    if whole is None:
        found = _sniff(path)
        if found == "otlp-json":
            result.traces = _read_trace_file(path, messages=streams or windows, spill=spill)
            return result
        if found in _UNREAD_FORMATS:
            source = RunSource(display_path(path))
            if strict:
                raise ReadError(source, _UNREAD_FORMATS[found])
            result.problems.append((None, _problem(source, _UNREAD_FORMATS[found], None)))
            return result
    else:
        result.file_digest = whole.file_digest
    try:
        for document in iter_documents(path) if whole is None else [whole.document]:
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
                        run.named,
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
                from contextledger.tables.window_rows import run_window

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
                        run.named,
                    )
                )
    except ReadError as error:
        if strict:
            raise
        result.problems.append((None, _problem(error.source, error.reason, error.run_id)))
    return result


def head_is_a_snapshot(head: bytes) -> bool:
    """Whether a file whose first 64 KiB (inflated) are ``head`` is one :func:`_sniff`
    would not take for a trace file or another format, told from the bytes already read:
    a JSON object whose first line does not end there (so its keys cannot be read from
    it) and that does not name ``resourceSpans`` or ``resource_spans``. A file this does
    not take is sniffed as before (a short JSON Lines snapshot file, say).

    >>> head_is_a_snapshot(b'{"run_id":"r","snapshot":{"commitLog":[]'), head_is_a_snapshot(b"")
    (True, False)
    >>> head_is_a_snapshot(b'{"resourceSpans":[{"resource":'), head_is_a_snapshot(b'{}\\n')
    (False, False)
    """
    opening = head.removeprefix(BOM).lstrip()
    return (
        opening[:1] == b"{"
        and b"\n" not in head
        and b'"resourceSpans"' not in head
        and b'"resource_spans"' not in head
    )


def _lone_surrogate_in_a_name(
    run: Run, static_names: Sequence[str], facts: Mapping[str, RunFacts]
) -> str | None:
    """Why a run read with lone surrogates cannot be tabled: a name it is counted under
    holds one (:func:`~contextledger.read.jsparse.unstorable_name`); None when only
    text does (a message cut inside an emoji), which is read as the reference reads it."""
    named: list[tuple[str, str | None]] = [("run id", run.run_id), ("run id", run.execution_id)]
    named += [("runner kind", run.runner_kind), *(("tool name", name) for name in static_names)]
    for counted in facts.values():
        named += [(f"{kind} name", piece) for _, kind, piece, _ in counted.offers]
        named += [(f"{kind} name", piece) for kind, piece, _, _ in counted.uses]
    return jsparse.unstorable_name(named)


def read_for_tables(
    path: Path,
    modes: Sequence[str],
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    streams: bool,
    spill: SpillTo | None = None,
) -> FileRead:
    """:func:`read_file` with its options in order, as ``pool.map`` hands them out."""
    return read_file(path, modes, sidecar, strict, streams=streams, spill=spill)


def _problem(source: RunSource, reason: str, run_id: str | None) -> ReadProblem:
    return ReadProblem(source.path, source.line, run_id, reason)


def read_chunk(
    paths: Sequence[str], sidecar: Mapping[str, Sequence[str]], spill: SpillTo | None = None
) -> list[FileRead]:
    """``paths`` read as every ingest reads them: both accountings, a digest of each
    run's document, its message stream; what a worker (a process, an executor) returns.
    ``spill``: a trace file's span records past its budget are written there."""
    return [
        read_file(Path(p), ACCOUNTING_MODES, sidecar, False, digest=True, windows=True, spill=spill)
        for p in paths
    ]
