"""Window policies: their specs, when they engage, and the drop they share.

A policy is written as a string:

* ``none`` — no window strategy;
* ``sliding:keep=N`` — agentfootprint's ``slidingWindow({keepRecentTurns: N})``;
* ``token_budget:threshold=T[,keep=N]`` — ``tokenBudget({thresholdTokens: T,
  keepRecentTurns: N})``, keep 6 when not given;

each windowed one optionally with ``,last_tool_results=N`` (the
``keepLastToolResults`` ceiling, default 2; ``0`` or ``false`` = off) and
``,ledger_facts=N`` (the newer ``keepLedgerFacts`` ceiling, default 4; it pins
only turns the model filed as ``fact``, so without standings it pins nothing).

Every number is at most :data:`MAX_SPEC_NUMBER` (a billion turns, results or tokens, far
past any context window): a larger one is refused by name rather than overflowing the
replay's 64-bit arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.read.messages import Message
from contextledger.window.notice import dropped_tool_names, fitting_notice
from contextledger.window.refusals import RemovalPlan
from contextledger.window.turns import Turn, segment_turns, window_chars

SLIDING_WINDOW = "sliding-window"
TOKEN_BUDGET = "token-budget"
DEFAULT_KEEP_RECENT_TURNS = 6
DEFAULT_LAST_TOOL_RESULTS = 2
DEFAULT_LEDGER_FACTS = 4
#: The largest number any policy spec takes (agentfootprint's and the other frameworks').
MAX_SPEC_NUMBER = 1_000_000_000

_KINDS = ("none", "sliding", "token_budget")
_ALLOWED = (
    "allowed: 'none', 'sliding:keep=N', 'token_budget:threshold=T[,keep=N]', the windowed "
    "ones optionally with ',last_tool_results=N' (default 2, 0 or false = off) and "
    "',ledger_facts=N' (default 4, 0 or false = off); N whole numbers, keep >= 1, T > 0; "
    f"each at most {MAX_SPEC_NUMBER}"
)


class PolicySpecError(ValueError):
    """A policy spec that cannot be parsed; the message names it and says what is allowed."""

    def __init__(self, spec: str, problem: str) -> None:
        self.spec = spec
        super().__init__(f"window policy {spec!r}: {problem} ({_ALLOWED})")


@dataclass(frozen=True)
class Policy:
    """One window policy: which strategy, its depth and budget, and the two pin ceilings."""

    kind: str  # none / sliding / token_budget
    keep: int | None = None
    threshold: float | None = None
    last_tool_results: int = DEFAULT_LAST_TOOL_RESULTS
    ledger_facts: int = DEFAULT_LEDGER_FACTS

    @property
    def strategy(self) -> str | None:
        """The ``WindowRecord.strategy`` it files (None for ``none``)."""
        return {"sliding": SLIDING_WINDOW, "token_budget": TOKEN_BUDGET}.get(self.kind)

    @property
    def keep_recent_turns(self) -> int:
        if self.keep is not None:
            return self.keep
        return DEFAULT_KEEP_RECENT_TURNS

    @property
    def spec(self) -> str:
        """The canonical spec string (every parameter spelled out)."""
        if self.kind == "none":
            return "none"
        parts = []
        if self.kind == "token_budget":
            parts.append(f"threshold={_number(self.threshold)}")
        parts.append(f"keep={self.keep_recent_turns}")
        parts.append(f"last_tool_results={self.last_tool_results}")
        parts.append(f"ledger_facts={self.ledger_facts}")
        return f"{self.kind}:{','.join(parts)}"

    def __str__(self) -> str:
        return self.spec


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _whole(spec: str, key: str, text: str, *, minimum: int, false_ok: bool) -> int:
    if false_ok and text.lower() == "false":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise PolicySpecError(spec, f"{key}={text!r} is not a whole number") from None
    if value < minimum:
        raise PolicySpecError(spec, f"{key}={value} is below {minimum}")
    if value > MAX_SPEC_NUMBER:
        raise PolicySpecError(spec, f"{key}={value} is above {MAX_SPEC_NUMBER}")
    return value


def parse_policy(spec: str | Policy) -> Policy:
    """Parse a policy spec.

    >>> parse_policy("sliding:keep=6").spec
    'sliding:keep=6,last_tool_results=2,ledger_facts=4'
    >>> parse_policy("token_budget:threshold=500,last_tool_results=false").spec
    'token_budget:threshold=500,keep=6,last_tool_results=0,ledger_facts=4'
    """
    if isinstance(spec, Policy):
        return spec
    if not isinstance(spec, str):
        raise PolicySpecError(repr(spec), "a policy spec is a string")
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower().replace("-", "_")
    if kind == "token_budget" or kind == "tokenbudget":
        kind = "token_budget"
    if kind == "sliding_window":
        kind = "sliding"
    if kind not in _KINDS:
        raise PolicySpecError(spec, f"unknown strategy {kind!r}")
    params: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip().lower()
            if not eq or not key or not value.strip():
                raise PolicySpecError(spec, f"{item.strip()!r} is not key=value")
            if key in params:
                raise PolicySpecError(spec, f"{key} is given twice")
            params[key] = value.strip()
    if kind == "none":
        if params:
            raise PolicySpecError(spec, "'none' takes no parameters")
        return Policy("none")
    allowed = {"keep", "last_tool_results", "ledger_facts"}
    if kind == "token_budget":
        allowed.add("threshold")
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise PolicySpecError(spec, f"{kind} does not take {', '.join(unknown)}")
    keep = DEFAULT_KEEP_RECENT_TURNS
    if "keep" in params:
        keep = _whole(spec, "keep", params["keep"], minimum=1, false_ok=False)
    elif kind == "sliding":
        raise PolicySpecError(spec, "sliding needs keep=N (it has no default)")
    threshold = None
    if kind == "token_budget":
        if "threshold" not in params:
            raise PolicySpecError(spec, "token_budget needs threshold=T (it has no default)")
        try:
            threshold = float(params["threshold"])
        except ValueError:
            raise PolicySpecError(
                spec, f"threshold={params['threshold']!r} is not a number"
            ) from None
        if not math.isfinite(threshold) or threshold <= 0:
            raise PolicySpecError(spec, f"threshold={params['threshold']} is not a positive number")
        if threshold > MAX_SPEC_NUMBER:
            raise PolicySpecError(
                spec, f"threshold={params['threshold']} is above {MAX_SPEC_NUMBER}"
            )
        if threshold.is_integer():
            threshold = int(threshold)
    last = DEFAULT_LAST_TOOL_RESULTS
    if "last_tool_results" in params:
        last = _whole(
            spec, "last_tool_results", params["last_tool_results"], minimum=0, false_ok=True
        )
    facts = DEFAULT_LEDGER_FACTS
    if "ledger_facts" in params:
        facts = _whole(spec, "ledger_facts", params["ledger_facts"], minimum=0, false_ok=True)
    return Policy(kind, keep, threshold, last, facts)


def policy_from_config(
    window: Mapping[str, Any] | None, keep_last_tool_results: Any = None
) -> Policy:
    """The policy an agent was built with, from its window options as the corpus states them.

    ``window`` is ``None`` or ``{strategy, keepRecentTurns?, thresholdTokens?}``;
    ``keep_last_tool_results`` is ``False``, a number, or anything else for the default.
    """
    if keep_last_tool_results is False:
        last = 0
    elif isinstance(keep_last_tool_results, int) and not isinstance(keep_last_tool_results, bool):
        last = keep_last_tool_results
    else:
        last = DEFAULT_LAST_TOOL_RESULTS
    if not window:
        return Policy("none")
    strategy = window.get("strategy")
    if strategy == SLIDING_WINDOW:
        return Policy("sliding", int(window["keepRecentTurns"]), None, last)
    if strategy == TOKEN_BUDGET:
        keep = int(window.get("keepRecentTurns") or DEFAULT_KEEP_RECENT_TURNS)
        return Policy("token_budget", keep, window["thresholdTokens"], last)
    raise ValueError(f"no replay for window strategy {strategy!r}")


# ── engagement ─────────────────────────────────────────────────────


def sliding_engages(turn_count: int, keep: int) -> bool:
    """slidingWindow engages when the window has more turns than it keeps."""
    return turn_count > keep


def token_budget_engages(measured: float | None, threshold: float) -> bool:
    """tokenBudget engages when the last call's input tokens exceed the budget (never before it)."""
    return measured is not None and measured > threshold


