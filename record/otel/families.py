"""Which instrumentation records which scenarios, with which settings and span layout.

A family is one process: one instrumentation installed, one content-capture setting (the
instrumentations read it from the environment), one span processor. Its output file names
start with the family's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
STABILITY = "OTEL_SEMCONV_STABILITY_OPT_IN"


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
    provider: str  # openai | anthropic
    instrumentation: str  # the PyPI distribution
    module: str  # where its instrumentor lives
    instrumentor: str
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
            provider="openai",
            instrumentation="opentelemetry-instrumentation-genai-openai",
            module="opentelemetry.instrumentation.genai.openai",
            instrumentor="OpenAIInstrumentor",
            env={CAPTURE: "span_only"},
            scenarios=ALL_SCENARIOS,
            content_captured=True,
            root="invoke_agent",
            tool_spans=True,
            export="per-run",
            rotate_in="long-run",
        ),
        Family(
            name="genai-openai-nocontent",
            provider="openai",
            instrumentation="opentelemetry-instrumentation-genai-openai",
            module="opentelemetry.instrumentation.genai.openai",
            instrumentor="OpenAIInstrumentor",
            env={},
            scenarios=("few-tools", "parallel-calls", "conversation"),
            content_captured=False,
            root="invoke_agent",
            tool_spans=True,
        ),
        Family(
            name="genai-anthropic",
            provider="anthropic",
            instrumentation="opentelemetry-instrumentation-genai-anthropic",
            module="opentelemetry.instrumentation.genai.anthropic",
            instrumentor="AnthropicInstrumentor",
            env={CAPTURE: "span_only"},
            scenarios=ALL_SCENARIOS,
            content_captured=True,
            root="invoke_agent",
            export="batched",
        ),
        Family(
            name="genai-anthropic-nocontent",
            provider="anthropic",
            instrumentation="opentelemetry-instrumentation-genai-anthropic",
            module="opentelemetry.instrumentation.genai.anthropic",
            instrumentor="AnthropicInstrumentor",
            env={},
            scenarios=("few-tools", "parallel-calls"),
            content_captured=False,
            root="agent-span",
        ),
        Family(
            name="openinference-openai",
            provider="openai",
            instrumentation="openinference-instrumentation-openai",
            module="openinference.instrumentation.openai",
            instrumentor="OpenAIInstrumentor",
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
            provider="openai",
            instrumentation="openinference-instrumentation-openai",
            module="openinference.instrumentation.openai",
            instrumentor="OpenAIInstrumentor",
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
            provider="openai",
            instrumentation="openinference-instrumentation-openai",
            module="openinference.instrumentation.openai",
            instrumentor="OpenAIInstrumentor",
            env={},
            scenarios=("big-toolset",),
            content_captured=True,
            root="openinference-agent",
            notes=(
                "the SDK's default limit of 128 attributes a span drops the oldest: "
                "most llm.tools.* of the 120 tools are missing (droppedAttributesCount > 0)",
            ),
        ),
        Family(
            name="openai-v2-semconv-1.30",
            provider="openai",
            instrumentation="opentelemetry-instrumentation-openai-v2",
            module="opentelemetry.instrumentation.openai_v2",
            instrumentor="OpenAIInstrumentor",
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
            provider="openai",
            instrumentation="opentelemetry-instrumentation-openai-v2",
            module="opentelemetry.instrumentation.openai_v2",
            instrumentor="OpenAIInstrumentor",
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
