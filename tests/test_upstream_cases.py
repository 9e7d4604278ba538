"""agentfootprint's own test cases for the rules newer than the corpus (9.102 - 9.117), ported.

Each test rewrites one upstream case in our terms: the same window (or commit log), the
same standings, the same expected answer, checked against our replay. The docstring
names the upstream file, the version whose rule it checks, and any place our rule and
theirs differ. Upstream files are read from ``footprintjs/agentfootprint`` (the window
tests at the 9.102-9.117 tree); their code is not copied, only their scenarios.
"""

from __future__ import annotations

import dataclasses

import pytest
from polars.testing import assert_frame_equal

from contextledger.read.messages import Message, ToolCall
from contextledger.window.policies import parse_policy
from contextledger.window.refusals import (
    Guards,
    current_request_index,
    ledger_fact_pins,
    plan_removal,
    rank_standing,
    standing_lookup,
    tool_result_pins,
    turn_standing,
)
from contextledger.window.replay import replay, window_visit
from contextledger.window.standings import StandingsTimeline
from contextledger.window.synthetic import Batch, Result, Said, build_stream
from contextledger.window.turns import answered_call_ids, segment_turns
from contextledger.window.whatif import parse_policies, whatif_table, whatif_table_exact
from tests.conftest import SAMPLE

# The upstream fixtures, in our messages.
TASK = "Walk the whole floor and tell me which rack is hottest."
HOLDS = "HOLDS: aix-lab-01-rack-a, aix-lab-01-rack-b, aix-lab-02-rack-a"


def user(text: str) -> Message:
    return Message("user", text)


def asks(*calls: tuple[str, str]) -> Message:
    return Message("assistant", "", tool_calls=tuple(ToolCall(i, n) for i, n in calls))


def answers(call_id: str, name: str | None, content: str = "ok", **extra: bool) -> Message:
    return Message("tool", content, call_id, tool_name=name, **extra)


def round_(call_id: str, name: str, content: str = "ok") -> list[Message]:
    """One ReAct round: the call and its answer, one turn."""
    return [asks((call_id, name)), answers(call_id, name, content)]


def plan(history, keep, facts=None, fact_limit=0, ltr_limit=0):
    """``planRemoval`` with the guards the upstream tests build (``guardsFor``)."""
    turns = segment_turns(history)
    anchor = current_request_index(history, TASK)
    latest = tool_result_pins(turns, history, anchor) if ltr_limit else []
    lookup = standing_lookup(facts or {})
    pins = ledger_fact_pins(turns, history, lookup, anchor) if fact_limit else []
    guards = Guards(
        answered=answered_call_ids(history),
        current_request=anchor,
        tool_result_pins=tuple(latest),
        keep_last_tool_results=ltr_limit if latest else 0,
        ledger_fact_pins=tuple(pins),
        keep_ledger_facts=fact_limit if pins else 0,
    )
    return plan_removal(turns, keep, guards)


def held_by(result, reason):
    return [r["turnIndex"] for r in result.refusals if r["reason"] == reason]


# ── window-ledger-fact-pins.test.ts: the rank, a turn's standing, the candidates ──


def test_rank_standing_orders_fact_open_undeclared_ruled_out_noise():
    """``rankStanding``: fact > open > undeclared > ruled-out > noise, strictly.
    Upstream: test/core/window-ledger-fact-pins.test.ts (9.102.0)."""
    order = ["fact", "open", None, "ruled-out", "noise"]
    ranks = [rank_standing(s) for s in order]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == 5


def test_a_turns_standing_is_its_most_valuable_results_and_undeclared_is_no_verdict():
    """``turnStandingOf`` on a parallel batch of three results. Upstream:
    test/core/window-ledger-fact-pins.test.ts (9.102.0)."""
    batch = segment_turns(
        [
            asks(("1", "a"), ("2", "b"), ("3", "c")),
            *(answers(i, n) for i, n in zip("123", "abc", strict=True)),
        ]
    )[0]

    def standing(rows):
        return turn_standing(batch, rows.get)

    assert standing({"1": "noise", "2": "fact", "3": "open"}) == "fact"
    assert standing({"1": "open", "2": "ruled-out"}) == "open"
    assert standing({"1": "ruled-out", "2": "noise", "3": "noise"}) == "ruled-out"
    assert standing({"1": "noise", "2": "noise"}) is None  # one unjudged: undeclared
    assert standing({"1": "ruled-out"}) is None
    asked: list[str] = []
    assert turn_standing(segment_turns([user(TASK)])[0], asked.append) is None
    no_id = segment_turns([asks(), Message("tool", "no id")])[0]
    assert turn_standing(no_id, asked.append) is None and asked == []


