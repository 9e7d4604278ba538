"""Compare window policies over a source: the audit of every run, side by side.

Reads the runs as the what-if does (snapshot paths, runs in memory, or an archive
``DIR?since=..``, a batch at a time), audits each (run, policy) with
:func:`~contextledger.window.audit_arrays.audit_table` and puts the policies side by side:
wire problems, facts reaching the answer, results rewritten, input tokens, prefix-cache
invalidations and what the tokens cost with and without a prompt cache.

A batch is replayed and audited with the cyclic collector paused: what it allocates
(``Message`` objects, windows, rows) is trees that reference counting frees, and a
2,000-run batch of the synthetic archive leaves no cycle behind (``gc.collect()`` finds
none after it) while the collector's passes over its live objects were a tenth to a
quarter of its CPU (docs/benchmarks.md: the report against ``ledger`` + ``whatif``).
From :data:`POOL_FROM_RUNS` runs the batches go to worker processes, as the report's do.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from contextledger.jobs.whatif import ArchiveReplay, _standing_rows, read_inputs, with_problems
from contextledger.processes import map_ahead
from contextledger.progress import Progress
from contextledger.read.cycles import collector_paused
from contextledger.read.identity import DUPLICATES
from contextledger.read.messages import RunMessages
from contextledger.read.snapshot import ReadProblem
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES
from contextledger.window.audit import (
    AUDIT_SCHEMA,
    AnyPolicy,
    CachePrices,
    parse_audit_policy,
    wire_frame,
    without_tool_text,
)
from contextledger.window.audit_arrays import audit_table, whatif_and_audit
from contextledger.window.frameworks import FrameworkPolicy
from contextledger.window.policies import Policy

#: One spec per other framework's policy, with parameters that engage on agentfootprint
#: runs (windows of a few hundred to a few thousand tokens, tool results of a few hundred
#: chars; the corpus's median run peaks near 600 input tokens): budgets near 600 tokens,
#: triggers near 1,000, a 200-char output threshold. LangChain's trimmer twice: as often
#: called (no ``start_on``) and as its documentation advises (``start_on=human``).
#: ``contextledger compare`` and the report audit these beside agentfootprint's own.
FRAMEWORK_DEFAULTS = (
    "anthropic_clear:trigger=1000",
    "langchain_trim:max_tokens=600",
    "langchain_trim:max_tokens=600,start_on=human",
    "langchain_clear:trigger=1000",
    "langchain_summarize:trigger=tokens:1000,keep=messages:6,summary_tokens=200",
    "openai_trim:recent_turns=1,max_output_chars=200,preview_chars=100",
    "autogen_buffered:buffer_size=8",
    "autogen_head_tail:head_size=2,tail_size=8",
    "mastra_tool_filter",
    "mastra_token_limit:limit=600",
)
#: From this many runs, :func:`compare` and the report replay and audit them in worker
#: processes, a batch at a time: a worker's start (its imports, about 1 s of CPU) pays
#: back from about a thousand runs (the audit: 2-5 ms of CPU a run).
POOL_FROM_RUNS = 1000
#: Runs a worker replays at once from snapshots (an archive's batches are its own).
REPLAY_BATCH_RUNS = 250


@dataclass
class Comparison:
    """Policies compared over a source: ``per_run`` (one :data:`AUDIT_SCHEMA` row per run
    and policy) and ``table`` (one row per policy), with what could not be read."""

    per_run: pl.DataFrame
    table: pl.DataFrame
    prices: CachePrices
    runs: int = 0
    problems: list[ReadProblem] = field(default_factory=list)
    duplicates: pa.Table = field(default_factory=lambda: schema.empty(DUPLICATES))
    skipped: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # files of 0 bytes: no run in them
    #: The run ids read (to name standings rows that match none).
    run_ids: list[str] = field(default_factory=list)
    #: Over an archive: how many selected runs were left out (``''``: none, or snapshots).
    left_out: str = ""
    #: True when the source was an archive (its selection, not files, chose the runs).
    archived: bool = False
    #: A line per policy left out, and why (:func:`~contextledger.window.audit.without_tool_text`).
    policies_left_out: list[str] = field(default_factory=list)
    #: Over an archive: the ``run_id`` filter's ids that name no run it holds.
    unmatched_run_ids: list[str] = field(default_factory=list)
    #: What the reader doubts about runs it still compared (``RunMessages.notes``).
    notes: list[str] = field(default_factory=list)


def parse_compared(specs: Sequence[str | AnyPolicy] | str) -> list[tuple[str, AnyPolicy]]:
    """``(spec as given, policy)`` per spec, duplicates once; raises ``PolicySpecError``
    naming the first bad one.

    >>> [label for label, _ in parse_compared(["none", "sliding:keep=6", "none"])]
    ['none', 'sliding:keep=6']
    """
    given = [specs] if isinstance(specs, str | AnyPolicy) else list(specs)
    parsed: dict[str, AnyPolicy] = {}
    for spec in given:
        label = spec.spec if isinstance(spec, Policy | FrameworkPolicy) else str(spec).strip()
        if label not in parsed:
            parsed[label] = parse_audit_policy(spec)
    if not parsed:
        msg = "give at least one window policy (e.g. 'sliding:keep=6')"
        raise ValueError(msg)
    return list(parsed.items())


def compare(
    paths: Any,
    policies: Sequence[str | AnyPolicy] | str,
    *,
    standings: Any = None,
    prices: CachePrices | None = None,
    workers: int | None = None,
    meter: Progress | None = None,
) -> Comparison:
    """Audit every run under every policy: per-run rows and the side-by-side table.

    ``paths`` is what :func:`~contextledger.jobs.whatif.read_inputs` takes, or one
    archive (``DIR``, ``DIR?since=..&label=..``), read a batch of runs at a time.
    ``standings`` (a CSV / JSON Lines file, or a frame of ``run_id, tool_call_id,
    standing, iteration``) adds to the standings the snapshots or the archive hold.
    From :data:`POOL_FROM_RUNS` runs the batches are audited on ``workers`` processes
    (default: one per core); the rows are the same either way. ``meter`` is shown the
    runs audited.

    >>> found = compare("data/sample/s0001-fact-bench.json.gz", ["none", "sliding:keep=6"],
    ...                 standings="data/sample-standings.csv")
    >>> found.table.select("policy", "facts_at_answer", "facts_declared").rows()
    [('none', 6, 6), ('sliding:keep=6', 6, 6)]
    """
    parsed = parse_compared(policies)
    prices = prices or CachePrices()
    given = _standing_rows(standings)
    workers = workers if workers is not None else os.cpu_count() or 1
    archived = _compare_archive(paths, parsed, given, prices, workers, meter)
    if archived is not None:
        return archived
    inputs = read_inputs(paths, meter=meter)
    rows = [*inputs.standings, *given]
    if workers > 1 and len(inputs.streams) >= POOL_FROM_RUNS:
        calls: Iterator[tuple[Any, ...]] = (
            (streams, parsed, held, prices)
            for streams, held in spread_batches(inputs.streams, rows, workers)
        )
        per_run, _, _ = _gathered(map_ahead(audit_streams, calls, workers), meter)
    else:
        per_run, _, _ = audit_streams(inputs.streams, parsed, rows, prices)
    return Comparison(
        per_run=per_run,
        table=comparison_table(per_run, [label for label, _ in parsed]),
        prices=prices,
        runs=len(inputs.streams),
        problems=list(inputs.problems),
        duplicates=inputs.duplicates,
        skipped=list(inputs.skipped),
        empty=list(inputs.empty),
        run_ids=[stream.run_id for stream in inputs.streams],
        notes=[note for stream in inputs.streams for note in stream.notes],
    )


def _compare_archive(
    paths: Any,
    parsed: list[tuple[str, AnyPolicy]],
    given: list[dict[str, Any]],
    prices: CachePrices,
    workers: int,
    meter: Progress | None,
) -> Comparison | None:
    """:func:`compare` over an archive, a batch of runs at a time; None when ``paths``
    names none."""
    from contextledger.archive.tables import archive_tables
    from contextledger.archive.windows import window_batches

    named = [paths] if isinstance(paths, str | Path) else paths
    if not all(isinstance(path, str | Path) for path in named):
        return None
    tables = archive_tables([str(path) for path in named], ACCOUNTING_MODES[0])
    if tables is None:
        return None
    parsed, policies_left_out = without_tool_text(parsed)
    started = time.perf_counter()
    calls = (
        (streams, messages, [*held.to_pylist(), *given], parsed, prices)
        for streams, messages, held in window_batches(tables.archive, tables.selection)
    )
    if workers > 1 and tables.runs.num_rows >= POOL_FROM_RUNS:
        audited = map_ahead(audit_window_tables, calls, workers)
    else:
        audited = (audit_window_tables(*call) for call in calls)
    per_run, run_ids, notes = _gathered(audited, meter)
    seconds = time.perf_counter() - started
    replayed = with_problems(ArchiveReplay(per_run.lazy(), len(run_ids), seconds), tables)
    return Comparison(
        per_run=per_run,
        table=comparison_table(per_run, [label for label, _ in parsed]),
        prices=prices,
        runs=len(run_ids),
        problems=replayed.problems,
        run_ids=run_ids,
        left_out=replayed.left_out_text(),
        archived=True,
        policies_left_out=policies_left_out,
        unmatched_run_ids=replayed.unmatched_run_ids,
        notes=notes,
    )


#: A batch audited: its rows (:data:`AUDIT_SCHEMA`), its run ids and their notes.
Audited = tuple[pl.DataFrame, list[str], list[str]]


def audit_streams(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]],
    prices: CachePrices,
) -> Audited:
    """A batch of runs audited (:func:`~contextledger.window.audit_arrays.audit_table`),
    here or in a worker, with the collector paused (module header)."""
    with collector_paused():
        per_run = audit_table(streams, policies, standings_rows, prices)
    return per_run, [s.run_id for s in streams], [n for s in streams for n in s.notes]


def audit_window_tables(
    streams: pa.Table,
    messages: pa.Table,
    standings_rows: Sequence[Mapping[str, Any]],
    policies: Sequence[tuple[str, AnyPolicy]],
    prices: CachePrices,
) -> Audited:
    """:func:`audit_streams` of an archive's batch of window tables (``schema.STREAMS``
    and ``schema.MESSAGES`` rows), the streams rebuilt where this runs."""
    from contextledger.tables.windows import streams_from_tables

    with collector_paused():
        rebuilt = streams_from_tables(streams, messages)
    return audit_streams(rebuilt, policies, standings_rows, prices)


def spread_batches(
    streams: Sequence[RunMessages], standings_rows: Sequence[Mapping[str, Any]], workers: int
) -> Iterator[tuple[Sequence[RunMessages], list[Mapping[str, Any]]]]:
    """Runs read from snapshots cut into batches for ``workers`` processes (at least
    :data:`REPLAY_BATCH_RUNS` runs, about four batches a worker), each with its runs'
    standings rows."""
    size = max(REPLAY_BATCH_RUNS, math.ceil(len(streams) / (workers * 4)))
    for first in range(0, len(streams), size):
        chosen = streams[first : first + size]
        ids = {stream.run_id for stream in chosen}
        yield chosen, [row for row in standings_rows if row["run_id"] in ids]


def _gathered(batches: Iterator[Audited], meter: Progress | None) -> Audited:
    """The batches' rows, run ids and notes, in order, the meter told the runs so far."""
    parts = [pl.DataFrame(schema=AUDIT_SCHEMA)]
    run_ids: list[str] = []
    notes: list[str] = []
    for per_run, ids, noted in batches:
        parts.append(per_run)
        run_ids += ids
        notes += noted
        if meter is not None:
            meter.show(f"{meter.command}: audited {len(run_ids):,} runs  {meter.elapsed:.0f} s")
    if meter is not None and run_ids:  # the last count, whenever the one before was drawn
        meter.show(f"{meter.command}: audited {len(run_ids):,} runs", force=True)
    return pl.concat(parts), run_ids, notes


