"""Gzip inflated by ISA-L or zlib gives CPython's ``gzip`` bytes, and refuses what it refuses.

Every case runs on each backend installed (zlib always; ISA-L with the ``isal``
package), and is compared exactly with ``gzip.decompress`` of the same bytes.
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from typing import Any

import pytest

from contextledger.read.gunzip import (
    BACKENDS,
    DAMAGED,
    DEFAULT_BACKEND,
    TRUNCATED,
    GzipError,
    inflate,
    inflated_head,
    open_inflated,
)
from contextledger.read.otel.functions import SNIFF_BYTES, sniff
from contextledger.read.snapshot import ReadError, decode_run, iter_documents

from .conftest import SAMPLE

MEMBER = gzip.compress(b'{"a": 1}')
OTHER = gzip.compress(b'{"b": 2}\n')


def inflated(data: bytes, backend: str) -> bytes:
    return b"".join(inflate(io.BytesIO(data), backend))


def flipped(data: bytes, position: int) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 0x01
    return bytes(damaged)


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_isal_inflates_by_default_as_the_dependency_it_is():
    # isal is a runtime dependency (pyproject.toml): an install without it is a broken one
    assert DEFAULT_BACKEND == "isal"


def test_every_bundled_snapshot_inflates_to_gzips_bytes(backend: str):
    files = sorted(SAMPLE.glob("*.json.gz"))
    assert files
    for path in files:
        data = path.read_bytes()
        assert inflated(data, backend) == gzip.decompress(data), path.name


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(MEMBER + OTHER, id="two members"),
        pytest.param(gzip.compress(b"") + MEMBER, id="an empty member first"),
        pytest.param(MEMBER + bytes(5), id="zero padding after the last member"),
        pytest.param(MEMBER + bytes(3) + OTHER, id="zero padding between members"),
        pytest.param(gzip.compress(os.urandom(3 << 20), 1) + MEMBER, id="incompressible megabytes"),
        pytest.param(gzip.compress(bytes(9 << 20), 9) * 2, id="a bomb of zeros in two members"),
    ],
)
def test_a_valid_stream_gives_gzips_bytes(data: bytes, backend: str):
    assert inflated(data, backend) == gzip.decompress(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(MEMBER + b"garbage", "Not a gzipped file (b'ga')", id="trailing garbage"),
        pytest.param(
            MEMBER + bytes(2) + b"x", "Not a gzipped file (b'x')", id="garbage after zeros"
        ),
        pytest.param(MEMBER + b"\x1f", "Not a gzipped file (b'\\x1f')", id="half a magic"),
        pytest.param(MEMBER[:-3], TRUNCATED, id="truncated trailer"),
        pytest.param(MEMBER[:5], TRUNCATED, id="truncated header"),
        pytest.param(MEMBER + OTHER[:12], TRUNCATED, id="truncated second member"),
        pytest.param(flipped(MEMBER, len(MEMBER) - 8), DAMAGED, id="a wrong CRC-32"),
        pytest.param(flipped(MEMBER, len(MEMBER) - 4), DAMAGED, id="a wrong length"),
        pytest.param(flipped(MEMBER, 12), DAMAGED, id="a damaged block"),
    ],
)
def test_a_broken_stream_is_refused_as_gzip_refuses_it(data: bytes, reason: str, backend: str):
    with pytest.raises((OSError, EOFError)):
        gzip.decompress(data)
    with pytest.raises(GzipError) as refused:
        inflated(data, backend)
    assert str(refused.value) == reason


def test_a_stream_cut_anywhere_is_refused_never_shortened(backend: str):
    data = (SAMPLE / "s0003-loop.json.gz").read_bytes()
    for end in range(1, len(data), max(1, len(data) // 97)):
        with pytest.raises(GzipError, match="Compressed file ended"):
            inflated(data[:end], backend)


def test_a_bomb_inflates_a_megabyte_at_a_time(backend: str):
    bomb = gzip.compress(bytes(64 << 20), 9)
    sizes = [len(piece) for piece in inflate(io.BytesIO(bomb), backend)]
    assert sum(sizes) == 64 << 20
    assert max(sizes) <= 1 << 20


def test_json_lines_are_read_line_by_line_from_the_inflated_stream(backend: str):
    stream = open_inflated(io.BytesIO(gzip.compress(b"one\n") + gzip.compress(b"two\n")), backend)
    assert [stream.readline(), stream.readline(), stream.readline()] == [b"one\n", b"two\n", b""]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(MEMBER + OTHER, id="two members, shorter than the head"),
        pytest.param(gzip.compress(b"") + MEMBER + OTHER, id="an empty member first"),
        pytest.param(gzip.compress(bytes(3 << 20), 9), id="megabytes of zeros"),
        pytest.param(gzip.compress(b"x" * 5) * 9000, id="the head spread over members"),
        pytest.param((SAMPLE / "s0003-loop.json.gz").read_bytes(), id="a bundled snapshot"),
    ],
)
def test_a_head_is_the_first_bytes_gzip_gives(data: bytes, backend: str):
    for size in (1, 7, 1 << 16):
        assert inflated_head(io.BytesIO(data), size, backend) == gzip.decompress(data)[:size]


@pytest.mark.parametrize("suffix", [".json.gz", ".jsonl.gz"])
def test_a_snapshot_with_trailing_garbage_is_named_with_the_reason(tmp_path: Path, suffix: str):
    good = (SAMPLE / "s0003-loop.json.gz").read_bytes()
    path = tmp_path / f"s0003-loop{suffix}"
    if suffix == ".jsonl.gz":
        good = gzip.compress(gzip.decompress(good).replace(b"\n", b"") + b"\n")
    path.write_bytes(good + b"garbage")
    with pytest.raises(ReadError) as refused:
        for document in iter_documents(path):
            decode_run(document)
    assert refused.value.reason == "corrupt or truncated gzip (Not a gzipped file (b'ga'))"


class _CountingBackend:
    """A backend that inflates with the real one and counts the bytes it gives out."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.error = real.error
        self.inflated = 0

    def decompressobj(self, wbits: int) -> Any:
        backend = self

        class Member:
            def __init__(self) -> None:
                self.member = backend.real.decompressobj(wbits)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.member, name)

            def decompress(self, data: bytes, max_length: int = 0) -> bytes:
                out = self.member.decompress(data, max_length)
                backend.inflated += len(out)
                return bytes(out)

        return Member()


def test_telling_a_gzipped_files_format_inflates_only_its_head(monkeypatch: pytest.MonkeyPatch):
    # a snapshot is about a megabyte inflated: inflating it whole to look at 64 KiB cost
    # as much as reading it after (0.09 s of CPU over the corpus's 301 files)
    path = SAMPLE / "s0003-loop.json.gz"
    counting = _CountingBackend(BACKENDS[DEFAULT_BACKEND])
    monkeypatch.setitem(BACKENDS, DEFAULT_BACKEND, counting)
    assert len(gzip.decompress(path.read_bytes())) > 8 * SNIFF_BYTES
    assert sniff(path) is None
    assert counting.inflated == SNIFF_BYTES
