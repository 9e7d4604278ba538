"""What-if at the sizes real agents reach: tool sets past 64 names (a few MCP servers),
one model call making 32,767+ tool calls (a turn past int16), runs of hundreds and
thousands of turns. Each is replayed by the kernel to the exact replay's rows, from
snapshot files and from an archive alike."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.jobs.whatif import read_inputs, whatif
from contextledger.window.turn_arrays import turn_arrays
from contextledger.window.whatif import parse_policies, whatif_table, whatif_table_exact

from .conftest import SAMPLE
from .test_whatif_kernel import labelled, labelled_rows, long_run

POLICIES = [
    "none",
    "sliding:keep=2",
    "sliding:keep=1,last_tool_results=3",
    "token_budget:threshold=500,keep=1",
]


def widened(folder: Path, calls: int, tool_names: int) -> Path:
    """The sample run s0003-loop, its first tool call replaced by one assistant message
    making ``calls`` tool calls (over ``tool_names`` names in turn, two calls a name at
    least) and their results: a turn of ``calls + 1`` messages."""
    with gzip.open(SAMPLE / "s0003-loop.json.gz") as handle:
        document = json.loads(handle.read())
    bundle = next(b for b in document["snapshot"]["commitLog"] if b["stageId"] == "tool-calls")
    names = [f"mcp_tool_{n % tool_names}" for n in range(calls)]
    asked = [{"id": f"w{n}", "name": name, "args": {"n": n}} for n, name in enumerate(names)]
    answers = [
        {"role": "tool", "content": f"r{n}", "toolCallId": f"w{n}", "toolName": name}
        for n, name in enumerate(names)
    ]
    bundle["overwrite"]["history"] = [{"role": "assistant", "content": "", "toolCalls": asked}]
    bundle["overwrite"]["history"] += answers
    document["run_id"] = f"wide-{calls}-{tool_names}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document['run_id']}.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode(), compresslevel=1))
    (folder / "s0048-loop.json.gz").write_bytes((SAMPLE / "s0048-loop.json.gz").read_bytes())
    return path


def kernel_rows_are_exact(folder: Path) -> None:
    inputs = read_inputs(folder)
    assert turn_arrays(inputs.streams).fallback == {}  # the kernel replays them all
    policies = parse_policies(POLICIES)
    fast = whatif_table(inputs.streams, policies, inputs.standings)
    exact = whatif_table_exact(inputs.streams, policies, inputs.standings)
    assert_frame_equal(fast, exact, check_exact=True)


def archived_rows_are_the_files(folder: Path, archive: Path) -> None:
    """``contextledger ingest`` then ``whatif ARCHIVE``: the files' rows, exit 0."""
    runner = CliRunner()
    done = runner.invoke(main, ["ingest", str(folder), "--archive", str(archive)])
    assert done.exit_code == 0, done.output
    rows = []
    for source in (folder, archive):
        args = ["whatif", str(source), "--format", "json"]
        replayed = runner.invoke(main, [*args, *(f"--policy={spec}" for spec in POLICIES)])
        assert replayed.exit_code == 0, replayed.output
        rows.append([line for line in replayed.output.splitlines() if line.startswith("{")])
    assert rows[0] == rows[1] and len(rows[0]) == 2 * len(POLICIES)


@pytest.mark.parametrize("tool_names", [65, 200])
def test_runs_offering_more_than_64_tool_names_replay_exactly(tmp_path, tool_names):
    folder = tmp_path / "runs"
    widened(folder, 2 * tool_names, tool_names)
    arrays = turn_arrays(read_inputs(folder).streams)
    assert arrays.name_chars.shape[1] >= tool_names  # (with the run's own tools)
    kernel_rows_are_exact(folder)
    archived_rows_are_the_files(folder, tmp_path / "archive")
    per_run, _ = whatif(folder, ["sliding:keep=1,last_tool_results=3"])
    pinned = per_run["pins_held_last_tool_result"].to_list()
    assert pinned[0] > 0  # the recency pin is held among the 65+ tools


def test_the_report_reads_runs_offering_more_than_64_tool_names(tmp_path):
    widened(tmp_path / "runs", 130, 65)
    args = ["report", str(tmp_path / "runs"), "-o", str(tmp_path / "report")]
    written = CliRunner().invoke(main, args)
    assert written.exit_code == 0, written.output
    assert (tmp_path / "report" / "report.html").stat().st_size > 0


@pytest.mark.parametrize("messages", [32_767, 32_768])
def test_a_turn_of_32767_or_32768_messages_replays_from_files_and_an_archive(tmp_path, messages):
    folder = tmp_path / "runs"
    widened(folder, messages - 1, 3)  # one assistant message and its results
    assert turn_arrays(read_inputs(folder).streams).msgs.max() == messages
    kernel_rows_are_exact(folder)
    archived_rows_are_the_files(folder, tmp_path / "archive")


def test_a_run_of_2000_turns_replays_exactly():
    runs = [long_run("long-2000", 2_000)]
    arrays = turn_arrays(runs, labelled(runs))
    assert arrays.msgs.shape[1] >= 2_000 and arrays.fallback == {}
    policies = parse_policies(["sliding:keep=6,ledger_facts=2"])  # both pins, notices
    standings = labelled_rows(runs)
    fast = whatif_table(runs, policies, standings)
    assert_frame_equal(fast, whatif_table_exact(runs, policies, standings), check_exact=True)
    assert fast["pins_held_ledger_fact"][0] > 0 and fast["pins_held_last_tool_result"][0] > 0
