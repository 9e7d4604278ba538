"""The policy audit and ``contextledger compare``: wire validity at every model call,
facts at the answer, input tokens, prefix-cache invalidations and their cost."""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE
from contextledger.jobs.compare import compare
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs, whatif
from contextledger.read.messages import Message, ModelCall, RunMessages, ToolCall
from contextledger.window.audit import (
    AUDIT_SCHEMA,
    WIRE_COLUMNS,
    CachePrices,
    audit_run,
    call_costs,
    priced,
    served_windows,
    wire_violations,
)

from .conftest import SAMPLE, require_corpus

STANDINGS = SAMPLE.parent / "sample-standings.csv"
LOOP = SAMPLE / "s0003-loop.json.gz"
#: agentfootprint's own policies, gentle to brutal: each refuses to split a call from
#: its result, to drop the current request, or to open a window with anything but a user.
OWN_POLICIES = (
    "none",
    "sliding:keep=6",
    "sliding:keep=3",
    "sliding:keep=1",
    "sliding:keep=1,last_tool_results=0,ledger_facts=0",
    "token_budget:threshold=500",
    "token_budget:threshold=100,keep=1,last_tool_results=0",
)


# ── wire validity ──────────────────────────────────────────────────


def test_agentfootprints_own_policies_never_break_the_wire_on_the_corpus():
    corpus = require_corpus()
    found = compare(corpus / "runs", OWN_POLICIES, standings=STANDINGS)
    assert found.runs == 301 and not found.problems
    assert found.per_run.height == 301 * len(OWN_POLICIES)
    broken = found.per_run.filter(pl.col("wire_problems") > 0)
    assert broken.height == 0, broken.select("run_id", "policy", "first_problem_message").rows()
    assert found.table["wire_problems"].to_list() == [0] * len(OWN_POLICIES)
    assert found.table["first_offending_call"].to_list() == [None] * len(OWN_POLICIES)
    # The audit reads what the what-if reads: tokens, facts and results at the answer agree.
    per_run, _ = whatif(corpus / "runs", OWN_POLICIES, standings=STANDINGS)
    joined = found.per_run.join(per_run, on=["run_id", "policy"], suffix="_whatif")
    for ours, theirs in (
        ("input_tokens", "input_tokens_whatif"),
        ("facts_at_answer", "answer_facts_verbatim"),
        ("facts_declared", "facts_declared_whatif"),
        ("answer_results_verbatim", "answer_results_verbatim_whatif"),
    ):
        assert_frame_equal(
            joined.select(pl.col(ours).alias("n")),
            joined.select(pl.col(theirs).cast(pl.Int64).alias("n")),
            check_exact=True,
        )
    # The corpus's cache picture (pinned): no window, no invalidation; the tighter the
    # window, the more often it breaks the previous call's prefix.
    table = found.table.select("policy", "cache_invalidations", "input_tokens").rows()
    assert table[:5] == [
        ("none", 0, 1_935_769),
        ("sliding:keep=6", 704, 1_440_234),
        ("sliding:keep=3", 1117, 1_091_541),
        ("sliding:keep=1", 1417, 807_404),
        ("sliding:keep=1,last_tool_results=0,ledger_facts=0", 1676, 609_984),
    ]


