"""Span records past the budget wait on disk and give the runs held in memory give.

Each test lowers the budget (``_spill.SPANS_HELD``, 8192 span records) to a few records,
so the recordings of ``data/otel`` spill, are split again past it, and are assembled a
range of runs at a time; the tables must equal those read in memory, exactly. The
messy inputs are made from the recordings: a file read twice, a span copied with a
different value, a line cut short; the recordings already split one trace over two
files.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from contextledger.read.otel import SpillTo, TraceRuns, _spill, read_trace_file, sniff
from contextledger.tables.build import ACCOUNTING_MODES, read_accountings

from .conftest import REPO

TRACES = sorted(
    path
    for path in (REPO / "data" / "otel").rglob("*")
    if path.is_file() and sniff(path) == "otlp-json"
)
#: Span records held before spilling, in these tests.
TINY = 3


def _lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return [line for line in data.splitlines() if line.strip()]


def messy_traces(folder: Path) -> Path:
    """``folder`` filled with the recordings, one file again under another name, a span
    copied with another input token count, and a line cut short."""
    for path in TRACES:
        shutil.copy(path, folder / path.name)
    shutil.copy(folder / "genai-openai.jsonl.gz", folder / "zz-again.jsonl.gz")
    first = json.loads(_lines(folder / "genai-anthropic.jsonl.gz")[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "gen_ai.usage.input_tokens", "value": {"intValue": "7"}})
    damaged = json.dumps(first).encode()
    (folder / "zz-conflict.jsonl").write_bytes(damaged + b"\n" + damaged[: len(damaged) // 2])
    return folder


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`messy_traces`, once for this module."""
    return messy_traces(tmp_path_factory.mktemp("messy"))


def _read_all(folder: Path) -> dict[str, Any]:
    return read_accountings([folder], ACCOUNTING_MODES, workers=1)


def test_the_messy_input_holds_a_copy_a_conflict_and_a_cut_line(messy: Path) -> None:
    tables = _read_all(messy)["corrected"]
    reasons = tables.problems["reason"].to_pylist()
    assert any("different content" in reason for reason in reasons)
    assert any("invalid JSON" in reason for reason in reasons)
    assert tables.duplicates.num_rows > 0


def test_tables_read_past_the_budget_equal_the_tables_read_in_memory(
    messy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _read_all(messy)
    arranged: list[int] = []
    arrange = _spill.SpanSpill.arrange

    def counted(self: _spill.SpanSpill, before: Any) -> Any:
        arranged.append(1)
        return arrange(self, before)

    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(_spill.SpanSpill, "arrange", counted)
    spilled = _read_all(messy)
    assert arranged == [1]
    for mode in ACCOUNTING_MODES:
        for name in ("runs", "offers", "uses", "problems", "duplicates"):
            assert getattr(spilled[mode], name).equals(getattr(held[mode], name)), (mode, name)


def _plain(value: Any) -> Any:
    """A value with every dataclass as its fields (messages compare by identity)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return type(value).__name__, tuple(_plain(getattr(value, f.name)) for f in fields)
    if isinstance(value, list | tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _plain(item)) for key, item in value.items())
    return value


def _assembled(messy: Path, folder: str, budget: int | None, reader_budget: int | None) -> Any:
    runs = TraceRuns(messages=True, digests=True, spans_held=budget, spill_folder=folder)
    for path in sorted(messy.iterdir()):
        spill = SpillTo(folder, reader_budget) if reader_budget else None
        runs.add(read_trace_file(path, messages=True, spill=spill))
    assert runs.spilled == (budget is not None or reader_budget is not None)
    return _plain(runs.finish())


@pytest.mark.parametrize(("budget", "reader_budget"), [(TINY, None), (50, TINY), (10**6, 7)])
def test_streams_and_digests_past_the_budget_equal_those_in_memory(
    messy: Path, tmp_path: Path, budget: int, reader_budget: int | None
) -> None:
    """The what-if's message streams and the archive's digests too, whether the
    assembler or the files' readers wrote the records."""
    held = _assembled(messy, str(tmp_path), None, None)
    assert _assembled(messy, str(tmp_path), budget, reader_budget) == held
    assert not list(tmp_path.iterdir())  # every file written is removed


def test_a_reader_holds_fewer_records_than_its_budget(tmp_path: Path) -> None:
    path = next(path for path in TRACES if path.name == "openinference-openai.jsonl.gz")
    whole = read_trace_file(path)
    read = read_trace_file(path, spill=SpillTo(str(tmp_path), 5))
    assert read.spilled is not None and len(read.spans) < 5
    assert sum(read.spilled.counts) + len(read.spans) == len(whole.spans)


def test_the_spilled_records_are_removed_when_assembly_stops_early(tmp_path: Path) -> None:
    runs = TraceRuns(spans_held=TINY, spill_folder=str(tmp_path))
    for path in TRACES:
        runs.add(read_trace_file(path, spill=SpillTo(str(tmp_path), TINY)))
    parts = runs.chunks(runs=1)
    next(parts)
    assert list(tmp_path.iterdir())
    parts.close()
    assert not list(tmp_path.iterdir())


def test_reading_past_the_budget_leaves_no_temporary_file(
    messy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tables = _read_all(messy)["corrected"]
    assert tables.runs.num_rows > 0
    assert not list(tmp_path.iterdir())


def test_whatif_inputs_read_past_the_budget_equal_those_read_in_memory(
    messy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextledger.jobs.whatif import read_inputs

    held = _plain(read_inputs(messy))
    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert _plain(read_inputs(messy)) == held
    assert not list(tmp_path.iterdir())


def test_workers_write_a_big_files_records_and_the_tables_are_the_same(
    messy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read by two worker processes, which are given the budget and write the records
    of each file past it; the tables equal those read in memory in this process."""
    from contextledger.tables import ahead

    held = _read_all(messy)
    adopted: list[bool] = []
    add = TraceRuns.add

    def watched(self: TraceRuns, read: Any) -> None:
        adopted.append(read.spilled is not None)
        add(self, read)

    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(ahead, "POOL_FROM_JSON_BYTES", 0)
    monkeypatch.setattr(TraceRuns, "add", watched)
    pooled = read_accountings([messy], ACCOUNTING_MODES, workers=2)
    assert any(adopted)
    for mode in ACCOUNTING_MODES:
        for name in ("runs", "offers", "uses", "problems", "duplicates"):
            assert getattr(pooled[mode], name).equals(getattr(held[mode], name)), (mode, name)
