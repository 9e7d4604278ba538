"""The sql command: a query over the DuckDB views, its formats, and errors without tracebacks."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.ledger.compute import compute_ledger
from contextledger.tables.build import read_runs
from contextledger.tables.sidecars import load_outcomes

from .conftest import REPO, SAMPLE

OUTCOMES = REPO / "data" / "sample-outcomes.csv"
WORST = "SELECT id, kind, offered, used, earn_rate, outcomes FROM ledger_rows LIMIT 5"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def expected_rows() -> list[dict]:
    tables = read_runs(SAMPLE, mode="reference").with_outcomes(load_outcomes(OUTCOMES))
    rows = compute_ledger(tables).rows().head(5)
    return rows.select("id", "kind", "offered", "used", "earn_rate", "outcomes").to_dicts()


def test_json_holds_the_worst_rows_of_the_ledger(expected_rows):
    options = ["--mode", "reference", "--outcomes", str(OUTCOMES), "--format", "json"]
    result = run("sql", str(SAMPLE), WORST, *options)
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == expected_rows


def test_table_and_csv_print_the_same_rows(expected_rows):
    common = ["sql", str(SAMPLE), WORST, "--mode", "reference", "--outcomes", str(OUTCOMES)]
    table = run(*common)
    assert table.exit_code == 0, table.stderr
    assert all(row["id"] in table.stdout for row in expected_rows)
    result = run(*common, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["id"] for row in rows] == [row["id"] for row in expected_rows]
    assert [json.loads(row["outcomes"]) for row in rows] == [
        row["outcomes"] for row in expected_rows
    ]


def test_the_mode_chooses_the_accounting():
    query = "SELECT DISTINCT accounting FROM runs"
    assert run("sql", str(SAMPLE), query, "--format", "csv").stdout.split() == [
        "accounting",
        "corrected",
    ]
    reference = run("sql", str(SAMPLE), query, "--mode", "reference", "--format", "csv")
    assert reference.stdout.split() == ["accounting", "reference"]


@pytest.mark.parametrize(
    ("query", "says"),
    [("SELEC * FROM ledger_rows", "Parser Error"), ("SELECT * FROM nowhere", "nowhere")],
)
def test_a_bad_query_is_a_usage_error_without_traceback(query, says):
    result = run("sql", str(SAMPLE), query)
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.startswith("contextledger: SQL error: ")
    assert says in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unreadable_inputs_are_named_and_exit_1_with_the_rest_queried(tmp_path: Path):
    folder = tmp_path / "batch"
    shutil.copytree(SAMPLE, folder)
    (folder / "invalid.json").write_text('{"commitLog": [', encoding="utf-8")
    result = run("sql", str(folder), "SELECT count(*) AS runs FROM runs", "--format", "json")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "invalid.json" in result.stderr
    assert json.loads(result.stdout) == {"runs": len(list(SAMPLE.glob("*.json.gz")))}


@pytest.mark.parametrize("only", ["SELECT 1", "data/sample"])
def test_the_query_is_the_last_argument_and_paths_are_required(only):
    """One argument is named for what it lacks (click alone said "Missing argument
    'PATHS...'" even when the one argument was a folder)."""
    result = CliRunner().invoke(main, ["sql", only])
    assert result.exit_code == EXIT_USAGE
    assert "sql needs PATH... and then the QUERY" in result.stderr
    assert "Missing argument" not in result.output
