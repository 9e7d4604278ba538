"""Rebuilding a run's message stream and model calls from a hand-built commit log."""

from __future__ import annotations

from contextledger.read.messages import rebuild_messages
from contextledger.read.snapshot import Bundle, Run, RunSource, Snapshot, TraceEntry
from contextledger.window.replay import replay

ASK = {"role": "user", "content": "find it"}
NOTICE = {"role": "user", "content": "[dropped history — 2 earlier message(s) were dropped …]"}


def call(n: int) -> list[dict]:
    return [
        {"role": "assistant", "content": "", "toolCalls": [{"id": f"c{n}", "name": "look"}]},
        {"role": "tool", "content": "r" * 10 * n, "toolCallId": f"c{n}"},
    ]


def bundle(stage: str, index: int, **writes) -> Bundle:
    trace, overwrite = [], {}
    for key, (verb, value) in writes.items():
        trace.append(TraceEntry(key, verb))
        overwrite[key] = value
    return Bundle(
        trace=trace, overwrite=overwrite, stage_id=stage, runtime_stage_id=f"{stage}#{index}"
    )


def run_of(log: list[Bundle]) -> Run:
    return Run("r", RunSource("r.json"), Snapshot(commit_log=log))


def sample_run() -> Run:
    """seed, call 1 (reports 30), tools, a drop at the window stage, call 2 (reports 0), tools."""
    kept = [ASK, NOTICE, *call(2)]
    return run_of(
        [
            bundle(
                "seed",
                0,
                userMessage=("set", "find it"),
                history=("set", [ASK]),
                iteration=("set", 1),
                totalInputTokens=("set", 0),
            ),
            bundle("compact", 1),
            bundle("call-llm", 2, totalInputTokens=("set", 30)),
            bundle("tool-calls", 3, history=("append", call(1)), iteration=("set", 2)),
            bundle("tool-calls", 4, history=("append", call(2)), iteration=("set", 2)),
            bundle("compact", 5, history=("set", kept)),
            bundle("call-llm", 6),
            bundle("tool-calls", 7, history=("append", call(3)), iteration=("set", 3)),
        ]
    )


def test_the_stream_holds_every_message_in_the_order_it_entered():
    stream = rebuild_messages(sample_run())
    contents = [m.content[:6] for m in stream.messages]
    assert contents == ["find i", "", "r" * 6, "", "r" * 6, "[dropp", "", "r" * 6]
    assert [m.origin for m in stream.messages] == [
        "seed#0",
        "tool-calls#3",
        "tool-calls#3",
        "tool-calls#4",
        "tool-calls#4",
        "compact#5",
        "tool-calls#7",
        "tool-calls#7",
    ]


def test_each_message_knows_the_first_call_that_could_see_it():
    stream = rebuild_messages(sample_run())
    assert [m.first_call for m in stream.messages] == [1, 2, 2, 2, 2, 2, None, None]


def test_a_message_the_window_stage_wrote_is_flagged_as_authored():
    stream = rebuild_messages(sample_run())
    notice = stream.messages[5]
    assert notice.window_authored and notice.is_drop_notice and notice.library_authored
    assert not any(m.window_authored for i, m in enumerate(stream.messages) if i != 5)


def test_a_result_without_a_tool_name_is_named_from_the_call_it_answers():
    stream = rebuild_messages(sample_run())
    assert stream.messages[2].tool_name is None
    assert stream.messages[2].resolved_tool_name == "look"


def test_calls_carry_the_window_seen_the_window_served_and_reported_tokens():
    stream = rebuild_messages(sample_run())
    first, second = stream.calls
    assert (first.iteration, first.input_tokens, first.window_stage_id) == (1, 30, "compact#1")
    assert first.window_seen == first.window_served == (0,)
    assert second.input_tokens == 0  # a call that reported 0 writes nothing
    assert second.window_seen == (0, 1, 2, 3, 4)
    assert second.window_served == (0, 5, 3, 4)
    assert stream.final_window == (0, 5, 3, 4, 6, 7)
    assert stream.user_message == "find it"


def test_the_stages_that_appended_each_message_are_listed():
    appended = rebuild_messages(sample_run()).appended_by_stage()
    assert appended["tool-calls#4"] == [3, 4]
    assert appended["seed#0"] == [0]


def test_a_replay_without_a_window_serves_everything_the_run_appended():
    result = replay(sample_run(), "none")
    assert result.records == []
    assert [len(w) for w in result.served] == [1, 5]
    assert len(result.final_window) == 7  # the recorded notice is not part of it


def test_token_budget_does_not_engage_after_a_call_that_reported_nothing():
    log = sample_run().snapshot.commit_log
    log.append(bundle("compact", 8))
    log.append(bundle("call-llm", 9, totalInputTokens=("set", 90)))
    result = replay(run_of(log), "token_budget:threshold=1,keep=1")
    assert [r["iteration"] for r in result.records] == [2]
    assert result.unmeasured_iterations == [3]


def test_token_budget_estimates_tokens_only_for_a_counterfactual_window():
    log = sample_run().snapshot.commit_log
    log[6] = bundle("call-llm", 6, totalInputTokens=("set", 80))
    log.append(bundle("compact", 8))
    log.append(bundle("call-llm", 9, totalInputTokens=("set", 200)))
    result = replay(run_of(log), "token_budget:threshold=10,keep=1")
    first, second, third = result.visits
    assert (first.measured, first.measured_estimated) == (None, False)
    assert (second.measured, second.measured_estimated) == (30, False)  # the window sent was ours
    assert third.measured_estimated  # call 2 was sent another window than ours
    assert result.estimated


def test_each_message_is_measured_once_a_tool_result_named_as_it_is_built(monkeypatch):
    """A tool result's name is found from its call as the message is built, not by
    building it again (which measured its content, often the longest, twice)."""
    from contextledger.read import messages

    measured: list[str] = []
    real = messages.utf16_length

    def counting(text: str) -> int:
        measured.append(text)
        return real(text)

    monkeypatch.setattr(messages, "utf16_length", counting)
    stream = rebuild_messages(sample_run())
    assert len(measured) == len(stream.messages)
    tools = [m for m in stream.messages if m.role == "tool"]
    assert tools and all(m.resolved_tool_name == "look" for m in tools)
