"""Other frameworks' retention policies, checked against their own documented examples
(their messages rewritten as ours) and run on every corpus run."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from contextledger.read.messages import Message, RunMessages, ToolCall, rebuild_messages
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.window.frameworks import (
    FRAMEWORK_POLICIES,
    FrameworkSpecError,
    parse_any_policy,
    parse_framework_policy,
    replay_framework,
)
from contextledger.window.frameworks.anthropic import ANTHROPIC_PLACEHOLDER
from contextledger.window.policies import Policy, PolicySpecError

from .conftest import require_corpus


def user(text: str) -> Message:
    return Message("user", text)


def ai(text: str = "", *calls: tuple[str, str]) -> Message:
    raw = {"role": "assistant", "content": text}
    if calls:
        raw["toolCalls"] = [{"id": i, "name": n, "args": {"q": i}} for i, n in calls]
    return Message("assistant", text, tool_calls=tuple(ToolCall(i, n) for i, n in calls), raw=raw)


def tool(call_id: str, name: str, text: str) -> Message:
    return Message("tool", text, tool_call_id=call_id, tool_name=name, resolved_tool_name=name)


def system(text: str) -> Message:
    return Message("system", text)


def one(_: Message) -> int:
    return 1


def chars(m: Message) -> int:
    return len(m.content)


def same(window: list[Message], expected: list[Message]) -> bool:
    return [id(m) for m in window] == [id(m) for m in expected]


# ── spec grammar ───────────────────────────────────────────────────

EXAMPLES = {
    "anthropic_clear": "anthropic_clear:trigger=30000,keep=3,exclude_tools=a|b",
    "langchain_trim": "langchain_trim:max_tokens=2000,start_on=human",
    "langchain_clear": "langchain_clear:trigger=tokens:500|messages:40,keep=2",
    "langchain_summarize": "langchain_summarize:trigger=messages:30,keep=tokens:800",
    "openai_trim": "openai_trim:recent_turns=1,trimmable_tools=search",
    "autogen_buffered": "autogen_buffered:buffer_size=5",
    "autogen_head_tail": "autogen_head_tail:head_size=2,tail_size=8",
    "mastra_tool_filter": "mastra_tool_filter:exclude=weather",
    "mastra_token_limit": "mastra_token_limit:limit=4000,trim_mode=contiguous",
}


def test_every_registered_policy_has_an_example():
    assert set(EXAMPLES) == set(FRAMEWORK_POLICIES)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_a_canonical_spec_parses_back_to_the_same_policy(name):
    policy = parse_framework_policy(EXAMPLES[name])
    assert policy.name == name
    assert parse_framework_policy(policy.spec) == policy
    assert parse_any_policy(policy.spec) == policy


def test_defaults_are_the_frameworks_own():
    assert parse_framework_policy("anthropic_clear").spec == (
        "anthropic_clear:trigger=100000,keep=3,clear_at_least=0,clear_tool_inputs=false"
    )
    assert parse_framework_policy("openai_trim").spec == (
        "openai_trim:recent_turns=2,max_output_chars=500,preview_chars=200"
    )
    assert parse_framework_policy("langchain_clear").spec == (
        "langchain_clear:trigger=100000,keep=3,clear_at_least=0,clear_tool_inputs=false"
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("autogen_buffered:size=3", "does not take size"),
        ("autogen_buffered", "needs buffer_size="),
        ("autogen_buffered:buffer_size=0", "buffer_size=0 is below 1"),
        ("openai_trim:recent_turns=two", "'two' is not a whole number"),
        ("langchain_trim:max_tokens=9,include_system=maybe", "not true or false"),
        ("langchain_trim:max_tokens=9,start_on=bot", "bot is not a LangChain message type"),
        ("langchain_trim:max_tokens=9,allow_partial=true", "allow_partial=true is not replayed"),
        ("mastra_token_limit:limit=9,trim_mode=fast", "trim_mode='fast' is not allowed"),
        ("langchain_clear:trigger=fraction:1", "'fraction' is not a kind it takes"),
        ("anthropic_clear:keep", "'keep' is not key=value"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_spec_the_key_and_what_is_allowed(spec, says):
    with pytest.raises(FrameworkSpecError) as caught:
        parse_framework_policy(spec)
    text = str(caught.value)
    assert repr(spec) in text and says in text and "takes" in text
    assert isinstance(caught.value, PolicySpecError)


def test_any_spec_goes_to_its_own_parser():
    assert isinstance(parse_any_policy("sliding:keep=6"), Policy)
    with pytest.raises(PolicySpecError, match="unknown policy 'langchain': not agentfootprint"):
        parse_any_policy("langchain:keep=2")  # a framework's name alone is none of its policies


# ── Anthropic clear_tool_uses_20250919 ─────────────────────────────


def tool_history() -> list[Message]:
    return [
        user("find it"),
        ai("", ("c1", "search")),
        tool("c1", "search", "a" * 100),
        ai("", ("c2", "fetch")),
        tool("c2", "fetch", "b" * 100),
        ai("", ("c3", "search")),
        tool("c3", "search", "c" * 100),
        ai("done"),
    ]


def test_anthropic_clears_the_oldest_results_into_placeholders_once_over_the_trigger():
    history = tool_history()
    assert same(
        parse_framework_policy("anthropic_clear:trigger=400").window(history, tokens_of=chars),
        history,
    )
    window = parse_framework_policy("anthropic_clear:trigger=300,keep=1").window(
        history, tokens_of=chars
    )
    assert len(window) == len(history)
    assert [m.edit for m in window] == [
        None,
        None,
        "placeholder",
        None,
        "placeholder",
        None,
        None,
        None,
    ]
    assert window[2].content == ANTHROPIC_PLACEHOLDER and window[2].tool_call_id == "c1"
    assert window[6] is history[6] and window[1] is history[1]


def test_anthropic_spares_excluded_tools_and_clears_named_inputs():
    history = tool_history()
    policy = parse_framework_policy(
        "anthropic_clear:trigger=1,keep=0,exclude_tools=fetch,clear_tool_inputs=search"
    )
    window = policy.window(history, tokens_of=chars)
    assert window[4] is history[4]
    assert window[2].edit == window[6].edit == "placeholder"
    assert window[1].raw["toolCalls"][0]["args"] == {} and window[1].edit == "placeholder"
    assert window[3] is history[3]


def test_anthropic_clears_nothing_when_it_cannot_free_clear_at_least():
    history = tool_history()
    short = parse_framework_policy("anthropic_clear:trigger=1,keep=1,clear_at_least=500")
    assert same(short.window(history, tokens_of=chars), history)
    enough = parse_framework_policy("anthropic_clear:trigger=1,keep=1,clear_at_least=150")
    assert sum(m.edit == "placeholder" for m in enough.window(history, tokens_of=chars)) == 2


# ── LangChain trim_messages ────────────────────────────────────────

JOKES = [
    system("you're a good assistant, you always respond with a joke."),
    user("i wonder why it's called langchain"),
    ai(
        'Well, I guess they thought "WordRope" and "SentenceString" just didn\'t have the '
        "same ring to it!"
    ),
    user("and who is harrison chasing anyways"),
    ai(
        "Hmmm let me think.\n\nWhy, he's probably chasing after the last cup of coffee in "
        "the office!"
    ),
    user("what do you call a speechless parrot"),
]


def test_langchain_trim_docs_example_counting_messages():
    # trim_messages docs, "Trimming based on message count": token_counter=len.
    policy = parse_framework_policy(
        "langchain_trim:max_tokens=4,strategy=last,start_on=human,include_system=true"
    )
    assert same(policy.window(JOKES, tokens_of=one), [JOKES[0], JOKES[3], JOKES[4], JOKES[5]])


def test_langchain_trim_docs_example_with_the_dummy_counter():
    # The docstring's dummy_token_counter: 10 a message, 14 for the two-block AI message.
    messages = [system("s"), user("first"), ai("second"), user("third"), ai("fourth")]

    def dummy(m: Message) -> int:
        return 14 if m.content == "second" else 10

    last = parse_framework_policy("langchain_trim:max_tokens=30,include_system=true")
    assert same(last.window(messages, tokens_of=dummy), [messages[0], messages[3], messages[4]])
    ends = parse_framework_policy("langchain_trim:max_tokens=30,strategy=first,end_on=human|ai")
    assert same(ends.window(messages, tokens_of=dummy), [messages[0], messages[1]])


def test_langchain_trim_without_start_on_can_open_on_an_orphaned_tool_result():
    history = tool_history()
    window = parse_framework_policy("langchain_trim:max_tokens=3").window(history, tokens_of=one)
    assert same(window, history[-3:]) or same(window, history[5:])
    assert window[0].role == "assistant"
    orphan = parse_framework_policy("langchain_trim:max_tokens=4").window(history, tokens_of=one)
    assert orphan[0].role == "tool"  # its call (history[3]) is gone
    human = parse_framework_policy("langchain_trim:max_tokens=4,start_on=human")
    assert human.window(history, tokens_of=one) == []


# ── LangChain ClearToolUsesEdit ────────────────────────────────────


def test_langchain_clear_replaces_old_results_with_cleared_and_can_clear_inputs():
    history = tool_history()
    policy = parse_framework_policy("langchain_clear:trigger=50,keep=1,clear_tool_inputs=true")
    window = policy.window(history, tokens_of=chars)
    assert [m.content for m in window if m.role == "tool"] == ["[cleared]", "[cleared]", "c" * 100]
    assert window[1].raw["toolCalls"][0]["args"] == {} and window[5] is history[5]
    assert window[0] is history[0] and window[7] is history[7]


def test_langchain_clear_int_trigger_is_strict_and_the_tuple_forms_are_not():
    history = tool_history()
    total = sum(chars(m) for m in history)
    at = parse_framework_policy(f"langchain_clear:trigger={total},keep=0")
    assert same(at.window(history, tokens_of=chars), history)
    tokens = parse_framework_policy(f"langchain_clear:trigger=tokens:{total},keep=0")
    assert all(m.edit for m in tokens.window(history, tokens_of=chars) if m.role == "tool")
    count = parse_framework_policy(f"langchain_clear:trigger=messages:{len(history)},keep=0")
    assert all(m.edit for m in count.window(history, tokens_of=chars) if m.role == "tool")


def test_langchain_clear_stops_at_clear_at_least_and_skips_excluded_and_uncalled():
    history = tool_history()
    window = parse_framework_policy(
        "langchain_clear:trigger=1,keep=0,clear_at_least=50,exclude_tools=search"
    ).window(history, tokens_of=chars)
    assert [m.edit for m in window if m.role == "tool"] == [None, "placeholder", None]
    orphan = [user("q"), tool("gone", "search", "x" * 50), ai("ok")]
    assert same(
        parse_framework_policy("langchain_clear:trigger=1,keep=0").window(orphan, tokens_of=chars),
        orphan,
    )


# ── LangChain SummarizationMiddleware ──────────────────────────────


def test_langchain_summarize_keeps_the_pair_together_and_stands_in_one_summary():
    history = tool_history()
    policy = parse_framework_policy(
        "langchain_summarize:trigger=messages:8,keep=messages:2,summary_tokens=200"
    )
    window, kept = policy.advance(history, tokens_of=chars)
    # keep 2 would cut between c3's call and its result: the cut moves back to the call.
    assert window[0].edit == "summary" and window[0].role == "user"
    assert window[0].content.startswith("Here is a summary of the conversation to date:")
    assert chars(window[0]) == 200
    assert same(window[1:], history[5:]) and kept == window
    untouched, _ = policy.advance(history[:7], tokens_of=chars)
    assert same(untouched, history[:7])


def test_langchain_summarize_persists_its_summary_across_calls(sample_stream):
    policy = parse_framework_policy("langchain_summarize:trigger=messages:4,keep=messages:2")
    replay = replay_framework(sample_stream, policy)
    summaries = [w[0] for w in replay.served if w and w[0].edit == "summary"]
    assert summaries, "the sample run is long enough to summarize"
    first = next(i for i, w in enumerate(replay.served) if w and w[0].edit == "summary")
    later = replay.served[first + 1 :]
    assert all(w[0].edit == "summary" for w in later)


# ── OpenAI Agents SDK ToolOutputTrimmer ────────────────────────────


def trimmer_items(output: str) -> list[Message]:
    # test_tool_output_trimmer.py's items: q1, call c1 search, output, a1, q2, a2, q3, a3.
    return [
        user("q1"),
        ai("", ("c1", "search")),
        tool("c1", "search", output),
        ai("a1"),
        user("q2"),
        ai("a2"),
        user("q3"),
        ai("a3"),
    ]


def test_openai_trims_a_large_old_output_to_a_preview():
    items = trimmer_items("x" * 1000)
    window = parse_framework_policy("openai_trim").window(items, tokens_of=chars)
    trimmed = window[2]
    assert trimmed.edit == "preview" and "[Trimmed:" in trimmed.content
    assert "search" in trimmed.content and "1000 chars" in trimmed.content
    assert trimmed.content.endswith("x" * 200 + "...") and len(trimmed.content) < 1000
    assert all(w is m for w, m in zip(window, items, strict=True) if w is not trimmed)


def test_openai_keeps_small_recent_and_untrimmable_outputs():
    small = trimmer_items("x" * 100)
    assert same(parse_framework_policy("openai_trim").window(small, tokens_of=chars), small)
    one_turn = [user("q"), ai("", ("c1", "search")), tool("c1", "search", "x" * 1000), ai("a")]
    assert same(parse_framework_policy("openai_trim").window(one_turn, tokens_of=chars), one_turn)
    other = trimmer_items("x" * 1000)
    policy = parse_framework_policy("openai_trim:trimmable_tools=execute_code")
    assert same(policy.window(other, tokens_of=chars), other)


def test_openai_keeps_an_output_whose_preview_would_not_be_shorter():
    items = trimmer_items("x" * 252)
    policy = parse_framework_policy("openai_trim:max_output_chars=250,preview_chars=200")
    assert same(policy.window(items, tokens_of=chars), items)


# ── AutoGen ────────────────────────────────────────────────────────

SEATTLE = [
    user("Hello!"),
    ai("What can I do for you?"),
    user("Tell what are some fun things to do in seattle."),
    ai("Pike place, space needle, mt rainer"),
    user("More places?"),
]


def test_autogen_buffered_docs_example_keeps_the_last_n():
    policy = parse_framework_policy("autogen_buffered:buffer_size=2")
    assert same(policy.window(SEATTLE[:3], tokens_of=one), SEATTLE[1:3])


def test_autogen_buffered_drops_a_leading_result_and_counts_a_batch_as_one():
    batch = [
        user("q"),
        ai("", ("c1", "a"), ("c2", "b")),
        tool("c1", "a", "1"),
        tool("c2", "b", "2"),
        ai("done"),
    ]
    policy = parse_framework_policy("autogen_buffered:buffer_size=2")
    assert same(policy.window(batch, tokens_of=one), [batch[4]])
    three = parse_framework_policy("autogen_buffered:buffer_size=3")
    assert same(three.window(batch, tokens_of=one), batch[1:])


def test_autogen_head_tail_docs_example_says_what_it_skipped():
    policy = parse_framework_policy("autogen_head_tail:head_size=1,tail_size=1")
    window = policy.window(SEATTLE, tokens_of=one)
    assert len(window) == 3 and window[0] is SEATTLE[0] and window[2] is SEATTLE[-1]
    assert window[1].content == "Skipped 3 messages." and window[1].window_authored
    assert same(
        parse_framework_policy("autogen_head_tail:head_size=3,tail_size=2").window(
            SEATTLE, tokens_of=one
        ),
        SEATTLE,
    )


def test_autogen_head_tail_drops_a_trailing_call_from_the_head_and_a_leading_result_from_the_tail():
    history = tool_history()  # 8 messages: 7 AutoGen messages (no batches)
    window = parse_framework_policy("autogen_head_tail:head_size=2,tail_size=2").window(
        history, tokens_of=one
    )
    assert window[0] is history[0] and window[1].content == "Skipped 4 messages."
    assert same(window[2:], history[7:])


# ── Mastra ─────────────────────────────────────────────────────────


def weather_history() -> list[Message]:
    return [
        user("weather and time in Paris?"),
        ai("Let me check.", ("w1", "weather"), ("t1", "time")),
        tool("w1", "weather", "sunny"),
        tool("t1", "time", "noon"),
        ai("", ("w2", "weather")),
        tool("w2", "weather", "rain later"),
        ai("Sunny now, rain later; it is noon."),
    ]


def test_mastra_tool_filter_removes_every_call_and_result_and_empty_messages():
    history = weather_history()
    policy = parse_framework_policy("mastra_tool_filter:preserve_latest_step=false")
    window = policy.window(history, tokens_of=one)
    assert [m.role for m in window] == ["user", "assistant", "assistant"]
    assert window[1].content == "Let me check." and window[1].tool_calls == ()
    assert window[1].edit == "placeholder" and window[2] is history[6]


def test_mastra_tool_filter_excludes_named_tools_only_and_keeps_the_latest_step():
    history = weather_history()
    named = parse_framework_policy("mastra_tool_filter:exclude=weather,preserve_latest_step=false")
    window = named.window(history, tokens_of=one)
    assert [m.tool_call_id for m in window if m.role == "tool"] == ["t1"]
    assert [c.id for c in window[1].tool_calls] == ["t1"]
    latest = parse_framework_policy("mastra_tool_filter").window(history, tokens_of=one)
    assert [m.tool_call_id for m in latest if m.role == "tool"] == ["w2"]
    assert history[4] in latest


def test_mastra_token_limit_keeps_system_and_the_newest_that_fit():
    history = [system("s" * 10), user("a" * 10), ai("b" * 50), user("c" * 10), ai("d" * 10)]
    # budget 24 + 3.8 a message: limit 100 leaves 100 - 13.8 - 24 = 62.2 for the rest.
    best = parse_framework_policy("mastra_token_limit:limit=100")
    window, kept = best.advance(history, tokens_of=chars)
    assert same(window, [history[0], history[1], history[3], history[4]]) and kept == window
    contiguous = parse_framework_policy("mastra_token_limit:limit=100,trim_mode=contiguous")
    assert same(contiguous.window(history, tokens_of=chars), [history[0], history[3], history[4]])
    refused, held = parse_framework_policy("mastra_token_limit:limit=30").advance(
        history, tokens_of=chars
    )
    assert refused == [] and same(held, history)


def test_mastra_token_limit_removal_persists_across_calls(sample_stream):
    replay = replay_framework(sample_stream, "mastra_token_limit:limit=300")
    dropped_then_back = 0
    gone: set[int] = set()
    previous: list[Message] = []
    for window in replay.served:
        ids = {m.index for m in window}
        dropped_then_back += len(gone & ids)
        gone |= {m.index for m in previous} - ids
        previous = window
    assert gone, "the limit removes something from the sample run"
    assert dropped_then_back == 0


# ── the replay, on every corpus run ────────────────────────────────


@pytest.fixture(scope="module")
def sample_stream() -> RunMessages:

    longest = None
    for path in sorted((Path(__file__).resolve().parents[1] / "data" / "sample").glob("*.json*")):
        for document in iter_documents(path):
            stream = rebuild_messages(decode_run(document))
            if longest is None or len(stream.calls) > len(longest.calls):
                longest = stream
    assert longest is not None
    return longest


#: One spec per policy, small enough to engage on the corpus's short runs.
CORPUS_SPECS = [
    "anthropic_clear:trigger=300,keep=1",
    "anthropic_clear",
    "langchain_trim:max_tokens=300",
    "langchain_trim:max_tokens=300,start_on=human,include_system=true",
    "langchain_clear:trigger=300,keep=1,clear_tool_inputs=true",
    "langchain_summarize:trigger=messages:6,keep=messages:3",
    "langchain_summarize:trigger=400,keep=tokens:200",
    "openai_trim:recent_turns=1,max_output_chars=50,preview_chars=20",
    "autogen_buffered:buffer_size=4",
    "autogen_head_tail:head_size=2,tail_size=4",
    "mastra_tool_filter",
    "mastra_tool_filter:preserve_latest_step=false",
    "mastra_token_limit:limit=400",
    "mastra_token_limit:limit=400,trim_mode=contiguous",
]
#: Policies that only rewrite or drop tool traffic: the run's request always reaches the model.
KEEP_THE_REQUEST = ("anthropic_clear", "langchain_clear", "openai_trim", "mastra_tool_filter")


def test_every_policy_is_replayed_on_the_corpus():
    assert {spec.partition(":")[0] for spec in CORPUS_SPECS} == set(FRAMEWORK_POLICIES)


@cache
def corpus_streams() -> list[RunMessages]:
    runs = require_corpus() / "runs"
    return [
        rebuild_messages(decode_run(next(iter_documents(p))))
        for p in sorted(runs.glob("*.json.gz"))
    ]


def originals(window: list[Message], history: list[Message]) -> list[int]:
    """Positions in ``history`` of a window's messages (an edited one by its stream index)."""
    position = {id(m): i for i, m in enumerate(history)}
    by_index = {m.index: i for i, m in enumerate(history) if m.index >= 0}
    out = []
    for message in window:
        if id(message) in position:
            out.append(position[id(message)])
        elif message.edit is not None and message.index >= 0:
            out.append(by_index[message.index])
        else:
            assert message.window_authored, message  # a notice or a stand-in
    return out


