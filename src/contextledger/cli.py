"""The ``contextledger`` command line.

Exit status: 0 when every input was read; 1 when some input could not be read
(each is named on stderr, everything else is still read and counted); 2 for a
command-line mistake, an unreadable option file (outcomes, sidecar, ledger) or an
output file that could not be written (it is then left as it was, never half-written).
A reader that closes the pipe early (``| head``) ends the command quietly.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import polars as pl

from contextledger.ledger import ledgerjson
from contextledger.ledger.compute import Ledger, compute_ledger, merge_ledgers
from contextledger.ledger.stats import (
    DEFAULT_MIN_OFFERS,
    outcome_association,
    outcomes_text,
    used_via_text,
    with_uncertainty,
)
from contextledger.output import (
    CONTROL_ESCAPES,
    atomic_path,
    file_target,
    terminal_lines,
    terminal_text,
)
from contextledger.read.identity import describe_duplicates, describe_unmatched, unmatched_ids
from contextledger.read.snapshot import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    ReadError,
    ReadProblem,
    describe_skipped,
)
from contextledger.tables.build import (
    ACCOUNTING_MODES,
    RunTables,
    load_outcomes,
    load_static_tools,
    read_runs,
)
from contextledger.tables.schema import USED_SIGNAL_COLUMNS

EXIT_UNREADABLE_INPUT = 1
EXIT_USAGE = 2

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
    type=click.IntRange(min=1),
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
        type=click.IntRange(min=1),
        default=DEFAULT_MIN_OFFERS,
        show_default=True,
        help=help,
    )


def _chart_formats(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    """``svg``, ``png``, both comma-separated in any order, or ``none``."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if names == ["none"]:
        return ()
    unknown = [name for name in names if name not in ("svg", "png")]
    if unknown or not names:
        raise click.BadParameter(f"{value!r}: give svg, png, svg,png or none")
    return tuple(dict.fromkeys(names))


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


