"""The quarantine says what is unreadable now, for the runs asked about.

A quarantined file since deleted leaves the quarantine at the next ingest; sources are
recorded by absolute path, so an ingest from another folder knows them (archives that
recorded them as given keep working); and a quarantined input makes a reading command
exit 1 only when the selection includes it.
"""

from __future__ import annotations

import gzip
import importlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.archive import Archive, ArchiveTables
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT
from contextledger.jobs.ingest import ingest

from .conftest import SAMPLE, as_new_run

ingest_module = importlib.import_module("contextledger.jobs.ingest")  # not the function


def quarantined(root: Path) -> list[str]:
    listing = json.loads((root / "quarantine.json").read_text())["quarantined"]
    return sorted(Path(row["path"]).name for row in listing)


def exit_code(target: str) -> int:
    return CliRunner().invoke(main, ["ledger", target, "--format", "csv"]).exit_code


def fix(path: Path) -> None:
    """Write a readable snapshot (a sample run under a new run id) to ``path``."""
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    as_new_run(document, "fixed-run")
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture
def snapshots(tmp_path: Path) -> Path:
    folder = tmp_path / "runs"
    shutil.copytree(SAMPLE, folder)
    (folder / "invalid.json").write_text("{not json", encoding="utf-8")
    return folder


def test_a_deleted_quarantined_file_leaves_the_quarantine_at_the_next_ingest(snapshots, tmp_path):
    root = tmp_path / "archive"
    ingest([snapshots], root, workers=1)
    assert quarantined(root) == ["invalid.json"]
    assert exit_code(str(root)) == EXIT_UNREADABLE_INPUT
    (snapshots / "invalid.json").unlink()
    (snapshots / "s0001-fact-bench.json.gz").unlink()  # read cleanly: its run stays
    elsewhere = tmp_path / "more"
    elsewhere.mkdir()
    report = ingest([elsewhere], root, workers=1)  # any ingest of the archive
    assert (report.files_found, report.sources_retired) == (0, 1)
    assert "1 quarantined file(s) since deleted left the quarantine" in report.summary()
    assert quarantined(root) == []
    assert exit_code(str(root)) == 0
    assert ArchiveTables(Archive.open(root), "corrected").runs.num_rows == 14
    assert ingest([elsewhere], root, workers=1).sources_retired == 0  # retired once
    # Back again, still bad: read and quarantined again.
    (snapshots / "invalid.json").write_text("{not json", encoding="utf-8")
    assert ingest([snapshots], root, workers=1).files_read == 1
    assert quarantined(root) == ["invalid.json"]


def test_sources_are_known_from_another_working_folder(snapshots, tmp_path, monkeypatch):
    root = tmp_path / "archive"
    monkeypatch.chdir(tmp_path)
    ingest([Path("runs")], root, workers=1)
    monkeypatch.chdir(snapshots)
    again = ingest([Path(".")], root, workers=1)
    assert (again.files_read, again.files_unchanged) == (0, 15)
    fix(snapshots / "invalid.json")
    fixed = ingest([Path(".")], root, workers=1)
    assert fixed.files_read == 1 and quarantined(root) == []


def test_archives_that_recorded_sources_as_given_keep_working(snapshots, tmp_path, monkeypatch):
    root = tmp_path / "archive"
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as patched:  # how sources were recorded before
        patched.setattr(ingest_module, "source_name", lambda path, known: str(path))
        ingest([Path("runs")], root, workers=1)
    assert quarantined(root) == ["invalid.json"]
    assert not Path(
        json.loads((root / "quarantine.json").read_text())["quarantined"][0]["path"]
    ).is_absolute()
    again = ingest([Path("runs")], root, workers=1)
    assert (again.files_read, again.files_unchanged) == (0, 15)
    fix(snapshots / "invalid.json")
    assert ingest([Path("runs")], root, workers=1).files_read == 1
    assert quarantined(root) == []
    assert exit_code(str(root)) == 0


