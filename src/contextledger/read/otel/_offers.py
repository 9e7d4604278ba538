"""Tool definitions as offers: each definition's name and estimated tokens.

A span carries its tools as one ``gen_ai.tool.definitions`` value (semconv) or one
``llm.tools.{i}.tool.json_schema`` value a tool (OpenInference). An agent sends the same
tools every call, so each distinct value is decoded and measured once, looked up by its
raw bytes; what it deliberately gets wrong: the estimate is the ledger's
``ceil(len(JSON.stringify(d)) / 4)``, not what a provider bills.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from contextledger.read.jsjson import js_stringify, utf16_length
from contextledger.read.otel._otlp import decode_value

#: The semconv attribute of a call's tool definitions (1.38+: a list of them).
DEFINITIONS = "gen_ai.tool.definitions"
#: How OpenInference's ``llm.tools.{i}...`` key of one tool's definition ends.
SCHEMA = ".tool.json_schema"
#: A definitions value's offers (None: unreadable) and the problems reading it found.
_Offered = tuple[tuple[tuple[str, int], ...] | None, tuple[str, ...]]


class _Unreadable:
    """An attribute whose JSON text could not be decoded (named as a problem)."""


UNREADABLE = _Unreadable()


def content_value(value: Any, key: str, problems: list[str]) -> Any:
    """A content attribute's value: structured as given, or decoded from its JSON text."""
    if not isinstance(value, str):
        return value
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError as error:
        cut = "truncated? " if "truncated" in str(error) else ""
        problems.append(
            f"attribute {key} is not valid JSON ({cut}{len(value):,} chars; {error}): "
            "a backend cut it, or the instrumentation's length limit did"
        )
    except RecursionError:
        problems.append(f"attribute {key} nests too deeply to read")
    return UNREADABLE


def tool_name(definition: Any) -> str | None:
    """The name a tool definition gives: semconv's ``name``, or the provider's wire
    shape (``{"type": "function", "function": {"name": ...}}``)."""
    if not isinstance(definition, dict):
        return None
    name = definition.get("name")
    if isinstance(name, str) and name:
        return name
    inner = definition.get("function")
    if isinstance(inner, dict) and isinstance(inner.get("name"), str) and inner["name"]:
        return str(inner["name"])
    return None


def approx_tokens(definition: Any) -> int:
    """The ledger's estimate of a definition's cost: ``ceil(len(JSON.stringify(d)) / 4)``."""
    text = js_stringify(definition)
    return 0 if text is None else math.ceil(utf16_length(text) / 4)


def _offers(definitions: Any, key: str, problems: list[str]) -> tuple[tuple[str, int], ...] | None:
    if not isinstance(definitions, list):
        problems.append(f"attribute {key} is not a list of tool definitions")
        return None
    offers = []
    for definition in definitions:
        name = tool_name(definition)
        if name is None:
            problems.append(f"attribute {key} holds a tool definition without a name")
            continue
        offers.append((name, approx_tokens(definition)))
    return tuple(offers)


#: Offers of each distinct definitions value (an agent sends the same tools every call:
#: each is decoded and measured once, and the calls share one tuple), looked up by the
#: value's raw bytes: by their length, then compared (hashing a value of kilobytes cost
#: more than the rest of its span's record), at most :data:`_SAME_LENGTH_KEPT` values a
#: length. Bounded by the bytes of the values kept: past the bound it starts over. (An
#: OpenInference span carries each tool as a value of its own: a few agents' tool sets
#: are hundreds of values, and a bound of 256 values started over within one file,
#: measuring most values again: 40% of reading the bench's traces.)
_OFFERS: dict[int, list[tuple[msgspec.Raw, _Offered]]] = {}
_OFFERS_BYTES_KEPT = 32 << 20
_SAME_LENGTH_KEPT = 16
_offers_bytes = 0


def _by_index(definitions: dict[str, msgspec.Raw]) -> list[tuple[str, msgspec.Raw]]:
    """OpenInference's ``llm.tools.{i}.tool.json_schema`` values in index order."""
    indexed = []
    for key, raw in definitions.items():
        index = key[len("llm.tools.") : -len(SCHEMA)]
        indexed.append((int(index) if index.isdigit() else -1, key, raw))
    return [(key, raw) for _, key, raw in sorted(indexed, key=lambda found: found[:2])]


