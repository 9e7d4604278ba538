"""The audit of agentfootprint's policies read from the kernel is the per-window audit's.

Every :data:`AUDIT_SCHEMA` column, compared exactly (floats bit for bit) against
``audit_table_exact`` on the sample, the OpenTelemetry traces, part of the corpus and
synthetic runs, with and without standings; and each check first asserts that the
kernel audited the runs, so that an equality is not two exact audits agreeing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from contextledger.jobs.compare import parse_compared
from contextledger.jobs.synth_model import synth_streams
from contextledger.jobs.whatif import read_inputs
from contextledger.read.messages import RunMessages
from contextledger.report import DEFAULT_POLICIES
from contextledger.window.audit import audit_table_exact
from contextledger.window.audit_arrays import KernelAudit, audit_table
from contextledger.window.cache_costs import CachePrices
from contextledger.window.policies import Policy
from contextledger.window.standings import timelines
from contextledger.window.synthetic import Batch, Result, Said, build_stream
from contextledger.window.turn_arrays import take_runs, turn_arrays
from contextledger.window.whatif import kernel_groups, parse_policies

from .conftest import REPO, SAMPLE, corpus_dir, require_corpus
from .test_whatif_kernel import labelled_rows, mixed_runs
from .test_whatif_properties import policies as random_policies

#: The report's five, a one-turn window, a small budget, and fact-pin ceilings.
SPECS = [
    *DEFAULT_POLICIES,
    "sliding:keep=1",
    "token_budget:threshold=100,keep=1,ledger_facts=3",
    "sliding:keep=4,ledger_facts=2",
    "sliding:keep=2,last_tool_results=0,ledger_facts=6",
]


def kernel_rows(streams, specs, standings_rows=()):
    """How many (run, policy) rows the kernel audited."""
    parsed = parse_policies(specs)
    arrays = turn_arrays(streams, timelines(standings_rows))
    audit = KernelAudit(streams, arrays, CachePrices())
    for group in kernel_groups(arrays, audit.runs):
        audit.kernel(group, take_runs(arrays, group), [policy for _, policy in parsed])
    audit.table(parsed, parsed, standings_rows)
    return int(audit.tallied.sum())


def same_audit(streams, specs=SPECS, standings_rows=(), prices=None):
    """The two audits' rows, held equal; returns them."""
    parsed = parse_compared(specs)
    fast = audit_table(streams, parsed, standings_rows, prices)
    exact = audit_table_exact(streams, parsed, standings_rows, prices)
    assert_frame_equal(fast, exact, check_exact=True)
    return fast


@pytest.mark.parametrize("armed", [False, True], ids=["recorded standings", "every result"])
def test_the_kernel_audit_is_the_exact_audit_on_the_sample(armed):
    inputs = read_inputs(SAMPLE)
    rows = [*inputs.standings, *(labelled_rows(inputs.streams) if armed else [])]
    assert kernel_rows(inputs.streams, SPECS, rows) == 70  # (7 runs were recorded windowed)
    audited = same_audit(inputs.streams, standings_rows=rows)
    assert audited["cache_invalidations"].sum() > 0
    assert (audited["facts_at_answer"].sum() > 0) == armed


def test_the_kernel_audit_is_the_exact_audit_on_traces_with_wire_problems():
    inputs = read_inputs(REPO / "data" / "otel")
    assert kernel_rows(inputs.streams, SPECS) >= 500
    audited = same_audit(inputs.streams, standings_rows=labelled_rows(inputs.streams))
    assert audited["wire_problems"].sum() > 0
    assert audited["first_problem_message"].drop_nulls().len() > 0


def test_the_kernel_audit_is_the_exact_audit_on_the_corpus():
    require_corpus()
    streams = read_inputs(sorted((corpus_dir() / "runs").iterdir())[::12]).streams
    specs = SPECS[1:6]
    assert kernel_rows(streams, specs) >= 4 * len(streams)
    same_audit(streams, specs)
    same_audit(streams, specs[1:], labelled_rows(streams, seed=11))


def test_the_kernel_audit_is_the_exact_audit_on_synthetic_runs():
    built = list(synth_streams(seed=4, first=0, count=100))
    streams = [stream for stream, _ in built]
    rows = [row for _, held in built for row in held]
    assert kernel_rows(streams, SPECS, rows) == len(streams) * len(SPECS)
    audited = same_audit(streams, standings_rows=rows, prices=CachePrices(write=2, read=0.3))
    assert audited["input_tokens_from"].n_unique() >= 2