#: The corpus under every compared policy (``compare``'s default: agentfootprint's five,
#: one spec per other framework's policy): wire problems per kind, runs rejected, facts
#: at the answer / filed, placeholders, previews, input tokens, cache invalidations and
#: the cost without / with a cache (rounded to the cent), as the audit computes them.
#: The corpus under ``compare``'s default policies (``COMPARE_POLICIES``, in order:
#: agentfootprint's five, then one spec per other framework's): wire problems per kind
#: (head-not-user, orphan-result, unanswered-call, request-dropped), runs rejected,
#: facts at the answer, facts filed, placeholders, previews, input tokens, cache
#: invalidations, cost without / with a cache (rounded to the cent).
# fmt: off
CORPUS_COUNTS = [
    (0, 0, 0, 0, 0, 6, 6, 0, 0, 1935769, 0, 1935769.0, 594336.95),
    (0, 0, 0, 0, 0, 2, 6, 0, 0, 1440007, 708, 1440007.0, 1234515.8),
    (0, 0, 0, 0, 0, 6, 6, 0, 0, 1440234, 704, 1440234.0, 1233754.2),
    (0, 0, 0, 0, 0, 5, 6, 0, 0, 1091541, 1117, 1091541.0, 1079110.1),
    (0, 0, 0, 0, 0, 6, 6, 0, 0, 1461070, 623, 1461070.0, 1224073.3),
    (0, 0, 0, 0, 0, 6, 6, 1603, 0, 1390507, 621, 1390507.0, 1151630.3),
    (1042, 634, 0, 981, 188, 6, 6, 0, 0, 870289, 878, 870289.0, 804561.05),
    (0, 0, 0, 981, 169, 0, 6, 0, 0, 346139, 180, 346139.0, 217814.65),
    (0, 0, 0, 0, 0, 6, 6, 1603, 0, 1370415, 621, 1370415.0, 1159430.6),
    (0, 0, 0, 602, 104, 6, 6, 0, 0, 1195074, 328, 1195074.0, 768025.75),
    (0, 0, 0, 0, 0, 6, 6, 0, 180, 1922199, 8, 1922199.0, 619500.1),
    (1239, 0, 0, 1151, 213, 1, 6, 0, 0, 1041297, 1218, 1041297.0, 1146504.65),
    (0, 0, 0, 24, 13, 1, 6, 0, 0, 1096526, 1024, 1096526.0, 1057144.5),
    (0, 0, 0, 0, 0, 0, 6, 0, 0, 439828, 1668, 439828.0, 448080.15),
    (893, 117, 4824, 839, 200, 5, 6, 0, 0, 826815, 1038, 826815.0, 829598.45),
]
# fmt: on
CORPUS_COLUMNS = [
    *WIRE_COLUMNS.values(),
    "runs_rejected",
    "facts_at_answer",
    "facts_declared",
    "answer_placeholders",
    "answer_previews",
    "input_tokens",
    "cache_invalidations",
    "cost_without_cache",
    "cost_with_cache",
]


@pytest.fixture(scope="module")
def corpus_comparison():
    """``compare`` over the corpus under its default policies, with the tests' standings."""
    from contextledger.report import COMPARE_POLICIES

    return compare(require_corpus() / "runs", COMPARE_POLICIES, standings=STANDINGS)


def test_every_policy_of_every_family_runs_on_every_corpus_run_and_its_counts_are_pinned(
    corpus_comparison,
):
    from contextledger.report import COMPARE_POLICIES
    from contextledger.window.frameworks import FRAMEWORK_POLICIES, framework_name

    found = corpus_comparison
    assert found.runs == 301 and not found.problems
    # Every family: agentfootprint's three and each of the nine other policies.
    names = {framework_name(spec) or spec.partition(":")[0] for spec in COMPARE_POLICIES}
    assert names == {"none", "sliding", "token_budget", *FRAMEWORK_POLICIES}
    pairs = found.per_run.select("run_id", "policy").unique()
    assert found.per_run.height == pairs.height == 301 * len(COMPARE_POLICIES)
    # Each (run, policy) judged every model call the run made.
    calls = found.per_run.group_by("run_id").agg(pl.col("model_calls").n_unique())
    assert calls["model_calls"].to_list() == [1] * 301
    kinds = found.per_run.group_by("policy", maintain_order=True).agg(
        pl.col(list(WIRE_COLUMNS.values())).sum()
    )
    table = found.table.join(kinds, on="policy", maintain_order="left")
    expected = pl.DataFrame(CORPUS_COUNTS, schema=CORPUS_COLUMNS, orient="row")
    assert_frame_equal(
        table.select(CORPUS_COLUMNS).with_columns(pl.col("^cost_.*$").round(2)),
        expected.with_columns(pl.col("^cost_.*$").cast(pl.Float64)),
        check_exact=True,
    )
    assert table["policy"].to_list() == list(COMPARE_POLICIES)
    # The wire total is the sum of its kinds; agentfootprint's own policies are at zero.
    wire = table.select(pl.sum_horizontal(list(WIRE_COLUMNS.values())) - pl.col("wire_problems"))
    assert wire.to_series().to_list() == [0] * len(COMPARE_POLICIES)
    own = table.filter(pl.col("policy").is_in(["none", "sliding:keep=6", "sliding:keep=3"]))
    assert own["wire_problems"].to_list() == [0, 0, 0]


def test_each_first_offending_call_on_the_corpus_opens_at_the_message_it_names(
    corpus_comparison,
):
    import re

    from contextledger.window.audit import current_requests, describe_message

    streams = {s.run_id: s for s in read_inputs(require_corpus() / "runs").streams}
    named = corpus_comparison.table.filter(pl.col("first_offending_call").is_not_null())
    assert named.height == 6  # both LangChain trims, its summary, AutoGen's two, Mastra's limit
    for policy, first in named.select("policy", "first_offending_call").rows():
        found = re.fullmatch(r"(\S+) call (\d+): ([a-z-]+): (.*), stream message (\d+)", first)
        assert found, first
        run_id, call, kind, what, index = found.groups()
        stream = streams[run_id]
        message = stream.messages[int(index)]
        assert message.index == int(index)
        assert describe_message(message) == f"{what}, stream message {index}"
        window = served_windows(stream, policy)[int(call) - 1]
        kinds = [v.kind for v in wire_violations(window, current_requests(stream)[int(call) - 1])]
        assert kind == kinds[0], (policy, kinds)
        # The earlier calls' windows were all accepted.
        earlier = zip(served_windows(stream, policy), current_requests(stream), strict=True)
        assert not any(wire_violations(w, r) for w, r in list(earlier)[: int(call) - 1])