def test_a_quarantined_input_counts_only_when_the_selection_includes_it(snapshots, tmp_path):
    """Day 1: the sample, cleanly. Day 2: a file that cannot be read (no run id) and a
    run arriving with other content (run id s0003-loop)."""
    root = tmp_path / "archive"
    (snapshots / "invalid.json").unlink()
    ingest([snapshots], root, workers=1, ingest_date="2026-11-01")
    day2 = tmp_path / "day2"
    day2.mkdir()
    (day2 / "invalid.json").write_text("{not json", encoding="utf-8")
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    document["snapshot"]["runId"] = "re-recorded"
    (day2 / "s0003-loop.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    outcomes = tmp_path / "outcomes.csv"
    outcomes.write_text("run_id,label\ns0001-fact-bench,x\ns0003-loop,y\n", encoding="utf-8")
    ingest([day2], root, workers=1, ingest_date="2026-11-02", outcomes=outcomes)
    assert quarantined(root) == ["invalid.json", "s0003-loop.json.gz"]
    cases = {
        "": EXIT_UNREADABLE_INPUT,  # everything
        "?since=2026-11-02": EXIT_UNREADABLE_INPUT,
        "?until=2026-11-01": 0,  # before the bad inputs arrived
        "?run_id=s0001-fact-bench": 0,  # neither the file (no run id) nor the run
        "?run_id=s0003-loop": EXIT_UNREADABLE_INPUT,  # the run
        "?run_id=s0003-loop&until=2026-11-01": 0,
        "?label=x": 0,
        "?label=y": EXIT_UNREADABLE_INPUT,
    }
    assert {query: exit_code(f"{root}{query}") for query in cases} == cases


@pytest.fixture
def conflicting(tmp_path: Path) -> Path:
    """The sample, and a copy of s0003-loop cut short: the same run id, other content."""
    folder = tmp_path / "runs"
    shutil.copytree(SAMPLE, folder)
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    document["snapshot"]["commitLog"] = document["snapshot"]["commitLog"][:5]
    (folder / "zz-conflict.json").write_text(json.dumps(document), encoding="utf-8")
    return folder


def test_a_known_conflict_is_reported_alike_by_every_later_command(conflicting, tmp_path):
    """A conflicting copy is read, not counted: the ledger said "1 input(s) unreadable"
    of it. Every later ledger now says the same, as a conflict, and every later ingest
    keeps it quarantined, as over the folder itself."""
    root = tmp_path / "archive"
    runner = CliRunner()
    first = runner.invoke(main, ["ingest", str(conflicting), "--archive", str(root)])
    assert first.exit_code == EXIT_UNREADABLE_INPUT, first.output
    summary = "(corrected accounting; 0 input(s) unreadable, 1 conflicting copy(ies) not counted)"
    answers = []
    for _ in range(2):
        ledger = runner.invoke(main, ["ledger", str(root)])
        assert ledger.exit_code == EXIT_UNREADABLE_INPUT
        assert summary in ledger.stdout
        answers.append((ledger.stdout, ledger.stderr))
        again = runner.invoke(main, ["ingest", str(conflicting), "--archive", str(root)])
        assert again.exit_code == 0 and "left the quarantine" not in again.stdout
        assert quarantined(root) == ["zz-conflict.json"]
    assert answers[0] == answers[1]
    folder = runner.invoke(main, ["ledger", str(conflicting)])
    assert folder.exit_code == EXIT_UNREADABLE_INPUT and summary in folder.stdout


def test_a_deleted_conflicting_copy_leaves_the_quarantine_once(conflicting, tmp_path):
    """Deleting the copy (how a user settles the conflict) retired it from the quarantine
    at the next ingest, and again at every ingest after: "1 quarantined file(s) since
    deleted left the quarantine", a commit each time, over an empty quarantine."""
    root = tmp_path / "archive"
    ingest([conflicting], root, workers=1)
    (conflicting / "zz-conflict.json").unlink()
    retired = ingest([conflicting], root, workers=1)
    assert retired.sources_retired == 1 and quarantined(root) == []
    commits = len(Archive.open(root).commits)
    for _ in range(2):
        later = ingest([conflicting], root, workers=1)
        assert later.sources_retired == 0
        assert "left the quarantine" not in later.summary()
        assert len(Archive.open(root).commits) == commits
        assert exit_code(str(root)) == 0
