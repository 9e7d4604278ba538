"""Runs laid out for the kernel straight from an archive's window tables, a batch at once.

:func:`turn_arrays_from_tables` gives the :class:`~contextledger.window.turn_arrays.TurnArrays`
that :func:`~contextledger.window.turn_arrays.turn_arrays` gives over the streams
:func:`~contextledger.tables.windows.streams_from_tables` would rebuild, without a
``Message`` per row (building those cost as much as the replay): turns, their sizes, the
request and the recorded windows are found with array operations over the whole batch;
only tool calls and results are visited in Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contextledger.read.cycles import collector_paused
from contextledger.window.standings import StandingsTimeline
from contextledger.window.turn_arrays import (
    FINAL_STANDINGS,
    NEVER,
    TurnArrays,
    blank,
    fact_from_rows,
    name_tools,
)


def turn_arrays_from_tables(
    streams: pa.Table,
    messages: pa.Table,
    timelines: Mapping[str, StandingsTimeline] | None = None,
) -> TurnArrays:
    """:func:`turn_arrays` of the runs of ``streams`` (``schema.STREAMS`` rows, in their
    order) and their ``schema.MESSAGES`` rows, laid out column by column: the same arrays
    as over the streams :func:`~contextledger.tables.windows.streams_from_tables`
    rebuilds, without a ``Message`` per row (building those cost as much as the replay).
    Turns, their sizes, the request and the recorded windows are found with array
    operations over the whole batch; only tool calls and results are visited in Python.

    Raises ``ValueError`` when a run's messages rows are incomplete.
    """
    with collector_paused():
        return _lay_out_tables(streams.combine_chunks(), messages, timelines or {})


def _in_stream_order(
    table: pa.Table, messages: pa.Table, counts: np.ndarray
) -> tuple[pa.Table, np.ndarray]:
    """``messages`` of the runs of ``table``, run by run in its order, each in stream order;
    and each row's run. Raises ``ValueError`` naming a run whose rows are incomplete."""
    rows = messages.combine_chunks()
    known = table["run_id"].combine_chunks()
    position = pc.index_in(rows["run_id"], value_set=known).to_numpy(zero_copy_only=False)
    index = rows["message_index"].to_numpy(zero_copy_only=False)
    run_of = np.nan_to_num(position.astype(np.float64), nan=-1).astype(np.int64)
    order_key = run_of * (1 << 32) + index
    if (np.diff(order_key) < 0).any() or (run_of < 0).any():
        keep = np.nonzero(run_of >= 0)[0]
        keep = keep[np.argsort(order_key[keep], kind="stable")]
        rows, run_of, index = rows.take(keep), run_of[keep], index[keep]
    held = np.bincount(run_of, minlength=counts.size) if run_of.size else np.zeros(counts.size, int)
    expected = np.arange(index.size) - np.repeat(np.cumsum(held) - held, held)
    if (held != counts).any() or (index != expected).any():
        bad = int(np.nonzero((held != counts) | _bad_runs(index, expected, held))[0][0])
        msg = f"run {table['run_id'][bad].as_py()}: its messages rows are incomplete"
        raise ValueError(msg)
    return rows, run_of


