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