def test_wire_problems_found_on_the_corpus_are_the_frameworks_documented_failures():
    """Checked by hand, then pinned: LangChain's trimmer without ``start_on`` cuts a batch
    of two calls from its second result (its #33245); AutoGen's buffer keeps the last
    ``buffer_size`` messages, so the request falls out and the window opens on a call."""
    corpus = require_corpus()
    loop = read_inputs(corpus / "runs" / "s0003-loop.json.gz").streams[0]
    window = served_windows(loop, "langchain_trim:max_tokens=600")[7]  # call 8
    assert [(m.index, m.role) for m in window[:2]] == [(3, "tool"), (4, "assistant")]
    assert [c.id for c in loop.messages[1].tool_calls] == ["t1c1-8", "t1c1-9"]
    assert window[0].tool_call_id == "t1c1-9" and loop.messages[2] not in window
    orphan = [v for v in wire_violations(window) if v.kind == "orphan-result"]
    assert [(v.message.tool_call_id, v.position) for v in orphan] == [("t1c1-9", 0)]
    bench = read_inputs(corpus / "runs" / "s0001-fact-bench.json.gz").streams[0]
    buffered = served_windows(bench, "autogen_buffered:buffer_size=8")[4]  # call 5
    assert len(buffered) == 8 and buffered[0].role == "assistant"
    assert [v.kind for v in wire_violations(buffered, bench.messages[0])] == [
        "head-not-user",
        "request-dropped",
    ]
    # Before call 5 the run holds the request and four call/result pairs: the last eight.
    assert bench.messages[0].role == "user" and [m.index for m in buffered] == list(range(1, 9))


def loop_windows() -> tuple[RunMessages, list[list[Message]]]:
    """s0003-loop and the windows ``none`` serves it (every message, in order)."""
    stream = read_inputs(LOOP).streams[0]
    return stream, [list(window) for window in served_windows(stream, "none")]


def without(window: list[Message], *indices: int) -> list[Message]:
    return [m for m in window if m.index not in indices]


def test_a_hand_built_window_per_wire_rule_is_caught_at_its_first_offending_call():
    stream, none = loop_windows()
    assert [m.index for m in none[3]] == list(range(8))  # call 4: request, three batches
    summary = Message("user", "[summary of the run so far]", edit="summary")
    cases = {
        # the assistant calling t1c1-8 and t1c1-9 is gone, both results stay
        "orphan-result": (3, without(none[2], 1), "tool result t1c1-8 (send_email), stream "),
        # t1c2-10's result is gone, its call stays
        "unanswered-call": (4, without(none[3], 5), "assistant calling t1c2-10 (get_user)"),
        # the window opens with an assistant turn (the request moved behind it)
        "head-not-user": (3, [*none[2][1:], none[2][0]], "assistant calling t1c1-8 (send_email)"),
        # the request is replaced by a summary: the window is well formed, the ask is gone
        "request-dropped": (5, [summary, *none[4][1:]], "user message 'Please investigate: "),
    }
    for kind, (call, window, named) in cases.items():
        served = [list(w) for w in none]
        served[call - 1] = window
        row = audit_run(stream, "hand", served)
        assert row["first_problem_call"] == call, kind
        assert row["first_problem_kind"] == kind
        assert row["first_problem_message"].startswith(named), row["first_problem_message"]
        assert row["calls_rejected"] == 1
        others = {k: c for k, c in WIRE_COLUMNS.items() if k != kind}
        assert all(row[column] == 0 for column in others.values()), (kind, row)
        assert (
            row[WIRE_COLUMNS[kind]] == row["wire_problems"] == (2 if kind == "orphan-result" else 1)
        )
    assert audit_run(stream, "none", none)["wire_problems"] == 0


def test_a_problem_counts_at_every_call_that_carries_it_and_the_first_is_named():
    stream, none = loop_windows()
    served = [without(window, 5) if 5 in {m.index for m in window} else window for window in none]
    row = audit_run(stream, "drops t1c2-10's result", served)
    carrying = sum(5 in {m.index for m in window} for window in none)  # calls 3..13
    assert carrying == 11
    assert row["wire_unanswered_call"] == row["calls_rejected"] == carrying
    assert row["first_problem_call"] == 3
    assert row["first_problem_message"] == "assistant calling t1c2-10 (get_user), stream message 4"


