"""The formats for scripts: ``--format jsonl`` holds the CSV's rows exactly (snake_case,
intervals included, unlike LedgerJSON), and ``--csv-safe`` guards text cells a
spreadsheet would run as formulas, which plain CSV keeps as they are."""

from __future__ import annotations

import gzip
import io
import json

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.cli import main

from .conftest import SAMPLE

OUTCOMES = SAMPLE.parent / "sample-outcomes.csv"
STANDINGS = SAMPLE.parent / "sample-standings.csv"
#: Every command offering both csv and jsonl, with its arguments.
BOTH = {
    "ledger": ["ledger", str(SAMPLE), "--outcomes", str(OUTCOMES)],
    "outcomes": ["outcomes", str(SAMPLE), "--outcomes", str(OUTCOMES)],
    "gates": ["gates", str(SAMPLE), "--min-offers", "1"],
    "sql": ["sql", str(SAMPLE), "select * from ledger_rows"],
    "compare": ["compare", str(SAMPLE), "--standings", str(STANDINGS)],
    "whatif": ["whatif", str(SAMPLE), "--policy", "none", "--policy", "sliding:keep=3"],
}


def output(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", BOTH)
def test_jsonl_rows_equal_the_csv_rows_exactly(command):
    csv_text = output([*BOTH[command], "--format", "csv"])
    jsonl_text = output([*BOTH[command], "--format", "jsonl"])
    from_jsonl = pl.read_ndjson(io.StringIO(jsonl_text))
    nested = [name for name, dtype in from_jsonl.schema.items() if dtype.is_nested()]
    from_jsonl = from_jsonl.with_columns(  # sql's, whatif's CSV: nested values as JSON text
        pl.Series(name, [json.dumps(v) for v in from_jsonl[name].to_list()]) for name in nested
    )
    # A column null in every row (compare's recorded cache use, on snapshots) has no type
    # in JSON Lines: both sides read it as text.
    from_jsonl = from_jsonl.with_columns(
        pl.col(name).cast(pl.String)
        for name, dtype in from_jsonl.schema.items()
        if dtype == pl.Null
    )
    from_csv = pl.read_csv(io.StringIO(csv_text), schema=from_jsonl.schema)
    assert from_csv.height == len(jsonl_text.splitlines()) > 0
    assert_frame_equal(from_csv, from_jsonl, check_exact=True)


def test_ledger_jsonl_is_snake_case_with_the_interval_and_json_stays_ledgerjson():
    first = json.loads(output([*BOTH["ledger"], "--format", "jsonl"]).splitlines()[0])
    assert {"approx_tokens_spent", "earn_rate_low", "earn_rate_high", "judged"} <= set(first)
    ledger = json.loads(output([*BOTH["ledger"], "--format", "json"]))
    assert set(ledger) == {"version", "rows", "runsRecorded"}
    assert "earn_rate_low" not in ledger["rows"][0] and "earnRate" in ledger["rows"][0]


@pytest.mark.parametrize("command", ["whatif", "sql", "compare"])
def test_jsonl_is_the_json_lines_json_already_gives_for_row_results(command):
    args = {
        "whatif": ["whatif", str(SAMPLE), "--policy", "none"],
        "sql": BOTH["sql"],
        "compare": ["compare", str(SAMPLE), "--policy", "none"],
    }[command]
    assert output([*args, "--format", "jsonl"]) == output([*args, "--format", "json"])


@pytest.fixture
def formula_run(tmp_path):
    """The fact bench with a tool named as a spreadsheet formula."""
    text = gzip.decompress((SAMPLE / "s0001-fact-bench.json.gz").read_bytes()).decode()
    (tmp_path / "bench.json").write_text(
        text.replace("probe_fact", "=HYPERLINK(1)"), encoding="utf-8"
    )
    return tmp_path / "bench.json"


def test_csv_keeps_a_formula_like_cell_as_it_is_and_csv_safe_guards_it(formula_run):
    plain = output(["ledger", str(formula_run), "--format", "csv"])
    assert "\n=HYPERLINK(1),tool," in plain
    safe = output(["ledger", str(formula_run), "--format", "csv", "--csv-safe"])
    assert "\n'=HYPERLINK(1),tool," in safe and "\n=HYPERLINK" not in safe
    assert plain.replace("\n=HYPERLINK", "\n'=HYPERLINK") == safe  # nothing else changes


def test_csv_safe_guards_every_formula_start_and_leaves_numbers_alone():
    from contextledger.output import spreadsheet_safe

    frame = pl.DataFrame(
        {
            "text": ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "a=b", "ok", None],
            "count": [-1, 1, 2, 3, 4, 5, 6, 7, 8],
        }
    )
    expected = frame.with_columns(
        text=pl.Series(["'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "a=b", "ok", None])
    )
    assert_frame_equal(spreadsheet_safe(frame), expected, check_exact=True)


@pytest.mark.parametrize("command", ["outcomes", "gates", "sql", "compare", "whatif"])
def test_every_csv_command_takes_csv_safe_and_leaves_ordinary_cells_alone(command):
    plain = output([*BOTH[command], "--format", "csv"])
    assert output([*BOTH[command], "--format", "csv", "--csv-safe"]) == plain


def test_the_ledger_table_is_the_csv_with_signals_and_bounds_folded():
    """One list of the ledger's columns (``ledger_csv_rows``): the table shows the same
    columns in the same order, the per-signal counts folded into ``used_via`` and the
    interval's bounds into ``earn_rate_95ci`` after ``earn_rate``, and the same values."""
    from contextledger.cli.ledger import _printable
    from contextledger.ledger.compute import compute_ledger
    from contextledger.ledger.stats import with_uncertainty
    from contextledger.tables.build import read_runs
    from contextledger.tables.schema import USED_SIGNAL_COLUMNS

    rows = with_uncertainty(compute_ledger(read_runs(SAMPLE, workers=1)).rows())
    for_csv, table = _printable(rows, for_csv=True), _printable(rows)
    folded = [*USED_SIGNAL_COLUMNS.values(), "earn_rate_low", "earn_rate_high"]
    kept = [name for name in for_csv.columns if name not in folded]
    assert table.columns == [*kept[: kept.index("earn_rate") + 1], "earn_rate_95ci", "judged"]
    assert_frame_equal(table.select(kept), for_csv.select(kept), check_exact=True)
    low, high = rows["earn_rate_low"][0], rows["earn_rate_high"][0]
    assert table["earn_rate_95ci"][0] == f"[{low:.3f}, {high:.3f}]"
