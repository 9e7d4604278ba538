"""JavaScript's ``JSON.stringify`` lengths, which the reference's token estimate is made of.

``approxTokens = ceil(len(JSON.stringify(x)) / 4)`` counts UTF-16 code units of
compact JSON with keys in object order, non-ASCII unescaped, and numbers
printed the JavaScript way (``1`` not ``1.0``, ``1e-7`` not ``1e-07``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from contextledger.read.commitlog import ABSENT

_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def js_number(value: float) -> str:
    """A number as JavaScript's ``String(n)`` prints it.

    >>> js_number(1.0), js_number(0.1), js_number(1e21), js_number(1e-7)
    ('1', '0.1', '1e+21', '1e-7')
    """
    if not math.isfinite(value):
        return "null"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(float(value))
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    power = int(exponent)
    if -7 < power < 21:  # JavaScript prints these without an exponent
        sign = "-" if mantissa.startswith("-") else ""
        whole, _, fraction = mantissa.lstrip("-").partition(".")
        digits, point = whole + fraction, len(whole) + power
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


def js_stringify(value: Any) -> str | None:
    """Compact JSON as ``JSON.stringify`` writes it (None for ``undefined``)."""
    if value is ABSENT:
        return None
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, str):
        return _encode_string(value)
    if isinstance(value, list):
        items = (js_stringify(item) for item in value)
        return "[" + ",".join("null" if item is None else item for item in items) + "]"
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            text = js_stringify(item)
            if text is not None:
                parts.append(_encode_string(str(key)) + ":" + text)
        return "{" + ",".join(parts) + "}"
    return None


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript's ``String.length``."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def approx_tokens(value: Any) -> int:
    """The reference's token estimate: ``ceil(len(JSON.stringify(value)) / 4)``.

    >>> approx_tokens({"name": "probe", "n": 1.0})
    6
    """
    text = js_stringify(value)
    if text is None:
        return 0  # JSON.stringify(undefined).length throws; the reference catches it
    return math.ceil(utf16_length(text) / 4)
