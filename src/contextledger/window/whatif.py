"""What would another window policy have served? Replay recorded runs under several.

Each (run, policy) is replayed and reduced to one row of ``schema.WHATIF_RUNS``: the
visits where the policy engaged (each with its record's refusals), the window served to
the last call, and the counts a comparison reads; :func:`whatif` also aggregates them
per policy (median and total over the runs). The vectorized kernel
(:mod:`~contextledger.window.kernel`) replays every run it can, all windows together;
the runs it sets aside, and a windowed policy over a run recorded with a window, are
replayed exactly (:func:`~contextledger.window.replay.replay`) in their place. Both give
the same rows (:func:`whatif_table_exact` replays everything exactly; the tests hold the
two equal on the corpus, the sample and random histories).
Token counts are the provider's where the replayed window is the one the run
sent, and otherwise an estimate at the run's own rate (recorded tokens per
recorded char); ``budget_tokens_from`` says which a token budget decided on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from contextledger.read.messages import RunMessages
from contextledger.tables import schema
from contextledger.window import turn_sets
from contextledger.window.frameworks import refuse_framework_spec
from contextledger.window.kernel import REFUSAL_REASONS, VISIT_FIELDS, KernelResult, advance
from contextledger.window.policies import Policy, parse_policy
from contextledger.window.refusals import is_result
from contextledger.window.replay import Replay, replay, same_window, window_key
from contextledger.window.standings import StandingsTimeline, timelines
from contextledger.window.turn_arrays import TurnArrays, take_runs, turn_arrays
from contextledger.window.turn_sets import WORD_BITS, words_for
from contextledger.window.turns import segment_turns, window_chars
from contextledger.window.visit_records import dropped_results, fact_pin_rows, refusal_rows

#: Column name suffix per standing, for ``results_dropped_*``.
_STANDING_COLUMN = {
    "fact": "fact",
    "open": "open",
    "noise": "noise",
    "ruled-out": "ruled_out",
    None: "undeclared",
}


def parse_policies(specs: Iterable[str | Policy]) -> list[tuple[str, Policy]]:
    """``(spec as given, policy)`` for each spec, duplicates once; raises on the first bad one.

    >>> [label for label, _ in parse_policies(["none", "sliding:keep=6", "none"])]
    ['none', 'sliding:keep=6']
    """
    parsed: dict[str, Policy] = {}
    for spec in specs:
        refuse_framework_spec(spec)
        label = spec.spec if isinstance(spec, Policy) else str(spec).strip()
        parsed.setdefault(label, parse_policy(spec))
    if not parsed:
        msg = "give at least one window policy (e.g. 'sliding:keep=6')"
        raise ValueError(msg)
    return list(parsed.items())


def whatif_table(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, Policy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
) -> pl.DataFrame:
    """One ``schema.WHATIF_RUNS`` row per (run, policy), runs in order, policies as given.

    The vectorized kernel (:mod:`~contextledger.window.kernel`) replays every run it
    can, all windows together; the runs it sets aside (``TurnArrays.fallback``), and a
    windowed policy over a run recorded with a window, are replayed exactly, one by one.
    The rows are the same either way (:func:`whatif_table_exact` replays everything
    exactly; the tests hold the two equal).
    """
    by_run = timelines(standings_rows)
    arrays = turn_arrays(streams, by_run)
    return whatif_arrays(arrays, policies, by_run, lambda rows: [streams[r] for r in rows])


#: Runs the kernel over one batch of runs: ``(rows, their arrays, policies)`` (what
#: :func:`whatif_arrays` asks of :func:`~contextledger.window.kernel.advance`).
KernelPass = Callable[[Sequence[int], TurnArrays, Sequence[Policy]], KernelResult]


def whatif_arrays(
    arrays: TurnArrays,
    policies: Sequence[tuple[str, Policy]],
    by_run: Mapping[str, StandingsTimeline],
    streams_of: Callable[[Sequence[int]], Sequence[RunMessages]],
    kernel: KernelPass | None = None,
    replayed: Callable[[int, int, Replay], None] | None = None,
) -> pl.DataFrame:
    """:func:`whatif_table` of runs already laid out (``arrays``, with their standings
    ``by_run``): ``streams_of(rows)`` gives the streams of the runs at those positions,
    asked only for the runs replayed exactly (so a caller holding columns builds
    ``Message`` objects for those alone). ``kernel`` runs the kernel over each batch (the
    audit's watches the windows as it goes); default :func:`advance`. ``replayed(run,
    policy, replay)`` is shown each exact replay (positions in ``arrays`` and
    ``policies``)."""
    labels = [label for label, _ in policies]
    parsed = [policy for _, policy in policies]
    count = len(parsed)
    total = len(arrays.run_ids)
    rows = [r for r in range(total) if r not in arrays.fallback]
    tables: list[pa.Table] = []
    keys: list[np.ndarray] = []
    exact: list[tuple[int, int]] = [(r, p) for r in arrays.fallback for p in range(count)]
    for group in kernel_groups(arrays, rows):
        laid = arrays if len(group) == total else take_runs(arrays, group)
        timeline_of = [by_run.get(run_id) for run_id in laid.run_ids]
        result = kernel(group, laid, parsed) if kernel else advance(laid, parsed)
        table = _kernel_rows(labels, laid, result, timeline_of)
        comparable = np.ones((len(group), count), dtype=bool)
        windowed = laid.windowed if laid.windowed is not None else np.zeros(len(group), bool)
        for p, policy in enumerate(parsed):
            if policy.kind != "none":
                comparable[:, p] = ~windowed
        exact += [(group[n], p) for n, p in zip(*np.nonzero(~comparable), strict=True)]
        tables.append(table.filter(pa.array(comparable.reshape(-1))))
        key = np.asarray(group, dtype=np.int64)[:, None] * count + np.arange(count)
        keys.append(key.reshape(-1)[comparable.reshape(-1)])
    if exact:
        wanted = sorted({r for r, _ in exact})
        stream_at = dict(zip(wanted, streams_of(wanted), strict=True))
        exact_rows = []
        for r, p in exact:
            stream = stream_at[r]
            timeline = by_run.get(stream.run_id)
            replayed_run = replay(stream, parsed[p], timeline.at if timeline else None)
            exact_rows.append(whatif_row(stream, labels[p], replayed_run, timeline))
            if replayed is not None:
                replayed(r, p, replayed_run)
        tables.append(pa.Table.from_pylist(exact_rows, schema=schema.WHATIF_RUNS))
        keys.append(np.array([r * count + p for r, p in exact], dtype=np.int64))
    if not tables:
        return pl.from_arrow(schema.WHATIF_RUNS.empty_table())  # type: ignore[return-value]
    combined, key = pa.concat_tables(tables), np.concatenate(keys)
    if (np.diff(key) < 0).any():  # runs replayed apart: put them in their place
        combined = combined.take(np.argsort(key, kind="stable"))
    return pl.from_arrow(combined.combine_chunks())  # type: ignore[return-value]


#: Sets of turns (runs x words x calls) a kernel batch of long runs holds at most: what
#: each visit keeps grows with it (``KernelResult.visit_*``).
KERNEL_BATCH_WORDS = 1 << 21


def kernel_groups(arrays: TurnArrays, rows: Sequence[int]) -> list[list[int]]:
    """``rows`` in batches for the kernel: a batch costs what its longest run needs (a word
    of 64 turns per set, every call), so runs of up to 64 turns (the common case) go
    together in their order, and longer ones by length, each batch bounded by
    :data:`KERNEL_BATCH_WORDS`.

    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> from contextledger.window.turn_arrays import turn_arrays
    >>> run = lambda turns: build_stream("r", [], [[Said("user", "go")]] * turns)
    >>> kernel_groups(turn_arrays([run(3), run(300), run(70), run(5)]), [0, 1, 2, 3])
    [[0, 3], [2, 1]]
    """
    turns = (arrays.msgs[rows] > 0).sum(1) if rows else np.zeros(0, dtype=np.int64)
    short = [row for row, held in zip(rows, turns.tolist(), strict=True) if held <= WORD_BITS]
    groups = [short] if short else []
    long = np.flatnonzero(turns > WORD_BITS)
    long = long[np.argsort(turns[long], kind="stable")]
    batch: list[int] = []
    for at in long.tolist():  # longest last: a batch's cost is its last run's
        cost = (len(batch) + 1) * words_for(int(turns[at])) * int(arrays.calls[rows[at]])
        if batch and cost > KERNEL_BATCH_WORDS:
            groups.append(batch)
            batch = []
        batch.append(rows[at])
    return [*groups, batch] if batch else groups


def whatif_table_exact(
    streams: Sequence[RunMessages],
    policies: Sequence[tuple[str, Policy]],
    standings_rows: Sequence[Mapping[str, Any]] = (),
) -> pl.DataFrame:
    """:func:`whatif_table` with every (run, policy) replayed exactly, one at a time."""
    by_run = timelines(standings_rows)
    rows = []
    for stream in streams:
        timeline = by_run.get(stream.run_id)
        for label, policy in policies:
            at = timeline.at if timeline else None
            rows.append(whatif_row(stream, label, replay(stream, policy, at), timeline))
    table = pa.Table.from_pylist(rows, schema=schema.WHATIF_RUNS)
    return pl.from_arrow(table)  # type: ignore[return-value]


def _field_type(struct: pa.DataType, name: str) -> pa.DataType:
    return struct.field(name).type


def _kernel_rows(
    labels: Sequence[str],
    arrays: TurnArrays,
    result: KernelResult,
    timelines: Sequence[StandingsTimeline | None],
) -> pa.Table:
    """The kernel's answers as ``schema.WHATIF_RUNS`` rows: run by run, policies as given."""
    runs, count = len(arrays.run_ids), len(labels)
    columns: dict[str, pa.Array] = {}
    per_row = schema.WHATIF_RUNS

    def by_row(values: np.ndarray) -> np.ndarray:  # [policy, run] -> row (run, policy)
        return values.T.reshape(-1)

    def per_run(values: Sequence[Any] | np.ndarray, name: str) -> pa.Array:
        return pa.array(values, type=per_row.field(name).type).take(
            np.repeat(np.arange(runs), count)
        )

    columns["run_id"] = per_run(arrays.run_ids, "run_id")
    columns["policy"] = pa.array(list(labels) * runs, type=pa.string())
    columns["visits"] = _kernel_visits(arrays, result, count, timelines)
    calls = np.asarray(arrays.calls, dtype=np.int64)
    columns["answer"] = _kernel_answers(arrays, result, calls)
    budget = np.array([p.kind == "token_budget" for p in result.policies])[:, None]
    code = budget * (result.budget_recorded + 2 * result.budget_estimated)
    columns["budget_tokens_from"] = pa.DictionaryArray.from_arrays(
        pa.array(by_row(code).astype(np.int8), mask=by_row(code) == 0),
        pa.array(["", "recorded", "estimated", "recorded+estimated"]),
    ).cast(pa.string())
    rate = arrays.rate  # each stream's tokens_per_char()
    columns["tokens_per_char"] = pa.array(rate, mask=np.isnan(rate)).take(
        np.repeat(np.arange(runs), count)
    )
    columns["model_calls"] = per_run(calls, "model_calls")
    if arrays.facts_declared is None:
        msg = "lay the runs out with turn_arrays (it counts the facts declared)"
        raise ValueError(msg)
    columns["facts_declared"] = per_run(arrays.facts_declared, "facts_declared")
    for name in schema.WHATIF_METRICS:
        if name in columns:
            continue
        values = by_row(result.metrics[name])
        mask = by_row(~result.input_tokens_known) if name == "input_tokens" else None
        columns[name] = pa.array(values, type=per_row.field(name).type, mask=mask)
    return pa.Table.from_arrays([columns[f.name] for f in per_row], schema=per_row)


