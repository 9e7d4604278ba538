"""The synthetic population: agents modelled on the 301-run corpus, their runs' tables and
message streams, all drawn from a seed. Pure: no files are read or written here
(``jobs.synth`` writes them into an archive or as snapshot files).

The model follows the corpus: a population of agents, each with its static tools
(some never called), gated dynamic tools, always-on and rule-triggered injections
and skills; model calls per run in the corpus's buckets (1: 5%, 2-5: 38%, 6-12: 39%,
13-20: 13%, 21-30: 4%); one tool call per turn, or a parallel batch of 2-5 in a
quarter of turns; windows that hide early tool calls from the reference's count;
grouped agents whose injections the corrected accounting leaves unmetered; LLMCall
and zero-usage runs the reference refuses; outcome labels good / bad / neutral
(55/23/22%, worse for worse agents) and a second "reviewed" label on 5%. About 55
offer rows per run under the corrected accounting (the corpus has 45.5). Every use
is of a piece its run offered (an answer-slice credit, of an injection offered before
the run ended), so the tables keep ``ledger.invariants``.

Each run's message stream follows from its tables: its model calls, and after each
call the tool calls its uses record (a call's uses are one parallel batch), with
results tiny, typical or huge, every call answered (as in every recorded run, so a
window served under ``none`` is valid on the wire), some without their tool's name;
assistant text, now and then a user's follow-up, the answer after the last call; the
findings ledger of 30% of runs files a standing for each result. Streams are recorded
without a window and drawn apart from the tables, which are the same with or without
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contextledger.jobs.synth_population import (
    INJECTION,
    KIND_NAMES,
    Population,
    piece_names,
    population,
)
from contextledger.read.messages import RunMessages
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables
from contextledger.window.synthetic import (
    STANDING_MIX,
    Scripts,
    prose,
    result_sizes,
    script_streams,
)

#: Bumped when the model changes, so an archive never mixes two models under one seed
#: (version 3: runs are drawn in blocks of BLOCK_RUNS, not in the batches written).
MODEL_VERSION = 3
#: Keys the random draws, apart from MODEL_VERSION: version 2 changed what is built from
#: the draws (only offered injections credited, every tool call answered), not the draws,
#: so a seed still gives the population it gave.
DRAWS = 1
#: Runs drawn together: run ``i`` of a seed is run ``i % BLOCK_RUNS`` of block
#: ``i // BLOCK_RUNS``, drawn whole, so its content follows from the seed and ``i``
#: alone, whatever range of runs is asked for (and so however ``synth`` batches them).
BLOCK_RUNS = 2000

_CALL_BUCKETS = ((1, 1, 0.05), (2, 5, 0.38), (6, 12, 0.39), (13, 20, 0.13), (21, 30, 0.05))
_REFUSED = (
    "no call marker: no bundle wrote totalInputTokens without userMessage "
    "(an LLMCall runner, or a provider that reported zero input tokens on every call)"
)


def _cumcount(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal consecutive values."""
    if len(groups) == 0:
        return groups.astype(np.int64)
    change = np.flatnonzero(np.diff(groups)) + 1
    starts = np.zeros(len(groups), dtype=np.int64)
    starts[change] = change
    return np.arange(len(groups)) - np.maximum.accumulate(starts)


@dataclass
class SynthPart:
    """The runs of one block that a range of runs holds (see :func:`synth_parts`)."""

    tables: dict[str, RunTables]  # both accountings; run_order counts from 0 in the part
    labels: pa.Table  # their outcome labels
    scripts: Scripts | None  # their message-stream scripts, when asked for