def test_fact_pin_candidates_newest_first_with_their_names_and_whole_turn_chars():
    """``ledgerFactPinsOf``: fact turns only, newest first, named for the newest named
    result, ``chars`` the whole turn. Upstream: test/core/window-ledger-fact-pins.test.ts
    (9.102.0)."""
    history = [
        user(TASK),
        *round_("a", "whats_here", HOLDS),
        *round_("b", "move"),
        *round_("c", "move"),
        *round_("d", "move"),
        *round_("e", "move"),
        *round_("f", "measure", "rack-b 41C"),
    ]
    turns = segment_turns(history)
    facts = {"a": "fact", "b": "noise", "c": "open", "d": "ruled-out", "f": "fact"}
    pins = ledger_fact_pins(turns, history, standing_lookup(facts), 0)
    assert [p.tool_call_ids for p in pins] == [("f",), ("a",)]
    assert [p.turn_index for p in pins] == [len(turns) - 1, 1]
    assert [p.message_index for p in pins] == [turns[-1].start, turns[1].start]
    assert [p.tool_name for p in pins] == ["measure", "whats_here"]
    assert [p.chars for p in pins] == [len("rack-b 41C"), len(HOLDS)]


def test_fact_pins_are_anchored_after_the_request_and_a_batch_is_one_pin():
    """Nothing at or before the request is pinnable (-1: no anchor, the old fact too); a
    batch is one pin holding every id in wire order, named for its newest result; a name
    is recovered from the call; an orphan fact is never pinned. Upstream:
    test/core/window-ledger-fact-pins.test.ts (9.102.0)."""
    history = [*round_("old", "whats_here", "STALE"), user(TASK), *round_("a", "whats_here", HOLDS)]
    turns = segment_turns(history)
    lookup = standing_lookup({"old": "fact", "a": "fact"})
    anchor = current_request_index(history, TASK)
    assert [p.tool_call_ids for p in ledger_fact_pins(turns, history, lookup, anchor)] == [("a",)]
    assert [p.tool_call_ids for p in ledger_fact_pins(turns, history, lookup)] == [
        ("a",),
        ("old",),
    ]
    batch = [
        user(TASK),
        asks(("1", "a"), ("2", "b"), ("3", "c")),
        *(answers(i, n) for i, n in zip("123", "abc", strict=True)),
        *round_("later", "d"),
    ]
    pins = ledger_fact_pins(
        segment_turns(batch), batch, standing_lookup({"1": "fact", "2": "noise"}), 0
    )
    assert [(p.turn_index, p.tool_call_ids, p.tool_name) for p in pins] == [
        (1, ("1", "2", "3"), "c")
    ]
    unnamed = [user(TASK), asks(("x", "whats_here")), answers("x", None, HOLDS)]
    named = ledger_fact_pins(segment_turns(unnamed), unnamed, standing_lookup({"x": "fact"}), 0)
    assert [p.tool_name for p in named] == ["whats_here"]
    orphan = [user(TASK), answers("nobody-asked", None, "orphan")]
    lookup = standing_lookup({"nobody-asked": "fact"})
    assert ledger_fact_pins(segment_turns(orphan), orphan, lookup, 0) == []


# ── window-ledger-fact.test.ts: the engine, the ceiling, contiguity ──


