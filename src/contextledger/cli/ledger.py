"""The commands over the ledger: ``ledger``, ``outcomes``, ``sql``, ``gates``."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from contextledger.cli.common import (
    EXIT_UNREADABLE_INPUT,
    _csv,
    _emit,
    _fail,
    _json_object,
    _read_inputs,
    _spark_engine,
    _summary,
    _unopened,
    _writing,
    csv_safe_option,
    engine_option,
    format_option,
    max_document_option,
    min_offers_option,
    mode_option,
    outcomes_option,
    output_option,
    paths_argument,
    static_tools_option,
    strict_option,
    whole_number,
)
from contextledger.cli.terminal import RATE_DECIMALS, Fit, output_width, prose, table_text
from contextledger.output import nested_as_json

if TYPE_CHECKING:
    import polars as pl

    from contextledger.ledger.compute import Ledger


def _a_number(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    """Refuse ``nan``, which every range check lets through (no comparison holds for it)."""
    if value != value:
        raise click.BadParameter(f"{value} is not a number")
    return value


def _printable(rows: pl.DataFrame, *, for_csv: bool = False) -> pl.DataFrame:
    """Nested columns as short text, for the table and CSV (JSON Lines too). CSV keeps
    ``earn_rate_low`` / ``earn_rate_high`` as numbers, and the per-signal counts, as
    Parquet does (:func:`~contextledger.ledger.stats.ledger_csv_rows`, the one list of
    the columns); the table is those columns without the per-signal counts (``used_via``
    says them) and with the interval as ``[low, high]`` at the earn rate's decimals."""
    import polars as pl

    from contextledger.ledger.stats import ledger_csv_rows
    from contextledger.tables.columns import USED_SIGNAL_COLUMNS

    shown = ledger_csv_rows(rows)
    if for_csv:
        return shown
    interval = (
        pl.struct(low="earn_rate_low", high="earn_rate_high")
        .map_elements(_interval_text, return_dtype=pl.String)
        .alias("earn_rate_95ci")
    )
    folded = {*USED_SIGNAL_COLUMNS.values(), "earn_rate_low", "earn_rate_high"}
    columns = [name for name in shown.columns if name not in folded]
    columns.insert(columns.index("earn_rate") + 1, "earn_rate_95ci")
    return shown.with_columns(interval).select(columns)


def _interval_text(bounds: dict[str, float | None]) -> str | None:
    """``[low, high]`` at the earn rate's decimals; None where there is no interval."""
    low, high = bounds["low"], bounds["high"]
    if low is None or high is None:
        return None
    return f"[{low:.{RATE_DECIMALS}f}, {high:.{RATE_DECIMALS}f}]"


#: The ledger table's columns in the order they give way to a narrow terminal; kept:
#: the piece, its offers and uses, its earn rate.
LEDGER_FIT = Fit(
    keep=("id", "offered", "used", "earn_rate"),
    drop_first=(
        "used_via",
        "outcomes",
        "runs_seen",
        "judged",
        "kind",
        "approx_tokens_spent",
        "earn_rate_95ci",
    ),
)


@click.command()
@paths_argument
@outcomes_option()
@mode_option
@format_option(
    ["table", "json", "jsonl", "csv", "parquet"],
    help="table: for people, fitted to the terminal; json: LedgerJSON v1 as the reference "
    "writes it (camelCase, counts only, no interval); csv, jsonl (one object per line) and "
    "parquet (needs -o): the table's rows in snake_case with every count, the interval "
    "bounds and the per-signal uses.",
)
@output_option
@csv_safe_option
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
    csv_safe: bool,
    static_tools_file: str | None,
    merge_files: tuple[str, ...],
    min_offers: int,
    strict: bool,
    engine: str,
) -> None:
    """Print the context ledger of the runs under PATHS, worst earn rate first.

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.

    Table, CSV, JSON Lines and Parquet add a 95% Wilson interval on each earn rate (none
    where a piece was used more often than offered) and whether it rests on enough
    offers to be judged; JSON is LedgerJSON v1, as the reference writes it.
    """
    if "numpy" not in sys.modules:
        # no linear algebra here: numpy, which pyarrow imports, would start a BLAS thread
        # per core that spins a while computing nothing (0.03 s of CPU, measured)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    on_spark = _spark_engine(engine, paths)
    try:  # before any run is read: a bad --merge file costs nothing
        merged = [_load_ledgerjson(path) for path in merge_files]
    except OSError as error:
        _fail(_unopened(error))
    except ValueError as error:
        _fail(str(error))
    # compute_ledger lists an archive's offers and uses whatever it reads: checked first
    listed = ("offers", "uses")
    tables = _read_inputs(paths, mode, static_tools_file, outcomes_file, strict, listed=listed)
    # imported once reading has started: the engines load while the workers read
    from contextledger.ledger.compute import compute_ledger, merge_ledgers

    result = on_spark("ledger", tables) if on_spark else compute_ledger(tables)
    if merge_files:
        try:
            result = merge_ledgers([*merged, result])
        except OverflowError as error:
            _fail(f"--merge {', '.join(merge_files)}: {error}")
    _write_ledger(result, output_format, output, _summary(tables), min_offers, csv_safe)
    if tables.frame("problems").height:
        sys.exit(EXIT_UNREADABLE_INPUT)


