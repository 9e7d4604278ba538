"""The commands over the context window: ``whatif`` and the ``report`` that shows it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from contextledger.cli.common import (
    EXIT_UNREADABLE_INPUT,
    _csv,
    _emit,
    _error_lines,
    _fail,
    _name_duplicates,
    _name_nothing_selected,
    _name_skipped,
    _name_unmatched,
    _name_unmatched_labels,
    _name_unmatched_run_ids,
    _refuse_if_nothing_read,
    _spark_engine,
    _summary,
    _unopened,
    _warn,
    _writing,
    csv_safe_option,
    engine_option,
    format_option,
    max_document_option,
    mode_option,
    outcomes_option,
    output_option,
    paths_argument,
    progress_option,
    standings_option,
)
from contextledger.cli.terminal import Fit, output_width, prose, table_text
from contextledger.output import nested_as_json, terminal_text
from contextledger.read.snapshot import ReadProblem

if TYPE_CHECKING:
    import polars as pl


def _chart_formats(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    """``svg``, ``png``, both comma-separated in any order, or ``none``."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if names == ["none"]:
        return ()
    unknown = [name for name in names if name not in ("svg", "png")]
    if unknown or not names:
        raise click.BadParameter(f"{value!r}: give svg, png, svg,png or none")
    return tuple(dict.fromkeys(names))


#: The what-if table's columns in the order they give way; kept: the policy, the input
#: tokens it costs and the facts it leaves for the answer.
WHATIF_FIT = Fit(
    keep=("policy", "input tokens", "answer facts"),
    drop_first=(
        "fact pins",
        "recency pins",
        "noise dropped",
        "input chars",
        "results dropped",
        "answer results",
        "runs",
        "msgs removed",
        "facts dropped",
    ),
    wrap=("policy",),
    hint="use --format json or a wider terminal",
)
#: The compare table's columns in the order they give way; kept: the policy, the wire
#: problems a provider would reject, the facts at the answer and the cost with a cache.
COMPARE_FIT = Fit(
    keep=("policy", "wire problems", "facts at answer", "cost, cache"),
    drop_first=(
        "first offending call",
        "tokens from",
        "placeholders / previews",
        "runs",
        "cache invalidations",
        "input tokens",
        "cost, no cache",
    ),
    wrap=("policy",),
    hint="use --format csv for them per run, or a wider terminal",
)