def test_the_hold_keeps_fact_turns_only_and_files_what_it_held():
    """``planRemoval`` with the fact hold: the span is the noise between two facts; the
    record's ``ledgerFacts`` is newest first with nothing yielded. Upstream:
    test/core/window-ledger-fact.test.ts, 'holds fact turns ONLY' (9.102.0)."""
    history = [
        user(TASK),
        *round_("a", "whats_here", HOLDS),
        *(m for c in "bcde" for m in round_(c, "move")),
        *round_("f", "measure", "rack-b 41C"),
        *round_("g", "move"),
        *round_("h", "move"),
    ]
    facts = {"a": "fact", "b": "noise", "c": "open", "d": "ruled-out", "f": "fact"}
    result = plan(history, 2, facts, fact_limit=4)
    assert (result.first, result.last) == (2, 5)
    assert held_by(result, "ledger-fact") == [1, 6]
    assert result.ledger_facts == {
        "pinned": [
            {"toolName": "measure", "turnIndex": 6, "chars": len("rack-b 41C")},
            {"toolName": "whats_here", "turnIndex": 1, "chars": len(HOLDS)},
        ],
        "yielded": 0,
        "limit": 4,
    }
    assert result.observations is None


def test_a_fact_from_the_previous_loop_leaves():
    """Nothing at or before the request is held: the old fact is the span. Upstream:
    test/core/window-ledger-fact.test.ts, 'nothing at or before the request' (9.102.0)."""
    history = [
        *round_("old", "whats_here", "STALE"),
        user(TASK),
        *round_("a", "whats_here", HOLDS),
        *round_("b", "move"),
        *round_("c", "move"),
    ]
    result = plan(history, 2, {"old": "fact", "a": "fact"}, fact_limit=4)
    assert (result.first, result.last) == (0, 0)
    assert [p["turnIndex"] for p in result.ledger_facts["pinned"]] == [2]


SEVEN = [
    user(TASK),
    *(m for n in range(1, 8) for m in round_(f"t{n}", f"tool_{n}")),
]
ALL_FACTS = {f"t{n}": "fact" for n in range(1, 8)}


def test_the_ceiling_spends_newest_first_and_reports_what_it_turned_away():
    """Five contest two slots: the two newest win, three yield and leave. Upstream:
    test/core/window-ledger-fact.test.ts, 'the ceiling' (9.102.0)."""
    result = plan(SEVEN, 2, ALL_FACTS, fact_limit=2)
    assert result.ledger_facts["limit"] == 2
    assert [p["turnIndex"] for p in result.ledger_facts["pinned"]] == [5, 4]
    assert result.ledger_facts["yielded"] == 3
    assert (result.first, result.last) == (1, 3)
    assert held_by(result, "ledger-fact") == [4]


def test_a_fact_inside_the_keep_window_is_free_and_limit_zero_plans_as_before():
    """The free pin: facts inside keepRecentTurns spend no slot; ``keepLedgerFacts: 0``
    plans exactly as a window whose ledger holds nothing. Upstream:
    test/core/window-ledger-fact.test.ts, 'the ceiling' (9.102.0)."""
    history = [
        user(TASK),
        *round_("o", "observer", HOLDS),
        *round_("a1", "actuator"),
        *round_("a2", "actuator"),
        *round_("a3", "actuator"),
    ]
    free = plan(history, 2, {"o": "fact", "a2": "fact", "a3": "fact"}, fact_limit=1)
    assert [p["toolName"] for p in free.ledger_facts["pinned"]] == ["observer"]
    assert free.ledger_facts["yielded"] == 0
    off = plan(SEVEN, 2, ALL_FACTS, fact_limit=0)
    assert off.ledger_facts is None and "ledger-fact" not in {r["reason"] for r in off.refusals}
    assert off == plan(SEVEN, 2)


def test_the_two_pins_keep_separate_books():
    """A turn both pins hold reports the recency pin; each block has its own ceiling.
    Upstream: test/core/window-ledger-fact.test.ts, 'separate books' (9.102.0)."""
    history = [
        user(TASK),
        *round_("m1", "measure", "rack-a 39C"),
        *round_("o", "observer", HOLDS),
        *round_("m2", "measure", "rack-b 41C"),
        *(m for c in ("x1", "x2", "x3") for m in round_(c, "move")),
    ]
    result = plan(history, 2, {"m1": "fact", "o": "fact"}, fact_limit=4, ltr_limit=2)
    assert result.observations["limit"] == 2 and result.ledger_facts["limit"] == 4
    assert [p["turnIndex"] for p in result.observations["pinned"]] == [3, 2]
    assert [p["turnIndex"] for p in result.ledger_facts["pinned"]] == [2, 1]
    by_turn = {r["turnIndex"]: r["reason"] for r in result.refusals}
    assert (by_turn[1], by_turn[2], by_turn[3]) == (
        "ledger-fact",
        "last-tool-result",
        "last-tool-result",
    )
    assert (result.first, result.last) == (4, 4)


