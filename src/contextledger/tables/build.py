"""Read snapshot files into the tables of ``columns.py``, keeping going past bad files.

One worker reads one file; files are shared across processes when there are
many. A file that cannot be read becomes a row of the ``problems`` table
(path, line, run, reason) and everything else is still read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl

from contextledger.read.cycles import collector_paused
from contextledger.read.facts import RunFacts
from contextledger.read.identity import RunIdentity, put_in_slot, unmatched_ids
from contextledger.read.otel import RUNNER_KIND, Assembled, TraceRuns
from contextledger.read.snapshot import ReadError, ReadProblem, RunSource
from contextledger.read.snapshot_files import describe_empty
from contextledger.tables import ACCOUNTING_MODES as ACCOUNTING_MODES  # re-exported
from contextledger.tables import columns
from contextledger.tables.ahead import Reading, start_reading
from contextledger.tables.files import FileRead, RunRead, RunStream, accounting

if TYPE_CHECKING:
    import pyarrow as pa


class _Held:
    """A table of :class:`RunTables`, held as it was given (Arrow, or the Polars frame a
    read built) and read as Arrow, made once when first asked for; ``None`` given: no
    rows. :meth:`RunTables.frame` reads it as Polars, so the ledger never makes Arrow."""

    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, tables: RunTables | None, owner: type | None = None) -> Any:
        if tables is None:  # the dataclass's default: none when the table is optional
            if self.optional:
                return None
            raise AttributeError(self.name)
        made = tables.__dict__.setdefault("_tables_arrow", {})
        if self.name not in made:
            from contextledger.tables import schema

            held = tables.__dict__["_tables_given"][self.name]
            arrow = schema.arrow_schema(columns.READ_TABLES[self.name])
            if held is None:
                made[self.name] = schema.empty(arrow)
            elif isinstance(held, pl.DataFrame):
                made[self.name] = held.to_arrow().cast(arrow)
            else:
                made[self.name] = held
        return made[self.name]

    def __set__(self, tables: RunTables, table: Any) -> None:
        tables.__dict__.setdefault("_tables_given", {})[self.name] = table
        tables.__dict__.setdefault("_tables_arrow", {}).pop(self.name, None)


@dataclass
class RunTables:
    """The tables read from a batch of runs under one accounting mode.

    Each run appears once (:mod:`~contextledger.read.identity`); ``duplicates`` lists
    the copies that were not counted again. Each table is given as Arrow or as a Polars
    frame and read as Arrow (``tables.runs``) or as Polars (``tables.frame("runs")``);
    a read holds Polars frames, so a ledger of them never imports Arrow.
    """

    mode: str
    runs: pa.Table = _Held()
    offers: pa.Table = _Held()
    uses: pa.Table = _Held()
    outcomes: pa.Table = _Held(optional=True)
    problems: pa.Table = _Held(optional=True)
    duplicates: pa.Table = _Held(optional=True)
    #: Files in input folders not read because of their names (``find_snapshot_files``).
    skipped: tuple[str, ...] = ()
    #: Files of 0 bytes, not opened: no run, no problem (``find_snapshot_files``).
    empty: tuple[str, ...] = ()
    #: The order the runs come in, said where a result depends on it (the gates' replay).
    order: ClassVar[str] = "input order"

    def frame(self, table: str) -> pl.DataFrame:
        """``table`` (``"runs"``, ``"offers"``, ...) as a Polars frame, without Arrow when
        it was read here.

        >>> read_runs("data/sample").frame("offers").columns[:3]
        ['run_id', 'call_index', 'kind']
        """
        held = self.__dict__.get("_tables_given")
        value = held[table] if held is not None else getattr(self, table)  # an archive's
        if value is None:
            return columns.empty_frame(columns.READ_TABLES[table])
        return value if isinstance(value, pl.DataFrame) else pl.DataFrame(value)

    def with_outcomes(self, outcomes: pa.Table | pl.DataFrame) -> RunTables:
        """The same tables with ``outcomes`` (run_id, label) added; a (run, label) pair
        counts once, however often it is given."""
        given = outcomes if isinstance(outcomes, pl.DataFrame) else pl.DataFrame(outcomes)
        labels = columns.polars_schema(columns.OUTCOMES)
        both = pl.concat([self.frame("outcomes"), given.select(labels.names()).cast(labels)])
        held = {**self.__dict__["_tables_given"], "outcomes": both.unique(maintain_order=True)}
        return RunTables(self.mode, **held, skipped=self.skipped, empty=self.empty)

    def known_run_ids(self) -> list[str]:
        """Every run id these tables were read from (labels naming others match no run)."""
        return [str(run_id) for run_id in self.frame("runs")["run_id"].to_list()]

    def unmatched_label_ids(self) -> list[str]:
        """The run ids of outcome labels that name none of :meth:`known_run_ids`, in order
        (a typo, or a run not read: said on stderr, never an error)."""
        return unmatched_ids(self.frame("outcomes")["run_id"].to_list(), self.known_run_ids())

    def _counts(self) -> list[tuple[str, str]]:
        """What was read, in counts: the facts both reprs show."""
        runs = self.frame("runs")
        read = runs.height
        metered = int(runs["metered"].sum())
        offers, uses = self.frame("offers").height, self.frame("uses").height
        return [
            ("accounting", self.mode),
            ("runs", f"{read:,} ({metered:,} metered, {read - metered:,} refused)"),
            ("offers, uses", f"{offers:,}, {uses:,} rows"),
            ("outcome labels", f"{self.frame('outcomes').height:,} (run, label) pairs"),
            ("duplicate copies", f"{self.frame('duplicates').height:,}"),
            ("inputs not read", f"{self.frame('problems').height:,}"),
        ]

    def __repr__(self) -> str:
        """Counts per table and of the problems, not the tables (print them by name)."""
        from contextledger.tables.display import summary_text

        return summary_text(type(self).__name__, self._counts())

    def _repr_html_(self) -> str:
        """In Jupyter: what was read and what was not (each unreadable input where and
        why, the first ten), not every table's columns."""
        from contextledger.read.snapshot import ReadProblem
        from contextledger.tables.display import summary_html

        facts = self._counts()
        problems = self.frame("problems")
        shown = problems.head(10).to_dicts()
        facts += [(ReadProblem(**row).where, row["reason"]) for row in shown]
        if problems.height > len(shown):
            facts.append(("…", f"{problems.height - len(shown):,} more in .problems"))
        return summary_html("Run tables", facts)


