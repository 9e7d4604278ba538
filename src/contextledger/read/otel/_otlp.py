"""OTLP JSON (``ExportTraceServiceRequest``) decoded with typed structs, values left raw.

A collector line carries every attribute of every span; the ledger reads a dozen keys.
A line is decoded in one pass down to each attribute's key; its value stays undecoded
bytes (``msgspec.Raw``) until a key we read asks for it, so a span's message contents
cost nothing unless a what-if needs them. Deliberately lenient where exporters differ:
ids in hex or base64, 64-bit ints as strings or numbers.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec


class KeyValue(msgspec.Struct, gc=False):
    """One attribute: its key, and its ``AnyValue`` still as JSON bytes."""

    key: str = ""
    value: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class Span(msgspec.Struct, rename="camel", gc=False):
    """The fields of one OTLP span the reader uses."""

    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    name: str = ""
    start_time_unix_nano: int | str = 0
    #: The attribute list, each value undecoded (:class:`KeyValue`).
    attributes: list[KeyValue] = msgspec.field(default_factory=list)
    #: Attributes the SDK dropped past its span limit (128 by default).
    dropped_attributes_count: int = 0


class ScopeSpans(msgspec.Struct, rename="camel", gc=False):
    """One instrumentation scope's spans (the scope itself is not read)."""

    spans: list[Span] = msgspec.field(default_factory=list)


class ResourceSpans(msgspec.Struct, rename="camel", gc=False):
    """One resource's spans (its attributes, ``service.name`` and the like, are not read:
    left undecoded by the decoder)."""

    scope_spans: list[ScopeSpans] = msgspec.field(default_factory=list)


class TraceRequest(msgspec.Struct, rename="camel", gc=False):
    """One ``ExportTraceServiceRequest``: a line of the collector's file exporter."""

    resource_spans: list[ResourceSpans] = msgspec.field(default_factory=list)


class LenientSpan(Span):
    """A span whose attribute list is left undecoded: how a line is read again when one
    of its spans' attributes is not a list of key/values (that span alone is named)."""

    attributes: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # type: ignore[assignment]


class _LenientScopeSpans(ScopeSpans):
    spans: list[LenientSpan] = msgspec.field(default_factory=list)  # type: ignore[assignment]


class _LenientResourceSpans(ResourceSpans):
    scope_spans: list[_LenientScopeSpans] = msgspec.field(default_factory=list)  # type: ignore[assignment]


class _LenientRequest(TraceRequest):
    resource_spans: list[_LenientResourceSpans] = msgspec.field(default_factory=list)  # type: ignore[assignment]


_REQUEST = msgspec.json.Decoder(TraceRequest)
_LENIENT = msgspec.json.Decoder(_LenientRequest)
_ATTRIBUTES = msgspec.json.Decoder(list[KeyValue])


def decode_request(line: bytes | memoryview) -> TraceRequest:
    """One line's request, every span's attributes decoded down to their keys; a line
    where some span's attributes are not key/values is decoded again leaving each span's
    attributes raw (:func:`span_attributes` names that span). Raises ``msgspec``'s
    errors when the line is not such a request."""
    try:
        return _REQUEST.decode(line)
    except msgspec.ValidationError:
        return _LENIENT.decode(line)


def span_attributes(span: Span) -> list[KeyValue]:
    """The span's attributes; raises ``msgspec.DecodeError`` when they are not a list of
    key/values (only a :class:`LenientSpan`'s can fail, decoded here)."""
    if isinstance(span.attributes, list):
        return span.attributes
    raw = bytes(span.attributes)
    return _ATTRIBUTES.decode(raw) if raw else []


class _ArrayValue(msgspec.Struct, gc=False):
    values: list[AnyValue] = msgspec.field(default_factory=list)


class _KeyValueList(msgspec.Struct, gc=False):
    values: list[_Pair] = msgspec.field(default_factory=list)


class _Pair(msgspec.Struct, gc=False):
    key: str = ""
    value: AnyValue | None = None


class AnyValue(msgspec.Struct, rename="camel", gc=False):
    """OTLP ``AnyValue``: exactly one of its fields is set."""

    string_value: str | None = None
    bool_value: bool | None = None
    int_value: int | str | None = None
    double_value: float | str | None = None
    array_value: _ArrayValue | None = None
    kvlist_value: _KeyValueList | None = None
    bytes_value: str | None = None


_VALUE = msgspec.json.Decoder(AnyValue)


def plain(value: AnyValue | None) -> Any:
    """An ``AnyValue`` as a Python value: a list, a dict, a str, an int, a float, a bool.

    >>> plain(_VALUE.decode(b'{"arrayValue": {"values": [{"intValue": "7"}]}}'))
    [7]
    """
    if value is None:
        return None
    if value.string_value is not None:
        return value.string_value
    if value.int_value is not None:
        return _as_int(value.int_value)
    if value.bool_value is not None:
        return value.bool_value
    if value.double_value is not None:
        return float(value.double_value)
    if value.array_value is not None:
        return [plain(item) for item in value.array_value.values]
    if value.kvlist_value is not None:
        return {pair.key: plain(pair.value) for pair in value.kvlist_value.values}
    if value.bytes_value is not None:
        return value.bytes_value
    return None


def decode_value(raw: msgspec.Raw) -> Any:
    """The Python value of one attribute's raw ``AnyValue``; raises ``msgspec.DecodeError``."""
    return plain(_VALUE.decode(raw))


def _as_int(value: int | str) -> int | None:
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        return None


def as_int(value: Any) -> int | None:
    """An integer attribute (OTLP JSON writes 64-bit ints as strings); None if it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return _as_int(value)
    return None


_LOWER_HEX = {size: re.compile(f"[0-9a-f]{{{size * 2}}}") for size in (8, 16)}


def hex_id(value: str, size: int) -> str:
    """A trace (16 bytes) or span (8 bytes) id as lower-case hex, as OTLP JSON writes it;
    the base64 that protobuf's own JSON mapping writes is converted. '' if neither.

    >>> hex_id("5B8EFFF798038103D269B633813FC60C", 16)
    '5b8efff798038103d269b633813fc60c'
    >>> hex_id("W47/95gDgQPSabYzgT/GDA==", 16)
    '5b8efff798038103d269b633813fc60c'
    """
    if _LOWER_HEX[size].fullmatch(value):  # as OTLP JSON writes it
        return value
    if len(value) == size * 2 and value.isalnum():
        try:
            bytes.fromhex(value)
        except ValueError:
            pass
        else:
            return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return ""
    return raw.hex() if len(raw) == size else ""


def start_nanos(span: Span) -> int:
    """A span's start time in nanoseconds since the epoch (0 when it has none)."""
    value = span.start_time_unix_nano
    if type(value) is str:  # as OTLP JSON writes it: what as_int does, called once a span
        try:
            return int(value)
        except ValueError:
            return 0
    found = as_int(value)
    return found if found is not None else 0