def test_wire_rules_on_single_windows():
    ask = Message("user", "go", index=0)
    system = Message("system", "be brief")
    call = Message("assistant", "", tool_calls=(ToolCall("c1", "probe"),), index=1)
    result = Message("tool", "r", tool_call_id="c1", index=2)
    assert wire_violations([system, ask, call, result], ask) == []  # system first is fine
    assert [v.kind for v in wire_violations([result, ask], ask)] == [
        "head-not-user",
        "orphan-result",
    ]
    assert [v.kind for v in wire_violations([ask, call], ask)] == ["unanswered-call"]
    dropped = wire_violations([Message("user", "go")], ask)  # same text, another message
    assert [(v.kind, v.message, v.position) for v in dropped] == [("request-dropped", ask, -1)]


# ── what reached the answer ────────────────────────────────────────


def test_results_rewritten_in_place_are_counted_by_edit_and_are_not_verbatim_facts():
    stream = read_inputs(SAMPLE / "s0001-fact-bench.json.gz").streams[0]
    from contextledger.tables.standings import load_standings
    from contextledger.window.standings import timelines

    timeline = timelines(load_standings(STANDINGS).to_pylist())[stream.run_id]
    served = [list(w) for w in served_windows(stream, "none")]
    answer = served[-1]
    facts = [p for p, m in enumerate(answer) if timeline.final().get(m.tool_call_id) == "fact"]
    assert len(facts) == 6
    edits = {facts[0]: "placeholder", facts[1]: "preview", facts[2]: "placeholder"}
    for position, edit in edits.items():
        answer[position] = replace(answer[position], content="[cleared]", edit=edit)
    row = audit_run(stream, "edited", served, timeline)
    assert (row["facts_declared"], row["facts_at_answer"]) == (6, 3)
    assert (row["answer_placeholders"], row["answer_previews"]) == (2, 1)
    assert row["answer_results_verbatim"] == 20 - 3
    assert row["cache_invalidations"] == 1  # the edited answer window breaks the prefix
    assert row["wire_problems"] == 0  # a placeholder still answers its call


# ── the cache and its cost ─────────────────────────────────────────


def hand_stream() -> tuple[RunMessages, list[Message]]:
    """Four 40-char messages; calls 1 and 2 reported 10 and 30 tokens for 40 and 120
    chars (0.25 tokens per char), call 3 reported none."""
    m = [
        Message("user", "u" * 40, index=0, first_call=1),
        Message("assistant", "a" * 40, tool_calls=(ToolCall("c1", "t"),), index=1, first_call=2),
        Message("tool", "t" * 40, tool_call_id="c1", index=2, first_call=2),
        Message("user", "v" * 40, index=3, first_call=3),
    ]
    served = ((0,), (0, 1, 2), (0, 1, 2, 3))
    calls = [
        ModelCall(n + 1, n + 1, n, f"call-llm#{n}", None, tokens, window, window)
        for n, (tokens, window) in enumerate(zip((10, 30, 0), served, strict=True))
    ]
    return RunMessages("hand", "u" * 40, m, calls, served[-1], []), m


def test_cache_invalidations_on_a_hand_built_sequence():
    stream, (a, b, c, d) = hand_stream()
    edited = replace(c, content="[cleared]", edit="placeholder")
    same_edit = replace(c, content="[cleared]", edit="placeholder")  # another object, same bytes
    sequence = [
        [a],
        [a, b, c],  # grows: the previous window is its prefix
        [a, b, c, d],
        [a, d],  # b and c dropped: invalidated
        [a, b, edited],  # c back, rewritten: invalidated (an edit changes the bytes)
        [a, b, same_edit],  # the same bytes in another object: the prefix holds
        [a, b, same_edit],  # the same window again
        [a],  # shrinks: the previous window is no prefix of it
    ]
    stream.calls = [replace(stream.calls[0], ordinal=n + 1) for n in range(len(sequence))]
    costs = call_costs(stream, sequence, 0.25)
    assert [c.invalidated for c in costs] == [False, False, False, True, True, False, False, True]
    # 0.25 tokens per char of the shared prefix: "[cleared]" is 9 chars
    assert [c.cached for c in costs] == [0, 10, 30, 10, 10, 22, 22, 10]