def _ingest_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--ingest-date`` as the YYYY-MM-DD an archive stores (a usage error otherwise)."""
    from contextledger.archive.store import ingest_date_text

    try:
        return None if value is None else ingest_date_text(value, "ingest date")
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextledger")
def main() -> None:
    """Which context pieces earned their tokens: analytics over recorded agentfootprint runs."""


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


def _spark_engine(engine: str, paths: Sequence[str], *, reads_archive: bool = True) -> Any:
    """None for ``--engine local``; for ``spark``, the call running a Spark function that
    exits 2 with Spark's message when it fails (checked first: the extra is installed and,
    when the command ``reads_archive``, PATHS name one archive; ingest reads snapshots)."""
    if engine != "spark":
        return None
    import contextledger.jobs.spark as on_spark
    from contextledger.archive import ArchiveError
    from contextledger.archive.tables import parse_archive_path

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
) -> RunTables:
    try:
        sidecar = load_static_tools(static_tools_file) if static_tools_file else None
        outcomes = load_outcomes(outcomes_file) if outcomes_file else None
    except (OSError, ValueError) as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    from contextledger.archive import ArchiveError, archive_tables

    try:  # an archive DIR (DIR?since=...&until=...&label=...&run_id=...) is read lazily
        tables = archive_tables(paths, mode) or read_runs(
            paths, mode=mode, static_tools=sidecar, strict=strict
        )
    except ReadError as error:
        _warn(f"{error.source}: {error.reason} (stopped: --strict)")
        sys.exit(EXIT_UNREADABLE_INPUT)
    except ArchiveError as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    _name_skipped(tables.skipped)
    for problem in tables.problems.to_pylist():
        _warn(f"skipped {ReadProblem(**problem).where}: {problem['reason']}")
    _name_duplicates(tables.duplicates)
    if outcomes is not None:
        tables = tables.with_outcomes(outcomes)
    _name_unmatched_labels(tables)
    return tables


def _name_unmatched_labels(tables: RunTables) -> None:
    """Say which outcome labels (given, or an archive's stored ones) name no run read (no
    run the archive holds): how many, the first few."""
    from contextledger.archive import ArchiveTables

    held = isinstance(tables, ArchiveTables)
    runs = "run the archive holds" if held else "run read"
    line = describe_unmatched("outcome label", tables.unmatched_label_ids(), runs=runs)
    if line is not None:
        _warn(line)


def _name_skipped(skipped: Sequence[str]) -> None:
    """Say on stderr which files in input folders were not read for their names (a note:
    the exit status stays as it is)."""
    line = describe_skipped(skipped)
    if line is not None:
        _warn(line)


def _name_duplicates(duplicates: Any) -> None:
    """Say on stderr which copies of a run were counted once (not an error: exit 0)."""
    for line in describe_duplicates(duplicates):
        _warn(line)


def _name_unmatched(what: str, ids: Sequence[str], run_ids: Any) -> None:
    """Say on stderr how many ``what`` rows name no run read, and the first few ids."""
    line = describe_unmatched(what, unmatched_ids(ids, run_ids))
    if line is not None:
        _warn(line)


def _summary(tables: RunTables) -> str:
    runs = pl.DataFrame(tables.runs)
    metered = int(runs["metered"].sum()) if runs.height else 0
    refused = runs.filter(~pl.col("metered"))
    line = (
        f"{metered} run(s) metered, {refused.height} refused "
        f"({tables.mode} accounting; {tables.problems.num_rows} input(s) unreadable)"
    )
    reasons = refused.group_by("refused_reason").agg(
        runs=pl.len(), examples=pl.col("run_id").head(3)
    )
    for reason, count, examples in reasons.sort("runs", descending=True).iter_rows():
        line += f"\n  refused {count}: {reason} (e.g. {terminal_text(', '.join(examples))})"
    return line


def _table_text(frame: pl.DataFrame, *, width: int = 200, str_len: int | None = 60) -> str:
    """A frame as a readable table: every row and column, no shape or dtype lines.

    Control characters in text cells (and anywhere in the rendering) are shown as
    ``\\xNN`` escapes (:func:`~contextledger.output.terminal_text`), cells first so
    that columns stay aligned.
    """
    escapes = list(CONTROL_ESCAPES)
    frame = frame.with_columns(
        pl.col(pl.String).str.replace_many(escapes, [CONTROL_ESCAPES[c] for c in escapes])
    )
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=width,
        fmt_str_lengths=str_len,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        return terminal_text(str(frame), keep="\n")


def _printable(rows: pl.DataFrame, *, for_csv: bool = False) -> pl.DataFrame:
    """Nested columns as short text, for the table and CSV. The table shows the interval
    rounded as ``[low, high]``; CSV keeps ``earn_rate_low`` / ``earn_rate_high`` as numbers
    (and the per-signal counts), as Parquet does."""
    interval = (
        [pl.col("earn_rate_low"), pl.col("earn_rate_high")]
        if for_csv
        else [
            pl.when(pl.col("earn_rate_low").is_not_null())
            .then(
                pl.format(
                    "[{}, {}]",
                    pl.col("earn_rate_low").round(2),
                    pl.col("earn_rate_high").round(2),
                )
            )
            .alias("earn_rate_95ci")
        ]
    )
    signals = list(USED_SIGNAL_COLUMNS.values()) if for_csv else []
    return rows.select(
        "id",
        "kind",
        "offered",
        "approx_tokens_spent",
        "used",
        *signals,
        used_via_text().alias("used_via"),
        "runs_seen",
        outcomes_text().alias("outcomes"),
        "earn_rate",
        *interval,
        "judged",
    )


@main.command()
@paths_argument
@outcomes_option()
@mode_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "csv", "parquet"]),
    default="table",
    show_default=True,
)
@output_option
@static_tools_option()
@click.option(
    "--merge",
    "merge_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A LedgerJSON v1 file to add in (importJSON); may repeat.",
)
@min_offers_option(
    help="Rows offered fewer times are marked not yet judged (the gate's minOffers)."
)
@strict_option
@max_document_option
@engine_option
def ledger(
    paths: tuple[str, ...],
    outcomes_file: str | None,
    mode: str,
    output_format: str,
    output: str | None,
    static_tools_file: str | None,
    merge_files: tuple[str, ...],
    min_offers: int,
    strict: bool,
    engine: str,
) -> None:
    """Print the context ledger of the runs under PATHS, worst earn rate first.

    PATHS are snapshot files (.json, .json.gz, JSON Lines) or directories. Table,
    CSV and Parquet add a 95% Wilson interval on each earn rate (none where a
    piece was used more often than offered) and whether it rests on enough
    offers to be judged; JSON is LedgerJSON v1, as the reference writes it.
    """
    on_spark = _spark_engine(engine, paths)
    tables = _read_inputs(paths, mode, static_tools_file, outcomes_file, strict)
    result = on_spark("ledger", tables) if on_spark else compute_ledger(tables)
    try:
        merged = [ledgerjson.load(path) for path in merge_files]
    except (OSError, ValueError) as error:
        _fail(str(error))
    result = merge_ledgers([*merged, result]) if merge_files else result
    _write_ledger(result, output_format, output, _summary(tables), min_offers)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command()
@paths_argument
@outcomes_option(help="CSV or JSON Lines of run_id,label (an archive's stored labels count too).")
@mode_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@output_option
@strict_option
@max_document_option
def outcomes(
    paths: tuple[str, ...],
    outcomes_file: str | None,
    mode: str,
    output_format: str,
    output: str | None,
    strict: bool,
) -> None:
    """Per piece and label: how often runs that offered it carried the label, against the
    base rate over all labelled runs. Association, not cause. The labels are --outcomes
    FILE's and, over an archive, those stored in it."""
    tables = _read_inputs(paths, mode, None, outcomes_file, strict)
    if tables.outcomes.num_rows == 0:
        _fail("no outcome labels: give --outcomes FILE (or an archive that stores labels)")
    frame = outcome_association(tables)
    if output_format == "csv":
        _emit(frame.write_csv(), output)
    elif output_format == "json":
        _emit(frame.write_ndjson(), output)
    else:
        note = "Association, not cause: a piece offered in runs that went well did not make "
        note += "them go well."
        _emit(f"{_table_text(frame, str_len=None)}\n{note}\n{_summary(tables)}\n", output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


def _write_ledger(
    result: Ledger, output_format: str, output: str | None, summary: str, min_offers: int
) -> None:
    rows = with_uncertainty(result.rows(), min_offers=min_offers)
    if output_format == "parquet":
        if not output:
            _fail("--format parquet needs -o FILE")
            return
        with _writing(output) as temporary:
            rows.write_parquet(temporary)
        click.echo(summary, err=True)
        return
    if output_format == "json":
        text = ledgerjson.dumps(result) + "\n"
    elif output_format == "csv":
        text = _printable(rows, for_csv=True).write_csv()
    else:
        text = f"{_table_text(_printable(rows))}\n{summary}\n"
    _emit(text, output)
    if output_format != "table":
        click.echo(summary, err=True)


def _nested_as_json(frame: pl.DataFrame) -> pl.DataFrame:
    """List and struct columns as JSON text, for CSV (which holds only flat values)."""
    import json

    def encode(value: object) -> str | None:
        return None if value is None else json.dumps(value, default=str, ensure_ascii=False)

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    return frame.with_columns(
        pl.Series(name, [encode(value) for value in frame[name].to_list()], dtype=pl.String)
        for name in nested
    )


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.argument("query")
@mode_option
@outcomes_option()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@output_option
@click.option(
    "--no-external-access",
    is_flag=True,
    help="For a query from someone else: DuckDB may not touch files, the network or "
    "extensions, nor change settings (an archive is read into memory first).",
)
@max_document_option
@engine_option
def sql(
    paths: tuple[str, ...],
    query: str,
    mode: str,
    outcomes_file: str | None,
    output_format: str,
    output: str | None,
    no_external_access: bool,
    engine: str,
) -> None:
    """Run QUERY (DuckDB SQL, the last argument) over the runs under PATHS and print the result
    (Spark SQL with --engine spark).

    Tables: runs, offers, uses, outcomes. Views: ledger (insertion order), ledger_rows
    (worst earn rate first), and the steps between them (see contextledger/ledger/sql).
    DuckDB can read and write local files, ATTACH databases and load extensions:
    --no-external-access refuses all of that once the views exist.
    """
    import duckdb

    from contextledger.ledger.duckdb_views import connect, result_frame

    if not paths:  # one argument: click took it as the query
        _fail(f"sql needs PATH... and then the QUERY; only one argument was given: {query!r}")
    on_spark = _spark_engine(engine, paths)
    tables = _read_inputs(paths, mode, None, outcomes_file, False)
    result: pl.DataFrame | None = None
    if on_spark:
        result = on_spark("sql", tables, query, failure="SQL error")
    else:
        con = connect(tables, external_access=not no_external_access)
        try:
            relation = con.sql(query)
            result = result_frame(relation) if relation is not None else None
        except (duckdb.Error, pl.exceptions.PolarsError) as error:
            lines = (line.strip() for line in str(error).splitlines())  # DuckDB's are several
            _fail(f"SQL error: {'; '.join(line for line in lines if line and line != '^')}")
        finally:
            con.close()
    if result is not None:
        if output_format == "json":
            text = result.write_json() + "\n"
        elif output_format == "csv":
            text = _nested_as_json(result).write_csv()
        else:
            text = f"{_table_text(result)}\n"
        _emit(text, output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command()
@paths_argument
@min_offers_option(help="Judge a piece only once earlier runs offered it this many times.")
@click.option(
    "--floor",
    "earn_rate_floor",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="Demote a piece whose earn rate over earlier runs is below this.",
)
@click.option(
    "--refresh-every",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Parole: a demoted piece passes at every Nth demotion (0: never).",
)
@mode_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
)
@output_option
@max_document_option
def gates(
    paths: tuple[str, ...],
    min_offers: int,
    earn_rate_floor: float,
    refresh_every: int,
    mode: str,
    output_format: str,
    output: str | None,
) -> None:
    """What agentfootprint's ledger gates would have left out of the runs under PATHS.

    Runs are replayed in input order, each judged by the ledger of the runs before it:
    per piece, the approx tokens the gates would have saved, the offers they would have
    left out and the uses that would have cost. Table: pieces the ledger demoted.
    """
    import json

    from contextledger.ledger.gates import ATTRIBUTION_NOTE, describe_total, gate_what_if

    tables = _read_inputs(paths, mode, None, None, False)
    pieces, total = gate_what_if(
        tables,
        min_offers=min_offers,
        earn_rate_floor=earn_rate_floor,
        refresh_every=refresh_every,
    )
    summary = f"{describe_total(total)}\n{_summary(tables)}"
    if output_format == "json":
        document = {
            "total": total.row(0, named=True),
            "pieces": pieces.to_dicts(),
            "note": ATTRIBUTION_NOTE,
        }
        _emit(json.dumps(document, indent=2) + "\n", output)
        click.echo(_summary(tables), err=True)
    elif output_format == "csv":
        _emit(pieces.write_csv(), output)
        click.echo(summary, err=True)
    else:
        touched = (pl.col("offers_demoted") + pl.col("uses_lost") + pl.col("uses_at_risk")) > 0
        shown = pieces.filter(touched)
        hidden = pieces.height - shown.height
        hidden_note = f"({hidden} other piece(s) never demoted; --format csv lists every piece)"
        _emit(f"{_table_text(shown, str_len=None)}\n{hidden_note}\n{summary}\n", output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command(name="whatif")
@paths_argument
@click.option(
    "--policy",
    "policies",
    multiple=True,
    required=True,
    help="A window policy: none, sliding:keep=N, token_budget:threshold=T[,keep=N], each "
    "windowed one with optional ,last_tool_results=N and ,ledger_facts=N. Repeat to compare.",
)
@standings_option()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "parquet"]),
    default="table",
    show_default=True,
    help="table: one row per policy over the runs; json: JSON Lines, one object per "
    "(run, policy); parquet: the same rows (needs -o).",
)
@output_option
@max_document_option
@engine_option
def whatif_command(
    paths: tuple[str, ...],
    policies: tuple[str, ...],
    standings_file: str | None,
    output_format: str,
    output: str | None,
    engine: str,
) -> None:
    """Replay the runs under PATHS under each --policy: what would each window have served?"""
    from contextledger.jobs import whatif as sourced
    from contextledger.tables.standings import StandingsFileError, load_standings
    from contextledger.window import whatif as replayed
    from contextledger.window.policies import PolicySpecError

    if output_format == "parquet" and not output:
        _fail("--format parquet needs -o FILE")
    on_spark = _spark_engine(engine, paths)
    try:
        parsed = replayed.parse_policies(policies)
        standings = load_standings(standings_file).to_pylist() if standings_file else []
    except (PolicySpecError, StandingsFileError) as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    from contextledger.archive import ArchiveError

    archived = None
    try:
        if on_spark:
            archived = on_spark("whatif_archive", paths[0], parsed, standings)
        else:
            archived = sourced.whatif_archive(paths, parsed, standings)
    except ArchiveError as error:
        _fail(str(error))
    per_run: pl.DataFrame | pl.LazyFrame
    if archived is not None:
        problems = list(archived.problems)
        per_run = archived.rows  # scanned from disk: memory does not grow with the archive
        click.echo(
            f"contextledger: {archived.runs} archived run(s) replayed under {len(parsed)} "
            f"polic{'y' if len(parsed) == 1 else 'ies'} in {archived.seconds:.2f} s: "
            f"{archived.runs_per_second:,.0f} runs/s"
            + (f"; {archived.left_out_text()}" if problems else ""),
            err=True,
        )
    else:
        inputs = sourced.read_inputs(paths)
        problems = list(inputs.problems)
        _name_skipped(inputs.skipped)
        _name_duplicates(inputs.duplicates)
        _name_unmatched(
            "standings",
            [str(row["run_id"]) for row in standings],
            [stream.run_id for stream in inputs.streams],
        )
        per_run = replayed.whatif_table(inputs.streams, parsed, [*inputs.standings, *standings])
    for problem in problems:
        _warn(f"skipped {problem.where}: {problem.reason}")
    if (archived.runs if archived is not None else len(inputs.streams)) == 0:
        source = f"{'selected by' if archived is not None else 'read from'} {' '.join(paths)}"
        _warn(f"no run {source}: nothing to replay")
    note = replayed.describe(per_run, len(parsed))
    if output_format == "parquet" or (output_format == "json" and output):
        with _writing(str(output)) as temporary:
            if output_format == "parquet":
                per_run.lazy().sink_parquet(temporary)
            else:
                per_run.lazy().sink_ndjson(temporary)
        click.echo(note, err=True)
    else:
        if output_format == "json":
            text = per_run.lazy().collect().write_ndjson()
        else:
            table = replayed.display_table(replayed.per_policy(per_run))
            text = f"{_table_text(table, width=250)}\n{note}\n"
        _emit(text, output)
        if output_format == "json" or output:
            click.echo(note, err=True)
    if problems:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command(name="report")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "-o",
    "--output-dir",
    "output_dir",
    type=click.Path(file_okay=False),
    default="contextledger-report",
    show_default=True,
    help="Folder to write report.html (and charts/*.svg, *.png) into.",
)
@outcomes_option(help="CSV or JSON Lines of run_id,label (default with no PATHS: the sample's).")
@standings_option(
    help="CSV or JSON Lines of run_id,tool_call_id,standing,iteration: which tool results "
    "are facts (default with no PATHS: the sample's)."
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    help="A window policy to compare (repeat); default: none, sliding:keep=6,ledger_facts=0, "
    "sliding:keep=6, sliding:keep=3, token_budget:threshold=500.",
)
@mode_option
@click.option(
    "--timeline-run",
    help="The run whose window timeline to draw (default: the run the timeline policy "
    "removed most from).",
)
@click.option(
    "--timeline-policy",
    help="The compared policy to draw the timeline under (default: the windowed one keeping "
    "the most facts for the answer).",
)
@click.option(
    "--charts",
    "chart_formats",
    default="svg,png",
    show_default=True,
    callback=_chart_formats,
    help="Also write each chart to DIR/charts/ in these formats (svg, png, both in any "
    "order, or none), for slides.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress line once the report takes over 2 s [default: when stderr is a "
    "terminal].",
)
@max_document_option
def report_command(
    paths: tuple[str, ...],
    output_dir: str,
    outcomes_file: str | None,
    standings_file: str | None,
    policies: tuple[str, ...],
    mode: str,
    timeline_run: str | None,
    timeline_policy: str | None,
    chart_formats: tuple[str, ...],
    progress: bool | None,
) -> None:
    """Write one self-contained HTML page about the runs under PATHS (default: the sample).

    The page shows the ledger (worst first), its charts, the outcome association,
    the gate and window-policy what-ifs, one run's window timeline, the refused runs
    and the differences from the reference. It opens offline: nothing is fetched.
    """
    from contextledger import report
    from contextledger.archive import ArchiveError
    from contextledger.jobs.ingest import progress_stream
    from contextledger.tables.standings import StandingsFileError
    from contextledger.window.policies import PolicySpecError

    stream = (sys.stderr if progress else None) if progress is not None else progress_stream()
    meter = report.Progress(stream)
    try:
        data = report.collect(
            list(paths),
            outcomes=outcomes_file,
            standings=standings_file,
            policies=policies or report.DEFAULT_POLICIES,
            mode=mode,
            timeline_run=timeline_run,
            timeline_policy=timeline_policy,
            progress=meter,
        )
    except (
        ArchiveError,
        PolicySpecError,
        StandingsFileError,
        FileNotFoundError,
        ValueError,
    ) as error:
        meter.close()  # the error on a line of its own
        _fail(str(error))
        raise  # unreachable: _fail exits
    meter.close()  # warnings on lines of their own
    _name_skipped(data.tables.skipped)
    for problem in data.tables.problems.to_pylist():
        _warn(f"skipped {ReadProblem(**problem).where}: {problem['reason']}")
    _name_duplicates(data.tables.duplicates)
    _name_unmatched_labels(data.tables)
    for problem in data.unreplayed:
        _warn(f"not replayed {ReadProblem(**problem).where}: {problem['reason']}")
    formats = chart_formats
    try:
        page = report.write_report(data, output_dir, formats=formats, progress=meter)
    except OSError as error:
        meter.close()
        _fail(f"cannot write the report to {output_dir}: {error.strerror or error}")
        raise  # unreachable: _fail exits
    meter.close()
    click.echo(
        terminal_text(f"wrote {page}" + (f" and {page.parent / 'charts'}/" if formats else ""))
    )
    click.echo(_summary(data.tables))
    if data.tables.problems.num_rows or data.unreplayed:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command(name="ingest")
