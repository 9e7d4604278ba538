"""The audit of served windows as arrays over a batch is the per-window audit, row for row.

Every :data:`AUDIT_SCHEMA` column of :func:`audit_served` compared exactly (floats bit for
bit) against ``audit_table_exact``, which stays the reference, under every framework's
policies and agentfootprint's: on the sample, the OpenTelemetry traces, the corpus and
synthetic runs (with standings, long runs, many tool names, wire problems of each kind);
each check also asserts the rows hold what they are meant to test, so that an equality
is not two empty columns agreeing. The framework policies whose replays answer from the
run's shared history (``window_at``, which both audits read) are also held to the audit of
the windows their own ``advance`` serves call by call, which shares none of that code.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from contextledger.jobs.compare import FRAMEWORK_DEFAULTS, parse_compared
from contextledger.jobs.synth_model import synth_streams
from contextledger.jobs.whatif import read_inputs
from contextledger.read.messages import ToolCall
from contextledger.report import COMPARE_POLICIES
from contextledger.window.audit import AUDIT_SCHEMA, RunFacts, audit_run, audit_table_exact
from contextledger.window.audit_batch import audit_served
from contextledger.window.cache_costs import CachePrices
from contextledger.window.frameworks import parse_framework_policy
from contextledger.window.frameworks._common import tokens_at_rate
from contextledger.window.frameworks._history import run_history
from contextledger.window.standings import timelines
from contextledger.window.synthetic import (
    Batch,
    Result,
    Said,
    build_stream,
    script_streams,
    tool_batches,
)

from .conftest import REPO, SAMPLE, corpus_dir, require_corpus
from .test_audit_arrays import wire_problem_runs
from .test_whatif_kernel import labelled_rows, mixed_runs
from .test_whatif_properties import policies as random_policies

#: The other frameworks' policies the report audits, and a few tighter ones.
FRAMEWORKS = [
    *FRAMEWORK_DEFAULTS,
    "anthropic_clear:trigger=100,keep=1",
    "autogen_buffered:buffer_size=2",
    "mastra_token_limit:limit=150",
    "langchain_trim:max_tokens=200,strategy=first",
]


#: Policies replayed from the run's shared history, with the keys their fast paths branch on.
SHARED = [
    "autogen_buffered:buffer_size=8",
    "autogen_buffered:buffer_size=1",
    "autogen_head_tail:head_size=2,tail_size=8",
    "autogen_head_tail:head_size=0,tail_size=2",
    "autogen_head_tail:head_size=3,tail_size=1",
    "langchain_trim:max_tokens=600",
    "langchain_trim:max_tokens=600,start_on=human",
    "langchain_trim:max_tokens=300,strategy=first,end_on=ai|human",
    "langchain_trim:max_tokens=800,include_system=true,start_on=human",
    "langchain_trim:max_tokens=1",
    "mastra_token_limit:limit=600",
    "mastra_token_limit:limit=150,trim_mode=contiguous",
    "anthropic_clear:trigger=1000",
    "anthropic_clear:trigger=200,keep=2,clear_at_least=50,exclude_tools=search",
    "langchain_clear:trigger=1000",
    "langchain_clear:trigger=tokens:300|messages:6,keep=messages:1",
]


def own_loop_audit(streams, specs, standings_rows=(), prices=None):
    """:func:`audit_run` rows of the windows each framework policy's own ``advance`` serves,
    the history rebuilt at every call (no shared history, no fast path)."""
    by_run = timelines(standings_rows)
    rows = []
    for stream in streams:
        timeline = by_run.get(stream.run_id)
        facts = RunFacts.of(stream, timeline)
        tokens_of = tokens_at_rate(facts.rate)
        for spec in specs:
            policy = parse_framework_policy(spec)
            history, served = [], []
            for call in stream.calls:
                history = history + stream.entering_before(call.ordinal)
                window, history = policy.advance(history, tokens_of=tokens_of)
                served.append(window)
            rows.append(audit_run(stream, spec, served, timeline, prices, facts))
    return pl.DataFrame(rows, schema=AUDIT_SCHEMA, orient="row")


def same_audit(streams, specs, standings_rows=(), prices=None):
    """The two audits' rows, held equal; returns them."""
    parsed = parse_compared(specs)
    batch = audit_served(streams, parsed, standings_rows, prices)
    exact = audit_table_exact(streams, parsed, standings_rows, prices)
    assert_frame_equal(batch, exact, check_exact=True)
    return batch