#: ``KernelResult``'s arrays with one entry per visit.
_PER_VISIT = (
    "visit_policy",
    "visit_run",
    "visit_call",
    "visit_present",
    "visit_listed",
    "visit_listed_ltr",
    "visit_flags",
    "visit_fact_held",
    "visit_fact_yielded",
    "visit_fact_stand_down",
    "visit_gone",
)


def _kernel_visits(
    arrays: TurnArrays,
    result: KernelResult,
    count: int,
    timelines: Sequence[StandingsTimeline | None],
) -> pa.Array:
    """Each row's engaged visits, in call order, with their refusals."""
    visit_type = _field_type(schema.WHATIF_RUNS.field("visits").type.value_type, "refusals")
    refusal_type = visit_type.value_type
    row = result.visit_run * count + result.visit_policy
    order = np.argsort(row, kind="stable")  # visits are in call order: keep it within a row
    result = dataclasses.replace(
        result,
        **{name: getattr(result, name)[..., order] for name in _PER_VISIT},
        visit_values={name: values[order] for name, values in result.visit_values.items()},
    )
    found = refusal_rows(arrays, result)
    refusals = pa.StructArray.from_arrays(
        [
            pa.DictionaryArray.from_arrays(pa.array(found.reason), pa.array(REFUSAL_REASONS)).cast(
                pa.string()
            ),
            pa.array(found.turn_index, type=pa.int32()),
            pa.array(found.message_index, type=pa.int32()),
        ],
        fields=list(refusal_type),
    )
    offsets = np.zeros(found.counts.size + 1, dtype=np.int32)
    np.cumsum(found.counts, out=offsets[1:])
    values = result.visit_values
    struct_type = schema.WHATIF_RUNS.field("visits").type.value_type
    visits = pa.StructArray.from_arrays(
        [
            pa.array(arrays.iterations[result.visit_run, result.visit_call], type=pa.int32()),
            *(
                pa.array(values[name], type=_field_type(struct_type, name))
                for name in VISIT_FIELDS[1:]
            ),
            pa.ListArray.from_arrays(pa.array(offsets), refusals),
            _kernel_ledger_facts(arrays, result),
            _kernel_dropped_standings(arrays, result, timelines),
        ],
        fields=list(struct_type),
    )
    per_row = np.bincount(row, minlength=result.input_tokens_known.size)
    row_offsets = np.zeros(per_row.size + 1, dtype=np.int32)
    np.cumsum(per_row, out=row_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(row_offsets), visits)


