"""Hashes that tell two copies of a document apart, or find them the same.

Kept apart from :mod:`~contextledger.read.identity` (which builds Arrow tables) so a
worker process hashes what it reads without importing Arrow.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from typing import Any

import msgspec


def content_digest(payload: bytes) -> str:
    """blake2b-128 of a JSON document with insignificant whitespace removed (fast).

    A pretty-printed snapshot and its one-line JSON Lines twin hash the same.

    >>> content_digest(b'{"a": [1, 2]}\\n') == content_digest(b'{"a":[1,2]}')
    True
    """
    try:
        canonical = msgspec.json.format(payload, indent=-1)
    except msgspec.DecodeError:  # not JSON: hash the bytes as they are
        canonical = payload.strip()
    return _hash(canonical)


def recording_digest(payload: bytes) -> str:
    """blake2b-128 of the snapshot a document carries, as a JSON value: escapes, number
    spellings and key order aside (``"\\u00e9"`` and ``"é"``, ``1.50`` and ``1.5``,
    ``jq -S``'s sorted keys hash the same), and the corpus wrapper around it aside (a bare
    snapshot and the same snapshot wrapped with a ``run_id`` are one recording). Slower
    than :func:`content_digest`; asked for only when two copies' content digests differ.

    >>> escaped = b'{"commitLog": [], "name": "caf\\\\u00e9", "x": 1.50}'
    >>> plain = '{"x":1.5,"name":"café","commitLog":[]}'.encode()
    >>> recording_digest(escaped) == recording_digest(plain)
    True
    >>> wrapped = b'{"run_id": "r", "snapshot": ' + escaped + b'}'
    >>> recording_digest(wrapped) == recording_digest(escaped)
    True

    A number is the double JavaScript reads, as ``JSON.parse`` does: ``1e24``,
    ``1e+24`` and 25 spelled-out digits are one number, and so are ``1`` and ``1.0``.

    >>> recording_digest(b'[1e24, 1]') == recording_digest(b'[1000000000000000000000000, 1.0]')
    True
    """
    try:
        value = msgspec.json.decode(payload)
    except msgspec.MsgspecError:
        return _hash(payload.strip())
    if isinstance(value, dict) and "commitLog" not in value and "snapshot" in value:
        value = value["snapshot"]
    with contextlib.suppress(RecursionError):  # past Python's stack: compared as decoded
        value = _as_javascript_reads(value)
    return _hash(msgspec.json.encode(value, order="sorted"))


def _as_javascript_reads(value: Any) -> Any:
    """``value`` with every number the double JavaScript would hold (``-0`` as ``0``,
    past the doubles as infinity, which encodes as ``null``, as JavaScript writes it)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        try:
            return float(value) + 0.0  # + 0.0 turns -0.0 into 0.0
        except OverflowError:
            return math.inf
    if isinstance(value, list):
        return [_as_javascript_reads(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_javascript_reads(item) for key, item in value.items()}
    return value


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
