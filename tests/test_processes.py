"""Worker processes die with the process that started them, and never keep an archive locked.

An ingest killed with ``kill -9`` (its own process only, as a user or the OOM killer
does it) once left its two reading workers alive, blocked writing to a pipe, still
holding the archive's ``flock``: every later ingest was refused as "being written by
another process". Now every pool comes from ``processes.worker_pool`` (workers get
SIGKILL when their parent dies) and the lock is a POSIX record lock, which forked
workers do not inherit.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.ledger.compute import compute_ledger
from contextledger.processes import start_method
from contextledger.tables.build import read_runs

from .conftest import REPO

PACKAGE = REPO / "src" / "contextledger"


def group_members(group: int) -> list[int]:
    """The live processes (not zombies) of process group ``group``, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (command)"
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(entry.name))
    return members


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_an_ingest_killed_mid_way_leaves_no_worker_and_no_lock(tmp_path, corpus):
    snapshots = tmp_path / "runs"
    shutil.copytree(corpus / "runs", snapshots)
    root = tmp_path / "archive"
    command = [
        str(Path(sys.executable).parent / "contextledger"),
        *("ingest", str(snapshots), "--archive", str(root), "--no-progress"),
        *("--workers", "2", "--batch-runs", "100"),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    left: list[int] = []
    try:  # workers started and reading: kill the ingest alone, not its group
        assert wait_for(lambda: len(group_members(process.pid)) >= 3, 60), "no workers started"
        time.sleep(0.3)
        assert process.poll() is None, "the ingest finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        gone = wait_for(lambda: not group_members(process.pid), 5)
        left = group_members(process.pid)
        assert gone, f"processes of the killed ingest still running: {left}"
    finally:
        kill_all(left)
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    assert finished.returncode == 0, finished.stderr
    for mode in ("corrected", "reference"):
        archived = compute_ledger(ArchiveTables(Archive.open(root), mode))
        direct = compute_ledger(read_runs(snapshots, mode=mode, workers=1))
        assert_frame_equal(archived.frame, direct.frame, check_exact=True)


KILLED_WITH_A_POOL = """
import os, signal, sys, time
from contextledger.processes import worker_pool

with worker_pool(2) as pool:
    pids = set()
    while len(pids) < 2:
        pids |= {future.result() for future in [pool.submit(os.getpid) for _ in range(8)]}
    print(*pids, flush=True)
    pool.submit(time.sleep, 60)
    pool.submit(time.sleep, 60)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_pool_workers_die_with_their_parent():
    """The helper itself (``read_runs``, ``ingest`` and ``synth`` all use it): workers
    busy with long tasks are gone within moments of their parent's kill."""
    process = subprocess.run(
        [sys.executable, "-c", KILLED_WITH_A_POOL], capture_output=True, text=True, check=False
    )
    assert process.returncode == -signal.SIGKILL, process.stderr
    workers = [int(pid) for pid in process.stdout.split()]
    assert len(workers) == 2

    def alive() -> list[int]:
        return [pid for pid in workers if Path(f"/proc/{pid}").exists() and not _zombie(pid)]

    try:
        assert wait_for(lambda: not alive(), 5), f"workers outlived their parent: {alive()}"
    finally:
        kill_all(alive())


def _zombie(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_every_process_pool_comes_from_the_helper():
    """No module builds its own pool (whose workers would outlive a killed parent)."""
    builders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "processes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in ("ProcessPoolExecutor", "Pool", "Process"):
                builders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert builders == []


WORKERS_AFTER_THE_ENGINES_RAN = """
import os, sys
import duckdb, polars as pl
from contextledger.processes import worker_pool

pl.DataFrame({"k": range(100_000)}).group_by(pl.col("k") % 7).len()  # its pool, running
duckdb.sql("SELECT sum(i) FROM range(100000) t(i)").fetchall()
with worker_pool(2) as pool:
    found = pool.submit(eval, "sorted({'polars', 'duckdb'} & set(__import__('sys').modules))")
    print(found.result(), pool.submit(os.getppid).result() != os.getpid())
"""


def test_workers_inherit_no_engine_from_a_parent_that_ran_them():
    """A worker forked from a process running Polars' and DuckDB's thread pools inherited
    their half-held locks: one segfaulted under load (``BrokenProcessPool``). Workers
    now come from a forkserver that never imported an engine."""
    process = subprocess.run(
        [sys.executable, "-c", WORKERS_AFTER_THE_ENGINES_RAN],
        capture_output=True,
        text=True,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.split("\n") == ["[] True", ""]


FORKED_ONLY_WHILE_QUIET = """
import threading
from contextledger.processes import start_method
print(start_method())
release = threading.Event()
waiting = threading.Thread(target=release.wait)
waiting.start()
print(start_method())
release.set()
waiting.join()
import polars
print(start_method())
"""


def test_workers_are_forked_only_from_one_thread_that_imported_no_engine():
    """Forking copies only the forking thread: a second thread's held locks, or an
    engine's thread pool, would be copied half-held; without either, a fork is safe and
    spares the forkserver."""
    process = subprocess.run(
        [sys.executable, "-c", FORKED_ONLY_WHILE_QUIET], capture_output=True, text=True, check=False
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.split() == ["fork", "forkserver", "forkserver"]
    assert "polars" in sys.modules and start_method() == "forkserver"  # this test process


def test_a_script_without_a_main_guard_reads_with_workers_once(tmp_path):
    """Under ``spawn`` and ``forkserver`` multiprocessing runs the parent's script again in
    every worker, so a script with no ``if __name__ == "__main__"`` guard (what reading
    runs needed under ``fork``) started pools inside its workers and broke; ours are
    started without it."""
    script = tmp_path / "read.py"
    script.write_text(
        "from contextledger.tables import ahead\n"
        "from contextledger.tables.build import read_runs\n"
        "ahead.POOL_FROM_JSON_BYTES = 0  # the sample is read by workers too\n"
        "print('script body', flush=True)\n"
        f"print(read_runs({str(REPO / 'data' / 'sample')!r}, workers=2).runs.num_rows)\n",
        encoding="utf-8",
    )
    process = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.split("\n") == ["script body", "14", ""]
    assert process.stderr == ""