def distinct_labels(outcomes: pa.Table) -> pa.Table:
    """Each (run_id, label) pair once, in first-given order.

    >>> import pyarrow as pa
    >>> rows = pa.table({"run_id": ["r", "r", "s"], "label": ["good", "good", "good"]})
    >>> distinct_labels(rows).num_rows
    2
    """
    from contextledger.tables import schema

    frame = pl.DataFrame(outcomes.cast(schema.OUTCOMES)).unique(maintain_order=True)
    return frame.to_arrow().cast(schema.OUTCOMES)


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
        Processes to read with; default: one per core. Inputs under about 48 MB of
        JSON (``ahead.POOL_FROM_JSON_BYTES``) are read in this process, where starting
        workers would cost more than they save.

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
    for line in describe_empty(tables.empty):
        warnings.warn(line, stacklevel=3)
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
    reading: Reading | None = None,
) -> dict[str, RunTables]:
    """:func:`read_runs` under each of ``modes`` at once: every document is read and
    decoded once, whatever the number of accountings; each accounting's tables are
    what :func:`read_runs` under it alone would give.

    ``each_file``: also fold every run's message stream (:class:`RunStream`) and hand
    each file's :class:`FileRead` here, in file order (how the report gets its
    what-if streams from the same pass). ``reading``: these same arguments' reading,
    already started by :func:`~contextledger.tables.ahead.start_reading` (the command
    line starts it before it imports the engines, which then load while workers read).

    >>> both = read_accountings("data/sample", ACCOUNTING_MODES)
    >>> [tables.runs.num_rows for tables in both.values()] == [
    ...     read_runs("data/sample", mode=mode).runs.num_rows for mode in ACCOUNTING_MODES]
    True
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    for mode in modes:
        accounting(mode)  # fail fast on an unknown mode
    sidecar = dict(static_tools or {})
    if reading is None:
        reading = start_reading(paths, modes, sidecar, strict, workers, each_file is not None)
    found = reading.found
    builders = {mode: TableBuilder(mode) for mode in modes}
    identities = {mode: RunIdentity() for mode in modes}
    counted: dict[str, list[RunRead]] = {mode: [] for mode in modes}  # by slot
    traces = TraceInputs(modes, messages=each_file is not None, spill_folder=reading.spill.folder)
    try:
        for result in traces.after(reading.results):
            if strict and result.problems and result.traces is None:
                _, problem = result.problems[0]
                raise ReadError(
                    RunSource(problem.path, problem.line), problem.reason, problem.run_id
                )
            for confined, problem in result.problems:
                for mode, builder in builders.items():
                    if confined in (None, mode):
                        builder.add_problem(problem)
            for row in result.runs:
                for mode in modes:
                    if mode not in row.facts:
                        continue
                    slot = identities[mode].place(
                        row.run_id, row.source, row.digest, row.execution_id, named=row.named
                    )
                    if slot is not None:
                        put_in_slot(counted[mode], slot, row)
            for mode in modes:
                identities[mode].add_duplicates(result.duplicates)
            if each_file is not None:
                each_file(result)
    finally:
        reading.close()  # the span records spilled are removed

    out = {}
    for mode, builder in builders.items():
        for run_order, row in enumerate(counted[mode]):
            builder.add_run(row, run_order)
        identity = identities[mode]
        if strict and identity.conflicts:
            conflict = identity.conflicts[0]
            source = RunSource(conflict.path, conflict.line)
            raise ReadError(source, conflict.reason, conflict.run_id)
        for problem in identity.conflicts:
            builder.add_problem(problem)
        copies = {name: [row[name] for row in identity.duplicates] for name in DUPLICATE_NAMES}
        out[mode] = builder.finish(
            duplicates=columns.frame(copies, columns.DUPLICATES),
            skipped=tuple(found.skipped),
            empty=tuple(found.empty),
        )
    return out


class TraceInputs:
    """Trace files' spans, held until every file is read (a trace may be spread over
    many files), then handed on as one more :class:`FileRead` of assembled runs.

    ``messages``: also rebuild each run's message stream (:class:`RunStream`);
    ``windows``: also give each run what an archive stores (its stream's rows, and a
    digest of its spans to tell a run that arrives again from another under its id).
    Past a budget the spans wait on disk, under ``spill_folder`` when given
    (:class:`~contextledger.read.otel.TraceRuns`).
    """

    def __init__(
        self,
        modes: Sequence[str],
        *,
        messages: bool = False,
        windows: bool = False,
        spill_folder: str | None = None,
    ) -> None:
        self.modes = tuple(modes)
        self.messages = messages
        self.windows = windows
        self._runs = TraceRuns(
            messages=messages or windows, digests=windows, spill_folder=spill_folder
        )

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
        for read, _ in self.parts():
            yield read

    def parts(
        self,
        *,
        traces: Collection[str] = (),
        run_ids: Collection[str] = (),
        runs: int = 1000,
    ) -> Iterator[tuple[FileRead, dict[str, str]]]:
        """The runs of the spans taken in, by their first span's start time, a range at a
        time, each range as a file's read (the first also holds the problems and copies
        not of one run), with the run of each of ``traces`` and of each trace whose run
        is one of ``run_ids`` (on the first; ``Assembled.watched``); ``runs`` at most a
        range. Nothing if no trace file was read."""
        if not self._runs:
            return
        parts = iter(self._runs.chunks(runs, traces=traces, run_ids=run_ids))
        while True:
            with collector_paused():  # a range of runs assembled (read/cycles.py)
                part = next(parts, None)
                read = None if part is None else self._file_read(part)
            if part is None or read is None:
                return
            yield read, part.watched

    def finish(self) -> FileRead:
        """The runs of the spans taken in, as a file's read (by their first span's start time)."""
        return self._file_read(self._runs.finish())

    def _file_read(self, assembled: Assembled) -> FileRead:
        result = FileRead(duplicates=assembled.duplicates)
        result.problems = [(None, problem) for problem in assembled.problems]
        result.problems += [("whatif", problem) for problem in assembled.stream_problems]
        for run in assembled.runs:
            window = None
            if self.windows and run.messages is not None:
                from contextledger.tables.window_rows import stream_window

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
                        trace_ids=run.trace_ids,
                        spans=run.spans,
                    )
                )
            if run.messages is not None and self.messages:
                result.streams.append(RunStream(run.run_id, run.source, run.messages, []))
        return result


class TableBuilder:
    """Collects runs (each with its ``run_order``) into the Arrow tables of one accounting.

    >>> from contextledger.tables.files import read_file
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
        self._runs: dict[str, list[Any]] = {name: [] for name in columns.names(columns.RUNS)}
        self._offers: dict[str, list[Any]] = {name: [] for name in OFFER_NAMES}
        self._uses: dict[str, list[Any]] = {name: [] for name in USE_NAMES}
        self._problems: dict[str, list[Any]] = {name: [] for name in PROBLEM_NAMES}
        #: Offer and use rows already made frames, a part at a time (:data:`PART_ROWS`).
        self._offer_parts: list[pl.DataFrame] = []
        self._use_parts: list[pl.DataFrame] = []

    def add_run(self, run: RunRead, run_order: int) -> None:
        """Add ``run`` as read under this builder's accounting."""
        _append_run(self._runs, self._offers, self._uses, run, run.facts[self.mode], run_order)
        self.run_count += 1
        if len(self._offers["run_id"]) >= PART_ROWS:
            self._offer_parts.append(columns.frame(self._offers, columns.OFFERS))
            self._offers = {name: [] for name in OFFER_NAMES}
        if len(self._uses["run_id"]) >= PART_ROWS:
            self._use_parts.append(columns.frame(self._uses, columns.USES))
            self._uses = {name: [] for name in USE_NAMES}

    def add_problem(self, problem: ReadProblem) -> None:
        """Add a row to the ``problems`` table."""
        for name in PROBLEM_NAMES:
            self._problems[name].append(getattr(problem, name))

    def finish(
        self,
        duplicates: pl.DataFrame | None = None,
        skipped: tuple[str, ...] = (),
        empty: tuple[str, ...] = (),
    ) -> RunTables:
        """The tables collected so far (Polars frames; Arrow when first read as Arrow)."""
        return RunTables(
            mode=self.mode,
            runs=columns.frame(self._runs, columns.RUNS),
            offers=_joined(self._offer_parts, columns.frame(self._offers, columns.OFFERS)),
            uses=_joined(self._use_parts, columns.frame(self._uses, columns.USES)),
            problems=columns.frame(self._problems, columns.PROBLEMS),
            duplicates=duplicates,
            skipped=skipped,
            empty=empty,
        )


#: Offer and use rows held as Python lists before they are made Arrow: a million rows
#: as lists, made a table at once, peaked at five times the table's size (a 1 GiB trace
#: file's 1.3 million offers).
PART_ROWS = 1 << 16


OFFER_NAMES = columns.names(columns.OFFERS)
USE_NAMES = columns.names(columns.USES)
PROBLEM_NAMES = columns.names(columns.PROBLEMS)
DUPLICATE_NAMES = columns.names(columns.DUPLICATES)


def _joined(parts: list[pl.DataFrame], last: pl.DataFrame) -> pl.DataFrame:
    """``parts`` and ``last`` as one frame."""
    if not parts:
        return last
    return pl.concat([*parts, last])


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
