"""--mode reference reproduces agentfootprint 9.62's ledger on every corpus run, quirks included."""

from __future__ import annotations

import json

import polars as pl
import pytest

from contextledger.ledger.compute import Ledger, compute_ledger
from contextledger.ledger.ledgerjson import dumps, rows_to_json, to_ledger_json
from contextledger.read.facts import RunFacts
from contextledger.tables.build import RunTables, read_runs

from .conftest import oracle_runs, require_corpus


@pytest.fixture(scope="module")
def reference_tables() -> RunTables:
    return read_runs(require_corpus() / "runs", mode="reference")


@pytest.fixture(scope="module")
def reference_tables_without_static_names() -> RunTables:
    empty_sidecar = {run_id: [] for run_id in oracle_runs()}
    return read_runs(require_corpus() / "runs", mode="reference", static_tools=empty_sidecar)


def single_run_ledgers(tables: RunTables) -> dict[str, Ledger]:
    """One fresh ledger per run, as the oracle's single-run ``rows``."""
    runs = pl.from_arrow(tables.runs)
    offers = pl.from_arrow(tables.offers).partition_by("run_id", as_dict=True)
    uses = pl.from_arrow(tables.uses).partition_by("run_id", as_dict=True)
    ledgers = {}
    for run in runs.partition_by("run_id"):
        run_id = run["run_id"][0]
        one = RunTables(
            tables.mode,
            run.to_arrow(),
            offers.get((run_id,), pl.from_arrow(tables.offers.slice(0, 0))).to_arrow(),
            uses.get((run_id,), pl.from_arrow(tables.uses.slice(0, 0))).to_arrow(),
        )
        ledgers[run_id] = compute_ledger(one)
    return ledgers


def test_every_corpus_run_is_read(reference_tables):
    assert reference_tables.runs.num_rows == 301
    assert reference_tables.problems.num_rows == 0


def test_single_run_rows_equal_the_reference_on_every_run(reference_tables):
    ledgers = single_run_ledgers(reference_tables)
    mismatched = [
        run_id
        for run_id, expected in oracle_runs().items()
        if rows_to_json(ledgers[run_id].rows()) != expected["rows"]
    ]
    assert mismatched == []


def test_earn_rates_are_bit_identical_to_javascript_division(reference_tables):
    ledgers = single_run_ledgers(reference_tables)
    for run_id, expected in oracle_runs().items():
        got = ledgers[run_id].rows()["earn_rate"].to_list()
        assert [float(x).hex() for x in got] == [
            float(r["earnRate"]).hex() for r in expected["rows"]
        ]


def test_record_run_offered_pieces_and_slice_availability_match(reference_tables):
    runs = pl.from_arrow(reference_tables.runs)
    offers = pl.from_arrow(reference_tables.offers)
    for run_id, expected in oracle_runs().items():
        run = runs.row(by_predicate=pl.col("run_id") == run_id, named=True)
        if expected["record_run"] is None:
            assert not run["metered"], run_id
            continue
        mine = offers.filter(pl.col("run_id") == run_id).sort("seq")
        pieces = RunFacts(
            "reference",
            offers=list(mine.select("call_index", "kind", "piece_id", "approx_tokens").iter_rows()),
        ).offered_pieces()
        assert pieces == expected["record_run"]["offeredPieces"], run_id
        assert run["slice_available"] == expected["record_run"]["sliceAvailable"], run_id


def test_refused_runs_are_listed_with_their_reason_not_counted(reference_tables):
    runs = pl.from_arrow(reference_tables.runs)
    refused = runs.filter(~pl.col("metered"))
    expected = sorted(r for r, row in oracle_runs().items() if row["record_run"] is None)
    assert sorted(refused["run_id"].to_list()) == expected
    assert refused["refused_reason"].str.starts_with("no call marker").all()
    assert compute_ledger(reference_tables).runs_recorded == 292


def test_call_markers_and_model_calls_match_what_the_reference_saw(reference_tables):
    runs = pl.from_arrow(reference_tables.runs)
    for row in runs.iter_rows(named=True):
        expected = oracle_runs()[row["run_id"]]
        assert row["model_call_count"] == expected["llm_calls"], row["run_id"]
        assert row["metered_call_count"] == expected["call_markers"], row["run_id"]


def test_without_static_names_the_25_grouped_translator_runs_change_as_the_reference_says(
    reference_tables_without_static_names,
):
    ledgers = single_run_ledgers(reference_tables_without_static_names)
    changed = 0
    for run_id, expected in oracle_runs().items():
        if expected["static_names_change_result"]:
            changed += 1
            assert rows_to_json(ledgers[run_id].rows()) == expected["rows_without_static_names"]
        else:
            assert rows_to_json(ledgers[run_id].rows()) == expected["rows"], run_id
    assert changed == 25


def outcome_labels(tables: RunTables) -> RunTables:
    import pyarrow as pa

    labels = pa.table(
        {
            "run_id": list(oracle_runs()),
            "label": [row["outcome_label"] for row in oracle_runs().values()],
        }
    )
    return tables.with_outcomes(labels)


def test_cumulative_ledger_equals_the_reference_export(reference_tables):
    expected = json.loads((require_corpus() / "oracle" / "ledger.json").read_text())
    got = to_ledger_json(compute_ledger(outcome_labels(reference_tables)))
    assert got == expected
    assert [list(row) for row in got["rows"]] == [list(row) for row in expected["rows"]]
    assert [list(row["outcomes"]) for row in got["rows"]] == [
        list(row["outcomes"]) for row in expected["rows"]
    ]


def test_cumulative_rows_equal_the_reference_rows_worst_first(reference_tables):
    expected = json.loads((require_corpus() / "oracle" / "rows.json").read_text())
    assert rows_to_json(compute_ledger(outcome_labels(reference_tables)).rows()) == expected


def test_export_prints_what_javascript_json_stringify_prints(reference_tables):
    expected = json.loads((require_corpus() / "oracle" / "ledger.json").read_text())
    from contextledger.read.jsjson import js_stringify

    assert dumps(compute_ledger(outcome_labels(reference_tables))) == js_stringify(expected)