def test_the_cost_arithmetic_is_exact_on_a_small_case():
    stream, (a, b, c, d) = hand_stream()
    assert stream.tokens_per_char() == 0.25
    prices = CachePrices(write=1.25, read=0.5)
    # As recorded: 10 and 30 tokens; call 3 estimated at 160 chars * 0.25 = 40.
    row = audit_run(stream, "none", [[a], [a, b, c], [a, b, c, d]], prices=prices)
    assert (row["input_tokens"], row["input_tokens_from"]) == (80, "recorded+estimated")
    # cached: 0; a = 10; a, b, c = 30. Written: 10, 20, 10.
    assert row["cached_tokens"] == 40 and row["cache_invalidations"] == 0
    assert row["cost_without_cache"] == 80.0
    assert row["cost_with_cache"] == 10 * 1.25 + (10 * 0.5 + 20 * 1.25) + (30 * 0.5 + 10 * 1.25)
    # Call 3 drops b and c: 80 chars = 20 tokens, of which a's 10 are read.
    row = audit_run(stream, "drop", [[a], [a, b, c], [a, d]], prices=prices)
    assert (row["input_tokens"], row["cached_tokens"], row["cache_invalidations"]) == (60, 20, 1)
    assert row["cost_with_cache"] == 12.5 + 30.0 + (10 * 0.5 + 10 * 1.25)
    assert priced(call_costs(stream, [[a], [a, b, c], [a, d]], 0.25), CachePrices()) == (
        60.0,
        10 * 1.25 + (10 * 0.1 + 20 * 1.25) + (10 * 0.1 + 10 * 1.25),
    )
    # No call reported tokens: nothing to estimate from, so no tokens and no cost.
    silent = replace(stream, calls=[replace(call, input_tokens=0) for call in stream.calls])
    row = audit_run(silent, "none", [[a], [a, b, c], [a, b, c, d]])
    assert row["input_tokens"] is None and row["cost_with_cache"] is None
    assert row["input_tokens_from"] is None and row["cache_invalidations"] == 0


def test_csv_prints_each_cost_as_its_exact_decimal_on_the_sample():
    """With the default prices (1.25, 0.1) every cost is a whole number of twentieths:
    the CSV shows it so (``3541.7``), never a float sum's ``3541.699999999999``."""
    result = invoke(SAMPLE, "--policy", "none", "--policy", "sliding:keep=6", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    costs = [row["cost_with_cache"] for row in rows if row["cost_with_cache"]]
    assert (len(costs), len(rows)) == (24, 28)  # 2 runs have no token counts
    assert [cost for cost in costs if (Fraction(cost) * 20).denominator != 1] == []
    assert "3541.7" in costs  # s0001-fact-bench under sliding:keep=6


def test_cache_prices_must_be_prices():
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cache write price"):
            CachePrices(write=bad)


# ── compare over a source ──────────────────────────────────────────


def test_compare_over_an_archive_gives_the_rows_it_gives_over_the_snapshots(tmp_path):
    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1)
    policies = ["none", "sliding:keep=3"]
    snapshots = compare(SAMPLE, policies, standings=STANDINGS)
    archived = compare(str(archive), policies, standings=STANDINGS)
    assert archived.runs == snapshots.runs == 14 and not archived.problems
    assert_frame_equal(archived.per_run, snapshots.per_run, check_exact=True)
    assert_frame_equal(archived.table, snapshots.table, check_exact=True)
    selected = compare(f"{archive}?run_id=s0001-fact-bench", policies, standings=STANDINGS)
    assert selected.per_run["run_id"].unique().to_list() == ["s0001-fact-bench"]


def test_compare_spread_over_worker_processes_gives_the_rows_of_one(tmp_path, monkeypatch):
    """From POOL_FROM_RUNS runs the batches (snapshots' streams, an archive's window
    tables) are audited in workers: none here, and the rows, run ids and notes are those
    of one process auditing them all, in order."""
    import io

    import contextledger.jobs.compare as compare_job
    from contextledger.progress import Progress

    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1, batch_runs=5)
    policies = ["none", "sliding:keep=3", "mastra_tool_filter", "autogen_buffered:buffer_size=4"]
    alone = compare(SAMPLE, policies, standings=STANDINGS, workers=1)
    archived_alone = compare(str(archive), policies, standings=STANDINGS, workers=1)
    monkeypatch.setattr(compare_job, "POOL_FROM_RUNS", 1)
    monkeypatch.setattr(compare_job, "REPLAY_BATCH_RUNS", 4)
    monkeypatch.setattr(compare_job, "audit_table", lambda *_: pytest.fail("audited here"))
    meter = Progress(io.StringIO(), command="compare")
    for found, expected in [
        (compare(SAMPLE, policies, standings=STANDINGS, workers=2, meter=meter), alone),
        (compare(str(archive), policies, standings=STANDINGS, workers=2), archived_alone),
    ]:
        assert_frame_equal(found.per_run, expected.per_run, check_exact=True)
        assert_frame_equal(found.table, expected.table, check_exact=True)
        assert (found.run_ids, found.notes) == (expected.run_ids, expected.notes)
    assert_frame_equal(archived_alone.per_run, alone.per_run, check_exact=True)
    assert "compare: audited 14 runs" in meter.stream.getvalue()


