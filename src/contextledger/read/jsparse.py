"""JSON that ``JSON.parse`` accepts and msgspec refuses: the slow path for rare documents.

JavaScript strings are UTF-16, so a string cut inside an emoji is written as a lone
surrogate escape (``"\\ud83d"``): valid JSON that msgspec refuses. Python's own parser
reads it into a ``str`` holding the lone surrogate, one UTF-16 code unit as in
JavaScript. It is used only after msgspec failed on a document that has a surrogate
escape, so the common path pays nothing. A number past the doubles (``1e400``, which
JavaScript reads as ``Infinity``) stays refused, naming the number.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

#: A lone surrogate in a ``str`` (a paired one is a single astral character there).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A ``\\uD800``-``\\uDFFF`` escape (a surrogate, paired or not) in JSON text.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class NotJavaScriptJSON(ValueError):
    """A document ``JSON.parse`` would refuse, or one holding a number past the doubles."""


def has_surrogate_escape(payload: bytes) -> bool:
    """Whether ``payload`` holds a ``\\uD800``-``\\uDFFF`` escape (where msgspec may fail).

    >>> has_surrogate_escape(b'{"a": "cut \\\\ud83d"}'), has_surrogate_escape(b'{"a": 1}')
    (True, False)
    """
    return _SURROGATE_ESCAPE.search(payload) is not None


def loads(payload: bytes) -> Any:
    """``payload`` parsed as ``JSON.parse`` parses it, lone surrogates kept; raises
    :class:`NotJavaScriptJSON` for what it refuses and for a number past the doubles.

    >>> loads(b'{"a": "cut \\\\ud83d"}')["a"] == "cut \\ud83d"
    True
    >>> loads(b'[1e400]')
    Traceback (most recent call last):
    ...
    contextledger.read.jsparse.NotJavaScriptJSON: the number 1e400 is past the largest double ...
    """
    try:
        return json.loads(payload, parse_float=_finite, parse_constant=_no_constant)
    except NotJavaScriptJSON:
        raise
    except json.JSONDecodeError as error:
        msg = f"invalid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        raise NotJavaScriptJSON(msg) from None
    except UnicodeDecodeError as error:
        msg = f"invalid JSON: not UTF-8 ({error.reason} at byte {error.start})"
        raise NotJavaScriptJSON(msg) from None


def unstorable_name(named: Iterable[tuple[str, str | None]]) -> str | None:
    """Why the first ``(what, name)`` whose name holds a lone surrogate cannot be stored
    (UTF-8, so Arrow and Parquet, has no lone surrogate); None when none does.

    >>> print(unstorable_name([("tool name", "ok"), ("tool name", "probe" + chr(0xD83D))]))
    the tool name "probe\\ud83d" holds a lone surrogate, which UTF-8 tables cannot hold
    """
    for what, name in named:
        if name is not None and _LONE_SURROGATE.search(name):
            shown = json.dumps(name)[:80]
            return f"the {what} {shown} holds a lone surrogate, which UTF-8 tables cannot hold"
    return None


def past_the_doubles(number: str) -> str:
    """What is wrong with ``number``, for a refusal."""
    return f"the number {number} is past the largest double (JavaScript reads it as Infinity)"


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise NotJavaScriptJSON(past_the_doubles(text))
    return value


def _no_constant(name: str) -> None:
    """``NaN`` and ``Infinity`` are not JSON (Python's parser accepts them)."""
    msg = f"invalid JSON: {name} is not a JSON value"
    raise NotJavaScriptJSON(msg)
