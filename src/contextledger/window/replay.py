"""Replay a window policy over a recorded run, one model call at a time.

The window stage runs before every model call. Each visit is one pure
function (:func:`window_visit`) of the live window, the run's request, the
last call's input tokens and the records filed so far (the stand-down reads
the last two); the only sequential state is in :func:`replay`'s loop: the live
window, the records, and the windows served.

Replaying the policy a run was recorded with reproduces its WindowRecords.
Under another policy the windows are counterfactual; token-budget decisions
then need the input tokens of windows nobody sent, which are estimated at the
run's own rate (recorded tokens per served char) and flagged as estimated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextledger.read.messages import Message, RunMessages, rebuild_messages
from contextledger.read.snapshot import Run
from contextledger.window.notice import dropped_tool_names
from contextledger.window.policies import (
    SLIDING_WINDOW,
    Policy,
    drop_oldest_span,
    parse_policy,
    sliding_engages,
    token_budget_engages,
)
from contextledger.window.refusals import (
    Guards,
    current_request_index,
    is_result,
    ledger_fact_pins,
    plan_removal,
    standing_lookup,
    tool_result_pins,
)
from contextledger.window.turns import answered_call_ids, segment_turns, turn_count

#: What the recency pin's stand-down reads.
LAST_TOOL_RESULT_PIN = frozenset({"last-tool-result"})
#: What the fact pin's stand-down reads: the whole pin family.
ANY_PIN = frozenset({"last-tool-result", "ledger-fact"})

#: Standings by tool-call id, or a function of the iteration giving them.
Standings = Mapping[str, str] | Callable[[int], Mapping[str, str]]


def pin_is_blocking(records: Sequence[Mapping[str, Any]], reasons: frozenset[str]) -> bool:
    """The last two records both removed nothing and both named one of ``reasons``."""
    recent = list(records[-2:])
    return len(recent) == 2 and all(
        r["removedMessageCount"] == 0 and any(f["reason"] in reasons for f in r["refusals"])
        for r in recent
    )


@dataclass(frozen=True)
class VisitResult:
    """One window-stage visit: the record it filed (None: did not engage) and the window."""

    record: dict[str, Any] | None
    window: list[Message]


def window_visit(
    window: Sequence[Message],
    policy: Policy,
    *,
    iteration: int,
    measured: float | None,
    prior_records: Sequence[Mapping[str, Any]] = (),
    said: str | None = None,
    standings: Mapping[str, str] | None = None,
    stage_id: str = "",
    paused_tool_call_id: str | None = None,
    paused_check_in: bool = False,
) -> VisitResult:
    """What the window stage does before one model call.

    ``measured`` is the previous call's input tokens (None before the first
    call, or when it reported none). ``standings`` arms the ledger-fact pin
    (None: no findings ledger, as in 9.62). ``stage_id`` is what a notice this
    visit writes is attributed to when a later visit removes it.
    """
    window = list(window)
    if policy.kind == "none":
        return VisitResult(None, window)
    keep = policy.keep_recent_turns
    if policy.kind == "sliding":
        engaged = sliding_engages(turn_count(window), keep)
    else:
        engaged = token_budget_engages(measured, policy.threshold or 0)
    if not engaged:
        return VisitResult(None, window)
    turns = segment_turns(window)

    request = current_request_index(window, said)
    limit = policy.last_tool_results
    stand_down = limit > 0 and pin_is_blocking(prior_records, LAST_TOOL_RESULT_PIN)
    pins = tool_result_pins(turns, window, request) if limit > 0 and not stand_down else []
    fact_limit = policy.ledger_facts if standings is not None else 0
    fact_stand_down = fact_limit > 0 and pin_is_blocking(prior_records, ANY_PIN)
    standing_of = standing_lookup(standings)
    fact_pins = (
        ledger_fact_pins(turns, window, standing_of, request)
        if fact_limit > 0 and not fact_stand_down and standing_of is not None
        else []
    )
    guards = Guards(
        answered=answered_call_ids(window),
        current_request=request,
        paused_tool_call_id=paused_tool_call_id,
        paused_check_in=paused_check_in,
        tool_result_pins=tuple(pins),
        keep_last_tool_results=limit if pins else 0,
        ledger_fact_pins=tuple(fact_pins),
        keep_ledger_facts=fact_limit if fact_pins else 0,
    )
    plan = plan_removal(turns, keep, guards)
    strategy = policy.strategy or ""
    outcome = drop_oldest_span(window, turns, plan, iteration, strategy, stage_id)
    evicted = [window[i] for i in outcome.removed]
    removed_stage_ids: list[str] = []
    for message in evicted:
        if message.origin not in removed_stage_ids:
            removed_stage_ids.append(message.origin)

    record: dict[str, Any] = {"strategy": strategy, "iteration": iteration}
    if strategy == SLIDING_WINDOW:
        record["keepRecentTurns"] = keep
    else:
        record["measuredTokens"] = measured
        record["thresholdTokens"] = policy.threshold
        record["overBudget"] = True
        record["keepRecentTurns"] = keep
    record["removedStageIds"] = removed_stage_ids
    record["removedMessageCount"] = len(evicted)
    record["windowCharsBefore"] = outcome.chars_before
    record["windowCharsAfter"] = outcome.chars_after
    if strategy == SLIDING_WINDOW:
        record["turnsBefore"] = outcome.turns_before
        record["turnsAfter"] = outcome.turns_after
    record["refusals"] = outcome.refusals
    dropped = dropped_tool_names(evicted, window)
    if dropped:
        record["droppedObservations"] = dropped
    if stand_down:
        record["observations"] = {"pinned": [], "yielded": 0, "limit": limit, "standDown": True}
    elif plan.observations is not None:
        record["observations"] = plan.observations
    if fact_stand_down:
        record["ledgerFacts"] = {"pinned": [], "yielded": 0, "limit": fact_limit, "standDown": True}
    elif plan.ledger_facts is not None:
        record["ledgerFacts"] = plan.ledger_facts
    if standings is not None:
        # 9.113.0: a call the batch settlement never dispatched is no result, so it has
        # no standing to lose (``is_result``); before 9.113 no message carries the mark.
        rows = []
        for message in evicted:
            if is_result(message) and message.tool_call_id:
                row: dict[str, Any] = {"toolCallId": message.tool_call_id}
                if message.tool_call_id in standings:
                    row["standing"] = standings[message.tool_call_id]
                rows.append(row)
        if rows:
            record["droppedStandings"] = rows
    return VisitResult(record, outcome.window if outcome.window is not None else window)


# ── the loop ───────────────────────────────────────────────────────


def window_key(message: Message) -> Any:
    """Identity of a message across recorded and replayed windows.

    A message the run appended is itself (its stream index); a message a window
    stage wrote is its text, since a replay writes its own copy.
    """
    return ("authored", message.content) if message.window_authored else message.index


def same_window(a: Sequence[Message], b: Sequence[Message]) -> bool:
    if len(a) != len(b):
        return False
    return all(x is y or window_key(x) == window_key(y) for x, y in zip(a, b, strict=True))


@dataclass
class Visit:
    """The window stage's visit before one model call, as replayed."""

    ordinal: int
    iteration: int
    #: The record filed (None: the strategy did not engage).
    record: dict[str, Any] | None
    window_before: list[Message]
    #: The window the call was served.
    served: list[Message]
    #: Token budget only: the previous call's input tokens as the visit measured them.
    measured: float | None = None
    #: True when ``measured`` is an estimate (the previous window was counterfactual).
    measured_estimated: bool = False
    #: True when the previous call reported no tokens: the reference refuses to
    #: measure (``CompactionUnmeasurableError``); the replay does not engage.
    unmeasured: bool = False


