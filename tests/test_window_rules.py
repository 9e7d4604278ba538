"""The window rules on hand-built windows: turns, the current request, pins, refusals, the span.

The scenarios are agentfootprint's own window tests (``test/core/window-*.test.ts``),
restated as data; each test checks one behaviour.
"""

from __future__ import annotations

from contextledger.read.messages import Message, ToolCall
from contextledger.window.refusals import (
    Guards,
    current_request_index,
    ledger_fact_pins,
    plan_removal,
    refusal_for,
    standing_lookup,
    tool_result_pins,
    turn_standing,
)
from contextledger.window.turns import answered_call_ids, segment_turns, window_chars

TASK = "Walk the whole floor and tell me which rack is hottest."
HOLDS = "HOLDS: aix-lab-01-rack-a, aix-lab-01-rack-b, aix-lab-02-rack-a"


def user(content: str) -> Message:
    return Message("user", content)


def asks(*calls: tuple[str, str], content: str = "") -> Message:
    return Message("assistant", content, tool_calls=tuple(ToolCall(i, n) for i, n in calls))


def answers(call_id: str, name: str | None = "look", content: str = "ok") -> Message:
    return Message("tool", content, tool_call_id=call_id, tool_name=name)


def round_(call_id: str, name: str = "look", content: str = "ok") -> list[Message]:
    return [asks((call_id, name)), answers(call_id, name, content)]


def resolved_window() -> list[Message]:
    return [user("do the thing"), *round_("c1"), *round_("c2"), *round_("c3")]


def guards_for(window: list[Message], limit: int = 0, said: str | None = TASK) -> Guards:
    turns = segment_turns(window)
    anchor = current_request_index(window, said)
    pins = tool_result_pins(turns, window, anchor)
    return Guards(
        answered=answered_call_ids(window),
        current_request=anchor,
        tool_result_pins=tuple(pins) if limit > 0 else (),
        keep_last_tool_results=limit if pins else 0,
    )


def plain_guards(window: list[Message], **extra) -> Guards:
    return Guards(answered=answered_call_ids(window), **extra)


# ── turns ──────────────────────────────────────────────────────────


def test_tool_results_join_the_turn_that_asked_for_them():
    turns = segment_turns(resolved_window())
    assert [t.length for t in turns] == [1, 2, 2, 2]
    assert [t.start for t in turns] == [0, 1, 3, 5]
    assert [t.messages[0].role for t in turns] == ["user", "assistant", "assistant", "assistant"]


def test_every_non_tool_message_starts_a_turn():
    assert len(segment_turns([user("a"), user("b"), Message("assistant", "c")])) == 3


def test_a_leading_tool_message_gets_its_own_turn():
    turns = segment_turns([answers("orphan"), user("a")])
    assert len(turns) == 2
    assert turns[0].messages[0].role == "tool"


def test_an_empty_window_has_no_turns():
    assert segment_turns([]) == []


def test_window_chars_counts_utf16_code_units():
    assert window_chars([]) == 0
    assert window_chars([user("abc"), Message("assistant", "de")]) == 5
    assert window_chars([user("🙂é")]) == 3


# ── the current request ────────────────────────────────────────────


def test_current_request_is_the_latest_thing_the_person_said():
    window = [user("turn one"), *round_("c1"), user("turn two")]
    assert current_request_index(window, "turn two") == 3
    assert current_request_index(window) == 3


def test_current_request_prefers_the_runs_own_message_over_recency():
    window = [user("do the thing"), *round_("c1"), user("later")]
    assert current_request_index(window, "do the thing") == 0


def test_current_request_never_anchors_on_a_library_authored_message():
    notice = user("[dropped history — 2 earlier message(s) were dropped …]")
    summary = user("[compacted history — 2 earlier message(s) were folded…]\n\nsummary")
    injected = Message("user", "remember the house style", injected=True)
    assert current_request_index([user("the real request"), notice, summary, injected]) == 0


def test_a_window_nobody_asked_anything_in_has_no_current_request():
    assert current_request_index([]) == -1
    assert current_request_index(round_("c1")) == -1


