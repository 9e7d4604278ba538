"""OpenTelemetry GenAI traces read into the run tables, checked against what was sent.

Every test reads the traces the real instrumentations recorded (``data/otel``; see its
README) and compares with ``truth.json``, which the recording script computed from what
it sent and received, never from the spans. Damaged inputs are made from those
recordings (a value cut, a span copied), never written by hand.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.cli import main
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.read.otel import (
    DEFINITIONS_NOT_RECORDED,
    NO_DEFINITIONS,
    NO_MODEL_CALL,
    NO_TOOLS_OFFERED,
    sniff,
)
from contextledger.tables.build import ACCOUNTING_MODES, read_accountings, read_runs

from .conftest import REPO, SAMPLE

OTEL = REPO / "data" / "otel"
TRUTH = json.loads((OTEL / "truth.json").read_text())
TRACES = sorted(path for path in OTEL.rglob("*") if path.is_file() and sniff(path) == "otlp-json")
LIMITED = REPO / "tests" / "data" / "otel-attribute-limit" / "traces"


def _trace(name: str) -> Path:
    """A trace file of the recordings by its name (wherever under data/otel it is)."""
    return next(path for path in TRACES if path.name == name)


def truth_runs() -> list[dict]:
    return [
        dict(run, family=family["family"], spans_per_call=family["model_call_spans_per_call"])
        for family in TRUTH["families"]
        for run in family["runs"]
    ]


def recorded_calls(run: dict) -> int:
    """The model calls a run's spans record (none where the instrumentation leaves them
    to another one that is not installed)."""
    return len(run["calls"]) if run["spans_per_call"] else 0


def metered(run: dict) -> bool:
    return bool(run["carries_tool_definitions"])


def truth_ledger(runs: list[dict]) -> pl.DataFrame:
    """Per tool, ``offered``, ``used`` and ``runs_seen`` as the script sent and received."""
    offered: Counter[str] = Counter()
    used: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for run in filter(metered, runs):
        names = set()
        for call in run["calls"]:
            offered.update(set(call["offered"]))
            used.update(call["called"])
            names.update(call["offered"])
        seen.update(names)
    tools = sorted(set(offered) | set(used))
    return pl.DataFrame(
        {
            "id": tools,
            "offered": [offered[t] for t in tools],
            "used": [used[t] for t in tools],
            "runs_seen": [seen[t] for t in tools],
        },
        schema={"id": pl.String, "offered": pl.Int64, "used": pl.Int64, "runs_seen": pl.Int64},
    )


def counts(tables) -> pl.DataFrame:
    rows = compute_ledger(tables).rows().filter(pl.col("kind") == "tool")
    return rows.select("id", "offered", "used", "runs_seen").sort("id")


def cut_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode().splitlines()


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def tables():
    return read_runs(TRACES, workers=1)


# ── the ledger equals what was sent ────────────────────────────────
def test_the_recordings_hold_every_instrumentation_family():
    families = {family["family"] for family in TRUTH["families"]}
    assert {"genai-openai", "genai-anthropic", "openinference-openai"} <= families
    assert len(TRACES) >= 6


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_ledger_equals_the_recorded_truth_exactly(mode):
    tables = read_runs(TRACES, mode=mode, workers=1)
    assert_frame_equal(counts(tables), truth_ledger(truth_runs()), check_exact=True)
    assert tables.problems.num_rows == 0


@pytest.mark.parametrize("family", [f["family"] for f in TRUTH["families"]])
def test_each_family_alone_equals_its_truth(family):
    chosen = next(f for f in TRUTH["families"] if f["family"] == family)
    files = [_trace(name) for name in chosen["files"]]
    tables = read_runs(files, workers=1)
    runs = [dict(run, family=family) for run in chosen["runs"]]
    assert_frame_equal(counts(tables), truth_ledger(runs), check_exact=True)


def test_each_run_is_keyed_by_conversation_or_trace_as_recorded(tables):
    read = {row["run_id"]: row for row in tables.runs.to_pylist()}
    truth = {run["run_key"]: run for run in truth_runs()}
    assert sorted(read) == sorted(truth)
    assert {key: read[key]["metered"] for key in truth} == {
        key: metered(run) for key, run in truth.items()
    }
    calls = {key: read[key]["model_call_count"] for key in truth}
    assert calls == {key: recorded_calls(run) for key, run in truth.items()}


def test_a_conversation_over_two_traces_is_one_run(tables):
    conversations = [run for run in truth_runs() if len(run["trace_ids"]) > 1]
    assert conversations
    read = {row["run_id"]: row for row in tables.runs.to_pylist()}
    for run in conversations:
        assert run["run_key"] not in run["trace_ids"]
        assert read[run["run_key"]]["model_call_count"] == sum(run["calls_per_trace"])


def test_runs_without_tool_definitions_are_named_with_the_fix_and_left_out(tables):
    runs = pl.DataFrame(tables.runs)
    offered = set(tables.offers["run_id"].to_pylist()) | set(tables.uses["run_id"].to_pylist())
    for run in truth_runs():
        row = runs.row(by_predicate=pl.col("run_id") == run["run_key"], named=True)
        if metered(run):
            assert row["refused_reason"] is None
            continue
        assert not row["metered"] and run["run_key"] not in offered
        captured = any(call["content_captured"] for call in run["calls"])
        if not recorded_calls(run):
            assert row["refused_reason"] == NO_MODEL_CALL
        elif not captured or row["refused_reason"] == NO_DEFINITIONS:  # or not on spans
            assert not captured or run["family"].endswith("semconv-1.30")
            assert row["refused_reason"] == NO_DEFINITIONS
            assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only" in NO_DEFINITIONS
        elif any(call["called"] for call in run["calls"]):
            assert row["refused_reason"] == DEFINITIONS_NOT_RECORDED
        else:
            assert row["refused_reason"] == NO_TOOLS_OFFERED


def test_the_cli_reads_a_trace_folder_with_exit_0_and_truth_counts(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in TRACES:
        shutil.copy(path, folder / path.name)
    result = run_cli("ledger", str(folder), "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    got = {row["id"]: (row["offered"], row["used"], row["runsSeen"]) for row in rows}
    expected = truth_ledger(truth_runs())
    assert got == {row[0]: row[1:] for row in expected.iter_rows()}
    assert "refused" in result.stderr and "span_only" in result.stderr


# ── how runs are put together ──────────────────────────────────────
def test_a_trace_split_over_files_read_in_any_order_is_one_run(tables):
    split = next(f for f in TRUTH["families"] if len(f["files"]) > 1)
    files = [_trace(name) for name in split["files"]]
    forward = read_runs(files, workers=1)
    backward = read_runs(files[::-1], workers=1)
    order = ["run_id", "call_index", "seq"]
    assert_frame_equal(
        pl.DataFrame(backward.offers).sort(order),
        pl.DataFrame(forward.offers).sort(order),
        check_exact=True,
    )
    assert sorted(backward.known_run_ids()) == sorted(forward.known_run_ids())
    long_run = next(run for run in split["runs"] if run["scenario"] == "long-run")
    row = pl.DataFrame(forward.runs).filter(pl.col("run_id") == long_run["run_key"])
    assert row["model_call_count"].to_list() == [len(long_run["calls"])]


def test_a_span_read_twice_counts_once_and_the_copy_is_named(tmp_path, tables):
    copy = tmp_path / "overlapping-export.jsonl"
    source = next(
        path for path in TRACES if "anthropic" in path.name and "nocontent" not in path.name
    )
    copy.write_text("\n".join(cut_lines(source)) + "\n")
    twice = read_runs([*TRACES, copy], workers=1)
    assert_frame_equal(counts(twice), counts(tables), check_exact=True)
    assert twice.problems.num_rows == 0
    copies = twice.duplicates.to_pylist()
    assert copies and {row["path"] for row in copies} == {str(copy)}


def test_a_folder_mixing_snapshots_and_traces_reads_both(tmp_path, tables):
    folder = tmp_path / "mixed"
    shutil.copytree(SAMPLE, folder)
    for path in TRACES:
        shutil.copy(path, folder / path.name)
    mixed = read_runs(folder, workers=1)
    alone = read_runs(SAMPLE, workers=1)
    assert mixed.runs.num_rows == alone.runs.num_rows + tables.runs.num_rows
    sample_offers = pl.DataFrame(mixed.offers).filter(pl.col("run_id").is_in(alone.known_run_ids()))
    assert_frame_equal(sample_offers, pl.DataFrame(alone.offers), check_exact=True)


# ── bad input is named, the rest is read ───────────────────────────
def _first_line_with(needle: str) -> tuple[Path, int, str]:
    for path in TRACES:
        for number, line in enumerate(cut_lines(path), start=1):
            if needle in line:
                return path, number, line
    raise AssertionError(needle)


def _rewritten(tmp_path: Path, path: Path, number: int, line: str) -> list[Path]:
    lines = cut_lines(path)
    lines[number - 1] = line
    damaged = tmp_path / f"damaged-{path.name.removesuffix('.gz')}"
    damaged.write_text("\n".join(lines) + "\n")
    return [damaged if other == path else other for other in TRACES]


def test_a_truncated_tool_definitions_value_is_named_and_the_run_left_out(tmp_path):
    path, number, line = _first_line_with("gen_ai.tool.definitions")
    request = json.loads(line)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for attribute in span["attributes"]:
                    if attribute["key"] == "gen_ai.tool.definitions":
                        text = attribute["value"]["stringValue"]
                        attribute["value"]["stringValue"] = text[: len(text) // 2]
                        trace = span["traceId"]
                        break
                else:
                    continue
                break
            else:
                continue
            break
        else:
            continue
        break
    files = _rewritten(tmp_path, path, number, json.dumps(request))
    read = read_runs(files, workers=1)
    problems = read.problems.to_pylist()
    assert len(problems) == 1
    problem = problems[0]
    assert problem["path"].endswith(f"damaged-{path.name.removesuffix('.gz')}")
    assert problem["line"] == number
    assert "gen_ai.tool.definitions is not valid JSON" in problem["reason"]
    run_id = problem["run_id"]
    keyed = next(run for run in truth_runs() if trace in run["trace_ids"])
    assert run_id == keyed["run_key"]
    rest = [run for run in truth_runs() if run["run_key"] != run_id]
    assert_frame_equal(counts(read), truth_ledger(rest), check_exact=True)


def test_an_unknown_part_type_is_named_once_and_the_ledger_unchanged(tmp_path, tables):
    path, number, line = _first_line_with('\\"type\\":\\"text\\"')
    damaged = line.replace('\\"type\\":\\"text\\"', '\\"type\\":\\"hologram\\"')
    read = read_runs(_rewritten(tmp_path, path, number, damaged), workers=1)
    reasons = read.problems["reason"].to_pylist()
    assert reasons and all("unknown type 'hologram'" in reason for reason in reasons)
    assert len(set(zip(read.problems["run_id"].to_pylist(), reasons, strict=True))) == len(reasons)
    assert_frame_equal(counts(read), counts(tables), check_exact=True)


def test_a_protobuf_file_is_named_in_one_line(tmp_path):
    protobuf = tmp_path / "traces.pb"
    # the opening bytes of an OTLP protobuf ExportTraceServiceRequest: field 1 (resource_spans)
    protobuf.write_bytes(b"\n\x8e\x01\n\x22\n\x20\n\x0cservice.name\x12\x10\n\x0echeckout\xff\xfe")
    result = run_cli("ledger", str(protobuf), *map(str, TRACES))
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if "traces.pb" in line]
    assert len(lines) == 1 and "OTLP protobuf" in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("stacking", ["nested", "sibling"])
def test_stacked_instrumentations_count_each_model_call_once(tmp_path, tables, stacking):
    """A framework's chat span around the client's (both instrumented) is one call, and so
    are two spans of one response (the same ``gen_ai.response.id``) side by side."""
    path, number, line = _first_line_with("gen_ai.tool.definitions")
    request = json.loads(line)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            added = []
            for span in scope["spans"]:
                keys = {a["key"]: a["value"] for a in span["attributes"]}
                if keys.get("gen_ai.operation.name") == {"stringValue": "chat"}:
                    copy = json.loads(json.dumps(span))
                    copy["spanId"] = span["spanId"][::-1]
                    if stacking == "nested":  # the framework's span: no response id
                        span["parentSpanId"] = copy["spanId"]
                        copy["attributes"] = [
                            a for a in copy["attributes"] if a["key"] != "gen_ai.response.id"
                        ]
                    added.append(copy)
            scope["spans"].extend(added)
    read = read_runs(_rewritten(tmp_path, path, number, json.dumps(request)), workers=1)
    assert read.problems.num_rows == 0
    assert_frame_equal(counts(read), counts(tables), check_exact=True)
    unplaced = ["source_path", "source_line", "run_order"]
    assert_frame_equal(
        pl.DataFrame(read.runs).drop(unplaced).sort("run_id"),
        pl.DataFrame(tables.runs).drop(unplaced).sort("run_id"),
        check_exact=True,
    )


def _edited_spans(path: Path, edit) -> list[str]:
    """The lines of a recorded trace file with ``edit(span)`` applied to every span."""
    lines = []
    for line in cut_lines(path):
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    edit(span)
        lines.append(json.dumps(request))
    return lines


def test_distinct_model_calls_that_share_a_response_id_each_count(tmp_path, tables):
    """Ollama's OpenAI-compatible server numbers responses ``chatcmpl-<0..998>``: ids
    repeat within a run, and each call still counts."""
    source = _trace("genai-openai.jsonl.gz")

    def same_id(span: dict) -> None:
        attributes = [a for a in span["attributes"] if a["key"] != "gen_ai.response.id"]
        keys = {a["key"]: a["value"] for a in attributes}
        if keys.get("gen_ai.operation.name") == {"stringValue": "chat"}:
            attributes.append({"key": "gen_ai.response.id", "value": {"stringValue": "chatcmpl-7"}})
        span["attributes"] = attributes

    edited = tmp_path / "ollama-ids.jsonl"
    edited.write_text("\n".join(_edited_spans(source, same_id)) + "\n")
    read = read_runs([edited if path == source else path for path in TRACES], workers=1)
    assert read.problems.num_rows == 0
    assert_frame_equal(counts(read), counts(tables), check_exact=True)


def test_a_conversation_over_traces_that_reuse_span_ids_keeps_every_span(tmp_path):
    """A span is its (trace id, span id): two traces of one conversation may reuse span
    ids (a deterministic id generator, a replayed test), and every call still counts."""
    source = _trace("genai-openai.jsonl.gz")
    alone = read_runs([source], workers=1)

    def in_conversation(span: dict) -> None:
        keys = {a["key"] for a in span["attributes"]}
        if "gen_ai.conversation.id" not in keys:
            conversation = {"stringValue": f"conv-{span['traceId']}"}
            span["attributes"].append({"key": "gen_ai.conversation.id", "value": conversation})

    def twin(span: dict) -> None:
        in_conversation(span)
        span["traceId"] = span["traceId"][::-1]

    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(_edited_spans(source, in_conversation)) + "\n")
    second = tmp_path / "second.jsonl"
    second.write_text("\n".join(_edited_spans(source, twin)) + "\n")
    read = read_runs([first, second], workers=1)
    assert read.problems.num_rows == 0 and read.runs.num_rows == alone.runs.num_rows
    doubled = counts(alone).with_columns(pl.col("offered") * 2, pl.col("used") * 2)
    assert_frame_equal(counts(read), doubled, check_exact=True)


@pytest.mark.parametrize("tokens", [10**23, 2**62, -5])
def test_usage_past_any_real_call_is_read_as_not_reported(tmp_path, tokens):
    """A usage count no real call reaches (or a negative one) is named once per run and
    read as not reported: never a traceback, never a wrapped sum, from files or an
    archive. It is a note (the count was read), not a problem: the exit status stays 0."""
    source = _trace("genai-openai.jsonl.gz")

    def usage(value):
        def edit(span: dict) -> None:
            kept = [a for a in span["attributes"] if a["key"] != "gen_ai.usage.input_tokens"]
            if value is not None and len(kept) < len(span["attributes"]):
                kept.append({"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(value)}})
            span["attributes"] = kept

        return edit

    files = {}
    for name, value in (("huge", tokens), ("unreported", None)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "traces.jsonl").write_text("\n".join(_edited_spans(source, usage(value))) + "\n")
        files[name] = folder
    inputs = read_inputs(files["huge"])
    assert inputs.problems == []
    said = [note for stream in inputs.streams for note in stream.notes]
    usage = [note for note in said if f"input_tokens of model call 1 is {tokens}" in note]
    assert len(usage) == len(inputs.streams) > 0
    assert {call.input_tokens for s in inputs.streams for call in s.calls} == {0}
    policy = ("--policy", "sliding:keep=2", "--format", "json")
    outputs = {}
    for name, folder in files.items():
        report = ingest([folder], tmp_path / f"{name}.archive", workers=1)
        assert report.problems == []  # nothing quarantined: the stream replays as read
        for where in (folder, tmp_path / f"{name}.archive"):
            result = run_cli("whatif", str(where), *policy)
            assert "Traceback" not in result.output and result.exit_code == 0, result.output
            if name == "huge":  # the same lines, from the files and from the archive
                noted = [line for line in result.stderr.splitlines() if str(tokens) in line]
                assert noted == [f"contextledger: {note}" for note in usage]
            outputs[name, where.suffix] = result.stdout
    assert outputs["huge", ""] == outputs["unreported", ""]
    assert outputs["huge", ".archive"] == outputs["unreported", ".archive"]


def test_a_cache_count_past_any_real_call_is_read_as_not_reported(tmp_path):
    """The recorded cache reads reach compare's audit: one no real call reaches is named
    and left out as the input count is, not a Polars overflow."""
    source = _trace("genai-openai.jsonl.gz")
    key = "gen_ai.usage.cache_read.input_tokens"

    def cache_read(value):
        def edit(span: dict) -> None:
            kept = [a for a in span["attributes"] if a["key"] != key]
            if value is not None and any(
                a["key"] == "gen_ai.usage.input_tokens" for a in span["attributes"]
            ):
                kept.append({"key": key, "value": {"intValue": str(value)}})
            span["attributes"] = kept

        return edit

    outputs = {}
    for name, value in (("huge", 10**23), ("unreported", None)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(_edited_spans(source, cache_read(value))) + "\n")
        result = run_cli("compare", str(path), "--policy", "none", "--format", "csv")
        assert "Traceback" not in result.output
        outputs[name] = result.stdout
    assert (
        f"{key} of model call 1 is {10**23}"
        in run_cli("whatif", str(tmp_path / "huge.jsonl"), "--policy", "none").output
    )
    assert outputs["huge"] == outputs["unreported"]


def test_attributes_lost_to_the_span_limit_are_named_not_metered():
    read = read_runs(LIMITED, workers=1)
    rows = read.runs.to_pylist()
    assert len(rows) == 1 and not rows[0]["metered"]
    assert "span attribute limit" in rows[0]["refused_reason"]
    assert read.offers.num_rows == 0


# ── the same runs from an archive, in DuckDB, and in the what-if ───
@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_duckdb_views_give_the_polars_ledger_of_traces(mode):
    tables = read_runs(TRACES, mode=mode, workers=1)
    assert_frame_equal(ledger_rows_sql(tables), compute_ledger(tables).rows(), check_exact=True)


def test_check_invariants_hold_on_traces():
    result = run_cli("check", *map(str, TRACES))
    assert result.exit_code == 0, result.output
    assert f"invariants hold over {len(truth_runs())} runs" in result.output


def test_an_archive_of_traces_gives_the_files_ledger(tmp_path, tables):
    report = ingest(TRACES, tmp_path / "archive", workers=1)
    assert report.runs_added == tables.runs.num_rows
    for mode in ACCOUNTING_MODES:
        archived = ArchiveTables(Archive.open(tmp_path / "archive"), mode)
        files = read_runs(TRACES, mode=mode, workers=1)
        assert_frame_equal(
            compute_ledger(archived).rows(), compute_ledger(files).rows(), check_exact=True
        )
    again = ingest(TRACES, tmp_path / "archive", workers=1)
    assert again.runs_added == 0


def test_whatif_replays_every_trace_run_with_each_call_served_its_inputs(tables):
    inputs = read_inputs(TRACES)
    assert sorted(stream.run_id for stream in inputs.streams) == sorted(tables.known_run_ids())
    truth = {run["run_key"]: run for run in truth_runs()}
    reasons = dict(
        zip(tables.known_run_ids(), tables.runs["refused_reason"].to_pylist(), strict=True)
    )
    for stream in inputs.streams:
        run = truth[stream.run_id]
        assert [call.ordinal for call in stream.calls] == list(range(1, recorded_calls(run) + 1))
        if not recorded_calls(run) or reasons[stream.run_id] == NO_DEFINITIONS:  # no content
            continue
        answers = [m for m in stream.messages if m.origin.startswith("output#")]
        called = [c.name for m in answers for c in m.tool_calls]
        assert called == [name for call in truth[stream.run_id]["calls"] for name in call["called"]]
        for call in stream.calls:
            assert call.input_tokens > 0
            served = stream.window(call.window_served)
            assert served and served[-1].role in ("user", "tool")


def test_tool_executions_count_when_no_output_message_names_them(tmp_path):
    """Without output messages (kept out here), each ``execute_tool`` span is a use,
    said as ``tool-executed``; with them, the same executions add nothing."""
    family = next(f for f in TRUTH["families"] if f["family"] == "genai-openai")
    files = []
    for name in family["files"]:
        lines = []
        for line in cut_lines(_trace(name)):
            request = json.loads(line)
            for resource in request["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        span["attributes"] = [
                            a for a in span["attributes"] if a["key"] != "gen_ai.output.messages"
                        ]
            lines.append(json.dumps(request))
        files.append(tmp_path / name.removesuffix(".gz"))
        files[-1].write_text("\n".join(lines) + "\n")
    read = read_runs(files, workers=1)
    rows = compute_ledger(read).rows().filter(pl.col("kind") == "tool")
    assert rows["used_tool_called"].sum() == 0
    executed = rows.select("id", used="used_tool_executed").filter(pl.col("used") > 0).sort("id")
    runs = [dict(run, family=family["family"]) for run in family["runs"]]
    expected = truth_ledger(runs).select("id", "used").filter(pl.col("used") > 0)
    assert_frame_equal(executed, expected, check_exact=True)


def _openinference_tail(tmp_path: Path) -> Path:
    """The few-tools run of the OpenInference recording as a collector that lost its
    first two model calls' spans exports it: the last call (its reply holds no tool
    call) and the two ``TOOL`` spans, whose ``tool_call.id`` is left out (an application
    that records its tools without the call id)."""
    trace = next(
        run["trace_ids"][0]
        for family in TRUTH["families"]
        if family["family"] == "openinference-openai"
        for run in family["runs"]
        if run["scenario"] == "few-tools"
    )
    kept = []
    calls = []
    for line in cut_lines(_trace("openinference-openai.jsonl.gz")):
        request = json.loads(line)
        spans = [s for r in request["resourceSpans"] for c in r["scopeSpans"] for s in c["spans"]]
        if all(span["traceId"] != trace for span in spans):
            continue
        for span in spans:
            kind = {a["key"]: a["value"] for a in span["attributes"]}["openinference.span.kind"]
            if kind == {"stringValue": "TOOL"}:
                span["attributes"] = [a for a in span["attributes"] if a["key"] != "tool_call.id"]
            if kind == {"stringValue": "LLM"}:
                calls.append(json.dumps(request))
            else:
                kept.append(json.dumps(request))
    path = tmp_path / "openinference-tail.jsonl"
    path.write_text("\n".join([*kept, calls[-1]]) + "\n")
    return path


def test_an_openinference_reply_without_tool_calls_is_read_alike_by_ledger_and_whatif(
    tmp_path,
):
    """The failing case: the ledger's read took an OpenInference reply holding no tool
    call for outputs not recorded, the what-if's read (the report's, an ingest's) for
    outputs holding none; so a ``TOOL`` span without a call id counted as a use in
    ``ledger FILE`` and not in the report or the archive. Outputs recorded: it counts in
    neither, as for the same reply in the ``gen_ai.*`` dialect."""
    path = _openinference_tail(tmp_path)
    with_streams = read_accountings(
        [path], ACCOUNTING_MODES, workers=1, each_file=lambda read: None
    )
    for mode in ACCOUNTING_MODES:
        alone = read_runs([path], mode=mode, workers=1)
        assert alone.runs.num_rows == with_streams[mode].runs.num_rows == 1
        assert alone.offers.num_rows == with_streams[mode].offers.num_rows == 4
        assert alone.uses.num_rows == with_streams[mode].uses.num_rows == 0


def test_the_report_on_traces_only_says_the_reference_does_not_apply():
    from contextledger.report import collect, render_html

    page = render_html(collect([str(path) for path in TRACES], policies=["none", "sliding:keep=3"]))
    assert "These runs are OpenTelemetry traces" in page
    assert "The reference accounting (agentfootprint 9.62) would refuse" not in page
    assert "301-run" not in page
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only" in page


def test_each_replayed_call_is_served_exactly_the_messages_its_span_says_it_sent():
    """The stream rebuilt from the calls' inputs gives back every call's input, in order."""
    from contextledger.read.otel import read_trace_file
    from contextledger.read.otel._calls import model_calls

    by_trace: dict[str, list] = {}
    for path in TRACES:
        for record in read_trace_file(path, messages=True).spans:
            by_trace.setdefault(record.trace_id, []).append(record)
    sent = {}
    for records in by_trace.values():
        for record in model_calls(records):  # stacked spans of one call: the kept one
            if record.inputs is not None:
                system = list(record.system or ())
                inputs = list(record.inputs)
                if system and not (inputs and inputs[0].role == "system"):
                    inputs = system + inputs
                sent[record.span_id] = [(said.role, said.content) for said in inputs]
    assert sent
    checked = 0
    for stream in read_inputs(TRACES).streams:
        for call in stream.calls:
            if call.runtime_stage_id in sent:
                served = [(m.role, m.content) for m in stream.window(call.window_served)]
                assert served == sent[call.runtime_stage_id]
                checked += 1
    assert checked == len(sent)


def test_a_huge_attribute_past_the_cap_is_named_and_the_other_lines_read(tmp_path):
    path, number, line = _first_line_with("gen_ai.input.messages")
    request = json.loads(line)
    span = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "app.payload", "value": {"stringValue": "x" * (2 << 20)}})
    files = _rewritten(tmp_path, path, number, json.dumps(request))
    result = run_cli("ledger", "--max-document-mb", "1", "--format", "json", *map(str, files))
    assert result.exit_code == 1
    named = [entry for entry in result.stderr.splitlines() if "1 MiB cap" in entry]
    assert len(named) == 1 and f":{number}" in named[0] and "Traceback" not in result.output
    lost = {
        span["traceId"]
        for r in request["resourceSpans"]
        for s in r["scopeSpans"]
        for span in s["spans"]
    }
    kept = [run for run in truth_runs() if not lost & set(run["trace_ids"])]
    got = {
        row["id"]: (row["offered"], row["used"], row["runsSeen"])
        for row in json.loads(result.stdout)["rows"]
    }
    expected = truth_ledger(kept)
    assert got == {row[0]: row[1:] for row in expected.iter_rows() if row[1] or row[2]}


def zstd_frame(data: bytes) -> bytes:
    """``data`` as one zstd frame of raw (stored) blocks: what ``zstd`` writes for data it
    cannot shrink, built here since Python 3.11 has no zstd module."""
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + len(data).to_bytes(4, "little")
    blocks = [data[i : i + (128 << 10)] for i in range(0, len(data), 128 << 10)] or [b""]
    for number, block in enumerate(blocks, start=1):
        last = number == len(blocks)
        frame += (int(last) | len(block) << 3).to_bytes(3, "little") + block
    return frame


def test_a_zstd_compressed_trace_file_is_named_in_one_line(tmp_path):
    """The collector's file exporter compresses with zstd when asked to."""
    packed = tmp_path / "traces.jsonl.zst"
    packed.write_bytes(zstd_frame(("\n".join(cut_lines(TRACES[0])) + "\n").encode()))
    result = run_cli("ledger", str(packed), *map(str, TRACES))
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if "traces.jsonl.zst" in line]
    assert len(lines) == 1 and "zstd-compressed" in lines[0]


