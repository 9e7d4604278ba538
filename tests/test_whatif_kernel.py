"""The vectorized kernel reproduces the exact replay, visit for visit, where it applies.

Checked on the bundled sample and the corpus (runs recorded without a window, and
every run under ``none``), with and without standings, and on random histories; and
``whatif``'s rows (which the kernel computes wherever it can) are the exact replay's,
refusal for refusal, with the runs the kernel sets aside replayed exactly in place.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from contextledger.jobs.whatif import read_inputs
from contextledger.window.kernel import (
    KERNEL_METRICS,
    VISIT_FIELDS,
    _Advance,
    advance,
)
from contextledger.window.policies import parse_policy
from contextledger.window.replay import replay
from contextledger.window.standings import StandingsTimeline, timelines
from contextledger.window.synthetic import Batch, Result, Said, build_stream
from contextledger.window.turn_arrays import turn_arrays
from contextledger.window.turn_sets import as_sets
from contextledger.window.visit_records import refusal_rows
from contextledger.window.whatif import (
    parse_policies,
    whatif_row,
    whatif_table,
    whatif_table_exact,
)

from .conftest import SAMPLE, corpus_dir, require_corpus
from .test_whatif_properties import batches, histories, policies

POLICIES = [
    "none",
    "sliding:keep=6",
    "sliding:keep=2",
    "sliding:keep=3,last_tool_results=0",
    "sliding:keep=4,ledger_facts=2",
    "token_budget:threshold=500",
    "token_budget:threshold=300,keep=2,last_tool_results=1,ledger_facts=1",
]


def disagreements(streams, specs, by_run=None):
    """Every (run, policy, what) where the kernel and the exact replay differ."""
    by_run = by_run or {}
    parsed = [parse_policy(spec) for spec in specs]
    arrays = turn_arrays(streams, by_run)
    result = advance(arrays, parsed)
    found, compared = [], 0
    for r, stream in enumerate(streams):
        if r in arrays.fallback:
            continue
        timeline = by_run.get(stream.run_id)
        for p, policy in enumerate(parsed):
            if policy.kind != "none" and arrays.windowed[r]:
                continue
            compared += 1
            exact = replay(stream, policy, timeline.at if timeline else None)
            row = whatif_row(stream, policy.spec, exact, timeline)
            for name in KERNEL_METRICS:
                if row[name] is not None and row[name] != result.metrics[name][p, r]:
                    found.append((stream.run_id, policy.spec, name))
            engaged = np.flatnonzero(result.visits["engaged"][p, :, r])
            ours = [
                (int(stream.calls[k].iteration),
                 *(int(result.visits[f][p, k, r]) for f in VISIT_FIELDS[1:]))
                for k in engaged
            ]  # fmt: skip
            theirs = [
                (v["iteration"], v["removed_message_count"], v["turns_before"], v["turns_after"],
                 v["window_chars_before"], v["window_chars_after"])
                for v in row["visits"]
            ]  # fmt: skip
            if ours != theirs:
                found.append((stream.run_id, policy.spec, "visits"))
    return found, compared


@pytest.fixture(scope="module")
def sample_streams():
    return read_inputs(SAMPLE).streams


def labelled(streams, seed=3):
    """Random standings for every result, declared on or after the call it reached."""
    return timelines(labelled_rows(streams, seed))


def labelled_rows(streams, seed=3):
    """The rows :func:`labelled` files."""
    rnd = random.Random(seed)
    return [
        {
            "run_id": stream.run_id,
            "tool_call_id": message.tool_call_id,
            "standing": rnd.choice(["fact", "fact", "noise", "open", "ruled-out"]),
            "iteration": (message.first_call or 0) + rnd.randint(0, 2),
            "source": "test",
        }
        for stream in streams
        for message in stream.messages
        if message.role == "tool" and message.tool_call_id
    ]


def test_the_kernel_replays_the_sample_exactly(sample_streams):
    found, compared = disagreements(sample_streams, POLICIES)
    assert found == []
    assert compared >= 14


def test_the_kernel_replays_the_sample_exactly_with_standings(sample_streams):
    found, compared = disagreements(sample_streams, POLICIES, labelled(sample_streams))
    assert found == [] and compared >= 14


def test_the_kernel_replays_the_corpus_exactly():
    require_corpus()
    streams = read_inputs(corpus_dir() / "runs").streams
    arrays = turn_arrays(streams)
    assert arrays.fallback == {}
    found, compared = disagreements(streams, POLICIES)
    assert found == []
    assert compared > 1000
    found, _ = disagreements(streams, POLICIES[1:5], labelled(streams))
    assert found == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), policy=policies)
def test_the_kernel_replays_random_histories_exactly(history, policy):
    stream, timeline = history
    found, _ = disagreements([stream], [policy.spec], {stream.run_id: timeline} if timeline else {})
    assert found == []


def test_the_fact_bench_headline_from_the_kernel(sample_streams):
    bench = next(s for s in sample_streams if s.run_id == "s0001-fact-bench")
    rows = [
        (f"call-{i}", "fact" if i % 3 == 0 else "noise", i + 1)  # declared on the next call
        for i in range(1, 21)
    ]
    arrays = turn_arrays([bench], {bench.run_id: StandingsTimeline(rows)})
    specs = [f"sliding:keep=6,ledger_facts={n}" for n in (0, 2, 4, 6)]
    result = advance(arrays, [parse_policy(spec) for spec in specs])
    assert result.metrics["answer_facts_verbatim"][:, 0].tolist() == [2, 4, 6, 6]


def test_a_run_whose_request_changes_falls_back_by_name():
    steps = [[Batch((Result("look", 9),))], [Said("user", "second")], []]
    said_once = build_stream("r", [Said("user", "first")], steps)
    assert turn_arrays([said_once]).fallback == {}  # "first" stays the request
    stream = build_stream("r", [Said("user", "first")], steps, request="never said")
    assert turn_arrays([stream]).fallback == {0: "the current request changes during the run"}


def long_run(run_id, turns, tools=7):
    """A run of ``turns`` turns after a system and a user message: one to three results a
    call over ``tools`` tools, sizes from tiny to huge, every 13th call never answered, a
    user turn every 50th call."""
    said = [Said("system", "rules"), Said("user", "go")]
    steps = []
    for n in range(turns - len(said)):
        if n % 50 == 49:
            steps.append([Said("user", f"and then {n}")])
            continue
        results = tuple(
            Result(
                f"t{(n * 3 + j) % tools}", None if n % 13 == 12 and j == 0 else 40 + 97 * n % 900
            )
            for j in range(1 + n % 3)
        )
        steps.append([Batch(results)])
    steps.append([])
    return build_stream(run_id, said, steps)


@pytest.mark.parametrize("turns", [65, 500])
def test_runs_longer_than_a_word_of_turns_replay_exactly(turns):
    runs = [long_run(f"long-{turns}", turns), long_run("short", 40)]
    arrays = turn_arrays(runs, labelled(runs))
    assert arrays.msgs.shape[1] >= turns and arrays.fallback == {}
    specs = [*POLICIES, "sliding:keep=80,last_tool_results=3,ledger_facts=4"]
    found, compared = disagreements(runs, specs, labelled(runs))
    assert found == [] and compared == 2 * len(specs)


# ── whatif: the kernel's rows are the exact replay's ───────────────

#: Depths, budgets, both pins, and windows down to one turn.
ROW_POLICIES = [
    *POLICIES,
    "sliding:keep=1",
    "sliding:keep=2,last_tool_results=3,ledger_facts=4",
    "token_budget:threshold=100,keep=1,ledger_facts=3",
]


def same_rows(streams, specs, standings_rows=()):
    parsed = parse_policies(specs)
    fast = whatif_table(streams, parsed, standings_rows)
    assert_frame_equal(fast, whatif_table_exact(streams, parsed, standings_rows), check_exact=True)
    return fast


def reasons(per_run):
    return set(
        per_run.select(
            per_run["visits"].explode().struct.field("refusals").explode().struct.field("reason")
        )
        .to_series()
        .drop_nulls()
    )


def test_whatif_rows_from_the_kernel_are_the_exact_replays_on_the_sample():
    inputs = read_inputs(SAMPLE)
    assert turn_arrays(inputs.streams).fallback == {}  # the kernel replays every run
    same_rows(inputs.streams, ROW_POLICIES, inputs.standings)
    per_run = same_rows(
        inputs.streams, ROW_POLICIES, [*inputs.standings, *labelled_rows(inputs.streams)]
    )
    assert {"current-request", "inside-keep-window", "last-tool-result", "ledger-fact"} <= (
        reasons(per_run)
    )
    assert per_run["budget_tokens_from"].drop_nulls().n_unique() >= 2


def test_whatif_rows_from_the_kernel_are_the_exact_replays_on_the_corpus():
    require_corpus()
    inputs = read_inputs(corpus_dir() / "runs")
    specs = [ROW_POLICIES[n] for n in (0, 1, 4, 5, 6, 8, 9)]
    same_rows(inputs.streams, specs, inputs.standings)
    per_run = same_rows(inputs.streams, specs[1:], labelled_rows(inputs.streams, seed=11))
    assert "replacement-not-smaller" in reasons(per_run)


def test_every_refusal_reason_and_a_notice_inside_the_keep_window():
    said = [Said("system", "rules"), Said("user", "go")]
    steps = [
        [Batch((Result("look", 900), Result("probe", 40)))],
        [Batch((Result("look", None),))],  # never answered
        [Said("assistant", "x")],
        [Batch((Result("probe", 2),))],
        [Batch((Result("fetch", 700),))],
        [Batch((Result("look", 5000),))],
        [Batch((Result("probe", 1),))],
        [],
    ]
    runs = [
        build_stream("envelope", said, steps),
        build_stream("bare", [Said("assistant", "hi"), Said("user", "go")], steps),
        # a span at the head too small for a notice, before a turn that is no user's
        build_stream("head", [Said("assistant", "hi"), *said], steps),
    ]
    rows = [
        {"run_id": run.run_id, "tool_call_id": call_id, "standing": "fact", "iteration": 2}
        for run in runs
        for call_id in ("c1.0.0", "c4.0.0")
    ]
    rows = [{**row, "source": "test"} for row in rows]
    specs = [
        "sliding:keep=1",
        "sliding:keep=2,ledger_facts=1",
        "token_budget:threshold=50,keep=3",
        "token_budget:threshold=10,keep=1,last_tool_results=0",
    ]
    per_run = same_rows(runs, specs, rows)
    assert reasons(per_run) == {
        "current-request",
        "system-envelope",
        "unresolved-tool-call",
        "last-tool-result",
        "ledger-fact",
        "inside-keep-window",
        "replacement-not-smaller",
    }


def test_runs_the_kernel_sets_aside_are_replayed_exactly_in_their_place():
    steps = [[Batch((Result("look", 300),))] for _ in range(8)]
    long = [[Batch((Result("look", 30),))] for _ in range(66)]
    runs = [
        build_stream("first", [Said("user", "go")], steps),
        build_stream(
            "changes",
            [Said("user", "go")],
            [*steps[:3], [Said("user", "then")], *steps[3:]],
            request="never said",
        ),
        build_stream("long", [Said("user", "go")], long),
        build_stream("last", [Said("user", "go")], steps[:5]),
        build_stream("no call", [Said("user", "go")], []),
        build_stream("nothing", [], []),
    ]
    assert sorted(turn_arrays(runs).fallback) == [1]  # (a long run is the kernel's too)
    per_run = same_rows(runs, ["sliding:keep=3", "none", "token_budget:threshold=600"])
    assert per_run["run_id"].unique(maintain_order=True).to_list() == [r.run_id for r in runs]


def test_runs_of_more_turns_than_a_float_holds_exactly():
    steps = [[Batch((Result(f"t{n % 7}", 40 + 97 * n % 900),))] for n in range(61)]
    runs = [build_stream("long", [Said("user", "go")], steps)]
    assert turn_arrays(runs).msgs.shape[1] > 53  # the masks' high bits are found by shifts
    specs = ["sliding:keep=3", "sliding:keep=40,last_tool_results=3", "token_budget:threshold=900"]
    per_run = same_rows(runs, specs)
    assert per_run["engaged_visits"].min() > 0


def test_no_runs_no_rows():
    per_run = same_rows([], ["sliding:keep=3"])
    assert per_run.height == 0


said_anyone = st.builds(
    Said,
    role=st.sampled_from(["user", "assistant", "system"]),
    text=st.sampled_from(["ok", "TASK", "rules"]),
)
mixed_steps = st.lists(
    st.lists(st.one_of(batches, batches, said_anyone), max_size=2), min_size=1, max_size=14
)


@st.composite
def mixed_runs(draw, run_id):
    """A run with system and user turns anywhere, and standings rows for its results."""
    opening = [*draw(st.lists(said_anyone, max_size=2)), Said("user", "TASK")]
    request = draw(st.sampled_from(["TASK", "TASK", "TASK", None]))
    stream = build_stream(run_id, opening, draw(mixed_steps), request=request)
    ids = [m.tool_call_id for m in stream.messages if m.role == "tool" and m.tool_call_id]
    rows = [
        {
            "run_id": run_id,
            "tool_call_id": draw(st.sampled_from(ids)),
            "standing": draw(st.sampled_from(["fact", "fact", "noise", "open", "ruled-out"])),
            "iteration": draw(st.integers(1, 16)),
            "source": "test",
        }
        for _ in range(draw(st.integers(0, 8)) if ids else 0)
    ]
    return stream, rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.integers(0, 1), min_size=1, max_size=3).flatmap(
        lambda kinds: st.tuples(*(mixed_runs(f"run-{n}") for n in range(len(kinds))))
    ),
    specs=st.lists(policies, min_size=1, max_size=3),
)
def test_whatif_rows_match_the_exact_replay_on_random_histories(runs, specs):
    streams = [stream for stream, _ in runs]
    rows = [row for _, filed in runs for row in filed]
    same_rows(streams, [*{p.spec: p for p in specs}.values(), "none"], rows)


def test_facts_count_from_the_call_that_knows_them_in_any_call_order(sample_streams):
    arrays = turn_arrays(sample_streams, labelled(sample_streams))
    calls = arrays.iterations.shape[1]
    made = (np.arange(1, calls + 1)[:, None] <= arrays.calls)[:, None, :]

    def expected(iterations):  # calls a run never made are never visited
        known = [
            as_sets(arrays.pinnable & (arrays.fact_from <= iterations[:, k - 1][:, None]))
            for k in range(1, calls + 1)
        ]
        return np.where(made, np.stack(known), 0)

    def kernel_facts():
        state = _Advance(arrays, [parse_policy("none")])
        found = []
        for k in range(1, calls + 1):
            state._facts_at(k)
            found.append(state.facts.copy())
        return np.where(made, np.stack(found), 0)

    assert (kernel_facts() == expected(arrays.iterations)).all()
    arrays.iterations = arrays.iterations[:, ::-1].copy()  # iterations out of order
    assert (kernel_facts() == expected(arrays.iterations)).all()


def test_refusals_listed_in_chunks_are_the_same(sample_streams):
    arrays = turn_arrays(sample_streams, labelled(sample_streams))
    result = advance(arrays, [parse_policy(spec) for spec in ROW_POLICIES])
    whole, pieces = refusal_rows(arrays, result), refusal_rows(arrays, result, chunk=7)
    for name in ("counts", "reason", "turn_index", "message_index"):
        assert (getattr(whole, name) == getattr(pieces, name)).all(), name
    assert whole.counts.sum() == whole.reason.size > 0


def test_the_9102_record_fields_from_the_kernel_are_the_exact_replays():
    """``ledger_facts`` and ``dropped_standings`` (agentfootprint 9.102.0 ``WindowRecord``
    keys) come out of the kernel as the exact replay files them: pins behind a notice, the
    stand-down, undeclared results, and none at all without standings."""
    inputs = read_inputs(SAMPLE)
    rows = [r for n, r in enumerate(labelled_rows(inputs.streams)) if n % 4]  # some undeclared
    per_run = same_rows(inputs.streams, ROW_POLICIES, rows)
    visits = per_run.select(pl.col("visits").explode()).unnest("visits").drop_nulls("iteration")
    facts = visits.filter(pl.col("ledger_facts").is_not_null())["ledger_facts"].to_list()
    assert any(f["stand_down"] for f in facts)
    assert any(p["turn_index"] > 1 for f in facts for p in f["pinned"])
    dropped = visits["dropped_standings"].explode().drop_nulls().to_list()
    assert {d["standing"] for d in dropped} >= {None, "noise", "fact"}
    bare = same_rows(inputs.streams, ROW_POLICIES)
    bare_visits = bare.select(pl.col("visits").explode()).unnest("visits")
    assert bare_visits["ledger_facts"].null_count() == bare_visits.height
    assert bare_visits["dropped_standings"].null_count() == bare_visits.height


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.integers(0, 1), min_size=1, max_size=3).flatmap(
        lambda kinds: st.tuples(*(mixed_runs(f"run-{n}") for n in range(len(kinds))))
    ),
    history=histories(),
)
def test_turn_arrays_from_stored_columns_equal_the_streams_on_random_histories(runs, history):
    """Laid out from the columns an archive stores (turns, requests, recorded windows and
    rate as array operations), random runs give the arrays their streams give."""
    import pyarrow as pa

    from contextledger.tables import schema
    from contextledger.tables.window_rows import stream_row
    from contextledger.tables.windows import messages_table
    from contextledger.window.turn_tables import turn_arrays_from_tables

    from .test_archive_whatif import assert_same_arrays

    stream, timeline = history
    streams = [stream, *(s for s, _ in runs)]
    by_run = timelines([row for _, filed in runs for row in filed])
    if timeline:
        by_run[stream.run_id] = timeline
    table = pa.Table.from_pylist(
        [stream_row(s, order) for order, s in enumerate(streams)], schema=schema.STREAMS
    )
    got = turn_arrays_from_tables(table, messages_table(streams), by_run)
    assert_same_arrays(got, turn_arrays(streams, by_run))
