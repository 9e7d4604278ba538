"""The what-if over an archive: the message streams an ingest stores replay to the very
rows the snapshots replay to, a batch of runs at a time, under every filter; a run whose
stream could not be stored is named, not dropped; an archive without streams says so
and what to do; synthetic archives carry streams too."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.archive.windows import NO_STREAM
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs import synth
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive
from contextledger.jobs.synth_model import synth_streams
from contextledger.jobs.whatif import whatif, whatif_archive
from contextledger.ledger.compute import compute_ledger
from contextledger.read.snapshot import ReadProblem
from contextledger.tables import schema, window_rows
from contextledger.tables import windows as window_tables
from contextledger.tables.window_rows import stream_row
from contextledger.tables.windows import messages_table
from contextledger.window.whatif import parse_policies, whatif_table

from .conftest import REPO, SAMPLE, require_corpus

POLICIES = [
    "none",
    "sliding:keep=6",
    "sliding:keep=3,ledger_facts=0,last_tool_results=0",
    "token_budget:threshold=500",
    "token_budget:threshold=2000,keep=4",
]
SAMPLE_STANDINGS = REPO / "data" / "sample-standings.csv"
SAMPLE_OUTCOMES = REPO / "data" / "sample-outcomes.csv"


@pytest.fixture(scope="module")
def corpus_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "archive"
    report = ingest([require_corpus() / "runs"], root, workers=2)
    assert (report.runs_added, report.problems) == (301, [])
    return root


@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample") / "archive"
    ingest([SAMPLE], root, workers=1, outcomes=SAMPLE_OUTCOMES)
    return root


def test_the_corpus_archive_replays_to_the_snapshots_rows(corpus_archive):
    expected, expected_policy = whatif(require_corpus() / "runs", POLICIES)
    assert expected.height == 301 * len(POLICIES)
    replayed = whatif_archive(corpus_archive, parse_policies(POLICIES))
    assert replayed is not None and replayed.runs == 301
    assert_frame_equal(replayed.per_run, expected, check_exact=True)
    # in small batches too: batches cut across runs and commits change nothing
    batched = whatif_archive(corpus_archive, parse_policies(POLICIES), batch_runs=37)
    assert batched is not None
    assert_frame_equal(batched.per_run, expected, check_exact=True)
    _, per_policy = whatif(str(corpus_archive), POLICIES)
    assert_frame_equal(per_policy, expected_policy, check_exact=True)


def test_a_run_id_filter_replays_those_runs(corpus_archive):
    expected, _ = whatif(require_corpus() / "runs", ["sliding:keep=3"])
    chosen = expected["run_id"].to_list()[5:40:7]
    per_run, _ = whatif(f"{corpus_archive}?run_id={','.join(chosen)}", ["sliding:keep=3"])
    assert_frame_equal(per_run, expected.filter(pl.col("run_id").is_in(chosen)), check_exact=True)


def test_standings_from_a_file_arm_the_archive_replay_as_the_snapshots(sample_archive):
    policies = ["sliding:keep=6", "sliding:keep=6,ledger_facts=2"]
    expected, _ = whatif(SAMPLE, policies, standings=SAMPLE_STANDINGS)
    per_run, _ = whatif(str(sample_archive), policies, standings=SAMPLE_STANDINGS)
    assert_frame_equal(per_run, expected, check_exact=True)


def test_a_snapshots_findings_ledger_is_archived_and_replayed(tmp_path):
    with gzip.open(SAMPLE / "s0001-fact-bench.json.gz") as handle:
        document = json.loads(handle.read())
    log = document["snapshot"]["commitLog"]
    ledger = [
        {"kind": "standing", "toolCallId": "call-3", "standing": "fact", "iteration": 4},
        {"kind": "standing", "toolCallId": "call-6", "standing": "fact", "iteration": 7},
        {"kind": "note", "text": "not a standing"},
    ]
    log.append(
        {
            "overwrite": {"findingsLedger": ledger},
            "updates": {},
            "redactedPaths": [],
            "trace": [{"path": "findingsLedger", "verb": "set"}],
            "stage": "Findings",
            "stageId": "findings",
            "runtimeStageId": "findings#999",
            "idx": len(log),
        }
    )
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    (snapshots / "bench.json").write_text(json.dumps(document), encoding="utf-8")
    root = tmp_path / "archive"
    ingest([snapshots], root, workers=1)
    assert list((root / "standings").rglob("*.parquet"))
    policies = ["sliding:keep=6", "sliding:keep=6,ledger_facts=0"]
    expected, _ = whatif(snapshots, policies)
    assert expected["facts_declared"].to_list() == [2, 2]
    per_run, _ = whatif(str(root), policies)
    assert_frame_equal(per_run, expected, check_exact=True)


def test_the_command_reads_an_archive_under_filters_and_reports_runs_per_second(
    sample_archive, tmp_path
):
    runner = CliRunner()
    labelled = pl.read_csv(SAMPLE_OUTCOMES).filter(pl.col("label") == "bad")["run_id"]
    assert 0 < labelled.n_unique() < 14
    out = tmp_path / "rows.parquet"
    arguments = ["whatif", f"{sample_archive}?label=bad", "--policy", "sliding:keep=2"]
    result = runner.invoke(main, [*arguments, "--format", "parquet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "runs/s" in result.stderr
    expected, _ = whatif(SAMPLE, ["sliding:keep=2"])
    assert_frame_equal(
        pl.read_parquet(out),
        expected.filter(pl.col("run_id").is_in(labelled.to_list())),
        check_exact=True,
    )
    table = runner.invoke(main, ["whatif", str(sample_archive), "--policy", "none"])
    assert table.exit_code == 0, table.output
    assert "14 archived run(s) replayed under 1 policy" in table.stderr
    mixed = [str(sample_archive), str(SAMPLE / "s0003-loop.json.gz")]
    both = runner.invoke(main, ["whatif", *mixed, "--policy", "none"])
    assert both.exit_code == EXIT_USAGE and "only input" in both.stderr


def test_a_selection_of_no_run_says_so_and_counts_the_policies_given(sample_archive, tmp_path):
    """It said "0 run(s) replayed under 0 policies" with two given, and nothing about the
    selection that chose no run; snapshots that hold no run likewise."""
    policies = ["--policy", "none", "--policy", "sliding:keep=2"]
    selection = f"{sample_archive}?label=nope"
    result = CliRunner().invoke(main, ["whatif", selection, *policies])
    assert result.exit_code == 0, result.output
    assert f"contextledger: no run selected by {selection}: nothing to replay" in result.stderr
    assert "0 run(s) replayed under 2 policies;" in result.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["whatif", str(empty), *policies])
    assert result.exit_code == 0, result.output
    assert f"contextledger: no run read from {empty}: nothing to replay" in result.stderr
    assert "0 run(s) replayed under 2 policies;" in result.stdout
    assert (
        "nothing to replay"
        not in CliRunner().invoke(main, ["whatif", str(sample_archive), *policies]).stderr
    )


def test_a_date_range_selects_the_batches_ingested_then(tmp_path):
    root = tmp_path / "archive"
    first = sorted(SAMPLE.iterdir())[:5]
    later = sorted(SAMPLE.iterdir())[5:]
    ingest(first, root, workers=1, ingest_date="2026-11-01")
    ingest(later, root, workers=1, ingest_date="2026-11-02")
    per_run, _ = whatif(f"{root}?since=2026-11-02", ["sliding:keep=4"])
    expected, _ = whatif(later, ["sliding:keep=4"])
    assert_frame_equal(per_run, expected, check_exact=True)


def test_an_archive_without_streams_names_itself_and_the_fix(tmp_path):
    root = tmp_path / "old"
    ingest([SAMPLE], root, workers=1)
    for path in (root / "_manifest" / "commits").glob("*.json"):  # as ingested before
        document = json.loads(path.read_text())
        document["files"] = [
            f for f in document["files"] if f["table"] not in ("streams", "messages", "standings")
        ]
        path.write_text(json.dumps(document))
    result = CliRunner().invoke(main, ["whatif", str(root), "--policy", "none"])
    assert result.exit_code == EXIT_USAGE
    assert str(root) in result.stderr
    assert "no message streams" in result.stderr
    assert "ingest the snapshots again into a new archive" in result.stderr

    synthetic = tmp_path / "synth"
    synth_archive(synthetic, runs=20, seed=1, streams=False)
    result = CliRunner().invoke(main, ["whatif", str(synthetic), "--policy", "none"])
    assert result.exit_code == EXIT_USAGE
    assert "no message streams" in result.stderr


def test_an_uncommitted_window_file_is_removed_by_the_next_writer(tmp_path):
    root = tmp_path / "archive"
    ingest(sorted(SAMPLE.iterdir())[:2], root, workers=1)
    stray = root / "messages" / "ingest_date=2026-01-01" / "part-00000009-deadbeef.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"half")
    archive = Archive.open(root)
    with archive.writing() as removed:
        assert removed == 1
    assert not stray.exists()


# ── runs whose stream could not be stored ──────────────────────────
def beyond_int32(tmp_path: Path) -> Path:
    """The sample, with ``s0003-loop`` recording an iteration beyond 32 bits: both
    accountings read it (they do not count iterations), its stream cannot be replayed."""
    snapshots = tmp_path / "snapshots"
    shutil.copytree(SAMPLE, snapshots)
    path = snapshots / "s0003-loop.json.gz"
    document = json.loads(gzip.decompress(path.read_bytes()))
    for bundle in document["snapshot"]["commitLog"]:
        if "iteration" in bundle["overwrite"]:
            bundle["overwrite"]["iteration"] = 2**40
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    return snapshots


def test_a_run_whose_stream_cannot_be_folded_is_named_and_the_rest_replayed(tmp_path):
    snapshots = beyond_int32(tmp_path)
    root = tmp_path / "archive"
    report = ingest([snapshots], root, workers=1)
    assert report.runs_added == 14  # the ledger has every run
    [quarantined] = report.problems
    assert (quarantined["run_id"], quarantined["accounting"]) == ("s0003-loop", "whatif")
    assert "iteration 1099511627776" in quarantined["reason"]
    assert compute_ledger(ArchiveTables(Archive.open(root), "corrected")).runs_recorded == 14

    others = sorted(p for p in SAMPLE.iterdir() if p.name != "s0003-loop.json.gz")
    expected, _ = whatif(others, ["sliding:keep=3", "none"])
    replayed = whatif_archive(root, parse_policies(["sliding:keep=3", "none"]))
    assert replayed is not None and replayed.runs == 13
    assert_frame_equal(replayed.per_run, expected, check_exact=True)
    where = str(snapshots / "s0003-loop.json.gz")
    assert replayed.problems == [ReadProblem(where, None, "s0003-loop", quarantined["reason"])]
    with pytest.warns(UserWarning, match=r"skipped .*s0003-loop\.json\.gz \(run s0003-loop\)"):
        per_run, _ = whatif(str(root), ["sliding:keep=3", "none"])
    assert_frame_equal(per_run, expected, check_exact=True)
    # the snapshots themselves say the same
    with pytest.warns(UserWarning, match="iteration 1099511627776"):
        from_snapshots, _ = whatif(snapshots, ["sliding:keep=3", "none"])
    assert_frame_equal(from_snapshots, expected, check_exact=True)

    runner = CliRunner()
    for path in (str(root), str(snapshots)):
        result = runner.invoke(main, ["whatif", path, "--policy", "none", "--format", "json"])
        assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
        assert f"skipped {where} (run s0003-loop): unreadable snapshot content" in result.stderr
        assert result.stdout.count('"run_id"') == 13
    table = runner.invoke(main, ["whatif", str(root), "--policy", "none"])
    assert table.exit_code == EXIT_UNREADABLE_INPUT
    assert "13 archived run(s) replayed under 1 policy" in table.stderr
    assert "; 1 run(s) left out, 1 problem(s) named below" in table.stderr
    # selections: only the selected runs' problems
    chosen = runner.invoke(main, ["whatif", f"{root}?run_id=s0001-fact-bench", "--policy", "none"])
    assert chosen.exit_code == 0 and "skipped" not in chosen.stderr
    alone = whatif_archive(f"{root}?run_id=s0003-loop", parse_policies(["none"]))
    assert alone is not None and (alone.runs, len(alone.problems)) == (0, 1)
    later = whatif_archive(f"{root}?since=2999-01-01", parse_policies(["none"]))
    assert later is not None and (later.runs, later.problems) == (0, [])
    # the report: in its ledger, not in its window policies, and it says so
    for path in (str(root), str(snapshots)):
        out = tmp_path / "report"
        result = runner.invoke(main, ["report", path, "-o", str(out), "--charts", "none"])
        assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
        assert f"not replayed {where} (run s0003-loop)" in result.stderr
        assert "14 run(s) metered" in result.stdout
        page = (out / "report.html").read_text(encoding="utf-8")
        assert "1 run(s) are in the ledger but were not replayed" in page
        assert "1 run(s) are in the ledger but not in the window policies" in page


def test_a_run_archived_without_a_stream_and_no_reason_is_named_too(tmp_path, monkeypatch):
    folded = window_rows.run_window

    def lost(run):  # as if ingest had stored no stream for this run, and said nothing
        return None if run.run_id == "s0003-loop" else folded(run)

    monkeypatch.setattr(window_rows, "run_window", lost)
    files = [SAMPLE / "s0001-fact-bench.json.gz", SAMPLE / "s0003-loop.json.gz"]
    root = tmp_path / "archive"
    assert ingest(files, root, workers=1).problems == []
    replayed = whatif_archive(root, parse_policies(["none"]))
    assert replayed is not None and replayed.runs == 1
    assert replayed.problems == [ReadProblem(str(files[1]), None, "s0003-loop", NO_STREAM)]


# ── synthetic archives ─────────────────────────────────────────────
SYNTH_POLICIES = [
    "none",
    "sliding:keep=6",
    "sliding:keep=3,last_tool_results=0",
    "sliding:keep=6,ledger_facts=2",
    "token_budget:threshold=2000",
]


def test_a_synthetic_archive_stores_its_streams_as_ingest_would_and_replays_them(tmp_path):
    root = tmp_path / "archive"
    synth_archive(root, 300, seed=4, batch_runs=200, workers=1)
    built = [*synth_streams(4, 0, 200), *synth_streams(4, 200, 100)]
    streams = [stream for stream, _ in built]
    standings = [row for _, rows in built for row in rows]
    # the rows stored are those ingest stores for such a stream
    archive = Archive.open(root)
    stored = {
        table: pl.read_parquet(archive.paths(archive.files(table)))
        for table in ("streams", "messages", "standings")
    }
    expected_streams = pa.Table.from_pylist(
        [stream_row(stream, order) for order, stream in enumerate(streams)], schema=schema.STREAMS
    )
    assert_frame_equal(stored["streams"], pl.from_arrow(expected_streams), check_exact=True)
    assert_frame_equal(stored["messages"], pl.from_arrow(messages_table(streams)), check_exact=True)
    expected_standings = pa.Table.from_pylist(standings, schema=schema.STANDINGS)
    assert_frame_equal(stored["standings"], pl.from_arrow(expected_standings), check_exact=True)
    # and replay to the rows of the same streams in memory
    per_run, _ = whatif(str(root), SYNTH_POLICIES)
    assert_frame_equal(
        per_run, whatif_table(streams, parse_policies(SYNTH_POLICIES), standings), check_exact=True
    )
    # realistic: parallel batches, every call answered, unnamed results, user turns, facts
    messages = stored["messages"]
    asked = messages.filter(pl.col("tool_calls").list.len() > 0)
    assert asked["tool_calls"].list.len().max() > 1
    assert messages.filter(pl.col("role") == "tool").height == asked["tool_calls"].list.len().sum()
    assert messages["tool_name_recovered"].any()
    assert messages.filter(pl.col("role") == "user").height > 300
    assert 0 < stored["standings"]["run_id"].n_unique() < 300
    assert (stored["standings"]["standing"] == "fact").any()
    assert (
        per_run.filter(pl.col("policy") == "sliding:keep=3,last_tool_results=0")[
            "removed_messages"
        ].sum()
        > 0
    )
    # the tool calls are the runs' tool uses
    uses = ArchiveTables(archive, "corrected").uses
    assert (
        asked["tool_calls"].list.len().sum()
        == uses.filter(pc.equal(uses["signal"], "tool-called")).num_rows
    )


def test_synthetic_streams_built_on_worker_processes_are_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "STREAM_CHUNK_RUNS", 70)  # several chunks, on the pool
    synth_archive(tmp_path / "pooled", 150, seed=9, workers=2)
    synth_archive(tmp_path / "here", 150, seed=9, workers=1)
    for table in ("streams", "messages", "standings"):
        pooled, here = (Archive.open(tmp_path / name) for name in ("pooled", "here"))
        assert_frame_equal(
            pl.read_parquet(pooled.paths(pooled.files(table))),
            pl.read_parquet(here.paths(here.files(table))),
            check_exact=True,
        )


def test_streams_rebuilt_from_a_slice_of_the_tables_are_those_of_the_whole(corpus_archive):
    """The streams are rebuilt column by column from the lists' offsets: a slice of the
    streams table (as whatif reads a commit, a batch at a time) gives its own runs, every
    call, window and message as the snapshots recorded them."""
    from contextledger.read.messages import rebuild_messages
    from contextledger.read.snapshot import decode_run, iter_documents

    archive = Archive.open(corpus_archive)
    read = [pa.concat_tables(pq_read(archive, table)) for table in ("streams", "messages")]
    streams, messages = read[0].sort_by("run_order"), read[1]
    whole = window_tables.streams_from_tables(streams, messages)
    part = window_tables.streams_from_tables(streams.slice(40, 25), messages)
    assert [s.run_id for s in part] == [s.run_id for s in whole[40:65]]
    for got, want in zip(part, whole[40:65], strict=True):
        assert (got.calls, got.final_window, got.user_message) == (
            want.calls,
            want.final_window,
            want.user_message,
        )
        assert [m.as_json() for m in got.messages] == [m.as_json() for m in want.messages]
    by_id = {s.run_id: s for s in whole}
    path = sorted((require_corpus() / "runs").glob("*.json.gz"))[0]
    recorded = rebuild_messages(decode_run(next(iter_documents(path))))
    back = by_id[recorded.run_id]
    assert back.calls == recorded.calls and back.final_window == recorded.final_window
    assert [(m.role, m.chars, m.tool_calls, m.first_call) for m in back.messages] == [
        (m.role, m.chars, m.tool_calls, m.first_call) for m in recorded.messages
    ]


def pq_read(archive: Archive, table: str) -> list[pa.Table]:
    import pyarrow.parquet as pq

    return [pq.read_table(path) for path in archive.paths(archive.files(table))]


def assert_same_arrays(got, want) -> None:
    """Two ``TurnArrays`` equal field by field: values, dtypes and shapes."""
    import dataclasses

    import numpy as np

    for item in dataclasses.fields(want):
        a, b = getattr(got, item.name), getattr(want, item.name)
        if isinstance(b, np.ndarray):
            assert (a.dtype, a.shape) == (b.dtype, b.shape), item.name
            if b.dtype == object:
                assert a.tolist() == b.tolist(), item.name
            else:
                assert np.array_equal(a, b, equal_nan=b.dtype.kind == "f"), item.name
        else:
            assert a == b, item.name


def column_built_and_message_built(archive_dir: Path, batch_runs: int):
    """Per batch of the archive: the arrays laid out from its stored columns, and from the
    ``Message`` streams rebuilt from them, with the batch's standings."""
    from contextledger.archive.windows import window_batches
    from contextledger.window.standings import timelines
    from contextledger.window.turn_arrays import turn_arrays
    from contextledger.window.turn_tables import turn_arrays_from_tables

    for streams, messages, standings in window_batches(Archive.open(archive_dir), None, batch_runs):
        by_run = timelines(standings.to_pylist())
        rebuilt = window_tables.streams_from_tables(streams, messages)
        yield turn_arrays_from_tables(streams, messages, by_run), turn_arrays(rebuilt, by_run)


