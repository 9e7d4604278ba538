"""The audit measures each distinct window once: its rows stay those of the per-window rules.

:func:`~contextledger.window.audit.audit_run` takes its wire counts and costs from
measures shared across the policies of a run (a window served at the same call by two
policies is measured once) and finds a grown window's shared prefix by identity; these
tests hold it to :func:`wire_violations` and :func:`call_costs` applied window by window.
"""

from __future__ import annotations

from typing import Any

from contextledger.jobs.compare import parse_compared
from contextledger.jobs.whatif import _standing_rows, read_inputs
from contextledger.report import COMPARE_POLICIES
from contextledger.window.audit import (
    WIRE_COLUMNS,
    WIRE_KINDS,
    audit_table_exact,
    call_costs,
    describe_message,
    served_windows,
    wire_violations,
)
from contextledger.window.audit_arrays import audit_table
from contextledger.window.frameworks._common import rewritten, with_calls_args_cleared
from contextledger.window.standings import timelines

from .conftest import SAMPLE

STANDINGS = SAMPLE.parent / "sample-standings.csv"


def _window_by_window(stream: Any, policy: Any, standings: Any) -> dict[str, Any]:
    """The audit row's wire and cost columns, from the per-window rules alone."""
    served = served_windows(stream, policy, standings)
    requests = _requests(stream)
    counts = dict.fromkeys(WIRE_KINDS, 0)
    first = None
    for call, window, request in zip(stream.calls, served, requests, strict=True):
        found = wire_violations(window, request)
        for violation in found:
            counts[violation.kind] += 1
        if found and first is None:
            first = (call.ordinal, found[0].kind, describe_message(found[0].message))
    costs = call_costs(stream, served, stream.tokens_per_char())
    known = all(cost.tokens is not None for cost in costs)
    return {
        **{WIRE_COLUMNS[kind]: count for kind, count in counts.items()},
        "first": first,
        "input_tokens": sum(c.tokens or 0 for c in costs) if known else None,
        "cached_tokens": sum(c.cached or 0 for c in costs) if known else None,
        "cache_invalidations": sum(c.invalidated for c in costs),
    }


def _requests(stream: Any) -> list[Any]:
    from contextledger.window.audit import current_requests

    return current_requests(stream)


def test_the_audit_rows_are_the_per_window_rules_on_the_sample_under_every_policy():
    inputs = read_inputs(SAMPLE)
    rows = [*inputs.standings, *_standing_rows(STANDINGS)]
    policies = parse_compared(COMPARE_POLICIES)
    audited = audit_table(inputs.streams, policies, rows)
    by_run = timelines(rows)
    expected = []
    for stream in inputs.streams:
        known = by_run.get(stream.run_id)
        for _, policy in policies:
            expected.append(_window_by_window(stream, policy, known.at if known else None))
    found = [
        {
            **{column: row[column] for column in WIRE_COLUMNS.values()},
            "first": (
                None
                if row["first_problem_call"] is None
                else (
                    row["first_problem_call"],
                    row["first_problem_kind"],
                    row["first_problem_message"],
                )
            ),
            "input_tokens": row["input_tokens"],
            "cached_tokens": row["cached_tokens"],
            "cache_invalidations": row["cache_invalidations"],
        }
        for row in audited.iter_rows(named=True)
    ]
    assert found == expected
    assert sum(row["cache_invalidations"] for row in found) > 0  # the slow path is taken
    assert sum(row["wire_unanswered_call"] for row in found) > 0


def test_a_policy_rewriting_the_same_message_again_gets_the_same_copy():
    stream = read_inputs(SAMPLE / "s0003-loop.json.gz").streams[0]
    result = next(m for m in stream.messages if m.role == "tool")
    caller = next(m for m in stream.messages if m.tool_calls)
    assert rewritten(result, "[cleared]", "placeholder") is rewritten(
        result, "[cleared]", "placeholder"
    )
    assert rewritten(result, "[cleared]", "placeholder").content == "[cleared]"
    ids = {caller.tool_calls[0].id}
    assert with_calls_args_cleared(caller, ids) is with_calls_args_cleared(caller, set(ids))


def test_policies_serving_a_run_alike_are_replayed_once_and_audited_under_each_label(
    monkeypatch,
):
    import contextledger.window.audit as audit

    streams = read_inputs(SAMPLE / "s0003-loop.json.gz").streams  # no standings given
    policies = parse_compared(["sliding:keep=2", "sliding:keep=2,ledger_facts=0"])
    replayed: list[Any] = []
    served = audit.served_windows
    monkeypatch.setattr(audit, "served_windows", lambda *a: replayed.append(a) or served(*a))
    audited = audit_table_exact(streams, policies)
    assert len(replayed) == 1
    assert audited["policy"].to_list() == [label for label, _ in policies]
    assert audited.drop("policy").n_unique() == 1


def test_mastras_filter_gives_back_the_same_copy_of_a_message_it_cut_at_every_call():
    from contextledger.window.frameworks import replay_framework
    from contextledger.window.synthetic import Batch, Result, Said, build_stream

    step = [Batch((Result("look", 300), Result("probe", 300)), "checking both")]
    stream = build_stream("r", [Said("user", "go")], [step, step, step, step])
    served = replay_framework(stream, "mastra_tool_filter:exclude=look").served
    cut = [[m for m in window if m.edit == "placeholder"] for window in served]
    assert [len(messages) for messages in cut] == [0, 0, 1, 2]
    assert cut[2][0] is cut[3][0]  # the first step's message, cut at both calls


def test_a_policy_that_never_engages_on_a_run_takes_the_row_of_the_windows_it_serves(
    monkeypatch,
):
    import contextledger.window.audit as audit

    streams = read_inputs(SAMPLE / "s0003-loop.json.gz").streams
    policies = parse_compared(["none", "sliding:keep=1000", "sliding:keep=2"])
    calls: list[str] = []
    audit_run = audit.audit_run
    monkeypatch.setattr(audit, "audit_run", lambda *a: calls.append(a[1]) or audit_run(*a))
    audited = audit_table_exact(streams, policies)
    assert calls == ["none", "sliding:keep=2"]
    rows = audited.drop("policy").rows()
    assert rows[0] == rows[1] != rows[2]
