"""A selection that selects nothing says so on stderr, naming it, and still exits 0.

``ledger``, ``sql``, ``gates`` and ``outcomes`` (as ``whatif`` does): an archive's
``?label=`` or ``?run_id=`` that matches no run, an empty folder, an outcomes file
whose run ids match no run read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.jobs.ingest import ingest

from .conftest import SAMPLE

SAMPLE_OUTCOMES = SAMPLE.parent / "sample-outcomes.csv"
#: Each command with what it needs after PATHS.
COMMANDS = {
    "ledger": [],
    "gates": [],
    "outcomes": [],
    "sql": ["SELECT count(*) AS n FROM runs"],
}


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("selections") / "archive"
    ingest([SAMPLE], root, workers=1, outcomes=SAMPLE_OUTCOMES)
    return root


def invoke(command: str, path: str, *extra: str):
    return CliRunner().invoke(main, [command, path, *COMMANDS[command], *extra])


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("query", ["label=nosuch", "run_id=nosuch"])
def test_an_archive_filter_that_selects_no_run_says_so(archive, command, query):
    selection = f"{archive}?{query}"
    result = invoke(command, selection)
    assert result.exit_code == 0, result.output
    assert f"contextledger: no run selected by {selection}\n" in result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_selection_that_keeps_runs_says_nothing_of_the_kind(archive, command):
    result = invoke(command, f"{archive}?label=good")
    assert result.exit_code == 0, result.output
    assert "no run" not in result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_folder_says_no_run_was_read(tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke(command, str(empty))
    assert result.exit_code == 0, result.output
    assert f"contextledger: no run read from {empty}\n" in result.stderr


@pytest.mark.parametrize("command", ["ledger", "outcomes", "sql"])  # gates takes no labels
def test_an_outcomes_file_that_labels_no_run_read_is_named(tmp_path, command):
    labels = tmp_path / "labels.csv"
    labels.write_text("run_id,label\nnosuch-1,good\nnosuch-2,bad\n", encoding="utf-8")
    runs = tmp_path / "runs"
    shutil.copytree(SAMPLE, runs)
    args = [command, str(runs), *COMMANDS[command], "--outcomes", str(labels)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"contextledger: --outcomes {labels}: no run read carries one of its labels" in (
        result.stderr
    )
    half = tmp_path / "half.csv"
    half.write_text("run_id,label\nnosuch-1,good\ns0003-loop,bad\n", encoding="utf-8")
    result = CliRunner().invoke(main, [*args[:-1], str(half)])
    assert result.exit_code == 0, result.output
    assert "no run read carries" not in result.stderr
