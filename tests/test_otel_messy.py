"""OpenTelemetry traces as a stranger brings them: copies, gzip twins, cut lines, cut
attributes, a protobuf file named .json, an empty file. Every command names each problem
(file, line, trace or run, reason), reads the rest and never raises.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.cli import main
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.tables.build import read_runs

from .test_otel_read import _trace

COMMANDS = [
    ["ledger"],
    ["gates"],
    ["check"],
    ["whatif", "--policy", "sliding:keep=4"],
    ["compare", "--policy", "none", "--policy", "sliding:keep=4"],
]


def _lines(name: str) -> list[str]:
    return gzip.open(_trace(name), "rt").read().splitlines()


def _cut_line(tmp_path: Path) -> tuple[Path, str]:
    """genai-openai's traces with their second line cut in the middle, and a trace id
    that line held."""
    lines = _lines("genai-openai.jsonl.gz")
    held = json.loads(lines[1])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    lines[1] = lines[1][: len(lines[1]) // 2]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, held


def test_a_cut_line_names_the_traces_it_held(tmp_path):
    path, held = _cut_line(tmp_path)
    tables = read_runs([path], workers=1)
    (problem,) = tables.problems.to_pylist()
    assert (problem["path"], problem["line"]) == (str(path), 2)
    assert problem["reason"].startswith("invalid JSON: ")
    assert f"it held spans of trace(s) {held}" in problem["reason"]
    assert problem["reason"].endswith(": their runs lack them")


def test_two_traces_of_one_conversation_copied_are_one_duplicate_line(tmp_path):
    source = _trace("genai-openai-nocontent.jsonl")
    shutil.copyfile(source, tmp_path / "x.jsonl")
    (tmp_path / "x.jsonl.gz").write_bytes(gzip.compress(source.read_bytes()))
    tables = read_runs([tmp_path], workers=1)
    rows = tables.duplicates.to_pylist()
    conversation = [row for row in rows if row["run_id"].startswith("conv-")]
    assert len(conversation) == 1
    assert len(rows) == tables.runs.num_rows == 3


def test_a_copied_folder_of_traces_says_each_file_once_with_its_count(tmp_path):
    """Each trace file copied holds many runs on a few lines: one line per file copied,
    counting its runs, not one per run and line."""
    names = ["genai-anthropic.jsonl.gz", "openai-v2-latest.jsonl"]
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        for name in names:
            shutil.copyfile(_trace(name), tmp_path / folder / name)
    result = CliRunner().invoke(main, ["ledger", str(tmp_path / "a"), str(tmp_path / "b")])
    tables = read_runs([tmp_path / "a"], workers=1)
    paths = tables.runs["source_path"].to_pylist()
    counts = [paths.count(str(tmp_path / "a" / name)) for name in names]
    assert counts == [8, 5]
    duplicates = [line for line in result.stderr.splitlines() if "duplicate" in line]
    assert duplicates == [
        f"contextledger: duplicate {tmp_path / 'b' / name}: {count} runs the same as in "
        f"{tmp_path / 'a' / name}, each counted once"
        for name, count in zip(names, counts, strict=True)
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_names_messy_inputs_without_a_traceback(tmp_path, command):
    cut, held = _cut_line(tmp_path)
    (tmp_path / "empty.jsonl").write_bytes(b"")
    binary = tmp_path / "traces.json"  # an OTLP protobuf request, given a JSON name
    binary.write_bytes(b"\n\x8d\x3f\n\x8a\x01\n\x1f\n\x16telemetry.sdk.language")
    copy = tmp_path / "copy.jsonl.gz"
    shutil.copyfile(_trace("genai-anthropic.jsonl.gz"), copy)
    shutil.copyfile(_trace("genai-anthropic.jsonl.gz"), tmp_path / "again.jsonl.gz")
    result = CliRunner().invoke(main, [*command, str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # inputs named as unreadable
    errors = result.stderr
    assert "Traceback" not in errors
    assert f"{cut}:2: invalid JSON" in errors and held in errors
    assert f"{binary}: an OTLP protobuf file (binary)" in errors
    assert "duplicate" in errors and "counted once" in errors
    assert result.stdout.strip()  # the rest is still read and answered


def _input_messages_cut(tmp_path: Path) -> tuple[Path, str]:
    """genai-anthropic's traces with one span's ``gen_ai.input.messages`` cut mid-way,
    and that span's trace id."""
    out, cut = [], ""
    for line in _lines("genai-anthropic.jsonl.gz"):
        document = json.loads(line)
        for resource in document["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for attribute in span.get("attributes", []):
                        if attribute["key"] == "gen_ai.input.messages" and not cut:
                            text = attribute["value"]["stringValue"]
                            attribute["value"]["stringValue"] = text[: len(text) // 2]
                            cut = span["traceId"]
        out.append(json.dumps(document, separators=(",", ":")))
    path = tmp_path / "cut-messages.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path, cut


def test_a_cut_message_attribute_is_the_what_ifs_problem_not_the_ledgers(tmp_path):
    path, trace = _input_messages_cut(tmp_path)
    clean = read_runs([_trace("genai-anthropic.jsonl.gz")], workers=1)
    files = read_runs([path], workers=1)
    assert files.problems.num_rows == 0
    ingest([path], tmp_path / "archive", workers=1)
    archived = ArchiveTables(Archive.open(tmp_path / "archive"), "corrected")
    assert archived.problems.num_rows == 0
    for tables in (files, archived):
        assert_frame_equal(
            compute_ledger(tables).rows(), compute_ledger(clean).rows(), check_exact=True
        )
    (problem,) = read_inputs([path]).problems
    assert (problem.path, problem.line, problem.run_id) == (str(path), 1, trace)
    assert problem.reason.startswith("attribute gen_ai.input.messages is not valid JSON")


def test_a_cut_message_attribute_is_said_as_read_in_part_not_skipped(tmp_path):
    """Its run is still replayed (the rest of the run was read): not ``skipped``; a part
    of the input could not be read, so the exit status is 1 (docs/cli.md)."""
    path, trace = _input_messages_cut(tmp_path)
    for command in ("whatif", "compare"):
        result = CliRunner().invoke(main, [command, str(path), "--policy", "none"])
        assert result.exit_code == 1, result.output
        lines = [line for line in result.stderr.splitlines() if "is not valid JSON" in line]
        assert lines == [
            f"contextledger: read in part {path}:1 (run {trace}): attribute "
            + lines[0].partition(": attribute ")[2]
        ]
        assert "skipped" not in result.stderr


def test_an_operation_name_that_is_no_text_is_named_and_the_rest_read(tmp_path):
    """An array where ``gen_ai.operation.name`` should be a string: its span is named (a
    problem of the run), not read as a model call, and nothing raises."""
    lines = _lines("genai-openai.jsonl.gz")
    chat = '{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}'
    assert chat in lines[0]
    array = '{"arrayValue":{"values":[{"stringValue":"chat"}]}}'
    lines[0] = lines[0].replace(chat, chat.replace('{"stringValue":"chat"}', array), 1)
    path = tmp_path / "array-operation.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="gen_ai.operation.name is a list"):
        tables = read_runs([path], workers=1)
    clean = read_runs([_trace("genai-openai.jsonl.gz")], workers=1)
    assert tables.runs.num_rows == clean.runs.num_rows
    (problem,) = tables.problems.to_pylist()
    assert (problem["path"], problem["line"]) == (str(path), 1)
    assert problem["run_id"] in tables.runs["run_id"].to_pylist()
    assert problem["reason"] == (
        "attribute gen_ai.operation.name is a list, not a text: the span is read as "
        "neither a model call nor a tool's execution"
    )
    result = CliRunner().invoke(main, ["ledger", str(path)])
    assert "Traceback" not in result.output, result.output