def test_compare_over_the_corpus_archive_gives_every_row_it_gives_over_the_snapshots(tmp_path):
    # The archive once kept no text of an assistant's message, so a problem at one was
    # named without its preview over the archive (s0207-conv-t3, s0210-conv-t2 and
    # s0214-conv-t3 under langchain_trim). openai_trim reads the tool outputs' text,
    # which an archive does not keep: over one it trimmed nothing, silently (39 rows
    # differed); it is now left out over an archive, and says so.
    from contextledger.report import COMPARE_POLICIES

    corpus = require_corpus()
    archive = tmp_path / "archive"
    ingest([corpus / "runs"], archive, workers=2)
    snapshots = compare(corpus / "runs", COMPARE_POLICIES)
    archived = compare(str(archive), COMPARE_POLICIES)
    [trim] = [spec for spec in COMPARE_POLICIES if spec.startswith("openai_trim")]
    assert archived.policies_left_out == [
        f"{trim}: not replayed over an archive: it reads tool outputs' text, which an "
        "archive does not keep (only their length); compare the snapshots"
    ]
    assert archived.runs == snapshots.runs == 301 and not archived.problems
    kept = pl.col("policy") != trim
    assert_frame_equal(archived.per_run, snapshots.per_run.filter(kept), check_exact=True)
    assert_frame_equal(archived.table, snapshots.table.filter(kept), check_exact=True)
    named = archived.per_run.filter(
        pl.col("run_id").is_in(["s0207-conv-t3", "s0210-conv-t2", "s0214-conv-t3"])
        & (pl.col("policy") == "langchain_trim:max_tokens=600")
    )["first_problem_message"]
    assert named.to_list() == [
        "assistant message 'Answer 1 for s0207-conv: latency shard …', stream message 15",
        "assistant message 'Answer 1 for s0210-conv: yield ember ka…', stream message 3",
        "assistant message 'Answer 1 for s0214-conv: sigma pivot de…', stream message 3",
    ]


# ── the command ────────────────────────────────────────────────────


def invoke(*args: object) -> object:
    return CliRunner().invoke(main, ["compare", *map(str, args)])


def test_compare_prints_the_side_by_side_table_with_the_reports_and_the_frameworks_policies():
    from contextledger.jobs.compare import FRAMEWORK_DEFAULTS
    from contextledger.report import COMPARE_POLICIES, DEFAULT_POLICIES

    assert (*DEFAULT_POLICIES, *FRAMEWORK_DEFAULTS) == COMPARE_POLICIES
    result = invoke(SAMPLE, "--standings", STANDINGS)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [line.split("┆")[0].strip("│ ") for line in lines[3:-4]]
    assert rows == list(COMPARE_POLICIES)  # one line per policy, in order
    assert "wire problems" in lines[1] and "cost, cache" in lines[1]
    split = ([cell.strip() for cell in line.strip("│").split("┆")] for line in lines[3:-4])
    cells = {row[0]: row for row in split}
    assert cells["sliding:keep=6,ledger_facts=0"][2] == "0"
    assert cells["langchain_trim:max_tokens=600"][2] == "39"
    assert cells["anthropic_clear:trigger=1000"][5] == "21 / 0"  # placeholders
    assert " 2 / 6 ┆" in result.stdout  # the 9.62 window: 2 of the 6 facts reach the answer
    assert "read at 0.1 and the rest written at 1.25" in result.stdout


def test_compare_help_names_every_framework_policy_and_its_defaults():
    from contextledger.window.frameworks import FRAMEWORK_POLICIES

    result = CliRunner().invoke(main, ["compare", "--help"], terminal_width=400)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert all(name in text for name in FRAMEWORK_POLICIES)
    assert "COMPARE_POLICIES" in text and "langchain_trim:max_tokens=600" in text


