"""Which instrumentation records which scenarios, with which settings and span layout.

A family is one process: its instrumentations installed (usually one; several when an
application stacks them), one content-capture setting (the instrumentations read it from
the environment), one span processor. Its output file names start with the family's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
STABILITY = "OTEL_SEMCONV_STABILITY_OPT_IN"


# Where each instrumentation's instrumentor lives.
INSTRUMENTORS: dict[str, tuple[str, str]] = {
    "opentelemetry-instrumentation-genai-openai": (
        "opentelemetry.instrumentation.genai.openai",
        "OpenAIInstrumentor",
    ),
    "opentelemetry-instrumentation-genai-anthropic": (
        "opentelemetry.instrumentation.genai.anthropic",
        "AnthropicInstrumentor",
    ),
    "opentelemetry-instrumentation-genai-langchain": (
        "opentelemetry.instrumentation.genai.langchain",
        "LangChainInstrumentor",
    ),
    "openinference-instrumentation-openai": (
        "openinference.instrumentation.openai",
        "OpenAIInstrumentor",
    ),
    "opentelemetry-instrumentation-genai-openai-agents": (
        "opentelemetry.instrumentation.genai.openai_agents",
        "OpenAIAgentsInstrumentor",
    ),
    "openinference-instrumentation-anthropic": (
        "openinference.instrumentation.anthropic",
        "AnthropicInstrumentor",
    ),
    # OpenLLMetry's (Traceloop's), not the OpenTelemetry project's, despite the name.
    "opentelemetry-instrumentation-openai": (
        "opentelemetry.instrumentation.openai",
        "OpenAIInstrumentor",
    ),
    "opentelemetry-instrumentation-openai-v2": (
        "opentelemetry.instrumentation.openai_v2",
        "OpenAIInstrumentor",
    ),
}


# Options given to an instrumentor's instrument(): the Agents SDK's own exporter to
# OpenAI's servers is replaced, never used.
INSTRUMENT_OPTIONS: dict[str, dict[str, object]] = {
    "opentelemetry-instrumentation-genai-openai-agents": {"disable_openai_trace_export": True},
}


@dataclass(frozen=True)
class Family:
    """One recording process.

    ``root``: what wraps each agent invocation: ``invoke_agent`` (opentelemetry-util-genai's
    agent span, which also carries the conversation id), ``agent-span`` (a plain span of the
    application's own, as most users write), or ``openinference-agent`` (an OpenInference
    AGENT span; ``session.id`` set by ``using_session``).
    ``tool_spans``: whether each tool call runs inside an ``execute_tool`` (or OpenInference
    TOOL) span. ``export``: ``per-run`` (BatchSpanProcessor flushed after each run: about a
    line per trace), ``batched`` (flushed at the end: one line holds several traces),
    ``per-span`` (SimpleSpanProcessor: a line per span, a trace over many lines).
    ``rotate_in``: the scenario in whose middle the output moves to a second file.
    """

    name: str
    # openai (Chat Completions) | openai-responses (the Responses API) | anthropic |
    # langchain-openai (LangChain's ChatOpenAI) | openai-agents (the Agents SDK runs the
    # loop; the run's truth is then the fake server's exchanges).
    client: str
    # The PyPI distributions whose instrumentors are installed, in order (several: stacked).
    instrumentations: tuple[str, ...]
    env: dict[str, str]
    scenarios: tuple[str, ...]
    content_captured: bool
    # opentelemetry-instrumentation-openai-v2 never writes the tools a call offered.
    records_tool_definitions: bool = True
    root: str = "invoke_agent"
    tool_spans: bool = False
    export: str = "per-run"
    rotate_in: str | None = None
    # The SDK keeps 128 attributes a span by default (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT);
    # OpenInference flattens each tool and message into attributes of their own, so a big
    # tool set or a long run overflows it and the oldest (the tools) are dropped.
    span_attribute_limit: int | None = None
    # How many model-call spans the instrumentations write per model call: 2 when two
    # client instrumentations stack, 1 when a framework's suppresses its client's
    # (opentelemetry-util-genai does), 0 when none writes one. Checked by the tests.
    model_call_spans_per_call: int = 1
    # Recorded when no --families are named; False for test-only recordings kept elsewhere.
    default: bool = True
    # Needs the ``record-legacy`` environment (it imports an older opentelemetry-util-genai).
    legacy: bool = False
    notes: tuple[str, ...] = field(default=())


ALL_SCENARIOS = (
    "few-tools",
    "parallel-calls",
    "big-toolset",
    "long-run",
    "unoffered-tool",
    "conversation",
    "no-tools",
    "streamed",
)

FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="genai-openai",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-genai-openai",),
            env={CAPTURE: "span_only"},
            scenarios=ALL_SCENARIOS,
            content_captured=True,
            root="invoke_agent",
            tool_spans=True,
            export="per-run",
            rotate_in="long-run",
        ),
        Family(
            name="genai-openai-responses",
            client="openai-responses",
            instrumentations=("opentelemetry-instrumentation-genai-openai",),
            env={CAPTURE: "span_only"},
            scenarios=(
                "few-tools",
                "parallel-calls",
                "big-toolset",
                "unoffered-tool",
                "conversation",
                "no-tools",
            ),
            content_captured=True,
            root="invoke_agent",
            tool_spans=True,
        ),
        Family(
            name="genai-openai-nocontent",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-genai-openai",),
            env={},
            scenarios=("few-tools", "parallel-calls", "conversation"),
            content_captured=False,
            root="invoke_agent",
            tool_spans=True,
        ),
        Family(
            name="genai-anthropic",
            client="anthropic",
            instrumentations=("opentelemetry-instrumentation-genai-anthropic",),
            env={CAPTURE: "span_only"},
            scenarios=ALL_SCENARIOS,
            content_captured=True,
            root="invoke_agent",
            export="batched",
        ),
        Family(
            name="genai-anthropic-nocontent",
            client="anthropic",
            instrumentations=("opentelemetry-instrumentation-genai-anthropic",),
            env={},
            scenarios=("few-tools", "parallel-calls"),
            content_captured=False,
            root="agent-span",
        ),
        Family(
            name="openinference-openai",
            client="openai",
            instrumentations=("openinference-instrumentation-openai",),
            env={},
            scenarios=ALL_SCENARIOS,
            content_captured=True,
            root="openinference-agent",
            tool_spans=True,
            export="per-span",
            span_attribute_limit=100_000,
        ),
        Family(
            name="openinference-openai-hidden",
            client="openai",
            instrumentations=("openinference-instrumentation-openai",),
            env={
                "OPENINFERENCE_HIDE_INPUTS": "true",
                "OPENINFERENCE_HIDE_OUTPUTS": "true",
                "OPENINFERENCE_HIDE_INPUT_MESSAGES": "true",
                "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "true",
                "OPENINFERENCE_HIDE_LLM_TOOLS": "true",
            },
            scenarios=("few-tools", "parallel-calls"),
            content_captured=False,
            root="openinference-agent",
        ),
        Family(
            name="openinference-openai-default-limits",
            client="openai",
            instrumentations=("openinference-instrumentation-openai",),
            env={},
            scenarios=("big-toolset",),
            content_captured=True,
            root="openinference-agent",
            default=False,
            notes=(
                "the SDK's default limit of 128 attributes a span drops the oldest: "
                "most llm.tools.* of the 120 tools are missing (droppedAttributesCount > 0)",
            ),
        ),
        Family(
            name="openinference-openai-genai-semconv",
            client="openai",
            instrumentations=("openinference-instrumentation-openai",),
            env={"OPENINFERENCE_ENABLE_GENAI_SEMCONV": "true"},
            scenarios=("few-tools", "parallel-calls", "conversation"),
            content_captured=True,
            root="openinference-agent",
            span_attribute_limit=100_000,
            notes=("OpenInference with its opt-in gen_ai.* attributes beside its own",),
        ),
        Family(
            name="openinference-anthropic",
            client="anthropic",
            instrumentations=("openinference-instrumentation-anthropic",),
            env={},
            scenarios=("few-tools", "parallel-calls", "big-toolset", "conversation", "streamed"),
            content_captured=True,
            root="openinference-agent",
            span_attribute_limit=100_000,
        ),
        Family(
            name="openllmetry-openai",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-openai",),
            env={"TRACELOOP_TRACE_CONTENT": "true"},
            scenarios=(
                "few-tools",
                "parallel-calls",
                "big-toolset",
                "unoffered-tool",
                "conversation",
                "streamed",
            ),
            content_captured=True,
            root="agent-span",
            span_attribute_limit=100_000,
            notes=(
                "OpenLLMetry (Traceloop) publishes its instrumentation as "
                "opentelemetry-instrumentation-openai; it is not the OpenTelemetry project's",
            ),
        ),
        Family(
            name="genai-langchain",
            client="langchain-openai",
            instrumentations=("opentelemetry-instrumentation-genai-langchain",),
            env={CAPTURE: "span_only"},
            scenarios=(
                "few-tools",
                "parallel-calls",
                "big-toolset",
                "unoffered-tool",
                "conversation",
            ),
            content_captured=True,
            root="invoke_agent",
        ),
        Family(
            name="stacked-langchain-openai",
            client="langchain-openai",
            instrumentations=(
                "opentelemetry-instrumentation-genai-langchain",
                "opentelemetry-instrumentation-genai-openai",
            ),
            env={CAPTURE: "span_only"},
            scenarios=("few-tools", "parallel-calls", "unoffered-tool"),
            content_captured=True,
            root="invoke_agent",
            notes=(
                "the framework and the client both instrumented, as apps often do: "
                "opentelemetry-util-genai suppresses the client's span inside the framework's",
            ),
        ),
        Family(
            name="stacked-genai-openinference",
            client="openai",
            instrumentations=(
                "opentelemetry-instrumentation-genai-openai",
                "openinference-instrumentation-openai",
            ),
            env={CAPTURE: "span_only"},
            scenarios=("few-tools", "parallel-calls"),
            content_captured=True,
            root="invoke_agent",
            span_attribute_limit=100_000,
            model_call_spans_per_call=2,
            notes=("two client instrumentations at once: each model call is two spans",),
        ),
        Family(
            name="openai-agents-sdk",
            client="openai-agents",
            instrumentations=(
                "opentelemetry-instrumentation-genai-openai-agents",
                "opentelemetry-instrumentation-genai-openai",
            ),
            env={CAPTURE: "span_only"},
            scenarios=("few-tools", "parallel-calls", "big-toolset"),
            content_captured=True,
            root="agent-span",
            notes=(
                "the Agents SDK's instrumentation writes the workflow, agent and tool spans; "
                "the model calls come from the OpenAI client's, as its source says to set up",
            ),
        ),
        Family(
            name="openai-agents-sdk-alone",
            client="openai-agents",
            instrumentations=("opentelemetry-instrumentation-genai-openai-agents",),
            env={CAPTURE: "span_only"},
            scenarios=("few-tools",),
            content_captured=True,
            records_tool_definitions=False,
            model_call_spans_per_call=0,
            root="agent-span",
            notes=("the Agents SDK's instrumentation alone writes no model-call span",),
        ),
        Family(
            name="genai-openai-huge-attribute",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-genai-openai",),
            env={CAPTURE: "span_only"},
            scenarios=("huge-result",),
            content_captured=True,
            root="invoke_agent",
            tool_spans=True,
            default=False,
            notes=(
                "test-only: gen_ai.input.messages of the second call and the tool span's "
                "gen_ai.tool.call.result hold a ~376 kB tool result",
            ),
        ),
        Family(
            name="openai-v2-semconv-1.30",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-openai-v2",),
            env={CAPTURE: "true"},
            scenarios=("few-tools", "parallel-calls", "unoffered-tool", "conversation"),
            content_captured=True,
            records_tool_definitions=False,
            root="agent-span",
            legacy=True,
            notes=(
                "semconv 1.30 path: captured content goes to log events, which these trace "
                "files do not hold; the spans carry no messages and no tool definitions",
            ),
        ),
        Family(
            name="openai-v2-latest",
            client="openai",
            instrumentations=("opentelemetry-instrumentation-openai-v2",),
            env={CAPTURE: "span_only", STABILITY: "gen_ai_latest_experimental"},
            scenarios=("few-tools", "parallel-calls", "unoffered-tool", "conversation"),
            content_captured=True,
            records_tool_definitions=False,
            root="agent-span",
            legacy=True,
            notes=("messages on the spans, but never the tool definitions",),
        ),
    )
}