def _load_ledgerjson(path: str) -> Ledger:
    """A ``--merge`` file, read with the engines imported only when one is given."""
    from contextledger.ledger import ledgerjson

    return ledgerjson.load(path)


#: The outcome table's columns in the order they give way; kept: the piece, the label,
#: and the share of its runs against the base rate.
OUTCOMES_FIT = Fit(
    keep=("id", "label", "share_with_label", "base_rate"),
    drop_first=(
        "runs_labelled_with_label",
        "runs_labelled",
        "runs_offered_with_label",
        "kind",
        "share_minus_base",
        "runs_offered",
    ),
)


@click.command()
@paths_argument
@outcomes_option(help="CSV or JSON Lines of run_id,label (an archive's stored labels count too).")
@mode_option
@format_option(
    ["table", "csv", "json", "jsonl"],
    help="table: for people, fitted to the terminal; csv and jsonl (one object per line): "
    "every row and column; json: one object {rows}, on one line (docs/cli.md: Output formats).",
)
@output_option
@csv_safe_option
@strict_option
@max_document_option
def outcomes(
    paths: tuple[str, ...],
    outcomes_file: str | None,
    mode: str,
    output_format: str,
    output: str | None,
    csv_safe: bool,
    strict: bool,
) -> None:
    """Per piece and label: how often runs that offered it carried the label, against the
    base rate over all labelled runs. Association, not cause. The labels are --outcomes
    FILE's and, over an archive, those stored in it.

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    from contextledger.ledger.stats import outcome_association

    tables = _read_inputs(paths, mode, None, outcomes_file, strict)
    if tables.outcomes.num_rows == 0 and tables.runs.num_rows:  # none selected: said, exit 0
        _fail("no outcome labels: give --outcomes FILE (or an archive that stores labels)")
    frame = outcome_association(tables)
    if output_format == "csv":
        _emit(_csv(frame, csv_safe), output)
    elif output_format == "json":
        _emit(_json_object({"rows": frame.to_dicts()}), output)
    elif output_format == "jsonl":
        _emit(frame.write_ndjson(), output)
    else:
        note = "Association, not cause: a piece offered in runs that went well did not make "
        note += f"them go well.\n{_summary(tables)}\n"
        width = output_width(output)
        table = table_text(frame, width=width, fit=OUTCOMES_FIT, str_len=None)
        _emit(f"{table}\n{prose(note, width)}", output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


def _write_ledger(
    result: Ledger,
    output_format: str,
    output: str | None,
    summary: str,
    min_offers: int,
    csv_safe: bool,
) -> None:
    from contextledger.ledger import ledgerjson
    from contextledger.ledger.stats import with_uncertainty

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
        text = _csv(_printable(rows, for_csv=True), csv_safe)
    elif output_format == "jsonl":
        text = _printable(rows, for_csv=True).write_ndjson()
    else:
        width = output_width(output)
        table = table_text(_printable(rows), width=width, fit=LEDGER_FIT)
        text = f"{table}\n{prose(summary, width)}\n"
    _emit(text, output)
    if output_format != "table":
        click.echo(summary, err=True)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.argument("query")
@mode_option
@outcomes_option()
@format_option(
    ["table", "csv", "json", "jsonl"],
    help="table: for people, fitted to the terminal (the rightmost columns give way); "
    "json and jsonl: JSON Lines, one object per result row.",
)
@output_option
@csv_safe_option
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
    csv_safe: bool,
    no_external_access: bool,
    engine: str,
) -> None:
    """Run QUERY (DuckDB SQL, the last argument) over the runs under PATHS and print the result
    (Spark SQL with --engine spark).

    Tables: runs, offers, uses, outcomes. Views: ledger (insertion order), ledger_rows
    (worst earn rate first), and the steps between them (see contextledger/ledger/sql).
    DuckDB can read and write local files, ATTACH databases and load extensions:
    --no-external-access refuses all of that once the views exist.

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    import duckdb
    import polars as pl

    from contextledger.ledger.duckdb_views import connect, result_frame

    if not paths:  # one argument: click took it as the query
        _fail(f"sql needs PATH... and then the QUERY; only one argument was given: {query!r}")
    if not query.strip():
        _fail("sql needs a QUERY after PATH...; the one given is empty")
    on_spark = _spark_engine(engine, paths)
    tables = _read_inputs(paths, mode, None, outcomes_file, False, every_table=True)
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
        if output_format in ("json", "jsonl"):
            text = result.write_ndjson()  # query rows: JSON Lines
        elif output_format == "csv":
            text = _csv(nested_as_json(result), csv_safe)
        else:
            keep = Fit(keep=result.columns[:1])  # the rest give way, the rightmost first
            text = f"{table_text(result, width=output_width(output), fit=keep)}\n"
        _emit(text, output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


#: The gate table's columns in the order they give way; kept: the piece, the offers it
#: would have lost, the tokens that saves and the uses that costs.
GATES_FIT = Fit(
    keep=("id", "offers_demoted", "approx_tokens_saved", "uses_lost"),
    drop_first=(
        "uses_judged_per_run",
        "offers_down_weighted",
        "offers_paroled",
        "offers_gated",
        "approx_tokens_spent",
        "kind",
        "used",
        "uses_at_risk",
        "offered",
    ),
)


@click.command()
@paths_argument
@min_offers_option(help="Judge a piece only once earlier runs offered it this many times.")
@click.option(
    "--floor",
    "earn_rate_floor",
    type=click.FloatRange(min=0),
    callback=_a_number,
    default=0.05,
    show_default=True,
    help="Demote a piece whose earn rate over earlier runs is below this.",
)
@click.option(
    "--refresh-every",
    type=whole_number(0),
    default=10,
    show_default=True,
    help="Parole: a demoted piece passes at every Nth demotion (0: never).",
)
@mode_option
@format_option(
    ["table", "json", "jsonl", "csv"],
    help="table: the pieces the ledger demoted, fitted to the terminal; csv and jsonl (one "
    "object per line): every piece; json: one object {total, pieces, note}, on one line.",
)
@output_option
@csv_safe_option
@max_document_option
def gates(
    paths: tuple[str, ...],
    min_offers: int,
    earn_rate_floor: float,
    refresh_every: int,
    mode: str,
    output_format: str,
    output: str | None,
    csv_safe: bool,
) -> None:
    """What agentfootprint's ledger gates would have left out of the runs under PATHS.

    Runs are replayed in input order (an archive's: ingest order, said in the output), each
    judged by the ledger of the runs before it:
    per piece, the approx tokens the gates would have saved, the offers they would have
    left out and the uses that would have cost. Table: pieces the ledger demoted.

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    import polars as pl

    from contextledger.ledger.gates import describe_total, gate_note, gate_what_if

    tables = _read_inputs(paths, mode, None, None, False)
    pieces, total = gate_what_if(
        tables,
        min_offers=min_offers,
        earn_rate_floor=earn_rate_floor,
        refresh_every=refresh_every,
    )
    summary = f"{describe_total(total, tables.order)}\n{_summary(tables)}"
    if output_format == "json":
        document = {
            "total": total.row(0, named=True),
            "pieces": pieces.to_dicts(),
            "note": gate_note(tables.order),
        }
        _emit(_json_object(document), output)
        click.echo(_summary(tables), err=True)
    elif output_format in ("csv", "jsonl"):
        _emit(_csv(pieces, csv_safe) if output_format == "csv" else pieces.write_ndjson(), output)
        click.echo(summary, err=True)
    else:
        touched = (pl.col("offers_demoted") + pl.col("uses_lost") + pl.col("uses_at_risk")) > 0
        shown = pieces.filter(touched)
        hidden = pieces.height - shown.height
        hidden_note = f"({hidden} other piece(s) never demoted; --format csv lists every piece)"
        width = output_width(output)
        table = table_text(shown, width=width, fit=GATES_FIT, str_len=None)
        notes = prose(f"{hidden_note}\n{summary}", width)
        _emit(f"{table}\n{notes}\n", output)
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)
