"""Stored run totals: under a run-level filter (labels, run ids) the ledger adds up the
selected runs' per-run totals instead of reading every offer and use, and gives exactly
the ledger of the rows path, of the DuckDB views and of the snapshots of the same runs;
a commit written before run totals were stored sends the whole selection back to the
rows."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables, Selection, verify_archive
from contextledger.archive.selection import parse_archive_path
from contextledger.jobs.ingest import ingest
from contextledger.ledger.compute import compute_ledger, ledger_inputs
from contextledger.ledger.duckdb_views import connect, ledger_rows_sql
from contextledger.ledger.invariants import check_invariants
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import SAMPLE, require_corpus
from .test_duckdb_ledger import corpus_outcomes
from .test_label_credit import write_labels


@pytest.fixture(scope="module")
def labelled_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 corpus runs in commits of 30, partitions interleaving run orders, labelled at
    ingest (labels before most of their runs, and a second label on some)."""
    folder = tmp_path_factory.mktemp("run-totals")
    labels = write_labels(folder / "labels.csv", corpus_outcomes())
    files = sorted((require_corpus() / "runs").glob("*.json.gz"))
    picked = [*files[:60], *files[-60:]]  # loops, conversations, wrap-ups and edge cases
    root = folder / "archive"
    ingest(picked, root, partition_by="runner_kind", batch_runs=30, outcomes=labels, workers=1)
    return root


def _selections(root: Path) -> list[Selection]:
    """A label, two labels, a label no run carries, many run ids (every third run,
    and a few unknown), and run ids and a label together."""
    runs = pl.read_parquet(ArchiveTables(Archive.open(root), "corrected").files("runs"))
    ids = runs.sort("run_order")["run_id"].to_list()
    return [
        Selection(labels=("good",)),
        Selection(labels=("bad", "reviewed")),
        Selection(labels=("no-such-label",)),
        Selection(run_ids=(*ids[::3], "no-such-run")),
        Selection(run_ids=tuple(ids[:150]), labels=("good", "neutral")),
    ]


def _snapshot_ledger(tables: ArchiveTables) -> pl.DataFrame:
    """The ledger of the selected runs' snapshot files read directly, with the labels."""
    chosen = tables.scan("runs").sort("run_order").collect()
    paths = list(dict.fromkeys(chosen["source_path"].to_list()))
    if not paths:
        return compute_ledger(ledger_inputs(tables)).frame.clear()
    direct = read_runs(paths, mode=tables.mode).with_outcomes(corpus_outcomes())
    return compute_ledger(direct).frame


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_run_totals_give_the_ledger_of_the_rows(labelled_archive, mode):
    for selection in _selections(labelled_archive):
        tables = ArchiveTables(Archive.open(labelled_archive), mode, selection)
        inputs = ledger_inputs(tables)
        assert inputs.run_totals is not None and inputs.totals is None, selection
        assert "run_totals" in tables.duckdb_sources()
        got = compute_ledger(inputs)
        from_rows = compute_ledger(replace(inputs, run_totals=None))
        assert_frame_equal(got.frame, from_rows.frame, check_exact=True)
        assert got.runs_recorded == from_rows.runs_recorded
        assert_frame_equal(ledger_rows_sql(tables), got.rows(), check_exact=True)
        if selection.labels in (("bad", "reviewed"), ("good", "neutral")):  # slower: reread
            assert_frame_equal(got.frame, _snapshot_ledger(tables), check_exact=True)
        if selection.labels == ("bad", "reviewed"):
            assert check_invariants(tables).holds  # the run totals' counts against the rows
        if selection.labels == ("no-such-label",):
            assert got.runs_recorded == 0 and got.frame.is_empty()
        else:
            assert got.runs_recorded > 0 and got.frame["outcomes"].list.len().sum() > 0


def test_without_a_run_level_filter_the_piece_totals_stand(labelled_archive):
    tables = ArchiveTables(Archive.open(labelled_archive), "corrected")
    assert tables.run_totals_scan() is None and tables.totals_scan() is not None
    assert "run_totals" not in tables.duckdb_sources()


