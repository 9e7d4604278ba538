"""Runs laid out for the vectorized kernel: per run, its turns, calls and standings as arrays.

:func:`turn_arrays` turns each run's message stream into the arrays
:func:`~contextledger.window.kernel.advance` reads (which turn enters at which call,
its chars, its results and their standings, the request, the recorded tokens) and
names in ``fallback`` the runs the kernel cannot hold: a request that changes, a
turn entering over several calls, an answer or a name in another turn, a fact
re-filed as something else, more than 64 turns; and in ``windowed`` the runs
recorded with a window (a windowed policy over them is not comparable). ``whatif``
replays those exactly.
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

from contextledger.read.jsjson import utf16_length
from contextledger.read.messages import Message, RunMessages, ToolCall, collector_paused
from contextledger.window.notice import _SAFE_TOOL_NAME
from contextledger.window.refusals import current_request_index, is_result
from contextledger.window.standings import StandingsTimeline

#: Final standings, in the order of ``TurnArrays.final_counts``' last axis.
FINAL_STANDINGS = ("fact", "open", "noise", "ruled-out", None)
#: The call index of a turn that never enters (or never leaves) a window.
NEVER = np.iinfo(np.int16).max
#: Most turns a run may have for the kernel (one bit each).
MAX_TURNS = 64


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
    names: np.ndarray  # [R, T] uint64: bit b set when a result of tool b is in it
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
    name_safe: np.ndarray  # [R] uint64: bits of names a notice may print
    name_order: np.ndarray  # [R, T, B] position of tool b's first result in the turn
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


@dataclass(frozen=True, slots=True)
class RunColumns:
    """One run's stream as :func:`_lay_out` reads it, straight from an archive's stored
    columns (:func:`turn_arrays_from_tables`): a list per message field (by stream index)
    and per call field, so the kernel's input from an archive needs no ``Message``
    objects. :func:`_lay_out_stream` lays a ``RunMessages`` out alike (the tests hold the
    two equal field by field)."""

    run_id: str
    user_message: str | None
    role: Sequence[str]
    #: ``Message.first_call``: the first call after it entered the live window.
    entered: Sequence[int | None]
    chars: Sequence[int]
    tool_call_id: Sequence[str | None]
    tool_calls: Sequence[Sequence[ToolCall]]
    #: The name the message itself carries (``Message.tool_name``).
    tool_name: Sequence[str | None]
    window_authored: Sequence[bool]
    not_dispatched: Sequence[bool]
    #: ``said_by_a_person``: a user message no library wrote.
    person: Sequence[bool]
    #: The text (only a person's messages' is read).
    content: Sequence[str | None]
    ordinals: Sequence[int]
    iterations: Sequence[int]
    input_tokens: Sequence[int]
    served: Sequence[Sequence[int]]


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
    order) and their ``schema.MESSAGES`` rows, read column by column: the same arrays as
    over the streams :func:`~contextledger.tables.windows.streams_from_tables` rebuilds,
    without building a ``Message`` per row.

    Raises ``ValueError`` when a run's messages rows are incomplete.
    """
    with collector_paused():
        runs = _columns_of_tables(streams, messages)
        found = timelines or {}
        per_run = [_lay_out(run, found.get(run.run_id)) for run in runs]
    return _assemble([run.run_id for run in runs], per_run)


