"""Record one family's scenarios: ``python record_family.py FAMILY TRACES_DIR TRUTH_FILE``.

Sets the family's environment, installs its instrumentation around the real client, runs
each scenario against the fake model server and writes ``TRACES_DIR/FAMILY*.jsonl`` (OTLP
JSON Lines, by opentelemetry-exporter-otlp-json-file) and ``TRUTH_FILE`` (what the agent
sent and received; never read back from the spans). ``record.py`` runs one such process
per family, because instrumentations patch the same client modules.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from agent_loops import MODEL_ANTHROPIC, MODEL_OPENAI
from families import FAMILIES, INSTRUMENT_OPTIONS, INSTRUMENTORS, Family


@dataclass(frozen=True)
class Client:
    """What recording with one kind of client takes, in one place: a family names its
    client (``Family.client``) and everything below follows from it."""

    #: The distribution whose version the truth records.
    distribution: str
    #: The ``agent_loops`` function that runs one segment of a scenario.
    loop: str
    #: Makes the client, pointed at the fake server.
    make: Callable[[Any], Any]
    #: The model every request names (and the root span, for util-genai's agent span).
    model: str = MODEL_OPENAI
    #: How the scripted tool call ids start, as this provider's do.
    call_id_prefix: str = "call_"
    #: Whether the conversation starts with the scenario's system message (else the loop
    #: sends it as its API wants, or not at all).
    system_message: bool = False


def _openai(server: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=server.openai_base_url, api_key="sk-scripted", max_retries=0)


def _openai_async(server: Any) -> Any:
    import openai

    return openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="sk-scripted", max_retries=0)


def _langchain_openai(server: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL_OPENAI,
        base_url=server.openai_base_url,
        api_key="sk-scripted",
        max_retries=0,
        stream_usage=True,
    )


def _anthropic(server: Any) -> Any:
    import anthropic

    return anthropic.Anthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-scripted", max_retries=0
    )


CLIENTS: dict[str, Client] = {
    "openai": Client("openai", "openai_segment", _openai, system_message=True),
    "openai-responses": Client("openai", "openai_responses_segment", _openai),
    "anthropic": Client(
        "anthropic",
        "anthropic_segment",
        _anthropic,
        model=MODEL_ANTHROPIC,
        call_id_prefix="toolu_",
    ),
    "langchain-openai": Client("langchain-openai", "langchain_segment", _langchain_openai),
    # The Agents SDK runs the loop itself: the run's truth is the fake server's exchanges.
    "openai-agents": Client("openai-agents", "openai_agents_segment", _openai_async),
}


class RotatingFileExporter:
    """The JSON file exporter, moved to a new file on request (as a collector rotates files)."""

    def __init__(self, first: Path) -> None:
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter

        self._make = FileSpanExporter
        self.paths = [first]
        self._current = FileSpanExporter(first)

    def rotate(self, path: Path) -> None:
        self._current.shutdown()
        self.paths.append(path)
        self._current = self._make(path)

    def export(self, spans: Any) -> Any:
        return self._current.export(spans)

    def shutdown(self) -> None:
        self._current.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("traces", type=Path)
    parser.add_argument("truth", type=Path)
    args = parser.parse_args()
    family = FAMILIES[args.family]
    for name in (
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
    ):
        os.environ.pop(name, None)
    os.environ.update(family.env)
    runs, files = record(family, args.traces)
    truth = {
        "family": family.name,
        "instrumentation": family.instrumentations[0],
        "instrumentation_version": version(family.instrumentations[0]),
        "instrumentations": {name: version(name) for name in family.instrumentations},
        "client": family.client,
        "client_version": version(CLIENTS[family.client].distribution),
        "environment": family.env,
        "content_captured": family.content_captured,
        "records_tool_definitions": family.records_tool_definitions,
        "model_call_spans_per_call": family.model_call_spans_per_call,
        "span_attribute_limit": family.span_attribute_limit,
        "notes": list(family.notes),
        "files": files,
        "runs": runs,
    }
    args.truth.write_text(json.dumps(truth, indent=1) + "\n")


def record(family: Family, out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Record the family's scenarios; return their truth and the names of the files written."""
    from fake_model_server import FakeModelServer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(f"{family.name}.*jsonl*"):
        stale.unlink()
    exporter = RotatingFileExporter(out / f"{family.name}.jsonl")
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"contextledger-recorder-{family.name}"}),
        span_limits=SpanLimits(max_span_attributes=family.span_attribute_limit)
        if family.span_attribute_limit
        else None,
    )
    processor: Any
    if family.export == "per-span":
        processor = SimpleSpanProcessor(exporter)  # type: ignore[arg-type]
    else:
        # A long schedule delay: lines break where the recorder flushes, not by the clock.
        processor = BatchSpanProcessor(exporter, schedule_delay_millis=600_000)  # type: ignore[arg-type]
    provider.add_span_processor(processor)
    instrumentors = []
    for distribution in family.instrumentations:
        module, name = INSTRUMENTORS[distribution]
        instrumentor = getattr(importlib.import_module(module), name)()
        instrumentor.instrument(
            tracer_provider=provider, **INSTRUMENT_OPTIONS.get(distribution, {})
        )
        instrumentors.append(instrumentor)
    runs: list[dict[str, Any]] = []
    with FakeModelServer() as server:
        client = CLIENTS[family.client].make(server)
        for scenario_name in family.scenarios:
            rotate: Callable[[], None] | None = None
            if family.rotate_in == scenario_name:

                def rotate() -> None:
                    processor.force_flush()
                    exporter.rotate(out / f"{family.name}.2.jsonl")

            runs.extend(_record_scenario(family, scenario_name, client, server, provider, rotate))
            if family.export == "per-run":
                processor.force_flush()
    provider.shutdown()
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()
    return runs, [path.name for path in exporter.paths]