@pytest.mark.parametrize("spec", CORPUS_SPECS)
def test_every_policy_replays_every_corpus_run_keeping_order_and_the_request(spec):
    streams = corpus_streams()
    assert len(streams) == 301
    name = spec.partition(":")[0]
    for stream in streams:
        replay = replay_framework(stream, spec)
        assert len(replay.served) == len(stream.calls), stream.run_id
        history: list[Message] = []
        for call, window in zip(stream.calls, replay.served, strict=True):
            history = history + stream.entering_before(call.ordinal)
            kept = (
                originals(window, history)
                if name not in ("langchain_summarize", "mastra_token_limit")
                else None
            )
            if kept is not None:
                assert kept == sorted(kept) and len(set(kept)) == len(kept), (
                    stream.run_id,
                    call.ordinal,
                )
            if name in KEEP_THE_REQUEST:
                requests = [m for m in history if m.role == "user"]
                assert all(r in window for r in requests), (stream.run_id, call.ordinal)
            assert all(m.edit in (None, "placeholder", "preview", "summary") for m in window)


def test_a_kept_message_is_the_recorded_object_and_an_edited_one_a_new_one():
    stream = next(s for s in corpus_streams() if len(s.calls) >= 4)
    replay = replay_framework(stream, "anthropic_clear:trigger=1,keep=0")
    last = replay.served[-1]
    assert any(m.edit == "placeholder" for m in last)
    recorded = {id(m) for m in stream.messages}
    assert all((id(m) in recorded) == (m.edit is None) for m in last)
    assert all(replace(m, edit=None).index >= 0 for m in last)


