"""What every command shares: its options, how it reads its inputs, how it says what
went wrong, and how it writes its output (to stdout, or a file whole or not at all).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from contextledger.ledger import DEFAULT_MIN_OFFERS
from contextledger.output import atomic_path, file_target, terminal_lines, terminal_text
from contextledger.read.snapshot import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    ReadError,
    ReadProblem,
)
from contextledger.read.snapshot_files import describe_empty, describe_skipped
from contextledger.tables import ACCOUNTING_MODES

if TYPE_CHECKING:
    import polars as pl

    from contextledger.archive import ArchiveTables
    from contextledger.tables.build import RunTables

#: Exit statuses, said once for the README and ``contextledger --help``.
EXIT_UNREADABLE_INPUT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
EXIT_STATUSES = {
    0: "every input was read",
    EXIT_UNREADABLE_INPUT: "an input could not be read (named on stderr); none read: no output",
    EXIT_USAGE: "a command-line mistake, a bad option file, or an output not written",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
#: The largest number an integer option takes (as a policy spec's, ``MAX_SPEC_NUMBER``):
#: past any real count of runs, offers or MiB, and within every 64-bit column and C call.
MAX_WHOLE = 1_000_000_000

F = TypeVar("F", bound=Callable[..., Any])


#: Options several commands share, defined once.
paths_argument = click.argument("paths", nargs=-1, required=True, type=click.Path())
mode_option = click.option(
    "--mode",
    type=click.Choice(ACCOUNTING_MODES),
    default="corrected",
    show_default=True,
    help="corrected: what each call was really sent and used; "
    "reference: agentfootprint 9.62's numbers, quirks included.",
)
strict_option = click.option("--strict", is_flag=True, help="Stop at the first unreadable input.")
#: ``--engine``: compute here, or on Spark SQL over an archive (see :func:`_spark_engine`).
engine_option = click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="local: Polars/DuckDB on this machine; spark: Spark SQL over an archive, the same "
    "views and numbers; ingest: the files read on Spark's executors, the same archive "
    "(pip install 'contextledger[spark]'; master from spark-submit, "
    "else $SPARK_MASTER, else local[*]).",
)

#: ``--progress/--no-progress``: a progress line on stderr; not given, only on a terminal.
progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress line [default: when stderr is a terminal].",
)


def whole_number(minimum: int, maximum: int = MAX_WHOLE) -> click.IntRange:
    """An integer option's type, bounded both ways where it is declared: a huge number is
    refused by click in one line (exit 2) instead of overflowing a column or a C call."""
    return click.IntRange(min=minimum, max=maximum)


def _use_max_document_mb(ctx: click.Context, _: click.Parameter, megabytes: int) -> None:
    """Set the cap where every reader looks, worker processes too (they inherit the
    environment), for this command only."""
    before = os.environ.get(MAX_DOCUMENT_MB_ENV)
    os.environ[MAX_DOCUMENT_MB_ENV] = str(megabytes)

    def restore() -> None:
        if before is None:
            os.environ.pop(MAX_DOCUMENT_MB_ENV, None)
        else:
            os.environ[MAX_DOCUMENT_MB_ENV] = before

    ctx.call_on_close(restore)


#: ``--max-document-mb N``: refuse a snapshot (a JSON Lines line) larger than this, decompressed.
max_document_option = click.option(
    "--max-document-mb",
    type=whole_number(1),
    default=DEFAULT_MAX_DOCUMENT_MB,
    show_default=True,
    envvar=MAX_DOCUMENT_MB_ENV,
    expose_value=False,
    callback=_use_max_document_mb,
    help="Refuse a snapshot (a JSON Lines line) larger than this many MiB, decompressed: "
    "a gzip bomb is stopped there.",
)


def min_offers_option(*, help: str) -> Callable[[F], F]:
    """``--min-offers N`` (at least 1: a piece offered 0 times has no earn rate to judge),
    the same range for ``ledger`` and ``gates``."""
    return click.option(
        "--min-offers",
        type=whole_number(1),
        default=DEFAULT_MIN_OFFERS,
        show_default=True,
        help=help,
    )


def _file_option(name: str, dest: str, default_help: str) -> Callable[..., Callable[[F], F]]:
    def option(*, required: bool = False, help: str = default_help) -> Callable[[F], F]:
        return click.option(
            name, dest, required=required, type=click.Path(dir_okay=False), help=help
        )

    return option


#: ``--outcomes FILE``: labels per run, credited to every piece the run offered.
outcomes_option = _file_option(
    "--outcomes",
    "outcomes_file",
    "CSV or JSON Lines of run_id,label; a run may carry several labels.",
)
#: ``--static-tools FILE``: the runner's static tool names, which a snapshot does not hold.
static_tools_option = _file_option(
    "--static-tools",
    "static_tools_file",
    "JSON {run_id: [tool names]} the runner exposed; overrides the corpus wrapper.",
)
#: ``--standings FILE``: the model's standing of tool results, for the ledger-fact pin.
standings_option = _file_option(
    "--standings",
    "standings_file",
    "CSV or JSON Lines of run_id,tool_call_id,standing,iteration: the model's standing "
    "(fact/open/noise/ruled-out) of tool results, counted from the visit after iteration.",
)


#: ``--csv-safe``: the spreadsheet guard on CSV cells (``output.spreadsheet_safe``).
csv_safe_option = click.option(
    "--csv-safe",
    is_flag=True,
    help="CSV for a spreadsheet: prefix text cells that start with = + - @ (a formula to "
    "Excel or LibreOffice) with ' [default: every value as it is].",
)


def format_option(choices: Sequence[str], *, help: str) -> Callable[[F], F]:
    """``--format``, ``table`` by default (for people: :mod:`contextledger.cli.terminal`)."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(list(choices)),
        default="table",
        show_default=True,
        help=help,
    )


