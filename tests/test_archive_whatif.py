"""The what-if over an archive: the message streams an ingest stores replay to the very
rows the snapshots replay to, a batch of runs at a time, under every filter; an archive
without streams says so and what to do."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ingest
from contextledger.cli import EXIT_USAGE, main
from contextledger.synth import synth_archive
from contextledger.window.whatif import parse_policies, whatif, whatif_archive

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
    assert_frame_equal(replayed.per_run, expected)
    # in small batches too: batches cut across runs and commits change nothing
    batched = whatif_archive(corpus_archive, parse_policies(POLICIES), batch_runs=37)
    assert batched is not None
    assert_frame_equal(batched.per_run, expected)
    _, per_policy = whatif(str(corpus_archive), POLICIES)
    assert_frame_equal(per_policy, expected_policy)


def test_a_run_id_filter_replays_those_runs(corpus_archive):
    expected, _ = whatif(require_corpus() / "runs", ["sliding:keep=3"])
    chosen = expected["run_id"].to_list()[5:40:7]
    per_run, _ = whatif(f"{corpus_archive}?run_id={','.join(chosen)}", ["sliding:keep=3"])
    assert_frame_equal(per_run, expected.filter(pl.col("run_id").is_in(chosen)))


def test_standings_from_a_file_arm_the_archive_replay_as_the_snapshots(sample_archive):
    policies = ["sliding:keep=6", "sliding:keep=6,ledger_facts=2"]
    expected, _ = whatif(SAMPLE, policies, standings=SAMPLE_STANDINGS)
    per_run, _ = whatif(str(sample_archive), policies, standings=SAMPLE_STANDINGS)
    assert_frame_equal(per_run, expected)


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
    assert_frame_equal(per_run, expected)


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
        pl.read_parquet(out), expected.filter(pl.col("run_id").is_in(labelled.to_list()))
    )
    table = runner.invoke(main, ["whatif", str(sample_archive), "--policy", "none"])
    assert table.exit_code == 0, table.output
    assert "14 archived run(s) replayed under 1 policy" in table.stderr


def test_a_date_range_selects_the_batches_ingested_then(tmp_path):
    root = tmp_path / "archive"
    first = sorted(SAMPLE.iterdir())[:5]
    later = sorted(SAMPLE.iterdir())[5:]
    ingest(first, root, workers=1, ingest_date="2026-11-01")
    ingest(later, root, workers=1, ingest_date="2026-11-02")
    per_run, _ = whatif(f"{root}?since=2026-11-02", ["sliding:keep=4"])
    expected, _ = whatif(later, ["sliding:keep=4"])
    assert_frame_equal(per_run, expected)


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
    synth_archive(synthetic, runs=20, seed=1)
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