def _offsets(counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(counts.size + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets)


def _kernel_ledger_facts(arrays: TurnArrays, result: KernelResult) -> pa.Array:
    """Each visit's ``ledgerFacts`` block, null where ``window_visit`` files none."""
    block_type = schema.WHATIF_LEDGER_FACTS
    pin_type = schema.WHATIF_FACT_PIN
    found = fact_pin_rows(arrays, result)
    runs = np.repeat(result.visit_run, found.counts)
    if arrays.pin_names is None:
        msg = "lay the runs out with turn_arrays (it names the fact pins)"
        raise ValueError(msg)
    pins = pa.StructArray.from_arrays(
        [
            pa.array(arrays.pin_names[runs, found.turn].tolist(), type=pa.string()),
            pa.array(found.turn_index, type=pa.int32()),
            pa.array(arrays.chars[runs, found.turn], type=pa.int64()),
        ],
        fields=list(pin_type),
    )
    stand = result.visit_fact_stand_down.astype(bool)
    held = found.counts > 0
    limits = np.array([p.ledger_facts for p in result.policies], dtype=np.int32)
    return pa.StructArray.from_arrays(
        [
            pa.ListArray.from_arrays(_offsets(found.counts), pins),
            pa.array(np.where(held, result.visit_fact_yielded, 0), type=pa.int32()),
            pa.array(limits[result.visit_policy], type=pa.int32()),
            pa.array(stand, type=pa.bool_()),
        ],
        fields=list(block_type),
        mask=pa.array(~(held | stand)),
    )


def _kernel_dropped_standings(
    arrays: TurnArrays, result: KernelResult, timelines: Sequence[StandingsTimeline | None]
) -> pa.Array:
    """Each visit's ``droppedStandings``: the results that left, with the standing in force
    at the visit (null: undeclared); null where no result left or the run has no standings."""
    visit, which = dropped_results(arrays, result)
    iterations = arrays.iterations[result.visit_run[visit], result.visit_call[visit]]
    ids = [arrays.result_ids[j] for j in which.tolist()]
    standings = []
    for v_run, iteration, call_id in zip(
        result.visit_run[visit].tolist(), iterations.tolist(), ids, strict=True
    ):
        timeline = timelines[v_run]
        standings.append(timeline.standing_at(call_id, iteration) if timeline else None)
    counts = np.bincount(visit, minlength=result.visit_run.size)
    rows = pa.StructArray.from_arrays(
        [pa.array(ids, type=pa.string()), pa.array(standings, type=pa.string())],
        fields=list(schema.WHATIF_DROPPED_STANDING),
    )
    return pa.ListArray.from_arrays(_offsets(counts), rows, mask=pa.array(counts == 0))


def _kernel_answers(arrays: TurnArrays, result: KernelResult, calls: np.ndarray) -> pa.Array:
    """The window served to each row's last call: its size and the results it held verbatim."""
    count, runs = result.answer_turns.shape[1:]
    held = turn_sets.contains(result.answer_turns[:, :, arrays.result_run], arrays.result_turn)
    policy, which = np.nonzero(held)  # by policy, then stream order
    row = arrays.result_run[which] * count + policy
    order = np.argsort(row, kind="stable")
    offsets = np.zeros(count * runs + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=count * runs), out=offsets[1:])
    ids = pa.array(arrays.result_ids, type=pa.string()).take(which[order])
    metric = result.metrics
    struct_type = schema.WHATIF_RUNS.field("answer").type
    return pa.StructArray.from_arrays(
        [
            pa.array(metric["answer_message_count"].T.reshape(-1), type=pa.int32()),
            pa.array(metric["answer_content_chars"].T.reshape(-1), type=pa.int64()),
            pa.ListArray.from_arrays(pa.array(offsets), ids),
        ],
        fields=list(struct_type),
        mask=pa.array(np.repeat(calls == 0, count)),
    )