def _csv(frame: pl.DataFrame, csv_safe: bool) -> str:
    """``frame`` as CSV, its formula-like text cells guarded when ``csv_safe``."""
    from contextledger.output import spreadsheet_safe

    return (spreadsheet_safe(frame) if csv_safe else frame).write_csv()


def _warn(message: str | Sequence[str]) -> None:
    """``contextledger: MESSAGE`` on stderr, its control characters escaped. A message of
    several lines comes as a list: the newlines between them are the program's and kept,
    any inside one (from a file name) are escaped (:func:`terminal_lines`)."""
    lines = [message] if isinstance(message, str) else list(message)
    click.echo(terminal_lines([f"contextledger: {lines[0]}", *lines[1:]]), err=True)


def _fail(message: str | Sequence[str]) -> None:
    _warn(message)
    sys.exit(EXIT_USAGE)


def _error_lines(error: Exception) -> list[str]:
    """An error's message as the lines the program wrote (see :func:`_warn`)."""
    from contextledger.archive import ArchiveDamaged

    return error.lines if isinstance(error, ArchiveDamaged) else [str(error)]


def _unopened(error: OSError) -> str:
    """A named file that could not be opened, said as a missing input is
    (``nosuch.csv: no such file``), not as Python's ``[Errno 2] ...``."""
    missing = isinstance(error, FileNotFoundError)
    reason = "no such file" if missing else (error.strerror or str(error)).lower()
    return f"{error.filename}: {reason}" if error.filename is not None else str(error)