@paths_argument
@click.option(
    "--archive",
    "archive_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="The archive directory (created when missing).",
)
@click.option(
    "--partition-by",
    type=click.Choice(["ingest_date", "ingest_month", "runner_kind", "source_dir"]),
    default=None,
    help="Hive partition key, fixed when the archive is created [default: ingest_date].",
)
@outcomes_option(
    help="CSV or JSON Lines of run_id,label to store too; a changed file replaces its labels."
)
@static_tools_option()
@click.option(
    "--ingest-date",
    callback=_ingest_date,
    help="Record the runs under this date (YYYY-MM-DD) instead of today (UTC): backfills.",
)
@click.option("--workers", type=click.IntRange(min=1), help="Reading processes [default: cores].")
@click.option(
    "--batch-runs",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Commit after this many runs (an interrupted ingest redoes at most one batch).",
)
@click.option(
    "--retry-quarantined", is_flag=True, help="Read quarantined files again even if unchanged."
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress line [default: when stderr is a terminal].",
)
@engine_option
@max_document_option
def ingest_command(
    paths: tuple[str, ...],
    archive_dir: str,
    partition_by: str | None,
    outcomes_file: str | None,
    static_tools_file: str | None,
    ingest_date: str | None,
    workers: int | None,
    batch_runs: int,
    retry_quarantined: bool,
    progress: bool | None,
    engine: str,
) -> None:
    """Append the runs under PATHS to the Parquet archive --archive DIR, both accountings.

    Idempotent and safe to interrupt: files already ingested with the same content
    are skipped, a run already archived is not added again (the same id with other
    content is reported as a conflict), and bad files are quarantined (listed in
    DIR/quarantine.json) and retried once they change. Then `ledger DIR`, `sql DIR`
    read the archive; `DIR?since=D&until=D&label=L&run_id=A,B` selects from it.
    With --engine spark the files are read on Spark's executors; the driver writes the
    same batches and commits.
    """
    from contextledger.archive import ArchiveError
    from contextledger.jobs.ingest import ingest, progress_stream

    on_spark = _spark_engine(engine, paths, reads_archive=False)
    if on_spark and workers is not None:
        _fail("--workers is for --engine local: Spark reads with its executors")
    try:
        sidecar = load_static_tools(static_tools_file) if static_tools_file else None
        options: dict[str, Any] = {
            "partition_by": partition_by,
            "outcomes": outcomes_file,
            "static_tools": sidecar,
            "ingest_date": ingest_date,
            "batch_runs": batch_runs,
            "retry_quarantined": retry_quarantined,
            "progress": (sys.stderr if progress else None)
            if progress is not None
            else progress_stream(),
        }
        if on_spark:
            report = on_spark("ingest", list(paths), archive_dir, **options)
        else:
            report = ingest(list(paths), archive_dir, workers=workers, **options)
    except (ArchiveError, OSError, ValueError) as error:
        _fail(_error_lines(error))
        raise  # unreachable: _fail exits
    _name_skipped(report.files_skipped)
    click.echo(terminal_lines(report.summary_lines()))
    if report.problems:
        sys.exit(EXIT_UNREADABLE_INPUT)


