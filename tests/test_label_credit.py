"""Stored label credit: the ledger adds up each commit's (piece, label) credit instead of
joining every first offer with the labels, and gives the ledger the labels give, exactly;
labels that arrive later (a later ingest's, a changed outcomes file, ``--outcomes``), an
older archive and a damaged one fall back to crediting the first offers, correctly."""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables, verify_archive
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive
from contextledger.ledger.compute import compute_ledger, ledger_inputs
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.ledger.invariants import check_invariants
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import require_corpus
from .test_duckdb_ledger import corpus_outcomes


def write_labels(path: Path, table: pa.Table) -> Path:
    pacsv.write_csv(table, path)
    return path


def run_files() -> list[Path]:
    return sorted((require_corpus() / "runs").glob("*.json.gz"))


def assert_same_ledger(tables: ArchiveTables, labels: pa.Table) -> None:
    """The archive's ledger (Polars and DuckDB) is the one of the rows path and of the
    snapshots read directly with ``labels``."""
    inputs = ledger_inputs(tables)
    got = compute_ledger(inputs)
    from_rows = compute_ledger(replace(inputs, totals=None, credit=None))
    assert_frame_equal(got.frame, from_rows.frame, check_exact=True)
    direct = compute_ledger(read_runs(run_files(), mode=tables.mode).with_outcomes(labels))
    assert_frame_equal(got.frame, direct.frame, check_exact=True)
    assert_frame_equal(ledger_rows_sql(tables), direct.rows(), check_exact=True)


