"""Standings: the file a user labels results in, a snapshot's findings ledger, and timing.

A standing counts from the visit after the iteration that declared it, and the
last row per ``tool_call_id`` wins.
"""

from __future__ import annotations

import copy

import pytest

from contextledger.jobs.whatif import whatif
from contextledger.read.findings import standings_from_snapshot
from contextledger.read.snapshot import Bundle, TraceEntry, decode_run, iter_documents
from contextledger.tables import schema
from contextledger.tables.standings import StandingsFileError, load_standings
from contextledger.window import rebuild_messages, replay
from contextledger.window.standings import StandingsTimeline, timelines

from .conftest import SAMPLE

FACT_BENCH = SAMPLE / "s0001-fact-bench.json.gz"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ── the file ───────────────────────────────────────────────────────


def test_a_csv_file_reads_into_the_standings_table(tmp_path):
    path = write(tmp_path, "s.csv", "run_id,tool_call_id,standing,iteration\nr,c1,ruled-out,3\n")
    table = load_standings(path)
    assert table.schema == schema.STANDINGS
    assert table.to_pylist() == [
        {
            "run_id": "r",
            "tool_call_id": "c1",
            "standing": "ruled-out",
            "iteration": 3,
            "source": str(path),
            "source_line": 2,
        }
    ]


def test_a_json_lines_file_reads_the_same_columns(tmp_path):
    path = write(
        tmp_path,
        "s.jsonl",
        '{"run_id": "r", "tool_call_id": "c1", "standing": "open", "iteration": 2}\n\n'
        '{"run_id": "r", "tool_call_id": "c2", "standing": "noise"}\n',
    )
    rows = load_standings(path).to_pylist()
    assert [(r["tool_call_id"], r["standing"], r["iteration"], r["source_line"]) for r in rows] == [
        ("c1", "open", 2, 1),
        ("c2", "noise", 0, 3),
    ]


def test_a_row_without_an_iteration_counts_from_the_first_visit(tmp_path):
    path = write(tmp_path, "s.csv", "run_id,tool_call_id,standing,iteration\nr,c1,fact,\n")
    assert load_standings(path).column("iteration").to_pylist() == [0]
    path = write(tmp_path, "t.csv", "run_id,tool_call_id,standing\nr,c1,fact\n")
    assert load_standings(path).column("iteration").to_pylist() == [0]


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("a.csv", "run_id,tool_call_id,standing\nr,c1,Fact\n", ":2: unknown standing 'Fact'"),
        ("b.csv", "run_id,tool_call_id,standing\nr,c1,fact\nr,c2,maybe\n", ":3: unknown standing"),
        ("c.csv", "run_id,standing\nr,fact\n", ":1: the header needs"),
        (
            "d.csv",
            "run_id,tool_call_id,standing\nr,,fact\n",
            ":2: a standings row needs tool_call_id",
        ),
        ("e.csv", "run_id,tool_call_id,standing,iteration\nr,c,fact,two\n", ":2: iteration 'two'"),
        ("f.csv", "run_id,tool_call_id,standing,iteration\nr,c,fact,-1\n", "is not a whole number"),
        ("g.jsonl", '{"run_id": "r"\n', ":1: invalid JSON"),
        ("h.jsonl", "[1, 2]\n", ":1: a standings row is an object"),
        ("i.jsonl", '{"run_id":"r","tool_call_id":"c","standing":"fact","iteration":1.5}\n', ":1:"),
    ],
)
def test_a_bad_row_is_refused_naming_the_file_and_line(tmp_path, name, text, says):
    path = write(tmp_path, name, text)
    with pytest.raises(StandingsFileError) as caught:
        load_standings(path)
    assert str(caught.value).startswith(f"{path}:")
    assert says in str(caught.value)


