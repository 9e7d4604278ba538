"""The DuckDB views give the Polars ledger's rows exactly, in order; their SQL is snapshotted.

Refresh the snapshot after a deliberate change to the views with
``CONTEXTLEDGER_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_duckdb_ledger.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import connect, ledger_rows_sql, views_sql
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, read_runs
from contextledger.tables.sidecars import load_outcomes

from .conftest import REPO, SAMPLE, oracle_runs, require_corpus

SNAPSHOT = Path(__file__).parent / "snapshots" / "ledger_views.sql"


def corpus_outcomes() -> pa.Table:
    """The oracle's label per run, then a second label on every 20th run (listed last run
    first, so label order follows run order, not the table), one label repeated, and a
    label for a run that does not exist."""
    run_ids = list(oracle_runs())
    labels = [row["outcome_label"] for row in oracle_runs().values()]
    extra = run_ids[::20][::-1]
    rows = [
        *zip(run_ids, labels, strict=True),
        *((run_id, "reviewed") for run_id in extra),
        (run_ids[0], "reviewed"),
        ("no-such-run", "good"),
    ]
    return pa.table({"run_id": [r for r, _ in rows], "label": [label for _, label in rows]})


@pytest.fixture(scope="module", params=ACCOUNTING_MODES)
def corpus_tables(request: pytest.FixtureRequest) -> RunTables:
    tables = read_runs(require_corpus() / "runs", mode=request.param)
    return tables.with_outcomes(corpus_outcomes())


def test_corpus_rows_equal_the_polars_ledger(corpus_tables):
    expected = compute_ledger(corpus_tables).rows()
    assert_frame_equal(ledger_rows_sql(corpus_tables), expected, check_exact=True)
    # Multi-label ordering is exercised: rows list several labels, not all in one order.
    labels = expected["outcomes"].list.eval(pl.element().struct.field("label")).list.join(",")
    assert expected["outcomes"].list.len().max() >= 3
    assert labels.str.contains("reviewed").any()
    assert labels.str.split(",").list.first().n_unique() > 1


def test_corpus_ledger_view_is_the_frame_in_insertion_order(corpus_tables):
    con = connect(corpus_tables)
    got = con.sql("SELECT * EXCLUDE (insertion_order) FROM ledger").pl()
    assert_frame_equal(got, compute_ledger(corpus_tables).frame, check_exact=True)


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_sample_rows_equal_the_polars_ledger(mode):
    tables = read_runs(SAMPLE, mode=mode)
    tables = tables.with_outcomes(load_outcomes(REPO / "data" / "sample-outcomes.csv"))
    assert_frame_equal(ledger_rows_sql(tables), compute_ledger(tables).rows(), check_exact=True)


def test_no_metered_runs_gives_an_empty_ledger_of_the_same_schema():
    empty = RunTables(
        "corrected",
        schema.empty(schema.RUNS),
        schema.empty(schema.OFFERS),
        schema.empty(schema.USES),
    )
    assert_frame_equal(ledger_rows_sql(empty), compute_ledger(empty).rows(), check_exact=True)


def small_tables() -> RunTables:
    """Two metered runs listed out of run_order (and against their ids' alphabetical
    order), and a refused run whose offer must not count.

    Run y (run_order 0) uses tool t2 without offering it, so t2's first sighting is a use
    that comes after y's offers, though its seq (0) is below theirs (3, 4): putting uses
    before offers changes the order, never ties it. Run b (run_order 1) offers t2 and t4.
    """

    def table(table_schema: pa.Schema, **columns: list) -> pa.Table:
        """The named columns; any other column of the schema is null."""
        rows = len(next(iter(columns.values())))
        return pa.table(
            {name: columns.get(name, [None] * rows) for name in table_schema.names},
            schema=table_schema,
        )

    runs = table(
        schema.RUNS,
        run_id=["b", "y", "refused"],
        run_order=[1, 0, 2],
        source_path=["b.json", "y.json", "refused.json"],
        source_line=[None, None, None],
        runner_kind=["Agent"] * 3,
        accounting=["corrected"] * 3,
        metered=[True, True, False],
        refused_reason=[None, None, "no model call"],
        model_call_count=[1, 1, 0],
        metered_call_count=[1, 1, 0],
        unmetered_kinds=[[], [], []],
        basis=[[], [], []],
        grouped=[False] * 3,
        slice_available=[True] * 3,
        static_tool_names_from=["none"] * 3,
        static_tool_name_count=[0] * 3,
    )
    offers = table(
        schema.OFFERS,
        run_id=["b", "b", "y", "y", "refused"],
        call_index=[0, 0, 0, 0, 0],
        kind=["tool", "tool", "tool", "injection", "tool"],
        piece_id=["t4", "t2", "t1", "i1", "t3"],
        approx_tokens=[3, 5, 7, 11, 13],
        seq=[0, 1, 3, 4, 0],
    )
    uses = table(
        schema.USES,
        run_id=["y", "y"],
        kind=["tool", "tool"],
        piece_id=["t2", "t1"],
        signal=["tool-called", "tool-called"],
        seq=[0, 1],
    )
    outcomes = table(schema.OUTCOMES, run_id=["b", "y", "y"], label=["bad", "good", "bad"])
    return RunTables("corrected", runs, offers, uses, outcomes)


def test_insertion_order_puts_a_runs_offers_before_its_uses_and_follows_run_order():
    """y's offers (t1, i1), then y's use of t2, then b's new offer (t4): in the SQL view's
    insertion_order, in the Polars frame, and as the tie-break among equal earn rates."""
    tables = small_tables()
    in_order = ["t1", "i1", "t2", "t4"]
    view = connect(tables).sql("SELECT id, insertion_order FROM ledger ORDER BY insertion_order")
    assert view.fetchall() == [(piece, place) for place, piece in enumerate(in_order)]
    assert compute_ledger(tables).frame["id"].to_list() == in_order
    rows = ledger_rows_sql(tables)
    assert_frame_equal(rows, compute_ledger(tables).rows(), check_exact=True)
    assert rows.select("id", "offered", "used", "runs_seen", "earn_rate").rows() == [
        ("i1", 1, 0, 1, 0.0),
        ("t4", 1, 0, 1, 0.0),
        ("t1", 1, 1, 1, 1.0),
        ("t2", 1, 1, 1, 1.0),
    ]
    assert rows["outcomes"].to_list()[1] == [{"label": "bad", "runs": 1}]
    assert rows["outcomes"].to_list()[0] == [
        {"label": "good", "runs": 1},
        {"label": "bad", "runs": 1},
    ]


def test_views_sql_matches_the_checked_in_snapshot():
    text = views_sql()
    if os.environ.get("CONTEXTLEDGER_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(text, encoding="utf-8")
    snapshot = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.is_file() else ""
    assert text == snapshot, (
        f"the ledger's SQL views differ from {SNAPSHOT.relative_to(REPO)}; if the change is "
        "intended, refresh it with CONTEXTLEDGER_UPDATE_SNAPSHOTS=1 "
        ".venv/bin/pytest tests/test_duckdb_ledger.py and commit the diff"
    )
