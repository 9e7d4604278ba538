"""Option files and dates are read strictly: what cannot mean what it says is refused by
name (file, line, option), never silently misread into a result that looks right."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.archive import ArchiveTables, Selection, ingest
from contextledger.archive.store import Archive
from contextledger.cli import EXIT_USAGE, main
from contextledger.synth import synth_archive

from .conftest import SAMPLE


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ── dates ─────────────────────────────────────────────────────────────
@pytest.fixture(scope="module")
def dated_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample ingested under 2026-11-01 (seven runs) and 2026-11-30 (the rest)."""
    root = tmp_path_factory.mktemp("dated") / "archive"
    files = sorted(SAMPLE.glob("*.json.gz"))
    ingest(files[:7], root, ingest_date="2026-11-01", workers=1)
    ingest(files[7:], root, ingest_date="2026-11-30", workers=1)
    return root


@pytest.mark.parametrize("bad", ["20261101", "2026-11", "2026-11-31", "yesterday", "2026-W44-7"])
def test_a_since_that_is_no_iso_date_is_refused_by_name(dated_archive, bad):
    """``since=20261101`` used to select nothing (Python reads it, the stored text never
    matches) and exit 0 with an empty ledger."""
    result = run("ledger", f"{dated_archive}?since={bad}")
    assert result.exit_code == EXIT_USAGE
    assert f"since {bad!r} is not a date" in result.stderr
    assert result.stdout == ""
    result = run("sql", f"{dated_archive}?until={bad}", "SELECT count(*) FROM runs")
    assert (result.exit_code, f"until {bad!r} is not a date" in result.stderr) == (EXIT_USAGE, True)


def test_a_full_iso_timestamp_selects_its_utc_date(dated_archive):
    def runs(selection: str) -> str:
        result = run("sql", f"{dated_archive}?{selection}", "SELECT count(*) AS n FROM runs")
        assert result.exit_code == 0, result.output
        return result.stdout

    assert runs("since=2026-11-30T00:00:00Z") == runs("since=2026-11-30")
    assert runs("until=2026-11-01T08:00:00") == runs("until=2026-11-01")
    # 23:30 two hours west of UTC is already the next day in UTC
    assert runs("until=2026-10-31T23:30:00-02:00") == runs("until=2026-11-01")
    assert runs("until=2026-10-31T23:30:00-02:00") != runs("until=2026-11-30")


def test_selections_from_python_normalise_or_refuse_the_same_way(dated_archive):
    assert Selection(since="2026-11-30T10:00:00Z").since == "2026-11-30"
    with pytest.raises(ValueError, match="since '20261130' is not a date"):
        Selection(since="20261130")
    tables = ArchiveTables(Archive.open(dated_archive), "corrected")
    with pytest.raises(ValueError, match="until"):
        tables.select(until="30/11/2026")
    assert tables.select(since="2026-11-30T00:00:00+00:00").runs.num_rows == len(
        sorted(SAMPLE.glob("*.json.gz"))[7:]
    )


@pytest.mark.parametrize("command", ["ingest", "synth"])
def test_an_ingest_date_that_is_no_iso_date_is_refused_and_nothing_is_written(tmp_path, command):
    """``--ingest-date 20261130`` used to be stored as it was and never match a filter."""
    root = tmp_path / "archive"
    args = [str(SAMPLE)] if command == "ingest" else ["--runs", "3"]
    result = run(command, *args, "--archive", str(root), "--ingest-date", "20261130")
    assert result.exit_code == EXIT_USAGE
    assert "'--ingest-date'" in result.stderr and "'20261130' is not a date" in result.stderr
    assert not root.exists()


@pytest.mark.parametrize("command", ["ingest", "synth"])
def test_an_ingest_date_timestamp_is_stored_as_its_utc_date(tmp_path, command):
    root = tmp_path / "archive"
    args = [str(SAMPLE / "s0003-loop.json.gz")] if command == "ingest" else ["--runs", "3"]
    stamp = "2026-11-30T23:00:00-05:00"
    result = run(command, *args, "--archive", str(root), "--ingest-date", stamp)
    assert result.exit_code == 0, result.output
    assert [path.name for path in (root / "runs" / "accounting=corrected").iterdir()] == [
        "ingest_date=2026-12-01"
    ]


def test_python_ingest_and_synth_refuse_a_compact_date(tmp_path):
    with pytest.raises(ValueError, match="'20261130' is not a date"):
        ingest([SAMPLE / "s0003-loop.json.gz"], tmp_path / "a", ingest_date="20261130")
    with pytest.raises(ValueError, match="'2026-11-30 junk' is not a date"):
        synth_archive(tmp_path / "b", 3, ingest_date="2026-11-30 junk")
    assert list(tmp_path.iterdir()) == []