def test_turn_arrays_from_the_stored_columns_are_those_of_the_rebuilt_streams(
    corpus_archive, tmp_path
):
    """The kernel's input read straight from an archive's columns (no ``Message`` per
    row) is the one the rebuilt streams give, field by field: on the corpus (runs the
    kernel sets aside, standings, renamed results) and on a synthetic archive, in
    batches that cut across commits."""
    windowed = 0
    for got, want in column_built_and_message_built(corpus_archive, 80):
        assert_same_arrays(got, want)
        windowed += int(want.windowed.sum())
    assert windowed > 0
    root = tmp_path / "synth"
    synth_archive(root, 300, seed=4, batch_runs=200, workers=1)
    armed = 0
    for got, want in column_built_and_message_built(root, 120):
        assert_same_arrays(got, want)
        armed += int(want.armed.sum())
    assert armed > 0


def test_runs_the_kernel_sets_aside_are_laid_out_alike_from_columns_and_replayed_exactly():
    from contextledger.jobs.whatif import _replay_tables
    from contextledger.window.synthetic import Batch, Result, Said, build_stream
    from contextledger.window.turn_arrays import turn_arrays
    from contextledger.window.turn_tables import turn_arrays_from_tables

    steps = [[Batch((Result("look", 300),))] for _ in range(6)]
    long = [[Batch((Result("look", 30),))] for _ in range(66)]  # more than a word of turns
    runs = [
        build_stream("first", [Said("user", "go")], steps),
        build_stream(
            "changes",
            [Said("user", "go")],
            [*steps[:3], [Said("user", "then")], *steps[3:]],
            request="never said",
        ),
        build_stream("long", [Said("user", "go")], long),
        build_stream("nothing", [], []),
    ]
    streams = pa.Table.from_pylist(
        [stream_row(stream, order) for order, stream in enumerate(runs)], schema=schema.STREAMS
    )
    messages = messages_table(runs)
    got = turn_arrays_from_tables(streams, messages)
    assert sorted(got.fallback) == [1]
    assert_same_arrays(got, turn_arrays(runs))
    policies = parse_policies(["none", "sliding:keep=3"])
    no_standings = schema.STANDINGS.empty_table()
    assert_frame_equal(
        _replay_tables(streams, messages, no_standings, policies, []),
        whatif_table(runs, policies),
        check_exact=True,
    )