def replay_and_audit(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, Policy]],
    audited: Sequence[tuple[str, AnyPolicy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What the report replays of a batch of runs: ``(per_run, audit)``, the what-if rows
    of ``policies`` (agentfootprint's) each with its window's wire problems
    (:func:`~contextledger.window.audit.wire_frame`), and the audit rows of ``audited``.
    Each run is replayed on its own, so batches of runs give the rows of all at once.

    >>> from contextledger.window.whatif import parse_policies
    >>> streams = read_inputs("data/sample/s0003-loop.json.gz").streams
    >>> per_run, audit = replay_and_audit(streams, parse_policies(["none"]),
    ...                                   parse_compared(["none", "mastra_tool_filter"]))
    >>> per_run.height, audit["policy"].to_list()
    (1, ['none', 'mastra_tool_filter'])
    """
    with collector_paused():  # a batch's replay makes no cycle to collect (module header)
        per_run, audit = whatif_and_audit(streams, policies, audited, standings_rows)
    wire = wire_frame(audit)
    joined = per_run.join(wire, on=["run_id", "policy"], how="left", maintain_order="left")
    return joined, audit


def replay_and_audit_tables(
    streams: pa.Table,
    messages: pa.Table,
    standings_rows: Sequence[Mapping[str, Any]],
    policies: Sequence[tuple[str, Policy]],
    audited: Sequence[tuple[str, AnyPolicy]],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`replay_and_audit` of an archive's batch of window tables (``schema.STREAMS``
    and ``schema.MESSAGES`` rows): the streams are rebuilt where this runs (a worker)."""
    from contextledger.tables.windows import streams_from_tables

    with collector_paused():
        rebuilt = streams_from_tables(streams, messages)
        return replay_and_audit(rebuilt, policies, audited, standings_rows)


#: Columns of :func:`comparison_table`.
TABLE_SCHEMA: dict[str, Any] = {
    "policy": pl.String,
    "runs": pl.Int64,
    "wire_problems": pl.Int64,
    "runs_rejected": pl.Int64,
    "first_offending_call": pl.String,
    "facts_at_answer": pl.Int64,
    "facts_declared": pl.Int64,
    "answer_placeholders": pl.Int64,
    "answer_previews": pl.Int64,
    "input_tokens": pl.Int64,
    "input_tokens_from": pl.String,
    "runs_without_tokens": pl.Int64,
    "cache_invalidations": pl.Int64,
    "cached_tokens": pl.Int64,
    "recorded_cache_runs": pl.Int64,
    "recorded_cache_read_tokens": pl.Int64,
    "recorded_cache_write_tokens": pl.Int64,
    "cached_tokens_where_recorded": pl.Int64,
    "cost_without_cache": pl.Float64,
    "cost_with_cache": pl.Float64,
}


def comparison_table(per_run: pl.DataFrame, policies: Sequence[str]) -> pl.DataFrame:
    """One row per policy, in the order given: the per-run audit summed over the runs.

    ``first_offending_call`` names the first run (in input order) whose windows a
    provider would reject: ``RUN call N: KIND: the message``. ``input_tokens`` and the
    costs add up the runs whose tokens are known (``runs_without_tokens`` are not: no
    call of theirs reported a count to estimate from); ``input_tokens_from`` says
    whether the counts are the provider's, estimates, or both. ``cached_tokens`` is the
    audit's best-case estimate of the cached part; ``recorded_cache_*`` add up what the
    provider recorded reading from and writing to its cache over the
    ``recorded_cache_runs`` that recorded it (the windows the runs sent, the same under
    every policy), and ``cached_tokens_where_recorded`` the estimate over those runs.
    """
    first = pl.format(
        "{} call {}: {}: {}",
        "run_id",
        "first_problem_call",
        "first_problem_kind",
        "first_problem_message",
    )
    sources = pl.col("input_tokens_from").drop_nulls().unique()
    grouped = (
        per_run.lazy()
        .group_by("policy", maintain_order=True)
        .agg(
            runs=pl.len().cast(pl.Int64),
            wire_problems=pl.col("wire_problems").sum(),
            runs_rejected=(pl.col("wire_problems") > 0).sum().cast(pl.Int64),
            first_offending_call=first.drop_nulls().first(),
            facts_at_answer=pl.col("facts_at_answer").sum(),
            facts_declared=pl.col("facts_declared").sum(),
            answer_placeholders=pl.col("answer_placeholders").sum(),
            answer_previews=pl.col("answer_previews").sum(),
            input_tokens=pl.col("input_tokens").sum(),
            input_tokens_from=pl.when(sources.len() > 1)
            .then(pl.lit("recorded+estimated"))
            .otherwise(sources.first()),
            runs_without_tokens=pl.col("input_tokens").null_count().cast(pl.Int64),
            cache_invalidations=pl.col("cache_invalidations").sum(),
            cached_tokens=pl.col("cached_tokens").sum(),
            recorded_cache_runs=pl.col("recorded_cache_read_tokens").is_not_null().sum(),
            recorded_cache_read_tokens=pl.col("recorded_cache_read_tokens").sum(),
            recorded_cache_write_tokens=pl.col("recorded_cache_write_tokens").sum(),
            cached_tokens_where_recorded=pl.col("cached_tokens")
            .filter(pl.col("recorded_cache_read_tokens").is_not_null())
            .sum(),
        )
        .collect()
    )
    order = pl.DataFrame({"policy": list(policies)}, schema={"policy": pl.String})
    table = order.join(grouped, on="policy", how="left", maintain_order="left")
    table = table.join(_cost_sums(per_run), on="policy", how="left", maintain_order="left")
    return table.with_columns(
        pl.col(name).fill_null(0)
        for name, dtype in TABLE_SCHEMA.items()
        if dtype in (pl.Int64, pl.Float64)
    ).cast(TABLE_SCHEMA)  # type: ignore[arg-type]


#: The per-run costs :func:`comparison_table` adds up.
COSTS = ("cost_without_cache", "cost_with_cache")


def _cost_sums(per_run: pl.DataFrame) -> pl.DataFrame:
    """Each policy's costs summed with ``math.fsum``: correctly rounded whatever the rows'
    order or chunking, so an archive read in batches gives the snapshots' totals to the
    last bit (a float sum's partial order follows the frame's layout)."""
    rows = [
        {
            "policy": policy,
            **{name: math.fsum(part[name].drop_nulls().to_list()) for name in COSTS},
        }
        for (policy,), part in per_run.partition_by("policy", as_dict=True).items()
    ]
    schema = {"policy": pl.String, **dict.fromkeys(COSTS, pl.Float64)}
    return pl.DataFrame(rows, schema=schema)


def display_table(table: pl.DataFrame) -> pl.DataFrame:
    """What the ``table`` format prints: one row per policy, counts with thousands commas,
    facts as ``at the answer / declared``."""

    def number(name: str) -> pl.Expr:
        return (
            pl.col(name)
            .round(0)
            .cast(pl.Int64)
            .map_elements(lambda value: f"{value:,}", return_dtype=pl.String)
        )

    return table.select(
        "policy",
        "runs",
        pl.col("wire_problems").alias("wire problems"),
        pl.col("first_offending_call").fill_null("-").alias("first offending call"),
        pl.format("{} / {}", "facts_at_answer", "facts_declared").alias("facts at answer"),
        pl.format("{} / {}", "answer_placeholders", "answer_previews").alias(
            "placeholders / previews"
        ),
        number("input_tokens").alias("input tokens"),
        pl.col("input_tokens_from").fill_null("-").alias("tokens from"),
        pl.col("cache_invalidations").alias("cache invalidations"),
        *(
            [
                pl.format(
                    "{} / {}",
                    number("recorded_cache_read_tokens"),
                    number("cached_tokens_where_recorded"),
                ).alias("cache reads: recorded / audit")
            ]
            if table["recorded_cache_runs"].sum()
            else []
        ),
        number("cost_without_cache").alias("cost, no cache"),
        number("cost_with_cache").alias("cost, cache"),
    )


def _recorded_cache_text(table: pl.DataFrame) -> str:
    """The provider's recorded cache reads against the audit's estimate for the same runs,
    per policy; empty when no run recorded its cache use."""
    runs = max(table["recorded_cache_runs"].to_list(), default=0)
    if not runs:
        return ""
    first = table.row(0, named=True)
    estimates = "; ".join(
        f"{row['policy']} {row['cached_tokens_where_recorded']:,}"
        for row in table.iter_rows(named=True)
    )
    return (
        f"\nPrompt cache as the provider recorded it, {runs} run(s) (the windows they sent): "
        f"{first['recorded_cache_read_tokens']:,} tokens read from the cache, "
        f"{first['recorded_cache_write_tokens']:,} written. The audit's estimate of the "
        f"cached part for the same runs: {estimates} (only 'none' replays the windows sent; "
        "the estimate assumes every call caches its whole window)."
    )


def describe(comparison: Comparison) -> str:
    """The lines under the table: what was compared, the price model, what is missing."""
    policies = comparison.table.height
    prices = comparison.prices
    line = (
        f"{comparison.runs} run(s) under {policies} polic{'y' if policies == 1 else 'ies'}; "
        "counts are totals over the runs. Wire problems: per kind, per message, per call. "
        "Facts: tool results filed as 'fact' reaching the last call verbatim / filed.\n"
        "Costs in base input-token units: without a cache every token costs 1; with one, "
        f"the prefix a call shares with the previous call's window is read at {prices.read:g} "
        f"and the rest written at {prices.write:g}. A cache invalidation: the previous "
        "window is not a prefix of this one."
    )
    line += _recorded_cache_text(comparison.table)
    missing = max(comparison.table["runs_without_tokens"].to_list(), default=0)
    if missing:
        line += f"\n{missing} run(s) reported no input tokens: left out of tokens and costs."
    return line + "\n"