@dataclass
class Replay:
    """A policy replayed over one run."""

    run_id: str
    policy: Policy
    visits: list[Visit] = field(default_factory=list)
    final_window: list[Message] = field(default_factory=list)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The WindowRecords, in the order filed (the reference's ``compactions``)."""
        return [v.record for v in self.visits if v.record is not None]

    @property
    def served(self) -> list[list[Message]]:
        """The window each model call was served, in call order."""
        return [v.served for v in self.visits]

    @property
    def estimated(self) -> bool:
        """True when some decision rested on estimated tokens."""
        return any(v.measured_estimated for v in self.visits)

    @property
    def unmeasured_iterations(self) -> list[int]:
        return [v.iteration for v in self.visits if v.unmeasured]


def _measure(
    stream: RunMessages, ordinal: int, served: Sequence[list[Message]], rate: float | None
) -> tuple[float | None, bool, bool]:
    """The previous call's input tokens: ``(measured, estimated, unmeasured)``."""
    if ordinal < 2:
        return None, False, False
    previous = stream.calls[ordinal - 2]
    if previous.input_tokens <= 0:
        return None, False, True
    replayed = served[ordinal - 2]
    if same_window(replayed, stream.window(previous.window_served)):
        return previous.input_tokens, False, False
    if rate is None:
        return None, False, True
    return round(rate * sum(m.chars for m in replayed)), True, False


def replay(
    run: Run | RunMessages,
    policy: str | Policy,
    standings: Standings | None = None,
) -> Replay:
    """Replay ``policy`` over a recorded run.

    ``standings`` (toolCallId → ``fact``/``open``/``noise``/``ruled-out``, or a
    function of the iteration returning that) arms the ledger-fact pin; without
    it the pin holds nothing, as in agentfootprint 9.62.
    """
    stream = run if isinstance(run, RunMessages) else rebuild_messages(run)
    policy = parse_policy(policy)
    rate = stream.tokens_per_char() if policy.kind == "token_budget" else None
    result = Replay(stream.run_id, policy)
    records: list[dict[str, Any]] = []
    window: list[Message] = []
    for call in stream.calls:
        window = window + stream.entering_before(call.ordinal)
        measured, estimated, unmeasured = (None, False, False)
        if policy.kind == "token_budget":
            measured, estimated, unmeasured = _measure(stream, call.ordinal, result.served, rate)
        filed = standings(call.iteration) if callable(standings) else standings
        visit = window_visit(
            window,
            policy,
            iteration=call.iteration,
            measured=measured,
            prior_records=records,
            said=stream.user_message,
            standings=filed,
            stage_id=call.window_stage_id or f"compact@{call.iteration}",
        )
        if visit.record is not None:
            records.append(visit.record)
        result.visits.append(
            Visit(
                ordinal=call.ordinal,
                iteration=call.iteration,
                record=visit.record,
                window_before=window,
                served=visit.window,
                measured=measured,
                measured_estimated=estimated,
                unmeasured=unmeasured,
            )
        )
        window = visit.window
    result.final_window = window + stream.entering_after_last_call()
    return result