@main.command(name="synth")
@click.option("--runs", type=click.IntRange(min=1), required=True, help="How many runs.")
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(file_okay=False),
    help="Write synthetic tables straight into this archive.",
)
@click.option(
    "--snapshots",
    "snapshots_dir",
    type=click.Path(file_okay=False),
    help="Write snapshot files here instead (copies of --templates under fresh run ids).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--templates",
    type=click.Path(),
    default="data/sample",
    show_default=True,
    help="Recorded runs to copy for --snapshots.",
)
@click.option(
    "--partition-by",
    type=click.Choice(["ingest_date", "ingest_month", "runner_kind", "source_dir"]),
    default=None,
    help="Hive partition key of a new archive [default: ingest_date].",
)
@click.option(
    "--ingest-date", callback=_ingest_date, help="Record the runs under this date (YYYY-MM-DD)."
)
@click.option(
    "--streams/--no-streams",
    default=True,
    show_default=True,
    help="With --archive: also write each run's message stream and standings, for `whatif DIR`.",
)
def synth_command(
    runs: int,
    archive_dir: str | None,
    snapshots_dir: str | None,
    seed: int,
    templates: str,
    partition_by: str | None,
    ingest_date: str | None,
    streams: bool,
) -> None:
    """Write realistic synthetic runs, to try the tool or time it at scale.

    --archive DIR writes the tables directly (both accountings and outcome labels,
    modelled on the reference corpus; about 56 offer rows per run) and each run's
    message stream for `whatif`; --snapshots DIR writes agentfootprint snapshot files
    for timing `ingest`. The same seed gives the same runs; running the command again
    adds only what is missing.
    """
    from contextledger.archive import ArchiveError
    from contextledger.jobs import synth

    if (archive_dir is None) == (snapshots_dir is None):
        _fail("give exactly one of --archive DIR and --snapshots DIR")
    try:
        if snapshots_dir is not None:
            written = synth.synth_snapshots(snapshots_dir, runs, templates, seed=seed)
            click.echo(f"wrote {len(written)} snapshot file(s) to {snapshots_dir}")
            return
        report = synth.synth_archive(
            str(archive_dir),
            runs,
            seed=seed,
            partition_by=partition_by,
            ingest_date=ingest_date,
            progress=sys.stderr.isatty(),
            streams=streams,
        )
    except (ArchiveError, OSError, ValueError) as error:
        _fail(_error_lines(error))
        raise  # unreachable: _fail exits
    click.echo(synth.describe(report))


