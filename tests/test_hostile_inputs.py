"""Hostile snapshot inputs: each is refused by name, in bounded memory, everything else read.

Gzip bombs, JSON nested deeper than Python can walk, file names that are not UTF-8,
FIFOs and devices, symlinked folders and symlink loops: through ``ledger``, ``whatif``,
``report``, ``ingest`` and the Python API, every good run beside them is still counted
and the exit status is 1.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT
from contextledger.jobs.whatif import read_inputs
from contextledger.read.snapshot import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    TOO_DEEP,
    iter_documents,
)
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import SAMPLE, as_new_run

GOOD = SAMPLE / "s0003-loop.json.gz"  # about 1.1 MB decompressed
SMALL = SAMPLE / "s0048-loop.json.gz"  # about 0.5 MB decompressed
#: Sample runs of more, and of less, than 1 MiB decompressed.
BIG_RUNS = ["s0001-fact-bench", "s0003-loop", "s0236-partial"]
SMALL_RUNS = ["s0048-loop", "s0202-conv-t1", "s0259-edge-unicode-content"]
CLI = "from contextledger.cli import main; main()"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Turn a hang (a FIFO opened for reading waits for a writer forever) into a failure."""

    def expired(*_: object) -> None:  # pytest.fail: no reader's ``except OSError`` catches it
        pytest.fail(f"still reading after {seconds} s: the reader hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def with_good_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(GOOD, folder / GOOD.name)
    return folder


def one_line(path: Path) -> bytes:
    """A sample snapshot as one JSON Lines line."""
    return gzip.decompress(path.read_bytes()).replace(b"\n", b"") + b"\n"


# ── gzip bombs and the document cap ────────────────────────────────
def gzip_of_zeros(gib: int) -> bytes:
    """``gib`` GiB of zeros, gzip-compressed (concatenated members, a valid gzip stream)."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    return member * (gib * 16)


def test_a_gzip_bomb_is_refused_naming_the_cap_and_memory_stays_bounded(tmp_path: Path):
    folder = with_good_run(tmp_path / "runs")
    (folder / "bomb.json.gz").write_bytes(gzip_of_zeros(4))
    # JSON Lines: a bomb line between two good runs; the cap is per line, not per file
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    second = SAMPLE / f"{SMALL_RUNS[1]}.json.gz"
    lines = gzip.compress(one_line(SMALL)) + member * 8 + gzip.compress(b"\n" + one_line(second))
    (folder / "lines.jsonl.gz").write_bytes(lines)
    archive = tmp_path / "archive"
    # a fresh process, so RUSAGE_CHILDREN holds only the commands run here
    measure = textwrap.dedent(
        """
        import json, resource, subprocess, sys
        out = []
        for args in json.loads(sys.argv[1]):
            done = subprocess.run([sys.executable, "-c", CLI, *args],
                                  capture_output=True, text=True)
            out.append([done.returncode, done.stdout, done.stderr])
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        print(json.dumps({"peak": peak, "runs": out}))
        """
    ).replace("CLI", repr(CLI))
    commands = [
        ["ledger", str(folder), "--format", "csv"],
        ["ingest", str(folder), "--archive", str(archive), "--workers", "1"],
    ]
    done = subprocess.run(
        [sys.executable, "-c", measure, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["peak"] < 1.5e9, f"peak RSS {result['peak'] / 1e9:.2f} GB"
    (ledger_status, _, ledger_err), (ingest_status, ingest_out, _) = result["runs"]
    cap = f"larger than the {DEFAULT_MAX_DOCUMENT_MB} MiB cap on one document"
    assert ledger_status == ingest_status == EXIT_UNREADABLE_INPUT
    assert f"bomb.json.gz: decompressed, the file is {cap}" in ledger_err
    assert f"lines.jsonl.gz:2: the line is {cap} (raise it with --max-document-mb)" in ledger_err
    assert "Traceback" not in ledger_err
    assert "3 run(s) metered" in ledger_err  # the good file and both good lines
    assert "3 added" in ingest_out and "2 problem(s) quarantined" in ingest_out


def test_max_document_mb_raises_or_lowers_the_cap_in_worker_processes_too(tmp_path: Path):
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in BIG_RUNS + SMALL_RUNS:  # enough files for ingest to read on a pool of workers
        shutil.copy(SAMPLE / f"{name}.json.gz", folder)
    args = ["--archive", str(tmp_path / "a"), "--workers", "2", "--max-document-mb", "1"]
    result = run("ingest", str(folder), *args)
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "3 added" in result.stdout and "3 problem(s) quarantined" in result.stdout
    for name in BIG_RUNS:
        assert f"{name}.json.gz: decompressed, the file is larger than the 1 MiB cap" in (
            result.stdout
        )
    assert os.environ.get(MAX_DOCUMENT_MB_ENV) is None  # the command does not leak its cap
    result = run("ledger", str(folder), "--max-document-mb", "2")
    assert result.exit_code == 0 and "6 run(s) metered" in result.stdout


def test_the_cap_is_read_from_the_environment_by_the_python_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    folder = with_good_run(tmp_path / "runs")
    shutil.copy(SMALL, folder)
    monkeypatch.setenv(MAX_DOCUMENT_MB_ENV, "1")
    tables = read_runs(folder, workers=1)
    assert tables.runs["run_id"].to_pylist() == ["s0048-loop"]
    assert "1 MiB cap" in tables.problems["reason"][0].as_py()
    inputs = read_inputs(folder)
    assert [stream.run_id for stream in inputs.streams] == ["s0048-loop"]
    assert [problem.path for problem in inputs.problems] == [str(folder / GOOD.name)]


def test_json_lines_are_capped_per_line_so_a_big_file_of_normal_runs_is_read(tmp_path: Path):
    # 3 runs of 0.3 to 0.5 MB: 1.08 MB in all, past a 1 MiB cap that each line is within
    small = [one_line(SAMPLE / f"{name}.json.gz") for name in SMALL_RUNS]
    lines = tmp_path / "many.jsonl"
    lines.write_bytes(small[0] + small[1] + one_line(GOOD) + b"\n" + small[2])
    result = run("ledger", str(lines), "--max-document-mb", "1")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "3 run(s) metered" in result.stdout
    assert "many.jsonl:3: the line is larger than the 1 MiB cap" in result.stderr
    documents = list(iter_documents(lines, max_bytes=1 << 20))
    assert [(d.source.line, d.refused is None) for d in documents] == [
        (1, True),
        (2, True),
        (3, False),
        (5, True),
    ]


def test_a_plain_file_past_the_cap_is_refused_without_being_read(tmp_path: Path):
    big = tmp_path / "big.json"
    with big.open("wb") as handle:  # sparse: 3 GiB that take no disk and no memory
        handle.truncate(3 << 30)
    documents = iter_documents(big)
    with pytest.raises(Exception, match="the file is larger than the 256 MiB cap"):
        next(documents)


# ── JSON nested deeper than Python can walk ────────────────────────
def deep_snapshot(levels: int) -> bytes:
    """A real snapshot with ``levels`` nested arrays inside its commit log."""
    document = json.loads(gzip.decompress(SMALL.read_bytes()))
    as_new_run(document, "deep")
    log = document["snapshot"]["commitLog"]
    bundle = next(b for b in log if "history" in b["overwrite"])
    bundle["overwrite"]["history"].append("DEEP")
    return json.dumps(document).replace('"DEEP"', "[" * levels + "]" * levels).encode()


def test_deep_nesting_is_refused_the_same_way_on_every_path(tmp_path: Path):
    folder = with_good_run(tmp_path / "runs")
    (folder / "deep.json").write_bytes(deep_snapshot(1000))
    expected = f"deep.json: {TOO_DEEP}"
    for args in (
        ["ledger", str(folder)],
        ["ledger", str(folder), "--mode", "reference"],
        ["whatif", str(folder), "--policy", "sliding:keep=3"],
        ["report", str(folder), "-o", str(tmp_path / "report"), "--charts", "none"],
        ["ingest", str(folder), "--archive", str(tmp_path / "archive")],
    ):
        result = run(*args)
        assert result.exit_code == EXIT_UNREADABLE_INPUT, args
        assert expected in result.output, args
        assert "RecursionError" not in result.output
    for mode in ACCOUNTING_MODES:
        tables = read_runs(folder, mode=mode, workers=1)
        assert tables.runs["run_id"].to_pylist() == ["s0003-loop"]
        assert tables.problems["reason"].to_pylist() == [TOO_DEEP]
    inputs = read_inputs(folder)
    assert [s.run_id for s in inputs.streams] == ["s0003-loop"]
    assert [p.reason for p in inputs.problems] == [TOO_DEEP]


def test_nesting_python_can_walk_is_read_everywhere(tmp_path: Path):
    folder = with_good_run(tmp_path / "runs")
    (folder / "deep.json").write_bytes(deep_snapshot(900))
    assert read_runs(folder, workers=1).runs.num_rows == 2
    assert len(read_inputs(folder).streams) == 2


# ── names that are not UTF-8 ───────────────────────────────────────
def test_a_file_name_that_is_not_utf8_is_read_and_shown_escaped(tmp_path: Path):
    folder = with_good_run(tmp_path / "runs")
    odd = os.fsencode(folder) + b"/bad\xff.json.gz"
    bare = json.loads(gzip.decompress(SMALL.read_bytes()))["snapshot"]  # its id: the name
    Path(os.fsdecode(odd)).write_bytes(gzip.compress(json.dumps(bare).encode()))
    shown = str(folder / "bad\\xff.json.gz")
    tables = read_runs(folder, workers=1)
    assert sorted(tables.runs["source_path"].to_pylist()) == sorted(
        [shown, str(folder / GOOD.name)]
    )
    assert "bad\\xff" in tables.runs["run_id"].to_pylist()
    result = run("ledger", str(folder))
    assert result.exit_code == 0 and "2 run(s) metered" in result.stdout
    assert len(read_inputs(folder).streams) == 2
    archive = tmp_path / "archive"
    result = run("ingest", str(folder), "--archive", str(archive))
    assert result.exit_code == 0 and "2 added" in result.stdout
    listed = run("sql", str(archive), "SELECT source_path FROM runs", "--format", "csv")
    assert shown in listed.stdout
    again = run("ingest", str(folder), "--archive", str(archive))
    assert "2 unchanged file(s) skipped" in again.stdout  # found under its stored name
    report = run("report", os.fsdecode(odd), "-o", str(tmp_path / "report"), "--charts", "none")
    assert report.exit_code == 0
    assert "bad\\xff.json.gz" in (tmp_path / "report" / "report.html").read_text("utf-8")


# ── FIFOs and devices ──────────────────────────────────────────────
@pytest.fixture
def specials(tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding a good run, a FIFO and a device under snapshot names; a FIFO beside."""
    folder = with_good_run(tmp_path / "runs")
    os.mkfifo(folder / "pipe.json")
    (folder / "null.json.gz").symlink_to(os.devnull)
    direct = tmp_path / "direct.jsonl"
    os.mkfifo(direct)
    return folder, direct


def test_fifos_and_devices_are_skipped_by_name_never_opened(specials, tmp_path: Path):
    folder, direct = specials
    fifo = f"{folder / 'pipe.json'}: not a regular file (a FIFO), skipped"
    device = f"{folder / 'null.json.gz'}: not a regular file (a character device), skipped"
    named = f"{direct}: not a regular file (a FIFO), skipped"
    with deadline(120):
        for args in (
            ["ledger", str(folder), str(direct)],
            ["whatif", str(folder), str(direct), "--policy", "none"],
            ["ingest", str(folder), str(direct), "--archive", str(tmp_path / "archive")],
        ):
            result = run(*args)
            assert result.exit_code == EXIT_UNREADABLE_INPUT, args
            assert fifo in result.output and device in result.output and named in result.output
        tables = read_runs([folder, direct], workers=1)
        assert tables.runs.num_rows == 1 and tables.problems.num_rows == 3
        inputs = read_inputs([folder, direct])
        assert len(inputs.streams) == 1 and len(inputs.problems) == 3


# ── symlinked folders ──────────────────────────────────────────────
def test_symlinked_folders_are_followed_once_and_a_loop_is_named_once(tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(SMALL, elsewhere)
    folder = with_good_run(tmp_path / "runs")
    (folder / "linked").symlink_to(elsewhere)
    (folder / "nested").mkdir()
    (folder / "nested" / "again").symlink_to(elsewhere)  # the same folder: read once
    (folder / "nested" / "up").symlink_to(folder)  # a loop back to an ancestor
    (folder / "file.json.gz").symlink_to(SAMPLE / "s0142-loop.json.gz")
    with deadline(120):
        tables = read_runs(folder, workers=1)
    assert sorted(tables.runs["source_path"].to_pylist()) == [
        str(folder / name) for name in ("file.json.gz", "linked/s0048-loop.json.gz", GOOD.name)
    ]
    assert tables.problems.to_pylist() == [
        {
            "path": str(folder / "nested" / "up"),
            "line": None,
            "run_id": None,
            "reason": f"a symlink loop (links back to {folder}, a folder it is inside), "
            "not followed",
        }
    ]
    result = run("ingest", str(folder), "--archive", str(tmp_path / "archive"))
    assert result.exit_code == EXIT_UNREADABLE_INPUT and "3 added" in result.stdout
    assert result.stdout.count("symlink loop") == 1


def test_a_link_up_out_of_the_input_folder_is_a_loop_not_a_way_into_the_tree_around_it(
    tmp_path: Path,
):
    """``up -> ..`` once read the whole parent tree (every file there named as not read)."""
    folder = with_good_run(tmp_path / "runs")
    shutil.copy(SMALL, tmp_path)  # beside the input folder: not an input
    (folder / "up").symlink_to("..")
    (folder / "root").symlink_to("/")
    tables = read_runs(folder, workers=1)
    assert tables.runs["run_id"].to_pylist() == [GOOD.name.removesuffix(".json.gz")]
    assert [(row["path"], row["reason"]) for row in tables.problems.to_pylist()] == [
        (
            str(folder / name),
            f"a symlink loop (links back to {target}, a folder it is inside), not followed",
        )
        for name, target in (("root", "/"), ("up", tmp_path))
    ]
    assert tables.skipped == ()


def test_an_empty_file_says_so_and_a_misshapen_wrapper_names_its_run(tmp_path: Path):
    """An empty file read as "invalid JSON: Input data was truncated"; a wrapper whose
    snapshot had the wrong shape was named without the run id it carries. A file of 0
    bytes holds no run and is no problem (listed in ``empty``, said in a warning); one
    of white space only is."""
    (tmp_path / "zero.json").write_bytes(b"")
    (tmp_path / "blank.json").write_text("  \n")
    (tmp_path / "shape.json").write_text('{"run_id": "r-7", "snapshot": {"commitLog": "x"}}')
    (tmp_path / "odd.json").write_text('{"run_id": ["not", "an", "id"], "snapshot": 3}')
    with pytest.warns(UserWarning, match="zero.json: empty file"):
        tables = read_runs(tmp_path, workers=1)
    assert tables.empty == (str(tmp_path / "zero.json"),)
    problems = {Path(row["path"]).name: row for row in tables.problems.to_pylist()}
    assert "zero.json" not in problems
    assert problems["blank.json"]["reason"] == (
        "blank: no JSON in it (only white space, or a gzip of nothing)"
    )
    assert problems["shape.json"]["run_id"] == "r-7"
    assert "got `str` - at `$.snapshot.commitLog`" in problems["shape.json"]["reason"]
    assert problems["odd.json"]["run_id"] is None  # no usable id: none named


def test_a_usage_count_past_any_real_call_is_read_as_not_reported(tmp_path: Path):
    """``totalInputTokens`` growing by 2**62 in one call would wrap the what-if's token
    sums: it is named once, for the what-if only, and that call read as not reported."""
    text = gzip.decompress(GOOD.read_bytes()).decode()
    first = re.compile(r'"totalInputTokens":126\b')  # the total after model call 1
    assert first.search(text)
    huge = tmp_path / "huge.json"
    huge.write_text(first.sub(f'"totalInputTokens":{2**62}', text))
    inputs = read_inputs(huge)
    assert inputs.problems == []  # the count was read: a note, not a problem
    [stream] = inputs.streams
    [note] = stream.notes
    assert note.startswith(f"{huge} (run ") and f"grew by {2**62} at model call 1" in note
    assert stream.calls[0].input_tokens == 0
    assert max(call.input_tokens for call in stream.calls) < 2**40
    ledger = run("ledger", str(huge))
    assert ledger.exit_code == 0 and "grew by" not in ledger.output
    ingest = run("ingest", str(huge), "--archive", str(tmp_path / "archive"), "--workers", "1")
    assert "Traceback" not in ingest.output
    for where in (huge, tmp_path / "archive"):
        result = run("whatif", str(where), "--policy", "sliding:keep=2", "--format", "json")
        assert "Traceback" not in result.output and '":-' not in result.stdout
        assert result.exit_code == 0 and f"contextledger: {note}" in result.stderr, result.output
        assert "skipped" not in result.stderr


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_dropped(tmp_path: Path, suffix, packed):
    """Windows tools write a UTF-8 BOM first: not JSON, so it is dropped, not the file."""
    text = b"\xef\xbb\xbf" + one_line(GOOD) + (one_line(SMALL) if suffix == ".jsonl" else b"")
    path = tmp_path / (f"runs{suffix}.gz" if packed else f"runs{suffix}")
    path.write_bytes(gzip.compress(text) if packed else text)
    result = run("ledger", str(path))
    assert result.exit_code == 0, result.output
    runs = 2 if suffix == ".jsonl" else 1
    assert f"{runs} run(s) metered" in result.output
