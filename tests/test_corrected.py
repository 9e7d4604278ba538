"""The corrected accounting: offers are what each call carried, uses what the run did.

Each figure quoted in the difference table (docs/ledger.md, the report) is asserted here.
"""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from contextledger.ledger.compute import compute_ledger
from contextledger.tables.build import RunTables, read_runs

from .conftest import oracle_calls, require_corpus


@pytest.fixture(scope="module")
def corrected() -> RunTables:
    return read_runs(require_corpus() / "runs", mode="corrected")


@pytest.fixture(scope="module")
def reference() -> RunTables:
    return read_runs(require_corpus() / "runs", mode="reference")


def tool_counts(table, run_id: str) -> Counter:
    frame = pl.DataFrame(table).filter((pl.col("run_id") == run_id) & (pl.col("kind") == "tool"))
    return Counter(frame["piece_id"].to_list())


def wire_tool_calls_made_in_run(wire: list[dict]) -> Counter:
    """Assistant tool calls on the wire that the run added (not carried in at its first call)."""
    carried, made = set(), {}
    for position, call in enumerate(wire):
        for role, _, _, tool_calls, _ in call["messages"]:
            for tool_call in tool_calls or [] if role == "assistant" else []:
                if position == 0:
                    carried.add(tool_call)
                made.setdefault(tool_call, None)
    return Counter(call.split(":", 1)[1] for call in made if call not in carried)


def test_each_calls_tool_offers_are_the_tools_its_wire_request_carried(corrected):
    """Per model call, in order: the offers of kind ``tool`` at ``call_index`` k are the
    ``tools`` of the run's k-th recorded request (none on a wrap-up call)."""
    offers = pl.DataFrame(corrected.offers).filter(pl.col("kind") == "tool").sort("run_id", "seq")
    per_call = offers.group_by("run_id", "call_index", maintain_order=True).agg("piece_id")
    offered = {(run_id, index): tools for run_id, index, tools in per_call.iter_rows()}
    compared = 0
    for run_id, calls in oracle_calls().items():
        for index, request in enumerate(calls["wire"]):
            assert request["call"] == index + 1, run_id
            assert offered.pop((run_id, index), []) == request["tools"], (run_id, request["call"])
            compared += 1
    assert offered == {}  # no tool offered at a call the provider never received
    assert compared == 2230


def test_each_tool_is_used_once_per_call_the_run_made(corrected):
    for run_id, calls in oracle_calls().items():
        expected = wire_tool_calls_made_in_run(calls["wire"])
        assert tool_counts(corrected.uses, run_id) == expected, run_id


def test_corpus_totals_against_the_reference(corrected, reference):
    def totals(tables: RunTables) -> dict[str, int]:
        offers, uses = pl.DataFrame(tables.offers), pl.DataFrame(tables.uses)
        runs = pl.DataFrame(tables.runs)
        return {
            "tool_offers": offers.filter(pl.col("kind") == "tool").height,
            "tool_uses": uses.filter(pl.col("kind") == "tool").height,
            "metered_calls": int(runs["metered_call_count"].sum()),
            "refused_runs": int((~runs["metered"]).sum()),
            "answer_slice_uses": uses.filter(pl.col("signal") == "answer-slice(slot)").height,
            "runs_with_unmetered_kinds": runs.filter(
                pl.col("unmetered_kinds").list.len() > 0
            ).height,
        }

    assert totals(reference) == {
        "tool_offers": 11801,
        "tool_uses": 2243,
        "metered_calls": 2589,
        "refused_runs": 9,
        "answer_slice_uses": 0,
        "runs_with_unmetered_kinds": 0,
    }
    assert totals(corrected) == {
        "tool_offers": 11065,
        "tool_uses": 2838,
        "metered_calls": 2230,
        "refused_runs": 0,
        "answer_slice_uses": 372,
        "runs_with_unmetered_kinds": 65,
    }


def test_every_model_call_is_metered_once(corrected):
    runs = pl.DataFrame(corrected.runs)
    for row in runs.iter_rows(named=True):
        assert row["metered_call_count"] == len(oracle_calls()[row["run_id"]]["wire"])