def wire_problem_runs() -> list[RunMessages]:
    """Runs whose windows break each wire rule: a call never answered, a head that is
    not the user's, a request that changes, a run with no call."""
    said = [Said("system", "rules"), Said("user", "go")]
    steps = [
        [Batch((Result("look", 900), Result("probe", 40)))],
        [Batch((Result("look", None),))],  # never answered
        [Said("assistant", "x")],
        [Batch((Result("probe", 2),))],
        [Batch((Result("fetch", 700),))],
        [],
    ]
    return [
        build_stream("envelope", said, steps),
        build_stream("bare", [Said("assistant", "hi"), Said("user", "go")], steps),
        build_stream("head", [Said("assistant", "hi"), *said], steps),
        build_stream(
            "changes", said, [*steps[:2], [Said("user", "then")], *steps[2:]], request="?"
        ),
        build_stream("no call", [Said("user", "go")], []),
    ]


def test_every_wire_problem_is_found_turn_by_turn_and_named_first_as_the_replay_names_it():
    runs = wire_problem_runs()
    assert sorted(turn_arrays(runs).fallback) == [3]  # audited exactly, in its place
    specs = ["none", "sliding:keep=1", "sliding:keep=2,ledger_facts=1", "token_budget:threshold=50"]
    assert kernel_rows(runs, specs) == 4 * len(specs)
    audited = same_audit(runs, specs)
    kinds = set(audited["first_problem_kind"].drop_nulls())
    assert {"head-not-user", "unanswered-call"} <= kinds
    assert audited["run_id"].unique(maintain_order=True).to_list() == [r.run_id for r in runs]


def test_a_new_notice_that_may_read_as_the_old_one_keeps_the_run_on_the_exact_audit():
    steps = [[Batch((Result("look", 300),))] for _ in range(8)]
    run = build_stream("one iteration", [Said("user", "go")], steps)
    run = replace(run, calls=[replace(call, iteration=1) for call in run.calls])
    spec = "token_budget:threshold=100,keep=1"  # writes "3 earlier message(s) ... iteration 1"
    assert kernel_rows([run], [spec]) == 0  # twice: the same text, so the cache reads it
    assert same_audit([run], [spec])["cached_tokens"].to_list() == [442]


def test_other_frameworks_policies_keep_their_place_among_agentfootprints():
    inputs = read_inputs(SAMPLE)
    specs = ["mastra_tool_filter", "sliding:keep=2", "langchain_trim:max_tokens=600", "none"]
    audited = same_audit(inputs.streams, specs)
    assert audited["policy"].to_list()[:4] == specs
    assert all(isinstance(p, Policy) for _, p in parse_compared(specs[1::2]))


def test_the_report_replays_and_audits_its_policies_in_one_kernel_pass(monkeypatch):
    import contextledger.window.audit_arrays as audit_arrays
    import contextledger.window.whatif as whatif

    inputs = read_inputs(SAMPLE)
    rows = [*inputs.standings, *labelled_rows(inputs.streams)]
    policies = parse_policies(DEFAULT_POLICIES)
    audited = [*policies, *parse_compared(["mastra_tool_filter", "autogen_buffered:buffer_size=8"])]
    passes = []
    for module in (audit_arrays, whatif):
        counted = module.advance
        monkeypatch.setattr(
            module, "advance", lambda *a, counted=counted: passes.append(1) or counted(*a)
        )
    per_run, audit = audit_arrays.whatif_and_audit(inputs.streams, policies, audited, rows)
    assert len(passes) == 1
    monkeypatch.undo()
    assert_frame_equal(
        per_run, whatif.whatif_table(inputs.streams, policies, rows), check_exact=True
    )
    assert_frame_equal(audit, audit_table_exact(inputs.streams, audited, rows), check_exact=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.integers(0, 1), min_size=1, max_size=3).flatmap(
        lambda kinds: st.tuples(*(mixed_runs(f"run-{n}") for n in range(len(kinds))))
    ),
    specs=st.lists(random_policies, min_size=1, max_size=3),
)
def test_the_kernel_audit_is_the_exact_audit_on_random_histories(runs, specs):
    streams = [stream for stream, _ in runs]
    rows = [row for _, filed in runs for row in filed]
    same_audit(streams, [*{p.spec: p.spec for p in specs}.values(), "none"], rows)


def test_runs_left_to_the_window_by_window_audit_go_to_it_together_not_one_by_one(
    monkeypatch,
):
    import contextledger.window.audit_arrays as audit_arrays

    inputs = read_inputs(SAMPLE)
    calls = []
    served = audit_arrays.audit_served
    monkeypatch.setattr(
        audit_arrays, "audit_served", lambda *a: calls.append(len(a[0])) or served(*a)
    )
    specs = ["sliding:keep=3", "mastra_tool_filter", "autogen_buffered:buffer_size=8"]
    audit_table(inputs.streams, parse_compared(specs), inputs.standings)
    # one call per set of policies left: the 7 runs recorded with a window also need
    # sliding:keep=3 exactly, the other 7 only the frameworks' two
    assert calls == [7, 7]
