"""Framework replays answer from each run's shared histories and token counts
(:mod:`~contextledger.window.frameworks._history`): the windows stay those each policy's
own ``window``/``advance`` gives for the history a call sees, call by call.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from contextledger.jobs.compare import FRAMEWORK_DEFAULTS
from contextledger.jobs.whatif import read_inputs
from contextledger.read.messages import Message, RunMessages
from contextledger.window.audit import (
    WIRE_KINDS,
    _wire_counts,
    current_requests,
    served_windows,
    wire_violations,
)
from contextledger.window.frameworks import parse_framework_policy, replay_framework
from contextledger.window.frameworks._common import TokensOf, tokens_at_rate
from contextledger.window.frameworks._history import run_history
from contextledger.window.synthetic import script_streams, tool_batches

from .conftest import SAMPLE

#: Every policy with the keys its fast paths branch on, and their fallbacks.
SPECS = (
    *FRAMEWORK_DEFAULTS,
    "anthropic_clear:trigger=300,keep=1",
    "anthropic_clear:trigger=200,keep=2,clear_at_least=50,exclude_tools=search",
    "anthropic_clear:trigger=100,keep=0,clear_tool_inputs=true",
    "langchain_trim:max_tokens=300,strategy=first,end_on=ai|human",
    "langchain_trim:max_tokens=400,end_on=tool,start_on=human|ai",
    "langchain_trim:max_tokens=800,include_system=true,start_on=human",
    "langchain_trim:max_tokens=1",
    "langchain_clear:trigger=tokens:300|messages:6,keep=messages:1",
    "langchain_clear:trigger=200,keep=0,exclude_tools=search",
    "langchain_clear:trigger=200,keep=2,clear_at_least=50",
    "langchain_summarize:trigger=messages:8,keep=tokens:300",
    "langchain_summarize:trigger=tokens:500|messages:20,keep=messages:3,summary_tokens=50",
    "autogen_buffered:buffer_size=1",
    "autogen_head_tail:head_size=0,tail_size=2",
    "autogen_head_tail:head_size=3,tail_size=1",
)


@cache
def _streams() -> tuple[RunMessages, ...]:
    synthetic = [stream for stream, _ in script_streams(tool_batches(runs=12, calls=9, seed=3))]
    return (*read_inputs(SAMPLE).streams, *synthetic)


def _call_by_call(stream: RunMessages, spec: str, tokens_of: TokensOf) -> list[list[Message]]:
    """The windows of the policy's own ``advance``, the history rebuilt at every call."""
    policy = parse_framework_policy(spec)
    history: list[Message] = []
    served = []
    for call in stream.calls:
        history = history + stream.entering_before(call.ordinal)
        window, history = policy.advance(history, tokens_of=tokens_of)
        served.append(window)
    return served


def _shown(window: list[Message]) -> list[Any]:
    """A window as the audit reads it (a notice a policy authors anew is its text)."""
    return [(m.role, m.content, m.edit) if m.window_authored else m for m in window]


@pytest.mark.parametrize("counter", ["run rate", "floats"])
def test_every_policy_serves_the_windows_its_own_loop_gives(counter: str):
    for stream in _streams():
        rate = stream.tokens_per_char()
        tokens_of = tokens_at_rate(rate) if counter == "run rate" else (lambda m: m.chars / 3.7)
        for spec in SPECS:
            served = replay_framework(stream, spec, tokens_of).served
            expected = _call_by_call(stream, spec, tokens_of)
            assert [_shown(w) for w in served] == [_shown(w) for w in expected], spec


def test_a_float_counter_takes_the_policies_own_sums():
    stream = read_inputs(SAMPLE / "s0003-loop.json.gz").streams[0]
    assert run_history(stream, tokens_at_rate(stream.tokens_per_char())).exact
    assert not run_history(stream, lambda m: m.chars / 3.7).exact


def test_a_window_kept_whole_is_the_runs_shared_history_under_every_policy():
    stream = read_inputs(SAMPLE / "s0003-loop.json.gz").streams[0]
    tokens_of = tokens_at_rate(stream.tokens_per_char())
    untouched = ("anthropic_clear:trigger=100000", "langchain_clear:trigger=100000")
    first, second = (served_windows(stream, spec, None, tokens_of) for spec in untouched)
    assert len(first) > 1
    assert all(a is b for a, b in zip(first, second, strict=True))  # one list, measured once


def test_wire_counts_are_wire_violations_counted_with_the_first_named():
    for stream in _streams():
        requests = current_requests(stream)
        for spec in ("langchain_trim:max_tokens=300", "autogen_buffered:buffer_size=2"):
            for window, request in zip(
                replay_framework(stream, spec).served, requests, strict=True
            ):
                found = wire_violations(window, request)
                counts = tuple(sum(v.kind == kind for v in found) for kind in WIRE_KINDS)
                assert _wire_counts(window, request) == (counts, found[0] if found else None)


def test_a_shared_prefix_stops_at_two_different_run_messages_and_not_at_alike_notices():
    from contextledger.window.cache_costs import shared_prefix

    ask, result = Message("user", "go", index=0), Message("tool", "r", index=1)
    other = Message("tool", "r", index=2)
    notice = Message("user", "Skipped 2 messages.", window_authored=True, index=3)
    again = Message("user", "Skipped 2 messages.", window_authored=True, index=5)
    assert shared_prefix([ask, result], [ask, other]) == 1
    assert shared_prefix([ask, notice, result], [ask, again, result]) == 3
