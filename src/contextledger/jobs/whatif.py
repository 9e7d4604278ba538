"""What-if over a source: snapshot files, runs in memory, or an archive.

Reads the runs (through the one run-identity rule), hands their message streams
to the window engine (:func:`~contextledger.window.whatif.whatif_table`) and, over
an archive, replays a batch of runs at a time from the stored columns (``Message``
objects only for the runs replayed exactly), writing each batch's rows to Parquet so
memory does not grow with the archive.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from contextledger.progress import Progress
from contextledger.read.findings import standings_from_snapshot
from contextledger.read.identity import DUPLICATES, RunIdentity
from contextledger.read.messages import RunMessages, rebuild_messages
from contextledger.read.otel import OwnFolder, SpillTo, spill_folder
from contextledger.read.snapshot import ReadProblem, Run
from contextledger.read.snapshot_files import find_snapshot_files
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, TraceInputs, read_accountings
from contextledger.tables.files import FileRead, RunStream, read_file
from contextledger.tables.standings import load_standings
from contextledger.tables.windows import streams_from_tables
from contextledger.window.policies import Policy
from contextledger.window.standings import timelines
from contextledger.window.turn_tables import turn_arrays_from_tables
from contextledger.window.whatif import parse_policies, per_policy, whatif_arrays, whatif_table

if TYPE_CHECKING:
    from contextledger.archive.tables import ArchiveTables


#: Runs replayed at a time from snapshots when a progress line is drawn (between chunks).
REPLAY_CHUNK_RUNS = 1000


@dataclass
class WhatIfInputs:
    """Runs read for a what-if: their streams, the standings their snapshots hold,
    and what could not be read."""

    streams: list[RunMessages] = field(default_factory=list)
    standings: list[dict[str, Any]] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)
    #: Copies of a run already read (:mod:`~contextledger.read.identity`), not replayed again.
    duplicates: pa.Table = field(default_factory=lambda: schema.empty(DUPLICATES))
    #: Files in input folders not read because of their names (``find_snapshot_files``).
    skipped: list[str] = field(default_factory=list)
    #: Files of 0 bytes, not opened: no run, no problem (``find_snapshot_files``).
    empty: list[str] = field(default_factory=list)


def read_inputs(paths_or_runs: Any, *, meter: Progress | None = None) -> WhatIfInputs:
    """Read snapshot paths (files, directories) or take runs as given, in order.

    Accepts a path, a :class:`Run`, a :class:`RunMessages`, or a sequence of them.
    An unreadable file is listed in ``problems``; the rest is still read. A run read
    twice is replayed once, as every command counts it (see :class:`RunIdentity`).
    ``meter`` is shown the files read and the runs taken.
    """
    items = (
        [paths_or_runs]
        if isinstance(paths_or_runs, str | Path | Run | RunMessages)
        else paths_or_runs
    )
    inputs = WhatIfInputs()
    taken = _Taken()
    # a big trace file's span records wait on disk here (read.otel's budget), in a folder
    # made by the first that spills and removed at the end, error or not
    folder = spill_folder("whatif")
    try:
        traces = TraceInputs((), messages=True, spill_folder=folder)
        for item in items:
            if isinstance(item, RunMessages):
                taken.given(item)
            elif isinstance(item, Run):
                _take(taken, item)
            else:
                found = find_snapshot_files([item])
                inputs.skipped.extend(found.skipped)
                inputs.empty.extend(found.empty)
                for done, path in enumerate(found.files):
                    if meter is not None and meter.due():
                        meter.show(_reading_line(len(taken.runs), done, len(found.files), meter))
                    spill = SpillTo(folder)
                    read = traces.take(read_file(path, (), {}, False, streams=True, spill=spill))
                    _take_streams(inputs, taken, read)
        if traces:  # a trace's spans may be in any file: its runs come once all are read
            _take_streams(inputs, taken, traces.finish())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    taken.finish(inputs)
    return inputs


@dataclass
class _Taken:
    """The runs taken so far, each where :meth:`RunIdentity.place` puts it: a later copy
    of a recording with more identity takes the place of the copy taken first."""

    identity: RunIdentity = field(default_factory=RunIdentity)
    #: Each run's stream and standings, in the order taken.
    runs: list[tuple[RunMessages, list[dict[str, Any]]]] = field(default_factory=list)
    #: Where in ``runs`` each of the identity's slots is.
    positions: list[int] = field(default_factory=list)

    def take(
        self,
        run: Run | RunStream,
        messages: RunMessages,
        standings: list[dict[str, Any]],
    ) -> None:
        """Take ``run`` (its ``messages`` and ``standings``) if it is the copy that counts."""
        slot = self.identity.place(
            run.run_id, run.source, execution_id=run.execution_id, named=run.named
        )
        if slot is None:
            return
        if slot == len(self.positions):
            self.positions.append(len(self.runs))
            self.runs.append((messages, standings))
        else:
            self.runs[self.positions[slot]] = (messages, standings)

    def given(self, messages: RunMessages) -> None:
        """A stream given as it is (no file, no identity to compare)."""
        self.runs.append((messages, []))

    def finish(self, inputs: WhatIfInputs) -> None:
        """Hand ``inputs`` the streams and standings taken, the conflicts and duplicates."""
        inputs.streams = [messages for messages, _ in self.runs]
        inputs.standings = [row for _, standings in self.runs for row in standings]
        inputs.problems.extend(self.identity.conflicts)
        inputs.duplicates = self.identity.duplicate_table()


def read_with_tables(
    paths: Sequence[str | Path],
    modes: Sequence[str],
    *,
    workers: int | None = None,
    each_file: Callable[[FileRead], None] | None = None,
) -> tuple[dict[str, RunTables], WhatIfInputs]:
    """The tables of each accounting in ``modes`` and the what-if inputs, in one pass
    over the snapshots: each equal to what :func:`read_runs` and :func:`read_inputs`
    give on their own (the report needs all three). ``each_file`` is called after each
    file is taken in (a progress meter).

    >>> tables, inputs = read_with_tables(["data/sample"], ["corrected"])
    >>> tables["corrected"].runs.num_rows == len(inputs.streams) == 14
    True
    """
    inputs = WhatIfInputs()
    taken = _Taken()
    found = read_accountings(
        list(paths),
        modes,
        workers=workers,
        each_file=lambda read: _take_streams(inputs, taken, read, each_file),
    )
    taken.finish(inputs)
    inputs.skipped = list(next(iter(found.values())).skipped) if found else []
    inputs.empty = list(next(iter(found.values())).empty) if found else []
    return found, inputs


def _take_streams(
    inputs: WhatIfInputs,
    taken: _Taken,
    read: FileRead,
    then: Callable[[FileRead], None] | None = None,
) -> None:
    """A file's streams (the copy of each run that counts) and the problems that touch
    them (the document's own, or its stream's; not one accounting's)."""
    inputs.problems.extend(problem for confined, problem in read.problems if confined in _OURS)
    taken.identity.add_duplicates(read.duplicates)
    for stream in read.streams:
        taken.take(stream, stream.messages, stream.standings)
    if then is not None:
        then(read)


#: Problems of a :class:`FileRead` that keep a run out of a what-if.
_OURS = (None, "whatif")


def _reading_line(runs: int, done: int, files: int, meter: Progress) -> str:
    counts = f"{done:,}/{files:,} files  {runs:,} runs  {meter.elapsed:.0f} s"
    return f"{meter.command}: reading {counts}"


def _replaying_line(done: int, runs: int | None, meter: Progress) -> str:
    total, elapsed = f"/{runs:,}" if runs is not None else "", meter.elapsed
    counts = f"{done:,}{total} runs  {done / elapsed:,.0f} runs/s  {elapsed:.0f} s"
    return f"{meter.command}: replayed {counts}"


def replay_streams(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, Policy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    *,
    meter: Progress | None = None,
    chunk_runs: int = REPLAY_CHUNK_RUNS,
) -> pl.DataFrame:
    """:func:`whatif_table` over ``streams``, ``chunk_runs`` runs at a time so that
    ``meter`` can show how far the replay is (each run is replayed on its own: the rows
    are those of one call over all of them, as :func:`whatif_archive`'s batches are)."""
    if meter is None or meter.stream is None:
        return whatif_table(streams, policies, standings_rows)
    frames = []
    for first in range(0, len(streams), chunk_runs):
        frames.append(whatif_table(streams[first : first + chunk_runs], policies, standings_rows))
        done = min(first + chunk_runs, len(streams))
        meter.show(_replaying_line(done, len(streams), meter))
    return pl.concat(frames) if frames else whatif_table(streams, policies, standings_rows)


def _take(taken: _Taken, run: Run) -> None:
    """Fold ``run``'s stream; keep it if it is the copy of its run that counts."""
    taken.take(run, rebuild_messages(run), standings_from_snapshot(run))


def _standing_rows(standings: Any) -> list[dict[str, Any]]:
    if standings is None:
        return []
    if isinstance(standings, str | Path):
        return load_standings(standings).to_pylist()
    if isinstance(standings, pl.DataFrame):
        standings = standings.to_arrow()
    if isinstance(standings, pa.Table):
        rows = standings.to_pylist()
        for row in rows:
            row.setdefault("source", "table")
            row["iteration"] = row.get("iteration") or 0
        return rows
    msg = f"standings must be a file path, a Polars frame or an Arrow table, not {type(standings)}"
    raise TypeError(msg)


def whatif(
    paths_or_runs: Any,
    policies: Sequence[str | Policy] | str,
    standings: Any = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Replay every run under every policy: ``(per_run, per_policy)``.

    ``standings`` (a CSV / JSON Lines file, or a frame with ``run_id,
    tool_call_id, standing, iteration``) adds to the findings ledgers the
    snapshots hold and arms the ledger-fact pin for the runs it names.
    ``paths_or_runs`` may name an archive (``DIR``, ``DIR?since=..&label=..``): its
    runs are read back from their stored message streams, a batch at a time.

    >>> per_run, per_policy = whatif("data/sample/s0001-fact-bench.json.gz",
    ...                              ["none", "sliding:keep=6"])
    >>> per_policy.select("policy", "runs", "answer_results_verbatim_total").rows()
    [('none', 1, 20), ('sliding:keep=6', 1, 6)]
    """
    specs = [policies] if isinstance(policies, str | Policy) else list(policies)
    parsed = parse_policies(specs)
    if isinstance(paths_or_runs, str | Path):
        archived = whatif_archive(paths_or_runs, parsed, _standing_rows(standings))
        if archived is not None:
            for problem in archived.problems:
                warnings.warn(f"skipped {problem.where}: {problem.reason}", stacklevel=2)
            per_run = archived.per_run
            return per_run, per_policy(per_run)
    inputs = read_inputs(paths_or_runs)
    for problem in inputs.problems:
        warnings.warn(f"skipped {problem.where}: {problem.reason}", stacklevel=2)
    per_run = whatif_table(inputs.streams, parsed, [*inputs.standings, *_standing_rows(standings)])
    return per_run, per_policy(per_run)


@dataclass
class ArchiveReplay:
    """``whatif`` over an archive: the per-run rows, how fast they came, and the selected
    runs it could not replay (archived without a message stream: ingest could not fold
    it, and quarantined it for ``whatif``), each with where it came from and why.

    The rows are written to Parquet a batch at a time as they are replayed, and
    ``rows`` scans them, so the replay's memory does not grow with the archive;
    ``per_run`` collects them all. The files are deleted with this object: scan
    ``rows`` while it is alive.
    """

    rows: pl.LazyFrame
    runs: int
    seconds: float
    problems: list[ReadProblem] = field(default_factory=list)
    spill: OwnFolder | None = field(default=None, repr=False)
    #: What the reader doubted about runs it still replayed, as ingest stored it
    #: (``RunMessages.notes``): the same lines the files' what-if says.
    notes: list[str] = field(default_factory=list)
    #: Selected runs not replayed: the runs of each damaged commit (once, however many
    #: of its files are damaged) and each run without a stored stream.
    runs_left_out: int = 0
    #: False: a lost commit's run count is unknown, so at least ``runs_left_out``.
    left_out_known: bool = True
    #: A run-level filter (run ids, a label): a damaged commit may hold fewer selected runs.
    filtered: bool = False
    #: Ids of the selection's ``run_id`` filter that name no run the archive holds.
    unmatched_run_ids: list[str] = field(default_factory=list)

    def _counts(self) -> list[tuple[str, str]]:
        return [
            ("runs replayed", f"{self.runs:,} in {self.seconds:.1f} s"),
            ("left out", self.left_out_text() or "none"),
        ]

    def __repr__(self) -> str:
        """How many runs, how fast, what was left out: not the rows (``.rows`` scans them)."""
        from contextledger.tables.display import summary_text

        return summary_text("ArchiveReplay", self._counts())

    def _repr_html_(self) -> str:
        """In Jupyter: how many runs, how fast, what was left out, and the per-policy table."""
        from contextledger.tables.display import summary_html

        return summary_html("What-if over an archive", self._counts(), per_policy(self.rows))

    def left_out_text(self) -> str:
        """How many runs were left out and how many problems are named: ``''`` if none.

        Damaged files and runs are counted apart: one damaged commit may have several
        damaged files, and one damaged file takes out every run of its commit.
        """
        if not self.problems:
            return ""
        count = f"{self.runs_left_out:,} run(s)"
        if not self.left_out_known:
            known = self.runs_left_out and not self.filtered
            count = f"at least {count}" if known else "an unknown number of runs"
        elif self.filtered and self.runs_left_out:
            count = f"up to {count}"
        return f"{count} left out, {len(self.problems)} problem(s) named below"

    @property
    def per_run(self) -> pl.DataFrame:
        return self.rows.collect()

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0


def whatif_archive(
    paths: str | Path | Sequence[str | Path],
    policies: Sequence[tuple[str, Policy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
    batch_runs: int | None = None,
    *,
    meter: Progress | None = None,
) -> ArchiveReplay | None:
    """:func:`whatif_table` over the archive ``paths`` name (``DIR`` or ``DIR?since=..``),
    reading and replaying a batch of runs at a time; None when no path is an archive
    (an archive must be the only path, as :func:`~contextledger.archive.archive_tables`
    requires).

    The rows are those :func:`whatif_table` gives over the snapshots the archive was
    ingested from; a selected run whose stream ingest could not store is left out and
    named in ``problems``, after the archive's damage (each damaged commit is left
    out). Raises :class:`~contextledger.archive.ArchiveError` for an archive without
    message streams. ``meter`` is shown the runs replayed after each batch.
    """
    import time

    from contextledger.archive.tables import archive_tables
    from contextledger.archive.windows import STREAM_BATCH_RUNS, window_batches

    named = [paths] if isinstance(paths, str | Path) else paths
    tables = archive_tables([str(path) for path in named], ACCOUNTING_MODES[0])
    if tables is None:
        return None
    started = time.perf_counter()
    archive, selection = tables.archive, tables.selection
    spill = OwnFolder("rows")
    parts: list[str] = []
    notes: list[str] = []
    runs = 0
    batches = window_batches(archive, selection, batch_runs or STREAM_BATCH_RUNS)
    for streams, messages, snapshot_standings in batches:
        notes += stored_notes(streams)
        frame = _replay_tables(streams, messages, snapshot_standings, policies, standings_rows)
        parts.append(str(Path(spill.name) / f"part-{len(parts):06d}.parquet"))
        frame.write_parquet(parts[-1])
        runs += streams.num_rows
        if meter is not None:
            meter.show(_replaying_line(runs, None, meter))
    rows = (
        pl.scan_parquet(parts, glob=False)
        if parts
        else pl.DataFrame(schema.WHATIF_RUNS.empty_table()).lazy()
    )
    replay = ArchiveReplay(rows, runs, time.perf_counter() - started, spill=spill, notes=notes)
    return with_problems(replay, tables)


def stored_notes(streams: pa.Table) -> list[str]:
    """The notes ``streams`` (``schema.STREAMS`` rows) hold, in run order (none in an
    archive ingested before notes were stored).

    >>> stored_notes(pa.table({"run_id": ["a", "b"], "notes": [["a.jsonl:1 (run a): far"], []]}))
    ['a.jsonl:1 (run a): far']
    """
    if "notes" not in streams.column_names:
        return []
    return [note for notes in streams["notes"].to_pylist() for note in notes or ()]


def _replay_tables(
    streams: pa.Table,
    messages: pa.Table,
    snapshot_standings: pa.Table,
    policies: Sequence[tuple[str, Policy]],
    standings_rows: Sequence[Mapping[str, Any]],
) -> pl.DataFrame:
    """:func:`whatif_table` of one batch of an archive's window tables: the kernel's arrays
    laid out from the stored columns, ``Message`` objects built only for the runs
    replayed exactly (building them for every run cost as much as the replay)."""
    import pyarrow.compute as pc

    by_run = timelines([*snapshot_standings.to_pylist(), *standings_rows])
    arrays = turn_arrays_from_tables(streams, messages, by_run)

    def streams_of(rows: Sequence[int]) -> list[RunMessages]:
        chosen = streams.take(pa.array(rows, type=pa.int64()))
        held = pc.is_in(messages["run_id"], value_set=chosen["run_id"].combine_chunks())
        return streams_from_tables(chosen, messages.filter(held))

    return whatif_arrays(arrays, policies, by_run, streams_of)


def with_problems(replay: ArchiveReplay, tables: ArchiveTables) -> ArchiveReplay:
    """``replay`` with what it could not replay: the archive's damage the selection
    touches (each damaged commit is left out), the inputs ingest could not read (what
    the folder's what-if names), then the selected runs without a stored stream; and
    how many runs that leaves out (a whole file unread: an unknown number); and the
    ``run_id`` filter's ids that name no run the archive holds."""
    from contextledger.archive.damage import runs_left_out
    from contextledger.archive.windows import unreplayable_runs

    unread = tables.unreadable(None).to_pylist()[len(tables.damage) :]
    unreplayable = unreplayable_runs(tables.archive, tables.selection)
    replay.problems = [ReadProblem(p.path, None, None, p.reason) for p in tables.damage]
    replay.problems += [ReadProblem(**row) for row in [*unread, *unreplayable]]
    lost, replay.left_out_known = runs_left_out(tables.damage)
    lines = sum(row["line"] is not None for row in unread)  # a line held one run
    replay.left_out_known &= lines == len(unread)
    replay.runs_left_out = lost + lines + len(unreplayable)
    replay.filtered = tables.run_id_filter() is not None
    replay.unmatched_run_ids = tables.unmatched_run_ids()
    return replay