def test_contiguity_works_both_ways():
    """A noise turn behind a held fact stays this visit; next visit the fact is stepped
    over and the noise leaves. Upstream: test/core/window-ledger-fact.test.ts,
    'contiguity works BOTH ways' (9.102.0)."""
    facts = {"a": "noise", "b": "noise", "c": "noise", "pin": "fact", "d": "noise"}
    first = [
        user(TASK),
        *(m for c in "abc" for m in round_(c, "x")),
        *round_("pin", "observer", HOLDS),
        *(m for c in "def" for m in round_(c, "x")),
    ]
    result = plan(first, 2, facts, fact_limit=4)
    assert (result.first, result.last) == (1, 3)
    assert {r["turnIndex"]: r["reason"] for r in result.refusals}.get(4) == "ledger-fact"
    assert all(r["turnIndex"] != 5 for r in result.refusals)
    after = [
        user(TASK),
        *round_("pin", "observer", HOLDS),
        *(m for c in "def" for m in round_(c, "x")),
    ]
    result = plan(after, 2, facts, fact_limit=4)
    assert (result.first, result.last) == (2, 2)
    assert held_by(result, "ledger-fact") == [1]


# ── the stage: stand-down and droppedStandings, through our window_visit ──


def visits(history, policy, standings, count):
    """``count`` window-stage visits over one window, each seeing the records before it."""
    records: list[dict] = []
    window = list(history)
    for iteration in range(1, count + 1):
        visit = window_visit(
            window,
            parse_policy(policy),
            iteration=iteration,
            measured=None,
            prior_records=records,
            said=TASK,
            standings=standings,
        )
        assert visit.record is not None
        records.append(visit.record)
        window = visit.window
    return records


# The upstream wedge, opened by the request (see the stand-down tests' docstrings).
WEDGE = [user(TASK), *round_("pin", "observer", HOLDS), *round_("a", "move"), *round_("b", "move")]


def test_the_fact_pin_stands_down_on_the_third_blocked_visit_on_the_record():
    """Two visits blocked by the fact hold, then the stand-down, on the record, and
    progress. Upstream: test/core/window-ledger-fact.test.ts, 'the STAGE stands down'
    (9.102.0). Differs: upstream's test strategy ('obedient') files the plan without
    dropping, so its wedge needs no request; ours drops through 9.62's notice ladder, which
    refuses a span at the head with no user turn after it, so the wedge opens with the
    request (the span then leaves silently) and our window is one turn longer."""
    records = visits(WEDGE, "sliding:keep=2,last_tool_results=0", {"pin": "fact"}, 3)
    for record in records[:2]:
        assert record["removedMessageCount"] == 0
        assert "ledger-fact" in {r["reason"] for r in record["refusals"]}
        assert record["ledgerFacts"] == {
            "pinned": [{"toolName": "observer", "turnIndex": 1, "chars": len(HOLDS)}],
            "yielded": 0,
            "limit": 4,
        }
    assert records[2]["ledgerFacts"] == {"pinned": [], "yielded": 0, "limit": 4, "standDown": True}
    assert "ledger-fact" not in {r["reason"] for r in records[2]["refusals"]}
    assert records[2]["removedMessageCount"] > 0
    assert all("observations" not in r for r in records)


def test_a_turn_both_pins_hold_stands_down_as_one_family():
    """The recency pin names the turn first, the fact pin reads the whole family, so both
    stand down together and no pin blocks three visits running. Upstream:
    test/core/window-ledger-fact.test.ts, 'ONE family' (9.102.0); the wedge as above."""
    records = visits(WEDGE, "sliding:keep=2", {"pin": "fact"}, 3)
    for record in records[:2]:
        reasons = {r["reason"] for r in record["refusals"]}
        assert "last-tool-result" in reasons and "ledger-fact" not in reasons
    stood = {"pinned": [], "yielded": 0, "standDown": True}
    assert records[2]["observations"] == {**stood, "limit": 2}
    assert records[2]["ledgerFacts"] == {**stood, "limit": 4}
    assert records[2]["removedMessageCount"] > 0