def test_a_commit_without_run_totals_sends_the_selection_to_the_rows(labelled_archive, tmp_path):
    root = tmp_path / "archive"
    shutil.copytree(labelled_archive, root)
    commit_file = sorted((root / "_manifest" / "commits").glob("*.json"))[1]
    commit = json.loads(commit_file.read_text())  # commit 2 as written before run totals
    commit["files"] = [f for f in commit["files"] if f["table"] != "run_totals"]
    commit_file.write_text(json.dumps(commit))
    assert verify_archive(root) == []
    for selection in _selections(root)[:2]:
        before = ArchiveTables(Archive.open(labelled_archive), "corrected", selection)
        tables = ArchiveTables(Archive.open(root), "corrected", selection)
        assert tables.run_totals_scan() is None
        assert "run_totals" not in tables.duckdb_sources()
        assert_frame_equal(
            compute_ledger(tables).frame, compute_ledger(before).frame, check_exact=True
        )
        assert_frame_equal(ledger_rows_sql(tables), compute_ledger(before).rows(), check_exact=True)
    # a selection of runs in other commits only still reads their run totals
    runs = pl.read_parquet(ArchiveTables(Archive.open(root), "corrected").files("runs"))
    last = tuple(runs.sort("run_order")["run_id"].tail(5).to_list())
    chosen = ArchiveTables(Archive.open(root), "corrected", Selection(run_ids=last))
    assert chosen.run_totals_scan() is not None


def test_a_long_run_id_list_in_the_path_is_read(labelled_archive):
    runs = pl.read_parquet(ArchiveTables(Archive.open(labelled_archive), "corrected").files("runs"))
    ids = runs["run_id"].to_list()
    text = f"{labelled_archive}?run_id={','.join(ids)}"
    assert len(text.rpartition("/")[2]) > 255  # past a file name: was ENAMETOOLONG, a traceback
    found = parse_archive_path(text)
    assert found is not None and found[1].run_ids == tuple(ids)


def test_run_totals_out_of_step_with_the_rows_are_named(labelled_archive):
    tables = ArchiveTables(Archive.open(labelled_archive), "corrected", Selection(labels=("bad",)))
    inputs = ledger_inputs(tables)
    assert inputs.run_totals is not None
    assert check_invariants(inputs, "corrected").holds
    more = inputs.run_totals.with_columns(offered=pl.col("offered") + 1)  # one more offer each
    found = check_invariants(replace(inputs, run_totals=more), "corrected").violations
    assert set(found["invariant"]) == {"run-totals-equal-rows"}
    assert found["detail"].str.contains("offered: stored").all()


@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample's 14 runs in commits of 5, labelled at ingest: two labels on a
    run (given in the other order on another), a pair given twice, runs left unlabelled."""
    folder = tmp_path_factory.mktemp("run-totals-sample")
    ids = [path.name.removesuffix(".json.gz") for path in sorted(SAMPLE.glob("*.json.gz"))]
    rows = [
        (ids[0], "good"),
        (ids[1], "bad"),
        (ids[2], "good"),
        (ids[2], "reviewed"),
        (ids[3], "reviewed"),
        (ids[3], "good"),
        (ids[4], "good"),
        (ids[4], "good"),
        (ids[6], "bad"),
        (ids[9], "good"),
        (ids[11], "bad"),
    ]
    labels = pa.table({"run_id": [r for r, _ in rows], "label": [label for _, label in rows]})
    root = folder / "archive"
    outcomes = write_labels(folder / "labels.csv", labels)
    ingest([SAMPLE], root, batch_runs=5, outcomes=outcomes, workers=1)
    return root


@pytest.mark.parametrize(
    "selection",
    [
        Selection(labels=("good",)),
        Selection(labels=("reviewed", "bad")),
        Selection(labels=("no-such-label",)),
        Selection(run_ids=("s0001-fact-bench", "s0003-loop", "s0048-loop", "s0224-wrapup")),
    ],
    ids=["good", "two-labels", "absent-label", "run-ids"],
)
def test_run_totals_of_the_sample_give_the_ledger_of_the_rows(sample_archive, selection):
    tables = ArchiveTables(Archive.open(sample_archive), "corrected", selection)
    inputs = ledger_inputs(tables)
    assert inputs.run_totals is not None
    got = compute_ledger(inputs)
    from_rows = compute_ledger(replace(inputs, run_totals=None))
    assert_frame_equal(got.frame, from_rows.frame, check_exact=True)
    assert got.runs_recorded == from_rows.runs_recorded
    assert_frame_equal(ledger_rows_sql(tables), from_rows.rows(), check_exact=True)
    without = WithoutRunTotals(Archive.open(sample_archive), "corrected", selection)
    assert_frame_equal(ledger_rows_sql(without), from_rows.rows(), check_exact=True)
    credited = got.frame["outcomes"].list.len().sum()
    assert credited == 0 if selection.labels == ("no-such-label",) else credited > 0


def test_labels_given_again_at_the_command_line_are_credited_once(sample_archive):
    """Labels added to the archive's (``--outcomes``): a new label selecting another run,
    a stored pair given again, and a label after a run's stored one."""
    ids = [path.name.removesuffix(".json.gz") for path in sorted(SAMPLE.glob("*.json.gz"))]
    given = pa.table({"run_id": [ids[1], ids[0], ids[0]], "label": ["good", "good", "late"]})
    archive = Archive.open(sample_archive)
    tables = ArchiveTables(archive, "corrected", Selection(labels=("good",))).with_outcomes(given)
    inputs = ledger_inputs(tables)
    assert inputs.run_totals is not None
    from_rows = compute_ledger(replace(inputs, run_totals=None))
    assert_frame_equal(compute_ledger(inputs).frame, from_rows.frame, check_exact=True)
    assert_frame_equal(ledger_rows_sql(tables), from_rows.rows(), check_exact=True)
    labels = {item["label"] for items in from_rows.frame["outcomes"].to_list() for item in items}
    assert labels == {"good", "bad", "reviewed", "late"}


