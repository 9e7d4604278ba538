"""Spill folders a killed process leaves are removed by the next command that spills.

An ingest, a what-if or a read of trace files writes span records past its budget to a
folder in the system's temporary folder and removes it when it ends, error or not; a
process killed outright (SIGKILL) cannot, and left it there for good.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.read.otel import _spill

from .test_otel_read import TRACES

OLD = time.time() - 2 * _spill.ABANDONED_AFTER_SECONDS


def gone_pid() -> int:
    """The id of a process that has ended (and been waited for)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def folder(root: Path, pid: int, *, touched: float = OLD, purpose: str = "ingest") -> Path:
    made = root / f"contextledger-spill-{purpose}-{pid}-{uuid.uuid4().hex}"
    (made / "runs-1").mkdir(parents=True)
    (made / "runs-1" / "token.0").write_bytes(b"x")
    for path in (made / "runs-1" / "token.0", made / "runs-1", made):
        os.utime(path, (touched, touched))
    return made


def test_only_the_untouched_folders_of_gone_processes_are_swept(tmp_path: Path):
    dead = gone_pid()
    abandoned = folder(tmp_path, dead)
    recent = folder(tmp_path, dead, touched=time.time())
    live = folder(tmp_path, os.getpid())
    other = tmp_path / f"contextledger-spill-x-{dead}-notahexname"
    other.mkdir()
    a_file = tmp_path / f"contextledger-spill-ingest-{dead}-{uuid.uuid4().hex}"
    a_file.write_bytes(b"")
    os.utime(a_file, (OLD, OLD))
    # a file written inside lately keeps its folder, whatever the folder's own time says
    busy = folder(tmp_path, dead)
    (busy / "runs-1" / "token.1").write_bytes(b"y")
    assert _spill.sweep_abandoned(str(tmp_path)) == [str(abandoned)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (recent, live, other, a_file, busy)
    )


def test_a_folder_name_says_whose_it_is_and_is_not_made_until_written(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    name = _spill.spill_folder("ingest")
    assert _spill.SPILL_NAME.fullmatch(Path(name).name)[1] == str(os.getpid())
    assert Path(name).parent == tmp_path and not Path(name).exists()


KILLED_INGEST = """
import sys, time
from contextledger.jobs import ingest as ingest_module
from contextledger.read.otel import _spill
_spill.SPANS_HELD = 3

def reader(sources, sidecar, spill):
    for source, read in ingest_module.local_reader(1)(sources, sidecar, spill):
        print("read", flush=True)
        time.sleep(120)
        yield source, read

ingest_module.ingest([sys.argv[1]], sys.argv[2], reader=reader)
"""


def test_the_next_ingest_removes_what_a_killed_ingest_spilled(tmp_path: Path):
    """The failing case: an ingest of a trace file past the budget, killed while its
    records waited on disk, left its folder; an ingest afterwards removes it (once it has
    been left untouched long enough not to be a live process's in another container)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_INGEST, str(TRACES[0]), str(tmp_path / "killed")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "read\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = [p for p in temporary.iterdir() if _spill.SPILL_NAME.fullmatch(p.name)]
    assert len(left) == 1 and any(p.is_file() for p in left[0].rglob("*"))
    for path in [*left[0].rglob("*"), left[0]]:
        os.utime(path, (OLD, OLD))
    old_tempdir = tempfile.tempdir
    tempfile.tempdir = str(temporary)
    try:
        ingest([TRACES[0]], tmp_path / "next", workers=1)
        assert not left[0].exists()
        # what-if and the table readers sweep too
        again = folder(temporary, gone_pid(), purpose="read")
        read_inputs([TRACES[0]])
        assert not again.exists()
    finally:
        tempfile.tempdir = old_tempdir
    assert not list(temporary.iterdir())


def test_an_archive_replays_rows_wait_in_a_folder_the_sweep_knows(tmp_path, monkeypatch):
    """``whatif ARCHIVE`` writes its rows to Parquet a batch at a time; killed, it left
    them in a folder no command removed."""
    import gc

    from contextledger.jobs.whatif import whatif_archive
    from contextledger.window.whatif import parse_policies

    from .conftest import SAMPLE

    ingest([SAMPLE], tmp_path / "archive", workers=1)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    replay = whatif_archive(tmp_path / "archive", parse_policies(["sliding:keep=2"]))
    assert replay is not None
    (rows,) = temporary.iterdir()
    matched = _spill.SPILL_NAME.fullmatch(rows.name)
    assert (
        matched
        and matched[1] == str(os.getpid())
        and rows.name.startswith("contextledger-spill-rows-")
    )
    assert replay.rows.collect().height == 14
    del replay
    gc.collect()
    assert not rows.exists()