# ── the drop both strategies share ─────────────────────────────────


@dataclass(frozen=True)
class DropOutcome:
    """What one drop did: the refusals, and the new window when it changed."""

    refusals: list[dict[str, Any]]
    window: list[Message] | None
    removed: list[int]  # window indices that left, in order
    inserted_notice: Message | None
    head_count: int
    chars_before: int
    chars_after: int
    turns_before: int
    turns_after: int


def drop_oldest_span(
    window: Sequence[Message],
    turns: Sequence[Turn],
    plan: RemovalPlan,
    iteration: int,
    strategy: str,
    notice_origin: str = "",
) -> DropOutcome:
    """Remove the planned span; put a notice in its place when it reached the front.

    The notice is the first of rich / plain that is smaller than the span; with
    neither, the span still leaves silently unless the message that would head
    the window is not a user turn (then nothing leaves: ``replacement-not-smaller``).
    """
    before = window_chars(window)

    def nothing(refusals: list[dict[str, Any]]) -> DropOutcome:
        return DropOutcome(refusals, None, [], None, 0, before, before, len(turns), len(turns))

    if plan.empty:
        return nothing(plan.refusals)
    start = turns[plan.first].start
    end = turns[plan.last].end
    head, span, tail = list(window[:start]), list(window[start:end]), list(window[end:])
    kept_request_at_head = plan.first == 1 and any(
        r["reason"] == "current-request" and r["turnIndex"] == 0 for r in plan.refusals
    )
    notice: Message | None = None
    if start == 0 or kept_request_at_head:
        new_head = head[0] if head else (tail[0] if tail else None)
        wire_needs_notice = new_head is None or new_head.role != "user"
        text = fitting_notice(
            window_chars(span),
            len(span),
            iteration,
            strategy,
            kept_request_at_head,
            dropped_tool_names(span, window),
        )
        if text is not None:
            notice = Message("user", text, origin=notice_origin, window_authored=True)
        elif wire_needs_notice:
            turn = turns[plan.first]
            return nothing(
                [
                    {
                        "reason": "replacement-not-smaller",
                        "turnIndex": turn.index,
                        "messageIndex": start,
                    },
                    *plan.refusals,
                ]
            )
    new_window = head + ([notice] if notice is not None else []) + tail
    return DropOutcome(
        refusals=plan.refusals,
        window=new_window,
        removed=list(range(start, end)),
        inserted_notice=notice,
        head_count=len(head),
        chars_before=before,
        chars_after=window_chars(new_window),
        turns_before=len(turns),
        turns_after=len(segment_turns(new_window)),
    )
