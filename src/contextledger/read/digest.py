"""Hashes that tell two copies of a document apart, or find them the same.

Kept apart from :mod:`~contextledger.read.identity` (which builds Arrow tables) so a
worker process hashes what it reads without importing Arrow.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from typing import Any

import blake3
import msgspec

#: The kind of content digest reads compute and archives store now: its name, ``:``, then
#: the hash. Archives hold older kinds too (``sha256:HEX``; bare ``blake2b``, stored before
#: kinds were named); one copy is compared with another in the kind the other was stored
#: in (:func:`digest_kind`).
DIGEST_KIND = "blake3"
#: Every kind :func:`content_digest` computes: the name, and the hash of the canonical bytes.
DIGEST_KINDS = ("blake3", "sha256", "blake2b")


def content_digest(payload: bytes, kind: str = DIGEST_KIND) -> str:
    """A hash of a JSON document with insignificant whitespace removed, of the ``kind``
    given: ``blake3`` (the default: BLAKE3 cut to 128 bits, named, ``blake3:HEX``; a
    quarter of sha256's CPU over a snapshot, even with the CPU's SHA instructions),
    ``sha256`` (the same, ``sha256:HEX``: what archives stored until 2026-12-02) or
    ``blake2b`` (blake2b-128, bare HEX: what archives stored before kinds were named).

    A pretty-printed snapshot and its one-line JSON Lines twin hash the same.

    >>> content_digest(b'{"a": [1, 2]}\\n') == content_digest(b'{"a":[1,2]}')
    True
    >>> content_digest(b'{"a":1}')
    'blake3:d59b6562d7c9b121bc9760873d787890'
    >>> content_digest(b'{"a":1}', "sha256")
    'sha256:015abd7f5cc57a2dd94b7590f04ad808'
    >>> content_digest(b'{"a":1}', "blake2b")
    '2c6b113b8dd15ffbded9860b43eb0c6c'
    """
    try:
        canonical = msgspec.json.format(payload, indent=-1)
    except msgspec.DecodeError:  # not JSON: hash the bytes as they are
        canonical = payload.strip()
    if kind == "blake3":
        return "blake3:" + blake3.blake3(canonical).hexdigest(length=16)
    if kind == "sha256":
        return "sha256:" + hashlib.sha256(canonical).hexdigest()[:32]
    if kind == "blake2b":
        return _hash(canonical)
    msg = f"unknown digest kind {kind!r}: choose one of {', '.join(DIGEST_KINDS)}"
    raise ValueError(msg)


def file_digest(data: bytes) -> str:
    """blake2b-128 of a file's bytes as stored, hex: the manifest's ``content_hash``, which
    tells a file named again unchanged (whatever its format, compressed or not).

    >>> file_digest(b"")
    'cae66941d9efbd404e4d88758ea67670'
    """
    return _hash(data)


def digest_kind(digest: str) -> str:
    """The kind of a stored content digest: the name before its ``:``, else ``blake2b``
    (a bare hash, as archives stored digests before kinds were named).

    >>> digest_kind("sha256:015abd7f5cc57a2dd94b7590f04ad808"), digest_kind("5c4a2ae3")
    ('sha256', 'blake2b')
    """
    name, colon, _ = digest.partition(":")
    return name if colon else "blake2b"


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