def _record_scenario(
    family: Family,
    scenario_name: str,
    client: Any,
    server: Any,
    provider: Any,
    rotate: Callable[[], None] | None,
) -> list[dict[str, Any]]:
    import agent_loops
    import scenarios
    from opentelemetry import trace

    setup = CLIENTS[family.client]
    prefix = setup.call_id_prefix
    scenario = scenarios.build(
        scenario_name, call_id_prefix=f"{prefix}{scenario_name.replace('-', '')}_"
    )
    server.script([step.reply for segment in scenario.segments for step in segment.steps])
    conversation_id = f"conv-{family.name}-{scenario.name}" if scenario.conversation else None
    key_source = _conversation_key(family) if conversation_id else None
    tracer = provider.get_tracer("contextledger.record.otel")
    handler = (
        _genai_handler(provider) if family.root == "invoke_agent" or family.tool_spans else None
    )
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": scenario.system}] if setup.system_message else []
    )
    loop = getattr(agent_loops, setup.loop)
    segments: list[dict[str, Any]] = []
    total_calls = sum(len(segment.steps) for segment in scenario.segments)
    made = 0
    for segment in scenario.segments:
        with _root(family, tracer, handler, conversation_id if key_source else None):
            trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
            calls = []
            seen = len(server.exchanges)
            for call in loop(
                client, scenario, segment, messages, _tool_runner(family, tracer, handler)
            ):
                calls.append(asdict(call) | {"content_captured": family.content_captured})
                made += 1
                if rotate is not None and made == total_calls // 2:
                    rotate()
            wire = [
                asdict(exchange) | {"content_captured": family.content_captured}
                for exchange in server.exchanges[seen:]
            ]
            if family.client == "openai-agents":
                calls = wire  # the SDK ran the loop: what it sent and was answered
            elif calls != wire:
                msg = f"{family.name}/{scenario.name}: the agent's account differs from the wire's"
                raise RuntimeError(msg)
        segments.append({"trace_id": trace_id, "calls": calls})
    if server.remaining():
        msg = f"{family.name}/{scenario.name}: {server.remaining()} scripted replies unused"
        raise RuntimeError(msg)
    offered_any = any(call["offered"] for segment in segments for call in segment["calls"])
    base = {
        "scenario": scenario.name,
        "purpose": scenario.purpose,
        # Whether the spans can show what was offered: content captured and a tool offered.
        "carries_tool_definitions": family.content_captured
        and family.records_tool_definitions
        and offered_any,
    }
    if key_source:
        return [
            base
            | {
                "run_key": conversation_id,
                "run_key_source": key_source,
                "trace_ids": [segment["trace_id"] for segment in segments],
                "calls_per_trace": [len(segment["calls"]) for segment in segments],
                "calls": [call for segment in segments for call in segment["calls"]],
            }
        ]
    return [
        base
        | {
            "run_key": segment["trace_id"],
            "run_key_source": "trace_id",
            "trace_ids": [segment["trace_id"]],
            "calls_per_trace": [len(segment["calls"])],
            "calls": segment["calls"],
        }
        for segment in segments
    ]