@pytest.mark.parametrize("armed", [False, True], ids=["recorded standings", "every result"])
def test_the_batch_audit_is_the_exact_audit_on_the_sample(armed):
    inputs = read_inputs(SAMPLE)
    rows = [*inputs.standings, *(labelled_rows(inputs.streams) if armed else [])]
    audited = same_audit(inputs.streams, [*COMPARE_POLICIES, *FRAMEWORKS], rows)
    assert audited["cache_invalidations"].sum() > 0
    assert audited["answer_placeholders"].sum() > 0 and audited["answer_summaries"].sum() > 0
    assert set(audited["input_tokens_from"].drop_nulls()) >= {"recorded", "estimated"}
    assert (audited["facts_at_answer"].sum() > 0) == armed


def test_the_batch_audit_is_the_exact_audit_on_traces_with_wire_problems():
    inputs = read_inputs(REPO / "data" / "otel")
    streams = inputs.streams
    audited = same_audit(streams, [*COMPARE_POLICIES, *FRAMEWORKS], labelled_rows(streams))
    assert audited["wire_orphan_result"].sum() > 0
    assert audited["wire_unanswered_call"].sum() > 0
    assert audited["first_problem_message"].drop_nulls().len() > 0


def test_the_batch_audit_is_the_exact_audit_on_the_corpus():
    require_corpus()
    streams = read_inputs(sorted((corpus_dir() / "runs").iterdir())[::6]).streams
    same_audit(streams, FRAMEWORKS)
    audited = same_audit(streams, COMPARE_POLICIES, labelled_rows(streams, seed=11))
    assert audited["wire_problems"].sum() > 0


def test_the_batch_audit_is_the_exact_audit_on_synthetic_runs():
    built = list(synth_streams(seed=4, first=0, count=120))
    streams = [stream for stream, _ in built]
    rows = [row for _, held in built for row in held]
    prices = CachePrices(write=2, read=0.3)
    audited = same_audit(streams, FRAMEWORKS, rows, prices)
    assert audited["facts_declared"].sum() > 0
    assert audited["cache_invalidations"].sum() > 0


def test_the_batch_audit_is_the_exact_audit_on_the_bench_runs_with_standings():
    built = list(script_streams(tool_batches(runs=60, calls=12, seed=5)))
    streams = [stream for stream, _ in built]
    rows = [row for _, held in built for row in held]
    audited = same_audit(streams, FRAMEWORKS, rows)
    assert audited["facts_at_answer"].sum() > 0
    assert audited["wire_unanswered_call"].sum() > 0


def test_the_batch_audit_is_the_exact_audit_on_long_runs_with_many_tools():
    said = [Said("system", "rules"), Said("user", "go")]
    steps = [
        [Batch((Result(f"tool_{n}", 40 + 37 * n), Result(f"tool_{n + 80}", (n * 53) % 900)))]
        for n in range(80)
    ]
    steps[10] = [Batch((Result("never", None),))]  # a call never answered
    steps[30] = [Said("user", "and then")]
    runs = [
        build_stream("long", said, steps),
        build_stream("long, no system", said[1:], steps[:70], request="?"),
    ]
    assert len(runs[0].calls) > 64
    audited = same_audit(runs, [*FRAMEWORKS, "sliding:keep=3", "none"], labelled_rows(runs))
    assert audited["wire_unanswered_call"].sum() > 0
    assert audited["cached_tokens"].sum() > 0


def test_every_wire_problem_is_counted_and_the_first_named_as_the_window_by_window_audit():
    runs = [
        *wire_problem_runs(),
        build_stream(
            "moved on",
            [Said("user", "go")],
            [[Said("assistant", "ok"), Said("user", "then")], [Said("assistant", "fine")], []],
            request="go",
        ),
    ]
    orphaned = runs[0].messages[:]
    at = next(n for n, m in enumerate(orphaned) if m.role == "tool")
    orphaned[at] = replace(orphaned[at], tool_call_id="c-nowhere")
    runs.append(replace(runs[0], run_id="orphaned", messages=orphaned))
    specs = [*FRAMEWORKS, "autogen_buffered:buffer_size=1", "sliding:keep=1"]
    audited = same_audit(runs, specs)
    kinds = set(audited["first_problem_kind"].drop_nulls())
    assert {"head-not-user", "orphan-result", "unanswered-call", "request-dropped"} <= kinds
    assert audited.filter(run_id="no call")["model_calls"].to_list() == [0] * len(specs)


