"""Tool names of results, and the notice a drop leaves at the head of the window.

The notice texts are the reference's own, byte for byte: they are part of the
window a later visit measures (its chars, whether it fits), so a single
character off changes later records.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextledger.read.jsjson import utf16_length
from contextledger.read.messages import DROP_NOTICE_PREFIX, Message

#: How many tool names a notice prints before it writes ``…``.
MAX_NAMED_TOOLS = 4
#: The only shape a tool name may have to be printed in a notice.
_SAFE_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,48}")


def tool_name_of(message: Message, context: Sequence[Message]) -> str | None:
    """The tool a ``tool`` message came from: its own name, else the call it answers.

    None for any other role, and for a result nothing names (never ``unknown``).
    """
    if message.role != "tool":
        return None
    if message.tool_name:
        return message.tool_name
    if not message.tool_call_id:
        return None
    for other in context:
        for call in other.tool_calls:
            if call.id == message.tool_call_id and call.name:
                return call.name
    return None


def dropped_tool_names(span: Sequence[Message], context: Sequence[Message]) -> list[str]:
    """Tools whose results are in ``span``, first appearance first, each once."""
    names: list[str] = []
    for message in span:
        name = tool_name_of(message, context)
        if name is not None and name not in names:
            names.append(name)
    return names


def names_for_wire(tool_names: Sequence[str]) -> str:
    """The names a notice may print: plain identifiers only, at most four, then ``…``.

    >>> names_for_wire(["a", "bad name", "b", "c", "d", "e"])
    'a, b, c, d, …'
    """
    safe = [name for name in tool_names if _SAFE_TOOL_NAME.fullmatch(name)]
    shown = safe[:MAX_NAMED_TOOLS]
    text = ", ".join(shown)
    return f"{text}, …" if len(safe) > len(shown) else text


def drop_notice_text(
    dropped_message_count: int,
    iteration: int,
    strategy: str,
    current_request_kept: bool = False,
    tool_names: Sequence[str] = (),
) -> str:
    """The content of the notice a drop writes.

    >>> drop_notice_text(2, 4, "sliding-window")[:60]
    '[dropped history — 2 earlier message(s) were dropped from th'
    """
    kept = (
        "Your current request is kept — it is still in this window, above this line, and no "
        "window strategy may drop it. "
        if current_request_kept
        else ""
    )
    wire = names_for_wire(tool_names)
    observations = (
        f"Tool results are among them ({wire}) — call the tool again if you need its "
        "output; do not reconstruct ids or values from memory. "
        if wire
        else ""
    )
    return (
        f"{DROP_NOTICE_PREFIX} — {dropped_message_count} earlier message(s) were dropped "
        f"from this window at iteration {iteration} by the '{strategy}' window "
        f"strategy. {kept}{observations}Nothing was summarized: those turns are simply not "
        "being re-sent. They are retained verbatim in this run's commit log.]"
    )


def fitting_notice(
    span_chars: int,
    dropped_message_count: int,
    iteration: int,
    strategy: str,
    current_request_kept: bool,
    tool_names: Sequence[str],
) -> str | None:
    """The first rung of the ladder strictly smaller than the span: rich, then plain.

    None when neither fits (the caller then drops silently, or refuses when
    the wire needs a user turn at the head).
    """
    if tool_names:
        rich = drop_notice_text(
            dropped_message_count, iteration, strategy, current_request_kept, tool_names
        )
        if utf16_length(rich) < span_chars:
            return rich
    plain = drop_notice_text(dropped_message_count, iteration, strategy, current_request_kept)
    return plain if utf16_length(plain) < span_chars else None
