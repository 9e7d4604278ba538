"""Output is whole or absent, printed names cannot steer the terminal, and every result
a query can return is printed: no half-written file, no traceback, no panic."""

from __future__ import annotations

import errno
import gzip
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.ingest import ingest

from .conftest import REPO, SAMPLE, as_new_run, in_ci

OUTCOMES = REPO / "data" / "sample-outcomes.csv"
FACT_BENCH = SAMPLE / "s0001-fact-bench.json.gz"
ESC = "\x1b"
#: The command line in a child process.
CLI = "import sys; from contextledger.cli import main; sys.argv[0] = 'contextledger'; main()"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output and "panicked" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("contextledger: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


# ── terminal control characters ───────────────────────────────────────
HOSTILE_TOOL = "probe\x1b]0;owned\x07\x1b[2J\r\bfact\x9b"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """The fact bench with its tool ``probe_fact`` renamed to carry ESC, BEL, CR, BS and a
    C1 CSI, plus an unreadable file whose name carries a screen-clearing sequence."""
    folder = tmp_path / "runs"
    folder.mkdir()
    text = gzip.decompress(FACT_BENCH.read_bytes()).decode()
    renamed = json.dumps(HOSTILE_TOOL)[1:-1]  # as JSON writes it: \u001b...
    (folder / "bench.json").write_text(text.replace("probe_fact", renamed), encoding="utf-8")
    (folder / "bad\x1b[2J\x07.json").write_text("{", encoding="utf-8")
    return folder


def test_the_table_and_stderr_show_control_characters_as_escapes(hostile):
    result = run("ledger", str(hostile))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    for stream in (result.stdout, result.stderr):
        assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 for c in stream)
    assert r"probe\x1b]0;owned\x07\x1b[2J\x0d\x08fact\x9b" in result.stdout
    assert r"bad\x1b[2J\x07.json" in result.stderr
    # columns stay aligned: the escaped name is measured as printed
    assert len({len(line) for line in result.stdout.splitlines() if line.startswith("│")}) == 1


@pytest.mark.parametrize("command", ["sql", "gates"])
def test_other_tables_escape_them_too(hostile, command):
    second = json.loads((hostile / "bench.json").read_text(encoding="utf-8"))
    as_new_run(second, second["run_id"] + "-again")  # a second run (a copy counts once)
    (hostile / "bench2.json").write_text(json.dumps(second), encoding="utf-8")
    args = {
        "sql": ["SELECT piece_id FROM offers WHERE piece_id LIKE 'probe%'"],
        "gates": ["--min-offers", "1", "--floor", "1.1"],
    }[command]
    result = run(command, str(hostile), *args)
    assert ESC not in result.output and "\x07" not in result.output
    assert r"probe\x1b]0;owned" in result.stdout


@pytest.mark.parametrize("output_format", ["csv", "json"])
def test_machine_formats_keep_the_exact_names(hostile, output_format):
    result = run("ledger", str(hostile), "--format", output_format)
    assert HOSTILE_TOOL in (
        result.stdout
        if output_format == "csv"
        else {row["id"] for row in json.loads(result.stdout)["rows"]}
    )
    assert ESC not in result.stderr and r"bad\x1b[2J" in result.stderr


def test_a_multi_line_message_keeps_its_own_newlines_and_escapes_the_inputs(tmp_path):
    """An ingest refused by a damaged archive lists each damaged file on a line of its
    own (the program's newlines, once shown as a literal ``\\x0a``); the archive's name,
    from the user, still has its ESC and its newline escaped, on every line."""
    root = tmp_path / "arch\x1bive\nE"
    ingest([FACT_BENCH], root, workers=1, ingest_date="2026-11-01")
    ingest([SAMPLE], root, workers=1, ingest_date="2026-11-02")
    [damaged] = root.glob("offers/accounting=corrected/*/first_in_run=true/part-00000002-*")
    damaged.write_bytes(b"")
    result = run("ingest", str(FACT_BENCH), "--archive", str(root), "--workers", "1")
    assert result.exit_code == EXIT_USAGE
    assert ESC not in result.stderr
    escaped = r"arch\x1bive\x0aE"
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"contextledger: {tmp_path}/{escaped} is damaged, so nothing was written to it "
        "(restore these files from a backup, or ingest the snapshots into a new archive):"
    )
    relative = damaged.relative_to(root)
    assert lines[1].startswith(f"  {tmp_path}/{escaped}/{relative}: 0 bytes, its commit says")
    assert len(lines) == 2


