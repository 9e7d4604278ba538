"""In Jupyter the result objects show as a short summary (``_repr_html_``): what was read,
what was left out, and the frame that answers, not a dataclass repr of whole Arrow tables;
``repr`` is the same counts on one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contextledger.archive import archive_tables
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import whatif_archive
from contextledger.ledger.compute import compute_ledger
from contextledger.tables.build import read_runs
from contextledger.tables.sidecars import load_outcomes
from contextledger.window.whatif import parse_policies

from .conftest import REPO, SAMPLE

OUTCOMES = REPO / "data" / "sample-outcomes.csv"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("display") / "archive"
    ingest([SAMPLE], root, outcomes=OUTCOMES, workers=1)
    return root


def test_run_tables_show_what_was_read_and_name_what_was_not(tmp_path: Path):
    runs = tmp_path / "runs"
    shutil.copytree(SAMPLE, runs)
    (runs / "broken.json").write_text('{"not": "a snapshot"', encoding="utf-8")
    tables = read_runs(runs, workers=1).with_outcomes(load_outcomes(OUTCOMES))
    page = tables._repr_html_()
    assert "pyarrow" not in page
    assert repr(tables) == (
        f"<RunTables accounting: corrected; runs: 14 (14 metered, 0 refused); offers, uses: "
        f"{tables.offers.num_rows:,}, {tables.uses.num_rows:,} rows; outcome labels: "
        f"{tables.outcomes.num_rows:,} (run, label) pairs; duplicate copies: 0; "
        "inputs not read: 1>"
    )
    assert "<strong>Run tables</strong>" in page
    assert "14 (14 metered, 0 refused)" in page
    assert f"{tables.offers.num_rows:,}, {tables.uses.num_rows:,} rows" in page
    assert f"{tables.outcomes.num_rows:,} (run, label) pairs" in page
    assert 'inputs not read</th><td style="text-align:left">1</td>' in page
    assert f"{runs / 'broken.json'}</th>" in page and "invalid JSON" in page


def test_run_tables_count_refused_runs_apart():
    tables = read_runs(SAMPLE, mode="reference", workers=1)
    refused = tables.runs.num_rows - sum(tables.runs["metered"].to_pylist())
    assert refused > 0
    assert f"({14 - refused} metered, {refused} refused)" in tables._repr_html_()


def test_the_ledger_shows_its_rows_worst_first_under_its_counts():
    ledger = compute_ledger(read_runs(SAMPLE, workers=1))
    page = ledger._repr_html_()
    assert repr(ledger) == "<Ledger runs recorded: 14; pieces: 40>"
    assert "runs recorded</th><td" in page and ">14</td>" in page and ">40</td>" in page
    worst, best = ledger.rows()["id"][0], ledger.rows()["id"][-1]
    assert page.index(f"&quot;{worst}&quot;") < page.index(f"&quot;{best}&quot;")


def test_archive_tables_show_the_selection_without_reading_a_table(archive: Path):
    tables = archive_tables([f"{archive}?since=2020-01-01&label=bad"], "corrected")
    assert tables is not None
    page = tables._repr_html_()
    assert repr(tables).startswith(f"<ArchiveTables archive: {archive}; accounting: corrected;")
    assert tables._cache == {}  # nothing collected
    assert str(archive) in page and "since=2020-01-01&amp;label=bad" in page
    assert "1 of 1" in page and "14 (before the run id and label filters)" in page
    everything = archive_tables([str(archive)], "reference")
    assert everything is not None and "every run" in everything._repr_html_()
    assert ">14</td>" in everything._repr_html_()


def test_a_what_if_over_an_archive_shows_its_runs_and_its_policy_table(archive: Path):
    replay = whatif_archive(str(archive), parse_policies(["none", "sliding:keep=3"]))
    assert replay is not None
    page = replay._repr_html_()
    assert (
        repr(replay)
        == f"<ArchiveReplay runs replayed: 14 in {replay.seconds:.1f} s; left out: none>"
    )
    assert f"{replay.runs:,} in " in page and "left out</th><td" in page and ">none</td>" in page
    assert "&quot;sliding:keep=3&quot;" in page
    assert replay.per_run.height == 2 * replay.runs


def test_an_ingest_report_shows_its_summary(tmp_path: Path, archive: Path):
    report = ingest([SAMPLE], tmp_path / "again", workers=1)
    page = report._repr_html_()
    assert page.startswith("<pre>") and report.summary().splitlines()[0] in page
    assert repr(report) == f"<IngestReport {report.archive}: {report.summary_lines()[0]}>"
