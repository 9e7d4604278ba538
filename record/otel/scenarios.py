"""The scripted agent runs, independent of provider: which tools each model call offers
and what the fake model answers.

Every scenario is fixed content plus a seeded random generator, so re-recording gives the
same structure (offers, calls, messages); only ids and times change.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fake_model_server import Reply, ToolCall

SEED = 20260101


@dataclass(frozen=True)
class Tool:
    """A function the agent offers to the model: name, description, JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One model call: the tools offered on it, and the model's scripted reply."""

    offered: tuple[str, ...]
    reply: Reply


@dataclass(frozen=True)
class Segment:
    """One agent invocation (one trace): a user message and the model calls that answer it."""

    user_message: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Scenario:
    """A run: its name, what it is for, its tools, and one or more segments.

    Several segments share one conversation id: the run is the conversation, across traces.
    """

    name: str
    purpose: str
    system: str
    tools: tuple[Tool, ...]
    segments: tuple[Segment, ...]
    conversation: bool = False
    stream: bool = False
    # When set, every tool result is this text (a log dump, say) instead of "ok".
    result_text: str | None = None

    def tool(self, name: str) -> Tool | None:
        return next((tool for tool in self.tools if tool.name == name), None)


def _schema(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }


BASIC_TOOLS = (
    Tool("get_weather", "Current weather for a city.", _schema(city="string")),
    Tool("search_docs", "Search the product documentation.", _schema(query="string")),
    Tool("read_file", "Read a file from the workspace.", _schema(path="string")),
    Tool("send_email", "Send an email to a colleague.", _schema(to="string", body="string")),
    Tool("run_sql", "Run a read-only SQL query.", _schema(query="string", limit="integer")),
    Tool("create_ticket", "Open a support ticket.", _schema(title="string", priority="string")),
)

_MCP_SERVERS = (
    "github",
    "jira",
    "slack",
    "postgres",
    "filesystem",
    "browser",
    "calendar",
    "drive",
    "notion",
    "sentry",
    "stripe",
    "kubernetes",
)
_MCP_VERBS = (
    "list",
    "get",
    "create",
    "update",
    "delete",
    "search",
    "comment",
    "archive",
    "export",
    "assign",
)
_MCP_NOUNS = ("item", "record", "thread", "page", "event", "issue", "file", "object")
_PARAM_KINDS = ("string", "integer", "boolean", "number")


