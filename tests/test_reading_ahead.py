"""The ledger's workers read while the command imports the engines; small inputs are
read without a pool.

The command used to import Polars and Arrow (0.3-0.4 s) before it started its
workers, then wait while they read: the two never overlapped. And whether a pool was
started depended on the number of files (eight or more), so the bundled sample's 14
small files paid a forkserver for 0.5 MB of reading (docs/benchmarks.md).
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from contextledger.processes import worker_pool
from contextledger.tables import ahead
from contextledger.tables.build import read_accountings
from contextledger.tables.files import FileRead

from .conftest import REPO

SAMPLE = REPO / "data" / "sample"

#: Runs the ledger over PATH with every process pool noting, as it is made, whether
#: the engines are imported yet and how its workers start.
ENGINES_WHEN_THE_POOL_STARTS = """
import concurrent.futures.process as process, sys
made = process.ProcessPoolExecutor.__init__
def noting(self, *args, **kwargs):
    method = kwargs["mp_context"].get_start_method()
    print("pool", "polars" in sys.modules, "pyarrow" in sys.modules, method, file=sys.stderr)
    made(self, *args, **kwargs)
process.ProcessPoolExecutor.__init__ = noting
import atexit, os
import contextledger.tables.files as files
ENGINES = ("polars", "pyarrow", "numpy")
atexit.register(lambda: print("parent", [n for n in ENGINES if n in sys.modules], file=sys.stderr))
read = files.read_for_tables
def reading(*args, **kwargs):  # each worker says once what engines it holds
    if not getattr(reading, "said", False):
        reading.said = True
        engines = [n for n in ENGINES if n in sys.modules]
        os.write(2, f"worker {engines}\\n".encode())  # one write: workers say it at once
    return read(*args, **kwargs)
reading.__module__, reading.__qualname__ = files.__name__, "read_for_tables"
files.read_for_tables = reading
from contextledger.cli import main
sys.argv = ["contextledger", "ledger", sys.argv[1]]
main()
"""


@pytest.fixture(scope="module")
def said_by_the_ledger(corpus) -> list[str]:
    """What the ledger of the corpus said of its pools and its processes' engines."""
    process = subprocess.run(
        [sys.executable, "-c", ENGINES_WHEN_THE_POOL_STARTS, str(corpus / "runs")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    return process.stderr.splitlines()


def test_the_ledger_starts_its_workers_before_it_imports_the_engines(said_by_the_ledger):
    """And so forks them from itself: with no engine loaded there is no thread pool to
    copy, and no forkserver to start (0.1-0.2 s of CPU, and as long a wait)."""
    assert said_by_the_ledger[0] == "pool False False fork"


def test_the_ledger_of_snapshots_runs_without_arrow_and_its_workers_without_engines(
    said_by_the_ledger,
):
    """Its tables are built and grouped with Polars alone (pyarrow and numpy were 0.15-0.2
    s of its CPU), and its workers send plain columns: they import neither."""
    workers = [line for line in said_by_the_ledger if line.startswith("worker")]
    assert workers and set(workers) == {"worker []"}
    parent = [line for line in said_by_the_ledger if line.startswith("parent")]
    assert parent == ["parent ['polars']"]


def test_a_small_input_is_read_without_a_pool(monkeypatch):
    def no_pool(count: int) -> None:
        raise AssertionError(f"a pool of {count} for the sample")

    monkeypatch.setattr(ahead, "worker_pool", no_pool)
    assert ahead.json_bytes(sorted(SAMPLE.iterdir())) < ahead.POOL_FROM_JSON_BYTES
    tables = read_accountings(SAMPLE, ("corrected",), workers=2)["corrected"]
    assert tables.runs.num_rows == 14


def test_the_corpus_is_worth_a_pool(corpus):
    files = sorted((corpus / "runs").iterdir())
    assert ahead.json_bytes(files) >= ahead.POOL_FROM_JSON_BYTES


@pytest.mark.parametrize("streams", [False, True])
def test_reading_ahead_reads_what_one_process_reads(corpus, streams):
    """Started ahead on two workers, the same reads in the same order as in this process,
    whichever accounting and with the message streams."""
    modes = ("corrected", "reference")
    runs = [corpus / "runs"]
    pooled = ahead.start_reading(runs, modes, {}, False, 2, streams)
    here = ahead.start_reading(runs, modes, {}, False, 1, streams)
    assert pooled.found == here.found
    for left, right in zip(pooled.results, here.results, strict=True):
        assert isinstance(left, FileRead)
        assert repr(left) == repr(right)  # messages compare by identity: their text
        assert [m.raw for s in left.streams for m in s.messages.messages] == [
            m.raw for s in right.streams for m in s.messages.messages
        ]


def test_a_reader_that_stops_early_leaves_no_worker_running(corpus, monkeypatch):
    pools = []

    def kept(count: int) -> ProcessPoolExecutor:
        pools.append(worker_pool(count))
        return pools[-1]

    monkeypatch.setattr(ahead, "worker_pool", kept)
    reading = ahead.start_reading([corpus / "runs"], ("corrected",), {}, False, 2, False)
    results = iter(reading.results)
    next(results)
    workers = list(pools[0]._processes.values())
    assert len(workers) == 2
    results.close()  # type: ignore[attr-defined]
    assert not any(worker.is_alive() for worker in workers)