def test_no_runs_or_no_policies_give_no_rows():
    streams = read_inputs(SAMPLE).streams[:2]
    assert audit_served([], parse_compared(FRAMEWORKS)).height == 0
    assert audit_served(streams, []).height == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.integers(0, 1), min_size=1, max_size=3).flatmap(
        lambda kinds: st.tuples(*(mixed_runs(f"run-{n}") for n in range(len(kinds))))
    ),
    specs=st.lists(random_policies, min_size=1, max_size=2),
    frameworks=st.lists(st.sampled_from(FRAMEWORKS), min_size=1, max_size=3, unique=True),
)
def test_the_batch_audit_is_the_exact_audit_on_random_histories(runs, specs, frameworks):
    streams = [stream for stream, _ in runs]
    rows = [row for _, filed in runs for row in filed]
    same_audit(streams, [*{p.spec: p.spec for p in specs}.values(), *frameworks], rows)


def shared_runs():
    """The sample, synthetic runs with standings and the bench's runs, and their standings."""
    inputs = read_inputs(SAMPLE)
    built = [
        *synth_streams(seed=4, first=0, count=40),
        *script_streams(tool_batches(runs=20, calls=12, seed=5)),
    ]
    streams = [*inputs.streams, *(stream for stream, _ in built)]
    return streams, [*inputs.standings, *(row for _, held in built for row in held)]


def test_the_batch_audit_is_the_audit_of_each_policys_own_loop():
    streams, rows = shared_runs()
    prices = CachePrices(write=2, read=0.3)
    audited = audit_served(streams, parse_compared(SHARED), rows, prices)
    assert_frame_equal(audited, own_loop_audit(streams, SHARED, rows, prices), check_exact=True)
    assert audited["answer_placeholders"].sum() > 0 and audited["cache_invalidations"].sum() > 0
    assert audited["facts_at_answer"].sum() > 0 and audited["wire_problems"].sum() > 0


@pytest.mark.parametrize("broken", ["autogen buffer one short", "trim keeps one more"])
def test_a_broken_shared_history_rule_is_found(broken, monkeypatch):
    from contextledger.window.frameworks import autogen, langchain

    cls = autogen.AutoGenBuffered if broken.startswith("autogen") else langchain.LangChainTrim
    window_at = cls.window_at

    def broken_window(self, run, call):
        window = window_at(self, run, call)
        history = run.histories[call]
        if broken.startswith("autogen"):
            return window[1:] if len(window) > 1 else window
        return history[-len(window) - 1 :] if 0 < len(window) < len(history) else window

    monkeypatch.setattr(cls, "window_at", broken_window)
    specs = [SHARED[0] if cls is autogen.AutoGenBuffered else "langchain_trim:max_tokens=600"]
    streams, rows = shared_runs()
    with pytest.raises(AssertionError):
        assert_frame_equal(
            audit_table_exact(streams, parse_compared(specs), rows),
            own_loop_audit(streams, specs, rows),
            check_exact=True,
        )


@pytest.mark.parametrize(
    "broken",
    [
        "buffer one short",
        "head ends one later",
        "trim keeps one more",
        "no notice",
        "filter drops what a step said",
    ],
)
def test_a_broken_rule_over_the_batchs_histories_is_found(broken, monkeypatch):
    """Each rule of :mod:`~contextledger.window.framework_ranges`, put one message off,
    gives rows the window-by-window audit does not."""
    from contextledger.window import framework_ranges as ranges

    spec = {
        "buffer one short": "autogen_buffered:buffer_size=2",
        "head ends one later": "autogen_head_tail:head_size=2,tail_size=3",
        "trim keeps one more": "langchain_trim:max_tokens=600",
        "no notice": "autogen_head_tail:head_size=0,tail_size=2",
        "filter drops what a step said": "mastra_tool_filter",
    }[broken]
    add_steps = ranges.BatchHistories._add_steps

    def broken_steps(self, last, rewrite_id):
        add_steps(self, last, rewrite_id)
        self.uncalled[len(self.uncalled) - len(last) :] = [-1] * len(last)

    pieces, trimmed = ranges._pieces, ranges._trimmed

    def broken_pieces(ids, bounds):  # two ranges: the buffer's; three: head, notice, tail
        if len(bounds) == 1:  # a whole history, or the trim's tail
            return pieces(ids, bounds)
        (begin, end), *rest = bounds
        if broken == "buffer one short":
            rest = [(rest[0][0] + (rest[0][0] < rest[0][1]), rest[0][1])]
        elif broken == "head ends one later":
            end = end + (rest[0][1] > rest[0][0])
        else:
            rest = [(rest[0][0], rest[0][0]), rest[1]]
        return pieces(ids, [(begin, end), *rest])

    def broken_trim(policy, batch, rows):
        ((begin, end),) = trimmed(policy, batch, rows)
        return [(np.maximum(begin - 1, rows.base), end)]

    monkeypatch.setattr(ranges, "_trimmed", broken_trim)
    monkeypatch.setattr(ranges.BatchHistories, "_add_steps", broken_steps)
    assert ranges.ranged(parse_framework_policy(spec))
    monkeypatch.setattr(ranges, "_pieces", broken_pieces)
    streams, rows = shared_runs()
    with pytest.raises(AssertionError):
        same_audit(streams, [spec], rows)


