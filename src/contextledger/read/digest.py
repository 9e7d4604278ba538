"""Hashes that tell two copies of a document apart, or find them the same.

Kept apart from :mod:`~contextledger.read.identity` (which builds Arrow tables) so a
worker process hashes what it reads without importing Arrow.
"""

from __future__ import annotations

import hashlib

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
    """
    try:
        value = msgspec.json.decode(payload)
    except msgspec.MsgspecError:
        return _hash(payload.strip())
    if isinstance(value, dict) and "commitLog" not in value and "snapshot" in value:
        value = value["snapshot"]
    return _hash(msgspec.json.encode(value, order="sorted"))


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
