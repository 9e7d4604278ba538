"""JavaScript's ``JSON.stringify`` lengths, which the reference's token estimate is made of.

``approxTokens = ceil(len(JSON.stringify(x)) / 4)`` counts UTF-16 code units of
compact JSON with keys in object order, non-ASCII unescaped, and numbers
printed the JavaScript way (``1`` not ``1.0``, ``1e-7`` not ``1e-07``, ``1e+24`` not
24 digits: a JSON number is a double there, whatever digits the file spelled).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from contextledger.read.commitlog import ABSENT

_encode_plain = json.JSONEncoder(ensure_ascii=False).encode
#: A lone surrogate (a Python ``str`` holds a pair as one astral character).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encode_string(text: str) -> str:
    """A JSON string as ``JSON.stringify`` writes it: a lone surrogate escaped (``\\ud83d``,
    six characters), as well-formed ``JSON.stringify`` does since ES2019.

    >>> print(_encode_string("cut " + chr(0xD83D)), _encode_string("caf" + chr(0xE9)))
    "cut \\ud83d" "café"
    """
    encoded = _encode_plain(text)
    if encoded.isascii():
        return encoded
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", encoded)


def js_number(value: float) -> str:
    """A number as JavaScript's ``String(n)`` prints it (ECMAScript Number::toString).

    The shortest digits that read back as the same double (Python's ``repr`` finds them),
    written without an exponent from 1e-6 up to below 1e21 and with one outside it;
    ``-0`` prints ``0``. An integer is first the double nearest it, as ``JSON.parse``
    reads it: 2**60 prints ``1152921504606847000``, 10**24 ``1e+24``, and one past the
    doubles (Infinity) ``null``, as ``JSON.stringify`` writes a non-finite number.

    >>> js_number(1.0), js_number(0.1), js_number(1e21), js_number(1e-7), js_number(-0.0)
    ('1', '0.1', '1e+21', '1e-7', '0')
    >>> js_number(2**60), js_number(10**24), js_number(1.5e-7), js_number(123e-20)
    ('1152921504606847000', '1e+24', '1.5e-7', '1.23e-18')
    """
    if isinstance(value, int):
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return str(value)  # exact as a double, and below 1e21
        try:
            value = float(value)  # correctly rounded, as JavaScript reads the digits
        except OverflowError:
            return "null"
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # value = 0.DIGITS x 10**point: k = len(digits), n = point in the specification's terms
    point = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    if len(digits) <= point <= 21:
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    if 0 < point <= 21:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -6 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    power = point - 1
    head = digits[0] if len(digits) == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{head}e{'+' if power > 0 else '-'}{abs(power)}"


#: 2**53 - 1 (``Number.MAX_SAFE_INTEGER``): every integer up to it is exactly a double.
_SAFE_INTEGER = 2**53 - 1


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
    if isinstance(value, int | float):
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


#: A JSON string (quotes, escapes and all), and what in compact JSON outside strings
#: makes msgspec's text longer or shorter than ``JSON.stringify``'s: a float (a digit
#: before ``.`` or an exponent: ``1.0`` is ``1`` there) or an integer of 16 or more
#: digits (past 2**53 JavaScript prints the nearest double).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_AS_JAVASCRIPT = re.compile(rb"\d[.eE]|\d{16}")


def approx_tokens_of_json(encoded: bytes) -> int | None:
    """:func:`approx_tokens` of a value from its compact JSON as msgspec writes it, when
    that text is as long as ``JSON.stringify``'s; None when it may not be (a float, a
    big integer: measure the value itself).

    msgspec escapes strings as ``JSON.stringify`` does (``\\n``, ``\\u001f``; U+2028,
    DEL and non-ASCII as they are), writes non-finite floats as ``null`` as it does,
    and refuses lone surrogates and ``undefined``, which only :func:`approx_tokens`
    measures. One C pass instead of a Python walk of the value.

    >>> import msgspec
    >>> value = {"name": "probe", "tags": ["é", True, None, 7]}
    >>> approx_tokens_of_json(msgspec.json.encode(value)) == approx_tokens(value)
    True
    >>> approx_tokens_of_json(msgspec.json.encode({"n": 1.0})) is None
    True
    """
    if _NOT_AS_JAVASCRIPT.search(_JSON_STRING.sub(b"", encoded)):
        return None
    return math.ceil(utf16_length(encoded.decode("utf-8")) / 4)


def approx_tokens(value: Any) -> int:
    """The reference's token estimate: ``ceil(len(JSON.stringify(value)) / 4)``.

    >>> approx_tokens({"name": "probe", "n": 1.0})
    6
    """
    text = js_stringify(value)
    if text is None:
        return 0  # JSON.stringify(undefined).length throws; the reference catches it
    return math.ceil(utf16_length(text) / 4)