def _archive_damage(tables: RunTables) -> list[str]:
    """Damage to an archive's files, one line each; none for snapshots.

    The one place ``check`` asks about the archive's files (missing or corrupt
    Parquet, commits that do not match): archive verification is called from here.
    """
    from contextledger.archive import ArchiveTables, verify_archive

    if not isinstance(tables, ArchiveTables):
        return []
    return [str(problem) for problem in verify_archive(tables.archive.root)]


@main.command(name="check")
@paths_argument
@click.option(
    "--mode",
    type=click.Choice(ACCOUNTING_MODES),
    default=None,
    help="Check one accounting [default: both].",
)
@outcomes_option()
@static_tools_option()
@strict_option
@max_document_option
def check_command(
    paths: tuple[str, ...],
    mode: str | None,
    outcomes_file: str | None,
    static_tools_file: str | None,
    strict: bool,
) -> None:
    """Check the ledger's invariants over the runs under PATHS (snapshots or an archive).

    Run ids are unique; a skill activation or answer-slice credit names a piece its
    run offered; per piece, runs_seen is at most the metered runs, each label's runs
    at most runs_seen, used_answer_slice at most runs_seen. Prints each violation
    with the runs that break it and exits 1; else one line saying they all hold.
    """
    import contextlib
    import io

    from contextledger.ledger.invariants import INVARIANTS, check_invariants

    modes = (mode,) if mode else ACCOUNTING_MODES
    reports, damage, unreadable = [], [], 0
    for number, accounting in enumerate(modes):
        # Reading again in another accounting: its unreadable inputs are named once.
        quiet = contextlib.redirect_stderr(io.StringIO()) if number else contextlib.nullcontext()
        with quiet:
            tables = _read_inputs(paths, accounting, static_tools_file, outcomes_file, strict)
        if number == 0:
            damage = _archive_damage(tables)
            unreadable = tables.problems.num_rows
        if damage:  # rows that cannot be read to the end cannot be checked either
            break
        reports.append(check_invariants(tables))
    for line in damage:
        _warn(line)
    if damage:
        _warn(f"the invariants were not checked: {len(damage)} damaged file(s) named above")
        sys.exit(EXIT_UNREADABLE_INPUT)
    violations = pl.concat([report.violations for report in reports])
    accountings = " and ".join(modes)
    runs = reports[0].runs
    if violations.height:
        shown = violations.select(
            "invariant",
            "accounting",
            "kind",
            "piece_id",
            "detail",
            runs=pl.format("{} ({})", "run_count", pl.col("runs").list.join(", ")),
        )
        click.echo(_table_text(shown, width=250, str_len=200))
        broken = violations.select("invariant", "accounting").unique(maintain_order=True)
        for name, accounting in broken.iter_rows():
            click.echo(f"violated ({accounting}): {name}: {INVARIANTS[name]}")
        click.echo(
            f"{broken['invariant'].n_unique()} of {len(INVARIANTS)} invariants violated "
            f"over {runs} runs ({accountings} accounting)"
        )
    else:
        click.echo(
            f"all {len(INVARIANTS)} invariants hold over {runs} runs ({accountings} accounting)"
        )
    if violations.height or damage or unreadable:
        sys.exit(EXIT_UNREADABLE_INPUT)