#: Specs of every policy laid out as ranges of the batch's histories, their keys drawn.
ranged_specs = st.one_of(
    st.integers(1, 6).map(lambda n: f"autogen_buffered:buffer_size={n}"),
    st.tuples(st.integers(0, 4), st.integers(1, 4)).map(
        lambda ht: f"autogen_head_tail:head_size={ht[0]},tail_size={ht[1]}"
    ),
    st.tuples(
        st.integers(0, 400), st.sampled_from(["", ",start_on=human", ",start_on=ai|tool"])
    ).map(lambda ms: f"langchain_trim:max_tokens={ms[0]}{ms[1]}"),
    st.tuples(st.integers(1, 300), st.integers(0, 3)).map(
        lambda tk: f"anthropic_clear:trigger={tk[0]},keep={tk[1]}"
    ),
    st.tuples(
        st.sampled_from(["{}", "tokens:{}", "messages:{}", "tokens:{}|messages:4"]),
        st.integers(1, 300),
        st.integers(0, 3),
    ).map(lambda tk: f"langchain_clear:trigger={tk[0].format(tk[1])},keep=messages:{tk[2]}"),
    st.just("mastra_tool_filter"),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.integers(0, 1), min_size=1, max_size=4).flatmap(
        lambda kinds: st.tuples(*(mixed_runs(f"run-{n}") for n in range(len(kinds))))
    ),
    specs=st.lists(ranged_specs, min_size=1, max_size=4, unique=True),
)
def test_the_ranges_are_the_exact_audit_on_random_histories(runs, specs):
    from contextledger.window.framework_ranges import ranged

    assert all(ranged(parse_framework_policy(spec)) for spec in specs)
    streams = [stream for stream, _ in runs]
    same_audit(streams, specs, [row for _, filed in runs for row in filed])


def test_runs_whose_calls_are_not_plain_are_replayed_under_mastras_filter():
    """A call id made twice, or a call with no name: Mastra's filter reads the history
    there (:meth:`BatchHistories._add_steps`), so those runs are replayed, the others
    laid out as ranges, in one batch."""
    from contextledger.window.framework_ranges import BatchHistories

    said = [Said("user", "go")]
    steps = [
        [Batch((Result(f"tool_{n}", 40 + n), Result("other", 30)), f"step {n}")] for n in range(6)
    ]
    plain = build_stream("plain", said, steps)

    def renamed(stream, rename):
        def changed(message):
            calls = tuple(ToolCall(*rename(call.id, call.name)) for call in message.tool_calls)
            call_id = rename(message.tool_call_id, None)[0] if message.tool_call_id else None
            return replace(message, tool_calls=calls, tool_call_id=call_id)

        return replace(
            stream,
            run_id=f"{stream.run_id}, renamed",
            messages=[changed(m) for m in stream.messages],
        )

    twice = renamed(plain, lambda i, name: ("c2.0.0" if i == "c4.0.0" else i, name))
    unnamed = renamed(plain, lambda i, name: (i, "" if i == "c3.0.1" else name))
    runs = [plain, twice, unnamed]
    batch = BatchHistories()
    for stream in runs:
        run = run_history(stream, tokens_at_rate(None))
        batch.add_run(run, lambda m: 0, lambda *a, **k: 0, [], [], filtered=True)
    assert batch.plain == [True, False, False]
    audited = same_audit(runs, ["mastra_tool_filter", "autogen_buffered:buffer_size=3"])
    assert audited["answer_placeholders"].sum() > 0


def test_the_batch_audit_is_the_exact_audit_on_streams_read_back_from_an_archive(tmp_path):
    """An archive keeps a message's length, not always its text (``stored_chars``): a
    copy that keeps the content keeps that length (Mastra's filter), one that writes new
    content measures it (the clears)."""
    from contextledger.archive import Archive
    from contextledger.archive.windows import stream_batches
    from contextledger.jobs.synth import synth_archive

    root = tmp_path / "archive"
    synth_archive(root, 120, seed=6, batch_runs=120, workers=1)
    streams, standings = next(stream_batches(Archive.open(root)))
    assert any(m.stored_chars is not None for s in streams for m in s.messages)
    audited = same_audit(streams, FRAMEWORKS, standings)
    assert audited["answer_placeholders"].sum() > 0
