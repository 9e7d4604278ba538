"""Window policy specs: what parses, to what, and what an error says."""

from __future__ import annotations

import pytest

from contextledger.window.policies import (
    Policy,
    PolicySpecError,
    parse_policy,
    policy_from_config,
    sliding_engages,
    token_budget_engages,
)


def test_none_is_no_window():
    assert parse_policy("none") == Policy("none")


def test_sliding_takes_its_depth_and_the_default_ceilings():
    assert parse_policy("sliding:keep=6") == Policy("sliding", 6, None, 2, 4)


def test_token_budget_keeps_six_turns_unless_told():
    policy = parse_policy("token_budget:threshold=500")
    assert (policy.threshold, policy.keep_recent_turns) == (500, 6)
    assert parse_policy("token_budget:threshold=500,keep=2").keep_recent_turns == 2


def test_false_and_zero_both_switch_a_pin_off():
    assert parse_policy("sliding:keep=3,last_tool_results=false").last_tool_results == 0
    assert parse_policy("sliding:keep=3,last_tool_results=0").last_tool_results == 0
    assert parse_policy("sliding:keep=3,ledger_facts=false").ledger_facts == 0


def test_the_canonical_spec_parses_back_to_the_same_policy():
    for spec in ("none", "sliding:keep=2,last_tool_results=1", "token_budget:threshold=300"):
        policy = parse_policy(spec)
        assert parse_policy(policy.spec) == policy


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("window", "unknown strategy"),
        ("sliding", "needs keep"),
        ("sliding:keep=0", "below 1"),
        ("sliding:keep=two", "not a whole number"),
        ("token_budget:keep=3", "needs threshold"),
        ("token_budget:threshold=-5", "not a positive number"),
        ("sliding:keep=3,threshold=9", "does not take threshold"),
        ("sliding:keep=3,last_tool_results=-1", "below 0"),
        ("sliding:keep=3,keep=4", "given twice"),
        ("none:keep=3", "takes no parameters"),
        ("sliding:keep", "not key=value"),
    ],
)
def test_a_bad_spec_is_refused_naming_it_and_what_is_allowed(spec, says):
    with pytest.raises(PolicySpecError) as caught:
        parse_policy(spec)
    message = str(caught.value)
    assert repr(spec) in message
    assert says in message
    assert "allowed:" in message


def test_the_corpus_window_options_map_to_policies():
    sliding = {"strategy": "sliding-window", "keepRecentTurns": 6}
    budget = {"strategy": "token-budget", "thresholdTokens": 479}
    assert policy_from_config(sliding, "default(2)").spec == parse_policy("sliding:keep=6").spec
    assert policy_from_config(budget, False) == parse_policy(
        "token_budget:threshold=479,last_tool_results=0"
    )
    assert policy_from_config(None, 3) == Policy("none")


def test_sliding_engages_only_past_its_depth():
    assert not sliding_engages(6, 6)
    assert sliding_engages(7, 6)


def test_token_budget_engages_only_over_a_measured_budget():
    assert not token_budget_engages(None, 10)
    assert not token_budget_engages(10, 10)
    assert token_budget_engages(11, 10)