def _bad_runs(index: np.ndarray, expected: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Per run: one of its rows is not at its stream index."""
    wrong = np.zeros(held.size, dtype=bool)
    if index.size:
        owner = np.repeat(np.arange(held.size), held)
        wrong[owner[index != expected]] = True
    return wrong


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _last_at(mask: np.ndarray, run_of: np.ndarray, local: np.ndarray, runs: int) -> np.ndarray:
    """Per run: the stream index of its last message in ``mask`` (-1: none)."""
    last = np.full(runs, -1, dtype=np.int64)
    np.maximum.at(last, run_of[mask], local[mask])
    return last


def _lay_out_tables(
    table: pa.Table, messages: pa.Table, timelines: Mapping[str, StandingsTimeline]
) -> TurnArrays:
    run_ids = table["run_id"].to_pylist()
    runs = len(run_ids)
    counts = _numpy(table["message_count"]).astype(np.int64)
    rows, run_of = _in_stream_order(table, messages, counts)
    starts = np.cumsum(counts) - counts
    local = np.arange(run_of.size) - starts[run_of]
    role = rows["role"]
    is_tool = _numpy(pc.equal(role, "tool"))
    is_user = _numpy(pc.equal(role, "user"))
    is_system = _numpy(pc.equal(role, "system"))
    authored = _numpy(rows["window_authored"])
    has_entered = _numpy(rows["entered_before_call"].is_valid())
    entered = _numpy(rows["entered_before_call"].fill_null(0)).astype(np.int64)
    chars = _numpy(rows["content_chars"]).astype(np.int64)
    conv = ~authored
    offered = conv & has_entered

    # turns: every conversation message that is not a tool result starts one (and a run's first)
    ci = np.nonzero(conv)[0]
    conv_run = run_of[ci]
    start = ~is_tool[ci]
    if ci.size:
        start[0] = True
        start[1:] |= conv_run[1:] != conv_run[:-1]
    turn_global = np.cumsum(start) - 1
    turn_pos = np.nonzero(start)[0]
    turn_run = conv_run[turn_pos]
    per_run = np.bincount(turn_run, minlength=runs)
    turn_local = np.arange(turn_pos.size) - (np.cumsum(per_run) - per_run)[turn_run]
    msg_turn = np.full(run_of.size, -1, dtype=np.int64)
    msg_turn[ci] = turn_local[turn_global]
    turns_max = max(1, int(per_run.max(initial=0)))

    # calls and the windows they were served
    calls = table["calls"].combine_chunks()
    call_offsets = _numpy(calls.offsets)
    call_offsets = call_offsets - call_offsets[0]  # (a slice's offsets start where it does)
    calls_per_run = np.diff(call_offsets)
    names = [f.name for f in calls.type.value_type]
    call_fields = dict(zip(names, calls.flatten().flatten(), strict=True))
    ordinal = _numpy(call_fields["ordinal"]).astype(np.int64)
    iteration = _numpy(call_fields["iteration"])
    tokens = _numpy(call_fields["input_tokens"]).astype(np.int64)
    call_run = np.repeat(np.arange(runs), calls_per_run)
    served = call_fields["window_served"]
    served_len = np.diff(_numpy(served.offsets))
    served_at = _numpy(served.flatten()).astype(np.int64)
    served_call = np.repeat(np.arange(ordinal.size), served_len)
    served_msg = starts[call_run[served_call]] + served_at  # (indexes are the run's own)
    calls_max = max(1, int(calls_per_run.max(initial=0)))

    names_of: list[list[str]] = [[] for _ in range(runs)]
    tools = _tool_turns(rows, run_of, msg_turn, is_tool, run_ids, timelines, names_of)
    names_max = max([1] + [len(names) for names in names_of])
    out = blank(run_ids, calls_per_run, calls_max, turns_max, names_max, tools.facts_declared)
    out.armed[:] = [bool(timelines.get(run_id)) for run_id in run_ids]
    system, windowed = np.zeros((runs, turns_max), dtype=bool), np.zeros(runs, dtype=bool)
    out.system, out.windowed = system, windowed
    fallback = [""] * runs

    # each turn: its messages, chars, the call it enters at, its head, a system message
    at = (turn_run, turn_local)
    ends = np.append(turn_pos[1:], ci.size)
    out.msgs[at] = ends - turn_pos
    if ci.size:
        out.chars[at] = np.add.reduceat(chars[ci], turn_pos)
        system[at] = np.logical_or.reduceat(is_system[ci], turn_pos)
    head = ci[turn_pos]
    out.entered[at] = np.where(has_entered[head], entered[head], NEVER)
    out.user_head[at] = is_user[head]
    first = head[turn_global]  # each conversation message's turn head
    apart = (has_entered[ci] != has_entered[first]) | (
        has_entered[ci] & (entered[ci] != entered[first])
    )
    apart_turn = np.full(runs, -1, dtype=np.int64)  # the last turn entering over several
    np.maximum.at(apart_turn, conv_run[apart], msg_turn[ci[apart]])

    # the current request: at the first call, and at the last (a change falls back)
    person = is_user & ~(
        _numpy(rows["is_drop_notice"]) | _numpy(rows["is_summary"]) | _numpy(rows["injected"])
    )
    candidates = np.nonzero(person & conv)[0]
    said = table["user_message"].to_pylist()
    texts = rows["content"].take(pa.array(candidates)).to_pylist()
    matches = np.zeros(run_of.size, dtype=bool)
    matches[candidates] = [
        said[r] is not None and text == said[r]
        for r, text in zip(run_of[candidates].tolist(), texts, strict=True)
    ]

    def request_in(window: np.ndarray) -> np.ndarray:
        found = _last_at(window & matches, run_of, local, runs)
        return np.where(found >= 0, found, _last_at(window & person, run_of, local, runs))

    request_at = request_in(offered & has_entered & (entered == 1))
    changed = np.nonzero(request_in(offered) != request_at)[0]
    has_request = request_at >= 0
    out.request[has_request] = msg_turn[starts[has_request] + request_at[has_request]]

    # the recorded windows: was each call served every message the run had appended?
    fits = (served_at >= 0) & (served_at < counts[call_run[served_call]])
    target = np.where(fits, served_msg, 0)
    fits &= offered[target] & (entered[target] <= ordinal[served_call])
    rising = np.ones(served_at.size, dtype=bool)
    rising[1:] = (served_call[1:] != served_call[:-1]) | (served_at[1:] > served_at[:-1])
    wrong = np.bincount(served_call[~(fits & rising)], minlength=ordinal.size) > 0
    key = run_of[offered] * (1 << 32) + entered[offered]  # sorted by run, not by entry
    key.sort()
    appended = np.searchsorted(key, call_run * (1 << 32) + ordinal, side="right") - (
        np.searchsorted(key, call_run * (1 << 32), side="left")
    )
    full = ~wrong & (served_len == appended)
    out.recorded_full[call_run, np.arange(ordinal.size) - call_offsets[call_run]] = full
    out.iterations[call_run, ordinal - 1] = iteration
    out.tokens[call_run, ordinal - 1] = tokens
    windowed[:] = np.bincount(call_run[~full], minlength=runs) > 0

    # the run's rate: recorded tokens / chars of the windows that reported them
    window_chars = np.bincount(served_call, weights=chars[target], minlength=ordinal.size)
    counted = tokens > 0
    run_tokens = np.bincount(call_run[counted], weights=tokens[counted], minlength=runs)
    run_chars = np.bincount(call_run[counted], weights=window_chars[counted], minlength=runs)
    rated = (run_tokens > 0) & (run_chars > 0)
    out.rate[rated] = run_tokens[rated] / run_chars[rated]

    # what the tool calls and results found
    for name in ("results", "pinnable", "fact_from", "final_counts", "pin_names"):
        getattr(out, name)[tools.at] = getattr(tools, name)
    out.refuses[at] = system[at]
    out.refuses[tools.refused] = True
    out.name_order[tools.order_at] = np.minimum(tools.order, 126)
    for r, names in enumerate(names_of):
        name_tools(out, r, names)
    out.result_ids = tools.result_ids
    out.result_run = np.asarray(tools.result_run, dtype=np.int64)
    out.result_turn = np.asarray(tools.result_turn, dtype=np.int64)

    for r in changed.tolist():  # (the order _lay_out_stream overrides them in)
        if not fallback[r]:
            fallback[r] = "the current request changes during the run"
    for r in np.nonzero(apart_turn >= 0)[0].tolist():
        fallback[r] = "a turn enters over several calls"
    for r, (turn, why) in tools.fallback.items():  # a later turn's reason, or this turn's
        if turn >= apart_turn[r]:
            fallback[r] = why
    out.fallback = {r: why for r, why in enumerate(fallback) if why}
    return out


@dataclass
class _ToolTurns:
    """What :func:`_tool_turns` found: per (run, turn) with a tool result, at ``at``."""

    at: tuple[np.ndarray, np.ndarray]
    results: np.ndarray
    pinnable: np.ndarray
    fact_from: np.ndarray
    final_counts: np.ndarray
    pin_names: np.ndarray
    refused: tuple[np.ndarray, np.ndarray]
    order_at: tuple[np.ndarray, np.ndarray, np.ndarray]
    order: np.ndarray
    facts_declared: np.ndarray
    result_ids: list[str]
    result_run: list[int]
    result_turn: list[int]
    #: Per run: the last reason found to fall back, and its turn.
    fallback: dict[int, tuple[int, str]]


def _tool_turns(
    rows: pa.Table,
    run_of: np.ndarray,
    msg_turn: np.ndarray,
    is_tool: np.ndarray,
    run_ids: Sequence[str],
    timelines: Mapping[str, StandingsTimeline],
    names_of: list[list[str]],
) -> _ToolTurns:
    """The tool calls and results of every run (the messages with either, in stream
    order), as :func:`_lay_out_stream` finds them turn by turn; ``names_of`` gets each
    run's tool names in the order they are numbered."""
    listed = rows["tool_calls"].combine_chunks()
    offsets = _numpy(listed.offsets)
    relevant = np.nonzero(is_tool | (np.diff(offsets) > 0))[0]
    picked = rows.select(
        ["tool_call_id", "tool_name", "tool_name_recovered", "not_dispatched"]
    ).take(pa.array(relevant))
    answers_of = picked["tool_call_id"].to_pylist()
    carried = [
        None if lost else name
        for name, lost in zip(
            picked["tool_name"].to_pylist(), picked["tool_name_recovered"].to_pylist(), strict=True
        )
    ]
    settles = picked["not_dispatched"].to_pylist()
    tool = is_tool[relevant].tolist()
    turns = msg_turn[relevant].tolist()
    calls = listed.take(pa.array(relevant))
    call_offsets = _numpy(calls.offsets)
    call_offsets = (call_offsets - call_offsets[0]).tolist()
    call_ids, call_names = (f.to_pylist() for f in calls.flatten().flatten())
    owners = run_of[relevant]
    bounds = np.nonzero(np.diff(owners))[0] + 1
    found = _ToolTurns(
        at=(np.zeros(0, np.int64), np.zeros(0, np.int64)),
        results=np.zeros(0, np.int32),
        pinnable=np.zeros(0, bool),
        fact_from=np.zeros(0, np.int32),
        final_counts=np.zeros((0, len(FINAL_STANDINGS)), np.int32),
        pin_names=np.zeros(0, object),
        refused=(np.zeros(0, np.int64), np.zeros(0, np.int64)),
        order_at=(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)),
        order=np.zeros(0, np.int64),
        facts_declared=np.zeros(len(run_ids), dtype=np.int64),
        result_ids=[],
        result_run=[],
        result_turn=[],
        fallback={},
    )
    at_run: list[int] = []
    at_turn: list[int] = []
    states: list[list[Any]] = []
    refused_run: list[int] = []
    refused_turn: list[int] = []
    order_rtb: list[tuple[int, int, int]] = []
    order_value: list[int] = []
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(relevant)], strict=True):
        if lo == hi:
            continue
        r = int(owners[lo])
        timeline = timelines.get(run_ids[r])
        final = timeline.final() if timeline else {}
        rows_by_id: dict[str, list[tuple[str, int]]] = {}
        for call_id, standing, iteration in timeline.rows if timeline else ():
            rows_by_id.setdefault(call_id, []).append((standing, iteration))
        call_turns: dict[str, set[int]] = {}
        answer_turns: dict[str, set[int]] = {}
        turn_calls: dict[int, list[tuple[str, str]]] = {}
        judged: set[str] = set()
        for k in range(lo, hi):
            answers = answers_of[k]
            if tool[k] and answers and not settles[k]:
                judged.add(answers)
            t = turns[k]
            if t < 0:  # not in the conversation
                continue
            for j in range(call_offsets[k], call_offsets[k + 1]):
                call_turns.setdefault(call_ids[j], set()).add(t)
                turn_calls.setdefault(t, []).append((call_ids[j], call_names[j]))
            if tool[k] and answers:
                answer_turns.setdefault(answers, set()).add(t)
        found.facts_declared[r] = sum(final.get(call_id) == "fact" for call_id in judged)
        names = names_of[r]
        numbered = {name: b for b, name in enumerate(names)}
        state_of: dict[int, list[Any]] = {}
        event: tuple[int, str] | None = None
        for k in range(lo, hi):
            t = turns[k]
            if t < 0:
                continue
            for j in range(call_offsets[k], call_offsets[k + 1]):
                answered = answer_turns.get(call_ids[j], set())
                if t not in answered:
                    refused_run.append(r)
                    refused_turn.append(t)
                    if answered:
                        event = (t, "a call is answered in another turn")
            if not tool[k]:
                continue
            name, answers = carried[k], answers_of[k]
            if not name and answers:
                if call_turns.get(answers, set()) - {t}:
                    event = (t, "a result's name depends on another turn")
                name = next((n for i, n in turn_calls.get(t, ()) if i == answers and n), None)
            state = state_of.get(t)
            if state is None:  # results, pinnable, fact_from, counts, pin name, order
                state = [0, False, NEVER, [0] * len(FINAL_STANDINGS), None, {}]
                state_of[t] = state
                at_run.append(r)
                at_turn.append(t)
                states.append(state)
            if name:
                bit = numbered.setdefault(name, len(names))
                if bit == len(names):
                    names.append(name)
                order = state[5]
                if bit not in order:
                    order[bit] = len(order)
                    order_rtb.append((r, t, bit))
                    order_value.append(order[bit])
            if settles[k] or not answers:
                continue
            state[0] += 1
            found.result_ids.append(answers)
            found.result_run.append(r)
            found.result_turn.append(t)
            state[1] = state[1] or name is not None
            state[4] = name or state[4]
            state[3][FINAL_STANDINGS.index(final.get(answers))] += 1
            try:
                since = fact_from_rows(rows_by_id.get(answers, []))
            except ValueError:
                event = (t, "a fact is re-filed as something else")
                since = None
            if since is not None:
                state[2] = min(state[2], since)
        if event is not None:
            found.fallback[r] = event
    if states:
        found.at = (np.array(at_run, dtype=np.int64), np.array(at_turn, dtype=np.int64))
        found.results = np.array([state[0] for state in states], dtype=np.int32)
        found.pinnable = np.array([state[1] for state in states], dtype=bool)
        found.fact_from = np.array([state[2] for state in states], dtype=np.int32)
        found.final_counts = np.array([state[3] for state in states], dtype=np.int32)
        found.pin_names = np.array([state[4] for state in states] + [None], dtype=object)[:-1]
    found.refused = (np.array(refused_run, dtype=np.int64), np.array(refused_turn, dtype=np.int64))
    if order_rtb:
        where = np.array(order_rtb, dtype=np.int64)
        found.order_at = (where[:, 0], where[:, 1], where[:, 2])
        found.order = np.array(order_value, dtype=np.int64)
    return found
