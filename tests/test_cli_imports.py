"""A command imports only what it needs: help is instant, a ledger loads no DuckDB or charts.

Checked in a fresh interpreter (``sys.modules`` after the command), not by timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import SAMPLE

#: What no ``--help`` may load: the data and chart stack.
HEAVY = ("polars", "pyarrow", "duckdb", "altair", "jinja2", "vl_convert", "numpy")
#: What ``ledger`` may not load: it reads runs and sums them, it draws and queries nothing
#: (pandas, which pyarrow's constructors from Python lists import, is 0.3 s of CPU).
NOT_FOR_THE_LEDGER = ("duckdb", "altair", "jinja2", "vl_convert", "pandas")
COMMANDS = ("ledger", "outcomes", "sql", "gates", "whatif", "report", "ingest", "synth", "check")


def modules_after(*args: str, top_level: bool = True) -> list[str]:
    """The modules (``top_level``: their top-level packages) a fresh interpreter holds
    after ``contextledger ARGS``."""
    code = (
        "import io, json, sys\n"
        "from contextledger.cli import main\n"
        "from contextlib import redirect_stderr, redirect_stdout\n"
        "with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        f"        main({list(args)!r})\n"
        "    except SystemExit as end:\n"
        "        assert end.code in (0, None), end.code\n"
        f"print(json.dumps(sorted({{name.split('.')[0] if {top_level} else name "
        "for name in sys.modules})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_imports_no_data_or_chart_library(command):
    args = [command, "--help"] if command else ["--help"]
    loaded = modules_after(*args)
    assert "click" in loaded  # the check sees what the command loaded
    assert [name for name in HEAVY if name in loaded] == []


def test_the_ledger_loads_no_duckdb_nor_the_chart_stack():
    loaded = modules_after("ledger", str(SAMPLE))
    assert "polars" in loaded  # it did compute a ledger
    assert [name for name in NOT_FOR_THE_LEDGER if name in loaded] == []


def test_the_ledger_of_snapshots_writes_parquet_without_arrow(tmp_path):
    """Its tables are built, grouped and written with Polars alone: pyarrow, and the
    numpy it loads, were 0.15-0.2 s of its CPU (docs/benchmarks.md). The table's own
    process is checked over the corpus (test_reading_ahead)."""
    written = tmp_path / "ledger.parquet"
    loaded = modules_after("ledger", str(SAMPLE), "--format", "parquet", "-o", str(written))
    assert written.stat().st_size > 0
    assert "polars" in loaded
    assert [name for name in ("pyarrow", "numpy") if name in loaded] == []


def test_the_ledger_of_snapshots_loads_no_archive_code():
    """Its Parquet and filesystem stack is 0.07 s of CPU a folder of snapshots never needs."""
    loaded = modules_after("ledger", str(SAMPLE), top_level=False)
    assert "contextledger.read.snapshot" in loaded
    assert [
        name for name in loaded if name.startswith(("contextledger.archive", "pyarrow.parquet"))
    ] == []


def test_the_check_sees_a_heavy_import():
    """The same probe, on a command that does load DuckDB: it is seen."""
    loaded = modules_after("sql", str(SAMPLE), "SELECT 1 AS one")
    assert "duckdb" in loaded


BLAS_THREADS_AFTER_THE_LEDGER = """
import io, os, sys
from contextlib import redirect_stdout
from contextledger.cli import main
with redirect_stdout(io.StringIO()):
    try:
        main(["ledger", sys.argv[1]])
    except SystemExit:
        pass
print(os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.parametrize(("given", "kept"), [(None, "1"), ("4", "4")])
def test_the_ledger_starts_numpys_blas_with_one_thread_unless_told(given, kept):
    """pyarrow imports numpy, whose BLAS starts a thread per core that spins a while: the
    ledger does no linear algebra, so it asks for one (a user's own setting stands)."""
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        environ["OPENBLAS_NUM_THREADS"] = given
    result = subprocess.run(
        [sys.executable, "-c", BLAS_THREADS_AFTER_THE_LEDGER, str(SAMPLE)],
        capture_output=True,
        text=True,
        env=environ,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [kept]
