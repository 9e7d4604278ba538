"""What-if replays: the fact bench headline, the messages table, token counts, the command.

The headline is agentfootprint's fact bench (``s0001-fact-bench``, bundled in
``data/sample``): 20 calls, a fact every 3rd, ``slidingWindow`` keep 6.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.jobs.whatif import read_inputs, whatif
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.tables import schema
from contextledger.tables.windows import messages_table
from contextledger.window import rebuild_messages, replay
from contextledger.window.policies import PolicySpecError, policy_from_config
from contextledger.window.turns import segment_turns
from contextledger.window.whatif import parse_policies, per_policy
from tests.conftest import SAMPLE, oracle_runs, require_corpus

FACT_BENCH = SAMPLE / "s0001-fact-bench.json.gz"
HEADLINE_POLICIES = [
    "sliding:keep=6",
    "sliding:keep=6,ledger_facts=0",
    "sliding:keep=6,ledger_facts=2",
    "sliding:keep=6,ledger_facts=4",
    "sliding:keep=6,ledger_facts=6",
]


def fact_bench_standings(path, run_id="s0001-fact-bench"):
    """FACT results ``fact``, NOISE results ``noise``, each declared on the next call."""
    lines = ["run_id,tool_call_id,standing,iteration"]
    for call in range(1, 21):
        standing = "fact" if call % 3 == 0 else "noise"
        lines.append(f"{run_id},call-{call},{standing},{call + 1}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def headline(tmp_path_factory):
    standings = fact_bench_standings(tmp_path_factory.mktemp("standings") / "standings.csv")
    recency, _ = whatif(FACT_BENCH, ["sliding:keep=6"])
    held, _ = whatif(FACT_BENCH, HEADLINE_POLICIES[1:], standings)
    return pl.concat([recency, held])


# ── the headline ───────────────────────────────────────────────────


def test_the_fact_bench_headline_table(headline):
    facts = (
        pl.col("answer")
        .struct.field("tool_call_ids_verbatim")
        .list.eval(pl.element().filter(pl.element().is_in([f"call-{i}" for i in range(3, 19, 3)])))
    )
    table = headline.select("policy", "answer_facts_verbatim", facts_verbatim=facts)
    expected = pl.DataFrame(
        {
            "policy": HEADLINE_POLICIES,
            "answer_facts_verbatim": [0, 2, 4, 6, 6],
            "facts_verbatim": [
                ["call-15", "call-18"],
                ["call-15", "call-18"],
                ["call-9", "call-12", "call-15", "call-18"],
                [f"call-{i}" for i in range(3, 19, 3)],
                [f"call-{i}" for i in range(3, 19, 3)],
            ],
        },
        schema_overrides={"answer_facts_verbatim": pl.Int32},
    )
    assert_frame_equal(table, expected, check_exact=True)


def test_without_standings_no_result_counts_as_a_fact(headline):
    # the recency row has no standings: its two facts are verbatim but not declared
    assert headline.row(0, named=True)["facts_declared"] == 0
    assert headline.row(1, named=True)["facts_declared"] == 6


def test_the_fact_hold_off_plans_visit_for_visit_like_the_window_without_standings(headline):
    # the plan is the same; only the record's 9.102 keys say what left (armed: standings given)
    planned = ["ledger_facts", "dropped_standings"]
    without, held_off = (
        [{k: v for k, v in visit.items() if k not in planned} for visit in headline["visits"][n]]
        for n in (0, 1)
    )
    assert held_off == without
    assert all(v["ledger_facts"] is None for v in headline["visits"][1])
    assert all(v["dropped_standings"] is None for v in headline["visits"][0])
    assert all(v["dropped_standings"] for v in headline["visits"][1] if v["removed_message_count"])
    assert headline["answer"][1] == headline["answer"][0]


def test_recency_alone_serves_the_answer_13_messages_and_holds_no_fact_pin(headline):
    row = headline.row(0, named=True)
    assert row["answer"]["message_count"] == 13
    assert row["engaged_visits"] == 15
    assert row["pins_held_ledger_fact"] == 0


def test_the_fact_hold_keeps_facts_the_window_would_have_dropped(headline):
    dropped = headline.select("policy", "results_dropped_fact", "results_dropped_noise").rows()
    assert dropped[1:] == [
        ("sliding:keep=6,ledger_facts=0", 4, 10),
        ("sliding:keep=6,ledger_facts=2", 2, 10),
        ("sliding:keep=6,ledger_facts=4", 0, 10),
        ("sliding:keep=6,ledger_facts=6", 0, 10),
    ]


def test_the_headline_holds_on_the_corpus_copy_of_the_fact_bench(tmp_path):
    corpus = require_corpus()
    standings = fact_bench_standings(tmp_path / "standings.csv")
    per_run, _ = whatif(corpus / "runs" / "s0001-fact-bench.json.gz", HEADLINE_POLICIES, standings)
    # with standings, plain "sliding:keep=6" holds facts too: ledger_facts defaults to 4
    assert per_run["answer_facts_verbatim"].to_list() == [6, 2, 4, 6, 6]
    fact_check = oracle_runs()["s0001-fact-bench"]["fact_check"]
    assert per_run["answer"][1]["message_count"] == fact_check["answer_window_message_count"]


# ── the recorded policy and its token counts ───────────────────────


def windowed_corpus_runs():
    runs = oracle_runs()
    return [rid for rid, row in runs.items() if row["scenario"].get("window")]


def test_replaying_each_recorded_policy_uses_only_recorded_token_counts():
    corpus = require_corpus()
    oracle = oracle_runs()
    inputs = read_inputs([corpus / "runs" / f"{rid}.json.gz" for rid in windowed_corpus_runs()])
    budget = checked = 0
    for stream in inputs.streams:
        scenario = oracle[stream.run_id]["scenario"]
        policy = policy_from_config(scenario["window"], scenario.get("keep_last_tool_results"))
        row = whatif(stream, [policy])[0].row(0, named=True)
        assert [v["iteration"] for v in row["visits"]] == [
            r["iteration"] for r in oracle[stream.run_id]["window_records"]
        ]
        if policy.kind == "token_budget" and row["budget_tokens_from"] is not None:
            budget += 1
            assert row["budget_tokens_from"] == "recorded"
        if all(call.input_tokens > 0 for call in stream.calls):
            checked += 1
            assert row["input_tokens_estimated_calls"] == 0
            assert row["input_tokens"] == oracle[stream.run_id]["total_input_tokens"]
    assert budget > 0 and checked > 100


def test_another_window_is_estimated_at_the_runs_own_rate_and_says_so():
    per_run, _ = whatif(FACT_BENCH, ["token_budget:threshold=300,keep=2"])
    row = per_run.row(0, named=True)
    assert row["budget_tokens_from"] in ("estimated", "recorded+estimated")
    assert row["input_tokens_estimated_calls"] > 0
    stream = rebuild_messages(decode_run(next(iter_documents(FACT_BENCH))))
    assert row["tokens_per_char"] == stream.tokens_per_char()


def test_a_policy_without_a_budget_says_nothing_about_budget_tokens():
    per_run, _ = whatif(FACT_BENCH, ["none", "sliding:keep=3"])
    assert per_run["budget_tokens_from"].to_list() == [None, None]


# ── per policy ─────────────────────────────────────────────────────


def test_per_policy_is_the_median_and_total_of_each_metric_in_the_order_given():
    per_run, table = whatif(SAMPLE, ["sliding:keep=3", "none"])
    assert table["policy"].to_list() == ["sliding:keep=3", "none"]
    assert table["runs"].to_list() == [14, 14]
    for metric in schema.WHATIF_METRICS:
        by_hand = per_run.group_by("policy", maintain_order=True).agg(
            pl.col(metric).median().alias(f"{metric}_median"),
            pl.col(metric).sum().cast(pl.Int64).alias(f"{metric}_total"),
        )
        assert_frame_equal(table.select(by_hand.columns), by_hand, check_exact=True)
    assert_frame_equal(per_policy(per_run), table, check_exact=True)


def test_no_window_serves_every_result_the_run_appended():
    per_run, _ = whatif(FACT_BENCH, ["none"])
    row = per_run.row(0, named=True)
    assert row["engaged_visits"] == row["removed_messages"] == row["results_dropped"] == 0
    assert row["answer_results_verbatim"] == 20


def test_a_bad_policy_spec_is_refused_before_anything_is_read():
    with pytest.raises(PolicySpecError, match="'sliding:keep=0'"):
        whatif("does-not-exist", ["none", "sliding:keep=0"])
    with pytest.raises(ValueError, match="at least one window policy"):
        parse_policies([])


# ── the messages table ─────────────────────────────────────────────


@pytest.fixture(scope="module")
def sample_streams():
    return read_inputs(SAMPLE).streams


@pytest.fixture(scope="module")
def sample_messages(sample_streams):
    return pl.from_arrow(messages_table(sample_streams))


def test_the_messages_table_has_every_message_of_every_stream_in_order(
    sample_streams, sample_messages
):
    assert sample_messages.schema == pl.from_arrow(schema.MESSAGES.empty_table()).schema
    assert sample_messages.height == sum(len(s.messages) for s in sample_streams)
    for stream in sample_streams:
        rows = sample_messages.filter(pl.col("run_id") == stream.run_id)
        assert rows["message_index"].to_list() == list(range(len(stream.messages)))
        assert rows["content_chars"].to_list() == [m.chars for m in stream.messages]


def test_turns_numbered_over_the_whole_table_agree_with_each_runs_segmentation(
    sample_streams, sample_messages
):
    for stream in sample_streams:
        conversation = [m for m in stream.messages if not m.window_authored]
        expected = [t.index for t in segment_turns(conversation) for _ in t.messages]
        rows = sample_messages.filter(pl.col("run_id") == stream.run_id, ~pl.col("window_authored"))
        assert rows["turn_index"].to_list() == expected, stream.run_id
    notices = sample_messages.filter(pl.col("window_authored"))
    assert notices.height > 0
    assert notices["turn_index"].null_count() == notices.height
    assert notices["is_drop_notice"].all()


def test_each_message_knows_the_first_call_served_it(sample_messages):
    bench = sample_messages.filter(pl.col("run_id") == "s0001-fact-bench")
    assert bench.height == 41
    assert bench["first_call"].to_list() == [1, *[c for c in range(2, 22) for _ in (0, 1)]]
    call_3 = bench.filter(pl.col("tool_call_id") == "call-3").row(0, named=True)
    assert (call_3["role"], call_3["tool_name"], call_3["tool_name_recovered"]) == (
        "tool",
        "probe_fact",
        False,
    )
    asking = bench.filter(pl.col("message_index") == call_3["message_index"] - 1)
    assert asking["tool_calls"].to_list() == [[{"id": "call-3", "name": "probe_fact"}]]


def test_a_result_without_a_tool_name_is_named_from_the_asking_call():
    from tests.test_window_messages import sample_run

    table = pl.from_arrow(messages_table([rebuild_messages(sample_run())]))
    result = table.filter(pl.col("tool_call_id") == "c1").row(0, named=True)
    assert (result["tool_name"], result["tool_name_recovered"]) == ("look", True)
    notice = table.filter(pl.col("is_drop_notice")).row(0, named=True)
    assert notice["window_authored"] and notice["turn_index"] is None


def test_the_messages_table_holds_every_message_the_wire_carried():
    require_corpus()
    from tests.conftest import corpus_dir, oracle_calls

    inputs = read_inputs(corpus_dir() / "runs")
    agents = [s for s in inputs.streams if oracle_runs()[s.run_id]["runner_kind"] == "Agent"]
    table = pl.from_arrow(messages_table(agents))
    for stream in agents:
        wire = oracle_calls()[stream.run_id]["wire"]
        rows = table.filter(pl.col("run_id") == stream.run_id)
        for ordinal, call in enumerate(wire, start=1):
            seen = rows.filter(pl.col("first_call") <= ordinal)
            assert seen.height >= len(call["messages"]), (stream.run_id, ordinal)
        carried = {(role, chars) for call in wire for role, _, chars, *_ in call["messages"]}
        assert carried <= set(rows.select("role", "content_chars").iter_rows()), stream.run_id


# ── the command ────────────────────────────────────────────────────


def invoke(*args):
    return CliRunner().invoke(main, ["whatif", *map(str, args)])


def test_the_command_prints_one_row_per_policy():
    result = invoke(FACT_BENCH, "--policy", "none", "--policy", "sliding:keep=6")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("│")]
    assert [line.split("┆")[0].strip("│ ") for line in lines[1:]] == ["none", "sliding:keep=6"]
    assert "median per run / the total over the runs" in result.output


def test_the_command_writes_json_lines_one_object_per_run_and_policy(tmp_path):
    standings = fact_bench_standings(tmp_path / "standings.csv")
    result = invoke(
        SAMPLE, "--policy", "sliding:keep=6", "--policy", "none", "--standings", standings,
        "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 28
    bench = next(o for o in objects if o["run_id"] == "s0001-fact-bench")
    assert bench["policy"] == "sliding:keep=6"
    assert set(bench["visits"][1]) == {
        "iteration",
        "removed_message_count",
        "turns_before",
        "turns_after",
        "window_chars_before",
        "window_chars_after",
        "refusals",
        "ledger_facts",
        "dropped_standings",
    }
    # 9.102's record keys: the fact pin (default ceiling 4) and whose standing left
    held = [v["ledger_facts"] for v in bench["visits"] if v["ledger_facts"]]
    assert held and all(h["limit"] == 4 and h["stand_down"] is False for h in held)
    assert {p["tool_name"] for h in held for p in h["pinned"]} == {"probe_fact"}
    assert {d["standing"] for v in bench["visits"] for d in v["dropped_standings"] or []} == {
        "noise"
    }
    assert bench["visits"][1]["refusals"][0] == {
        "reason": "current-request",
        "turn_index": 0,
        "message_index": 0,
    }
    assert bench["answer"]["message_count"] == 21
    assert len(bench["answer"]["tool_call_ids_verbatim"]) == 10


def test_the_command_writes_parquet_only_to_a_file(tmp_path):
    assert invoke(FACT_BENCH, "--policy", "none", "--format", "parquet").exit_code == 2
    out = tmp_path / "whatif.parquet"
    result = invoke(FACT_BENCH, "--policy", "none", "--format", "parquet", "-o", out)
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(out)["policy"].to_list() == ["none"]


def test_the_command_refuses_a_bad_policy_naming_it():
    result = invoke(FACT_BENCH, "--policy", "sliding:keep=6", "--policy", "token_budget:keep=2")
    assert result.exit_code == 2
    assert "'token_budget:keep=2'" in result.output and "needs threshold" in result.output


def test_the_command_refuses_a_bad_standings_file_naming_the_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,tool_call_id,standing,iteration\nr,c1,fact,2\nr,c2,maybe,3\n")
    result = invoke(FACT_BENCH, "--policy", "none", "--standings", bad)
    assert result.exit_code == 2
    assert f"{bad}:3: unknown standing 'maybe'" in result.output


def test_the_command_names_an_unreadable_input_and_replays_the_rest(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    result = invoke(FACT_BENCH, broken, "--policy", "none", "--format", "json")
    assert result.exit_code == 1
    assert "skipped" in result.output and "broken.json" in result.output
    assert '"run_id":"s0001-fact-bench"' in result.output


def test_the_replay_the_table_reads_is_the_exact_one():
    stream = rebuild_messages(decode_run(next(iter_documents(FACT_BENCH))))
    row = whatif(stream, ["sliding:keep=6"])[0].row(0, named=True)
    records = replay(stream, "sliding:keep=6").records
    assert [v["removed_message_count"] for v in row["visits"]] == [
        r["removedMessageCount"] for r in records
    ]
