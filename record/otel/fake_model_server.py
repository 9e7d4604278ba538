"""A scripted stand-in for the OpenAI and Anthropic HTTP APIs, on the loopback interface.

The real ``openai`` and ``anthropic`` clients talk to it as to the real services, so the
instrumentations around them record what they would record in production. It answers
from a queue of scripted replies loaded by the driver, never from the request's meaning,
and reports usage computed from the request's size, with a cached prefix after the first
call of a run. What it deliberately gets wrong: token counts are sizes / 4, not a tokenizer,
and every reply has the same creation time.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model is scripted to make: its id, tool name and arguments."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted model reply: tool calls (one or several, in parallel), or a final text."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Exchange:
    """One request as the server saw it: the tool names it offered, and what was answered."""

    offered: tuple[str, ...]
    called: tuple[str, ...]
    call_ids: tuple[str, ...]


def _offered_names(request: dict[str, Any]) -> tuple[str, ...]:
    """Tool names in a Chat Completions (``function.name``) or Messages (``name``) request."""
    return tuple(
        tool["function"]["name"] if "function" in tool else tool["name"]
        for tool in request.get("tools") or []
    )


@dataclass
class _Script:
    replies: deque[Reply] = field(default_factory=deque)
    previous_prompt_tokens: int = 0
    response_count: int = 0


# Every completion says it was created at 2026-01-01T00:00:00Z, so re-recordings match.
CREATED = 1767225600


def _approx_tokens(payload: Any) -> int:
    return max(1, len(json.dumps(payload, separators=(",", ":"))) // 4)


class FakeModelServer:
    """Serve scripted replies on 127.0.0.1 at an ephemeral port, in a background thread.

    Speaks Chat Completions (``/v1/chat/completions``, plain or streamed), the Responses API
    (``/v1/responses``, not streamed) and Anthropic Messages (``/v1/messages``, plain or
    streamed).

    ``script(replies)`` loads the replies of one run; each request pops the next one, and
    ``exchanges`` keeps what every request offered and was answered (the wire's view, to
    check the agent's own account against, or to stand for it when a framework runs the
    loop).
    Usage: input tokens are the request's JSON size / 4; from the second call of a run on,
    the previous call's input counts as read from the prompt cache (OpenAI
    ``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``), and
    Anthropic reports half of the rest as written to the cache
    (``cache_creation_input_tokens``) and the other half as plain ``input_tokens``.
    """

    def __init__(self) -> None:
        self._script = _Script()
        self._lock = threading.Lock()
        self.exchanges: list[Exchange] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def script(self, replies: list[Reply]) -> None:
        """Load the replies of the next run (and forget the previous run's cache)."""
        with self._lock:
            self._script = _Script(replies=deque(replies))

    def remaining(self) -> int:
        with self._lock:
            return len(self._script.replies)

    def _next(self, request: dict[str, Any]) -> tuple[Reply, int, int, int]:
        with self._lock:
            if not self._script.replies:
                msg = "the fake model server ran out of scripted replies"
                raise RuntimeError(msg)
            reply = self._script.replies.popleft()
            self.exchanges.append(
                Exchange(
                    offered=_offered_names(request),
                    called=tuple(call.name for call in reply.tool_calls),
                    call_ids=tuple(call.call_id for call in reply.tool_calls),
                )
            )
            prompt_tokens = _approx_tokens(request)
            cached = min(self._script.previous_prompt_tokens, prompt_tokens)
            self._script.previous_prompt_tokens = prompt_tokens
            self._script.response_count += 1
            return reply, prompt_tokens, cached, self._script.response_count

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/").endswith("/chat/completions"):
                    body = server._openai_chat(request)
                elif self.path.rstrip("/").endswith("/messages"):
                    body = server._anthropic_messages(request)
                elif self.path.rstrip("/").endswith("/responses"):
                    body = server._openai_response(request)
                else:
                    self.send_error(404, f"no scripted API at {self.path}")
                    return
                if request.get("stream") and "output" not in body:
                    self._send_stream(body, request)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_stream(self, body: dict[str, Any], request: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                if "choices" in body:
                    events = _openai_stream_events(body, request)
                else:
                    events = _anthropic_stream_events(body)
                for event_name, payload in events:
                    prefix = f"event: {event_name}\n" if event_name else ""
                    self.wfile.write(f"{prefix}data: {payload}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler

    def _openai_chat(self, request: dict[str, Any]) -> dict[str, Any]:
        reply, prompt_tokens, cached, index = self._next(request)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in reply.tool_calls
            ]
        completion_tokens = _approx_tokens(message)
        return {
            "id": f"chatcmpl-scripted-{index}",
            "object": "chat.completion",
            "created": CREATED,
            "model": request.get("model", "scripted"),
            "system_fingerprint": "fp_scripted",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            },
        }

    def _openai_response(self, request: dict[str, Any]) -> dict[str, Any]:
        """A Responses API reply: function_call output items, or one output_text message."""
        reply, prompt_tokens, cached, index = self._next(request)
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": f"fc_scripted_{index}_{position}",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
            for position, call in enumerate(reply.tool_calls)
        ]
        if reply.text is not None:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_scripted_{index}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        output_tokens = _approx_tokens(output)
        return {
            "id": f"resp_scripted_{index}",
            "object": "response",
            "created_at": CREATED,
            "status": "completed",
            "model": request.get("model", "scripted"),
            "output": output,
            "instructions": request.get("instructions"),
            "tools": request.get("tools") or [],
            "tool_choice": request.get("tool_choice", "auto"),
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "top_p": 1.0,
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "usage": {
                "input_tokens": prompt_tokens,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + output_tokens,
            },
        }

    def _anthropic_messages(self, request: dict[str, Any]) -> dict[str, Any]:
        reply, prompt_tokens, cached, index = self._next(request)
        content: list[dict[str, Any]] = []
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        content.extend(
            {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}
            for call in reply.tool_calls
        )
        # Anthropic's input_tokens excludes what was read from or written to the cache:
        # half of the uncached part is scripted as written to it, the rest as plain input.
        written = (prompt_tokens - cached) // 2
        return {
            "id": f"msg_scripted_{index}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "scripted"),
            "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt_tokens - cached - written,
                "output_tokens": _approx_tokens(content),
                "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": written,
            },
        }


def _openai_stream_events(body: dict[str, Any], request: dict[str, Any]) -> list[tuple[str, str]]:
    choice = body["choices"][0]
    message = choice["message"]
    base = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    if message.get("content"):
        chunks.append(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"content": message["content"]}, "finish_reason": None}
                ],
            }
        )
    for position, call in enumerate(message.get("tool_calls", [])):
        delta = {"tool_calls": [{"index": position, **call}]}
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    )
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return [("", json.dumps(chunk)) for chunk in chunks] + [("", "[DONE]")]


def _anthropic_stream_events(body: dict[str, Any]) -> list[tuple[str, str]]:
    start = {**body, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": body["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return [(name, json.dumps(payload)) for name, payload in events]