def test_turn_arrays_from_columns_read_rows_out_of_order_and_refuse_missing_ones(corpus_archive):
    from contextledger.window.turn_arrays import turn_arrays
    from contextledger.window.turn_tables import turn_arrays_from_tables

    archive = Archive.open(corpus_archive)
    read = [pa.concat_tables(pq_read(archive, table)) for table in ("streams", "messages")]
    streams, messages = read[0].sort_by("run_order").slice(10, 30), read[1]
    want = turn_arrays(window_tables.streams_from_tables(streams, messages))
    shuffled = messages.take(pa.array(list(range(messages.num_rows))[::-1]))
    assert_same_arrays(turn_arrays_from_tables(streams, shuffled), want)
    first = streams["run_id"][0].as_py()
    is_first = pc.equal(messages["run_id"], first)
    lost = pc.and_(is_first, pc.equal(messages["message_index"], 2))
    with pytest.raises(ValueError, match=f"run {first}: its messages rows are incomplete"):
        turn_arrays_from_tables(streams, messages.filter(pc.invert(lost)))
    with pytest.raises(ValueError, match=f"run {first}: its messages rows are incomplete"):
        turn_arrays_from_tables(streams, messages.filter(pc.invert(is_first)))
    none = turn_arrays_from_tables(schema.STREAMS.empty_table(), schema.MESSAGES.empty_table())
    assert_same_arrays(none, turn_arrays([]))