def test_the_fact_bench_books_every_probe_the_model_made():
    tables = read_runs(require_corpus() / "runs" / "s0001-fact-bench.json.gz")
    rows = compute_ledger(tables).rows().select("id", "offered", "used")
    assert rows.to_dicts() == [
        {"id": "probe_fact", "offered": 21, "used": 6},
        {"id": "probe_noise", "offered": 21, "used": 14},
    ]


def test_a_follow_up_turn_does_not_count_the_earlier_turns_calls_again(corrected):
    uses = pl.DataFrame(corrected.uses).filter(pl.col("kind") == "tool")
    for run_id, calls in oracle_calls().items():
        if "-conv-t" in run_id and not run_id.endswith("-t1"):
            assert uses.filter(pl.col("run_id") == run_id).height == sum(
                wire_tool_calls_made_in_run(calls["wire"]).values()
            )


def test_a_wrap_up_call_offers_no_tool():
    tables = read_runs(require_corpus() / "runs" / "s0224-wrapup.json.gz")
    last_call = pl.DataFrame(tables.runs)["metered_call_count"].item() - 1
    offers = pl.DataFrame(tables.offers).filter(pl.col("kind") == "tool")
    assert offers.filter(pl.col("call_index") == last_call).is_empty()
    assert offers.filter(pl.col("call_index") == last_call - 1).height > 0


def test_a_zero_usage_run_the_reference_refuses_is_metered():
    path = require_corpus() / "runs" / "s0250-zero.json.gz"
    reference_runs = pl.DataFrame(read_runs(path, mode="reference").runs)
    corrected_runs = pl.DataFrame(read_runs(path).runs)
    assert reference_runs["metered"].to_list() == [False]
    assert corrected_runs["metered"].to_list() == [True]
    assert corrected_runs["metered_call_count"].to_list() == [
        len(oracle_calls()["s0250-zero"]["wire"])
    ]


def test_injection_credit_follows_the_slot_on_the_answer_slice(corrected):
    """An injection is credited once per run when its slot's last writer is on the slice."""
    uses = pl.DataFrame(corrected.uses).filter(pl.col("signal") == "answer-slice(slot)")
    offers = pl.DataFrame(corrected.offers)
    for run_id, calls in oracle_calls().items():
        credited = set(uses.filter(pl.col("run_id") == run_id)["piece_id"].to_list())
        slots = calls["answer_slice"].get("slot_last_writers") or {}
        if credited:
            assert any(slot["in_slice"] for slot in slots.values()), run_id
            offered = set(offers.filter(pl.col("run_id") == run_id)["piece_id"].to_list())
            assert credited <= offered, run_id
        assert len(credited) == uses.filter(pl.col("run_id") == run_id).height


def test_grouped_runs_leave_injections_unmetered_rather_than_unused(corrected):
    runs = pl.DataFrame(corrected.runs).filter(pl.col("grouped"))
    offers = pl.DataFrame(corrected.offers).join(runs.select("run_id"), on="run_id")
    assert runs["unmetered_kinds"].to_list() == [["injection"]] * runs.height
    assert offers.filter(pl.col("kind") == "injection").is_empty()


def test_each_executed_tool_call_is_attributed_to_the_call_whose_reply_asked_for_it(corrected):
    uses = pl.DataFrame(corrected.uses).filter(pl.col("kind") == "tool")
    for run_id, calls in oracle_calls().items():
        # A call made at index k first reaches the wire of call k + 1.
        first_seen: dict[str, int] = {}
        carried: set[str] = set()
        for position, call in enumerate(calls["wire"]):
            for role, _, _, tool_calls, _ in call["messages"]:
                for tool_call in tool_calls or [] if role == "assistant" else []:
                    if position == 0:
                        carried.add(tool_call)
                    first_seen.setdefault(tool_call, position - 1)
        expected = Counter(
            (tool_call.split(":", 1)[1], index)
            for tool_call, index in first_seen.items()
            if tool_call not in carried
        )
        mine = uses.filter(pl.col("run_id") == run_id)
        assert Counter(mine.select("piece_id", "call_index").iter_rows()) == expected, run_id
