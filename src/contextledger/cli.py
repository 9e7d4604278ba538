"""The ``contextledger`` command line.

Exit status: 0 when every input was read; 1 when some input could not be read
(each is named on stderr, everything else is still read and counted); 2 for a
command-line mistake or an unreadable option file (outcomes, sidecar, ledger).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click
import polars as pl

from contextledger.ledger import ledgerjson
from contextledger.ledger.compute import Ledger, compute_ledger, merge_ledgers
from contextledger.read.snapshot import ReadError
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextledger")
def main() -> None:
    """Which context pieces earned their tokens: analytics over recorded agentfootprint runs."""


def _fail(message: str) -> None:
    click.echo(f"contextledger: {message}", err=True)
    sys.exit(EXIT_USAGE)


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
    try:
        tables = read_runs(paths, mode=mode, static_tools=sidecar, strict=strict)
    except ReadError as error:
        click.echo(f"contextledger: {error.source}: {error.reason} (stopped: --strict)", err=True)
        sys.exit(EXIT_UNREADABLE_INPUT)
    for problem in tables.problems.to_pylist():
        where = (
            problem["path"] if problem["line"] is None else f"{problem['path']}:{problem['line']}"
        )
        run = f" (run {problem['run_id']})" if problem["run_id"] else ""
        click.echo(f"contextledger: skipped {where}{run}: {problem['reason']}", err=True)
    if outcomes is not None:
        tables = tables.with_outcomes(outcomes)
    return tables


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
        line += f"\n  refused {count}: {reason} (e.g. {', '.join(examples)})"
    return line


def _printable(rows: pl.DataFrame) -> pl.DataFrame:
    """Nested and per-signal columns as short text, for the table and CSV."""
    signals = [
        pl.when(pl.col(column) > 0).then(pl.lit(f"{signal}=") + pl.col(column).cast(pl.String))
        for signal, column in USED_SIGNAL_COLUMNS.items()
    ]
    outcome = pl.element().struct
    return rows.select(
        "id",
        "kind",
        "offered",
        "approx_tokens_spent",
        "used",
        used_via=pl.concat_str(signals, separator=" ", ignore_nulls=True),
        runs_seen="runs_seen",
        outcomes=pl.col("outcomes")
        .list.eval(pl.concat_str(outcome.field("label"), pl.lit("="), outcome.field("runs")))
        .list.join(" "),
        earn_rate="earn_rate",
    )


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--outcomes",
    "outcomes_file",
    type=click.Path(dir_okay=False),
    help="CSV or JSON Lines of run_id,label; a run may carry several labels.",
)
@click.option(
    "--mode",
    type=click.Choice(ACCOUNTING_MODES),
    default="corrected",
    show_default=True,
    help="corrected: what each call was really sent and used; "
    "reference: agentfootprint 9.62's numbers, quirks included.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "csv", "parquet"]),
    default="table",
    show_default=True,
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout."
)
@click.option(
    "--static-tools",
    "static_tools_file",
    type=click.Path(dir_okay=False),
    help="JSON {run_id: [tool names]} the runner exposed; overrides the corpus wrapper.",
)
@click.option(
    "--merge",
    "merge_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A LedgerJSON v1 file to add in (importJSON); may repeat.",
)
@click.option("--strict", is_flag=True, help="Stop at the first unreadable input.")
def ledger(
    paths: tuple[str, ...],
    outcomes_file: str | None,
    mode: str,
    output_format: str,
    output: str | None,
    static_tools_file: str | None,
    merge_files: tuple[str, ...],
    strict: bool,
) -> None:
    """Print the context ledger of the runs under PATHS, worst earn rate first.

    PATHS are snapshot files (.json, .json.gz, JSON Lines) or directories.
    """
    tables = _read_inputs(paths, mode, static_tools_file, outcomes_file, strict)
    result = compute_ledger(tables)
    try:
        merged = [ledgerjson.load(path) for path in merge_files]
    except (OSError, ValueError) as error:
        _fail(str(error))
    result = merge_ledgers([*merged, result]) if merge_files else result
    _write_ledger(result, output_format, output, _summary(tables))
    if tables.problems.num_rows:
        sys.exit(EXIT_UNREADABLE_INPUT)


def _write_ledger(result: Ledger, output_format: str, output: str | None, summary: str) -> None:
    rows = result.rows()
    if output_format == "parquet":
        if not output:
            _fail("--format parquet needs -o FILE")
            return
        rows.write_parquet(output)
        click.echo(summary, err=True)
        return
    if output_format == "json":
        text = ledgerjson.dumps(result) + "\n"
    elif output_format == "csv":
        text = _printable(rows).write_csv()
    else:
        with pl.Config(
            tbl_rows=-1,
            tbl_cols=-1,
            tbl_width_chars=200,
            fmt_str_lengths=60,
            tbl_hide_dataframe_shape=True,
            tbl_hide_column_data_types=True,
        ):
            text = f"{_printable(rows)}\n{summary}\n"
    if output:
        Path(output).write_text(text, encoding="utf-8")
        if output_format != "table":
            click.echo(summary, err=True)
    else:
        click.echo(text, nl=False)
        if output_format != "table":
            click.echo(summary, err=True)