def test_an_unknown_standing_lists_the_ones_allowed(tmp_path):
    path = write(tmp_path, "s.csv", "run_id,tool_call_id,standing\nr,c1,useful\n")
    with pytest.raises(StandingsFileError, match=r"allowed: fact, open, ruled-out, noise"):
        load_standings(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(StandingsFileError, match=r"nope\.csv: cannot read"):
        load_standings(tmp_path / "nope.csv")


# ── when a standing counts ─────────────────────────────────────────


def test_the_last_row_declared_before_a_visit_counts():
    timeline = StandingsTimeline([("c", "noise", 4), ("c", "fact", 6), ("d", "open", 0)])
    assert timeline.at(1) == {"d": "open"}
    assert timeline.at(5) == {"c": "noise", "d": "open"}
    assert timeline.at(6) == {"c": "noise", "d": "open"}  # declared at 6: counts from 7
    assert timeline.at(7) == {"c": "fact", "d": "open"}
    assert timeline.final() == {"c": "fact", "d": "open"}


def test_snapshot_rows_come_before_file_rows_of_the_same_iteration():
    rows = [
        {"run_id": "r", "tool_call_id": "c", "standing": "fact", "iteration": 3, "source": "f"},
        {
            "run_id": "r",
            "tool_call_id": "c",
            "standing": "noise",
            "iteration": 3,
            "source": "snapshot",
        },
    ]
    assert timelines(rows)["r"].final() == {"c": "fact"}


@pytest.fixture(scope="module")
def bench_stream():
    return rebuild_messages(decode_run(next(iter_documents(FACT_BENCH))))


def answer_ids(stream, standings):
    served = replay(stream, "sliding:keep=6,last_tool_results=0", standings).served[-1]
    return [m.tool_call_id for m in served if m.role == "tool"]


def test_a_fact_declared_before_the_visit_that_drops_it_holds_it(bench_stream):
    # call-3's turn leaves at the visit of iteration 10 under keep 6
    assert "call-3" not in answer_ids(bench_stream, None)
    assert "call-3" in answer_ids(bench_stream, StandingsTimeline([("call-3", "fact", 9)]).at)
    assert "call-3" not in answer_ids(bench_stream, StandingsTimeline([("call-3", "fact", 10)]).at)


def test_a_fact_refiled_as_noise_is_released(bench_stream):
    refiled = StandingsTimeline([("call-3", "fact", 4), ("call-3", "noise", 5)])
    assert "call-3" not in answer_ids(bench_stream, refiled.at)


# ── a snapshot's findings ledger ───────────────────────────────────


def standing_row(call_id, standing, iteration):
    return {"kind": "standing", "toolCallId": call_id, "standing": standing,
            "assertions": [], "declaredOn": "answer", "iteration": iteration}  # fmt: skip


LEDGER = [
    {"kind": "basis", "toolCallId": "call-3", "toolName": "probe_fact", "iteration": 3},
    standing_row("call-3", "fact", 4),
    standing_row("call-4", "maybe", 5),
    standing_row("call-6", "fact", 7),
]


def with_findings_ledger(run, rows):
    run = copy.deepcopy(run)
    log = run.snapshot.commit_log
    log.insert(
        5,
        Bundle(
            trace=[TraceEntry("findingsLedger", "set")],
            overwrite={"findingsLedger": rows[:2]},
            stage_id="findings",
            runtime_stage_id="findings#5",
        ),
    )
    log.append(
        Bundle(
            trace=[TraceEntry("findingsLedger", "append")],
            overwrite={"findingsLedger": rows[2:]},
            stage_id="findings",
            runtime_stage_id="findings#99",
        )
    )
    return run


def test_standing_rows_are_read_from_the_findings_ledger_and_the_rest_skipped():
    run = with_findings_ledger(decode_run(next(iter_documents(FACT_BENCH))), LEDGER)
    rows = standings_from_snapshot(run)
    assert [(r["tool_call_id"], r["standing"], r["iteration"], r["source"]) for r in rows] == [
        ("call-3", "fact", 4, "snapshot"),
        ("call-6", "fact", 7, "snapshot"),
    ]


def test_a_run_without_a_findings_ledger_has_no_standings():
    assert standings_from_snapshot(decode_run(next(iter_documents(FACT_BENCH)))) == []


def test_whatif_reads_the_snapshots_ledger_and_holds_its_facts():
    run = with_findings_ledger(decode_run(next(iter_documents(FACT_BENCH))), LEDGER)
    per_run, _ = whatif(run, ["sliding:keep=6", "sliding:keep=6,ledger_facts=0"])
    held = per_run["answer"][0]["tool_call_ids_verbatim"]
    assert {"call-3", "call-6"} <= set(held)
    assert per_run["facts_declared"].to_list() == [2, 2]
    assert "call-3" not in per_run["answer"][1]["tool_call_ids_verbatim"]