def _conversation_key(family: Family) -> str | None:
    """The attribute that joins a conversation's traces, if this family can set one."""
    if family.root == "invoke_agent":
        return "gen_ai.conversation.id"
    if family.root == "openinference-agent":
        return "session.id"
    return None


def _genai_handler(provider: Any) -> Any:
    from opentelemetry.util.genai.handler import TelemetryHandler

    return TelemetryHandler(
        tracer_provider=provider,
        instrumentation_scope_name="contextledger.record.otel.agent",
    )


def _root(
    family: Family, tracer: Any, handler: Any, conversation_id: str | None
) -> AbstractContextManager[Any]:
    """What wraps one agent invocation: the trace's root span."""
    model = CLIENTS[family.client].model
    if family.root == "invoke_agent":
        return handler.invoke_local_agent(
            agent_name="recorder-agent", request_model=model, conversation_id=conversation_id
        )
    if family.root == "openinference-agent":
        return _openinference_agent(tracer, conversation_id)
    return tracer.start_as_current_span("agent run")


@contextmanager
def _openinference_agent(tracer: Any, session_id: str | None) -> Iterator[None]:
    from openinference.instrumentation import using_session

    attributes = {"openinference.span.kind": "AGENT"}
    if session_id:
        attributes["session.id"] = session_id
    with (
        using_session(session_id) if session_id else nullcontext(),
        tracer.start_as_current_span("recorder-agent", attributes=attributes),
    ):
        yield


def _tool_runner(family: Family, tracer: Any, handler: Any) -> Any:
    import agent_loops

    if not family.tool_spans:
        return agent_loops.run_plainly
    if family.root == "openinference-agent":

        def run_in_tool_span(
            name: str, call_id: str, arguments: dict[str, Any], run: Callable[[], str]
        ) -> str:
            attributes = {
                "openinference.span.kind": "TOOL",
                "tool.name": name,
                "tool_call.id": call_id,
                "input.value": json.dumps(arguments),
                "input.mime_type": "application/json",
            }
            with tracer.start_as_current_span(name, attributes=attributes) as span:
                result = run()
                span.set_attribute("output.value", result)
                return result

        return run_in_tool_span

    def run_in_execute_tool(
        name: str, call_id: str, arguments: dict[str, Any], run: Callable[[], str]
    ) -> str:
        with handler.tool(name, tool_type="function") as invocation:
            invocation.tool_call_id = call_id
            if invocation.should_capture_content:
                invocation.arguments = arguments
            result = run()
            if invocation.should_capture_content:
                invocation.tool_result = result
            return result

    return run_in_execute_tool


if __name__ == "__main__":
    sys.exit(main())