def _columns_of_tables(streams: pa.Table, messages: pa.Table) -> list[RunColumns]:
    table = streams.combine_chunks()
    run_ids = table["run_id"].to_pylist()
    counts = np.asarray(table["message_count"].to_numpy(zero_copy_only=False), dtype=np.int64)
    rows = messages.combine_chunks()
    known = table["run_id"].combine_chunks()
    position = pc.index_in(rows["run_id"], value_set=known).to_numpy(zero_copy_only=False)
    index = rows["message_index"].to_numpy(zero_copy_only=False)
    wanted = np.nan_to_num(position.astype(np.float64), nan=-1).astype(np.int64)
    order_key = wanted * (1 << 32) + index
    if (np.diff(order_key) < 0).any() or (wanted < 0).any():
        keep = np.nonzero(wanted >= 0)[0]
        keep = keep[np.argsort(order_key[keep], kind="stable")]
        rows, wanted, index = rows.take(keep), wanted[keep], index[keep]
    ends = np.cumsum(counts)
    starts = ends - counts
    held = np.bincount(wanted, minlength=len(run_ids)) if wanted.size else np.zeros(0, int)
    held = np.pad(held, (0, len(run_ids) - held.size))
    expected = np.arange(index.size) - np.repeat(np.cumsum(held) - held, held)
    if (held != counts).any() or (index != expected).any():
        bad = int(np.nonzero((held != counts) | _bad_runs(index, expected, held))[0][0])
        msg = f"run {run_ids[bad]}: its messages rows are incomplete"
        raise ValueError(msg)
    column = {name: rows[name].to_pylist() for name in _LAID_OUT}
    recovered = column.pop("tool_name_recovered")
    column["tool_name"] = [
        None if lost else name for name, lost in zip(column["tool_name"], recovered, strict=True)
    ]
    column["person"] = [
        role == "user" and not (drop or summary or injected)
        for role, drop, summary, injected in zip(
            column["role"],
            column.pop("is_drop_notice"),
            column.pop("is_summary"),
            column.pop("injected"),
            strict=True,
        )
    ]
    listed = rows["tool_calls"].combine_chunks()
    offsets = listed.offsets.to_numpy()
    offsets = (offsets - offsets[0]).tolist()
    call_ids, call_names = (field.to_pylist() for field in listed.flatten().flatten())
    column["tool_calls"] = [
        tuple(ToolCall(call_ids[i], call_names[i]) for i in range(a, b)) if b > a else ()
        for a, b in itertools.pairwise(offsets)
    ]
    calls = table["calls"].combine_chunks()
    call_offsets = calls.offsets.to_numpy()
    call_offsets = (call_offsets - call_offsets[0]).tolist()
    fields = {
        f.name: values
        for f, values in zip(calls.type.value_type, calls.flatten().flatten(), strict=True)
    }
    per_call = {name: fields[name].to_pylist() for name in ("ordinal", "iteration", "input_tokens")}
    served = fields["window_served"]
    served_offsets = served.offsets.to_numpy()
    served_offsets = (served_offsets - served_offsets[0]).tolist()
    served_values = served.flatten().to_pylist()
    windows = [tuple(served_values[a:b]) for a, b in itertools.pairwise(served_offsets)]
    out = []
    for r, (run_id, said) in enumerate(
        zip(run_ids, table["user_message"].to_pylist(), strict=True)
    ):
        a, b = int(starts[r]), int(ends[r])
        c, d = call_offsets[r], call_offsets[r + 1]
        out.append(
            RunColumns(
                run_id=run_id,
                user_message=said,
                role=column["role"][a:b],
                entered=column["entered_before_call"][a:b],
                chars=column["content_chars"][a:b],
                tool_call_id=column["tool_call_id"][a:b],
                tool_calls=column["tool_calls"][a:b],
                tool_name=column["tool_name"][a:b],
                window_authored=column["window_authored"][a:b],
                not_dispatched=column["not_dispatched"][a:b],
                person=column["person"][a:b],
                content=column["content"][a:b],
                ordinals=per_call["ordinal"][c:d],
                iterations=per_call["iteration"][c:d],
                input_tokens=per_call["input_tokens"][c:d],
                served=windows[c:d],
            )
        )
    return out