@pytest.fixture(scope="module")
def labelled_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus in commits of 40 runs, partitions interleaving run orders, the labels
    given with the ingest (committed with the first batch: before most of their runs)."""
    folder = tmp_path_factory.mktemp("labelled")
    labels = write_labels(folder / "labels.csv", corpus_outcomes())
    root = folder / "archive"
    ingest(
        [require_corpus() / "runs"],
        root,
        partition_by="runner_kind",
        batch_runs=40,
        outcomes=labels,
        workers=1,
    )
    return root


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_stored_label_credit_gives_the_ledger_the_labels_give(labelled_archive, mode):
    tables = ArchiveTables(Archive.open(labelled_archive), mode)
    inputs = ledger_inputs(tables)
    assert inputs.credit is not None and inputs.credit.uncovered is None  # all stored
    assert "label_credit" in tables.duckdb_sources()
    assert_same_ledger(tables, corpus_outcomes())
    assert check_invariants(tables).holds
    # a run-level filter reads the rows, labels and all
    assert tables.select(labels=("success",)).credit_scan() is None


def test_labels_given_with_the_ledger_fall_back(labelled_archive):
    more = pa.table({"run_id": [run_files()[5].name.split(".")[0]], "label": ["late"]})
    tables = ArchiveTables(Archive.open(labelled_archive), "corrected").with_outcomes(more)
    assert tables.credit_split() is None
    assert_same_ledger(tables, pa.concat_tables([corpus_outcomes(), more]))


def test_labels_arriving_later_fall_back_for_the_commits_whose_runs_they_name(tmp_path):
    """A later ingest's labels for runs of an earlier commit, and a changed outcomes file
    that drops labels of runs committed since: those commits are credited from their
    first offers, the others from their stored credit; one ledger either way."""
    files = run_files()
    ids = [path.name.split(".")[0] for path in files]
    first = write_labels(
        tmp_path / "first.csv",
        pa.table({"run_id": ids[::3], "label": ["good"] * len(ids[::3])}),
    )
    root = tmp_path / "archive"
    ingest(files[:150], root, batch_runs=50, outcomes=first, workers=1)
    ingest(files[150:], root, batch_runs=50, workers=1)
    # commits 1-3: the first 150 runs, 4-7: the rest (50, 50, 50, 1); all labelled
    archive = Archive.open(root)
    assert [c.run_count for c in archive.commits] == [50] * 6 + [1]
    index = pl.read_parquet(archive.paths(archive.files("run_index"))).sort("run_order")
    assert index["run_id"].to_list() == ids  # run ids as the files are named
    assert ArchiveTables(archive, "corrected").credit_split() == (set(range(1, 8)), set())
    # run 60 (commit 2) gets a second label, from a new outcomes file
    later = write_labels(tmp_path / "later.csv", pa.table({"run_id": [ids[60]], "label": ["bad"]}))
    ingest([], root, outcomes=later, workers=1)
    tables = ArchiveTables(Archive.open(root), "corrected")
    assert tables.credit_split() == ({1, 3, 4, 5, 6, 7}, {2})
    expected = pa.concat_tables([pl.read_csv(first).to_arrow(), pl.read_csv(later).to_arrow()])
    for mode in ACCOUNTING_MODES:
        assert_same_ledger(_mode(root, mode), expected)
    # the first file changes: run 200's label (commit 5) is dropped, run 1 gets another
    changed = pl.read_csv(first).filter(pl.col("run_id") != ids[201])
    changed = pl.concat([changed, pl.DataFrame({"run_id": [ids[1]], "label": ["reviewed"]})])
    write_labels(first, changed.to_arrow())
    ingest([], root, outcomes=first, workers=1)
    tables = ArchiveTables(Archive.open(root), "corrected")
    assert tables.credit_split() == ({3, 4, 6, 7}, {1, 2, 5})
    expected = pa.concat_tables([changed.to_arrow(), pl.read_csv(later).to_arrow()])
    for mode in ACCOUNTING_MODES:
        assert_same_ledger(_mode(root, mode), expected)
        assert check_invariants(_mode(root, mode)).holds


def _mode(root: Path, mode: str) -> ArchiveTables:
    return ArchiveTables(Archive.open(root), mode)


def test_an_archive_written_before_label_credit_reads_its_first_offers(labelled_archive, tmp_path):
    root = tmp_path / "archive"
    shutil.copytree(labelled_archive, root)
    commits = sorted((root / "_manifest" / "commits").glob("*.json"))
    for number, commit_file in enumerate(commits, 1):  # commit 2 as written before, then all
        commit = json.loads(commit_file.read_text())
        if number == 2:
            del commit["label_credit"]
            commit["files"] = [f for f in commit["files"] if f["table"] != "label_credit"]
            commit_file.write_text(json.dumps(commit))
    tables = _mode(root, "corrected")
    assert tables.credit_split() == ({1, 3, 4, 5, 6, 7, 8}, {2})
    assert_same_ledger(tables, corpus_outcomes())
    for commit_file in commits:
        commit = json.loads(commit_file.read_text())
        commit.pop("label_credit", None)
        commit["files"] = [f for f in commit["files"] if f["table"] != "label_credit"]
        commit_file.write_text(json.dumps(commit))
    shutil.rmtree(root / "label_credit")
    tables = _mode(root, "reference")
    assert tables.credit_split() is None
    assert_same_ledger(tables, corpus_outcomes())
    assert verify_archive(root) == []


def test_damaged_or_out_of_step_label_credit_is_named(labelled_archive, tmp_path):
    root = tmp_path / "archive"
    shutil.copytree(labelled_archive, root)
    paths = sorted((root / "label_credit" / "accounting=corrected").rglob("*.parquet"))
    # out of step at the same size: the invariant names it (the ledger cannot know)
    stored = pl.read_parquet(paths[0])
    stored.with_columns(runs=pl.col("runs") + 1).write_parquet(paths[0])
    for commit_file in (root / "_manifest" / "commits").glob("*.json"):
        commit = json.loads(commit_file.read_text())
        for entry in commit["files"]:
            if root / entry["path"] == paths[0]:  # as written so: a writer's mistake
                entry["bytes"] = paths[0].stat().st_size
                commit["crc32"][entry["path"]] = zlib.crc32(paths[0].read_bytes())
        commit_file.write_text(json.dumps(commit))
    report = check_invariants(_mode(root, "corrected"))
    found = report.violations.filter(pl.col("invariant") == "label-credit-equal-rows")
    assert found.height == stored.height
    assert all(" runs: stored " in detail for detail in found["detail"])
    # truncated: the commit is left out, named, and no stored credit is trusted
    paths[1].write_bytes(paths[1].read_bytes()[:-10])
    tables = _mode(root, "corrected")
    assert any(str(paths[1]) in str(problem) for problem in tables.damage)
    assert tables.credit_split() is None
    assert any(str(paths[1]) in str(problem) for problem in verify_archive(root))


def test_synth_stores_label_credit(tmp_path):
    root = tmp_path / "archive"
    synth_archive(root, runs=3000, seed=5, streams=False, batch_runs=1000, workers=1)
    for mode in ACCOUNTING_MODES:
        tables = _mode(root, mode)
        inputs = ledger_inputs(tables)
        assert inputs.credit is not None and inputs.credit.uncovered is None
        got = compute_ledger(inputs)
        from_rows = compute_ledger(replace(inputs, totals=None, credit=None))
        assert_frame_equal(got.frame, from_rows.frame, check_exact=True)
        assert got.frame["outcomes"].list.len().sum() > 0
        assert_frame_equal(ledger_rows_sql(tables), from_rows.rows(), check_exact=True)
        assert check_invariants(tables).holds
