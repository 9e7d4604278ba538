"""One progress line on a terminal (``contextledger.progress``), shared by ingest, synth and
whatif: drawn on a terminal, quiet elsewhere; whatif's only once it has run a while."""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger import progress as meters
from contextledger.cli import main
from contextledger.jobs import whatif as sourced
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive
from contextledger.progress import Progress, chosen_stream, progress_stream
from contextledger.window.whatif import parse_policies, whatif_table

from .conftest import SAMPLE

SAMPLE_RUNS = len(list(SAMPLE.glob("*.json.gz")))
POLICIES = parse_policies(["none", "sliding:keep=3"])


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def ticking(step: float = 1.0) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


def clock(step: float = 1.0):
    """A clock that moves ``step`` seconds each time it is read: every line is due."""
    ticks = ticking(step)
    return lambda: next(ticks)


def test_the_meter_redraws_in_place_and_ends_its_line():
    meter = Progress(Terminal(), clock=clock())
    meter.show("1 of 3")
    meter.show("2 of 3 runs")
    meter.show("3")  # shorter: the rest of the last line is blanked
    meter.close("done")
    assert meter.stream.getvalue() == "\r1 of 3\r2 of 3 runs\r3          \rdone\n"


def test_the_meter_waits_out_its_delay_and_redraws_at_most_five_times_a_second():
    times = iter([0.0, 1.0, 1.9, 2.0, 2.1, 2.3])
    meter = Progress(Terminal(), delay=2.0, clock=lambda: next(times))  # started at 0.0
    meter.show("at 1.0")  # before the delay
    meter.show("at 1.9")
    meter.show("at 2.0")  # drawn
    meter.show("at 2.1")  # 0.1 s later: skipped
    meter.show("at 2.3")
    assert meter.stream.getvalue() == "\rat 2.0\rat 2.3"


def test_a_meter_that_drew_nothing_writes_nothing_on_close():
    meter = Progress(Terminal(), delay=2.0, clock=lambda: 0.0)
    meter.show("quick")
    meter.close("quick, done")
    assert meter.stream.getvalue() == ""
    Progress(None).show("no stream")  # no terminal: nothing to write to, no error


def test_the_stream_is_stderr_only_on_a_terminal(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert progress_stream() is terminal
    assert chosen_stream(None) is terminal and chosen_stream(False) is None
    log = io.StringIO()  # a file or a pipe
    monkeypatch.setattr(sys, "stderr", log)
    assert progress_stream() is None and chosen_stream(None) is None
    assert chosen_stream(True) is log  # --progress: asked for


def test_ingest_draws_its_line_on_a_terminal(tmp_path):
    terminal = Terminal()
    ingest([SAMPLE], tmp_path / "archive", workers=1, progress=terminal)
    text = terminal.getvalue()
    assert text.startswith("\r[") and text.endswith("\n")
    assert f"{SAMPLE_RUNS}/{SAMPLE_RUNS} files  {SAMPLE_RUNS} runs" in text.rsplit("\r", 1)[1]


def test_synth_draws_its_line_on_a_terminal(tmp_path):
    terminal = Terminal()
    synth_archive(tmp_path / "archive", 40, batch_runs=20, progress=terminal, streams=False)
    assert terminal.getvalue().rsplit("\r", 1)[1].startswith("40/40 runs")
    assert terminal.getvalue().endswith("\n")


def test_whatif_shows_the_files_read_and_the_runs_replayed():
    meter = Progress(Terminal(), clock=clock(), command="whatif")
    inputs = sourced.read_inputs(SAMPLE, meter=meter)
    assert f"whatif: reading 0/{SAMPLE_RUNS} files" in meter.stream.getvalue()
    replayed = sourced.replay_streams(inputs.streams, POLICIES, inputs.standings, meter=meter)
    replayed_line = f"whatif: replayed {SAMPLE_RUNS}/{SAMPLE_RUNS} runs"
    assert replayed_line in meter.stream.getvalue()
    assert "whatif: replayed 2/" not in meter.stream.getvalue()  # one chunk: 14 runs < 1000
    once = whatif_table(inputs.streams, POLICIES, inputs.standings)
    assert_frame_equal(replayed, once, check_exact=True)


def test_whatif_replayed_in_chunks_gives_the_rows_of_one_replay():
    """The chunks are there for the line; the rows must not depend on them."""
    meter = Progress(Terminal(), clock=clock())
    inputs = sourced.read_inputs(SAMPLE)
    chunked = sourced.replay_streams(
        inputs.streams, POLICIES, inputs.standings, meter=meter, chunk_runs=4
    )
    once = whatif_table(inputs.streams, POLICIES, inputs.standings)
    assert_frame_equal(chunked, once, check_exact=True)
    shown = meter.stream.getvalue()
    counts = [f"replayed {n}/{SAMPLE_RUNS} runs" for n in (4, 8, 12, SAMPLE_RUNS)]
    assert all(count in shown for count in counts), shown


def test_whatif_over_an_archive_shows_each_batch(tmp_path):
    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1)
    meter = Progress(Terminal(), clock=clock(), command="whatif")
    replay = sourced.whatif_archive(archive, POLICIES, batch_runs=5, meter=meter)
    assert replay is not None and replay.runs == SAMPLE_RUNS
    shown = meter.stream.getvalue()
    assert all(f"whatif: replayed {n} runs" in shown for n in (5, 10, SAMPLE_RUNS)), shown


def whatif_cli(*args: str) -> tuple[str, str]:
    result = CliRunner().invoke(main, ["whatif", *args, "--policy", "none", "--format", "json"])
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


@pytest.mark.parametrize("archived", [False, True], ids=["snapshots", "archive"])
def test_whatif_progress_is_on_stderr_when_asked_and_once_slow(tmp_path, monkeypatch, archived):
    source = tmp_path / "sample"
    shutil.copytree(SAMPLE, source)
    if archived:
        ingest([source], tmp_path / "archive", workers=1)
        source = tmp_path / "archive"
    quiet_out, quiet_err = whatif_cli(str(source))  # CliRunner's stderr is no terminal
    assert "whatif:" not in quiet_err and "\r" not in quiet_err
    monkeypatch.setattr(meters, "SLOW_SECONDS", 0.0)  # as if the replay were slow
    _, no_err = whatif_cli(str(source), "--no-progress")
    assert "whatif:" not in no_err and "\r" not in no_err
    out, err = whatif_cli(str(source), "--progress")
    assert f"\rwhatif: replayed {SAMPLE_RUNS}" in err
    assert err.split("\r")[-1].split("\n", 1)[0].startswith("whatif: replayed")  # line ended
    assert out == quiet_out  # stdout unchanged: the rows, a JSON object a line
    assert len([json.loads(line) for line in out.splitlines()]) == SAMPLE_RUNS


def test_whatif_under_its_delay_draws_nothing_even_when_asked(tmp_path):
    """Below SLOW_SECONDS (2 s) a whatif prints no line: a quick command stays quiet."""
    _, err = whatif_cli(str(SAMPLE / "s0003-loop.json.gz"), "--progress")
    assert "\r" not in err


def test_ingest_on_no_terminal_draws_nothing(tmp_path):
    result = CliRunner().invoke(main, ["ingest", str(SAMPLE), "--archive", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "\r" not in result.output and "files  " not in result.stderr


def test_the_sample_is_where_the_tests_expect_it():
    assert Path(SAMPLE).is_dir() and SAMPLE_RUNS == 14