def _bad_runs(index: np.ndarray, expected: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Per run: one of its rows is not at its stream index."""
    wrong = np.zeros(held.size, dtype=bool)
    if index.size:
        owner = np.repeat(np.arange(held.size), held)
        wrong[owner[index != expected]] = True
    return wrong


#: The ``schema.MESSAGES`` columns :func:`_lay_out` reads (``tool_calls`` apart).
_LAID_OUT = (
    "role",
    "entered_before_call",
    "content_chars",
    "tool_call_id",
    "tool_name",
    "tool_name_recovered",
    "window_authored",
    "not_dispatched",
    "injected",
    "is_drop_notice",
    "is_summary",
    "content",
)


def _assemble(run_ids: list[str], per_run: Sequence[dict[str, Any]]) -> TurnArrays:
    """The :class:`TurnArrays` of runs laid out one by one (``_lay_out*``)."""
    count_runs = len(run_ids)
    calls_max = max([1] + [len(p["calls"]) for p in per_run])
    turns_max = max([1] + [len(p["turns"]) for p in per_run])
    names_max = max([1] + [len(p["names"]) for p in per_run])
    shape = (count_runs, turns_max)
    out = TurnArrays(
        run_ids=run_ids,
        calls=np.array([len(p["calls"]) for p in per_run], dtype=np.int16),
        iterations=np.zeros((count_runs, calls_max), dtype=np.int32),
        msgs=np.zeros(shape, dtype=np.int16),
        chars=np.zeros(shape, dtype=np.int64),
        entered=np.full(shape, NEVER, dtype=np.int16),
        user_head=np.zeros(shape, dtype=bool),
        refuses=np.zeros(shape, dtype=bool),
        names=np.zeros(shape, dtype=np.uint64),
        results=np.zeros(shape, dtype=np.int16),
        pinnable=np.zeros(shape, dtype=bool),
        fact_from=np.full(shape, NEVER, dtype=np.int32),
        final_counts=np.zeros((*shape, len(FINAL_STANDINGS)), dtype=np.int16),
        request=np.full(count_runs, -1, dtype=np.int16),
        armed=np.zeros(count_runs, dtype=bool),
        tokens=np.zeros((count_runs, calls_max), dtype=np.int64),
        recorded_full=np.zeros((count_runs, calls_max), dtype=bool),
        rate=np.full(count_runs, np.nan),
        name_chars=np.zeros((count_runs, names_max), dtype=np.int32),
        name_safe=np.zeros(count_runs, dtype=np.uint64),
        name_order=np.full((*shape, names_max), 127, dtype=np.int8),
        system=np.zeros(shape, dtype=bool),
        pin_names=np.full(shape, None, dtype=object),
        windowed=np.zeros(count_runs, dtype=bool),
        facts_declared=np.array([laid["facts_declared"] for laid in per_run], dtype=np.int64),
    )
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
        for b, name in enumerate(laid["names"]):
            out.name_chars[r, b] = utf16_length(name)
            if _SAFE_TOOL_NAME.fullmatch(name):
                out.name_safe[r] |= np.uint64(1 << b)
        turns = laid["turns"]
        count = len(turns)
        for key in ("msgs", "chars", "entered", "user_head", "refuses", "results", "system"):
            getattr(out, key)[r, :count] = [turn[key] for turn in turns]
        for key in ("names", "pinnable", "fact_from", "final_counts"):
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
    """The runs ``rows`` of ``arrays`` (in that order), turns trimmed to the longest of them.

    >>> from contextledger.window.synthetic import Batch, Result, Said, build_stream
    >>> short = build_stream("a", [Said("user", "go")], [[]])
    >>> long = build_stream("b", [Said("user", "go")], [[Batch((Result("t", 9),))], []])
    >>> taken = take_runs(turn_arrays([short, long]), [0])
    >>> taken.run_ids, taken.msgs.shape
    (['a'], (1, 1))
    """
    index = np.asarray(rows, dtype=np.int64)
    turns = max(1, int((arrays.msgs[index] > 0).sum(1).max(initial=0)))
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
        iterations=arrays.iterations[index],
        msgs=per_turn(arrays.msgs),
        chars=per_turn(arrays.chars),
        entered=per_turn(arrays.entered),
        user_head=per_turn(arrays.user_head),
        refuses=per_turn(arrays.refuses),
        names=per_turn(arrays.names),
        results=per_turn(arrays.results),
        pinnable=per_turn(arrays.pinnable),
        fact_from=per_turn(arrays.fact_from),
        final_counts=per_turn(arrays.final_counts),
        request=arrays.request[index],
        armed=arrays.armed[index],
        tokens=arrays.tokens[index],
        recorded_full=arrays.recorded_full[index],
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


def _recorded_full(run: RunColumns, offered: Sequence[int]) -> list[bool]:
    """Per call: it was served every message the run had appended (no window engaged)."""
    firsts = [run.entered[i] or 0 for i in offered]
    if any(b < a for a, b in itertools.pairwise(firsts)):  # not in order: compare each
        return [
            tuple(served) == tuple(i for i in offered if (run.entered[i] or 0) <= ordinal)
            for ordinal, served in zip(run.ordinals, run.served, strict=True)
        ]
    indexes = tuple(offered)
    return [
        tuple(served) == indexes[: bisect.bisect_right(firsts, ordinal)]
        for ordinal, served in zip(run.ordinals, run.served, strict=True)
    ]


def _tokens_per_char(run: RunColumns) -> float | None:
    """``stream.tokens_per_char()``, over the run's columns."""
    tokens = chars = 0
    chars_of = run.chars
    for input_tokens, served in zip(run.input_tokens, run.served, strict=True):
        if input_tokens > 0:
            tokens += input_tokens
            chars += sum(map(chars_of.__getitem__, served))
    if tokens == 0 or chars == 0:
        return None
    return tokens / chars


def _request_at(run: RunColumns, window: Sequence[int]) -> int:
    """The stream index of ``current_request_index(window, run.user_message)``; -1: none."""
    said, latest = run.user_message, -1
    for i in reversed(window):
        if not run.person[i]:
            continue
        if said is not None and run.content[i] == said:
            return i
        if latest == -1:
            latest = i
    return latest


def _lay_out(run: RunColumns, timeline: StandingsTimeline | None) -> dict[str, Any]:
    role, entered, tool_call_id = run.role, run.entered, run.tool_call_id
    tool_calls, window_authored = run.tool_calls, run.window_authored
    conversation = [i for i, authored in enumerate(window_authored) if not authored]
    laid: dict[str, Any] = {"fallback": "", "armed": bool(timeline), "names": [], "turns": []}
    laid["calls"] = list(zip(run.ordinals, run.iterations, run.input_tokens, strict=True))
    at_first = [i for i in conversation if entered[i] == 1]
    offered = [i for i in conversation if entered[i] is not None]
    request_at = _request_at(run, at_first)
    if _request_at(run, offered) != request_at:
        laid["fallback"] = "the current request changes during the run"
    laid["recorded_full"] = _recorded_full(run, offered)
    chars_of = run.chars
    laid["rate"] = _tokens_per_char(run)
    turn_of: dict[int, int] = {}
    starts = [k for k, i in enumerate(conversation) if k == 0 or role[i] != "tool"]
    bounds = list(zip(starts, [*starts[1:], len(conversation)][: len(starts)], strict=True))
    call_turns: dict[str, set[int]] = {}
    answer_turns: dict[str, set[int]] = {}
    for t, (start, end) in enumerate(bounds):
        for i in conversation[start:end]:
            turn_of[i] = t
            for call in tool_calls[i]:
                call_turns.setdefault(call.id, set()).add(t)
            if role[i] == "tool" and tool_call_id[i]:
                answer_turns.setdefault(tool_call_id[i], set()).add(t)  # type: ignore[arg-type]
    rows_by_id: dict[str, list[tuple[str, int]]] = {}
    for call_id, standing, iteration in timeline.rows if timeline else ():
        rows_by_id.setdefault(call_id, []).append((standing, iteration))
    final = timeline.final() if timeline else {}
    judged = [r == "tool" and not nd for r, nd in zip(role, run.not_dispatched, strict=True)]
    results = {c for c, result in zip(tool_call_id, judged, strict=True) if result and c}
    laid["facts_declared"] = sum(final.get(call_id) == "fact" for call_id in results)
    names: list[str] = laid["names"]
    for t, (start, end) in enumerate(bounds):
        members = conversation[start:end]
        first = entered[members[0]]
        if any(entered[i] != first for i in members):
            laid["fallback"] = "a turn enters over several calls"
        system = any(role[i] == "system" for i in members)
        turn: dict[str, Any] = {
            "msgs": len(members),
            "chars": sum(chars_of[i] for i in members),
            "entered": NEVER if first is None else first,
            "user_head": role[members[0]] == "user",
            "refuses": system,
            "system": system,
            "names": 0,
            "results": 0,
            "pinnable": False,
            "fact_from": NEVER,
            "final_counts": [0] * len(FINAL_STANDINGS),
            "order": {},
            "ids": [],
            "pin_name": None,
        }
        for i in members:
            for call in tool_calls[i]:
                answered = answer_turns.get(call.id, set())
                if t not in answered:
                    turn["refuses"] = True
                    if answered:
                        laid["fallback"] = "a call is answered in another turn"
            if role[i] != "tool":
                continue
            name = run.tool_name[i]
            answers = tool_call_id[i]
            if not name and answers:
                asked = call_turns.get(answers, set())
                if asked - {t}:
                    laid["fallback"] = "a result's name depends on another turn"
                name = next(
                    (c.name for o in members for c in tool_calls[o] if c.id == answers and c.name),
                    None,
                )
            if name:
                if name not in names:
                    names.append(name)
                bit = names.index(name)
                turn["names"] |= 1 << bit
                turn["order"].setdefault(bit, len(turn["order"]))
            if not judged[i] or not answers:
                continue
            turn["results"] += 1
            turn["ids"].append(answers)
            turn["pinnable"] = turn["pinnable"] or name is not None
            turn["pin_name"] = name or turn["pin_name"]
            turn["final_counts"][FINAL_STANDINGS.index(final.get(answers))] += 1
            try:
                since = _fact_from(rows_by_id.get(answers, []))
            except ValueError:
                laid["fallback"] = "a fact is re-filed as something else"
                since = None
            if since is not None:
                turn["fact_from"] = min(turn["fact_from"], since)
        laid["turns"].append(turn)
    if len(names) > 63:
        laid["fallback"] = "more than 63 tool names"
    if len(laid["turns"]) > MAX_TURNS:
        laid["fallback"] = f"more than {MAX_TURNS} turns"
    laid["request"] = turn_of.get(request_at, -1)
    return laid


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
            "names": 0,
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
                if name not in names:
                    names.append(name)
                bit = names.index(name)
                turn["names"] |= 1 << bit
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
    if len(names) > 63:
        laid["fallback"] = "more than 63 tool names"
    if len(laid["turns"]) > MAX_TURNS:
        laid["fallback"] = f"more than {MAX_TURNS} turns"
    laid["request"] = turn_of.get(request_at, -1)
    return laid
