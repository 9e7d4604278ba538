"""Kill -9 an ingest at any moment, run it again: every run exactly once, nothing half-written.

Two ways in. Deterministic: a subprocess ingests with a hook that SIGKILLs itself at
the worst moments (a data file half-written under its temporary name; every data
file of a batch renamed into place but its commit not yet written; the commit file
written but not yet renamed). Random: the real ``contextledger ingest`` command is
killed (its whole process group, workers included) just after a commit lands, and
a little later.
After each kill the archive reads as its committed batches and nothing else; after
the rerun it holds every run once, no file that no commit lists, and the ledger of
the snapshots.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_snapshots
from contextledger.ledger.compute import compute_ledger
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import SAMPLE

HOOKED_INGEST = """
import os, signal, sys
from contextledger.archive import store
from contextledger.jobs.ingest import ingest

snapshots, archive, point, when = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = {"n": 0}

def due():
    seen["n"] += 1
    return seen["n"] == when

if point == "mid-write":
    write_table = store.pq.write_table
    def half(table, where, **options):
        if due():
            write_table(table.slice(0, table.num_rows // 2), where, **options)
            os.kill(os.getpid(), signal.SIGKILL)
        write_table(table, where, **options)
    store.pq.write_table = half
elif point == "before-commit":
    commit = store.Batch.commit
    def kill_first(self):
        if due():
            os.kill(os.getpid(), signal.SIGKILL)
        return commit(self)
    store.Batch.commit = kill_first
elif point == "commit-unrenamed":
    replace = os.replace
    def kill_on_commit(source, target):
        if "commits" in str(target) and due():
            os.kill(os.getpid(), signal.SIGKILL)
        replace(source, target)
    store.os.replace = kill_on_commit
ingest([snapshots], archive, workers=1, batch_runs=4)
"""


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("snapshots")
    shutil.copytree(SAMPLE, folder, dirs_exist_ok=True)
    synth_snapshots(folder, 16, SAMPLE, seed=7)
    return folder


def run_ids(folder: Path) -> set[str]:
    return set(read_runs(folder, workers=1).runs["run_id"].to_pylist())


def assert_committed_state(root: Path, expected: set[str], complete: bool) -> None:
    """Each committed run once, in ingest order; complete: every run, and no stray file."""
    archive = Archive.open(root)
    for mode in ACCOUNTING_MODES:
        runs = ArchiveTables(archive, mode).runs
        ids = runs["run_id"].to_pylist()
        assert len(ids) == len(set(ids)), "a run is in the archive twice"
        assert set(ids) <= expected
        assert runs["run_order"].to_pylist() == list(range(len(ids)))
        if complete:
            assert set(ids) == expected
    if complete:
        listed = {file.path for commit in archive.commits for file in commit.files}
        on_disk = {
            path.relative_to(root).as_posix()
            for path in root.rglob("*")
            if path.is_file() and path.suffix == ".parquet"
        }
        assert on_disk == listed
        assert not [path for path in root.rglob("*.tmp")]


def assert_same_ledger(root: Path, snapshots: Path) -> None:
    for mode in ACCOUNTING_MODES:
        archived = compute_ledger(ArchiveTables(Archive.open(root), mode))
        direct = compute_ledger(read_runs(snapshots, mode=mode, workers=1))
        assert_frame_equal(archived.frame, direct.frame, check_exact=True)


@pytest.mark.parametrize(
    ("point", "when"), [("mid-write", 9), ("before-commit", 2), ("commit-unrenamed", 3)]
)
def test_killed_at_the_worst_moment_then_rerun(tmp_path, snapshots, point, when):
    root = tmp_path / "archive"
    expected = run_ids(snapshots)
    hooked = [sys.executable, "-c", HOOKED_INGEST, str(snapshots), str(root), point, str(when)]
    killed = subprocess.run(hooked, capture_output=True, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    if point != "before-commit":
        assert leftovers, "the kill should have left a temporary file"
    assert_committed_state(root, expected, complete=False)  # readers see committed batches
    report = ingest([snapshots], root, workers=1, batch_runs=4)
    assert report.leftovers_removed >= len(leftovers)
    assert_committed_state(root, expected, complete=True)
    assert_same_ledger(root, snapshots)


def test_the_command_killed_at_random_moments_then_rerun(tmp_path, snapshots):
    root = tmp_path / "archive"
    expected = run_ids(snapshots)
    command = [
        str(Path(sys.executable).parent / "contextledger"),
        "ingest",
        str(snapshots),
        "--archive",
        str(root),
        "--batch-runs",
        "3",
        "--workers",
        "2",
    ]
    commits = root / "_manifest" / "commits"
    killed_midway = 0
    for pause in (0.0, 0.05, 0.15):  # after the next commit lands, wait a little, then kill
        before = len(list(commits.glob("*.json"))) if commits.is_dir() else 0
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if commits.is_dir() and len(list(commits.glob("*.json"))) > before:
                break
            time.sleep(0.01)
        time.sleep(pause)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # kill -9, reading workers included
            killed_midway += 1
        process.wait()
        assert_committed_state(root, expected, complete=False)
    assert killed_midway, "every ingest finished before it could be killed"
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    assert finished.returncode == 0, finished.stderr
    assert_committed_state(root, expected, complete=True)
    assert_same_ledger(root, snapshots)
    again = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "0 added" in again.stdout