def test_the_archive_builds_messages_only_for_the_runs_replayed_exactly(
    corpus_archive, monkeypatch
):
    """Over an archive, ``Message`` objects are built for the runs the kernel sets aside
    (and the runs recorded with a window a policy replays exactly), not for every run."""
    from contextledger.jobs import whatif as whatif_job

    built: list[str] = []
    rebuild = whatif_job.streams_from_tables

    def counting(streams: pa.Table, messages: pa.Table) -> list:
        built.extend(streams["run_id"].to_pylist())
        return rebuild(streams, messages)

    monkeypatch.setattr(whatif_job, "streams_from_tables", counting)
    replayed = whatif_archive(corpus_archive, parse_policies(["none"]))
    assert replayed is not None and replayed.runs == 301 and built == []
    replayed = whatif_archive(corpus_archive, parse_policies(["none", "sliding:keep=6"]))
    assert replayed is not None and replayed.runs == 301
    laid = list(column_built_and_message_built(corpus_archive, 2000))
    windowed = [
        run_id for got, _ in laid for run_id, w in zip(got.run_ids, got.windowed, strict=True) if w
    ]
    assert 0 < len(built) == len(windowed) < 301 and set(built) == set(windowed)


def test_an_archive_holding_a_stream_for_every_run_names_none_without_reading_a_file(
    sample_archive, monkeypatch
):
    """The rows each commit recorded say every run has its stream: no file is read to
    find the runs left out (the report asks before every replay)."""
    from contextledger.archive.location import Location
    from contextledger.archive.windows import unreplayable_runs

    archive = Archive.open(sample_archive)
    monkeypatch.setattr(Location, "read_table", lambda *_, **__: pytest.fail("a file was read"))
    assert unreplayable_runs(archive) == []


def test_a_run_level_selection_reads_exactly_its_runs_window_rows(sample_archive):
    """The window tables of the selected runs, kept as they are read, are the rows of
    every run's that name them, in the same order."""
    from contextledger.archive.selection import Selection
    from contextledger.archive.windows import window_batches

    archive = Archive.open(sample_archive)
    chosen = ("s0003-loop", "s0001-fact-bench", "s9999-nosuch")
    [(streams, messages, standings)] = window_batches(archive)
    [(kept_streams, kept_messages, kept_standings)] = window_batches(
        archive, Selection(run_ids=chosen)
    )
    for every, kept in (
        (streams, kept_streams),
        (messages, kept_messages),
        (standings, kept_standings),
    ):
        expected = every.filter(pc.is_in(every["run_id"], value_set=pa.array(chosen)))
        assert kept.equals(expected)
    assert set(kept_streams["run_id"].to_pylist()) == {"s0003-loop", "s0001-fact-bench"}
    assert kept_messages.num_rows > 0