def whatif_row(
    stream: RunMessages, label: str, result: Replay, timeline: StandingsTimeline | None
) -> dict[str, Any]:
    """Reduce one replay to its ``schema.WHATIF_RUNS`` row."""
    final = timeline.final() if timeline else {}
    rate = stream.tokens_per_char()
    row: dict[str, Any] = dict.fromkeys(schema.WHATIF_METRICS, 0)
    row.update(run_id=stream.run_id, policy=label, tokens_per_char=rate)
    row["model_calls"] = len(stream.calls)
    visits = []
    tokens: int | None = 0
    for visit, call in zip(result.visits, stream.calls, strict=True):
        chars = window_chars(visit.served)
        row["input_chars"] += chars
        if call.input_tokens > 0 and same_window(visit.served, stream.window(call.window_served)):
            tokens = None if tokens is None else tokens + call.input_tokens
        else:
            row["input_tokens_estimated_calls"] += 1
            tokens = None if tokens is None or rate is None else tokens + round(rate * chars)
        record = visit.record
        if record is None:
            continue
        visits.append(_visit_row(visit.window_before, visit.served, record))
        row["removed_messages"] += record["removedMessageCount"]
        kept = {window_key(m) for m in visit.served}
        for message in visit.window_before:
            if is_result(message) and message.tool_call_id and window_key(message) not in kept:
                row["results_dropped"] += 1
                column = _STANDING_COLUMN[final.get(message.tool_call_id)]
                row[f"results_dropped_{column}"] += 1
        for key, name in (("observations", "last_tool_result"), ("ledgerFacts", "ledger_fact")):
            held = record.get(key)
            if held is not None:
                row[f"pins_held_{name}"] += len(held["pinned"])
                row[f"pins_yielded_{name}"] += held["yielded"]
                row["pin_stand_downs"] += bool(held.get("standDown"))
    row["input_tokens"] = tokens
    row["visits"] = visits
    row["engaged_visits"] = len(visits)
    row["budget_tokens_from"] = _budget_tokens_from(result)
    results = {m.tool_call_id for m in stream.messages if is_result(m) and m.tool_call_id}
    row["facts_declared"] = sum(final.get(call_id) == "fact" for call_id in results)
    if result.visits:
        answer = result.visits[-1].served
        verbatim = [m.tool_call_id for m in answer if is_result(m) and m.tool_call_id]
        row["answer"] = {
            "message_count": len(answer),
            "content_chars": window_chars(answer),
            "tool_call_ids_verbatim": verbatim,
        }
        row["answer_message_count"] = len(answer)
        row["answer_content_chars"] = window_chars(answer)
        row["answer_results_verbatim"] = len(verbatim)
        row["answer_facts_verbatim"] = sum(final.get(i) == "fact" for i in verbatim)
    else:
        row["answer"] = None
    return row


