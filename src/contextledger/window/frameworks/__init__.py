"""Other frameworks' retention policies, replayed on agentfootprint's recorded runs.

Each policy is a frozen dataclass with a canonical ``.spec``, a ``name`` and
``window(history, *, tokens_of)``: the messages the framework would send at a model
call, given every message the run recorded up to that call. Messages a policy
rewrites in place are new :class:`Message` objects with ``edit`` set
(``placeholder``, ``preview``, ``summary``); kept messages are the same objects;
removed ones are absent. :func:`replay_framework` walks a run's calls; a policy that
writes its edits back to the history it keeps (LangChain's summarization, Mastra's
token limiter) carries them to the next call.

Specs: ``name:key=value,key=value``, lists with ``|`` (see :data:`FRAMEWORK_POLICIES`
and docs/window-policies.md, "Other frameworks' policies").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contextledger.read.messages import Message, RunMessages
from contextledger.window.frameworks._common import (
    FrameworkPolicy,
    FrameworkSpecError,
    Key,
    TokensOf,
    estimated_tokens_of,
)
from contextledger.window.frameworks._history import run_history
from contextledger.window.frameworks.anthropic import AnthropicClearToolUses
from contextledger.window.frameworks.autogen import AutoGenBuffered, AutoGenHeadTail
from contextledger.window.frameworks.langchain import (
    LangChainClearToolUses,
    LangChainSummarize,
    LangChainTrim,
)
from contextledger.window.frameworks.mastra import MastraTokenLimiter, MastraToolCallFilter
from contextledger.window.frameworks.openai_agents import OpenAIToolOutputTrimmer
from contextledger.window.policies import Policy, PolicySpecError, parse_policy

#: Every framework policy by its spec name, in the order docs/window-policies.md lists them.
FRAMEWORK_POLICIES: dict[str, type[FrameworkPolicy]] = {
    cls.NAME: cls
    for cls in (
        AnthropicClearToolUses,
        LangChainTrim,
        LangChainClearToolUses,
        LangChainSummarize,
        OpenAIToolOutputTrimmer,
        AutoGenBuffered,
        AutoGenHeadTail,
        MastraToolCallFilter,
        MastraTokenLimiter,
    )
}

_ALLOWED_NAMES = "framework policies: " + ", ".join(FRAMEWORK_POLICIES)


def framework_name(spec: str) -> str | None:
    """The framework policy a spec names (None: not one of theirs)."""
    name = spec.strip().partition(":")[0].strip().lower()
    return name if name in FRAMEWORK_POLICIES else None


class NotReplayedByWhatif(PolicySpecError):
    """A framework spec given where only agentfootprint's policies replay (``whatif``)."""

    def __init__(self, spec: str, name: str) -> None:
        self.spec = spec
        ValueError.__init__(
            self,
            f"window policy {spec!r} is {name}, another framework's policy: whatif replays "
            "agentfootprint's (none, sliding, token_budget); `contextledger compare` replays it",
        )


def refuse_framework_spec(spec: object) -> None:
    """Raise :class:`NotReplayedByWhatif` when ``spec`` names another framework's policy."""
    name = framework_name(spec) if isinstance(spec, str) else None
    if isinstance(spec, FrameworkPolicy):
        name = spec.name
    if name is not None:
        raise NotReplayedByWhatif(str(spec), name)


def parse_framework_policy(spec: str | FrameworkPolicy) -> FrameworkPolicy:
    """Parse a framework policy spec.

    >>> parse_framework_policy("autogen_head_tail:head_size=2,tail_size=8").spec
    'autogen_head_tail:head_size=2,tail_size=8'
    >>> parse_framework_policy("openai_trim").spec
    'openai_trim:recent_turns=2,max_output_chars=500,preview_chars=200'
    """
    if isinstance(spec, FrameworkPolicy):
        return spec
    if not isinstance(spec, str):
        raise FrameworkSpecError(repr(spec), "a policy spec is a string", _ALLOWED_NAMES)
    name, _, rest = spec.strip().partition(":")
    cls = FRAMEWORK_POLICIES.get(name.strip().lower())
    if cls is None:
        raise FrameworkSpecError(spec, f"unknown framework policy {name.strip()!r}", _ALLOWED_NAMES)
    return cls.from_params(spec, rest)


def parse_any_policy(spec: str | Policy | FrameworkPolicy) -> Policy | FrameworkPolicy:
    """agentfootprint's policy (``none``, ``sliding:…``, ``token_budget:…``) or another
    framework's, by the name the spec starts with."""
    if isinstance(spec, Policy | FrameworkPolicy):
        return spec
    if isinstance(spec, str) and framework_name(spec) is not None:
        return parse_framework_policy(spec)
    try:
        return parse_policy(spec)
    except PolicySpecError as error:
        if str(error).startswith(f"window policy {spec!r}: unknown strategy"):
            name = str(spec).strip().partition(":")[0].strip()
            problem = f"unknown policy {name!r}: not agentfootprint's nor another framework's"
            allowed = f"agentfootprint's: none, sliding, token_budget; {_ALLOWED_NAMES}"
            raise FrameworkSpecError(str(spec), problem, allowed) from None
        raise


@dataclass
class FrameworkReplay:
    """A framework policy replayed over one run."""

    run_id: str
    policy: FrameworkPolicy
    #: The window each model call was served, in call order.
    served: list[list[Message]] = field(default_factory=list)
    #: The history the framework holds at the end (its edits included where it keeps
    #: them), with what the run appended after its last call.
    final_window: list[Message] = field(default_factory=list)


def replay_framework(
    stream: RunMessages,
    policy: str | FrameworkPolicy,
    tokens_of: TokensOf | None = None,
) -> FrameworkReplay:
    """Replay a framework policy over a run's stream, one model call at a time.

    ``tokens_of`` counts a message's tokens; by default an **estimate** at the run's
    own tokens per char (:func:`estimated_tokens_of`). The run's histories and token
    counts are measured once for every policy replayed over it with the same
    ``tokens_of`` (:func:`~contextledger.window.frameworks._history.run_history`); the
    windows served may be lists shared between those replays: read them, never change them.
    """
    policy = parse_framework_policy(policy)
    count = tokens_of or estimated_tokens_of(stream)
    served, history = policy.replay(run_history(stream, count))
    final_window = history + stream.entering_after_last_call()
    return FrameworkReplay(stream.run_id, policy, served, final_window)


def policy_table() -> list[dict[str, str]]:
    """One row per policy key: ``policy``, ``key``, ``default``, ``meaning``, ``source``."""
    rows = []
    for name, cls in FRAMEWORK_POLICIES.items():
        for key in cls.KEYS:
            rows.append(
                {
                    "policy": name,
                    "key": key.name,
                    "default": key.default_text,
                    "meaning": key.doc,
                    "source": cls.SOURCE,
                }
            )
    return rows


__all__ = [
    "FRAMEWORK_POLICIES",
    "AnthropicClearToolUses",
    "AutoGenBuffered",
    "AutoGenHeadTail",
    "FrameworkPolicy",
    "FrameworkReplay",
    "FrameworkSpecError",
    "Key",
    "LangChainClearToolUses",
    "LangChainSummarize",
    "LangChainTrim",
    "MastraTokenLimiter",
    "MastraToolCallFilter",
    "NotReplayedByWhatif",
    "OpenAIToolOutputTrimmer",
    "estimated_tokens_of",
    "framework_name",
    "parse_any_policy",
    "parse_framework_policy",
    "policy_table",
    "refuse_framework_spec",
    "replay_framework",
]
