"""Properties every window policy keeps, over random histories (hypothesis).

Histories mix parallel batches, unanswered calls, several user turns, results
with and without tool names, tiny and huge results, and declared standings;
policies mix depths, budgets and both pins. At every visit of every replay:
the current request stays, a tool call and its results stay or leave together,
and no turn that refused leaves.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.window.policies import Policy
from contextledger.window.refusals import current_request_index
from contextledger.window.replay import replay
from contextledger.window.standings import StandingsTimeline
from contextledger.window.synthetic import Batch, Result, Said, build_stream
from contextledger.window.turns import segment_turns

TOOLS = ("look", "probe", "fetch", "weird tool", "x" * 60)
SIZES = st.one_of(
    st.integers(0, 3),  # tiny: smaller than any drop notice
    st.integers(20, 400),
    st.integers(4000, 9000),  # huge
)
results = st.builds(
    Result,
    tool=st.sampled_from(TOOLS),
    chars=st.one_of(SIZES, st.none()),  # None: the call is never answered
    named=st.booleans(),
)
batches = st.builds(Batch, results=st.lists(results, min_size=1, max_size=4).map(tuple))
said = st.builds(
    Said, role=st.sampled_from(["user", "assistant"]), text=st.sampled_from(["ok", "go on", "TASK"])
)
entries = st.one_of(batches, batches, batches, said)
steps = st.lists(st.lists(entries, min_size=0, max_size=2), min_size=1, max_size=16)
openings = st.lists(said, min_size=0, max_size=3).map(lambda s: [*s, Said("user", "TASK")])
policies = st.one_of(
    st.builds(
        Policy,
        kind=st.just("sliding"),
        keep=st.integers(1, 6),
        last_tool_results=st.integers(0, 3),
        ledger_facts=st.integers(0, 4),
    ),
    st.builds(
        Policy,
        kind=st.just("token_budget"),
        keep=st.integers(1, 6),
        threshold=st.integers(10, 3000),
        last_tool_results=st.integers(0, 3),
        ledger_facts=st.integers(0, 4),
    ),
)
standing_rows = st.lists(
    st.tuples(
        st.integers(1, 14),
        st.integers(0, 1),
        st.sampled_from(["fact", "fact", "fact", "open", "noise", "ruled-out"]),
    ),
    max_size=16,
)


@st.composite
def histories(draw):
    stream = build_stream(
        "prop",
        draw(openings),
        draw(steps),
        request=draw(st.sampled_from(["TASK", None, "never said"])),
    )
    results_by_step: dict[int, list[str]] = {}
    for message in stream.messages:
        if message.role == "tool" and message.tool_call_id:
            step = int(message.tool_call_id[1:].split(".")[0])
            results_by_step.setdefault(step, []).append(message.tool_call_id)
    rows = []
    for step, position, standing in draw(standing_rows):
        ids = results_by_step.get(step)
        if ids:
            rows.append((ids[position % len(ids)], standing, step + draw(st.integers(0, 3))))
    armed = draw(st.sampled_from([True, True, True, False]))
    timeline = StandingsTimeline(rows) if rows and armed else None
    return stream, timeline


def keys(window):
    return [("notice", m.content) if m.window_authored else m.index for m in window]


def check_visit(visit, said):
    before, after = visit.window_before, visit.served
    kept = set(keys(after))
    # the current request is served
    request = current_request_index(before, said)
    if request >= 0:
        assert keys([before[request]])[0] in kept
    # whole turns leave: a call and its results together
    for turn in segment_turns(before):
        present = [keys([m])[0] in kept for m in turn.messages]
        assert all(present) or not any(present), (turn.index, present)
    for message in after:
        for call in message.tool_calls:
            answers = [m for m in before if m.role == "tool" and m.tool_call_id == call.id]
            assert all(keys([m])[0] in kept for m in answers)
    # a turn that refused stays
    if visit.record is not None:
        turns = segment_turns(before)
        for refused in visit.record["refusals"]:
            if refused["reason"] == "replacement-not-smaller":
                continue
            turn = turns[refused["turnIndex"]]
            assert turn.start == refused["messageIndex"]
            assert all(keys([m])[0] in kept for m in turn.messages), refused
        if visit.record["removedMessageCount"] == 0:
            assert keys(after) == keys(before)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(history=histories(), policy=policies)
def test_no_policy_drops_the_request_splits_a_call_or_removes_a_turn_that_refused(history, policy):
    stream, timeline = history
    result = replay(stream, policy, timeline.at if timeline else None)
    assert len(result.visits) == len(stream.calls)
    for visit in result.visits:
        check_visit(visit, stream.user_message)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), keep=st.integers(1, 6))
def test_without_a_fact_ceiling_standings_change_no_window(history, keep):
    stream, timeline = history
    policy = Policy("sliding", keep, None, 2, 0)
    plain = replay(stream, policy)
    held = replay(stream, policy, timeline.at if timeline else {})
    assert [keys(v.served) for v in held.visits] == [keys(v.served) for v in plain.visits]
