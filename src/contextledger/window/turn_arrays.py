"""Runs laid out for the vectorized kernel: per run, its turns, calls and standings as arrays.

:func:`turn_arrays` turns each run's message stream into the arrays
:func:`~contextledger.window.kernel.advance` reads (which turn enters at which call,
its chars, its results and their standings, the request, the recorded tokens) and
names in ``fallback`` the runs the kernel cannot hold: a request that changes, a
turn entering over several calls, an answer or a name in another turn, a fact
re-filed as something else; and in ``windowed`` the runs
recorded with a window (a windowed policy over them is not comparable). ``whatif``
replays those exactly. :func:`~contextledger.window.turn_tables.turn_arrays_from_tables`
gives the same arrays straight from an archive's stored columns, a batch at once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


def _assemble(run_ids: list[str], per_run: Sequence[dict[str, Any]]) -> TurnArrays:
    """The :class:`TurnArrays` of runs laid out one by one (``_lay_out*``)."""
    calls_max = max([1] + [len(p["calls"]) for p in per_run])
    turns_max = max([1] + [len(p["turns"]) for p in per_run])
    names_max = max([1] + [len(p["names"]) for p in per_run])
    calls = np.array([len(p["calls"]) for p in per_run])
    declared = np.array([laid["facts_declared"] for laid in per_run], dtype=np.int64)
    out = blank(run_ids, calls, calls_max, turns_max, names_max, declared)
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
        name_tools(out, r, laid["names"])
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


def name_tools(out: TurnArrays, run: int, names: Sequence[str]) -> None:
    """Fill in the lengths of ``run``'s tool names and which of them a notice may print."""
    for b, name in enumerate(names):
        out.name_chars[run, b] = utf16_length(name)
        out.name_safe[run, b] = _SAFE_TOOL_NAME.fullmatch(name) is not None


def fact_from_rows(rows: list[tuple[str, int]]) -> int | None:
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


def blank(
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
                since = fact_from_rows(rows_by_id.get(m.tool_call_id, []))
            except ValueError:
                laid["fallback"] = "a fact is re-filed as something else"
                since = None
            if since is not None:
                turn["fact_from"] = min(turn["fact_from"], since)
        laid["turns"].append(turn)
    laid["request"] = turn_of.get(request_at, -1)
    return laid