# ── whatif refuses them ────────────────────────────────────────────


def test_whatif_refuses_a_framework_spec_in_one_line_pointing_at_compare(tmp_path):
    from click.testing import CliRunner

    from contextledger.cli import main

    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    result = CliRunner().invoke(
        main, ["whatif", str(sample), "--policy", "none", "--policy", "openai_trim"]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "contextledger compare" in lines[0] and "openai_trim" in lines[0]
    assert "Traceback" not in result.output
    ok = CliRunner().invoke(main, ["whatif", str(sample), "--policy", "sliding:keep=6"])
    assert ok.exit_code == 0


def test_the_docs_table_lists_every_policy_key_and_default():
    from contextledger.window.frameworks import policy_table

    docs = Path(__file__).resolve().parents[1] / "docs" / "window-policies.md"
    readme = docs.read_text(encoding="utf-8")
    section = readme.split("## Other frameworks' policies", 1)[1].split("\n## ", 1)[0]
    for row in policy_table():
        default = row["default"].replace("|", "\\|")
        assert f"| `{row['policy']}` | `{row['key']}` | {default} |" in section, row


def test_an_unknown_policy_name_lists_every_family():
    """A name neither agentfootprint's nor another framework's: the message names both
    families, so a user of compare sees the frameworks too."""
    from contextledger.window.frameworks import parse_any_policy
    from contextledger.window.policies import PolicySpecError

    with pytest.raises(PolicySpecError) as raised:
        parse_any_policy("nosuch:x=1")
    message = str(raised.value)
    assert message.startswith("window policy 'nosuch:x=1': unknown policy 'nosuch'")
    assert "none, sliding, token_budget" in message and "mastra_token_limit" in message
    with pytest.raises(PolicySpecError, match="keep"):  # agentfootprint's own errors stay
        parse_any_policy("sliding:keep=0")
