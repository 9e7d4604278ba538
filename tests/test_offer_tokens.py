"""Each offer's tokens are measured once per distinct value, and always as measured alone."""

from __future__ import annotations

import math

import msgspec
import pytest

from contextledger.read import reference
from contextledger.read.corrected import meter_run
from contextledger.read.jsjson import approx_tokens, approx_tokens_of_json
from contextledger.read.reference import _TokenCache
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.read.snapshot_files import find_snapshot_files

from .conftest import SAMPLE


def sample_runs():
    files = find_snapshot_files([SAMPLE]).files
    return [decode_run(document) for path in files for document in iter_documents(path)]


def test_a_value_set_again_as_a_new_object_is_measured_once(monkeypatch: pytest.MonkeyPatch):
    measured: list[object] = []

    def counting(value: object) -> int:
        measured.append(value)
        return approx_tokens(value)

    def counting_json(value: bytes) -> int | None:
        measured.append(value)
        return approx_tokens_of_json(value)

    monkeypatch.setattr(reference, "approx_tokens", counting)  # both ways of measuring
    monkeypatch.setattr(reference, "approx_tokens_of_json", counting_json)
    for run in sample_runs():  # a cache lives for one run
        measured.clear()
        meter_run(run, run.static_tool_names or [])
        distinct = {msgspec.json.encode(value) for value in measured}
        assert len(measured) == len(distinct), run.run_id


def test_a_value_measured_in_one_run_is_not_measured_again_in_the_next(
    monkeypatch: pytest.MonkeyPatch,
):
    """An agent offers the same skills and schemas in every run: ingest measured them in
    each (issue 21)."""
    measured: list[object] = []

    def counting(value: object) -> int:
        measured.append(value)
        return approx_tokens(value)

    def counting_json(value: bytes) -> int | None:
        measured.append(value)
        return approx_tokens_of_json(value)

    monkeypatch.setattr(reference, "approx_tokens", counting)  # both ways of measuring
    monkeypatch.setattr(reference, "approx_tokens_of_json", counting_json)
    monkeypatch.setattr(reference, "_MEASURED", {}, raising=False)
    runs = sample_runs()
    for run in runs:
        meter_run(run, run.static_tool_names or [])
    first = [reference.record_run(run.snapshot, []).offers for run in runs]
    assert measured
    measured.clear()
    again = [reference.record_run(run.snapshot, []).offers for run in sample_runs()]  # anew
    assert (measured, again) == ([], first)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([{"id": "a", "n": 1}, {"id": "a", "n": 1.0}], id="1 and 1.0"),
        pytest.param([[math.nan], [None], [math.inf]], id="NaN, null and Infinity"),
        pytest.param([{"text": "\ud800"}, {"text": "\ud800"}], id="a lone surrogate"),
        pytest.param([2**70, 2**70 + 1], id="ints past 64 bits"),
    ],
)
def test_the_cache_gives_what_measuring_each_value_alone_gives(values: list[object]):
    cache = _TokenCache()
    assert [cache(value) for value in values] == [approx_tokens(value) for value in values]


def test_every_sample_offer_has_the_tokens_of_its_value_measured_alone(
    monkeypatch: pytest.MonkeyPatch,
):
    runs = sample_runs()
    cached = {run.run_id: meter_run(run, run.static_tool_names or []).offers for run in runs}
    monkeypatch.setattr(_TokenCache, "__call__", lambda _cache, value: approx_tokens(value))
    alone = {run.run_id: meter_run(run, run.static_tool_names or []).offers for run in runs}
    assert cached == alone