def test_runs_assembled_a_part_at_a_time_are_the_runs_assembled_at_once():
    """Big inputs hand their runs on in parts (each run's spans let go once assembled)."""
    from contextledger.read.otel import TraceRuns, read_trace_file

    reads = [read_trace_file(path) for path in TRACES]
    whole, parted = TraceRuns(), TraceRuns()
    for read in reads:
        whole.add(read)
        parted.add(read)
    once = whole.finish()
    parts = list(parted.chunks(runs=7))
    assert len(parts) == -(-len(once.runs) // 7) and all(len(p.runs) <= 7 for p in parts)
    assert [(r.run_id, r.facts) for p in parts for r in p.runs] == [
        (r.run_id, r.facts) for r in once.runs
    ]
    assert [x for p in parts for x in p.problems] == once.problems
    assert not list(parted.chunks())


def test_a_real_huge_attribute_is_read_whole():
    """A 376 kB tool result, carried whole in the next call's input messages (393 kB)."""
    folder = REPO / "tests" / "data" / "otel-huge-attribute"
    truth = json.loads((folder / "truth.json").read_text())
    runs = [
        dict(run, family=family["family"], spans_per_call=family["model_call_spans_per_call"])
        for family in truth["families"]
        for run in family["runs"]
    ]
    read = read_runs(folder / "traces", workers=1)
    assert read.problems.num_rows == 0
    assert_frame_equal(counts(read), truth_ledger(runs), check_exact=True)
    stream = read_inputs(folder / "traces").streams[0]
    assert max(message.chars for message in stream.messages) > 376_000


def test_an_archive_written_before_tool_executed_existed_reads_it_as_zero(tmp_path, monkeypatch):
    from .conftest import written_without

    with written_without(monkeypatch, "used_tool_executed"):
        ingest([SAMPLE], tmp_path / "archive", workers=1)
    for mode in ACCOUNTING_MODES:
        archived = compute_ledger(ArchiveTables(Archive.open(tmp_path / "archive"), mode)).rows()
        files = compute_ledger(read_runs(SAMPLE, mode=mode, workers=1)).rows()
        assert_frame_equal(archived, files, check_exact=True)
        assert_frame_equal(
            ledger_rows_sql(ArchiveTables(Archive.open(tmp_path / "archive"), mode)),
            files,
            check_exact=True,
        )


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("pretty", [False, True], ids=["lines", "pretty"])
def test_a_trace_file_starting_with_a_byte_order_mark_is_read(tmp_path, pretty, packed):
    source = _trace("genai-openai.jsonl.gz")
    lines = cut_lines(source)
    text = json.dumps(json.loads(lines[0]), indent=2) if pretty else "\n".join(lines) + "\n"
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / ("traces.json.gz" if packed else "traces.json")
    path.write_bytes(gzip.compress(data) if packed else data)
    plain = tmp_path / "plain" / "traces.json"
    plain.parent.mkdir()
    plain.write_text(text)
    assert sniff(path) == "otlp-json"
    read = read_runs(path, workers=1)
    assert read.problems.num_rows == 0 and read.runs.num_rows > 0
    assert_frame_equal(counts(read), counts(read_runs(plain, workers=1)), check_exact=True)


def _one_request(tmp_path: Path) -> tuple[dict, pl.DataFrame]:
    """The first request of a recording, and its ledger counts read as one JSON line."""
    line = cut_lines(_trace("genai-openai.jsonl.gz"))[0]
    plain = tmp_path / "plain" / "one.jsonl"
    plain.parent.mkdir()
    plain.write_text(line + "\n")
    expected = counts(read_runs(plain, workers=1))
    assert expected.height > 0
    return json.loads(line), expected


def test_a_request_whose_resource_spans_key_is_not_first_is_a_trace(tmp_path):
    request, expected = _one_request(tmp_path)
    path = tmp_path / "later-key.jsonl"
    path.write_text(json.dumps({"comment": "collector export", **request}) + "\n")
    assert sniff(path) == "otlp-json"
    read = read_runs(path, workers=1)
    assert read.problems.num_rows == 0
    assert_frame_equal(counts(read), expected, check_exact=True)


def test_a_half_pretty_request_is_read_whole_not_line_by_line(tmp_path):
    """``{"resourceSpans": [`` alone on the first line, the rest over many: one request."""
    request, expected = _one_request(tmp_path)
    opening, key, rest = json.dumps(request, indent=2).split("\n", 2)
    path = tmp_path / "half-pretty.json"
    path.write_text(opening + key.strip() + "\n" + rest)
    assert path.read_text().startswith('{"resourceSpans": [\n')
    read = read_runs(path, workers=1)
    assert read.problems.num_rows == 0
    assert_frame_equal(counts(read), expected, check_exact=True)


def test_otlp_with_protobuf_field_names_is_named_in_one_line(tmp_path):
    request, _ = _one_request(tmp_path)

    def snake(value):
        if isinstance(value, dict):
            return {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): snake(v) for k, v in value.items()}
        return [snake(v) for v in value] if isinstance(value, list) else value

    path = tmp_path / "snake.jsonl"
    path.write_text(json.dumps(snake(request)) + "\n")
    assert sniff(path) == "otlp-snake-case"
    result = run_cli("ledger", str(path), *map(str, TRACES))
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if "snake.jsonl" in line]
    assert len(lines) == 1 and "resource_spans" in lines[0], lines
