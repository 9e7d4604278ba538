"""When no input could be read there is no answer: nothing on stdout, no file written or
replaced, one line saying so and exit 1. An input read beside a missing one is still
answered; an empty folder is an answer (no run), said in a note."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT

from .conftest import SAMPLE

OUTCOMES = SAMPLE.parent / "sample-outcomes.csv"
#: Every command that reads inputs and writes a file with -o, its arguments after PATH.
WRITERS = {
    "ledger": [],
    "outcomes": ["--outcomes", str(OUTCOMES)],
    "gates": [],
    "whatif": ["--policy", "none"],
    "compare": ["--policy", "none"],
}
NOTHING = "contextledger: nothing was read (the input named above could not be): no output written"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", WRITERS)
def test_a_missing_path_prints_nothing_and_replaces_no_file(command, tmp_path):
    out = tmp_path / "good.txt"
    out.write_text("a good answer\n", encoding="utf-8")
    for extra in ([], ["-o", str(out)]):
        result = invoke(command, str(tmp_path / "nosuch"), *WRITERS[command], *extra)
        assert result.exit_code == EXIT_UNREADABLE_INPUT
        assert result.stdout == ""
        assert result.stderr.splitlines() == [
            f"contextledger: skipped {tmp_path / 'nosuch'}: no such file",
            NOTHING,
        ]
    assert out.read_text(encoding="utf-8") == "a good answer\n"


@pytest.mark.parametrize("command", ["sql", "check"])
def test_sql_and_check_over_a_missing_path_print_nothing(command, tmp_path):
    args = ["select 1"] if command == "sql" else []
    result = invoke(command, str(tmp_path / "nosuch"), *args)
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert result.stdout == "" and NOTHING in result.stderr


def test_an_unreadable_file_alone_is_nothing_read_too(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    result = invoke("ledger", str(broken))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert result.stdout == "" and NOTHING in result.stderr


def test_a_missing_path_beside_a_good_one_is_named_and_the_rest_answered(tmp_path):
    result = invoke("ledger", str(tmp_path / "nosuch"), str(SAMPLE), "--format", "csv")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert result.stdout.startswith("id,kind,offered,")
    assert "nothing was read" not in result.stderr


def test_an_empty_folder_is_an_answer_with_a_note(tmp_path):
    result = invoke("ledger", str(tmp_path), "--format", "csv")
    assert result.exit_code == 0
    assert result.stdout.startswith("id,kind,offered,")
    assert f"contextledger: no run read from {tmp_path}" in result.stderr


def test_report_over_a_missing_path_keeps_the_report_already_there(tmp_path):
    folder = tmp_path / "report"
    good = invoke("report", str(SAMPLE), "-o", str(folder), "--charts", "none")
    assert good.exit_code == 0, good.output
    page = (folder / "report.html").read_bytes()
    result = invoke("report", str(tmp_path / "nosuch"), "-o", str(folder), "--charts", "none")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert result.stdout == "" and NOTHING in result.stderr
    assert (folder / "report.html").read_bytes() == page


def test_ingest_of_missing_paths_makes_no_archive(tmp_path):
    archive = tmp_path / "archive"
    result = invoke("ingest", str(tmp_path / "nosuch"), "--archive", str(archive))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert result.stdout == "" and NOTHING in result.stderr
    assert not archive.exists()


@pytest.mark.parametrize("command", ["ledger", "whatif"])
def test_an_empty_file_is_named_once_and_changes_nothing_else(command, tmp_path):
    """A file of 0 bytes holds no run (a writer that has not written yet): it is named,
    skipped, and neither the answer nor the exit status changes, whatever its format."""
    folder = tmp_path / "runs"
    folder.mkdir()
    run = sorted(SAMPLE.iterdir())[0]
    (folder / run.name).symlink_to(run)
    args = [*WRITERS[command], "--format", "csv" if command == "ledger" else "jsonl"]
    alone = invoke(command, str(folder), *args)
    names = ["empty.json", "empty.json.gz", "traces.jsonl"]
    for name in names:
        (folder / name).write_bytes(b"")
    result = invoke(command, str(folder), *args)
    assert result.exit_code == alone.exit_code == 0, result.output
    assert result.stdout == alone.stdout
    assert result.stderr.splitlines() == [
        *(
            f"contextledger: skipped {folder / name}: empty file (0 bytes, no run in it)"
            for name in names
        ),
        *alone.stderr.splitlines(),
    ]


def test_an_empty_file_named_alone_is_an_answer_with_a_note(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    result = invoke("ledger", str(empty), "--format", "csv")
    assert result.exit_code == 0
    assert result.stdout.startswith("id,kind,offered,")
    assert result.stderr.splitlines()[:2] == [
        f"contextledger: skipped {empty}: empty file (0 bytes, no run in it)",
        f"contextledger: no run read from {empty}",
    ]