def test_compare_json_is_json_lines_of_the_per_run_rows_and_o_writes_it(tmp_path):
    result = invoke(SAMPLE, "--policy", "none", "--policy", "sliding:keep=2", "--format", "json")
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 14 * 2 and list(rows[0]) == list(AUDIT_SCHEMA)
    assert [row["policy"] for row in rows[:2]] == ["none", "sliding:keep=2"]
    out = tmp_path / "deep" / "rows.jsonl"
    written = invoke(
        SAMPLE, "--policy", "none", "--policy", "sliding:keep=2", "--format", "json", "-o", out
    )
    assert written.exit_code == 0 and written.stdout == ""
    assert out.read_text(encoding="utf-8") == result.stdout
    assert "14 run(s) under 2 policies" in written.stderr
    csv = tmp_path / "rows.csv"
    assert invoke(SAMPLE, "--policy", "none", "--format", "csv", "-o", csv).exit_code == 0
    assert pl.read_csv(csv).columns == list(AUDIT_SCHEMA)
    cheap = invoke(
        SAMPLE,
        "--policy",
        "sliding:keep=2",
        "--cache-write",
        "1",
        "--cache-read",
        "1",
        "--format",
        "json",
    )
    rows = [json.loads(line) for line in cheap.stdout.splitlines()]
    assert all(row["cost_with_cache"] == row["cost_without_cache"] for row in rows)


def test_compare_on_a_corpus_copy_names_a_damaged_file_and_counts_the_rest(tmp_path):
    corpus = require_corpus()
    copy = tmp_path / "runs"
    copy.mkdir()
    chosen = sorted((corpus / "runs").iterdir())[:12]
    for path in chosen:
        shutil.copy(path, copy / path.name)
    data = (copy / chosen[3].name).read_bytes()
    (copy / chosen[3].name).write_bytes(data[: len(data) // 2])  # a truncated gzip
    result = invoke(copy, "--policy", "sliding:keep=1", "--format", "json")
    assert result.exit_code == 1
    assert chosen[3].name in result.stderr and "skipped" in result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 11 and all(row["wire_problems"] == 0 for row in rows)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--policy", "sliding:kep=3"], "'sliding:kep=3'"),
        (["--policy", "none", "--policy", "trim:max=3"], "'trim:max=3'"),
        (["--cache-read", "-1"], "cache read price"),
    ],
)
def test_a_bad_policy_or_price_is_a_usage_error_naming_it(args, named, tmp_path):
    out = tmp_path / "never.txt"
    result = invoke(SAMPLE, *args, "-o", out)
    assert result.exit_code == 2
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_compare_over_no_run_says_so(tmp_path):
    empty = Path(tmp_path)
    result = invoke(empty, "--policy", "none")
    assert result.exit_code == 0
    assert "no run read" in result.stderr


# ── the chart and the report ───────────────────────────────────────


def test_the_cost_chart_ranks_the_policies_by_their_cost_and_names_wire_problems():
    """Fifteen policies told apart by colour alone, and eight points on one spot, could
    not be read: one row a policy, cheapest first, each number printed beside it."""
    from contextledger import charts

    found = compare(LOOP, ["none", "sliding:keep=2"])
    spec = charts.compare_chart(found.table).to_dict()
    cost = spec["hconcat"][0]["layer"]
    assert [layer["mark"]["type"] for layer in cost] == ["bar", "tick", "text"]
    assert cost[0]["encoding"]["x"]["field"] == "cost_with_cache"
    assert cost[1]["encoding"]["x"]["field"] == "cost_without_cache"
    rows = next(iter(spec["datasets"].values()))
    ranked = sorted(rows, key=lambda row: row["cost_with_cache"])
    assert cost[0]["encoding"]["y"]["sort"] == [row["policy"] for row in ranked]
    broken = found.table.with_columns(wire_problems=pl.Series([0, 3]))
    flagged = charts.compare_chart(broken).to_dict()
    assert "✗ 3 wire problem(s)" in json.dumps(flagged["datasets"], ensure_ascii=False)
    assert flagged["hconcat"][-1]["encoding"]["text"]["field"] == "flag"


def test_the_report_carries_the_audit_and_draws_the_cost_chart():
    from contextledger.jobs.compare import FRAMEWORK_DEFAULTS
    from contextledger.report import build_charts, collect

    policies = ["none", "sliding:keep=3"]
    data = collect(policies=policies)
    assert data.policies == policies and data.compared == [*policies, *FRAMEWORK_DEFAULTS]
    expected = compare(SAMPLE, data.compared, standings=STANDINGS).per_run
    assert_frame_equal(data.audit, expected, check_exact=True)
    drawn = json.dumps(build_charts(data)["policy_cost"].to_dict()["datasets"])
    assert all(json.dumps(policy) in drawn for policy in data.compared)
    # The what-if table keeps agentfootprint's policies; without frameworks, the audit too.
    assert data.per_policy["policy"].to_list() == policies
    alone = collect(policies=policies, frameworks=())
    assert alone.compared == policies
    assert_frame_equal(
        alone.audit, compare(SAMPLE, policies, standings=STANDINGS).per_run, check_exact=True
    )