class WithoutRunTotals(ArchiveTables):
    """An archive's tables read as if it stored no run totals (DuckDB reads the rows)."""

    def run_totals_files(self) -> list[str] | None:
        return None


def test_the_duckdb_ledger_adds_up_the_run_totals_once(labelled_archive):
    """Under a run-level filter the views read one table of the selected runs' totals,
    made when they are: no Parquet file is read again for the ledger (it read the run
    totals three times, 4.5x the bare scan at 1M runs)."""
    tables = ArchiveTables(Archive.open(labelled_archive), "corrected", Selection(labels=("good",)))
    con = connect(tables)
    try:
        plan = "\n".join(row[1] for row in con.sql("EXPLAIN SELECT * FROM ledger_rows").fetchall())
        assert "READ_PARQUET" not in plan and "run_totals_pieces" in plan
        assert_frame_equal(
            con.sql("SELECT * FROM ledger_rows").pl(),
            compute_ledger(tables).rows(),
            check_exact=True,
        )
    finally:
        con.close()


def _many_labels(ids: list[str]) -> pa.Table:
    """Every run labelled: up to four labels of 70 each, given in run-dependent orders,
    some twice, so that runs share a label set in different orders and sets differ."""
    rows = []
    for number, run_id in enumerate(ids):
        picked = [f"label-{(number * step) % 70:02d}" for step in (1, 3, 7, 11)[: 1 + number % 4]]
        rows += [(run_id, label) for label in (picked if number % 2 else picked[::-1])]
        rows.append((run_id, picked[0]))  # a pair given again
    rows.append((ids[0], "good"))
    return pa.table({"run_id": [r for r, _ in rows], "label": [label for _, label in rows]})


@pytest.mark.parametrize("dense", [True, False], ids=["looked-up", "joined"])
def test_many_label_sets_are_credited_as_the_rows_credit_them(sample_archive, monkeypatch, dense):
    """Runs with one to four of 70 labels (label sets of each size, a label's row order
    differing between runs), by the run-order array and by a join (a sparse selection)."""
    if not dense:
        monkeypatch.setattr("contextledger.ledger.run_totals._DENSE_SPAN_FREE", 0)
        monkeypatch.setattr("contextledger.ledger.run_totals._DENSE_SPAN_PER_RUN", 0)
    ids = [path.name.removesuffix(".json.gz") for path in sorted(SAMPLE.glob("*.json.gz"))]
    archive = Archive.open(sample_archive)
    for selection in (Selection(labels=("good", "label-03")), Selection(run_ids=tuple(ids[1:]))):
        tables = ArchiveTables(archive, "corrected", selection).with_outcomes(_many_labels(ids))
        inputs = ledger_inputs(tables)
        assert inputs.run_totals is not None
        got = compute_ledger(inputs)
        from_rows = compute_ledger(replace(inputs, run_totals=None))
        assert_frame_equal(got.frame, from_rows.frame, check_exact=True)
        assert_frame_equal(ledger_rows_sql(tables), from_rows.rows(), check_exact=True)
        assert got.frame["outcomes"].list.len().max() > 4  # many labels on a piece
