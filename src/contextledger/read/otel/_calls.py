"""One run's model calls from its spans, and what follows from them: the offers and uses
the ledger counts, and the message stream the what-if replays.

Apart from :mod:`._runs` (which gathers spans from many files into runs) because all
here reads one run's spans, already gathered, and knows no file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from contextledger.read.facts import Offer, RunFacts, Use
from contextledger.read.messages import (
    MAX_REPORTED_TOKENS,
    Message,
    ModelCall,
    RunMessages,
    ToolCall,
    common_ends,
)
from contextledger.read.otel._spans import Said, SpanRecord
from contextledger.read.snapshot import ReadProblem

#: How a tool use is known: the model's output asked for it (``tool-called``, the
#: snapshot reader's signal), or only an ``execute_tool`` span says it ran.
CALLED, EXECUTED = "tool-called", "tool-executed"

#: Why a run whose model calls carry no tool definitions is left out of the ledger.
NO_DEFINITIONS = (
    "no content on its model calls, so no tool definitions (content capture off, or sent to "
    "log events as semconv 1.30 instrumentations do: record with "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only; OpenInference: leave "
    "OPENINFERENCE_HIDE_LLM_TOOLS and OPENINFERENCE_HIDE_INPUTS unset)"
)
#: Why a run whose calls carried content but no tool definitions is left out.
NO_TOOLS_OFFERED = (
    "no tool offered: its model calls carry content but no tool definitions "
    "(gen_ai.tool.definitions / llm.tools)"
)
#: Why a run whose model called tools none of its calls' spans define is left out.
DEFINITIONS_NOT_RECORDED = (
    "tool definitions not recorded: the model called tools, but its model-call spans carry "
    "no gen_ai.tool.definitions (opentelemetry-instrumentation-openai-v2 never records them: "
    "record with opentelemetry-instrumentation-genai-openai and "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only)"
)
NO_MODEL_CALL = (
    "no model call: no span with gen_ai.operation.name chat, generate_content or "
    "text_completion (nor an OpenInference LLM span)"
)
#: Piece kinds the conventions carry no attribute for (left unmetered, never zero).
UNMETERED_KINDS = ["injection", "skill"]
#: How far (either way) a run's rebuilt input may be from its recorded input tokens
#: before it is named: chars / 4 is rough, an incomplete stream is far off.
INPUT_RATIO_LIMIT = 4.0


def input_check(messages: RunMessages, calls: Sequence[SpanRecord]) -> str | None:
    """Why the run's rebuilt windows look incomplete, or None: over the calls that
    recorded ``gen_ai.usage.input_tokens``, the windows' estimated tokens (``ceil(chars /
    4)``, plus each call's tool definitions as the ledger estimates them) against the
    recorded count, named when the ratio is past :data:`INPUT_RATIO_LIMIT` either way."""
    recorded = estimated = counted = 0
    for model_call, span in zip(messages.calls, calls, strict=True):
        if not span.input_tokens or span.input_tokens <= 0:
            continue
        counted += 1
        recorded += span.input_tokens
        chars = sum(messages.messages[i].chars for i in model_call.window_served)
        estimated += math.ceil(chars / 4) + sum(tokens for _, tokens in span.tools or ())
    if not recorded:
        return None
    ratio = estimated / recorded
    if 1 / INPUT_RATIO_LIMIT <= ratio <= INPUT_RATIO_LIMIT:
        return None
    return (
        f"the input rebuilt from its spans, about {estimated:,} tokens (chars / 4, and the "
        f"tool definitions), is {ratio:.2f}x the {recorded:,} its {counted} model call(s) "
        "recorded (gen_ai.usage.input_tokens): its message stream is likely incomplete "
        "(content capture off, attributes cut or hidden, tool definitions not recorded); "
        "replayed as read"
    )


def model_calls(records: Sequence[SpanRecord]) -> list[SpanRecord]:
    """The run's model calls in start-time order (ties: place in the file), one per call
    that reached the model.

    A span is its (trace id, span id): a run of many traces may reuse a span id.
    Stacked instrumentations (a framework's ``chat`` span around the client's) record
    one call twice: a model-call span with a model-call span below it is not counted
    (the innermost is the request as sent), and what the innermost lacks (its tool
    definitions, its messages) is taken from the nearest one above it. Two model-call
    spans side by side are one call only when they share a ``gen_ai.response.id`` and
    agree on what both recorded of the call (:func:`_same_call`): servers such as
    Ollama's reuse response ids (``chatcmpl-<0..998>``), so an id alone is no proof.
    """
    calls: dict[tuple[str, str], SpanRecord] = {}
    order: dict[tuple[str, str], int] = {}  # each call's place among the records
    for position, r in enumerate(records):
        if r.role == "call":
            key = (r.trace_id, r.span_id)
            calls[key] = r
            order[key] = position
    if not calls:
        return []
    parents = {(r.trace_id, r.span_id): (r.trace_id, r.parent_id) for r in records}
    above: dict[tuple[str, str], tuple[str, str]] = {}  # call -> nearest call above it
    for key in calls:
        parent = parents.get(key, ("", ""))
        hops = 0
        while parent[1] and parent not in calls and hops < len(parents):
            parent = parents.get(parent, ("", ""))
            hops += 1
        if parent in calls:
            above[key] = parent
    outer = set(above.values())
    kept: list[SpanRecord] = []
    responses: dict[str, list[SpanRecord]] = {}
    for key, record in calls.items():
        if key in outer:
            continue
        merged = record
        ancestor = above.get(key)
        while ancestor is not None:
            merged = _fill(merged, calls[ancestor])
            ancestor = above.get(ancestor)
        if merged.response_id:
            same_id = responses.setdefault(merged.response_id, [])
            if any(_same_call(merged, other) for other in same_id):
                continue
            same_id.append(merged)
        kept.append(merged)
    kept.sort(key=lambda r: (r.start, order[(r.trace_id, r.span_id)]))
    return kept


#: What two spans of one call both say, when both recorded it.
_CALL_FIELDS = ("input_tokens", "tool_calls", "inputs", "outputs", "system")


def _same_call(one: SpanRecord, other: SpanRecord) -> bool:
    """Whether two model-call spans with one response id record the same call: same
    trace, and equal in each of the request and response fields both recorded (the
    tools offered compared by name, their token estimates being dialect-specific)."""
    if one.trace_id != other.trace_id:
        return False
    for name in _CALL_FIELDS:
        mine, theirs = getattr(one, name), getattr(other, name)
        if mine is not None and theirs is not None and mine != theirs:
            return False
    if one.tools is not None and other.tools is not None:
        return {n for n, _ in one.tools} == {n for n, _ in other.tools}
    return True


_FILLED = (
    "tools",
    "tool_calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "system",
    "inputs",
    "outputs",
)
_FLAGS = ("tools_unreadable", "captured")
_COUNTS = ("dropped_attributes",)


def _fill(record: SpanRecord, outer: SpanRecord) -> SpanRecord:
    """``record`` with the fields it lacks taken from ``outer`` (the same call, recorded
    by an instrumentation above it)."""
    missing = {
        name: getattr(outer, name)
        for name in _FILLED
        if getattr(record, name) is None and getattr(outer, name) is not None
    }
    for name in _FLAGS:
        if getattr(outer, name) and not getattr(record, name):
            missing[name] = True
    for name in _COUNTS:
        if getattr(outer, name) > getattr(record, name):
            missing[name] = getattr(outer, name)
    return msgspec.structs.replace(record, **missing) if missing else record


def meter(calls: Sequence[SpanRecord], records: Sequence[SpanRecord]) -> RunFacts:
    """Offers and uses of a run's model calls (``calls``, in order) and tool spans.

    A run none of whose calls carries tool definitions is refused (its offers are
    unknown, or none: never offered zero), saying which: content capture was off, the
    model called tools its instrumentation did not record, or the calls carried content
    but offered no tool; so is a run that lost attributes to
    the SDK's span limit. Offered: each tool
    definition on a call, once per name per call. Used: each tool
    call in a call's output messages (``tool-called``); an ``execute_tool`` span counts
    (``tool-executed``) only when no output message holds its call id, and one without
    a call id only when the run recorded no output messages at all.
    """
    facts = RunFacts("corrected", model_call_count=len(calls))
    if not calls:
        facts.refused_reason = NO_MODEL_CALL
        return facts
    unreadable = [index for index, call in enumerate(calls, start=1) if call.tools_unreadable]
    if unreadable:
        facts.refused_reason = (
            f"the tool definitions of model call {unreadable[0]} could not be read "
            "(named among the problems): the run is not counted in part"
        )
        return facts
    dropped = [
        (index, call) for index, call in enumerate(calls, start=1) if call.dropped_attributes
    ]
    if dropped:
        index, call = dropped[0]
        facts.refused_reason = (
            f"model call {index} lost {call.dropped_attributes} attribute(s) to the SDK's span "
            "attribute limit (128 by default), so its tool definitions may be incomplete: "
            "raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (or SpanLimits(max_span_attributes=...))"
        )
        return facts
    if all(call.tools is None for call in calls):
        if not any(call.captured for call in calls):
            facts.refused_reason = NO_DEFINITIONS
        elif any(call.tool_calls for call in calls):
            facts.refused_reason = DEFINITIONS_NOT_RECORDED
        else:
            facts.refused_reason = NO_TOOLS_OFFERED
        return facts
    offers: list[Offer] = []
    uses: list[Use] = []
    called: set[str] = set()
    for index, call in enumerate(calls):
        offers.extend(_call_offers(index, call.tools or ()))
        for call_id, name in call.tool_calls or ():
            uses.append(("tool", name, CALLED, index))
            if call_id:
                called.add(call_id)
    outputs_recorded = any(call.tool_calls is not None for call in calls)
    starts = [call.start for call in calls]
    for record in records:
        if record.role != "tool" or record.executed is None:
            continue
        call_id, name = record.executed
        if not name or call_id in called or (not call_id and outputs_recorded):
            continue
        if call_id:
            called.add(call_id)
        before = sum(1 for start in starts if start <= record.start) - 1
        uses.append(("tool", name, EXECUTED, before if before >= 0 else None))
    facts.metered = True
    facts.metered_call_count = len(calls)
    facts.unmetered_kinds = list(UNMETERED_KINDS)
    facts.offers = offers
    facts.uses = uses
    return facts


#: The offer rows of a call, by its index and its tools tuple (the reader shares one tuple
#: among the calls sending the same definitions): most calls of most runs repeat one.
_CALL_OFFERS: dict[tuple[int, int], tuple[tuple[tuple[str, int], ...], list[Offer]]] = {}
_CALL_OFFERS_KEPT = 4096


def _call_offers(index: int, tools: tuple[tuple[str, int], ...]) -> list[Offer]:
    """Offer rows of call ``index`` offering ``tools``: each name once, its first time."""
    key = (index, id(tools))
    hit = _CALL_OFFERS.get(key)
    if hit is not None and hit[0] is tools:
        return hit[1]
    named: set[str] = set()
    rows: list[Offer] = []
    for name, tokens in tools:
        if name not in named:
            named.add(name)
            rows.append((index, "tool", name, tokens))
    if len(_CALL_OFFERS) >= _CALL_OFFERS_KEPT:
        _CALL_OFFERS.clear()
    _CALL_OFFERS[key] = (tools, rows)  # keeps ``tools`` alive: its id is not reused
    return rows


#: The usage counts a model call's span records, and the attribute each is read from.
_USAGE_FIELDS = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_write.input_tokens",
}


def usage_in_range(
    calls: Sequence[SpanRecord], run_id: str
) -> tuple[list[SpanRecord], ReadProblem | None]:
    """The calls with each usage count that is negative or past
    :data:`~contextledger.read.messages.MAX_REPORTED_TOKENS` read as not reported, and
    the first such count named (once per run: only the what-if reads usage)."""
    out: list[SpanRecord] = []
    problem = None
    for ordinal, call in enumerate(calls, start=1):
        for field_name, attribute in _USAGE_FIELDS.items():
            tokens = getattr(call, field_name)
            if tokens is None or 0 <= tokens <= MAX_REPORTED_TOKENS:
                continue
            call = msgspec.structs.replace(call, **{field_name: None})
            if problem is None:
                reason = (
                    f"{attribute} of model call {ordinal} is {tokens}, "
                    f"{'negative' if tokens < 0 else 'past 2**40, which no real call reaches'}"
                    ": read as not reported (the what-if leaves it out of its token figures)"
                )
                problem = ReadProblem(call.path, call.line, run_id, reason)
        out.append(call)
    return out, problem


def stream(run_id: str, calls: Sequence[SpanRecord]) -> RunMessages:
    """The run's message stream rebuilt from what each call sent and received.

    A chat API is sent the whole window each call: a call's input is aligned with the
    window before it (the previous input and its output), and what differs enters the
    stream there. Tool results are linked to their calls by id.
    """
    said: list[Said] = []
    origins: list[str] = []
    entered: list[int] = []  # calls made before each message entered
    live: list[int] = []
    model_calls_out: list[ModelCall] = []

    def enter(items: Sequence[Said], origin: str, before: int) -> list[int]:
        added = []
        for item in items:
            said.append(item)
            origins.append(origin)
            entered.append(before)
            added.append(len(said) - 1)
        return added

    for ordinal, call in enumerate(calls, start=1):
        sent = list(call.inputs or ())
        if call.system and not (sent and sent[0].role == "system"):
            sent = list(call.system) + sent
        old = [said[i] for i in live]
        head, tail = common_ends(old, sent)
        added = enter(sent[head : len(sent) - tail], f"input#{ordinal}", ordinal - 1)
        live = live[:head] + added + (live[len(live) - tail :] if tail else [])
        served = tuple(live)
        model_calls_out.append(
            ModelCall(
                ordinal=ordinal,
                iteration=ordinal,
                bundle_index=ordinal - 1,
                runtime_stage_id=call.span_id,
                window_stage_id=None,
                input_tokens=max(0, call.input_tokens or 0),
                window_seen=served,
                window_served=served,
                cache_read_tokens=call.cache_read_tokens,
                cache_write_tokens=call.cache_write_tokens,
            )
        )
        live = live + enter(call.outputs or (), f"output#{ordinal}", ordinal)
    names = {cid: name for item in said for cid, name in item.tool_calls if cid and name}
    count = len(calls)
    messages = []
    for index, item in enumerate(said):
        before = entered[index]
        resolved = names.get(item.tool_call_id or "") if item.role == "tool" else None
        messages.append(
            Message(
                role=item.role,
                content=item.content,
                tool_call_id=item.tool_call_id,
                tool_calls=tuple(ToolCall(cid, name) for cid, name in item.tool_calls),
                index=index,
                first_call=before + 1 if before < count else None,
                origin=origins[index],
                resolved_tool_name=resolved,
            )
        )
    return RunMessages(
        run_id=run_id,
        user_message=None,
        messages=messages,
        calls=model_calls_out,
        final_window=tuple(live),
        recorded_records=[],
    )