def test_the_ingest_summary_escapes_a_newline_in_a_file_name(tmp_path):
    """Its lines are the program's; a quarantined file whose name holds a newline is
    shown on one line, ``\\x0a`` where the newline is, as every other message shows it."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "bad\nname\x1b.json").write_text("{", encoding="utf-8")
    result = run("ingest", str(folder), "--archive", str(tmp_path / "archive"))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    quarantined = [line for line in result.stdout.splitlines() if "quarantined " in line]
    assert len(quarantined) == 1
    assert quarantined[0].startswith(f"  quarantined {folder}/bad\\x0aname\\x1b.json: invalid")


# ── -o FILE: folders made, written whole or not at all ───────────────
SAMPLE_RUN = str(SAMPLE / "s0003-loop.json.gz")
WRITERS = {
    "ledger-table": ["ledger", SAMPLE_RUN],
    "ledger-csv": ["ledger", SAMPLE_RUN, "--format", "csv"],
    "ledger-json": ["ledger", SAMPLE_RUN, "--format", "json"],
    "ledger-parquet": ["ledger", SAMPLE_RUN, "--format", "parquet"],
    "outcomes": ["outcomes", SAMPLE_RUN, "--outcomes", str(OUTCOMES)],
    "outcomes-csv": ["outcomes", SAMPLE_RUN, "--outcomes", str(OUTCOMES), "--format", "csv"],
    "gates": ["gates", SAMPLE_RUN],
    "gates-json": ["gates", SAMPLE_RUN, "--format", "json"],
    "sql": ["sql", SAMPLE_RUN, "SELECT * FROM ledger_rows"],
    "sql-json": ["sql", SAMPLE_RUN, "SELECT * FROM ledger_rows", "--format", "json"],
    "whatif": ["whatif", SAMPLE_RUN, "--policy", "none"],
    "whatif-json": ["whatif", SAMPLE_RUN, "--policy", "none", "--format", "json"],
    "whatif-parquet": ["whatif", SAMPLE_RUN, "--policy", "none", "--format", "parquet"],
}


@pytest.mark.parametrize("name", WRITERS)
def test_o_makes_missing_folders_and_leaves_only_the_file(tmp_path, name):
    """gates, outcomes and sql used to have no -o; the others failed on a missing folder."""
    target = tmp_path / "a" / "b" / "out"
    result = run(*WRITERS[name], "-o", str(target))
    assert result.exit_code == 0, result.output
    assert [p.name for p in target.parent.iterdir()] == ["out"]
    assert target.stat().st_size > 0
    if name.endswith("parquet"):
        assert pl.read_parquet(target).height > 0
    assert ESC not in result.output


def test_o_writes_through_a_symlink_and_into_a_fifo_without_replacing_them(tmp_path):
    """``-o /dev/null`` renamed a temporary file onto the device: as root, /dev/null
    became a regular file. A FIFO stands in for the device here; a link is kept too."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = run(*WRITERS["outcomes-csv"], "-o", str(fifo))
    reader.join(timeout=60)
    assert result.exit_code == 0, result.output
    assert received == [run(*WRITERS["outcomes-csv"]).stdout.encode()]
    assert fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["pipe"]
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old")
    link.symlink_to(real)
    assert run(*WRITERS["outcomes-csv"], "-o", str(link)).exit_code == 0
    assert link.is_symlink() and real.read_text().startswith("kind,id,label")


