"""The what-if side of OpenTelemetry traces: the provider's recorded prompt-cache use
carried to ``compare``, the rebuilt windows checked against the recorded input tokens,
and the order runs come in.

The recordings (``data/otel``) were made against ``record/otel/fake_model_server.py``,
whose usage rule is known: from a run's second call on, the previous call's prompt
counts as read from the cache, and Anthropic reports half of the rest as written to it.
"""

from __future__ import annotations

import shutil

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.jobs.compare import compare, describe
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.read.messages import RunMessages
from contextledger.read.otel import read_trace_file
from contextledger.tables import schema
from contextledger.tables.build import read_runs
from contextledger.tables.window_rows import stream_row
from contextledger.tables.windows import messages_table, streams_from_tables

from .test_otel_read import TRACES, TRUTH, _trace, recorded_calls, truth_runs

ANTHROPIC = ("genai-anthropic.jsonl.gz", "openinference-anthropic.jsonl.gz")
OPENAI = ("genai-openai.jsonl.gz", "openinference-openai.jsonl.gz")


def served_by_fake_server(stream: RunMessages, *, writes: bool) -> tuple[int, int]:
    """``(read, written)`` cache tokens the fake server reported over the run's calls,
    from its rule and the prompt sizes the spans recorded."""
    read = written = 0
    previous = 0
    for call in stream.calls:
        cached = min(previous, call.input_tokens)
        read += cached
        written += (call.input_tokens - cached) // 2 if writes else 0
        previous = call.input_tokens
    return read, written


@pytest.mark.parametrize("name", ANTHROPIC + OPENAI)
def test_recorded_cache_use_reaches_compare_as_the_server_reported_it(name):
    path = _trace(name)
    streams = {stream.run_id: stream for stream in read_inputs([path]).streams}
    found = compare([path], ["none", "sliding:keep=4"])
    rows = found.per_run.rows_by_key("run_id", named=True)
    assert set(rows) == set(streams)
    for run_id, stream in streams.items():
        read, written = served_by_fake_server(stream, writes=name in ANTHROPIC)
        for row in rows[run_id]:  # the same under every policy: the windows the run sent
            assert (row["recorded_cache_read_tokens"], row["recorded_cache_write_tokens"]) == (
                read,
                written,
            ), run_id
    table = found.table.rows_by_key("policy", named=True)
    for policy in ("none", "sliding:keep=4"):
        (row,) = table[policy]
        assert row["recorded_cache_runs"] == len(streams)
        assert row["recorded_cache_read_tokens"] == sum(
            served_by_fake_server(s, writes=False)[0] for s in streams.values()
        )
        assert row["cached_tokens_where_recorded"] == row["cached_tokens"] > 0
    text = describe(found)
    none = table["none"][0]
    assert f"{none['recorded_cache_read_tokens']:,} tokens read from the cache" in text
    assert f"none {none['cached_tokens_where_recorded']:,}" in text


def test_a_run_that_recorded_no_cache_use_says_null_not_zero():
    found = compare([_trace("openai-v2-latest.jsonl")], ["none"])
    assert found.per_run["recorded_cache_read_tokens"].null_count() == found.per_run.height
    assert found.table["recorded_cache_runs"].to_list() == [0]
    assert "as the provider recorded it" not in describe(found)


def test_snapshots_record_no_cache_use():
    found = compare("data/sample/s0003-loop.json.gz", ["none"])
    assert found.per_run["recorded_cache_write_tokens"].to_list() == [None]


def test_an_archive_carries_the_recorded_cache_use(tmp_path):
    chosen = [_trace(name) for name in ANTHROPIC + OPENAI]
    ingest(chosen, tmp_path / "archive", workers=1)
    archived = compare(str(tmp_path / "archive"), ["none", "sliding:keep=4"])
    files = compare(chosen, ["none", "sliding:keep=4"])
    columns = ["run_id", "policy", "recorded_cache_read_tokens", "recorded_cache_write_tokens"]
    assert sorted(archived.per_run.select(columns).rows(), key=str) == sorted(
        files.per_run.select(columns).rows(), key=str
    )
    assert archived.per_run["recorded_cache_read_tokens"].null_count() == 0


def test_streams_written_before_the_cache_fields_read_them_as_null(tmp_path):
    stream = read_inputs([_trace("genai-anthropic.jsonl.gz")]).streams[0]
    assert any(call.cache_read_tokens for call in stream.calls)
    rows = pa.Table.from_pylist([stream_row(stream, 0)], schema=schema.STREAMS)
    calls = rows["calls"].combine_chunks()
    old_call = pa.struct([f for f in schema.MODEL_CALL if not f.name.startswith("cache_")])
    old = rows.set_column(
        rows.schema.get_field_index("calls"), "calls", calls.cast(pa.list_(old_call))
    )
    pq.write_table(old, tmp_path / "streams.parquet")
    back = pq.read_table(tmp_path / "streams.parquet", schema=schema.STREAMS)
    (rebuilt,) = streams_from_tables(back, messages_table([stream]))
    assert [(c.cache_read_tokens, c.cache_write_tokens) for c in rebuilt.calls] == [
        (None, None)
    ] * len(stream.calls)
    (now,) = streams_from_tables(rows, messages_table([stream]))
    assert now.calls == stream.calls


