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

from contextledger.read.otel import _spans as spans_module
from contextledger.read.otel import read_trace_file, sniff
from contextledger.read.otel._otlp import decode_request, span_attributes
from contextledger.read.otel._spans import _messages_of, _output_calls

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
    values = []
    for path in TRACES:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        for line in data.splitlines():
            for resource in decode_request(line).resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        for attribute in span_attributes(span):
                            if attribute.key == KEY:
                                value = msgspec.json.decode(attribute.value)
                                values.append(value["stringValue"])
    return values


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
    for cache in (spans_module._OFFERS, spans_module._SCALARS, spans_module._TOOL_SETS):
        cache.clear()
    assert records() == warm
