"""The committed OpenTelemetry recordings are well-formed OTLP JSON Lines, and their truth
files name exactly the traces the files hold, with as many model-call spans per call as
the family's instrumentations write (one; two when stacked; none for some frameworks).

These read the files only: re-recording needs the ``record`` extra (record/otel/), which
the tests do not install.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = (
    REPO / "data" / "otel",
    REPO / "tests" / "data" / "otel-attribute-limit",
    REPO / "tests" / "data" / "otel-huge-attribute",
)
MODEL_CALL_OPERATIONS = {"chat", "generate_content", "text_completion"}
HEX = {"traceId": re.compile(r"[0-9a-f]{32}"), "spanId": re.compile(r"[0-9a-f]{16}")}


def _lines(path: Path) -> list[str]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8").splitlines()


def _spans(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            yield from scope_spans["spans"]


def _is_model_call(span: dict[str, Any]) -> int:
    attributes = {item["key"]: item["value"] for item in span.get("attributes", [])}
    operation = attributes.get("gen_ai.operation.name", {}).get("stringValue")
    kind = attributes.get("openinference.span.kind", {}).get("stringValue")
    return int(operation in MODEL_CALL_OPERATIONS or kind == "LLM")


def _truth(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "truth.json").read_text())


def _trace_files(folder: Path) -> list[Path]:
    return sorted((folder / _truth(folder)["traces_folder"]).iterdir())


def _int_values(value: Any) -> Iterator[Any]:
    """Every ``intValue`` inside an OTLP attribute value, however deeply nested."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "intValue":
                yield inner
            else:
                yield from _int_values(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _int_values(inner)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_every_line_is_an_export_request_with_hex_ids_and_64_bit_ints_as_strings(
    folder: Path,
) -> None:
    for path in _trace_files(folder):
        for number, line in enumerate(_lines(path), start=1):
            request = json.loads(line)
            spans = list(_spans(request))
            assert spans, f"{path.name}:{number} holds no span"
            for span in spans:
                for field, pattern in HEX.items():
                    assert pattern.fullmatch(span[field]), f"{path.name}:{number} {field}"
                assert span.get("parentSpanId", "") == "" or HEX["spanId"].fullmatch(
                    span["parentSpanId"]
                )
                assert span["startTimeUnixNano"].isdigit()
                assert span["endTimeUnixNano"].isdigit()
                for number_text in _int_values(span.get("attributes", [])):
                    assert isinstance(number_text, str), f"{path.name}:{number} intValue"
                    assert number_text.lstrip("-").isdigit()


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_truth_names_exactly_the_traces_of_its_files_with_a_span_per_model_call(
    folder: Path,
) -> None:
    model_calls: dict[str, int] = defaultdict(int)
    traces_by_file: dict[str, set[str]] = defaultdict(set)
    for path in _trace_files(folder):
        for line in _lines(path):
            for span in _spans(json.loads(line)):
                traces_by_file[path.name].add(span["traceId"])
                model_calls[span["traceId"]] += _is_model_call(span)
    truth_calls: dict[str, int] = {}
    named_files: set[str] = set()
    for family in _truth(folder)["families"]:
        named_files.update(family["files"])
        in_files = set().union(*(traces_by_file[name] for name in family["files"]))
        for run in family["runs"]:
            assert set(run["trace_ids"]) <= in_files, (family["family"], run["scenario"])
            assert sum(run["calls_per_trace"]) == len(run["calls"])
            for trace_id, calls in zip(run["trace_ids"], run["calls_per_trace"], strict=True):
                truth_calls[trace_id] = calls * family["model_call_spans_per_call"]
    assert named_files == set(traces_by_file)
    assert truth_calls == dict(model_calls)


def test_one_trace_is_split_over_two_files_and_one_line_holds_several_traces() -> None:
    folder = FOLDERS[0]
    files_per_trace: dict[str, set[str]] = defaultdict(set)
    most_traces_in_a_line = 0
    for path in _trace_files(folder):
        for line in _lines(path):
            traces = {span["traceId"] for span in _spans(json.loads(line))}
            most_traces_in_a_line = max(most_traces_in_a_line, len(traces))
            for trace_id in traces:
                files_per_trace[trace_id].add(path.name)
    assert max(len(files) for files in files_per_trace.values()) == 2
    assert most_traces_in_a_line > 1


def test_truth_runs_are_keyed_once_each_with_calls_in_order() -> None:
    for folder in FOLDERS:
        keys = [run["run_key"] for family in _truth(folder)["families"] for run in family["runs"]]
        assert len(keys) == len(set(keys)), folder.name
        for family in _truth(folder)["families"]:
            for run in family["runs"]:
                assert run["calls"], run["scenario"]
                for call in run["calls"]:
                    assert len(call["called"]) == len(call["call_ids"])
                    assert call["content_captured"] == family["content_captured"]


def _carries_tool_definitions(span: dict[str, Any]) -> bool:
    return any(
        item["key"] == "gen_ai.tool.definitions" or item["key"].startswith("llm.tools.")
        for item in span.get("attributes", [])
    )


@pytest.mark.parametrize("folder", FOLDERS[:1], ids=lambda folder: folder.name)
def test_tool_definitions_are_on_the_spans_exactly_where_truth_says(folder: Path) -> None:
    with_definitions: set[str] = set()
    for path in _trace_files(folder):
        for line in _lines(path):
            for span in _spans(json.loads(line)):
                if _carries_tool_definitions(span):
                    with_definitions.add(span["traceId"])
    for family in _truth(folder)["families"]:
        for run in family["runs"]:
            carried = bool(with_definitions & set(run["trace_ids"]))
            assert carried == run["carries_tool_definitions"], (family["family"], run["scenario"])


def test_the_default_span_limit_drops_attributes_of_the_big_tool_set() -> None:
    folder = FOLDERS[1]
    dropped = sum(
        span.get("droppedAttributesCount", 0)
        for path in _trace_files(folder)
        for line in _lines(path)
        for span in _spans(json.loads(line))
    )
    assert dropped > 0