def test_no_fact_stand_down_and_no_9102_keys_without_standings():
    """Unarmed, the record is 9.62's: no ``ledgerFacts``, no ``droppedStandings``.
    Upstream: test/core/window-ledger-fact.test.ts, 'never fires on an unarmed stage'
    (9.102.0)."""
    records = visits(WEDGE, "sliding:keep=2,last_tool_results=0", None, 3)
    for record in records:
        assert "ledgerFacts" not in record and "droppedStandings" not in record
        assert "ledger-fact" not in {r["reason"] for r in record["refusals"]}
    assert records[0]["removedMessageCount"] > 0  # the declared fact leaves at once


DROPPING = [
    user(TASK),
    *round_("a", "look"),
    *round_("b", "look"),
    *round_("c", "probe"),
    *round_("d", "look"),
    *round_("e", "look"),
]


def test_dropped_standings_name_the_models_claim_and_absent_is_undeclared():
    """``droppedStandings`` beside ``droppedObservations``; no ``ledgerFacts`` block when
    nothing was held. Upstream: test/core/window-ledger-fact.test.ts, 'droppedStandings'
    (9.102.0)."""
    [record] = visits(
        DROPPING, "sliding:keep=2,last_tool_results=0", {"a": "noise", "b": "ruled-out"}, 1
    )
    assert record["removedMessageCount"] == 6
    assert record["droppedObservations"] == ["look", "probe"]
    assert record["droppedStandings"] == [
        {"toolCallId": "a", "standing": "noise"},
        {"toolCallId": "b", "standing": "ruled-out"},
        {"toolCallId": "c"},
    ]
    assert "ledgerFacts" not in record


# ── 9.113.0: a call the batch settlement never dispatched is no result ──


def settled_batch(not_dispatched: bool) -> list[Message]:
    """A batch of two calls: ``x`` ran, ``y`` never did (the settlement's message)."""
    return [
        user(TASK),
        asks(("x", "look"), ("y", "look")),
        answers("x", "look", "ran"),
        answers("y", "look", "not dispatched", not_dispatched=not_dispatched),
        *round_("d", "look"),
        *round_("e", "look"),
    ]


def test_a_not_dispatched_message_has_no_standing_no_pin_and_is_not_dropped():
    """9.113.0 (``LLMMessage.notDispatched``; ``ledgerFactPins.ts`` · ``turnStandingOf`` and
    ``findings/offer.ts`` · ``isResultMessage``, agentfootprint 9.113-9.117): a standing the
    model filed on the unrun call's id (``unknownId``) neither lifts the batch's standing nor
    holds it, and the record does not list it in ``droppedStandings``. Before 9.113 no
    message carries the mark, so the same window unmarked shows the rule the mark turns off."""
    standings = {"x": "noise", "y": "fact"}
    turn = segment_turns(settled_batch(True))[1]
    assert turn_standing(turn, standings.get) == "noise"
    assert turn_standing(segment_turns(settled_batch(False))[1], standings.get) == "fact"
    [marked] = visits(settled_batch(True), "sliding:keep=2,last_tool_results=0", standings, 1)
    assert marked["removedMessageCount"] == 3 and "ledgerFacts" not in marked
    assert marked["droppedStandings"] == [{"toolCallId": "x", "standing": "noise"}]
    [unmarked] = visits(settled_batch(False), "sliding:keep=2,last_tool_results=0", standings, 1)
    assert unmarked["removedMessageCount"] == 0  # the batch is held as a fact
    assert [p["toolName"] for p in unmarked["ledgerFacts"]["pinned"]] == ["look"]


