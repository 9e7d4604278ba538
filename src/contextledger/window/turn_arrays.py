"""Runs laid out for the vectorized kernel: per run, its turns, calls and standings as arrays.

:func:`turn_arrays` turns each run's message stream into the arrays
:func:`~contextledger.window.kernel.advance` reads (which turn enters at which call,
its chars, its results and their standings, the request, the recorded tokens) and
names in ``fallback`` the runs the kernel cannot hold: a request that changes, a
turn entering over several calls, an answer or a name in another turn, a fact
re-filed as something else; and in ``windowed`` the runs
recorded with a window (a windowed policy over them is not comparable). ``whatif``
replays those exactly. :func:`turn_arrays_from_tables` gives the same arrays straight
from an archive's stored columns, with array operations over a whole batch of runs.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contextledger.read.cycles import collector_paused
from contextledger.read.jsjson import utf16_length
from contextledger.read.messages import Message, RunMessages
from contextledger.window.notice import _SAFE_TOOL_NAME
from contextledger.window.refusals import current_request_index, is_result
from contextledger.window.standings import StandingsTimeline

#: Final standings, in the order of ``TurnArrays.final_counts``' last axis.
FINAL_STANDINGS = ("fact", "open", "noise", "ruled-out", None)
#: The call index of a turn that never enters (or never leaves) a window. Counts of
#: calls, turns and messages are int32: a run's messages are indexed by int32 in every
#: table (``schema.MESSAGES.message_index``), so none of them can exceed it.
NEVER = np.iinfo(np.int32).max
#: ``TurnArrays.name_order`` of a tool with no result in the turn.
ABSENT = 127


@dataclass
class TurnArrays:
    """Runs as turns: ``[run, turn]`` arrays padded with empty turns that never enter."""

    run_ids: list[str]
    calls: np.ndarray  # [R] model calls
    iterations: np.ndarray  # [R, K] iteration of each call (K = most calls)
    msgs: np.ndarray  # [R, T] messages in the turn
    chars: np.ndarray  # [R, T] content chars
    entered: np.ndarray  # [R, T] the first call it is offered to (NEVER: none)
    user_head: np.ndarray  # [R, T] its first message is a user message
    refuses: np.ndarray  # [R, T] a system message, or a call never answered
    results: np.ndarray  # [R, T] tool results with an id
    pinnable: np.ndarray  # [R, T] a named result with an id (a fact pin may hold it)
    fact_from: np.ndarray  # [R, T] first iteration whose visit knows it as a fact
    final_counts: np.ndarray  # [R, T, 5] results by final standing (FINAL_STANDINGS)
    request: np.ndarray  # [R] turn of the current request (-1: none)
    armed: np.ndarray  # [R] standings were given for the run
    tokens: np.ndarray  # [R, K] input tokens the provider reported
    recorded_full: np.ndarray  # [R, K] the call was served everything the run appended
    rate: np.ndarray  # [R] recorded tokens / recorded chars (nan: no counts)
    name_chars: np.ndarray  # [R, B] length of tool b's name
    name_safe: np.ndarray  # [R, B] bool: tool b's name is one a notice may print
    #: [R, T, B] int8: position of tool b's first result in the turn (at most 126: a
    #: notice prints four names; ABSENT: no result of tool b). B is the run's own count of
    #: tool names, any number of them.
    name_order: np.ndarray
    #: [R, T] a system message is in it (of ``refuses``, the ``system-envelope`` ones).
    system: np.ndarray | None = None
    #: [R, T] object: the tool a ledger-fact pin on the turn is named for (its newest named
    #: result with an id; None: not pinnable).
    pin_names: np.ndarray | None = None
    #: Runs the kernel cannot replay exactly, and why (replay those with ``replay``).
    fallback: dict[int, str] = field(default_factory=dict)
    #: Runs recorded with a window that engaged: a token budget over them falls back.
    windowed: np.ndarray | None = None
    #: [R] results with an id whose final standing is ``fact`` (the whole stream's).
    facts_declared: np.ndarray | None = None
    #: Every tool result with an id, in stream order: its id, run and turn.
    result_ids: list[str] = field(default_factory=list)
    result_run: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    result_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def turn_arrays(
    streams: Sequence[RunMessages], timelines: Mapping[str, StandingsTimeline] | None = None
) -> TurnArrays:
    """Lay runs out as turns (one Python pass over each run's messages).

    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> run = build_stream("r", [Said("user", "go")], [[Batch((Result("look", 9),))], []])
    >>> arrays = turn_arrays([run])
    >>> arrays.msgs.tolist(), arrays.entered.tolist(), arrays.fallback
    ([[1, 2]], [[1, 2]], {})
    """
    timelines = timelines or {}
    with collector_paused():
        per_run = [_lay_out_stream(stream, timelines.get(stream.run_id)) for stream in streams]
    return _assemble([stream.run_id for stream in streams], per_run)


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
    out = _blank(run_ids, calls_per_run, calls_max, turns_max, names_max, tools.facts_declared)
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
        _name_tools(out, r, names)
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


def _assemble(run_ids: list[str], per_run: Sequence[dict[str, Any]]) -> TurnArrays:
    """The :class:`TurnArrays` of runs laid out one by one (``_lay_out*``)."""
    calls_max = max([1] + [len(p["calls"]) for p in per_run])
    turns_max = max([1] + [len(p["turns"]) for p in per_run])
    names_max = max([1] + [len(p["names"]) for p in per_run])
    calls = np.array([len(p["calls"]) for p in per_run])
    declared = np.array([laid["facts_declared"] for laid in per_run], dtype=np.int64)
    out = _blank(run_ids, calls, calls_max, turns_max, names_max, declared)
    result_run: list[int] = []
    result_turn: list[int] = []
    for r, laid in enumerate(per_run):
        if laid["fallback"]:
            out.fallback[r] = laid["fallback"]
        for ordinal, iteration, tokens in laid["calls"]:
            out.iterations[r, ordinal - 1] = iteration
            out.tokens[r, ordinal - 1] = tokens
        out.recorded_full[r, : len(laid["calls"])] = laid["recorded_full"]
        out.windowed[r] = not all(laid["recorded_full"])  # type: ignore[index]
        out.rate[r] = np.nan if laid["rate"] is None else laid["rate"]
        out.request[r] = laid["request"]
        out.armed[r] = laid["armed"]
        _name_tools(out, r, laid["names"])
        turns = laid["turns"]
        count = len(turns)
        for key in ("msgs", "chars", "entered", "user_head", "refuses", "results", "system"):
            getattr(out, key)[r, :count] = [turn[key] for turn in turns]
        for key in ("pinnable", "fact_from", "final_counts"):
            if count:  # (an empty list has no row width)
                getattr(out, key)[r, :count] = [turn[key] for turn in turns]
        for t, turn in enumerate(turns):
            out.pin_names[r, t] = turn["pin_name"]  # type: ignore[index]
            for b, position in turn["order"].items():
                out.name_order[r, t, b] = min(position, 126)
            out.result_ids.extend(turn["ids"])
            result_run.extend([r] * len(turn["ids"]))
            result_turn.extend([t] * len(turn["ids"]))
    out.result_run = np.array(result_run, dtype=np.int64)
    out.result_turn = np.array(result_turn, dtype=np.int64)
    return out


def take_runs(arrays: TurnArrays, rows: Sequence[int]) -> TurnArrays:
    """The runs ``rows`` of ``arrays`` (in that order), turns and calls trimmed to the
    longest of them.

    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> short = build_stream("a", [Said("user", "go")], [[]])
    >>> long = build_stream("b", [Said("user", "go")], [[Batch((Result("t", 9),))], []])
    >>> taken = take_runs(turn_arrays([short, long]), [0])
    >>> taken.run_ids, taken.msgs.shape
    (['a'], (1, 1))
    """
    index = np.asarray(rows, dtype=np.int64)
    turns = max(1, int((arrays.msgs[index] > 0).sum(1).max(initial=0)))
    calls = max(1, int(arrays.calls[index].max(initial=0)))
    if arrays.result_run.size:
        position = np.full(len(arrays.run_ids), -1, dtype=np.int64)
        position[index] = np.arange(index.size)
        ordered = np.argsort(position[arrays.result_run], kind="stable")
        kept = ordered[position[arrays.result_run[ordered]] >= 0]
    else:
        position = np.zeros(0, dtype=np.int64)
        kept = np.zeros(0, dtype=np.int64)

    def per_turn(values: np.ndarray) -> np.ndarray:
        return values[index, :turns]

    return TurnArrays(
        run_ids=[arrays.run_ids[r] for r in index],
        calls=arrays.calls[index],
        iterations=arrays.iterations[index, :calls],
        msgs=per_turn(arrays.msgs),
        chars=per_turn(arrays.chars),
        entered=per_turn(arrays.entered),
        user_head=per_turn(arrays.user_head),
        refuses=per_turn(arrays.refuses),
        results=per_turn(arrays.results),
        pinnable=per_turn(arrays.pinnable),
        fact_from=per_turn(arrays.fact_from),
        final_counts=per_turn(arrays.final_counts),
        request=arrays.request[index],
        armed=arrays.armed[index],
        tokens=arrays.tokens[index, :calls],
        recorded_full=arrays.recorded_full[index, :calls],
        rate=arrays.rate[index],
        name_chars=arrays.name_chars[index],
        name_safe=arrays.name_safe[index],
        name_order=per_turn(arrays.name_order),
        system=None if arrays.system is None else per_turn(arrays.system),
        pin_names=None if arrays.pin_names is None else per_turn(arrays.pin_names),
        fallback={
            n: arrays.fallback[r] for n, r in enumerate(index.tolist()) if r in arrays.fallback
        },
        windowed=None if arrays.windowed is None else arrays.windowed[index],
        facts_declared=None if arrays.facts_declared is None else arrays.facts_declared[index],
        result_ids=[arrays.result_ids[i] for i in kept.tolist()],
        result_run=position[arrays.result_run[kept]] if kept.size else kept,
        result_turn=arrays.result_turn[kept],
    )


def _name_tools(out: TurnArrays, run: int, names: Sequence[str]) -> None:
    """Fill in the lengths of ``run``'s tool names and which of them a notice may print."""
    for b, name in enumerate(names):
        out.name_chars[run, b] = utf16_length(name)
        out.name_safe[run, b] = _SAFE_TOOL_NAME.fullmatch(name) is not None


def _fact_from(rows: list[tuple[str, int]]) -> int | None:
    """First iteration whose visit knows the result as a fact; None: never.

    Raises ``ValueError`` when it is later re-filed as something else.
    """
    if len(rows) < 2:  # filed once, or never
        return rows[0][1] + 1 if rows and rows[0][0] == "fact" else None
    changes = sorted({iteration + 1 for _, iteration in rows})
    since = None
    for visit in changes:
        standing = None
        for filed, iteration in rows:
            if iteration < visit:
                standing = filed
        if standing == "fact" and since is None:
            since = visit
        elif standing != "fact" and since is not None:
            raise ValueError("a fact re-filed as something else")
    return since


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
                since = _fact_from(rows_by_id.get(answers, []))
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


def _recorded_full_of(stream: RunMessages, offered: Sequence[Message]) -> list[bool]:
    """Per call: it was served every message the run had appended (no window engaged)."""
    firsts = [m.first_call or 0 for m in offered]
    if any(b < a for a, b in itertools.pairwise(firsts)):  # not in order: compare each
        return [
            call.window_served
            == tuple(m.index for m in offered if (m.first_call or 0) <= call.ordinal)
            for call in stream.calls
        ]
    indexes = tuple(m.index for m in offered)
    return [
        call.window_served == indexes[: bisect.bisect_right(firsts, call.ordinal)]
        for call in stream.calls
    ]


def _tokens_per_char_of(stream: RunMessages, chars_of: Sequence[int]) -> float | None:
    """``stream.tokens_per_char()``, each message's length measured once."""
    tokens = chars = 0
    for call in stream.calls:
        if call.input_tokens > 0:
            tokens += call.input_tokens
            chars += sum(map(chars_of.__getitem__, call.window_served))
    if tokens == 0 or chars == 0:
        return None
    return tokens / chars


def _blank(
    run_ids: list[str],
    calls: np.ndarray,
    calls_max: int,
    turns_max: int,
    names_max: int,
    facts_declared: np.ndarray,
) -> TurnArrays:
    """:class:`TurnArrays` of ``run_ids`` with nothing laid out yet (each layout, from
    messages or from stored columns, fills it in)."""
    runs = len(run_ids)
    shape = (runs, turns_max)
    return TurnArrays(
        run_ids=run_ids,
        calls=calls.astype(np.int32),
        iterations=np.zeros((runs, calls_max), dtype=np.int32),
        msgs=np.zeros(shape, dtype=np.int32),
        chars=np.zeros(shape, dtype=np.int64),
        entered=np.full(shape, NEVER, dtype=np.int32),
        user_head=np.zeros(shape, dtype=bool),
        refuses=np.zeros(shape, dtype=bool),
        results=np.zeros(shape, dtype=np.int32),
        pinnable=np.zeros(shape, dtype=bool),
        fact_from=np.full(shape, NEVER, dtype=np.int32),
        final_counts=np.zeros((*shape, len(FINAL_STANDINGS)), dtype=np.int32),
        request=np.full(runs, -1, dtype=np.int32),
        armed=np.zeros(runs, dtype=bool),
        tokens=np.zeros((runs, calls_max), dtype=np.int64),
        recorded_full=np.zeros((runs, calls_max), dtype=bool),
        rate=np.full(runs, np.nan),
        name_chars=np.zeros((runs, names_max), dtype=np.int32),
        name_safe=np.zeros((runs, names_max), dtype=bool),
        name_order=np.full((*shape, names_max), ABSENT, dtype=np.int8),
        system=np.zeros(shape, dtype=bool),
        pin_names=np.full(shape, None, dtype=object),
        windowed=np.zeros(runs, dtype=bool),
        facts_declared=facts_declared,
    )


def _lay_out_stream(stream: RunMessages, timeline: StandingsTimeline | None) -> dict[str, Any]:
    conversation = [m for m in stream.messages if not m.window_authored]
    laid: dict[str, Any] = {"fallback": "", "armed": bool(timeline), "names": [], "turns": []}
    laid["calls"] = [(c.ordinal, c.iteration, c.input_tokens) for c in stream.calls]
    said = stream.user_message
    at_first = [m for m in conversation if m.first_call == 1]
    offered = [m for m in conversation if m.first_call is not None]
    request = current_request_index(at_first, said)
    request_at = at_first[request].index if request >= 0 else -1
    last = current_request_index(offered, said)
    if (offered[last].index if last >= 0 else -1) != request_at:
        laid["fallback"] = "the current request changes during the run"
    laid["recorded_full"] = _recorded_full_of(stream, offered)
    chars_of = [m.chars for m in stream.messages]
    laid["rate"] = _tokens_per_char_of(stream, chars_of)
    turn_of: dict[int, int] = {}
    starts = [i for i, m in enumerate(conversation) if i == 0 or m.role != "tool"]
    bounds = list(zip(starts, [*starts[1:], len(conversation)][: len(starts)], strict=True))
    call_turns: dict[str, set[int]] = {}
    answer_turns: dict[str, set[int]] = {}
    for t, (start, end) in enumerate(bounds):
        for m in conversation[start:end]:
            turn_of[m.index] = t
            for call in m.tool_calls:
                call_turns.setdefault(call.id, set()).add(t)
            if m.role == "tool" and m.tool_call_id:
                answer_turns.setdefault(m.tool_call_id, set()).add(t)
    rows_by_id: dict[str, list[tuple[str, int]]] = {}
    for call_id, standing, iteration in timeline.rows if timeline else ():
        rows_by_id.setdefault(call_id, []).append((standing, iteration))
    final = timeline.final() if timeline else {}
    results = {m.tool_call_id for m in stream.messages if is_result(m) and m.tool_call_id}
    laid["facts_declared"] = sum(final.get(call_id) == "fact" for call_id in results)
    names: list[str] = laid["names"]
    numbered: dict[str, int] = {}
    for t, (start, end) in enumerate(bounds):
        members = conversation[start:end]
        first = members[0].first_call
        if any(m.first_call != first for m in members):
            laid["fallback"] = "a turn enters over several calls"
        turn: dict[str, Any] = {
            "msgs": len(members),
            "chars": sum(chars_of[m.index] for m in members),
            "entered": NEVER if first is None else first,
            "user_head": members[0].role == "user",
            "refuses": any(m.role == "system" for m in members),
            "system": any(m.role == "system" for m in members),
            "results": 0,
            "pinnable": False,
            "fact_from": NEVER,
            "final_counts": [0] * len(FINAL_STANDINGS),
            "order": {},
            "ids": [],
            "pin_name": None,
        }
        for m in members:
            for call in m.tool_calls:
                answered = answer_turns.get(call.id, set())
                if t not in answered:
                    turn["refuses"] = True
                    if answered:
                        laid["fallback"] = "a call is answered in another turn"
            if m.role != "tool":
                continue
            name = m.tool_name
            if not name and m.tool_call_id:
                asked = call_turns.get(m.tool_call_id, set())
                if asked - {t}:
                    laid["fallback"] = "a result's name depends on another turn"
                name = next(
                    (
                        c.name
                        for o in members
                        for c in o.tool_calls
                        if c.id == m.tool_call_id and c.name
                    ),
                    None,
                )
            if name:
                bit = numbered.setdefault(name, len(names))
                if bit == len(names):
                    names.append(name)
                turn["order"].setdefault(bit, len(turn["order"]))
            if not is_result(m) or not m.tool_call_id:
                continue
            turn["results"] += 1
            turn["ids"].append(m.tool_call_id)
            turn["pinnable"] = turn["pinnable"] or name is not None
            turn["pin_name"] = name or turn["pin_name"]
            turn["final_counts"][FINAL_STANDINGS.index(final.get(m.tool_call_id))] += 1
            try:
                since = _fact_from(rows_by_id.get(m.tool_call_id, []))
            except ValueError:
                laid["fallback"] = "a fact is re-filed as something else"
                since = None
            if since is not None:
                turn["fact_from"] = min(turn["fact_from"], since)
        laid["turns"].append(turn)
    laid["request"] = turn_of.get(request_at, -1)
    return laid
