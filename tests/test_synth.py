"""Synthetic runs: shaped like the corpus, the same for the same seed, and the archive's
streaming ledger over them equals the in-memory ledger of the same tables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.cli import main
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive, synth_snapshots
from contextledger.jobs.synth_model import synth_tables
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.read import bundled
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, read_runs

from .conftest import REPO, SAMPLE


def in_memory(seed: int, runs: int, chunk: int) -> tuple[dict[str, RunTables], pa.Table]:
    """The chunks ``synth_archive`` writes, concatenated, run_order continuing."""
    parts = [synth_tables(seed, first, min(chunk, runs - first)) for first in range(0, runs, chunk)]
    tables = {}
    for mode in ACCOUNTING_MODES:
        runs_tables = []
        for number, (chunk_tables, _) in enumerate(parts):
            table = chunk_tables[mode].runs
            orders = pa.array([number * chunk + i for i in range(table.num_rows)], pa.int64())
            runs_tables.append(table.set_column(1, "run_order", orders))
        tables[mode] = RunTables(
            mode,
            pa.concat_tables(runs_tables),
            pa.concat_tables(part[0][mode].offers for part in parts),
            pa.concat_tables(part[0][mode].uses for part in parts),
        )
    return tables, pa.concat_tables(part[1] for part in parts)


def test_synthetic_runs_look_like_the_corpus():
    tables, labels = synth_tables(seed=5, first=0, count=2000)
    corrected, reference = tables["corrected"], tables["reference"]
    offers_per_run = corrected.offers.num_rows / 2000
    assert 35 < offers_per_run < 60  # the corpus: 46.6
    assert 8 < corrected.uses.num_rows / 2000 < 16  # the corpus: 11.0
    refused = reference.runs.num_rows - sum(reference.runs["metered"].to_pylist())
    assert 0 < refused < 2000 * 0.08 and all(corrected.runs["metered"].to_pylist())
    assert set(labels["label"].to_pylist()) == {"good", "bad", "neutral", "reviewed"}
    again, _ = synth_tables(seed=5, first=0, count=2000)
    assert again["reference"].offers.equals(reference.offers)


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_archive_ledger_of_synthetic_runs_equals_the_in_memory_ledger(tmp_path, mode):
    root = tmp_path / "archive"
    report = synth_archive(root, 700, seed=11, batch_runs=300)
    assert (report.runs_added, report.commits) == (700, 3)
    tables, labels = in_memory(11, 700, 300)
    expected = compute_ledger(tables[mode].with_outcomes(labels))
    archived = ArchiveTables(Archive.open(root), mode)
    got = compute_ledger(archived)
    assert_frame_equal(got.frame, expected.frame, check_exact=True)
    assert got.runs_recorded == expected.runs_recorded
    assert_frame_equal(ledger_rows_sql(archived), expected.rows(), check_exact=True)


def test_synth_again_adds_only_what_is_missing(tmp_path):
    root = tmp_path / "archive"
    synth_archive(root, 250, seed=2, batch_runs=100)
    assert synth_archive(root, 250, seed=2, batch_runs=100).runs_added == 0
    grown = synth_archive(root, 400, seed=2, batch_runs=100)
    assert (grown.runs_added, grown.runs_already_archived) == (150, 50)
    ids = ArchiveTables(Archive.open(root), "corrected").runs["run_id"].to_pylist()
    assert len(ids) == len(set(ids)) == 400


def test_synthetic_snapshots_are_recorded_runs_under_new_ids(tmp_path):
    written = synth_snapshots(tmp_path / "runs", 28, SAMPLE, seed=4)
    copies = read_runs(tmp_path / "runs", workers=1)
    originals = read_runs(SAMPLE, workers=1)
    assert copies.problems.num_rows == 0 and copies.runs.num_rows == len(written) == 28
    assert copies.offers.num_rows == 2 * originals.offers.num_rows  # each template twice
    report = ingest([tmp_path / "runs"], tmp_path / "archive", workers=1)
    assert report.runs_added == 28 and report.bytes_read > 0


# ── the templates come with the package ────────────────────────────────────────


def test_synth_snapshots_copies_the_bundled_sample_from_any_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/sample here
    result = CliRunner().invoke(main, ["synth", "--snapshots", "out", "--runs", "3"])
    assert result.exit_code == 0, result.output
    assert result.output == "wrote 3 snapshot file(s) to out\n"
    copies = read_runs(tmp_path / "out", workers=1)
    assert copies.problems.num_rows == 0 and copies.runs.num_rows == 3


def test_the_bundled_sample_is_found_in_the_first_folder_holding_it(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "wheel" / "sample")
    found = bundled.sample((tmp_path / "wheel", SAMPLE.parent))
    assert found.runs == tmp_path / "wheel" / "sample"
    assert found.outcomes == tmp_path / "wheel" / "sample-outcomes.csv"
    assert bundled.sample((tmp_path / "nowhere", SAMPLE.parent)).runs == SAMPLE
    with pytest.raises(FileNotFoundError, match=r"not at .*nowhere.*give PATHs"):
        bundled.sample((tmp_path / "nowhere",))


def test_an_installed_wheel_ships_the_sample_and_synth_finds_it_there(tmp_path):
    from hatchling.builders.wheel import WheelBuilder

    builder = WheelBuilder(str(REPO))
    [wheel] = map(Path, builder.build(directory=str(tmp_path / "dist"), versions=["standard"]))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
    shipped = {f"contextledger/_data/sample/{path.name}" for path in SAMPLE.iterdir()}
    assert shipped <= names and "contextledger/_data/sample-outcomes.csv" in names
    # The unpacked wheel first on the path (before the editable install), run elsewhere.
    script = (
        "import sys, contextledger.read.bundled as b; from contextledger.cli import main;"
        "print(b.sample().runs, file=sys.stderr); main()"
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", script, "synth", "--snapshots", "out", "--runs", "2"],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == str(site / "contextledger" / "_data" / "sample")
    assert sorted(path.name for path in (work / "out").iterdir()) == [
        "synth-0-000000000.json.gz",
        "synth-0-000000001.json.gz",
    ]