@click.command(name="whatif")
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
@format_option(
    ["table", "json", "jsonl", "csv", "parquet"],
    help="table: one row per policy over the runs, fitted to the terminal; json and jsonl: "
    "JSON Lines, one object per (run, policy); csv: the same rows and columns (visits "
    "and answer as JSON text); parquet: the same rows (needs -o).",
)
@output_option
@csv_safe_option
@max_document_option
@engine_option
@progress_option
def whatif_command(
    paths: tuple[str, ...],
    policies: tuple[str, ...],
    standings_file: str | None,
    output_format: str,
    output: str | None,
    csv_safe: bool,
    engine: str,
    progress: bool | None,
) -> None:
    """Replay the runs under PATHS under each --policy: what would each window have served?

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """

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
    from contextledger import progress as meters
    from contextledger.archive import ArchiveError

    meter = meters.Progress(
        meters.chosen_stream(progress), delay=meters.SLOW_SECONDS, command="whatif"
    )
    archived = None
    try:
        if on_spark:
            archived = on_spark("whatif_archive", paths[0], parsed, standings)
        else:
            archived = sourced.whatif_archive(paths, parsed, standings, meter=meter)
    except ArchiveError as error:
        meter.close()
        _fail(str(error))
    per_run: pl.DataFrame | pl.LazyFrame
    if archived is not None:
        problems = list(archived.problems)
        per_run = archived.rows  # scanned from disk: memory does not grow with the archive
        meter.close()
        click.echo(
            f"contextledger: {archived.runs} archived run(s) replayed under {len(parsed)} "
            f"polic{'y' if len(parsed) == 1 else 'ies'} in {archived.seconds:.2f} s: "
            f"{archived.runs_per_second:,.0f} runs/s"
            + (f"; {archived.left_out_text()}" if problems else ""),
            err=True,
        )
        _name_unmatched_run_ids(archived.unmatched_run_ids)
        _name_unmatched("standings", *_standings_replayed(standings, per_run))
    else:
        inputs = sourced.read_inputs(paths, meter=meter)
        meter.close()  # the notes below on lines of their own
        problems = list(inputs.problems)
        _name_skipped(inputs.skipped, inputs.empty)
        _name_duplicates(inputs.duplicates)
        _name_unmatched(
            "standings",
            [str(row["run_id"]) for row in standings],
            [stream.run_id for stream in inputs.streams],
        )
        every_standing = [*inputs.standings, *standings]
        per_run = sourced.replay_streams(inputs.streams, parsed, every_standing, meter=meter)
        meter.close()
    replayed_ids = set() if archived is not None else {s.run_id for s in inputs.streams}
    for problem in problems:
        _warn(_problem_line(problem, replayed_ids))
    notes = archived.notes if archived is not None else [n for s in inputs.streams for n in s.notes]
    for note in notes:
        _warn(note)
    replayable = archived.runs if archived is not None else len(inputs.streams)
    _refuse_if_nothing_read(replayable, len(problems))
    _name_nothing_selected(
        replayable, paths, archived=archived is not None, then=": nothing to replay"
    )
    note = replayed.describe(per_run, len(parsed))
    rows = "json" if output_format == "jsonl" else output_format  # the same JSON Lines
    if rows == "parquet" or (rows == "json" and output):
        with _writing(str(output)) as temporary:
            if rows == "parquet":
                per_run.lazy().sink_parquet(temporary)
            else:
                per_run.lazy().sink_ndjson(temporary)
        click.echo(note, err=True)
    else:
        if rows == "json":
            text = per_run.lazy().collect().write_ndjson()
        elif rows == "csv":
            text = _csv(nested_as_json(per_run.lazy().collect()), csv_safe)
        else:
            table = replayed.display_table(replayed.per_policy(per_run))
            width = output_width(output)
            shown = table_text(table, width=width, fit=WHATIF_FIT)
            text = f"{shown}\n{prose(note, width)}\n"
        _emit(text, output)
        if rows in ("json", "csv") or output:
            click.echo(note, err=True)
    if problems:
        sys.exit(EXIT_UNREADABLE_INPUT)


def _problem_line(problem: ReadProblem, replayed: set[str]) -> str:
    """A problem as the what-if says it: ``skipped`` when what it names was left out,
    ``read in part`` when its run was still replayed (a message attribute cut, a part of
    an unknown type: the rest of the run was read)."""
    if problem.run_id is not None and problem.run_id in replayed:
        return f"read in part {problem.where}: {problem.reason}"
    return f"skipped {problem.where}: {problem.reason}"


def _standings_replayed(
    standings: list[dict[str, Any]], per_run: pl.DataFrame | pl.LazyFrame
) -> tuple[list[str], list[str]]:
    """The run ids of the standings rows given, and those of them among the runs
    replayed: what :func:`_name_unmatched` compares (the rows' run ids read alone,
    filtered to those ids, however many runs were replayed)."""
    import polars as pl

    ids = [str(row["run_id"]) for row in standings]
    if not ids:
        return [], []
    found = per_run.lazy().filter(pl.col("run_id").is_in(ids)).select(pl.col("run_id").unique())
    return ids, found.collect()["run_id"].to_list()