# ── last-tool-result pins ──────────────────────────────────────────


def test_pins_are_each_tools_last_result_newest_first_after_the_request():
    window = [
        *round_("old", "whats_here", "STALE"),
        user(TASK),
        *round_("a", "whats_here", HOLDS),
        *round_("b", "move"),
        *round_("c", "move"),
    ]
    turns = segment_turns(window)
    anchor = current_request_index(window, TASK)
    pins = tool_result_pins(turns, window, anchor)
    assert [p.tool_name for p in pins] == ["move", "whats_here"]
    assert pins[0].turn_index == len(turns) - 1
    assert all(p.message_index > anchor for p in pins)
    assert pins[1].chars == len(HOLDS)


def test_a_pin_recovers_the_tool_name_from_the_asking_call():
    window = [user(TASK), asks(("x", "whats_here")), answers("x", None, HOLDS)]
    pins = tool_result_pins(segment_turns(window), window, 0)
    assert [p.tool_name for p in pins] == ["whats_here"]


def test_a_result_nothing_can_name_is_not_pinned():
    window = [user(TASK), answers("nobody-asked", None, "orphan")]
    assert tool_result_pins(segment_turns(window), window, 0) == []


def test_a_parallel_batch_is_one_pin():
    window = [
        user(TASK),
        asks(("1", "a"), ("2", "b"), ("3", "c")),
        answers("1", "a"),
        answers("2", "b"),
        answers("3", "c"),
        *round_("later", "d"),
    ]
    pins = tool_result_pins(segment_turns(window), window, 0)
    assert len(pins) == 2
    assert pins[1].turn_index == 1


# ── refusal order ──────────────────────────────────────────────────


def test_a_resolved_tool_turn_may_leave():
    window = resolved_window()
    assert refusal_for(segment_turns(window)[1], plain_guards(window)) is None


def test_an_unanswered_call_refuses_as_unresolved():
    window = [user("go"), asks(("c1", "look"))]
    assert refusal_for(segment_turns(window)[1], plain_guards(window)) == "unresolved-tool-call"


def test_the_paused_call_refuses_by_its_own_name():
    window = [user("go"), asks(("c1", "look"), ("c2", "look")), answers("c1")]
    turn = segment_turns(window)[1]
    assert refusal_for(turn, plain_guards(window, paused_tool_call_id="c2")) == "paused-tool"
    checkin = plain_guards(window, paused_tool_call_id="c2", paused_check_in=True)
    assert refusal_for(turn, checkin) == "pending-check-in"


def test_the_system_envelope_never_leaves():
    window = [Message("system", "you are a bot"), user("go")]
    assert refusal_for(segment_turns(window)[0], plain_guards(window)) == "system-envelope"


def test_an_unanswered_call_outranks_a_pin():
    turn = segment_turns([asks(("u", "look"))])[0]
    guards = Guards(answered=frozenset(), pinned_turns=frozenset({0}))
    assert refusal_for(turn, guards) == "unresolved-tool-call"


def test_the_current_request_outranks_a_pin():
    turn = segment_turns([asks(("u", "look"))])[0]
    guards = Guards(answered=frozenset({"u"}), current_request=0, pinned_turns=frozenset({0}))
    assert refusal_for(turn, guards) == "current-request"


def test_a_pin_with_nothing_else_to_say_refuses_as_last_tool_result():
    turn = segment_turns([asks(("u", "look"))])[0]
    guards = Guards(answered=frozenset({"u"}), pinned_turns=frozenset({0}))
    assert refusal_for(turn, guards) == "last-tool-result"


def test_the_recency_pin_outranks_the_fact_pin():
    turn = segment_turns([asks(("u", "look"))])[0]
    both = Guards(
        answered=frozenset({"u"}), pinned_turns=frozenset({0}), fact_pinned_turns=frozenset({0})
    )
    assert refusal_for(turn, both) == "last-tool-result"
    facts = Guards(answered=frozenset({"u"}), fact_pinned_turns=frozenset({0}))
    assert refusal_for(turn, facts) == "ledger-fact"