def _output_file(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Refuse an ``-o`` that names no file (empty, ``dir/``, below a file) before any work."""
    if value is not None:
        try:
            file_target(value)
        except OSError as error:
            _fail(f"cannot write {value or repr(value)}: {error.strerror or error}")
    return value


#: ``-o FILE``: every command writes it whole or not at all (see ``_writing``).
output_option = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    callback=_output_file,
    help="Write here instead of stdout (missing folders are made; written whole or not at all).",
)


@contextlib.contextmanager
def _writing(output: str) -> Iterator[Path]:
    """A temporary path to write ``output`` through (``atomic_path``); a write that fails
    (a full disk, an unwritable folder) is one line on stderr and exit 2, ``output``
    left as it was."""
    import polars as pl

    try:
        with atomic_path(output) as temporary:
            yield temporary
    except OSError as error:
        _fail(f"cannot write {output or repr(output)}: {error.strerror or error}")
    except pl.exceptions.PolarsError as error:  # a Polars writer's I/O error
        _fail(f"cannot write {output}: {str(error).splitlines()[0]}")


def _emit(text: str, output: str | None) -> None:
    """Print ``text``, or write it to ``output`` through :func:`_writing`."""
    if output is None:
        click.echo(text, nl=False, color=True)  # as it is: click strips ANSI codes otherwise
        return
    with _writing(output) as temporary:
        temporary.write_text(text, encoding="utf-8")


def _json_object(document: Any) -> str:
    """An aggregate's ``--format json`` (``ledger``'s excepted: LedgerJSON as the reference
    prints it, compact too): one compact JSON object on one line. Row results are JSON
    Lines instead (``frame.write_ndjson()``): the rule and each shape are in docs/cli.md's
    "Output formats"."""
    import json

    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"


def _spark_engine(engine: str, paths: Sequence[str], *, reads_archive: bool = True) -> Any:
    """None for ``--engine local``; for ``spark``, the call running a Spark function that
    exits 2 with Spark's message when it fails (checked first: the extra is installed and,
    when the command ``reads_archive``, PATHS name one archive; ingest reads snapshots)."""
    if engine != "spark":
        return None
    import contextledger.jobs.spark as on_spark
    from contextledger.archive import ArchiveError
    from contextledger.archive.selection import parse_archive_path

    missing = on_spark.available()
    if missing:
        _fail(f"--engine spark: {missing}")
    try:
        archive = len(paths) == 1 and parse_archive_path(paths[0]) is not None
    except ArchiveError:
        archive = True  # a bad filter: _read_inputs names it
    if reads_archive and not archive:
        _fail("--engine spark reads one archive: contextledger ingest PATH... --archive DIR")

    def run(function: str, *args: Any, failure: str = "Spark", **options: Any) -> Any:
        from pyspark.errors import PySparkException

        try:
            return getattr(on_spark, function)(*args, **options)
        except PySparkException as error:
            _fail(f"{failure}: {str(error).strip().splitlines()[0]}")

    return run


def _read_inputs(
    paths: Sequence[str],
    mode: str,
    static_tools_file: str | None,
    outcomes_file: str | None,
    strict: bool,
    *,
    every_table: bool = False,
    listed: Sequence[str] = (),
) -> RunTables:
    """The runs under ``paths`` (snapshots, or an archive and its selection), each
    unreadable input, skipped file, duplicate and unmatched label named on stderr.
    ``every_table``: an archive's every selected file is checked first (SQL may read
    any), not only what the ledger reads; ``listed``: these tables' files too (what the
    command lists beyond that), so damage in them leaves its commit out, said here."""
    try:
        sidecar = outcomes = None
        if static_tools_file or outcomes_file:
            from contextledger.tables.sidecars import load_outcomes, load_static_tools

            sidecar = load_static_tools(static_tools_file) if static_tools_file else None
            outcomes = load_outcomes(outcomes_file) if outcomes_file else None
    except OSError as error:
        _fail(_unopened(error))
        raise  # unreachable: _fail exits
    except ValueError as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    try:  # an archive DIR (DIR?since=...&until=...&label=...&run_id=...) is read lazily
        archived = _archive_tables(paths, mode, every_table=every_table, listed=listed)
        if archived is None:
            from contextledger.tables.ahead import start_reading

            # the workers start reading before the engines are imported, which then
            # load while they read (docs/benchmarks.md: the ledger against agentfootprint)
            reading = start_reading(paths, (mode,), dict(sidecar or {}), strict, None, False)
            import polars  # noqa: F401  (loads now, while they read)

            from contextledger.tables.build import read_accountings

            tables = read_accountings(  # read_runs', without its warnings: said here
                paths, (mode,), static_tools=sidecar, strict=strict, reading=reading
            )[mode]
        else:
            tables = archived
    except ReadError as error:
        _warn(f"{error.source}: {error.reason} (stopped: --strict)")
        sys.exit(EXIT_UNREADABLE_INPUT)
    problems = tables.frame("problems").to_dicts()  # Polars: snapshots need no Arrow
    if strict and problems:  # an archive's: ingest recorded them, unread
        first = problems[0]
        _warn(f"{ReadProblem(**first).where}: {first['reason']} (stopped: --strict)")
        sys.exit(EXIT_UNREADABLE_INPUT)
    runs = tables.frame("runs")["run_id"].to_list()
    if archived is not None:
        _name_unmatched_run_ids(archived.unmatched_run_ids())
    _name_skipped(tables.skipped, tables.empty)
    for problem in problems:
        _warn(f"skipped {ReadProblem(**problem).where}: {problem['reason']}")
    _refuse_if_nothing_read(len(runs), len(problems))
    _name_duplicates(tables.frame("duplicates").to_dicts())
    if outcomes is not None:
        tables = tables.with_outcomes(outcomes)
    _name_unmatched_labels(tables)
    _name_nothing_selected(len(runs), paths, archived=archived is not None)
    given = outcomes.column("run_id").to_pylist() if outcomes is not None else []
    if runs and given and set(given).isdisjoint(runs):
        _warn(f"--outcomes {outcomes_file}: no run read carries one of its labels")
    return tables


def _refuse_if_nothing_read(runs: int, unreadable: int) -> None:
    """Exit 1 with one line, printing and writing nothing, when no run was read because
    every input was unreadable (``ledger nosuch``): an empty result would pass for an
    answer, and ``-o`` would replace a good file with it. An empty folder or an archive
    selection that holds no run is an answer, and is printed (with a note)."""
    if runs == 0 and unreadable:
        inputs = "input" if unreadable == 1 else f"{unreadable} inputs"
        _warn(f"nothing was read (the {inputs} named above could not be): no output written")
        sys.exit(EXIT_UNREADABLE_INPUT)


def _archive_tables(
    paths: Sequence[str], mode: str, *, every_table: bool, listed: Sequence[str]
) -> ArchiveTables | None:
    """The archive ``paths`` name (``archive_tables``), every selected file checked first
    when ``every_table`` (else the files of the ``listed`` tables); None, without
    importing the archive's Parquet stack (0.07 s of CPU), when no path could name one:
    no ``?``, no URI scheme, no ``archive.json``."""
    if not any(":" in path or "?" in path or Path(path, "archive.json").exists() for path in paths):
        return None
    from contextledger.archive import ArchiveError, archive_tables

    try:
        archived = archive_tables(paths, mode)
        if archived is not None and (every_table or listed):
            archived.check_tables(None if every_table else listed)
        return archived
    except ArchiveError as error:
        _fail(str(error))
        raise  # unreachable: _fail exits


def _name_nothing_selected(
    runs: int, paths: Sequence[str], *, archived: bool, then: str = ""
) -> None:
    """Say on stderr that ``paths`` gave no run, naming them (an archive's filter
    included): a note, not an error, so a selection that happens to be empty still
    exits 0. ``then`` says what that leaves (``: nothing to replay``)."""
    if runs == 0:
        source = f"{'selected by' if archived else 'read from'} {' '.join(paths)}"
        _warn(f"no run {source}{then}")


def _from_archive(tables: RunTables) -> bool:
    """Whether ``tables`` were read from an archive (no archive code is imported to ask:
    tables of snapshots never load it)."""
    archive = sys.modules.get("contextledger.archive")
    return archive is not None and isinstance(tables, archive.ArchiveTables)


def _name_unmatched_labels(tables: RunTables) -> None:
    """Say which outcome labels (given, or an archive's stored ones) name no run read (no
    run the archive holds): how many, the first few."""
    from contextledger.read.identity import describe_unmatched

    held = _from_archive(tables)
    runs = "run the archive holds" if held else "run read"
    if held and tables.archive.damage:  # type: ignore[attr-defined]  # their runs left out
        runs = "run read from the archive's intact commits (the damaged ones are named above)"
    line = describe_unmatched("outcome label", tables.unmatched_label_ids(), runs=runs)
    if line is not None:
        _warn(line)


def _name_unmatched_run_ids(ids: Sequence[str]) -> None:
    """Say which ids of an archive's ``run_id`` filter name no run it holds (a note, as
    for labels: the runs it does hold are read, the exit status stays as it is)."""
    from contextledger.read.identity import describe_unmatched

    line = describe_unmatched("run_id filter", list(ids), runs="run the archive holds")
    if line is not None:
        _warn(line)


def _name_skipped(skipped: Sequence[str], empty: Sequence[str] = ()) -> None:
    """Say on stderr which files in input folders were not read for their names, and
    which files were empty (notes: the exit status stays as it is)."""
    line = describe_skipped(skipped)
    if line is not None:
        _warn(line)
    for line in describe_empty(empty):
        _warn(line)


def _name_duplicates(duplicates: Any) -> None:
    """Say on stderr which copies of a run were counted once (not an error: exit 0)."""
    from contextledger.read.identity import describe_duplicates

    for line in describe_duplicates(duplicates):
        _warn(line)


def _name_unmatched(what: str, ids: Sequence[str], run_ids: Any) -> None:
    """Say on stderr how many ``what`` rows name no run read, and the first few ids."""
    from contextledger.read.identity import describe_unmatched, unmatched_ids

    line = describe_unmatched(what, unmatched_ids(ids, run_ids))
    if line is not None:
        _warn(line)


def _summary(tables: RunTables) -> str:
    import polars as pl

    from contextledger.read.identity import is_conflict

    runs = tables.frame("runs")
    metered = int(runs["metered"].sum()) if runs.height else 0
    refused = runs.filter(~pl.col("metered"))
    reasons_unread = tables.frame("problems")["reason"].to_list()
    conflicts = sum(map(is_conflict, reasons_unread))
    copies = f", {conflicts} conflicting copy(ies) not counted" if conflicts else ""
    line = (
        f"{metered:,} run(s) metered, {refused.height:,} refused ({tables.mode} accounting; "
        f"{len(reasons_unread) - conflicts:,} input(s) unreadable{copies})"
    )
    reasons = refused.group_by("refused_reason").agg(
        runs=pl.len(), examples=pl.col("run_id").head(3)
    )
    for reason, count, examples in reasons.sort("runs", descending=True).iter_rows():
        line += f"\n  refused {count:,}: {reason} (e.g. {terminal_text(', '.join(examples))})"
    redacted = runs.filter(pl.col("metered") & (pl.col("basis").list.len() > 0))
    if redacted.height:  # RecordedRun.basis / unmetered: a placeholder is not "not used"
        kinds = redacted["unmetered_kinds"].explode().drop_nulls().unique(maintain_order=True)
        examples = terminal_text(", ".join(redacted["run_id"].head(3)))
        line += (
            f"\n  {redacted.height:,} run(s) rest partly on a redaction: "
            f"{', '.join(sorted(kinds))} left unmetered there (e.g. {examples})"
        )
    return line
