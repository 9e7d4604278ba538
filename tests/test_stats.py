"""Earn-rate intervals and outcome association, on hand-made counts and on the corpus."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.stats import outcome_association, wilson_interval, with_uncertainty
from contextledger.tables.build import read_runs

from .conftest import SAMPLE, oracle_runs, require_corpus


def test_wilson_interval_of_no_successes_reaches_z_squared_over_n_plus_z_squared():
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert high == pytest.approx(3.841458820694124 / 13.841458820694124)


def test_wilson_interval_is_symmetric_for_all_successes():
    low, high = wilson_interval(10, 10)
    assert (low, high) == pytest.approx((1 - 3.841458820694124 / 13.841458820694124, 1.0))


#: (used, offered) -> the 95% Wilson bounds, computed by hand from the score formula
#: (centre ± half-width, z = 1.959963984540054) in 40-digit decimal arithmetic, then
#: rounded to doubles; 5 of 10 gives the textbook (0.2366, 0.7634).
WILSON_BY_HAND = {
    (1, 3): (0.06149194472039624, 0.7923403991979523),
    (2, 21): (0.026518767438074516, 0.28914139073918255),
    (5, 10): (0.236593090512564, 0.763406909487436),
    (7, 100): (0.03431926106727268, 0.137495147390735),
    (99, 100): (0.9455138038212947, 0.9982325679358593),
    (1, 1000): (0.00017654637062607803, 0.005642558597957935),
}


@pytest.mark.parametrize(("used", "offered"), list(WILSON_BY_HAND))
def test_wilson_interval_between_the_ends_matches_the_formula_worked_by_hand(used, offered):
    """Double rounding leaves a few ulps; a wrong term (``/(offered + 1)``) moves the
    bounds by 1e-3 or more."""
    expected = pytest.approx(WILSON_BY_HAND[used, offered], rel=1e-13, abs=0)
    assert wilson_interval(used, offered) == expected
    frame = with_uncertainty(pl.DataFrame({"offered": [offered], "used": [used]}))
    assert frame.select("earn_rate_low", "earn_rate_high").row(0) == expected


def test_more_uses_than_offers_is_a_rate_with_no_proportion_interval():
    assert wilson_interval(7, 6) is None
    assert wilson_interval(0, 0) is None


def test_rows_below_min_offers_are_not_yet_judged():
    frame = with_uncertainty(pl.DataFrame({"offered": [4, 5], "used": [0, 0]}), min_offers=5)
    assert frame["judged"].to_list() == [False, True]


def test_the_frame_interval_equals_the_scalar_interval_on_every_corpus_row():
    rows = with_uncertainty(compute_ledger(read_runs(require_corpus() / "runs")).rows())
    for used, offered, low, high in rows.select(
        "used", "offered", "earn_rate_low", "earn_rate_high"
    ).iter_rows():
        expected = wilson_interval(used, offered)
        if expected is None:
            assert (low, high) == (None, None)
        else:
            assert (low, high) == expected
            assert low <= used / offered <= high


@pytest.fixture(scope="module")
def labelled_reference():
    labels = pa.table(
        {
            "run_id": list(oracle_runs()),
            "label": [row["outcome_label"] for row in oracle_runs().values()],
        }
    )
    return read_runs(require_corpus() / "runs", mode="reference").with_outcomes(labels)


def test_association_counts_agree_with_the_reference_outcome_tallies(labelled_reference):
    """runs_offered_with_label is the reference's outcomes[label]; runs_offered its runsSeen."""
    ledger = json.loads((require_corpus() / "oracle" / "ledger.json").read_text())
    association = outcome_association(labelled_reference)
    for row in ledger["rows"]:
        if row["runsSeen"] == 0:
            continue
        mine = association.filter((pl.col("kind") == row["kind"]) & (pl.col("id") == row["id"]))
        assert set(mine["runs_offered"].to_list()) == {row["runsSeen"]}
        counts = {label: n for label, n in mine.select("label", "runs_offered_with_label").rows()}
        assert {k: v for k, v in counts.items() if v} == row["outcomes"]


def test_base_rates_are_the_label_shares_of_all_labelled_metered_runs(labelled_reference):
    association = outcome_association(labelled_reference)
    metered = {run_id for run_id, row in oracle_runs().items() if row["record_run"] is not None}
    labels = [row["outcome_label"] for run_id, row in oracle_runs().items() if run_id in metered]
    base = dict(association.select("label", "base_rate").unique().rows())
    assert base == {label: labels.count(label) / len(labels) for label in set(labels)}