def test_the_report_page_names_the_four_wire_kinds_and_links_the_cost_section():
    from contextledger.report import collect, render_html

    page = render_html(collect(policies=["none", "sliding:keep=3"]))
    assert '<a href="#policy-cost">' in page and '<h2 id="policy-cost">' in page
    note = page.split('<p class="note">Wire problems:', 1)[1].split("</p>", 1)[0]
    for kind in ("is not\nthe user's", "whose call is not before it", "with no result", "request"):
        assert kind in note, kind
    assert "mastra_token_limit:limit=600" in page.split('id="policy-cost"', 1)[1]


def test_the_docs_show_what_compare_prints_on_the_sample():
    from .conftest import REPO

    readme = (REPO / "docs" / "whatif.md").read_text(encoding="utf-8")
    command = "$ contextledger compare data/sample --standings data/sample-standings.csv\n"
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    result = invoke(SAMPLE, "--standings", STANDINGS)
    assert result.exit_code == 0 and result.stdout == shown


def test_the_docs_show_what_compare_prints_on_the_corpus():
    from .conftest import REPO

    corpus = require_corpus()
    readme = (REPO / "docs" / "whatif.md").read_text(encoding="utf-8")
    command = "$ contextledger compare CORPUS/runs --standings data/sample-standings.csv\n"
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    result = invoke(corpus / "runs", "--standings", STANDINGS)
    assert result.exit_code == 0 and result.stdout == shown


def test_compare_reads_an_archive_on_the_command_line_and_refuses_one_without_streams(tmp_path):
    from contextledger.jobs.synth import synth_archive

    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1)
    args = ("--policy", "none", "--policy", "sliding:keep=3", "--format", "json")
    from_archive = invoke(archive, *args)
    from_snapshots = invoke(SAMPLE, *args)
    assert from_archive.exit_code == 0, from_archive.output
    assert from_archive.stdout == from_snapshots.stdout
    bare = tmp_path / "bare"
    synth_archive(bare, runs=5, seed=1, streams=False)
    result = invoke(bare, "--policy", "none")
    assert result.exit_code == 2
    assert str(bare) in result.stderr and "Traceback" not in result.stderr


def test_policies_reading_tool_text_are_left_out_over_an_archive_and_named(tmp_path):
    """Over an archive (tool outputs kept as lengths) openai_trim and langchain_clear with
    keep=tokens:N measured empty outputs; compare and the report leave them out, saying
    so; a compare with no policy left refuses (exit 2)."""
    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1)
    clear = "langchain_clear:trigger=1000,keep=tokens:400"
    result = invoke(archive, "--policy", "none", "--policy", clear, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert f"{clear}: not replayed over an archive" in result.stderr
    assert set(pl.read_csv(result.stdout.encode())["policy"]) == {"none"}
    assert invoke(SAMPLE, "--policy", clear).exit_code == 0  # the snapshots keep the text
    alone = invoke(archive, "--policy", "openai_trim")
    assert alone.exit_code == EXIT_USAGE
    assert "no policy left to compare over an archive" in alone.stderr
    out = tmp_path / "report"
    args = ["report", str(archive), "-o", str(out), "--charts", "none", "--policy", "none"]
    report = CliRunner().invoke(main, args)
    assert report.exit_code == 0, report.output
    assert "openai_trim" in report.stderr and "not replayed over an archive" in report.stderr
    assert "Left out: openai_trim" in (out / "report.html").read_text(encoding="utf-8")


def test_a_batch_replay_leaves_no_cycle_behind_for_the_paused_collector():
    """``replay_and_audit`` runs with the cyclic collector paused: that is safe only while
    a batch's replay makes no reference cycle. The sample and synthetic runs (standings,
    long runs) under every policy the report compares: nothing left for the collector."""
    import gc

    from contextledger.jobs.compare import parse_compared, replay_and_audit
    from contextledger.report import COMPARE_POLICIES, DEFAULT_POLICIES
    from contextledger.window.synthetic import script_streams, tool_batches
    from contextledger.window.whatif import parse_policies

    built = list(script_streams(tool_batches(runs=12, calls=70, seed=5)))
    streams = read_inputs(SAMPLE).streams + [stream for stream, _ in built]
    standings = [row for _, rows in built for row in rows]
    policies, compared = parse_policies(DEFAULT_POLICIES), parse_compared(COMPARE_POLICIES)
    gc.collect()
    gc.disable()
    try:
        per_run, audit = replay_and_audit(streams, policies, compared, standings)
        left = gc.collect()
    finally:
        gc.enable()
    assert per_run.height == len(streams) * len(policies)
    assert audit.height == len(streams) * len(compared)
    assert left == 0
    assert gc.isenabled()
