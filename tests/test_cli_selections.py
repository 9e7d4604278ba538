"""A selection that selects nothing says so on stderr, naming it, and still exits 0.

``ledger``, ``sql``, ``gates`` and ``outcomes`` (as ``whatif`` does): an archive's
``?label=`` or ``?run_id=`` that matches no run, an empty folder, an outcomes file
whose run ids match no run read. Every reading command names the ids of a ``?run_id=``
filter that match no archived run, once; ``report`` says when nothing was read.
"""

from __future__ import annotations

import json
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


#: Every command that reads runs, with what it needs after PATHS ({out}: a fresh path).
READERS = {
    **COMMANDS,
    "check": [],
    "whatif": ["--policy", "none"],
    "compare": ["--policy", "none"],
    "report": ["-o", "{out}", "--charts", "none"],
}


def invoke(command: str, path: str, *extra: str):
    return CliRunner().invoke(main, [command, path, *COMMANDS[command], *extra])


def read_with(command: str, path: str, tmp_path: Path):
    args = [arg.replace("{out}", str(tmp_path / "out")) for arg in READERS[command]]
    return CliRunner().invoke(main, [command, path, *args])


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


@pytest.mark.parametrize("command", READERS)
def test_a_run_id_filter_names_its_ids_that_match_no_archived_run_once(archive, command, tmp_path):
    result = read_with(command, f"{archive}?run_id=s0001-fact-bench,nosuch,nosuch", tmp_path)
    assert result.exit_code == 0, result.output
    line = "contextledger: run_id filter rows for 1 run id(s) that match no run the archive "
    line += "holds: nosuch\n"
    assert result.stderr.count(line) == 1, result.stderr
    assert "s0001-fact-bench" not in result.stderr
    held = read_with(command, f"{archive}?run_id=s0001-fact-bench&label=good", tmp_path)
    assert held.exit_code == 0, held.output
    assert "run_id filter" not in held.stderr


def test_naming_unmatched_run_ids_reads_the_run_index_once(archive, monkeypatch):
    """The ids to name come from the lookup that picks the commits to read (a few runs of
    a million-run archive read only the commits holding them): no second lookup."""
    from contextledger.archive import manifest

    lookups = []
    real = manifest.held_runs

    def counted(*args, **kwargs):
        lookups.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(manifest, "held_runs", counted)
    args = ["--outcomes", str(SAMPLE_OUTCOMES)]
    result = invoke("ledger", f"{archive}?run_id=s0001-fact-bench,nosuch", *args)
    assert result.exit_code == 0, result.output
    assert "match no run the archive holds: nosuch" in result.stderr
    assert len(lookups) == 1


@pytest.mark.parametrize("query", ["", "?label=nosuch"])
def test_a_report_that_reads_no_run_says_so(archive, tmp_path, query):
    empty = tmp_path / "empty"
    empty.mkdir()
    source = f"{archive}{query}" if query else str(empty)
    result = read_with("report", source, tmp_path)
    assert result.exit_code == 0, result.output
    said = "selected by" if query else "read from"
    assert f"contextledger: no run {said} {source}\n" in result.stderr
    drawn = CliRunner().invoke(main, ["report", source, "-o", str(tmp_path / "drawn")])
    assert drawn.exit_code == 0, drawn.output
    assert not (tmp_path / "drawn" / "charts").exists() and "charts" not in drawn.stdout


def test_whatif_over_an_archive_names_standings_that_match_no_run_as_over_its_folder(
    archive, tmp_path
):
    standings = tmp_path / "standings.csv"
    rows = "run_id,tool_call_id,standing,iteration\nnosuch-run,x,fact,0\n"
    standings.write_text(rows + "s0001-fact-bench,x,fact,0\n", encoding="utf-8")
    line = "contextledger: standings rows for 1 run id(s) that match no run read: nosuch-run\n"
    for source in (str(SAMPLE), str(archive)):
        result = CliRunner().invoke(
            main, ["whatif", source, "--policy", "none", "--standings", str(standings)]
        )
        assert result.exit_code == 0, result.output
        assert result.stderr.count(line) == 1, result.stderr
    kept = CliRunner().invoke(
        main,
        [
            "whatif",
            f"{archive}?run_id=s0003-loop",
            "--policy",
            "none",
            "--standings",
            str(standings),
        ],
    )
    assert "s0001-fact-bench" in kept.stderr  # not replayed here: matches no run read


def test_a_run_id_file_that_is_missing_is_said_in_one_line(archive, tmp_path):
    """``?run_id=@FILE`` with no such file printed Python's ``[Errno 2] ...`` text."""
    missing = tmp_path / "ids.txt"
    result = CliRunner().invoke(main, ["ledger", f"{archive}?run_id=@{missing}"])
    assert result.exit_code == 2
    assert result.stderr == f"contextledger: {missing}: no such file (run_id=@FILE)\n"
    missing.write_text("s0003-loop\n")
    assert CliRunner().invoke(main, ["ledger", f"{archive}?run_id=@{missing}"]).exit_code == 0


def test_a_run_id_file_that_starts_with_a_bom_selects_its_first_id(archive, tmp_path):
    """Notepad's UTF-8 starts with U+FEFF; it was kept in the first id, which then matched
    no run."""
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("s0003-loop\ns0048-loop\n", encoding="utf-8")
    marked.write_text("s0003-loop\ns0048-loop\n", encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    expected = CliRunner().invoke(
        main, ["ledger", f"{archive}?run_id=@{plain}", "--format", "json"]
    )
    result = CliRunner().invoke(main, ["ledger", f"{archive}?run_id=@{marked}", "--format", "json"])
    assert (result.exit_code, result.stderr) == (0, expected.stderr)
    assert "match no" not in result.stderr
    assert json.loads(result.stdout)["runsRecorded"] == 2
    assert result.stdout == expected.stdout
