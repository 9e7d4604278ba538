"""A damaged archive is named, never a traceback or a silent gap.

An archive of the sample in three commits (5, 5 and 4 runs) is damaged the ways files
get damaged: a data file cut short, deleted, or garbled in place; a commit file
garbled or deleted (its data files then look like an interrupted ingest's leftovers).
Every reading command names the damaged file and why, reads the intact commits and
exits 1; ingest refuses to write (exit 2) and leaves every file as it found it;
``verify_archive`` names each, and also what only reading every row shows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveDamaged, ArchiveTables, verify_archive
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.ledger.compute import compute_ledger

from .conftest import SAMPLE


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "archive"
    ingest([SAMPLE], root, workers=1, batch_runs=5, ingest_date="2026-11-02")
    assert [commit.run_count for commit in Archive.open(root).commits] == [5, 5, 4]
    return root


@pytest.fixture
def archive(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "archive"
    shutil.copytree(pristine, root)
    return root


def commit_file(root: Path, seq: int) -> Path:
    [path] = (root / "_manifest" / "commits").glob(f"{seq:08d}-*.json")
    return path


def data_file(root: Path, seq: int, table: str = "runs") -> Path:
    return next((root / table).rglob(f"part-{seq:08d}-*.parquet"))


def truncate_data_file(root: Path, seq: int = 2) -> tuple[Path, int]:
    path = data_file(root, seq)
    path.write_bytes(path.read_bytes()[:-100])
    return path, 9


def delete_data_file(root: Path) -> tuple[Path, int]:
    path = data_file(root, 2, "offers")
    path.unlink()
    return path, 9


def garble_commit_file(root: Path) -> tuple[Path, int]:
    path = commit_file(root, 1)
    path.write_text('{"seq": 1, "tok', encoding="utf-8")
    return path, 9


def delete_commit_file(root: Path) -> tuple[Path, int]:
    path = commit_file(root, 2)
    path.unlink()
    return path, 9


def delete_last_commit_file(root: Path) -> tuple[Path, int]:
    path = commit_file(root, 3)  # no gap: only the head says commit 3 was written
    path.unlink()
    return path, 10


DAMAGE: dict[str, Callable[[Path], tuple[Path, int]]] = {
    "truncated data file": truncate_data_file,
    "deleted data file": delete_data_file,
    "garbled commit file": garble_commit_file,
    "deleted commit file": delete_commit_file,
    "deleted last commit file": delete_last_commit_file,
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_named(result: Result, damaged: Path) -> None:
    """Exit 1, the file named on stderr, no traceback (an exception other than exit)."""
    assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    assert f"skipped {damaged}: " in result.stderr


@pytest.mark.parametrize("damage", DAMAGE)
def test_every_reading_command_names_the_damage_and_reads_the_rest(archive, tmp_path, damage):
    damaged, runs_left = DAMAGE[damage](archive)
    ledger = invoke("ledger", str(archive), "--format", "csv")
    assert_named(ledger, damaged)
    assert f"{runs_left} run(s) metered" in ledger.stderr
    sql = invoke("sql", str(archive), "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert_named(sql, damaged)
    assert sql.stdout == f"n\n{runs_left}\n"
    whatif = invoke("whatif", str(archive), "--policy", "none")
    assert_named(whatif, damaged)
    assert f"{runs_left} archived run(s) replayed" in whatif.stderr
    report = invoke("report", str(archive), "-o", str(tmp_path / "report"), "--charts", "none")
    assert_named(report, damaged)
    assert f"{runs_left} run(s) metered" in report.stdout


@pytest.mark.parametrize("damage", DAMAGE)
def test_ingest_refuses_a_damaged_archive_and_leaves_its_files_alone(archive, damage):
    damaged, _ = DAMAGE[damage](archive)
    before = sorted(p.relative_to(archive) for p in archive.rglob("*") if p.is_file())
    result = invoke("ingest", str(SAMPLE), "--archive", str(archive), "--workers", "1")
    assert result.exit_code == EXIT_USAGE and result.exception is not None
    assert isinstance(result.exception, SystemExit)
    assert "is damaged, so nothing was written to it" in result.stderr
    assert f"  {damaged}: " in result.stderr
    after = sorted(p.relative_to(archive) for p in archive.rglob("*") if p.is_file())
    assert after == before  # the lost commit's files were not taken for leftovers
    with pytest.raises(ArchiveDamaged) as raised:
        ingest([SAMPLE], archive, workers=1)
    assert [problem.path for problem in raised.value.problems] == [str(damaged)]


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_archive_names_each_damaged_file(archive, damage):
    assert verify_archive(archive) == []
    damaged, _ = DAMAGE[damage](archive)
    [problem] = verify_archive(archive)
    assert problem.path == str(damaged)


def test_reasons_say_what_is_wrong_and_what_it_costs(archive):
    truncated, _ = truncate_data_file(archive, 3)
    missing, _ = delete_commit_file(archive)
    reasons = {problem.path: problem.reason for problem in Archive.open(archive).damage}
    assert reasons[str(missing)].startswith("commit file missing (")
    assert "its 5 run(s) (run_order 5-9) are left out" in reasons[str(missing)]
    assert "truncated or overwritten" in reasons[str(truncated)]
    assert (
        "commit 3 (ingest date 2026-11-02) is left out, with its 4 run(s)"
        in reasons[str(truncated)]
    )


@pytest.mark.parametrize(
    ("damage", "left_out"),
    [
        ("truncated data file", "5 run(s) left out, 1 problem(s)"),
        ("deleted commit file", "5 run(s) left out, 1 problem(s)"),
        ("deleted last commit file", "an unknown number of runs left out, 1 problem(s)"),
    ],
)
def test_whatif_counts_the_runs_left_out_apart_from_the_problems(archive, damage, left_out):
    """It once said "N could not be replayed", N the damaged files, not the runs."""
    DAMAGE[damage](archive)
    result = invoke("whatif", str(archive), "--policy", "none")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert f"; {left_out} named below\n" in result.stderr


def test_several_damaged_files_of_a_commit_count_its_runs_once(archive):
    for path in (archive / "piece_totals").rglob("part-*.parquet"):
        path.unlink()  # 3 commits x 2 accountings: 6 files, 14 runs
    result = invoke("whatif", str(archive), "--policy", "none")
    assert "0 archived run(s) replayed" in result.stderr
    assert "; 14 run(s) left out, 6 problem(s) named below\n" in result.stderr
    picked = invoke("whatif", f"{archive}?run_id=s0001-fact-bench", "--policy", "none")
    assert "; up to 14 run(s) left out, 6 problem(s) named below\n" in picked.stderr


def replace_first_commit(archive: Path, other: Path, with_files: bool) -> None:
    """Commit 1 swapped for another archive's commit 1 (and its data files, if asked)."""
    commit_file(archive, 1).unlink()
    copied = commit_file(other, 1)
    shutil.copy(copied, archive / "_manifest" / "commits" / copied.name)
    if with_files:
        for file in json.loads(copied.read_text())["files"]:
            (archive / file["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(other / file["path"], archive / file["path"])


@pytest.mark.parametrize("with_files", [False, True])
def test_a_commit_file_from_another_archive_leaves_out_what_it_says(archive, tmp_path, with_files):
    """Commit 1 (runs 0-4) replaced by another archive's (runs 0-13): commits 2 and 3 no
    longer continue the run orders, and are left out as the message says, not counted
    anyway (with the other's files in place too, runs 5-13 were counted twice)."""
    other = tmp_path / "other"
    ingest([SAMPLE], other, workers=1, ingest_date="2026-11-02")
    replace_first_commit(archive, other, with_files)
    damage = Archive.open(archive).damage
    unchained = [p for p in damage if "starts at run_order" in p.reason]
    assert [(p.path, p.commit, p.runs) for p in unchained] == [
        (str(commit_file(archive, 2)), 2, 5),
        (str(commit_file(archive, 3)), 3, 4),
    ]
    assert unchained[0].reason == (
        "starts at run_order 5, but commit 1 ends at 13: commit 2 (ingest date 2026-11-02) "
        "is left out, with its 5 run(s)"
    )
    assert unchained[1].reason.startswith("starts at run_order 10, but commit 1 ends at 13: ")
    ledger = invoke("ledger", str(archive), "--format", "csv")
    assert_named(ledger, commit_file(archive, 2))
    assert_named(ledger, commit_file(archive, 3))
    query = "SELECT count(DISTINCT run_id) AS n, count(*) AS m FROM runs"
    sql = invoke("sql", str(archive), query, "--format", "csv")
    if with_files:
        assert "14 run(s) metered" in ledger.stderr
        assert sql.stdout == "n,m\n14,14\n"
    else:  # every commit left out: nothing was read, so nothing is answered
        for result in (ledger, sql):
            assert result.exit_code == EXIT_UNREADABLE_INPUT and result.stdout == ""
            # every file the other commit lists is missing (run totals included)
            assert "nothing was read (the 20 inputs named above" in result.stderr
    if with_files:  # the other archive's commit, whole: its ledger
        assert_frame_equal(
            compute_ledger(ArchiveTables(Archive.open(archive), "corrected")).frame,
            compute_ledger(ArchiveTables(Archive.open(other), "corrected")).frame,
            check_exact=True,
        )
    assert invoke("ingest", str(SAMPLE), "--archive", str(archive)).exit_code == EXIT_USAGE


def test_a_file_garbled_in_place_is_found_by_verify_archive(archive):
    """Same size, so opening does not notice; its commit's checksum does."""
    path = data_file(archive, 2, "offers")
    data = bytearray(path.read_bytes())
    data[8:400] = bytes(392)  # the first data page, not the footer
    path.write_bytes(bytes(data))
    assert Archive.open(archive).damage == []
    [problem] = verify_archive(archive)
    assert problem.path == str(path) and "bytes differ" in problem.reason


def test_runs_no_commit_counts_are_named_by_verify_archive(archive):
    path = commit_file(archive, 3)
    document = json.loads(path.read_text())
    document["run_count"] = 3  # the commit now counts one run fewer than its files hold
    path.write_text(json.dumps(document))
    problems = verify_archive(archive)
    assert [problem.path for problem in problems] == [str(path)] * 3  # index, both modes
    assert "holds 4 run(s) (run_order 10-13), but the commit counts 3" in problems[0].reason


def test_archives_written_before_sizes_were_recorded_are_checked_by_their_footers(archive):
    for path in (archive / "_manifest" / "commits").glob("*.json"):
        document = json.loads(path.read_text())
        for file in document["files"]:
            del file["bytes"]
        path.write_text(json.dumps(document))
    (archive / "_manifest" / "head.json").unlink()
    assert Archive.open(archive).damage == []
    truncated, runs_left = truncate_data_file(archive)
    [problem] = Archive.open(archive).damage
    assert problem.path == str(truncated) and "not a readable Parquet file" in problem.reason
    tables = ArchiveTables(Archive.open(archive), "corrected")
    assert compute_ledger(tables).runs_recorded == runs_left


def test_damage_outside_the_selected_dates_does_not_count(tmp_path):
    root = tmp_path / "archive"
    ingest([SAMPLE / "s0001-fact-bench.json.gz"], root, workers=1, ingest_date="2026-11-01")
    ingest([SAMPLE], root, workers=1, ingest_date="2026-11-02")
    data_file(root, 1).unlink()
    assert invoke("ledger", f"{root}?since=2026-11-02").exit_code == 0
    assert invoke("ledger", f"{root}?until=2026-11-01").exit_code == EXIT_UNREADABLE_INPUT


RACER = """
import sys, time
from pathlib import Path
from contextledger.cli import main

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.001)
main(["ingest", *sys.argv[3:]])
"""


def test_two_ingests_racing_to_create_an_archive(tmp_path):
    """Started together (each waits for the other to be ready): the loser says another
    process is writing the archive, never a stray file error; the winner's archive is
    whole. Repeated, since which moment they meet differs from trial to trial."""
    losses = 0
    for trial in range(3):
        root, go = tmp_path / f"archive{trial}", tmp_path / f"go{trial}"
        readies = [tmp_path / f"ready{trial}-{n}" for n in range(2)]
        arguments = [str(go), str(SAMPLE), "--archive", str(root), "--workers", "1"]
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(ready), *arguments],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for ready in readies
        ]
        while not all(ready.exists() for ready in readies):
            time.sleep(0.005)
        go.touch()
        results = [(racer.wait(60), *racer.communicate()) for racer in racers]
        codes = sorted(code for code, _, _ in results)
        assert codes in ([0, 0], [0, EXIT_USAGE]), results
        for code, _, stderr in results:
            if code == EXIT_USAGE:
                losses += 1
                assert stderr == f"contextledger: {root} is being written by another process\n"
        assert verify_archive(root) == []
        assert compute_ledger(ArchiveTables(Archive.open(root), "corrected")).runs_recorded == 14
    assert losses  # they did meet


def test_check_names_a_file_garbled_in_place_that_only_reading_every_row_shows(archive):
    """``check DIR`` runs ``verify_archive``: the damage opening an archive cannot see."""
    path = data_file(archive, 2, "offers")
    data = bytearray(path.read_bytes())
    data[len(data) // 3 : len(data) // 3 + 64] = b"\0" * 64  # same size, garbled pages
    path.write_bytes(bytes(data))
    assert CliRunner().invoke(main, ["check", str(SAMPLE)]).exit_code == 0
    result = CliRunner().invoke(main, ["check", str(archive)])
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert str(path) in result.stderr and "Traceback" not in result.output