#: Offers of each distinct OpenInference tool set (its keys and values, as given): an
#: agent sends the same tools every call, and the set's offers are put together once.
#: Looked up by its keys and its values' total length, then compared, as :data:`_OFFERS`.
_TOOL_SETS: dict[tuple[tuple[str, ...], int], list[tuple[tuple[msgspec.Raw, ...], _Offered]]] = {}
_TOOL_SETS_BYTES_KEPT = 32 << 20
_tool_sets_bytes = 0


def tool_set_offers(
    definitions: dict[str, msgspec.Raw], problems: list[str]
) -> tuple[tuple[str, int], ...] | None:
    """The offers of a span's ``llm.tools.{i}.tool.json_schema`` values, in index order;
    None when one cannot be read (said in ``problems``)."""
    global _tool_sets_bytes
    values = tuple(definitions.values())
    shape = (tuple(definitions), sum(map(len, values)))
    same_shape = _TOOL_SETS.get(shape)
    hit = _known(same_shape, values)
    if hit is None:
        found_problems: list[str] = []
        found = [offers_of(raw, key, found_problems) for key, raw in _by_index(definitions)]
        offers = None if any(o is None for o in found) else tuple(o for f in found for o in f or ())
        hit = (offers, tuple(found_problems))
        size = shape[1]
        if _tool_sets_bytes + size > _TOOL_SETS_BYTES_KEPT:  # bounded as _OFFERS is
            _TOOL_SETS.clear()
            _tool_sets_bytes = 0
            same_shape = None
        if same_shape is None:
            same_shape = _TOOL_SETS[shape] = []
        elif len(same_shape) >= _SAME_LENGTH_KEPT:
            _tool_sets_bytes -= size
            del same_shape[0]
        _tool_sets_bytes += size
        same_shape.append((tuple(raw.copy() for raw in values), hit))
    problems.extend(hit[1])
    return hit[0]


def offers_of(
    raw: msgspec.Raw, key: str, problems: list[str]
) -> tuple[tuple[str, int], ...] | None:
    """``(name, approx_tokens)`` of each definition in one attribute's raw value (a list,
    or OpenInference's one definition); None when it cannot be read (said in ``problems``)."""
    global _offers_bytes
    same_length = _OFFERS.get(len(raw))
    hit = _known(same_length, raw)
    if hit is None:
        hit = _measure(raw, key)
        if _offers_bytes + len(raw) > _OFFERS_BYTES_KEPT:
            _OFFERS.clear()
            _offers_bytes = 0
            same_length = None
        if same_length is None:
            same_length = _OFFERS[len(raw)] = []
        elif len(same_length) >= _SAME_LENGTH_KEPT:
            _offers_bytes -= len(raw)
            del same_length[0]
        _offers_bytes += len(raw)
        same_length.append((raw.copy(), hit))
    problems.extend(hit[1])
    return hit[0]


def _known(entries: list[tuple[Any, _Offered]] | None, value: Any) -> _Offered | None:
    """What ``entries`` hold for ``value`` (compared whole), or None."""
    for known, offered in entries or ():
        if known == value:
            return offered
    return None


def _measure(raw: msgspec.Raw, key: str) -> _Offered:
    """What :func:`offers_of` gives for ``raw``, found: its offers and problems."""
    found: list[str] = []
    offers: tuple[tuple[str, int], ...] | None = None
    try:
        value = content_value(decode_value(raw), key, found)
    except (msgspec.DecodeError, RecursionError):
        found.append(f"attribute {key} is not an OTLP value")
        value = UNREADABLE
    if value is not UNREADABLE:
        if key == DEFINITIONS:
            offers = _offers(value, key, found)
        else:
            name = tool_name(value)
            if name is None:
                found.append(f"attribute {key} holds a tool definition without a name")
            offers = () if name is None else ((name, approx_tokens(value)),)
    return offers, tuple(found)