def mcp_tools(count: int, rng: random.Random) -> tuple[Tool, ...]:
    """A big tool set named as MCP clients name them (``server__verb_noun``)."""
    tools = []
    for index in range(count):
        server = _MCP_SERVERS[index % len(_MCP_SERVERS)]
        verb = _MCP_VERBS[(index // len(_MCP_SERVERS)) % len(_MCP_VERBS)]
        noun = rng.choice(_MCP_NOUNS)
        params = {
            f"{noun}_{field}": rng.choice(_PARAM_KINDS)
            for field in ("id", "scope", "note")[: rng.randint(1, 3)]
        }
        description = f"{verb.capitalize()} a {noun} in {server} (MCP server {server})."
        tools.append(Tool(f"{server}__{verb}_{noun}", description, _schema(**params)))
    return tuple(tools)


class _Ids:
    """Tool call ids in the provider's style, numbered within the run."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count:04d}"


def _calls(ids: _Ids, *calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(ids(), name, args) for name, args in calls))


def _names(tools: tuple[Tool, ...]) -> tuple[str, ...]:
    return tuple(tool.name for tool in tools)


SYSTEM = "You are a careful assistant. Use the tools when they help; answer briefly."


def few_tools(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS[:4]
    offered = _names(tools)
    steps = (
        Step(offered, _calls(ids, ("get_weather", {"city": "Paris"}))),
        Step(offered, _calls(ids, ("search_docs", {"query": "umbrella policy"}))),
        Step(offered, Reply(text="It rains in Paris; the policy lends umbrellas at the desk.")),
    )
    return Scenario(
        "few-tools",
        "four tools offered on every call, two of them called once each",
        SYSTEM,
        tools,
        (Segment("Do I need an umbrella in Paris, and can I borrow one?", steps),),
    )


def parallel_calls(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS
    offered = _names(tools)
    steps = (
        Step(
            offered,
            _calls(
                ids,
                ("get_weather", {"city": "Oslo"}),
                ("get_weather", {"city": "Lisbon"}),
                ("search_docs", {"query": "travel budget"}),
            ),
        ),
        Step(
            offered,
            _calls(
                ids,
                ("read_file", {"path": "trips/oslo.md"}),
                ("read_file", {"path": "trips/lisbon.md"}),
            ),
        ),
        Step(offered, Reply(text="Lisbon: warmer, and within the travel budget.")),
    )
    return Scenario(
        "parallel-calls",
        "six tools offered; three calls in one reply (one tool twice), then two in one reply",
        SYSTEM,
        tools,
        (Segment("Oslo or Lisbon for the offsite? Check weather, budget and our notes.", steps),),
    )


def big_toolset(ids: _Ids, rng: random.Random) -> Scenario:
    tools = mcp_tools(120, rng)
    offered = _names(tools)
    used = rng.sample(offered, 3)
    steps = (
        Step(offered, _calls(ids, (used[0], {}))),
        Step(offered, _calls(ids, (used[1], {}), (used[0], {}))),
        Step(offered, _calls(ids, (used[2], {}))),
        Step(offered, Reply(text="Done: the three records are up to date.")),
    )
    return Scenario(
        "big-toolset",
        "120 MCP-style tools offered on every call, three of them used (one twice)",
        SYSTEM,
        tools,
        (Segment("Sync the open items across our tools.", steps),),
    )


def unoffered_tool(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS[:4]
    steps = (
        Step(("get_weather", "search_docs"), _calls(ids, ("get_weather", {"city": "Rome"}))),
        Step(
            ("search_docs", "read_file"),
            _calls(ids, ("get_weather", {"city": "Milan"}), ("read_file", {"path": "rome.md"})),
        ),
        Step(("search_docs", "read_file"), _calls(ids, ("delete_everything", {"confirm": True}))),
        Step(("search_docs", "read_file"), Reply(text="Rome is sunny; I did not delete anything.")),
    )
    return Scenario(
        "unoffered-tool",
        "the offered set changes between calls; the model calls get_weather after it was "
        "withdrawn, and delete_everything, which no call offered (the agent refuses to run it)",
        SYSTEM,
        tools,
        (Segment("Weather in Rome and Milan, and clean up old notes.", steps),),
    )


def long_run(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS
    offered = _names(tools)
    arguments = {
        "get_weather": {"city": "Bergen"},
        "search_docs": {"query": "incident"},
        "read_file": {"path": "log.txt"},
        "send_email": {"to": "ops@example.com", "body": "update"},
        "run_sql": {"query": "select 1", "limit": 5},
    }
    steps = []
    for _ in range(29):
        name = rng.choice(sorted(arguments))
        steps.append(Step(offered, _calls(ids, (name, arguments[name]))))
    steps.append(Step(offered, Reply(text="Incident closed after 29 checks.")))
    return Scenario(
        "long-run",
        "30 model calls over six tools, one tool call per call (create_ticket never used)",
        SYSTEM,
        tools,
        (Segment("Work the incident until it is closed.", tuple(steps)),),
    )


def conversation(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS[:4]
    offered = _names(tools)
    first = (
        Step(offered, _calls(ids, ("get_weather", {"city": "Madrid"}))),
        Step(offered, Reply(text="Madrid is hot today.")),
    )
    second = (
        Step(offered, _calls(ids, ("send_email", {"to": "team@example.com", "body": "hot"}))),
        Step(offered, Reply(text="I told the team.")),
    )
    return Scenario(
        "conversation",
        "two user turns, each its own trace, joined by one conversation id",
        SYSTEM,
        tools,
        (Segment("Weather in Madrid?", first), Segment("Tell the team.", second)),
        conversation=True,
    )


def no_tools(ids: _Ids, rng: random.Random) -> Scenario:
    steps = (Step((), Reply(text="Forty-two.")),)
    return Scenario(
        "no-tools",
        "one model call offering no tools at all",
        SYSTEM,
        (),
        (Segment("What is six times seven?", steps),),
    )


def streamed(ids: _Ids, rng: random.Random) -> Scenario:
    base = few_tools(ids, rng)
    return Scenario(
        "streamed",
        "few-tools again, every reply streamed",
        base.system,
        base.tools,
        base.segments,
        stream=True,
    )


def huge_result(ids: _Ids, rng: random.Random) -> Scenario:
    tools = BASIC_TOOLS[:4]
    offered = _names(tools)
    words = ("error", "retry", "timeout", "disk", "ok", "GET", "/api/v1/items", "503", "user")
    lines = [
        f"2026-01-01T00:{index // 60 % 60:02d}:{index % 60:02d}Z "
        + " ".join(rng.choice(words) for _ in range(12))
        for index in range(4000)
    ]
    steps = (
        Step(offered, _calls(ids, ("read_file", {"path": "logs/service.log"}))),
        Step(offered, Reply(text="The log shows repeated 503s after the disk filled up.")),
    )
    return Scenario(
        "huge-result",
        "a tool result of about 376 kB (a log dump), so the next call's input messages "
        "attribute is that big",
        SYSTEM,
        tools,
        (Segment("Why did the service fail? Read the log.", steps),),
        result_text="\n".join(lines),
    )


ScenarioFactory = Callable[[_Ids, random.Random], Scenario]

SCENARIOS: dict[str, ScenarioFactory] = {
    "few-tools": few_tools,
    "parallel-calls": parallel_calls,
    "big-toolset": big_toolset,
    "unoffered-tool": unoffered_tool,
    "long-run": long_run,
    "conversation": conversation,
    "no-tools": no_tools,
    "streamed": streamed,
    "huge-result": huge_result,
}


def build(name: str, *, call_id_prefix: str) -> Scenario:
    """The scenario ``name``, its random choices seeded by its name (stable across runs)."""
    rng = random.Random(f"{SEED}:{name}")
    return SCENARIOS[name](_Ids(call_id_prefix), rng)