def test_o_writes_what_stdout_would_show(tmp_path):
    for name in ("outcomes-csv", "gates-json", "sql-json", "whatif-json"):
        printed = run(*WRITERS[name]).stdout
        run(*WRITERS[name], "-o", str(tmp_path / name))
        assert (tmp_path / name).read_text(encoding="utf-8") == printed


@pytest.mark.parametrize("name", ["ledger-csv", "ledger-parquet", "whatif-json", "sql"])
def test_a_failed_write_leaves_the_old_file_and_says_so_in_one_line(tmp_path, monkeypatch, name):
    """A full disk, simulated: the data never reaches the disk (ENOSPC at fsync)."""
    target = tmp_path / "out"
    target.write_text("yesterday's result", encoding="utf-8")

    def full(_descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("contextledger.output.os.fsync", full)
    result = run(*WRITERS[name], "-o", str(target))
    one_line_error(result, f"cannot write {target}: No space left on device")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert target.read_text(encoding="utf-8") == "yesterday's result"


def _limited_file_size() -> None:  # a child's writes past 4 KB fail (EFBIG), as on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.parametrize(
    "name", ["ledger-csv", "ledger-parquet", "whatif-json", "whatif-parquet", "gates-json"]
)
def test_a_write_the_disk_refuses_midway_leaves_nothing(tmp_path, corpus, name):
    """Polars' own writers too: the corpus's output is larger than the child may write."""
    command = [*WRITERS[name][:1], str(corpus / "runs"), *WRITERS[name][2:]]
    target = tmp_path / "sub" / "out"
    completed = subprocess.run(
        [sys.executable, "-c", CLI, *command, "-o", str(target)],
        capture_output=True,
        text=True,
        preexec_fn=_limited_file_size,
        check=False,
    )
    errors = [line for line in completed.stderr.splitlines() if "cannot write" in line]
    assert completed.returncode == EXIT_USAGE, completed.stderr
    assert errors == [f"contextledger: cannot write {target}: {errors[0].split(': ', 2)[2]}"]
    assert "Traceback" not in completed.stderr and "panicked" not in completed.stderr
    assert list(target.parent.iterdir()) == []