def _output_folder(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """Refuse an empty ``-o`` as every command's file ``-o`` is refused (it named the
    current folder)."""
    if not value:
        _fail("cannot write '': no folder name given (an empty path)")
    return value


@click.command(name="report")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "-o",
    "--output-dir",
    "output_dir",
    type=click.Path(file_okay=False),
    callback=_output_folder,
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
    help="A window policy to compare (repeat), of either family `compare` takes: "
    "agentfootprint's are drawn in every window chart, another framework's in the cost chart. "
    "Each family's defaults give way to the specs given of it; default: none, "
    "sliding:keep=6,ledger_facts=0, sliding:keep=6, sliding:keep=3, token_budget:threshold=500, "
    "and one spec per other framework.",
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

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    from contextledger import report
    from contextledger.archive import ArchiveError, ArchiveTables
    from contextledger.progress import chosen_stream
    from contextledger.tables.standings import StandingsFileError
    from contextledger.window.frameworks import framework_name
    from contextledger.window.policies import PolicySpecError

    theirs = [spec for spec in policies if framework_name(spec) is not None]
    ours = [spec for spec in policies if framework_name(spec) is None]
    meter = report.Progress(chosen_stream(progress))
    try:
        data = report.collect(
            list(paths),
            outcomes=outcomes_file,
            standings=standings_file,
            policies=ours or report.DEFAULT_POLICIES,
            frameworks=theirs or report.FRAMEWORK_DEFAULTS,
            mode=mode,
            timeline_run=timeline_run,
            timeline_policy=timeline_policy,
            progress=meter,
            draw=chart_formats,  # the ledger's charts are drawn while the runs are replayed
        )
    except (
        ArchiveError,
        PolicySpecError,
        StandingsFileError,
        OSError,
        ValueError,
    ) as error:
        meter.close()  # the error on a line of its own
        _fail(_unopened(error) if isinstance(error, OSError) else str(error))
        raise  # unreachable: _fail exits
    meter.close()  # warnings on lines of their own
    archived = isinstance(data.tables, ArchiveTables)
    if isinstance(data.tables, ArchiveTables):
        _name_unmatched_run_ids(data.tables.unmatched_run_ids())
    _name_skipped(data.tables.skipped, data.tables.empty)
    for problem in data.tables.problems.to_pylist():
        _warn(f"skipped {ReadProblem(**problem).where}: {problem['reason']}")
    _name_duplicates(data.tables.duplicates)
    _name_unmatched_labels(data.tables)
    _refuse_if_nothing_read(data.tables.runs.num_rows, data.tables.problems.num_rows)
    if paths:  # none: the bundled sample, which has runs
        _name_nothing_selected(data.tables.runs.num_rows, paths, archived=archived)
    for problem in data.unreplayed:
        _warn(f"not replayed {ReadProblem(**problem).where}: {problem['reason']}")
    if data.windows_note is not None:  # said on the page, and here for a log
        _warn(data.windows_note)
    for line in data.policies_left_out:  # on the page too
        _warn(line)
    formats = chart_formats
    try:
        page = report.write_report(data, output_dir, formats=formats, progress=meter)
    except OSError as error:
        meter.close()
        _fail(f"cannot write the report to {output_dir}: {error.strerror or error}")
        raise  # unreachable: _fail exits
    meter.close()
    drawn = formats and data.tables.runs.num_rows > 0  # no run read: no chart to draw
    click.echo(
        terminal_text(f"wrote {page}" + (f" and {page.parent / 'charts'}/" if drawn else ""))
    )
    click.echo(_summary(data.tables))
    if data.tables.problems.num_rows or data.unreplayed:
        sys.exit(EXIT_UNREADABLE_INPUT)


@click.command(name="compare")
@paths_argument
@click.option(
    "--policy",
    "policies",
    multiple=True,
    help="A window policy to compare (repeat): agentfootprint's as whatif takes it, or another "
    "framework's (anthropic_clear, langchain_trim, langchain_clear, langchain_summarize, "
    "openai_trim, autogen_buffered, autogen_head_tail, mastra_tool_filter, mastra_token_limit; "
    "e.g. langchain_trim:max_tokens=600). Default: the report's five and one per framework "
    "(contextledger.report.COMPARE_POLICIES).",
)
@standings_option()
@click.option(
    "--cache-write",
    type=float,
    default=1.25,
    show_default=True,
    help="Price of a token written to the prompt cache, in multiples of the input price "
    "(Anthropic: 1.25 for the 5-minute cache).",
)
@click.option(
    "--cache-read",
    type=float,
    default=0.1,
    show_default=True,
    help="Price of a token read from the prompt cache, in multiples of the input price "
    "(Anthropic: 0.1).",
)
@format_option(
    ["table", "json", "jsonl", "csv"],
    help="table: one row per policy, side by side, fitted to the terminal; json and jsonl: "
    "JSON Lines, one object per (run, policy); csv: the same per-run rows.",
)
@output_option
@csv_safe_option
@max_document_option
@progress_option
def compare_command(
    paths: tuple[str, ...],
    policies: tuple[str, ...],
    standings_file: str | None,
    cache_write: float,
    cache_read: float,
    output_format: str,
    output: str | None,
    csv_safe: bool,
    progress: bool | None,
) -> None:
    """Compare window policies over the runs under PATHS, at every model call: wire
    problems a provider would reject, facts reaching the answer, input tokens,
    prefix-cache invalidations, and the cost with and without a prompt cache.

    PATHS are agentfootprint snapshot files (.json, .json.gz, JSON Lines),
    OpenTelemetry trace files (OTLP JSON Lines, plain or gzip; told by content),
    folders of either, or one archive that ingest wrote.
    """
    from contextledger import progress as meters
    from contextledger.archive import ArchiveError
    from contextledger.jobs import compare as compared
    from contextledger.report import COMPARE_POLICIES
    from contextledger.tables.standings import StandingsFileError, load_standings
    from contextledger.window.audit import CachePrices
    from contextledger.window.policies import PolicySpecError

    try:
        prices = CachePrices(write=cache_write, read=cache_read)
        compared.parse_compared(policies or COMPARE_POLICIES)  # a bad spec: before any work
        standings = load_standings(standings_file) if standings_file else None
        meter = meters.Progress(
            meters.chosen_stream(progress), delay=meters.SLOW_SECONDS, command="compare"
        )
        try:
            found = compared.compare(
                paths, policies or COMPARE_POLICIES, standings=standings, prices=prices, meter=meter
            )
        finally:
            meter.close()
    except (PolicySpecError, StandingsFileError, ArchiveError) as error:
        _fail(_error_lines(error))
        raise  # unreachable: _fail exits
    except ValueError as error:  # a cache price that is no price
        _fail(str(error))
        raise  # unreachable: _fail exits
    _name_unmatched_run_ids(found.unmatched_run_ids)
    _name_skipped(found.skipped, found.empty)
    _name_duplicates(found.duplicates)
    if standings is not None:
        _name_unmatched("standings", standings.column("run_id").to_pylist(), found.run_ids)
    if found.left_out:
        _warn(found.left_out)
    for line in found.policies_left_out:
        _warn(line)
    if found.policies_left_out and found.table.is_empty():
        _fail("no policy left to compare over an archive")
    for problem in found.problems:
        _warn(_problem_line(problem, set(found.run_ids)))
    for note in found.notes:
        _warn(note)
    _refuse_if_nothing_read(found.runs, len(found.problems))
    _name_nothing_selected(found.runs, paths, archived=found.archived, then=": nothing to compare")
    note = compared.describe(found)
    width = output_width(output)
    if output_format in ("json", "jsonl"):
        text = found.per_run.write_ndjson()
    elif output_format == "csv":
        text = _csv(found.per_run, csv_safe)
    else:
        table = compared.display_table(found.table)
        text = f"{table_text(table, width=width, fit=COMPARE_FIT, str_len=100)}\n"
    if output_format == "table" and output is None:
        text += prose(note, width)
    _emit(text, output)
    if output_format != "table" or output is not None:
        click.echo(note, err=True, nl=False)
    if found.problems:
        sys.exit(EXIT_UNREADABLE_INPUT)