# ── the span ───────────────────────────────────────────────────────


def test_the_plan_takes_the_oldest_turns_and_keeps_the_last_k():
    window = resolved_window()
    plan = plan_removal(segment_turns(window), 2, plain_guards(window))
    assert (plan.first, plan.last) == (0, 1)
    assert [r["reason"] for r in plan.refusals] == ["inside-keep-window"] * 2


def test_an_unremovable_turn_after_the_span_began_ends_it():
    window = [
        user("go"),
        asks(("dangling", "look")),
        *round_("c2"),
        *round_("c3"),
        *round_("c4"),
    ]
    plan = plan_removal(segment_turns(window), 1, plain_guards(window))
    assert (plan.first, plan.last) == (0, 0)
    assert plan.refusals[0] == {"reason": "unresolved-tool-call", "turnIndex": 1, "messageIndex": 1}


def test_a_span_never_reorders_survivors():
    window = [
        user("go"),
        *round_("c1"),
        asks(("dangling", "look")),
        *round_("c3"),
        *round_("c4"),
    ]
    plan = plan_removal(segment_turns(window), 1, plain_guards(window))
    assert (plan.first, plan.last) == (0, 1)


def test_nothing_is_removed_when_every_candidate_refuses():
    window = [asks(("dangling", "look")), *round_("c2"), *round_("c3")]
    plan = plan_removal(segment_turns(window), 2, plain_guards(window))
    assert plan.empty
    assert plan.refusals[0]["reason"] == "unresolved-tool-call"


def test_nothing_is_removed_when_the_keep_window_covers_everything():
    window = resolved_window()
    plan = plan_removal(segment_turns(window), 99, plain_guards(window))
    assert plan.empty
    assert len(plan.refusals) == 4


def test_the_span_never_reaches_into_the_keep_window():
    for turn_count in range(1, 13):
        window = [user("go")]
        for i in range(1, turn_count):
            window += round_(f"c{i}")
        turns = segment_turns(window)
        for keep in range(1, 9):
            plan = plan_removal(turns, keep, plain_guards(window))
            if not plan.empty:
                assert plan.last < max(0, len(turns) - keep)


def test_refusals_list_the_older_turns_first_then_the_keep_window():
    window = [user(TASK), *round_("c1"), *round_("c2"), *round_("c3")]
    plan = plan_removal(segment_turns(window), 2, guards_for(window))
    assert [(r["reason"], r["turnIndex"], r["messageIndex"]) for r in plan.refusals] == [
        ("current-request", 0, 0),
        ("inside-keep-window", 2, 3),
        ("inside-keep-window", 3, 5),
    ]


# ── the pin ceiling ────────────────────────────────────────────────

FIVE_TOOLS = [
    user(TASK),
    *round_("t1", "tool_one"),
    *round_("t2", "tool_two"),
    *round_("t3", "tool_three"),
    *round_("t4", "tool_four"),
    *round_("t5", "tool_five"),
    *round_("t6", "tool_five"),
    *round_("t7", "tool_five"),
]


def test_the_ceiling_is_spent_newest_first_and_reports_what_it_turned_away():
    plan = plan_removal(segment_turns(FIVE_TOOLS), 2, guards_for(FIVE_TOOLS, 2))
    assert plan.observations is not None
    assert plan.observations["limit"] == 2
    admitted = [p["turnIndex"] for p in plan.observations["pinned"]]
    assert admitted == sorted(admitted, reverse=True) == [4, 3]
    assert plan.observations["yielded"] == 2


def test_a_pin_inside_the_keep_window_spends_no_slot():
    window = [
        user(TASK),
        *round_("o", "observer", HOLDS),
        *round_("a1", "actuator"),
        *round_("a2", "actuator"),
        *round_("a3", "actuator"),
    ]
    plan = plan_removal(segment_turns(window), 2, guards_for(window, 1))
    assert [p["toolName"] for p in plan.observations["pinned"]] == ["observer"]
    assert plan.observations["yielded"] == 0


