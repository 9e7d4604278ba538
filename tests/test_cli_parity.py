"""A folder and the archive ingested from it exit alike and name the same unread inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT

from .conftest import SAMPLE

UNREAD = ("trunc.json.gz", "white.json")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample plus a truncated .json.gz and a .json of white space, and its archive."""
    from contextledger.jobs.ingest import ingest

    root = tmp_path_factory.mktemp("parity")
    folder = root / "dmg"
    shutil.copytree(SAMPLE, folder)
    good = (SAMPLE / "s0003-loop.json.gz").read_bytes()
    (folder / "trunc.json.gz").write_bytes(good[:500])
    (folder / "white.json").write_bytes(b" \n")
    ingest([folder], root / "archive", workers=1)
    return folder, root / "archive"


@pytest.mark.parametrize("command", ["whatif", "compare"])
def test_a_replay_over_the_archive_names_what_ingest_could_not_read(damaged, command):
    folder, archive = damaged
    results = [
        CliRunner().invoke(main, [command, str(source), "--policy", "none"])
        for source in (folder, archive)
    ]
    for result in results:
        assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
        for name in UNREAD:
            assert f"{name}: " in result.stderr and "skipped " in result.stderr
    assert results[0].stdout == results[1].stdout
    assert "an unknown number of runs left out, 2 problem(s) named below" in results[1].stderr


def test_a_selection_of_runs_other_files_held_is_not_blamed_for_them(damaged):
    _, archive = damaged
    chosen = f"{archive}?run_id=s0001-fact-bench"
    result = CliRunner().invoke(main, ["whatif", chosen, "--policy", "none"])
    assert result.exit_code == 0 and "skipped" not in result.stderr


@pytest.mark.parametrize("command", ["ledger", "check"])
def test_strict_stops_at_the_first_unread_input_of_a_folder_or_its_archive(damaged, command):
    for source in damaged:
        result = CliRunner().invoke(main, [command, str(source), "--strict"])
        assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
        assert result.stdout == ""
        assert result.stderr.count("(stopped: --strict)") == 1
        assert "trunc.json.gz: corrupt or truncated gzip" in result.stderr


def test_strict_over_an_archive_that_read_everything_goes_on(damaged):
    _, archive = damaged
    result = CliRunner().invoke(main, ["ledger", f"{archive}?run_id=s0001-fact-bench", "--strict"])
    assert result.exit_code == 0 and "stopped" not in result.stderr