def test_each_pieces_label_shares_add_up_to_one(labelled_reference):
    totals = (
        outcome_association(labelled_reference)
        .group_by("kind", "id")
        .agg(pl.col("share_with_label").sum())
    )
    assert totals["share_with_label"].to_list() == pytest.approx([1.0] * totals.height)


def test_csv_holds_the_interval_as_numbers_and_the_bounds_are_exact_at_the_ends():
    """The CSV has numeric earn_rate_low / earn_rate_high (not a rounded string), and a
    piece never used has a lower bound of exactly 0 (not a rounding residue like 1e-17)."""
    from click.testing import CliRunner

    from contextledger.cli import main

    result = CliRunner().invoke(main, ["ledger", "data/sample", "--format", "csv"])
    assert result.exit_code == 0
    frame = pl.read_csv(result.stdout.encode())
    assert frame.schema["earn_rate_low"] == frame.schema["earn_rate_high"] == pl.Float64
    assert "earn_rate_95ci" not in frame.columns and "used_answer_slice" in frame.columns
    never = frame.filter(pl.col("used") == 0)
    assert never.height > 0 and (never["earn_rate_low"] == 0.0).all()
    always = frame.filter((pl.col("used") == pl.col("offered")) & (pl.col("offered") > 0))
    assert (always["earn_rate_high"] == 1.0).all()
    assert wilson_interval(0, 7) is not None and wilson_interval(0, 7)[0] == 0.0


def labelled_sample(labels: dict[str, str]) -> pl.DataFrame:
    """The sample's association rows for tool run_sql, with ``labels`` as its outcomes."""
    tables = read_runs(SAMPLE).with_outcomes(
        pa.table({"run_id": list(labels), "label": list(labels.values())})
    )
    return (
        outcome_association(tables)
        .filter(pl.col("id") == "run_sql")
        .select(
            "label",
            "runs_offered_with_label",
            "runs_offered",
            "runs_labelled_with_label",
            "runs_labelled",
            "share_with_label",
            "base_rate",
            "share_minus_base",
            "vs_base_rate",
        )
    )


#: The five sample runs that offer run_sql.
RUN_SQL_RUNS = ["s0003-loop", "s0112-loop", "s0202-conv-t1", "s0202-conv-t2", "s0236-partial"]


def test_a_share_equal_to_the_base_rate_is_equal_not_a_float_residue():
    """3 of 5 runs labelled bad, all 5 offering the piece: 3/5 against 3/5. Polars once
    gave a base rate of 0.6000000000000001 and called the piece 'below'."""
    labels = dict(zip(RUN_SQL_RUNS, ["bad", "bad", "bad", "good", "good"], strict=True))
    expected = pl.DataFrame(
        {
            "label": ["bad", "good"],
            "runs_offered_with_label": [3, 2],
            "runs_offered": [5, 5],
            "runs_labelled_with_label": [3, 2],
            "runs_labelled": [5, 5],
            "share_with_label": [0.6, 0.4],
            "base_rate": [0.6, 0.4],
            "share_minus_base": [0.0, 0.0],
            "vs_base_rate": ["equal", "equal"],
        }
    )
    assert_frame_equal(labelled_sample(labels), expected, check_exact=True)


def test_a_share_above_or_below_the_base_rate_is_said_from_the_counts():
    """A sixth labelled run that does not offer run_sql: bad is 3 of 5 against 3 of 6
    (above), good 2 of 5 against 3 of 6 (below)."""
    labels = dict(zip(RUN_SQL_RUNS, ["bad", "bad", "bad", "good", "good"], strict=True))
    labels["s0001-fact-bench"] = "good"
    expected = pl.DataFrame(
        {
            "label": ["bad", "good"],
            "runs_offered_with_label": [3, 2],
            "runs_offered": [5, 5],
            "runs_labelled_with_label": [3, 3],
            "runs_labelled": [6, 6],
            "share_with_label": [0.6, 0.4],
            "base_rate": [0.5, 0.5],
            "share_minus_base": [3 / 30, -3 / 30],
            "vs_base_rate": ["above", "below"],
        }
    )
    assert_frame_equal(labelled_sample(labels), expected, check_exact=True)


def test_the_outcome_chart_calls_an_equal_share_as_often_as_the_base_rate():
    from contextledger import charts

    labels = dict(zip(RUN_SQL_RUNS, ["bad", "bad", "bad", "good", "good"], strict=True))
    tables = read_runs(SAMPLE).with_outcomes(
        pa.table({"run_id": list(labels), "label": list(labels.values())})
    )
    data = charts.outcome_chart(outcome_association(tables)).data
    directions = data.filter(pl.col("id") == "run_sql")["direction"].unique().to_list()
    assert directions == ["as often as the base rate"]