def synth_parts(seed: int, first: int, count: int, *, scripts: bool = False) -> Iterator[SynthPart]:
    """Runs ``first .. first+count-1`` of the synthetic stream ``seed``, a block at a
    time: each block overlapping the range is drawn whole and cut to the range, so a
    run is the same whichever range holds it.

    >>> whole = synth_tables(seed=1, first=0, count=300)[0]["corrected"].offers
    >>> parts = [*synth_parts(1, 100, 200), *synth_parts(1, 0, 100)]
    >>> pa.concat_tables([parts[1].tables["corrected"].offers,
    ...     parts[0].tables["corrected"].offers]).equals(whole)
    True
    """
    end = first + count
    for block in range(first // BLOCK_RUNS, -(-end // BLOCK_RUNS)):
        start = block * BLOCK_RUNS
        tables, labels = _draw_block(seed, start, BLOCK_RUNS)
        drawn = _block_scripts(seed, start, tables) if scripts else None
        low, high = max(first, start) - start, min(end, start + BLOCK_RUNS) - start
        if (low, high) != (0, BLOCK_RUNS):
            ids = tables["corrected"].runs["run_id"].slice(low, high - low).combine_chunks()
            tables = {mode: _cut(part, low, high, ids) for mode, part in tables.items()}
            labels = labels.filter(pc.is_in(labels["run_id"], value_set=ids))
            drawn = None if drawn is None else drawn.take(np.arange(low, high))
        yield SynthPart(tables, labels, drawn)


def _cut(tables: RunTables, low: int, high: int, ids: pa.Array) -> RunTables:
    """Runs ``low .. high-1`` of ``tables`` (run ``ids``), run_order from 0."""
    runs = tables.runs.slice(low, high - low)
    runs = runs.set_column(
        1, schema.RUNS.field("run_order"), pa.array(np.arange(high - low), pa.int64())
    )

    def keep(table: pa.Table) -> pa.Table:
        return table.filter(pc.is_in(table["run_id"], value_set=ids))

    return RunTables(tables.mode, runs, keep(tables.offers), keep(tables.uses))


def synth_tables(seed: int, first: int, count: int) -> tuple[dict[str, RunTables], pa.Table]:
    """Runs ``first .. first+count-1`` of the synthetic stream ``seed``, in both accountings.

    Returns ``{mode: RunTables}`` (``run_order`` counts from 0 within the range) and the
    outcome labels.

    >>> tables, labels = synth_tables(seed=1, first=0, count=200)
    >>> tables["corrected"].runs.num_rows, 30 < tables["corrected"].offers.num_rows / 200 < 70
    (200, True)
    """
    parts = list(synth_parts(seed, first, count))
    if len(parts) == 1:
        return parts[0].tables, parts[0].labels
    tables = {}
    for mode in ACCOUNTING_MODES:
        runs = pa.concat_tables(part.tables[mode].runs for part in parts)
        runs = runs.set_column(
            1, schema.RUNS.field("run_order"), pa.array(np.arange(count), pa.int64())
        )
        tables[mode] = RunTables(
            mode,
            runs,
            pa.concat_tables(part.tables[mode].offers for part in parts),
            pa.concat_tables(part.tables[mode].uses for part in parts),
        )
    return tables, pa.concat_tables(part.labels for part in parts)


def _draw_block(seed: int, first: int, count: int) -> tuple[dict[str, RunTables], pa.Table]:
    """Runs ``first .. first+count-1`` drawn together (a block: see :data:`BLOCK_RUNS`),
    in both accountings, and their outcome labels; ``run_order`` counts from 0."""
    pop = population(seed, DRAWS)
    rng = np.random.default_rng([seed, DRAWS, 1, first])
    run_ids = np.array([f"synth-{seed}-{first + i:09d}" for i in range(count)], dtype=object)
    agent = rng.choice(len(pop.weights), count, p=pop.weights)
    bucket = rng.choice(len(_CALL_BUCKETS), count, p=[b[2] for b in _CALL_BUCKETS])
    low = np.array([b[0] for b in _CALL_BUCKETS])[bucket]
    high = np.array([b[1] for b in _CALL_BUCKETS])[bucket]
    calls = rng.integers(low, high + 1)
    calls = np.where(pop.llm_call[agent] | (pop.callable_tools[agent] == 0), 1, calls)
    zero_usage = rng.random(count) < 0.015
    refused_reference = pop.llm_call[agent] | zero_usage
    grouped = pop.grouped[agent]

    # Calls: one row per (run, call).
    call_run = np.repeat(np.arange(count), calls)
    call_index = _cumcount(call_run)
    # Offers: every slot of the run's agent whose start call has come.
    call_agent = agent[call_run]
    slots_per_call = np.diff(pop.agent_ptr)[call_agent]
    offer_call = np.repeat(np.arange(len(call_run)), slots_per_call)
    slot = pop.agent_ptr[call_agent][offer_call] + _cumcount(offer_call)
    live = pop.start[slot] <= call_index[offer_call]
    offer_call, slot = offer_call[live], slot[live]
    offer_run = call_run[offer_call]
    offer_piece = pop.piece[slot]
    offer_kind = pop.kinds[offer_piece]

    # Tool uses: every call but the last asks for one tool, or a parallel batch.
    asking = np.flatnonzero(call_index < calls[call_run] - 1)
    asking = asking[pop.callable_tools[call_agent[asking]] > 0]
    batch = np.where(rng.random(len(asking)) < 0.24, rng.integers(2, 6, len(asking)), 1)
    use_call = np.repeat(asking, batch)
    use_agent = call_agent[use_call]
    # Agent a's cumulative call weights, shifted by a, make one increasing array.
    shifted = pop.tool_cum + np.repeat(np.arange(len(pop.weights)), pop.callable_tools)
    position = np.searchsorted(shifted, use_agent + rng.random(len(use_call)), side="right")
    position = np.clip(position, pop.tool_ptr[use_agent], pop.tool_ptr[use_agent + 1] - 1)
    use_slot = pop.tool_slot[position]
    usable = pop.start[use_slot] <= call_index[use_call]
    use_call, use_slot = use_call[usable], use_slot[usable]
    tool_uses = pl.DataFrame(
        {
            "run": call_run[use_call],
            "call": call_index[use_call],
            "piece": pop.piece[use_slot],
            "signal": np.zeros(len(use_call), dtype=np.int8),
        }
    )
    # Skill activations (35% of runs whose agent has skills), and answer-slice credits.
    skill_runs = np.flatnonzero((pop.skill_count[agent] > 0) & (rng.random(count) < 0.35))
    first_skill = pop.agent_ptr[agent[skill_runs]] + pop.injection_count[agent[skill_runs]]
    skill_piece = pop.piece[first_skill + rng.integers(0, pop.skill_count[agent[skill_runs]])]
    activations = pl.DataFrame(
        {
            "run": skill_runs,
            "call": rng.integers(0, calls[skill_runs]),
            "piece": skill_piece,
            "signal": np.ones(len(skill_runs), dtype=np.int8),
        }
    )
    sliced_runs = np.flatnonzero(
        (pop.injection_count[agent] > 0) & ~grouped & (rng.random(count) < 0.9)
    )
    drawn = rng.integers(0, np.maximum(pop.injection_count[agent[sliced_runs]], 1))
    redraw = np.random.default_rng([seed, DRAWS, 4, first])
    sliced_runs, sliced = _offered_injection(pop, agent, calls, sliced_runs, drawn, redraw)
    skill_sliced = rng.random(len(skill_runs)) < 0.75
    answer = pl.DataFrame(
        {
            "run": np.concatenate([sliced_runs, skill_runs[skill_sliced]]),
            "call": np.full(len(sliced_runs) + int(skill_sliced.sum()), 1 << 20),
            "piece": np.concatenate([sliced, skill_piece[skill_sliced]]),
            "signal": np.full(len(sliced_runs) + int(skill_sliced.sum()), 2, dtype=np.int8),
        }
    )
    uses = pl.concat([tool_uses, activations, answer]).sort("run", "call", maintain_order=True)

    tables = {}
    for mode in ACCOUNTING_MODES:
        tables[mode] = _mode_tables(
            mode,
            pop,
            rng,
            run_ids,
            agent,
            calls,
            grouped,
            refused_reference,
            offer_run,
            call_index[offer_call],
            offer_kind,
            offer_piece,
            uses,
        )
    labels = _labels(rng, run_ids, pop.quality[agent])
    return tables, labels


def _offered_injection(
    pop: Population,
    agent: np.ndarray,
    calls: np.ndarray,
    runs: np.ndarray,
    drawn: np.ndarray,
    redraw: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The injection each of ``runs`` credits, as ``(runs, pieces)``: the ``drawn``-th of
    its agent's when the run offered it, else one drawn from ``redraw`` among those the
    run offered (whose start call came before the run ended); runs that offered none are
    left out. An agent's injection slots come first, so slot ``k`` of a run's agent is an
    injection while ``k`` is below the agent's injection count.
    """
    chosen_agent = agent[runs]
    column = np.arange(max(int(pop.injection_count.max(initial=0)), 1))
    slot = np.minimum(pop.agent_ptr[chosen_agent][:, None] + column, len(pop.start) - 1)
    offered = (column < pop.injection_count[chosen_agent][:, None]) & (
        pop.start[slot] < calls[runs][:, None]
    )
    choices = offered.sum(axis=1)
    pick = (redraw.random(len(runs)) * choices).astype(np.int64)
    picked = np.argmax(np.cumsum(offered, axis=1) > pick[:, None], axis=1)
    rows = np.arange(len(runs))
    picked = np.where(offered[rows, drawn], drawn, picked)
    some = choices > 0
    return runs[some], pop.piece[slot[some, picked[some]]]


def _mode_tables(
    mode: str,
    pop: Population,
    rng: np.random.Generator,
    run_ids: np.ndarray,
    agent: np.ndarray,
    calls: np.ndarray,
    grouped: np.ndarray,
    refused_reference: np.ndarray,
    offer_run: np.ndarray,
    offer_call: np.ndarray,
    offer_kind: np.ndarray,
    offer_piece: np.ndarray,
    uses: pl.DataFrame,
) -> RunTables:
    count = len(run_ids)
    reference = mode == "reference"
    metered = ~refused_reference if reference else np.ones(count, dtype=bool)
    offers = pl.DataFrame(
        {"run": offer_run, "call": offer_call, "kind": offer_kind, "piece": offer_piece}
    )
    if reference:
        # The reference meters a grouped call twice (its inner bundle is a call marker too).
        doubled = offers.filter(pl.Series(grouped[offer_run]))
        offers = pl.concat(
            [
                offers.with_columns(call=pl.col("call") * 2, twin=pl.lit(0)),
                doubled.with_columns(call=pl.col("call") * 2 + 1, twin=pl.lit(1)),
            ]
        ).sort("run", "call", "twin", maintain_order=True)
        offers = offers.drop("twin")
        # It reads tool calls from the final, windowed history, without the call.
        keep = pop.window_keep[agent]
        last = calls - 1
        use_run = uses["run"].to_numpy()
        visible = (keep[use_run] == 0) | (uses["call"].to_numpy() >= last[use_run] - keep[use_run])
        uses = uses.filter(pl.Series(visible) & (pl.col("signal") < 2)).with_columns(
            call=pl.lit(None, dtype=pl.Int64)
        )
    else:
        # Grouped injections are left unmetered by the corrected accounting.
        offers = offers.filter(~(pl.Series(grouped[offer_run]) & (pl.col("kind") == INJECTION)))
        uses = uses.with_columns(
            call=pl.when(pl.col("signal") == 2).then(None).otherwise(pl.col("call"))
        )
    offers = offers.filter(pl.Series(metered[offers["run"].to_numpy()], dtype=pl.Boolean))
    uses = uses.filter(pl.Series(metered[uses["run"].to_numpy()], dtype=pl.Boolean))
    signals = np.array(list(schema.USED_SIGNAL_COLUMNS))
    metered_calls = np.where(reference & grouped, calls * 2, calls) * metered
    runs = pa.table(
        {
            "run_id": run_ids,
            "run_order": np.arange(count),
            "source_path": np.full(count, f"synth://seed={run_ids[0].split('-')[1]}"),
            "source_line": pa.nulls(count, pa.int32()),
            "runner_kind": np.where(pop.llm_call[agent], "LLMCall", "Agent"),
            "accounting": np.full(count, mode),
            "metered": metered,
            "refused_reason": pa.array(
                [None if ok else _REFUSED for ok in metered.tolist()], pa.string()
            ),
            "model_call_count": calls.astype(np.int32),
            "metered_call_count": metered_calls.astype(np.int32),
            "unmetered_kinds": [
                ["injection"] if g and not reference else [] for g in grouped.tolist()
            ],
            "basis": pa.array([[]] * count, schema.RUNS.field("basis").type),  # no redaction
            "grouped": grouped,
            "slice_available": ~grouped,
            "static_tool_names_from": np.full(count, "wrapper"),
            "static_tool_name_count": np.where(
                pop.translator[agent], pop.static_tools[agent], 0
            ).astype(np.int32),
        },
        schema=schema.RUNS,
    )
    ids, names, kinds = pa.array(run_ids, pa.string()), piece_names(pop), pa.array(KIND_NAMES)
    offer_runs = offers["run"].to_numpy()
    offer_table = pa.table(
        {
            "run_id": ids.take(offer_runs),
            "call_index": offers["call"].to_numpy().astype(np.int32),
            "kind": kinds.take(offers["kind"].to_numpy()),
            "piece_id": names.take(offers["piece"].to_numpy()),
            "approx_tokens": pop.tokens[offers["piece"].to_numpy()],
            "seq": _cumcount(offer_runs).astype(np.int32),
        },
        schema=schema.OFFERS,
    )
    use_runs = uses["run"].to_numpy()
    use_table = pa.table(
        {
            "run_id": ids.take(use_runs),
            "kind": kinds.take(pop.kinds[uses["piece"].to_numpy()]),
            "piece_id": names.take(uses["piece"].to_numpy()),
            "signal": pa.array(signals).take(uses["signal"].to_numpy()),
            "call_index": uses["call"].cast(pl.Int32).to_arrow(),
            "seq": _cumcount(use_runs).astype(np.int32),
        },
        schema=schema.USES,
    )
    del rng
    return RunTables(mode, runs, offer_table, use_table)


def _labels(rng: np.random.Generator, run_ids: np.ndarray, quality: np.ndarray) -> pa.Table:
    bad = 0.05 + 0.45 * (1 - quality)
    draw = rng.random(len(run_ids))
    label = np.where(draw < bad, "bad", np.where(draw < bad + 0.22, "neutral", "good"))
    reviewed = np.flatnonzero(rng.random(len(run_ids)) < 0.05)
    return pa.table(
        {
            "run_id": np.concatenate([run_ids, run_ids[reviewed]]),
            "label": np.concatenate([label, np.full(len(reviewed), "reviewed")]),
        },
        schema=schema.OUTCOMES,
    )


def _block_scripts(seed: int, first: int, tables: Mapping[str, RunTables]) -> Scripts:
    """The message-stream scripts of the runs ``_draw_block(seed, first, ...)`` gave.

    Each run makes its ``model_call_count`` calls; after call ``k`` come the tool calls
    its corrected ``tool-called`` uses at ``call_index`` ``k - 1`` record, as one
    parallel batch. Runs the reference refused for reporting no usage report no input
    tokens. Everything else is drawn from ``seed`` apart from the tables.

    >>> tables, _ = _draw_block(seed=1, first=0, count=300)
    >>> scripts = _block_scripts(1, 0, tables)
    >>> used = tables["corrected"].uses.filter(pc.equal(
    ...     tables["corrected"].uses["signal"], "tool-called"))
    >>> scripts.runs, len(scripts.run) == used.num_rows
    (300, True)
    """
    corrected, reference = tables["corrected"].runs, tables["reference"].runs
    count = corrected.num_rows
    rng = np.random.default_rng([seed, DRAWS, 3, first])
    run_ids = corrected["run_id"].to_pylist()
    calls = corrected["model_call_count"].to_numpy().astype(np.int64)
    numbers = pl.DataFrame({"run_id": run_ids, "number": np.arange(count)})
    uses = (
        pl.DataFrame(tables["corrected"].uses)
        .filter(pl.col("signal") == "tool-called")
        .join(numbers, on="run_id", maintain_order="left")
    )
    names, tool = np.unique(uses["piece_id"].to_numpy().astype(str), return_inverse=True)
    run = uses["number"].to_numpy()
    step = uses["call_index"].to_numpy().astype(np.int64) + 1
    n = len(run)
    chars, _ = result_sizes(rng, n)  # every call answered, as in every recorded run
    named = rng.random(n) < 0.85
    weights = np.array([w for _, w in STANDING_MIX], dtype=np.float64)
    standing = rng.choice(len(STANDING_MIX), p=weights / weights.sum(), size=n)
    files_standings = rng.random(count) < 0.3
    # Said: assistant text at a call's batch (35%) or alone where the call asked for no
    # tool, a user's follow-up after 3% of steps, and the answer after the last call.
    grid_run = np.repeat(np.arange(count), calls - 1)
    grid_step = np.arange(grid_run.size) - np.repeat(np.cumsum(calls - 1) - (calls - 1), calls - 1)
    grid_step += 1
    width = int(calls.max(initial=1)) + 1
    batched = np.isin(grid_run * width + grid_step, run * width + step)
    talks = ~batched | (rng.random(grid_run.size) < 0.35)
    follows = rng.random(grid_run.size) < 0.03
    said_run = np.concatenate([grid_run[talks], grid_run[follows], np.arange(count)])
    said_step = np.concatenate([grid_step[talks], grid_step[follows], calls])
    said_user = np.repeat([False, True, False], [int(talks.sum()), int(follows.sum()), count])
    said_chars = np.concatenate(
        [
            rng.integers(20, 401, int(talks.sum())),
            rng.integers(15, 161, int(follows.sum())),
            rng.integers(80, 1501, count),
        ]
    )
    order = np.lexsort((said_user, said_step, said_run))
    request_chars = rng.integers(30, 401, count).tolist()
    request_start = rng.integers(0, 1000, count).tolist()
    agent = pc.equal(reference["runner_kind"], "Agent").to_numpy(zero_copy_only=False)
    return Scripts(
        run_ids=run_ids,
        requests=[
            f"{run_id}: {prose(size, start)}"
            for run_id, size, start in zip(run_ids, request_chars, request_start, strict=True)
        ],
        calls=calls,
        tool_names=names.tolist(),
        run=run,
        step=step,
        tool=tool,
        chars=chars,
        standing=standing,
        named=named,
        files_standings=files_standings,
        tokens_reported=reference["metered"].to_numpy(zero_copy_only=False) | ~agent,
        said_run=said_run[order],
        said_step=said_step[order],
        said_user=said_user[order],
        said_chars=said_chars[order],
    )


def synth_streams(
    seed: int, first: int, count: int
) -> Iterator[tuple[RunMessages, list[dict[str, Any]]]]:
    """Runs ``first .. first+count-1`` of the synthetic stream ``seed`` as messages (what
    ``synth_archive`` stores for them, however it batches them) and their standings rows.

    >>> [stream.run_id for stream, _ in synth_streams(seed=1, first=0, count=2)]
    ['synth-1-000000000', 'synth-1-000000001']
    """
    for part in synth_parts(seed, first, count, scripts=True):
        assert part.scripts is not None
        yield from script_streams(part.scripts)
