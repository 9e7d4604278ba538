"""Which files in an input folder are read, by name: snapshot suffixes in any case, and
every other file named on stderr (a note, exit status unchanged), never silently left."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.read.snapshot_files import describe_skipped, find_snapshot_files
from contextledger.tables.build import read_runs

from .conftest import SAMPLE, as_new_run

#: The user's trial: one lower-case name, two upper-case ones, and a bare ``.gz``.
READ = ["s0001-fact-bench", "s0003-loop", "s0048-loop"]
NOTE = (
    "contextledger: not read: 1 file in input folders without a snapshot suffix (.json, "
    ".json.gz, .jsonl, .jsonl.gz, .ndjson, .ndjson.gz, in any case; name a file to read it "
    "whatever its name): {}"
)


@pytest.fixture
def ext2(tmp_path: Path) -> Path:
    folder = tmp_path / "ext2"
    folder.mkdir()
    shutil.copy(SAMPLE / "s0001-fact-bench.json.gz", folder)
    shutil.copy(SAMPLE / "s0003-loop.json.gz", folder / "s0003-loop.JSON.GZ")
    plain = gzip.decompress((SAMPLE / "s0048-loop.json.gz").read_bytes())
    (folder / "s0048-loop.JSON").write_bytes(plain)
    shutil.copy(SAMPLE / "s0073-loop.json.gz", folder / "s0073-loop.gz")
    return folder


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_suffixes_match_in_any_case_and_other_files_are_named(ext2: Path):
    """``.JSON.GZ`` and ``.JSON`` were ignored, and so was ``.gz``, without a word."""
    found = find_snapshot_files([ext2])
    assert [path.name for path in found.files] == [
        "s0001-fact-bench.json.gz",
        "s0003-loop.JSON.GZ",
        "s0048-loop.JSON",
    ]
    assert found.skipped == [str(ext2 / "s0073-loop.gz")]
    tables = read_runs(ext2)
    assert tables.runs["run_id"].to_pylist() == READ
    assert tables.skipped == (str(ext2 / "s0073-loop.gz"),)
    expected = read_runs([SAMPLE / f"{run_id}.json.gz" for run_id in READ])
    assert_frame_equal(
        compute_ledger(tables).frame, compute_ledger(expected).frame, check_exact=True
    )
    assert [stream.run_id for stream in read_inputs(ext2).streams] == READ
    assert read_inputs(ext2).skipped == [str(ext2 / "s0073-loop.gz")]


@pytest.mark.parametrize(
    "command",
    [
        ["ledger"],
        ["sql", "SELECT count(*) FROM runs"],
        ["whatif", "--policy", "none", "--policy", "sliding:keep=2"],
        ["ingest", "--archive", "ARCHIVE", "--no-progress"],
        ["report", "--charts", "none", "--policy", "none", "-o", "REPORT"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_names_the_files_it_did_not_read_and_exits_0(ext2, tmp_path, command):
    named = [str(tmp_path / part) if part in ("ARCHIVE", "REPORT") else part for part in command]
    result = run(named[0], str(ext2), *named[1:])  # sql's query comes after the paths
    assert result.exit_code == 0, result.output
    assert NOTE.format(ext2 / "s0073-loop.gz") in result.stderr.splitlines()
    if command[0] == "report":
        page = (tmp_path / "REPORT" / "report.html").read_text(encoding="utf-8")
        assert "1 file(s) in the input folders were not read" in page
        assert f"<code>{ext2 / 's0073-loop.gz'}</code>" in page


def test_the_note_does_not_change_the_exit_status_of_a_bad_input(ext2):
    (ext2 / "broken.json").write_text("{", encoding="utf-8")
    result = run("ledger", str(ext2))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert NOTE.format(ext2 / "s0073-loop.gz") in result.stderr.splitlines()
    assert "3 run(s) metered" in result.stdout


def test_a_bare_gz_named_as_a_file_is_read_as_one_snapshot(ext2):
    result = run("ledger", str(ext2 / "s0073-loop.gz"))
    assert result.exit_code == 0, result.output
    assert "1 run(s) metered" in result.stdout and "not read" not in result.stderr


def test_the_name_says_json_lines_and_gives_the_run_id_in_any_case(tmp_path):
    """A bare snapshot's run id is its name without the suffix, whatever its case, and
    ``.NDJSON.GZ`` is JSON Lines like ``.ndjson``."""
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    (tmp_path / "bare.Json").write_text(json.dumps(document["snapshot"]), encoding="utf-8")
    lines = [as_new_run(json.loads(json.dumps(document)), f"line-{n}") for n in (1, 2)]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (tmp_path / "runs.NDJSON.GZ").write_bytes(gzip.compress(text.encode()))
    tables = read_runs(tmp_path)
    assert tables.problems.num_rows == 0 and tables.skipped == ()
    assert tables.runs["run_id"].to_pylist() == ["bare", "line-1", "line-2"]


def test_the_note_shows_how_many_and_the_first_few():
    line = describe_skipped([f"in/{name}.txt" for name in "abcde"])
    assert line is not None and line.startswith("not read: 5 files in input folders")
    assert line.endswith(": in/a.txt, in/b.txt, in/c.txt, ...")
    assert describe_skipped([]) is None
