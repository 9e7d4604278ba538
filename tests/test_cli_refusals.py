"""Empty or missing arguments are refused in one line, as their siblings are."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE

from .conftest import SAMPLE


def test_report_refuses_an_empty_output_folder_and_writes_nothing(tmp_path):
    os.chdir(tmp_path)  # where '' used to land
    try:
        result = CliRunner().invoke(main, ["report", str(SAMPLE), "-o", "", "--charts", "none"])
    finally:
        os.chdir(SAMPLE.parent.parent)
    assert result.exit_code == EXIT_USAGE
    assert "cannot write '': no folder name given" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("query", ["", "   "])
def test_sql_refuses_an_empty_query(query):
    result = CliRunner().invoke(main, ["sql", str(SAMPLE), query])
    assert result.exit_code == EXIT_USAGE and result.stdout == ""
    assert "sql needs a QUERY after PATH...; the one given is empty" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", str(SAMPLE), "--outcomes", "{missing}"],
        ["ledger", str(SAMPLE), "--static-tools", "{missing}"],
        ["ledger", str(SAMPLE), "--merge", "{missing}"],
        ["outcomes", str(SAMPLE), "--outcomes", "{missing}"],
        ["report", str(SAMPLE), "--outcomes", "{missing}", "-o", "{out}"],
        ["ingest", str(SAMPLE), "--archive", "{out}", "--outcomes", "{missing}"],
        ["ingest", str(SAMPLE), "--archive", "{out}", "--static-tools", "{missing}"],
    ],
)
def test_a_missing_named_file_is_said_as_a_missing_input_is(args, tmp_path):
    missing = str(tmp_path / "nosuch.csv")
    args = [a.replace("{missing}", missing).replace("{out}", str(tmp_path / "r")) for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == EXIT_USAGE
    assert result.stderr == f"contextledger: {missing}: no such file\n"


@pytest.mark.parametrize("labels", ["missing", "bad"])
def test_ingest_with_a_labels_file_it_cannot_use_makes_no_archive(labels, tmp_path):
    """It refused (exit 2) but left a new archive's archive.json and .lock behind."""
    path = tmp_path / "labels.csv"
    if labels == "bad":
        path.write_text("run_id,label\ns0003-loop\n")  # a row without its label
    root = tmp_path / "archive"
    args = ["ingest", str(SAMPLE), "--archive", str(root), "--outcomes", str(path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert str(path) in result.stderr and not root.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["gates", str(SAMPLE), "--min-offers", "99999999999"],
            "contextledger: gates: Invalid value for '--min-offers': 99999999999 is not in "
            "the range 1<=x<=1000000000 (see contextledger gates --help)",
        ),
        (
            ["ingest", str(SAMPLE), "--archive", "{tmp}/a", "--workers", "99999"],
            "contextledger: ingest: Invalid value for '--workers': 99999 is not in the range "
            "1<=x<=256 (see contextledger ingest --help)",
        ),
        (
            ["ledger", str(SAMPLE), "--format", "xml"],
            "contextledger: ledger: Invalid value for '--format': 'xml' is not one of 'table', "
            "'json', 'jsonl', 'csv', 'parquet' (see contextledger ledger --help)",
        ),
        (
            ["whatif", str(SAMPLE)],
            "contextledger: whatif: Missing option '--policy' (see contextledger whatif --help)",
        ),
        (
            ["ledger"],
            "contextledger: ledger: Missing argument 'PATHS...' (see contextledger ledger --help)",
        ),
        (
            ["compare", str(SAMPLE), "--cache-read", "x"],
            "contextledger: compare: Invalid value for '--cache-read': 'x' is not a valid "
            "float (see contextledger compare --help)",
        ),
        (["--bogus"], "contextledger: No such option '--bogus' (see contextledger --help)"),
        (
            ["lederg"],
            "contextledger: No such command 'lederg'. Did you mean 'ledger'? "
            "(see contextledger --help)",
        ),
    ],
)
def test_a_bad_option_value_is_one_line_like_every_other_refusal(args, said, tmp_path):
    """Click printed four lines (usage, hint, blank, error) for these alone."""
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == "" and result.stderr == said + "\n"
    assert not (tmp_path / "a").exists()


def test_no_arguments_at_all_still_print_the_help_with_the_exit_statuses():
    result = CliRunner().invoke(main, [])
    assert "Commands:" in result.output
    said = " ".join(result.output.split())
    for code in ("0 every input was read", "1 an input could not be read", "130 interrupted"):
        assert code in said


def test_ctrl_c_exits_130_without_a_traceback_or_output(tmp_path):
    """It exited 1 ("Aborted!"), the status the README gives an unreadable input. The
    signal goes to the process group, as a terminal sends it (the workers get it too)."""
    import signal
    import subprocess
    import sys
    import time

    from contextledger.cli.common import EXIT_INTERRUPTED

    from .conftest import require_corpus

    runs = require_corpus() / "runs"  # long enough to interrupt (about 5 s)
    out = tmp_path / "compare.csv"
    code = "from contextledger.cli import main; main()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "compare", str(runs), "--format", "csv", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    time.sleep(1.5)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert stdout == b"" and b"Traceback" not in stderr and b"Aborted" not in stderr
    assert list(tmp_path.iterdir()) == []  # no file, no temporary left
