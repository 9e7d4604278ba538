"""Replaying each corpus run under its own policy reproduces the reference exactly.

The reference's answers are in ``oracle/runs.jsonl``: the WindowRecords the
window stage filed (``window_records``), the SHA-256 of the final history, and,
for the fact bench, the window its answer call was served (``fact_check``); what
each model call was actually sent is in ``oracle/calls.jsonl.gz`` (``wire``).
"""

from __future__ import annotations

import hashlib
from functools import cache

import pytest

from contextledger.read.messages import Message, RunMessages, window_json
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.window import policy_from_config, rebuild_messages, replay
from contextledger.window.replay import Replay, same_window

from .conftest import oracle_calls, oracle_runs, require_corpus

CORPUS = require_corpus(allow_module_level=True)
ORACLE = oracle_runs()
WINDOWED = [rid for rid, row in ORACLE.items() if (row["scenario"].get("window") or None)]
AGENTS = [rid for rid, row in ORACLE.items() if row["runner_kind"] == "Agent"]


@cache
def stream_of(run_id: str) -> RunMessages:
    run = decode_run(next(iter_documents(CORPUS / "runs" / f"{run_id}.json.gz")))
    return rebuild_messages(run)


@cache
def own_replay(run_id: str) -> Replay:
    scenario = ORACLE[run_id]["scenario"]
    policy = policy_from_config(scenario.get("window"), scenario.get("keep_last_tool_results"))
    return replay(stream_of(run_id), policy)


def test_the_corpus_has_185_windowed_runs_and_600_records():
    assert len(WINDOWED) == 185
    assert sum(len(ORACLE[rid]["window_records"]) for rid in WINDOWED) == 600


@pytest.mark.parametrize("run_id", WINDOWED)
def test_replaying_the_recorded_policy_reproduces_every_window_record(run_id):
    assert own_replay(run_id).records == ORACLE[run_id]["window_records"]


@pytest.mark.parametrize("run_id", WINDOWED)
def test_replaying_the_recorded_policy_ends_on_the_recorded_final_history(run_id):
    final = window_json(own_replay(run_id).final_window)
    assert (
        hashlib.sha256(final.encode("utf-8")).hexdigest() == ORACLE[run_id]["final_history_sha256"]
    )


@pytest.mark.parametrize("run_id", WINDOWED)
def test_replaying_the_recorded_policy_serves_every_call_the_recorded_window(run_id):
    stream = stream_of(run_id)
    served = own_replay(run_id).served
    assert len(served) == len(stream.calls)
    for window, call in zip(served, stream.calls, strict=True):
        assert same_window(window, stream.window(call.window_served)), call.ordinal


def on_the_wire(message: Message) -> list:
    """A served message as ``oracle/calls.jsonl.gz`` records a request's message: role,
    toolCallId, content length (UTF-16), the tool calls as ``id:name`` (None: none), and
    whether an injection delivered it."""
    calls = [f"{call.id}:{call.name}" for call in message.tool_calls] or None
    return [message.role, message.tool_call_id, message.chars, calls, message.injected]


def test_every_agent_run_and_model_call_is_compared_with_the_wire():
    assert len(AGENTS) == 297
    assert sum(len(oracle_calls()[rid]["wire"]) for rid in AGENTS) == 2226


@pytest.mark.parametrize("run_id", AGENTS)
def test_the_replayed_window_at_every_call_is_what_the_provider_received(run_id):
    """Its own policy replayed (``none`` for a run without a window), each call's served
    window holds the recorded request's messages, in order."""
    wire = oracle_calls()[run_id]["wire"]
    served = own_replay(run_id).served
    assert len(served) == len(wire)
    for window, request in zip(served, wire, strict=True):
        received = [
            [role, call_id, chars, calls, injected is not None]
            for role, call_id, chars, calls, injected in request["messages"]
        ]
        assert [on_the_wire(m) for m in window] == received, request["call"]


def test_the_token_budget_replays_use_recorded_tokens_only():
    budget = [
        rid for rid in WINDOWED if ORACLE[rid]["scenario"]["window"]["strategy"] == "token-budget"
    ]
    assert budget
    assert not any(own_replay(rid).estimated for rid in budget)


def test_the_fact_bench_answer_window_holds_13_messages_and_facts_15_and_18():
    fact_check = ORACLE["s0001-fact-bench"]["fact_check"]
    answer = own_replay("s0001-fact-bench").served[-1]
    assert len(answer) == fact_check["answer_window_message_count"] == 13
    assert [[m.role, m.tool_call_id, m.content] for m in answer] == fact_check["answer_window"]
    facts = [f"FACT-{i} " for i in fact_check["planted_fact_calls"]]
    verbatim = [
        i
        for i, fact in zip(fact_check["planted_fact_calls"], facts, strict=True)
        if any(m.role == "tool" and m.content.startswith(fact) for m in answer)
    ]
    assert verbatim == fact_check["verbatim_in_answer_window"] == [15, 18]


def test_the_fact_bench_keeps_all_six_facts_when_the_model_files_them_as_facts():
    stream = stream_of("s0001-fact-bench")
    standings = {
        m.tool_call_id: "fact" if m.content.startswith("FACT-") else "noise"
        for m in stream.messages
        if m.role == "tool"
    }
    held = replay(stream, "sliding:keep=6,ledger_facts=4", standings).served[-1]
    assert sum(m.content.startswith("FACT-") for m in held) == 6
    off = replay(stream, "sliding:keep=6,ledger_facts=0", standings)
    assert [window_json(w) for w in off.served] == [
        window_json(w) for w in own_replay("s0001-fact-bench").served
    ]