def _visit_row(before: Sequence[Any], after: Sequence[Any], record: Mapping[str, Any]) -> Any:
    return {
        "iteration": record["iteration"],
        "removed_message_count": record["removedMessageCount"],
        "turns_before": len(segment_turns(before)),
        "turns_after": len(segment_turns(after)),
        "window_chars_before": record["windowCharsBefore"],
        "window_chars_after": record["windowCharsAfter"],
        "refusals": [
            {
                "reason": r["reason"],
                "turn_index": r["turnIndex"],
                "message_index": r["messageIndex"],
            }
            for r in record["refusals"]
        ],
        "ledger_facts": _ledger_facts_row(record.get("ledgerFacts")),
        "dropped_standings": [
            {"tool_call_id": d["toolCallId"], "standing": d.get("standing")}
            for d in record["droppedStandings"]
        ]
        if "droppedStandings" in record
        else None,
    }


def _ledger_facts_row(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``WindowRecord.ledgerFacts`` in the per-visit row's spelling (None: no block)."""
    if block is None:
        return None
    return {
        "pinned": [
            {"tool_name": p["toolName"], "turn_index": p["turnIndex"], "chars": p["chars"]}
            for p in block["pinned"]
        ],
        "yielded": block["yielded"],
        "limit": block["limit"],
        "stand_down": bool(block.get("standDown")),
    }


def _budget_tokens_from(result: Replay) -> str | None:
    if result.policy.kind != "token_budget":
        return None
    measured = [v.measured_estimated for v in result.visits if v.measured is not None]
    if not measured:
        return None
    if all(measured):
        return "estimated"
    return "recorded+estimated" if any(measured) else "recorded"


def per_policy(per_run: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """One row per policy, in the order given: ``runs``, then each metric's median and total.

    >>> from contextledger.jobs.whatif import whatif
    >>> per_run, _ = whatif("data/sample/s0003-loop.json.gz", "sliding:keep=2")
    >>> per_policy(per_run).select("policy", "runs", "model_calls_total").rows()
    [('sliding:keep=2', 1, 13)]
    """
    aggregates = [pl.len().cast(pl.Int64).alias("runs")]
    for metric in schema.WHATIF_METRICS:
        aggregates.append(pl.col(metric).median().alias(f"{metric}_median"))
        aggregates.append(pl.col(metric).sum().cast(pl.Int64).alias(f"{metric}_total"))
    grouped = per_run.lazy().group_by("policy", maintain_order=True).agg(aggregates)
    return grouped.collect(engine="streaming")


#: The metrics the ``table`` format shows, under shorter headings.
TABLE_METRICS = {
    "input_chars": "input chars",
    "input_tokens": "input tokens",
    "removed_messages": "msgs removed",
    "results_dropped": "results dropped",
    "results_dropped_fact": "facts dropped",
    "results_dropped_noise": "noise dropped",
    "answer_results_verbatim": "answer results",
    "answer_facts_verbatim": "answer facts",
    "pins_held_last_tool_result": "recency pins",
    "pins_held_ledger_fact": "fact pins",
}


def display_table(per_policy: pl.DataFrame) -> pl.DataFrame:
    """What the ``table`` format prints: per policy, each metric as ``median / total``."""

    def cell(metric: str) -> pl.Expr:
        median = pl.col(f"{metric}_median")
        shown = (
            pl.when(median == median.round())
            .then(median.cast(pl.Int64).cast(pl.String))
            .otherwise(median.round(1).cast(pl.String))
        )
        return pl.concat_str(
            shown.fill_null("-"),
            pl.lit(" / "),
            pl.col(f"{metric}_total").cast(pl.String).fill_null("-"),
        )

    return per_policy.select(
        "policy", "runs", *[cell(metric).alias(label) for metric, label in TABLE_METRICS.items()]
    )


_BUDGET_WORDS = {
    "recorded": "recorded counts",
    "estimated": "estimates",
    "recorded+estimated": "recorded counts and estimates",
}


def describe(per_run: pl.DataFrame | pl.LazyFrame, policies: int) -> str:
    """The lines under the table: what was replayed, and where token counts came from.

    ``policies`` is how many were given: the rows cannot say when no run was replayed.
    """
    rows = per_run.lazy()
    tally = rows.select(pl.col("run_id").n_unique())
    budget = rows.filter(pl.col("budget_tokens_from").is_not_null())
    tallied, by_kind = pl.collect_all([tally, budget.group_by("budget_tokens_from").len()])
    runs = tallied.item()
    counts = dict(by_kind.iter_rows())
    line = (
        f"{runs} run(s) replayed under {policies} polic{'y' if policies == 1 else 'ies'}; "
        "each cell is the median per run / the total over the runs.\n"
        "Input tokens are the provider's where a call was served the window the run sent, "
        "else estimated at the run's recorded tokens / recorded chars"
    )
    if counts:
        parts = ", ".join(
            f"on {_BUDGET_WORDS[kind]} in {counts[kind]} run(s)"
            for kind in _BUDGET_WORDS
            if kind in counts
        )
        line += f"; token budgets decided {parts}"
    return line + "."
