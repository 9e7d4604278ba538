"""The OpenAI Agents SDK's ``ToolOutputTrimmer``.

Followed: openai/openai-agents-python 0.22.0 (commit 7f7a44f),
``src/agents/extensions/tool_output_trimmer.py`` and its tests
``tests/extensions/test_tool_output_trimmer.py`` (the trimmer shipped in 0.10.0). It is a
``call_model_input_filter``: it rewrites the input of each model call and never the
session, so nothing persists between calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextledger.read.messages import Message
from contextledger.window.frameworks._common import (
    FrameworkPolicy,
    Key,
    TokensOf,
    call_names,
    rewritten,
)


def recent_boundary(history: Sequence[Message], recent_turns: int) -> int:
    """Index of the ``recent_turns``-th user message from the end; 0 when there are fewer
    (then nothing is old)."""
    seen = 0
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user":
            seen += 1
            if seen >= recent_turns:
                return i
    return 0


@dataclass(frozen=True)
class OpenAIToolOutputTrimmer(FrameworkPolicy):
    """``ToolOutputTrimmer``: tool outputs before the ``recent_turns``-th user message from
    the end that are longer than ``max_output_chars`` (Python characters) become
    ``[Trimmed: NAME output — N chars → P char preview]`` and their first
    ``preview_chars`` characters, only where that is shorter; calls are kept. With
    ``trimmable_tools``, only those tools' outputs are trimmed (an output whose call is
    not in the input has no name, so is then left alone). A run with one user message
    has nothing old: the trimmer changes nothing in it.
    """

    NAME = "openai_trim"
    SOURCE = "openai-agents 0.22.0, src/agents/extensions/tool_output_trimmer.py"
    KEYS = (
        Key("recent_turns", "int", 2, "user messages whose turns are never trimmed", 1),
        Key("max_output_chars", "int", 500, "outputs longer than this are trimmed", 1),
        Key("preview_chars", "int", 200, "characters of the output kept as a preview", 0),
        Key("trimmable_tools", "names", (), "only these tools' outputs (none: every tool)"),
    )

    recent_turns: int = 2
    max_output_chars: int = 500
    preview_chars: int = 200
    trimmable_tools: tuple[str, ...] = ()

    @property
    def reads_tool_text(self) -> bool:
        return True  # Python characters of each output, and its opening as the preview

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        out = list(history)
        boundary = recent_boundary(out, self.recent_turns)
        if boundary == 0:
            return out
        names = call_names(out)
        for i in range(boundary):
            message = out[i]
            if message.role != "tool":
                continue
            name = names.get(message.tool_call_id or "", "")
            if self.trimmable_tools and name not in self.trimmable_tools:
                continue
            length = len(message.content)
            if length <= self.max_output_chars:
                continue
            summary = (
                f"[Trimmed: {name or 'unknown_tool'} output \u2014 {length} chars \u2192 "
                f"{self.preview_chars} char preview]\n{message.content[: self.preview_chars]}..."
            )
            if len(summary) >= length:
                continue
            out[i] = rewritten(message, summary, "preview")
        return out