def test_a_zero_ceiling_plans_as_if_the_pin_did_not_exist():
    plan = plan_removal(segment_turns(FIVE_TOOLS), 2, guards_for(FIVE_TOOLS, 0))
    assert plan.observations is None
    assert "last-tool-result" not in [r["reason"] for r in plan.refusals]


def test_a_pin_ends_the_span_and_is_stepped_over_at_the_next_boundary():
    window = [
        user(TASK),
        *round_("a", "x"),
        *round_("b", "x"),
        *round_("c", "x"),
        *round_("pin", "observer", HOLDS),
        *round_("d", "x"),
        *round_("e", "x"),
        *round_("f", "x"),
    ]
    first = plan_removal(segment_turns(window), 2, guards_for(window, 2))
    assert (first.first, first.last) == (1, 3)
    after = [user(TASK), *round_("pin", "observer", HOLDS), *window[9:]]
    second = plan_removal(segment_turns(after), 2, guards_for(after, 2))
    assert second.first == 2


def test_the_pin_moves_when_the_tool_answers_again():
    before = [
        user(TASK),
        *round_("w1", "whats_here", HOLDS),
        *round_("m1", "move"),
        *round_("m2", "move"),
        *round_("m3", "move"),
    ]
    after = [*before, *round_("w2", "whats_here", "FRESH HOLDS")]
    plan = plan_removal(segment_turns(after), 2, guards_for(after, 2))
    assert plan.observations is None
    assert plan.first == 1


def test_a_new_user_turn_releases_the_whole_previous_loop():
    window = [
        user("what is on screen?"),
        *round_("w", "whats_here", HOLDS),
        *round_("m", "move"),
        user(TASK),
    ]
    plan = plan_removal(segment_turns(window), 1, guards_for(window, 2))
    assert plan.observations is None
    assert "last-tool-result" not in [r["reason"] for r in plan.refusals]


# ── ledger-fact pins (the newer version's hold) ────────────────────


def test_a_turns_standing_is_its_most_valuable_results():
    batch = segment_turns([asks(("1", "a"), ("2", "b")), answers("1", "a"), answers("2", "b")])[0]
    assert turn_standing(batch, {"1": "noise", "2": "fact"}.get) == "fact"
    assert turn_standing(batch, {"1": "noise"}.get) is None  # undeclared outranks noise
    assert turn_standing(batch, {"1": "noise", "2": "ruled-out"}.get) == "ruled-out"


def test_fact_pins_are_fact_turns_after_the_request_newest_first():
    window = [
        *round_("old", "probe", "FACT-0"),
        user(TASK),
        *round_("f1", "probe", "FACT-1"),
        *round_("n1", "probe", "NOISE-1"),
        *round_("f2", "probe", "FACT-2"),
    ]
    standings = {"old": "fact", "f1": "fact", "n1": "noise", "f2": "fact"}
    turns = segment_turns(window)
    pins = ledger_fact_pins(turns, window, standing_lookup(standings), 2)
    assert [(p.turn_index, p.tool_call_ids) for p in pins] == [(4, ("f2",)), (2, ("f1",))]


def test_fact_pins_admit_under_their_own_ceiling_and_refuse_as_ledger_fact():
    window = [
        user(TASK),
        *round_("f1", "probe", "FACT-1"),
        *round_("n1", "noise_probe"),
        *round_("n2", "noise_probe"),
        *round_("n3", "noise_probe"),
    ]
    turns = segment_turns(window)
    pins = ledger_fact_pins(turns, window, standing_lookup({"f1": "fact"}), 0)
    guards = Guards(
        answered=answered_call_ids(window),
        current_request=0,
        ledger_fact_pins=tuple(pins),
        keep_ledger_facts=4,
    )
    plan = plan_removal(turns, 2, guards)
    assert plan.refusals[1] == {"reason": "ledger-fact", "turnIndex": 1, "messageIndex": 1}
    assert plan.ledger_facts == {
        "pinned": [{"toolName": "probe", "turnIndex": 1, "chars": 6}],
        "yielded": 0,
        "limit": 4,
    }
    assert (plan.first, plan.last) == (2, 2)
