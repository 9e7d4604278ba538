"""The trace reader's fast paths give exactly what its general paths give: the tool
calls of output messages decoded into typed structs (names and ids only), and every
cache keyed by raw bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contextledger.read.otel import _offers as offers_module
from contextledger.read.otel import _spans as spans_module
from contextledger.read.otel import read_trace_file, sniff
from contextledger.read.otel._otlp import decode_request, span_attributes
from contextledger.read.otel._spans import _messages_of, _openinference_calls, _output_calls

from .conftest import REPO

TRACES = sorted(
    path
    for path in (REPO / "data" / "otel").rglob("*")
    if path.is_file() and sniff(path) == "otlp-json"
)
KEY = "gen_ai.output.messages"


def _general(value: Any) -> tuple[Any, list[str]]:
    problems: list[str] = []
    said = _messages_of({KEY: value}, {}, KEY, "llm.output_messages.", problems)
    calls = None if said is None else tuple(call for one in said for call in one.tool_calls)
    return calls, problems


def _recorded_outputs() -> list[str]:
    return [
        msgspec.json.decode(attribute.value)["stringValue"]
        for span in _recorded_spans()
        for attribute in span_attributes(span)
        if attribute.key == KEY
    ]


def test_every_recorded_output_gives_the_general_paths_calls() -> None:
    outputs = _recorded_outputs()
    assert len(outputs) > 100
    for text in outputs:
        problems: list[str] = []
        assert (_output_calls(text, problems), problems) == _general(text)


DAMAGED = [
    [{"role": "assistant", "parts": [{"type": "hologram"}, {"content": "no type"}]}],
    [{"role": "assistant", "parts": [{"type": "tool_call", "id": 7, "name": None}]}],
    [{"role": "assistant", "parts": [{"type": 3}, {"type": "tool_call", "name": "x"}]}],
    [{"role": "assistant", "content": "an older shape"}, {"role": "user", "parts": None}],
    [{"role": "assistant", "parts": "not a list"}],
    [{"role": "assistant", "parts": ["not an object"]}],
    ["not a message"],
    {"not": "a list"},
    [],
]


@pytest.mark.parametrize("value", DAMAGED, ids=range(len(DAMAGED)))
def test_damaged_outputs_give_the_general_paths_calls_and_problems(value: Any) -> None:
    text = json.dumps(value)
    problems: list[str] = []
    fast = _output_calls(text, problems)
    if fast is None:  # a shape the typed decoder refuses: the general path reads it
        assert problems == []
    else:
        assert (fast, problems) == _general(text)


def test_a_truncated_output_is_left_to_the_general_path() -> None:
    assert _output_calls('[{"role": "assistant", "parts": [{"type": "tool_c', []) is None


def test_reading_with_cold_and_warm_caches_gives_the_same_records() -> None:
    def records() -> list[Any]:
        return [
            msgspec.structs.astuple(record)
            for path in TRACES
            for record in read_trace_file(Path(path)).spans
        ]

    warm = records()
    for cache in (
        offers_module._OFFERS,
        offers_module._TOOL_SETS,
        spans_module._SCALARS,
        spans_module._TRACE_IDS,
    ):
        cache.clear()
    assert records() == warm


def _recorded_spans() -> list[Any]:
    spans = []
    for path in TRACES:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        for line in data.splitlines():
            for resource in decode_request(line).resource_spans:
                for scope in resource.scope_spans:
                    spans.extend(scope.spans)
    return spans


def _general_calls(flat: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    said = _messages_of({}, flat, KEY, "llm.output_messages.", [])
    return None if said is None else tuple(call for one in said for call in one.tool_calls)


def test_every_recorded_openinference_output_gives_the_general_paths_calls() -> None:
    read = 0
    for span in _recorded_spans():
        flat = {
            attribute.key: spans_module.decode_value(attribute.value)
            for attribute in span_attributes(span)
            if attribute.key.startswith("llm.output_")
        }
        read += bool(flat)
        assert _openinference_calls(flat) == _general_calls(flat)
    assert read > 50


def test_every_recorded_span_gives_the_ledger_and_the_whatif_the_same_tool_calls() -> None:
    """The failing case: an OpenInference reply without a tool call read as outputs not
    recorded (None) by the ledger, and as outputs holding none (``()``) by the what-if."""
    replies = 0
    for position, span in enumerate(_recorded_spans()):
        ledger = spans_module.span_record(span, "t", 1, position, messages=False)
        whatif = spans_module.span_record(span, "t", 1, position, messages=True)
        assert ledger.tool_calls == whatif.tool_calls, span.name
        replies += ledger.tool_calls == ()
    assert replies > 10


_CALL = "llm.output_messages.{}.message.tool_calls.{}.tool_call.{}"
#: OpenInference output messages as instrumentations and strangers write them: indices
#: out of order, with leading zeros, not numbers; calls without an id or a name.
OPENINFERENCE_OUTPUTS = [
    {_CALL.format(1, 0, "id"): "b", _CALL.format(0, 1, "function.name"): "y"},
    {_CALL.format(0, 0, "id"): "a", _CALL.format("00", 0, "function.name"): "x"},
    {_CALL.format("x", 0, "id"): "a", _CALL.format(2, "y", "id"): "b"},
    {_CALL.format(0, 10, "id"): "k", _CALL.format(0, 9, "id"): 7},
    {_CALL.format(3, 0, "function.arguments"): "{}"},
    {"llm.output_messages.0.message.role": "assistant"},
    {"llm.output_messages_extra.0.message.tool_calls.0.tool_call.id": "z"},
    {},
]


@pytest.mark.parametrize("flat", OPENINFERENCE_OUTPUTS, ids=range(len(OPENINFERENCE_OUTPUTS)))
def test_odd_openinference_outputs_give_the_general_paths_calls(flat: dict[str, Any]) -> None:
    assert _openinference_calls(flat) == _general_calls(flat)


def _span(attributes: dict[str, Any]) -> Any:
    """One span with ``attributes`` (each a string value), decoded as a line gives it."""
    values = [{"key": key, "value": {"stringValue": value}} for key, value in attributes.items()]
    span = {"traceId": "ab" * 16, "spanId": "0123456789abcdef", "attributes": values}
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    return decode_request(line.encode()).resource_spans[0].scope_spans[0].spans[0]


def _definitions(name: str) -> str:
    return json.dumps([{"type": "function", "name": name, "parameters": {"type": "object"}}])


def test_tool_definitions_of_one_length_each_give_their_own_offers() -> None:
    names = [f"tool_{number:02d}" for number in range(offers_module._SAME_LENGTH_KEPT + 4)]
    assert len({len(_definitions(name)) for name in names}) == 1
    for _ in range(2):  # measured, then looked up (the first ones measured again)
        for name in names:
            span = _span(
                {"gen_ai.operation.name": "chat", "gen_ai.tool.definitions": _definitions(name)}
            )
            record = spans_module.span_record(span, "t", 1, 0, messages=False)
            assert record.tools == (
                (name, offers_module.approx_tokens(json.loads(_definitions(name))[0])),
            )


def test_openinference_tool_sets_of_one_shape_each_give_their_own_offers() -> None:
    def schema(name: str) -> str:
        return json.dumps({"type": "function", "function": {"name": name}})

    pairs = [
        (f"a{number:02d}", f"b{number:02d}")
        for number in range(offers_module._SAME_LENGTH_KEPT + 4)
    ]
    for _ in range(2):
        for first, second in pairs:
            span = _span(
                {
                    "openinference.span.kind": "LLM",
                    "llm.tools.1.tool.json_schema": schema(second),
                    "llm.tools.0.tool.json_schema": schema(first),
                }
            )
            record = spans_module.span_record(span, "t", 1, 0, messages=False)
            assert [name for name, _ in record.tools] == [first, second]
