"""Small agent loops over the real ``openai`` and ``anthropic`` clients.

Each loop offers the scenario's tools, runs the tool calls the model makes (a canned
result; a refusal for a tool the agent does not have), feeds the results back and loops
until the model answers. It returns, per model call, what it SENT (tool names offered) and
what it RECEIVED (tool names and ids called): the truth the recordings are checked against.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from scenarios import Scenario, Segment, Tool

MODEL_OPENAI = "gpt-4o-mini"
MODEL_ANTHROPIC = "claude-sonnet-4-5"


@dataclass(frozen=True)
class CallTruth:
    """One model call as the agent saw it."""

    offered: tuple[str, ...]
    called: tuple[str, ...]
    call_ids: tuple[str, ...]


# Runs one tool call (name, call id, arguments, the tool itself), e.g. inside an
# ``execute_tool`` span, and returns its result.
ToolRunner = Callable[[str, str, dict[str, Any], Callable[[], str]], str]


def run_plainly(name: str, call_id: str, arguments: dict[str, Any], run: Callable[[], str]) -> str:
    return run()


def run_tool(scenario: Scenario, name: str, arguments: dict[str, Any]) -> str:
    """A canned tool result; the agent refuses tools it does not have."""
    if scenario.tool(name) is None:
        return json.dumps({"error": f"unknown tool {name}; not run"})
    result = scenario.result_text if scenario.result_text is not None else "ok"
    return json.dumps({"tool": name, "arguments": arguments, "result": result})


def _offered_tools(scenario: Scenario, names: tuple[str, ...]) -> list[Tool]:
    tools = [scenario.tool(name) for name in names]
    return [tool for tool in tools if tool is not None]


def openai_segment(
    client: Any,
    scenario: Scenario,
    segment: Segment,
    messages: list[dict[str, Any]],
    run_call: ToolRunner = run_plainly,
) -> Iterator[CallTruth]:
    """Run one user turn through Chat Completions; ``messages`` carries the conversation."""
    messages.append({"role": "user", "content": segment.user_message})
    for step in segment.steps:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in _offered_tools(scenario, step.offered)
        ]
        request: dict[str, Any] = {"model": MODEL_OPENAI, "messages": messages}
        if tools:
            request["tools"] = tools
        if scenario.stream:
            message = _openai_streamed(client, request)
        else:
            message = (
                client.chat.completions.create(**request)
                .choices[0]
                .message.model_dump(exclude_none=True)
            )
        calls = message.get("tool_calls") or []
        yield CallTruth(
            offered=tuple(tool["function"]["name"] for tool in tools),
            called=tuple(call["function"]["name"] for call in calls),
            call_ids=tuple(call["id"] for call in calls),
        )
        messages.append(
            {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        )
        if not calls:
            return
        for call in calls:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            name = call["function"]["name"]
            result = run_call(
                name, call["id"], arguments, partial(run_tool, scenario, name, arguments)
            )
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    msg = f"{scenario.name}: the model was still calling tools after the last scripted step"
    raise RuntimeError(msg)


def _openai_streamed(client: Any, request: dict[str, Any]) -> dict[str, Any]:
    stream = client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    delta.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


def anthropic_segment(
    client: Any,
    scenario: Scenario,
    segment: Segment,
    messages: list[dict[str, Any]],
    run_call: ToolRunner = run_plainly,
) -> Iterator[CallTruth]:
    """Run one user turn through the Messages API; ``messages`` carries the conversation."""
    messages.append({"role": "user", "content": segment.user_message})
    for step in segment.steps:
        tools = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in _offered_tools(scenario, step.offered)
        ]
        request: dict[str, Any] = {
            "model": MODEL_ANTHROPIC,
            "max_tokens": 1024,
            "system": scenario.system,
            "messages": messages,
        }
        if tools:
            request["tools"] = tools
        if scenario.stream:
            with client.messages.stream(**request) as stream:
                response = stream.get_final_message()
        else:
            response = client.messages.create(**request)
        blocks = [block.model_dump(exclude_none=True) for block in response.content]
        calls = [block for block in blocks if block["type"] == "tool_use"]
        yield CallTruth(
            offered=tuple(tool["name"] for tool in tools),
            called=tuple(call["name"] for call in calls),
            call_ids=tuple(call["id"] for call in calls),
        )
        messages.append({"role": "assistant", "content": blocks})
        if not calls:
            return
        results = []
        for call in calls:
            name, arguments = call["name"], call["input"]
            result = run_call(
                name, call["id"], arguments, partial(run_tool, scenario, name, arguments)
            )
            results.append({"type": "tool_result", "tool_use_id": call["id"], "content": result})
        messages.append({"role": "user", "content": results})
    msg = f"{scenario.name}: the model was still calling tools after the last scripted step"
    raise RuntimeError(msg)


def langchain_segment(
    client: Any,
    scenario: Scenario,
    segment: Segment,
    messages: list[Any],
    run_call: ToolRunner = run_plainly,
) -> Iterator[CallTruth]:
    """Run one user turn through LangChain's ``ChatOpenAI`` with the tools bound to it.

    ``client`` is the ``ChatOpenAI`` model; tool calls run as LangChain tools
    (``StructuredTool``), so a LangChain instrumentation sees them as it would in an app.
    """
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.tools import StructuredTool

    if not messages:
        messages.append(SystemMessage(content=scenario.system))
    messages.append(HumanMessage(content=segment.user_message))
    for step in segment.steps:
        tools = _offered_tools(scenario, step.offered)
        openai_tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in tools
        ]
        model = client.bind_tools(openai_tools) if openai_tools else client
        reply = model.invoke(messages)
        calls = reply.tool_calls
        yield CallTruth(
            offered=tuple(tool.name for tool in tools),
            called=tuple(call["name"] for call in calls),
            call_ids=tuple(call["id"] for call in calls),
        )
        messages.append(reply)
        if not calls:
            return
        for call in calls:
            name, arguments = call["name"], call["args"]
            known = scenario.tool(name)
            runnable = StructuredTool.from_function(
                func=partial(_run_any, scenario, name),
                name=name,
                description=known.description if known else "not offered",
                args_schema=known.parameters if known else {"type": "object", "properties": {}},
            )
            # Invoked with the whole tool call, as LangGraph's ToolNode does: the tool
            # answers with a ToolMessage that carries the call's id.
            tool_call = {**call, "type": "tool_call"}
            messages.append(
                run_call(name, call["id"], arguments, partial(runnable.invoke, tool_call))
            )
    msg = f"{scenario.name}: the model was still calling tools after the last scripted step"
    raise RuntimeError(msg)


def _run_any(scenario: Scenario, name: str, **arguments: Any) -> str:
    return run_tool(scenario, name, arguments)


def openai_agents_segment(
    client: Any,
    scenario: Scenario,
    segment: Segment,
    messages: list[Any],
    run_call: ToolRunner = run_plainly,
) -> Iterator[CallTruth]:
    """Run one user turn through the OpenAI Agents SDK, which runs the loop itself.

    The SDK offers the agent's tools on every call, so the scenario must offer the same set
    on every step. It yields nothing: the recorder takes this run's truth from the fake
    server's exchanges (what the SDK sent and was answered).
    """
    from agents import Agent, FunctionTool, OpenAIResponsesModel, Runner

    offered = {step.offered for step in segment.steps}
    if len(offered) != 1:
        msg = f"{scenario.name}: the Agents SDK offers one tool set on every call"
        raise ValueError(msg)

    def function_tool(tool: Tool) -> Any:
        async def invoke(context: Any, arguments: str) -> str:
            return run_tool(scenario, tool.name, json.loads(arguments or "{}"))

        return FunctionTool(
            name=tool.name,
            description=tool.description,
            params_json_schema=tool.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    agent = Agent(
        name="recorder-agent",
        instructions=scenario.system,
        tools=[function_tool(tool) for tool in _offered_tools(scenario, offered.pop())],
        model=OpenAIResponsesModel(model=MODEL_OPENAI, openai_client=client),
    )
    Runner.run_sync(agent, segment.user_message, max_turns=len(segment.steps) + 1)
    yield from ()


def openai_responses_segment(
    client: Any,
    scenario: Scenario,
    segment: Segment,
    messages: list[Any],
    run_call: ToolRunner = run_plainly,
) -> Iterator[CallTruth]:
    """Run one user turn through the OpenAI Responses API; ``messages`` is the input list."""
    messages.append({"role": "user", "content": segment.user_message})
    for step in segment.steps:
        tools = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool in _offered_tools(scenario, step.offered)
        ]
        request: dict[str, Any] = {
            "model": MODEL_OPENAI,
            "instructions": scenario.system,
            "input": messages,
        }
        if tools:
            request["tools"] = tools
        response = client.responses.create(**request)
        items = [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in items if item["type"] == "function_call"]
        yield CallTruth(
            offered=tuple(tool["name"] for tool in tools),
            called=tuple(call["name"] for call in calls),
            call_ids=tuple(call["call_id"] for call in calls),
        )
        messages.extend(items)
        if not calls:
            return
        for call in calls:
            name, arguments = call["name"], json.loads(call["arguments"] or "{}")
            result = run_call(
                name, call["call_id"], arguments, partial(run_tool, scenario, name, arguments)
            )
            messages.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": result}
            )
    msg = f"{scenario.name}: the model was still calling tools after the last scripted step"
    raise RuntimeError(msg)
