"""Option files and dates are read strictly: what cannot mean what it says is refused by
name (file, line, option), never silently misread into a result that looks right."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.archive import ArchiveTables, Selection
from contextledger.archive.store import Archive
from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive

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


# ── outcomes and standings files ──────────────────────────────────────
SAMPLE_OUTCOMES = SAMPLE.parent / "sample-outcomes.csv"
SAMPLE_STANDINGS = SAMPLE.parent / "sample-standings.csv"


def edited_copy(source: Path, target: Path, line: int, text: str) -> Path:
    """``source`` with line ``line`` (1-based) replaced by ``text`` ("" leaves it blank)."""
    lines = source.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = text
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def refused(result, where: str, reason: str) -> None:
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stdout == ""
    assert f"contextledger: {where}: {reason}" in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.splitlines()) == 1


def test_an_unbalanced_quote_in_outcomes_is_refused_with_its_line(tmp_path):
    """It used to give one run a label spanning every line to the end of the file."""
    labels = edited_copy(SAMPLE_OUTCOMES, tmp_path / "labels.csv", 3, 's0003-loop,"good')
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels))
    refused(result, f"{labels}:3", "a quoted value is never closed (an unbalanced quote?)")


def test_a_quote_closed_lines_later_is_refused_too(tmp_path):
    """Balanced at last, but the value would hold two other runs' rows."""
    labels = edited_copy(SAMPLE_OUTCOMES, tmp_path / "labels.csv", 3, 's0003-loop,"good')
    edited_copy(labels, labels, 5, 's0073-loop,good"')
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels))
    refused(result, f"{labels}:3", "a quoted value runs on to line 5")


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("s0003-loop,good,extra", "3 values for the header's 2 columns"),
        (",good", "an outcome row needs a run_id and a label"),
        ("s0003-loop,   ", "an outcome row needs a run_id and a label"),
        ("s0003-loop", "an outcome row needs a run_id and a label"),
    ],
)
def test_an_outcome_row_with_extra_or_empty_values_is_refused_by_line(tmp_path, row, reason):
    """Blank lines before it do not shift the line named (they used to: rows were counted)."""
    labels = edited_copy(SAMPLE_OUTCOMES, tmp_path / "labels.csv", 3, "")
    edited_copy(labels, labels, 6, row)
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels))
    refused(result, f"{labels}:6", reason)


def test_a_json_lines_outcome_may_hold_unicode_line_separators(tmp_path):
    """U+2028, U+2029 and U+0085 are valid inside JSON; str.splitlines used to cut there."""
    import csv
    import json

    rows = list(csv.DictReader(SAMPLE_OUTCOMES.open(encoding="utf-8")))
    rows[0]["label"] = "good\u2028still\u2029one\x85label"
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    assert "\u2028" in labels.read_text(encoding="utf-8")  # raw, not escaped
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels), "--format", "json")
    assert result.exit_code == 0, result.output
    credited = {label for row in json.loads(result.stdout)["rows"] for label in row["outcomes"]}
    assert rows[0]["label"] in credited


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("s0001-fact-bench,call-3,fact,2147483648", "iteration '2147483648' is not a whole"),
        ("s0001-fact-bench,call-3,fact,1_0", "iteration '1_0' is not a whole number"),
        ("s0001-fact-bench,call-3,fact,3.5", "iteration '3.5' is not a whole number"),
        ("s0001-fact-bench,call-3,fact,-1", "iteration '-1' is not a whole number"),
        ("s0001-fact-bench,call-3,facts,3", "unknown standing 'facts'"),
        ("s0001-fact-bench,call-3,fact,3,x", "5 values for the header's 4 columns"),
    ],
)
@pytest.mark.parametrize("command", ["whatif", "report"])
def test_a_bad_standings_row_is_refused_by_file_and_line(tmp_path, row, reason, command):
    """An iteration of 2**31 and up used to crash with an Arrow overflow traceback."""
    standings = edited_copy(SAMPLE_STANDINGS, tmp_path / "standings.csv", 4, row)
    target = SAMPLE / "s0001-fact-bench.json.gz"
    extra = ["--policy", "none"] if command == "whatif" else ["-o", str(tmp_path / "out")]
    result = run(command, str(target), "--standings", str(standings), *extra)
    refused(result, f"{standings}:4", reason)


def test_a_json_lines_standing_past_32_bits_is_refused_by_line(tmp_path):
    standings = tmp_path / "standings.jsonl"
    row = {"run_id": "r", "tool_call_id": "c", "standing": "fact", "iteration": 2**31}
    standings.write_text(f"\n{__import__('json').dumps(row)}\n", encoding="utf-8")
    result = run("whatif", str(SAMPLE), "--policy", "none", "--standings", str(standings))
    refused(result, f"{standings}:2", "iteration 2147483648 is not a whole number")


def test_outcomes_that_are_not_utf8_are_refused_by_file_and_line(tmp_path):
    """The error used to be Python's codec message, naming neither file nor line."""
    labels = tmp_path / "labels.csv"
    labels.write_bytes(SAMPLE_OUTCOMES.read_bytes().replace(b"s0048-loop", b"s0048-\xffloop"))
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels))
    refused(result, f"{labels}:4", "not UTF-8 text")
