"""The commands that make and check stores of runs: ``ingest``, ``synth``, ``check``."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from contextledger.cli.common import (
    EXIT_UNREADABLE_INPUT,
    _error_lines,
    _fail,
    _name_skipped,
    _read_inputs,
    _refuse_if_nothing_read,
    _spark_engine,
    _unopened,
    _warn,
    engine_option,
    max_document_option,
    outcomes_option,
    paths_argument,
    progress_option,
    static_tools_option,
    strict_option,
    whole_number,
)
from contextledger.cli.terminal import Fit, output_width, table_text
from contextledger.output import terminal_lines
from contextledger.tables import ACCOUNTING_MODES

if TYPE_CHECKING:
    from contextledger.tables.build import RunTables


#: The most reading processes ``ingest --workers`` starts: each holds a reader's memory,
#: and far more than cores only waits.
MAX_WORKERS = 256


def _ingest_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--ingest-date`` as the YYYY-MM-DD an archive stores (a usage error otherwise)."""
    from contextledger.archive.partitions import ingest_date_text

    try:
        return None if value is None else ingest_date_text(value, "ingest date")
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.command(name="ingest")
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
@click.option(
    "--workers", type=whole_number(1, MAX_WORKERS), help="Reading processes [default: cores]."
)
@click.option(
    "--batch-runs",
    type=whole_number(1),
    default=5000,
    show_default=True,
    help="Commit after this many runs (an interrupted ingest redoes at most one batch).",
)
@click.option(
    "--retry-quarantined", is_flag=True, help="Read quarantined files again even if unchanged."
)
@progress_option
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

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    or folders of either.
    """
    from contextledger.archive import ArchiveError
    from contextledger.jobs.ingest import ingest
    from contextledger.progress import chosen_stream
    from contextledger.tables.sidecars import load_static_tools

    missing = [path for path in paths if not os.path.lexists(path)]
    if len(missing) == len(paths):  # nothing to read: the archive is not made or touched
        for path in missing:
            _warn(f"skipped {path}: no such file")
        _refuse_if_nothing_read(0, len(missing))
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
            "progress": chosen_stream(progress),
        }
        if on_spark:
            report = on_spark("ingest", list(paths), archive_dir, **options)
        else:
            report = ingest(list(paths), archive_dir, workers=workers, **options)
    except OSError as error:  # a named file missing (--outcomes, --static-tools), or a write
        _fail(_unopened(error))
        raise  # unreachable: _fail exits
    except (ArchiveError, ValueError) as error:
        _fail(_error_lines(error))
        raise  # unreachable: _fail exits
    _name_skipped(report.files_skipped, report.files_empty)
    click.echo(terminal_lines(report.summary_lines()))
    if report.problems:
        sys.exit(EXIT_UNREADABLE_INPUT)


@click.command(name="synth")
@click.option("--runs", type=whole_number(1), required=True, help="How many runs.")
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
@click.option("--seed", type=whole_number(0), default=0, show_default=True)
@click.option(
    "--templates",
    type=click.Path(),
    default=None,
    help="Recorded runs to copy for --snapshots [default: the bundled sample].",
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
    templates: str | None,
    partition_by: str | None,
    ingest_date: str | None,
    streams: bool,
) -> None:
    """Write realistic synthetic runs, to try the tool or time it at scale.

    --archive DIR writes the tables directly (both accountings and outcome labels,
    modelled on the reference corpus; about 55 offer rows per run) and each run's
    message stream for `whatif`; --snapshots DIR writes agentfootprint snapshot files
    for timing `ingest`. The same seed gives the same runs; running the command again
    adds only what is missing.
    """
    from contextledger.archive import ArchiveError
    from contextledger.jobs import synth
    from contextledger.progress import progress_stream

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
            progress=progress_stream(),
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
    return [str(problem) for problem in verify_archive(tables.archive)]


@click.command(name="check")
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

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    import io

    import polars as pl

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
        fit = Fit(keep=("invariant", "piece_id"), hint="pipe it, or use a wider terminal")
        click.echo(table_text(shown, width=output_width(None), fit=fit, str_len=200))
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
