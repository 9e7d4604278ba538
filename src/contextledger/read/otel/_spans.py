"""One OTLP span reduced to what the ledger and the what-if read: a small record.

Two dialects name the same facts: the OpenTelemetry GenAI semantic conventions
(``gen_ai.*``) and OpenInference's flattened ``llm.*`` keys (Phoenix). Both are read
into one :class:`SpanRecord` (tool definitions measured in :mod:`._offers`); a record
keeps names, ids, counts and (only when a what-if asks) message texts, never the
span's JSON. Deliberately not read: span events and log records (where semconv 1.30
instrumentations put content), and OpenLLMetry's ``gen_ai.prompt.{i}.*`` keys.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from contextledger.read.jsjson import js_stringify
from contextledger.read.otel._offers import (
    DEFINITIONS,
    SCHEMA,
    UNREADABLE,
    content_value,
    offers_of,
    tool_set_offers,
)
from contextledger.read.otel._otlp import (
    Span,
    as_int,
    decode_value,
    hex_id,
    span_attributes,
    start_nanos,
)

#: ``gen_ai.operation.name`` values that are one model call (semconv 1.27+).
MODEL_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
#: ``gen_ai.operation.name`` of a tool's execution.
TOOL_OPERATION = "execute_tool"
#: Message part types the conventions define (1.37+ and semantic-conventions-genai).
KNOWN_PART_TYPES = frozenset(
    {
        "text",
        "tool_call",
        "tool_call_response",
        "reasoning",
        "blob",
        "file",
        "file_data",
        "uri",
        "server_tool_call",
        "server_tool_call_response",
    }
)


class Said(msgspec.Struct, frozen=True, gc=False):
    """One message as a call sent or received it: role, text, the tool calls it makes,
    the call it answers."""

    role: str
    content: str
    tool_calls: tuple[tuple[str, str], ...] = ()
    tool_call_id: str | None = None


class SpanRecord(msgspec.Struct, array_like=True, gc=False):
    """What one span says, in the terms the ledger and the what-if read (written to
    disk past a budget as an array: :mod:`~contextledger.read.otel._spill`).

    ``tools`` is None when the span carries no tool definitions at all (content capture
    off, or an instrumentation that never records them), ``()`` when it says none were
    offered. ``tool_calls`` likewise for the output messages.
    """

    trace_id: str
    span_id: str
    parent_id: str
    start: int
    path: str
    line: int | None
    #: Position of the span among the spans of its file (breaks start-time ties).
    position: int
    #: ``"call"`` (a model call), ``"tool"`` (a tool's execution) or ``"other"``.
    role: str = "other"
    conversation_id: str | None = None
    response_id: str | None = None
    tools: tuple[tuple[str, int], ...] | None = None
    tool_calls: tuple[tuple[str, str], ...] | None = None
    #: An execution's ``(gen_ai.tool.call.id, gen_ai.tool.name)``.
    executed: tuple[str, str] | None = None
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: Set only when messages are asked for: what the call sent and received.
    system: tuple[Said, ...] | None = None
    inputs: tuple[Said, ...] | None = None
    outputs: tuple[Said, ...] | None = None
    #: What could not be read on this span, each said once.
    problems: tuple[str, ...] = ()
    #: Whether the tool definitions attribute was present but unreadable.
    tools_unreadable: bool = False
    #: Whether the span carries any content attribute (messages, instructions, tool
    #: definitions): content capture was on, so no definitions means none offered.
    captured: bool = False
    #: ``droppedAttributesCount``: attributes lost to the SDK's span attribute limit.
    dropped_attributes: int = 0
    #: How many of ``problems`` (the leading ones) concern the ledger; the rest concern
    #: only the message texts a what-if reads. Derived from ``problems``, so left out of
    #: what a copy is compared by (and of an archive's digest of the run).
    ledger_problems: int = 0

    def same_content(self, other: SpanRecord) -> bool:
        """Equal in everything read but where it was read (a copy of the same span)."""
        return _content(self) == _content(other)


def _content(record: SpanRecord) -> tuple[Any, ...]:
    fields = msgspec.structs.astuple(record)
    return fields[:4] + fields[7:-1]


_CONVERSATION_KEYS = ("gen_ai.conversation.id", "session.id")
_INPUT_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
)
_CACHE_READ_KEYS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_CACHE_WRITE_KEYS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write",
)
_CONTENT_KEYS = frozenset(
    {
        "gen_ai.tool.definitions",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
    }
)
_SCALAR_KEYS = frozenset(
    {
        "gen_ai.operation.name",
        "openinference.span.kind",
        "gen_ai.response.id",
        "gen_ai.tool.call.id",
        "gen_ai.tool.name",
        "tool.name",
        "tool_call.id",
        *_CONVERSATION_KEYS,
        *_INPUT_TOKEN_KEYS,
        *_CACHE_READ_KEYS,
        *_CACHE_WRITE_KEYS,
    }
)
#: Attribute kinds, which the hot loop of :func:`span_record` compares by identity.
_SKIP, _SCALAR, _SEEN = "skip", "scalar", "seen"
_CONTENT, _INPUT, _DEFINITION, _FLAT = "content", "input", "definitions", "flat"
#: An OpenInference output message's key the ledger reads for its presence only: an
#: output message recorded without a tool call says the call made none (``()``), as the
#: what-if's read of its texts says, not that the outputs went unrecorded (None).
_PRESENT = "present"
#: OpenInference's flattened content keys.
_CONTENT_PREFIXES = ("llm.tools.", "llm.input_messages.", "llm.output_messages.")
#: What each exactly named attribute is: a scalar, content both readers use, content only
#: a what-if reads (input messages), or tool definitions (decoded once per value).
_EXACT = {
    **dict.fromkeys(_SCALAR_KEYS, _SCALAR),
    "gen_ai.output.messages": _CONTENT,
    "gen_ai.input.messages": _INPUT,
    "gen_ai.system_instructions": _INPUT,
    "gen_ai.tool.definitions": _DEFINITION,
}


#: Each attribute key's kind, found once per key (:func:`_classify`), with and without
#: the messages a what-if reads.
_KINDS: dict[bool, dict[str, str]] = {False: {}, True: {}}
_KINDS_KEPT = 65536


def _classify(key: str, messages: bool) -> str:
    """What an attribute is to the reader: an :data:`_EXACT` kind, ``"flat"`` (an
    OpenInference message key read), ``"present"`` (one whose value is not read),
    ``"seen"`` (content, not read here: capture was on) or ``"skip"``."""
    kind = _EXACT.get(key)
    if kind is _INPUT and not messages:
        kind = _SEEN
    elif kind is None:
        if not key.startswith(_CONTENT_PREFIXES):
            kind = _SKIP
        elif key.startswith("llm.tools."):
            kind = _DEFINITION if key.endswith(SCHEMA) else _SEEN
        elif messages or (key.startswith(_OUTPUT_PREFIX) and ".tool_calls." in key):
            kind = _FLAT
        elif key.startswith(_OUTPUT_PREFIX):
            kind = _PRESENT
        else:
            kind = _SEEN
    kinds = _KINDS[messages]
    if len(kinds) >= _KINDS_KEPT:
        kinds.clear()
    kinds[key] = kind
    return kind


#: Scalar values (an operation name, a token count, an id) by their raw JSON: most repeat
#: from span to span, and a lookup is a third of a decode.
_SCALARS: dict[bytes, Any] = {}
_SCALARS_KEPT = 65536


def span_record(
    span: Span, path: str, line: int | None, position: int, *, messages: bool
) -> SpanRecord:
    """The record of ``span``; ``messages``: also keep the message texts it carries."""
    scalars: dict[str, Any] = {}
    contents: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    definitions: dict[str, msgspec.Raw] = {}  # decoded once per distinct value (offers_of)
    problems: list[str] = []
    captured = False
    attributes = span.attributes
    if not isinstance(attributes, list):  # a LenientSpan's, decoded here
        try:
            attributes = span_attributes(span)
        except msgspec.DecodeError as error:
            attributes = []
            problems.append(f"the span's attributes are not OTLP key/values ({error})")
    kind_of = _KINDS[messages].get
    known_scalar = _SCALARS.get
    for attribute in attributes:
        key = attribute.key
        kind = kind_of(key) or _classify(key, messages)
        if kind is _SKIP:
            continue
        if kind is _SEEN:
            captured = True
            continue
        if kind is _PRESENT:
            captured = True
            flat[key] = None
            continue
        if kind is _SCALAR:
            raw = bytes(attribute.value)
            value = known_scalar(raw, UNREADABLE)
            if value is UNREADABLE:
                try:
                    value = decode_value(attribute.value)
                except (msgspec.DecodeError, RecursionError):
                    problems.append(f"attribute {key} is not an OTLP value")
                    continue
                if isinstance(value, str | int | float | bool):
                    if len(_SCALARS) >= _SCALARS_KEPT:
                        _SCALARS.clear()
                    _SCALARS[raw] = value
            scalars[key] = value
            continue
        captured = True
        if kind is _DEFINITION:
            definitions[key] = attribute.value
            continue
        try:
            value = decode_value(attribute.value)
        except (msgspec.DecodeError, RecursionError):
            problems.append(f"attribute {key} is not an OTLP value")
            continue
        if kind is _FLAT:
            flat[key] = value
        else:
            contents[key] = value
    record = SpanRecord(
        _trace_id(span.trace_id),
        _span_id(span.span_id),
        _span_id(span.parent_span_id) if span.parent_span_id else "",
        start_nanos(span),
        path,
        line,
        position,
    )
    record.captured = captured
    record.dropped_attributes = span.dropped_attributes_count
    if scalars:
        operation = scalars.get("gen_ai.operation.name")
        if operation is not None and not isinstance(operation, str):
            problems.append(
                f"attribute gen_ai.operation.name is a {type(operation).__name__}, not a "
                "text: the span is read as neither a model call nor a tool's execution"
            )
            operation = ""  # named, and no operation (not None: the span kind is not asked)
        span_kind = scalars.get("openinference.span.kind")
        record.conversation_id = _first_text(scalars, _CONVERSATION_KEYS)
        if operation in MODEL_OPERATIONS or (operation is None and span_kind == "LLM"):
            record.role = "call"
            _read_call(record, scalars, contents, flat, definitions, problems, messages)
        elif operation == TOOL_OPERATION or (operation is None and span_kind == "TOOL"):
            record.role = "tool"
            call_id = _first_text(scalars, ("gen_ai.tool.call.id", "tool_call.id"))
            name = _first_text(scalars, ("gen_ai.tool.name", "tool.name"))
            if call_id is not None or name is not None:
                record.executed = (call_id or "", name or "")
    if problems:
        record.problems = tuple(dict.fromkeys(problems))
        if record.role != "call":
            record.ledger_problems = len(record.problems)
    return record


#: Trace ids as read and as kept (:func:`hex_id`): the spans of a trace share one, so
#: it is checked once, not once a span.
_TRACE_IDS: dict[str, str] = {}
_TRACE_IDS_KEPT = 4096


def _trace_id(value: str) -> str:
    found = _TRACE_IDS.get(value)
    if found is None:
        if len(_TRACE_IDS) >= _TRACE_IDS_KEPT:
            _TRACE_IDS.clear()
        found = _TRACE_IDS[value] = hex_id(value, 16)
    return found


_LOWER_SPAN_ID = re.compile("[0-9a-f]{16}").fullmatch


def _span_id(value: str) -> str:
    """A span id as :func:`hex_id` gives it, checked at once when it is as OTLP JSON
    writes it (lower-case hex)."""
    return value if _LOWER_SPAN_ID(value) else hex_id(value, 8)


def _first_text(values: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        found = values.get(key)
        if isinstance(found, str) and found:
            return found
    return None


def _first_int(values: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if key in values and (found := as_int(values[key])) is not None:
            return found
    return None


def _read_call(
    record: SpanRecord,
    scalars: dict[str, Any],
    contents: dict[str, Any],
    flat: dict[str, Any],
    definitions: dict[str, msgspec.Raw],
    problems: list[str],
    messages: bool,
) -> None:
    record.response_id = _first_text(scalars, ("gen_ai.response.id",))
    record.input_tokens = _first_int(scalars, _INPUT_TOKEN_KEYS)
    record.cache_read_tokens = _first_int(scalars, _CACHE_READ_KEYS)
    record.cache_write_tokens = _first_int(scalars, _CACHE_WRITE_KEYS)
    if DEFINITIONS in definitions:
        offers = offers_of(definitions[DEFINITIONS], DEFINITIONS, problems)
    elif definitions:
        offers = tool_set_offers(definitions, problems)
    else:
        offers = ()
    if offers is None:
        record.tools_unreadable = True
    elif definitions:
        record.tools = offers
    called = None if messages else _output_calls(contents.get(_OUTPUTS_KEY), problems)
    if called is not None:
        record.tool_calls = called
        outputs = None
    elif messages or _OUTPUTS_KEY in contents:
        outputs = _messages_of(contents, flat, _OUTPUTS_KEY, "llm.output_messages.", problems)
        if outputs is not None:
            record.tool_calls = tuple(call for said in outputs for call in said.tool_calls)
    else:  # OpenInference's, whose texts the ledger does not read
        outputs = None
        record.tool_calls = _openinference_calls(flat) if flat else None
    # what the ledger reads ends here: later problems (the inputs') touch the what-if only
    if problems:
        record.ledger_problems = len(dict.fromkeys(problems))
    if messages:
        record.outputs = outputs
        record.inputs = _messages_of(
            contents, flat, "gen_ai.input.messages", "llm.input_messages.", problems
        )
        record.system = _system_of(contents, problems)


_OUTPUTS_KEY = "gen_ai.output.messages"


class _Part(msgspec.Struct, gc=False):
    """A message part as the ledger reads it: its type, and a tool call's id and name
    (anything else in it is skipped undecoded)."""

    type: Any = None
    id: Any = None
    name: Any = None


class _OutputMessage(msgspec.Struct, gc=False):
    parts: list[_Part] | None = None


_OUTPUT_MESSAGES = msgspec.json.Decoder(list[_OutputMessage])


def _output_calls(value: Any, problems: list[str]) -> tuple[tuple[str, str], ...] | None:
    """The tool calls of semconv output messages given as JSON text, decoded into
    :class:`_Part` s (names and ids only, not every text as Python objects); None when
    the text is not of that shape or not JSON (then the general path reads it and names
    what is wrong) or not text at all. Gives what the general path gives, problems too.
    """
    if not isinstance(value, str):
        return None
    try:
        decoded = _OUTPUT_MESSAGES.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return None
    calls = []
    for message in decoded:
        for part in message.parts or ():
            kind = part.type
            if not isinstance(kind, str):
                problems.append(f"attribute {_OUTPUTS_KEY} holds a message part without a type")
            elif kind == "tool_call":
                calls.append((str(part.id or ""), str(part.name or "")))
            elif kind not in KNOWN_PART_TYPES:
                problems.append(
                    f"attribute {_OUTPUTS_KEY} holds a message part of unknown type {kind!r}: "
                    "not read"
                )
    return tuple(calls)


def _indexed(flat: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``prefix{i}.rest`` keys grouped by ``i``: ``{i: {rest: value}}``."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit():
            out.setdefault(int(index), {})[rest] = value
    return dict(sorted(out.items()))


def _messages_of(
    contents: dict[str, Any],
    flat: dict[str, Any],
    key: str,
    prefix: str,
    problems: list[str],
) -> tuple[Said, ...] | None:
    if key in contents:
        value = content_value(contents[key], key, problems)
        if value is UNREADABLE:
            return None
        if not isinstance(value, list):
            problems.append(f"attribute {key} is not a list of messages")
            return None
        return tuple(said for message in value for said in _semconv_message(message, key, problems))
    grouped = _indexed(flat, prefix)
    if not grouped:
        return None
    return tuple(_openinference_message(fields) for fields in grouped.values())


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return js_stringify(value) or ""


def _semconv_message(message: Any, key: str, problems: list[str]) -> list[Said]:
    """One semconv ``ChatMessage`` as the messages a window holds: its text and tool
    calls as one message, and each tool result part as a message of its own."""
    if not isinstance(message, dict):
        problems.append(f"attribute {key} holds a message that is not an object")
        return []
    role = str(message.get("role") or "")
    parts = message.get("parts")
    if not isinstance(parts, list):  # an older shape: {role, content}
        return [Said(role, _text(message.get("content") or ""))]
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    results: list[Said] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(kind, str):
            problems.append(f"attribute {key} holds a message part without a type")
            continue
        if kind in ("text", "reasoning"):
            texts.append(_text(part.get("content") or ""))
        elif kind == "tool_call":
            calls.append((str(part.get("id") or ""), str(part.get("name") or "")))
        elif kind == "tool_call_response":
            response = _text(part.get("response") if "response" in part else part.get("result"))
            results.append(Said("tool", response, (), str(part.get("id") or "")))
        elif kind not in KNOWN_PART_TYPES:
            problems.append(
                f"attribute {key} holds a message part of unknown type {kind!r}: not read"
            )
    said = []
    if texts or calls or not results:
        said.append(Said(role, "".join(texts), tuple(calls)))
    return said + results


def _openinference_message(fields: dict[str, Any]) -> Said:
    role = str(fields.get("message.role") or "")
    content = fields.get("message.content")
    if content is None:
        parts = _indexed(fields, "message.contents.")
        content = "".join(
            str(part.get("message_content.text") or "")
            for part in parts.values()
            if part.get("message_content.type", "text") == "text"
        )
    calls = _calls(fields)
    answered = fields.get("message.tool_call_id")
    return Said(role, _text(content), calls, answered if isinstance(answered, str) else None)


_OUTPUT_PREFIX = "llm.output_messages."
_CALLS_PREFIX = "message.tool_calls."


def _openinference_calls(flat: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The tool calls of OpenInference's output messages, as the texts' path gives them
    (:func:`_messages_of`), in one pass: ``llm.output_messages.{i}.message.tool_calls.
    {j}.tool_call.id`` and ``.function.name`` by ``(i, j)``; None when no message is."""
    messages = False
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in flat.items():
        if not key.startswith(_OUTPUT_PREFIX):
            continue
        index, _, rest = key[len(_OUTPUT_PREFIX) :].partition(".")
        if not index.isdigit():
            continue
        messages = True
        if rest.startswith(_CALLS_PREFIX):
            call, _, field = rest[len(_CALLS_PREFIX) :].partition(".")
            if call.isdigit():
                calls.setdefault((int(index), int(call)), {})[field] = value
    if not messages:
        return None
    return tuple(
        (str(call.get("tool_call.id") or ""), str(call.get("tool_call.function.name") or ""))
        for _, call in sorted(calls.items(), key=lambda item: item[0])
    )


def _calls(fields: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The ``(id, name)`` of each tool call of one OpenInference message."""
    return tuple(
        (str(call.get("tool_call.id") or ""), str(call.get("tool_call.function.name") or ""))
        for call in _indexed(fields, _CALLS_PREFIX).values()
    )


def _system_of(contents: dict[str, Any], problems: list[str]) -> tuple[Said, ...] | None:
    key = "gen_ai.system_instructions"
    if key not in contents:
        return None
    value = content_value(contents[key], key, problems)
    if value is UNREADABLE:
        return None
    parts = value if isinstance(value, list) else [value]
    texts = []
    for part in parts:
        if isinstance(part, dict):
            texts.append(_text(part.get("content") or ""))
        else:
            texts.append(_text(part))
    return (Said("system", "".join(texts)),)