def test_the_kernel_follows_the_9113_rule_as_the_exact_replay_does():
    """The vectorized what-if gives the exact replay's rows on runs with settled calls:
    the unrun call is neither a pin, a dropped result nor a dropped standing."""
    steps = [
        [Batch((Result("look", 40), Result("look", 12)))],
        *([Batch((Result("probe", 30),))] for _ in range(4)),
        [],
    ]
    stream = build_stream("settled", [Said("user", TASK)], steps)
    settled = [
        dataclasses.replace(m, not_dispatched=True) if m.tool_call_id == "c1.0.1" else m
        for m in stream.messages
    ]
    runs = [dataclasses.replace(stream, messages=settled), stream]
    rows = [
        {"run_id": "settled", "tool_call_id": "c1.0.0", "standing": "noise", "iteration": 1},
        {"run_id": "settled", "tool_call_id": "c1.0.1", "standing": "fact", "iteration": 1},
        {"run_id": "settled", "tool_call_id": "c2.0.0", "standing": "fact", "iteration": 2},
    ]
    rows = [{**row, "source": "test"} for row in rows]
    policies = parse_policies(["sliding:keep=2,last_tool_results=0", "sliding:keep=1"])
    fast = whatif_table(runs[:1], policies, rows)
    assert_frame_equal(fast, whatif_table_exact(runs[:1], policies, rows), check_exact=True)
    dropped = [
        d["tool_call_id"] for visit in fast["visits"][0] for d in visit["dropped_standings"] or []
    ]
    assert "c1.0.0" in dropped and "c1.0.1" not in dropped
    timeline = StandingsTimeline([(r["tool_call_id"], r["standing"], r["iteration"]) for r in rows])
    exact = replay(runs[0], policies[0][1], timeline.at)
    held = [p for r in exact.records for p in (r.get("ledgerFacts") or {}).get("pinned", [])]
    assert held and all(p["toolName"] == "probe" for p in held)  # the settled batch never


@pytest.mark.parametrize("marked", [True, False])
def test_results_dropped_count_only_results_that_ran(marked):
    """``results_dropped`` (and its split by standing) counts what ran: a settled message
    is not a result whichever standing the model filed on its id."""
    steps = [[Batch((Result("look", 40), Result("look", 12)))], *([[]] * 4)]
    steps = [steps[0], *([Said("assistant", f"step {n}")] for n in range(4)), []]
    stream = build_stream("r", [Said("user", TASK)], steps)
    messages = [
        dataclasses.replace(m, not_dispatched=marked) if m.tool_call_id == "c1.0.1" else m
        for m in stream.messages
    ]
    rows = [{"run_id": "r", "tool_call_id": "c1.0.1", "standing": "fact", "iteration": 1}]
    rows = [{**row, "source": "test"} for row in rows]
    per_run = whatif_table(
        [dataclasses.replace(stream, messages=messages)],
        parse_policies(["sliding:keep=1,last_tool_results=0,ledger_facts=0"]),
        rows,
    )
    assert per_run["results_dropped"][0] == (1 if marked else 2)
    assert per_run["results_dropped_fact"][0] == (0 if marked else 1)


# ── the ledger under redaction: RecordedRun.basis and unmetered (9.1xx) ──


def hand_built_chart(redacted: list[str]) -> dict:
    """Upstream's hand-built chart: a seed writing the request, the history and one
    injection, then a call writing its tokens and a history with a ``lookup`` call;
    ``redacted`` names the keys the executor's redaction policy scrubs (footprintjs writes
    ``REDACTED`` in their place and lists them in ``redactedPaths``)."""
    history = [{"role": "user", "content": "hi"}]
    called = [*history, {"role": "assistant", "toolCalls": [{"name": "lookup"}]}]

    def bundle(stage, idx, values):
        return {
            "stageId": stage,
            "runtimeStageId": f"{stage}#{idx}",
            "trace": [{"path": key, "verb": "set"} for key in values],
            "overwrite": {k: "REDACTED" if k in redacted else v for k, v in values.items()},
            "updates": {},
            "redactedPaths": [k for k in values if k in redacted],
        }

    seed = {
        "userMessage": "hi",
        "history": history,
        "activeInjections": [{"id": "fact-a", "flavor": "fact"}],
    }
    call = {"totalInputTokens": 10, "history": called}
    return {"commitLog": [bundle("seed", 0, seed), bundle("call-llm", 1, call)]}


def ledger_of(tmp_path, snapshot):
    import json

    import polars as pl

    from contextledger.ledger.compute import compute_ledger
    from contextledger.tables.build import read_runs

    path = tmp_path / "run.json"
    path.write_text(json.dumps(snapshot))
    tables = read_runs([path])
    runs = pl.DataFrame(tables.runs)
    rows = {(r["kind"], r["id"]): r for r in compute_ledger(tables).rows().to_dicts()}
    return runs.row(0, named=True), rows