def test_a_full_tmpfs_leaves_nothing(tmp_path, corpus):
    """A real full disk where this machine allows mounting one (root, Linux)."""
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}"
        if in_ci():  # CI runs as root: a full disk is tested there, never skipped
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        target = mount / "sub" / "per_run.jsonl"
        result = run(
            "whatif",
            str(corpus / "runs"),
            "--policy",
            "none",
            "--format",
            "json",
            "-o",
            str(target),
        )
        one_line_error(result, f"cannot write {target}", "No space left on device")
        assert list(target.parent.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_unwritable_path_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    for name in ("ledger-csv", "whatif-parquet", "gates"):
        one_line_error(run(*WRITERS[name], "-o", str(blocker / "out")), "cannot write")
    report = ["report", SAMPLE_RUN, "--charts", "none", "--policy", "none"]
    result = run(*report, "-o", str(blocker / "sub"))
    one_line_error(result, "cannot write the report")


@pytest.mark.parametrize("name", ["ledger-csv", "outcomes", "gates", "sql", "whatif"])
def test_o_that_names_no_file_is_refused_in_one_line(tmp_path, monkeypatch, name):
    """``-o ''`` was a ValueError traceback, ``-o newdir/`` wrote a file ``newdir`` and a
    file as a parent folder said "File exists": each is refused, nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.py").write_text("print()\n", encoding="utf-8")
    one_line_error(run(*WRITERS[name], "-o", ""), "cannot write '': no file name given")
    one_line_error(run(*WRITERS[name], "-o", "newdir/"), "newdir/: names a folder, not a file")
    result = run(*WRITERS[name], "-o", "file.py/x.json")
    one_line_error(result, "cannot write file.py/x.json: file.py is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.py"]


def test_report_makes_its_folders_and_writes_the_page_whole(tmp_path, monkeypatch):
    out = tmp_path / "deep" / "er"
    result = run("report", SAMPLE_RUN, "--charts", "svg", "--policy", "none", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["charts", "ledger.csv", "report.html"]
    assert not [p for p in out.rglob(".tmp-*")]

    monkeypatch.setattr(
        "contextledger.output.os.fsync", lambda _: (_ for _ in ()).throw(OSError(28, "full"))
    )
    again = tmp_path / "again"
    result = run("report", SAMPLE_RUN, "--charts", "none", "--policy", "none", "-o", str(again))
    one_line_error(result, "cannot write the report", "full")
    assert list(again.iterdir()) == []


def test_a_closed_pipe_ends_quietly(tmp_path):
    """``contextledger ... | head -1``: no BrokenPipeError, no traceback."""
    big = "SELECT * FROM offers, range(400)"  # well past a pipe's buffer
    for args in (["sql", str(SAMPLE), big, "--format", "csv"], ["ledger", str(SAMPLE)]):
        shell = subprocess.run(
            shlex.join([sys.executable, "-c", CLI, *args]) + " | head -1",
            shell=True,
            capture_output=True,
            text=True,
            check=False,
        )
        assert shell.stdout.count("\n") == 1
        assert shell.stderr == ""


# ── sql results Polars cannot convert ────────────────────────────────
QUERIES = {
    "interval": ("SELECT INTERVAL 1 DAY + INTERVAL 2 HOUR AS i", "1 day 02:00:00"),
    "blob": ("SELECT '\\xAA\\x42'::BLOB AS b", "\\xAAB"),
    "settings": ("SELECT * FROM duckdb_settings() WHERE name = 'threads'", "threads"),
}


@pytest.mark.parametrize("output_format", ["table", "csv", "json"])
@pytest.mark.parametrize("query", QUERIES)
def test_sql_prints_what_polars_cannot_convert(query, output_format):
    """An INTERVAL used to raise ComputeError; a BLOB or VARIANT to JSON, a Rust panic."""
    text, expected = QUERIES[query]
    result = run("sql", SAMPLE_RUN, text, "--format", output_format)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    if output_format == "json":
        (line,) = result.stdout.splitlines()  # JSON Lines: one row
        row = json.loads(line)
        assert expected in row.values()
    else:
        assert expected in result.stdout


def test_sql_errors_are_one_line(tmp_path):
    one_line_error(run("sql", SAMPLE_RUN, "SELEC 1"), "SQL error: Parser Error", "LINE 1")


# ── sql --no-external-access ──────────────────────────────────────────
@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive") / "archive"
    ingest([SAMPLE], root, workers=1)
    return root


@pytest.mark.parametrize("source", ["snapshots", "archive"])
def test_no_external_access_refuses_files_but_keeps_the_ledger(tmp_path, sample_archive, source):
    path = str(SAMPLE) if source == "snapshots" else str(sample_archive)
    ledger = "SELECT id, offered FROM ledger_rows ORDER BY id"
    plain = run("sql", path, ledger, "--format", "csv")
    locked = run("sql", path, ledger, "--format", "csv", "--no-external-access")
    assert (locked.exit_code, locked.stdout) == (0, plain.stdout) and plain.stdout.count("\n") > 10

    copied = tmp_path / "copied.csv"
    copy = f"COPY (SELECT * FROM runs) TO '{copied}'"
    attempts = {
        "SELECT * FROM read_csv('/etc/passwd')": "Permission Error",
        copy: "Permission Error",
        f"ATTACH '{tmp_path / 'x.db'}'": "Permission Error",
        "SET enable_external_access = true": "locked",
        f"SELECT * FROM read_text('{sample_archive / 'archive.json'}')": "Permission Error",
    }
    for query, reason in attempts.items():
        one_line_error(run("sql", path, query, "--no-external-access"), "SQL error", reason)
    assert list(tmp_path.iterdir()) == []
    assert run("sql", path, copy).exit_code == 0 and copied.exists()  # without the flag