def test_every_recorded_trace_reads_with_its_cache_fields():
    streams = read_inputs(TRACES).streams
    assert any(call.cache_write_tokens for stream in streams for call in stream.calls)


# ── the rebuilt input against the recorded input tokens ──────────


def test_runs_whose_rebuilt_input_is_far_off_the_recorded_are_named_once():
    families = {family["family"]: family for family in TRUTH["families"]}
    incomplete = {
        run["run_key"]
        for run in truth_runs()
        if recorded_calls(run)
        and not (
            families[run["family"]]["content_captured"]
            and families[run["family"]]["records_tool_definitions"]
        )
    }
    streams = read_inputs(TRACES).streams
    named = {stream.run_id: stream.notes for stream in streams if stream.notes}
    assert set(named) == incomplete
    assert all(len(notes) == 1 for notes in named.values())
    for run_id, (note,) in named.items():
        assert f"(run {run_id}): the input rebuilt" in note
        assert "x the " in note and "gen_ai.usage.input_tokens" in note


def test_whatif_and_compare_name_them_and_still_replay_with_exit_0(tmp_path):
    """From the files, and from an archive of them: ingest stores each run's notes with
    its stream, so the archive's replay says the same lines without the files."""
    path = str(_trace("openai-v2-latest.jsonl"))
    ingest([path], tmp_path / "archive", workers=1)
    said = {}
    for source in (path, str(tmp_path / "archive")):
        for command in ("whatif", "compare"):
            result = CliRunner().invoke(main, [command, source, "--policy", "none"])
            assert result.exit_code == 0, result.output
            notes = [line for line in result.stderr.splitlines() if "the input rebuilt" in line]
            assert len(notes) == 5
            assert notes[0].startswith(
                f"contextledger: {path}:1 (run dbe1b4670cc98c51eb14da2e7dc78293)"
            )
            assert "0.14x the 1,089" in notes[0]
            said[source, command] = notes
    assert said[path, "whatif"] == said[str(tmp_path / "archive"), "whatif"]
    assert said[path, "compare"] == said[str(tmp_path / "archive"), "compare"]


# ── the order runs come in ─────────────────────────────────────────


def _renamed(folder, order) -> dict[str, str]:
    """Copies of the trace files under ``folder``, named so they sort in ``order``;
    each copy's path -> the original's name."""
    folder.mkdir()
    back = {}
    for rank, path in zip(order, TRACES, strict=True):
        copy = folder / f"{rank:02d}-{path.name}"
        shutil.copyfile(path, copy)
        back[str(copy)] = path.name
    return back


def _named_back(table: pa.Table, back: dict[str, str]) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    for column in frame.columns:
        if column == "path" or column.endswith("_path"):
            frame = frame.with_columns(pl.col(column).replace(back))
    return frame


def test_trace_runs_come_in_the_same_order_whatever_the_files_order(tmp_path):
    count = len(TRACES)
    forward = _renamed(tmp_path / "forward", range(count))
    backward = _renamed(tmp_path / "backward", range(count - 1, -1, -1))
    ahead = read_runs([tmp_path / "forward"], workers=1)
    behind = read_runs([tmp_path / "backward"], workers=1)
    assert ahead.runs.num_rows > 60
    for name in ("runs", "offers", "uses", "problems", "duplicates"):
        assert_frame_equal(
            _named_back(getattr(ahead, name), forward),
            _named_back(getattr(behind, name), backward),
            check_exact=True,
        )
    assert_frame_equal(
        compute_ledger(ahead).rows(), compute_ledger(behind).rows(), check_exact=True
    )
    policies = ["none", "sliding:keep=4"]
    assert_frame_equal(
        compare([tmp_path / "forward"], policies).per_run,
        compare([tmp_path / "backward"], policies).per_run,
        check_exact=True,
    )
    starts = [
        min(
            span.start
            for path in TRACES
            for span in read_trace_file(path).spans
            if run_id in (span.trace_id, span.conversation_id)
        )
        for run_id in ahead.known_run_ids()
    ]
    assert starts == sorted(starts)


def test_an_archive_ingested_before_the_cache_fields_compares_with_them_null(tmp_path, monkeypatch):
    import contextledger.archive.store as store

    write_table = store.pq.write_table
    old_call = pa.struct([f for f in schema.MODEL_CALL if not f.name.startswith("cache_")])

    def as_older_versions_wrote(table, *args, **kwargs):
        if "calls" in table.column_names:
            index = table.schema.get_field_index("calls")
            older = pa.field("calls", pa.list_(old_call), nullable=False)
            table = table.set_column(index, older, table["calls"].cast(pa.list_(old_call)))
        return write_table(table, *args, **kwargs)

    monkeypatch.setattr(store.pq, "write_table", as_older_versions_wrote)
    chosen = [_trace("genai-anthropic.jsonl.gz")]
    ingest(chosen, tmp_path / "archive", workers=1)
    monkeypatch.setattr(store.pq, "write_table", write_table)
    archived = compare(str(tmp_path / "archive"), ["none"])
    assert not archived.problems
    recorded = ["recorded_cache_read_tokens", "recorded_cache_write_tokens"]
    assert archived.per_run.select(recorded).null_count().row(0) == (8, 8)
    files = compare(chosen, ["none"]).per_run.drop(recorded)
    assert_frame_equal(archived.per_run.drop(recorded), files, check_exact=True)