def test_a_redacted_history_is_reported_as_redacted_and_not_counted_as_data(tmp_path):
    """``RecordedRun.basis`` names the redacted key; nothing is read out of the
    placeholder (no ``lookup`` row); the injection is still offered once. Upstream:
    test/lib/context-ledger/contextLedger.basis.test.ts, 'a redacted history is reported as
    redacted' (9.1xx). Differs: upstream's basis also carries the exact-answer codes
    (``activatedInjectionIds: ['never-written', 'from-initial-state']``); we read only
    ``'redacted'``, the code that changes what is metered. And tools are left
    ``unmetered`` for the run (types.ts · ``RecordedRun.unmetered``), so the reference's
    row-absence is ours too."""
    run, rows = ledger_of(tmp_path, hand_built_chart(["history"]))
    assert run["basis"] == [{"key": "history", "codes": ["redacted"]}]
    assert run["unmetered_kinds"] == ["tool"] and run["metered"]
    assert ("tool", "lookup") not in rows
    assert rows[("injection", "fact-a")]["offered"] == 1
    exact, exact_rows = ledger_of(tmp_path, hand_built_chart([]))
    assert exact["basis"] == [] and exact["unmetered_kinds"] == []  # absent when all exact
    assert exact_rows[("tool", "lookup")]["used"] == 1


def test_a_run_whose_every_kind_rests_on_a_redaction_is_refused_not_scored_zero(tmp_path):
    """With the injections and the history scrubbed, no kind can be metered: the run is
    refused by name, its pieces never offered (types.ts · ``RecordedRun.unmetered``:
    "a placeholder never counts as not used")."""
    run, rows = ledger_of(tmp_path, hand_built_chart(["history", "activeInjections"]))
    assert not run["metered"] and rows == {}
    assert run["refused_reason"] == (
        "every kind rests on a redaction (redacted: activeInjections, history)"
    )
    assert run["unmetered_kinds"] == ["injection", "skill", "tool"]


def test_a_redacted_corpus_run_loses_only_the_kinds_it_rests_on(tmp_path):
    """A sample run (recorded by 9.62, ``redactedPaths`` always ``[]``) with its history
    writes marked redacted: tools leave its ledger, injections and skills stay; the
    unmarked copy is untouched, and the command says which runs rest on a redaction."""
    import gzip
    import json

    from click.testing import CliRunner

    from contextledger.cli import main

    raw = (SAMPLE / "s0003-loop.json.gz").read_bytes()
    source = json.loads(gzip.decompress(raw))
    snapshot = source.get("snapshot", source)
    for bundle in snapshot["commitLog"]:
        if any(t["path"] == "history" for t in bundle["trace"]):
            bundle["redactedPaths"] = ["history"]
    run, rows = ledger_of(tmp_path, source)
    (tmp_path / "exact").mkdir()
    exact, exact_rows = ledger_of(tmp_path / "exact", json.loads(gzip.decompress(raw)))
    assert run["unmetered_kinds"] == ["tool"] and exact["unmetered_kinds"] == []
    assert {k for k, _ in rows} == {k for k, _ in exact_rows} - {"tool"}
    assert all(rows[key] == exact_rows[key] for key in rows)
    result = CliRunner().invoke(main, ["ledger", str(tmp_path / "run.json")])
    assert result.exit_code == 0
    assert "1 run(s) rest partly on a redaction: tool left unmetered there" in result.output


def test_the_corpus_carries_no_settled_call_so_the_9113_rule_keeps_its_answers():
    """Why no rules switch: 9.62 never writes ``notDispatched``, so on the corpus the 9.113
    rule changes nothing (its window records replay field for field in
    ``test_window_parity.py``, with this rule in force)."""
    from contextledger.jobs.whatif import read_inputs
    from tests.conftest import corpus_dir, require_corpus

    require_corpus()
    streams = read_inputs(corpus_dir() / "runs").streams
    assert len(streams) == 301
    assert not any(m.not_dispatched for s in streams for m in s.messages)
