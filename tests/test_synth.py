"""Synthetic runs: shaped like the corpus, the same for the same seed, and the archive's
streaming ledger over them equals the in-memory ledger of the same tables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.cli import main
from contextledger.jobs import synth
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive, synth_snapshots
from contextledger.jobs.synth_model import synth_tables
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.read import bundled
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, read_runs

from .conftest import REPO, SAMPLE


def in_memory(seed: int, runs: int) -> tuple[dict[str, RunTables], pa.Table]:
    """The runs ``synth_archive`` writes, however it batches them."""
    return synth_tables(seed, 0, runs)


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
    tables, labels = in_memory(11, 700)
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


def test_a_run_is_the_same_whatever_range_of_runs_holds_it():
    # Once a run's content followed from the batch drawn with it: synth-3-000000000 had
    # 3 offers among 200 runs, 57 among 250.
    whole, labels = synth_tables(seed=3, first=0, count=2500)
    for first, count in [(0, 200), (150, 100), (1990, 20), (0, 2500)]:
        part, part_labels = synth_tables(seed=3, first=first, count=count)
        ids = pa.array([f"synth-3-{n:09d}" for n in range(first, first + count)])
        for mode in ACCOUNTING_MODES:
            expected = whole[mode].runs.slice(first, count)
            assert_frame_equal(
                pl.from_arrow(part[mode].runs).drop("run_order"),
                pl.from_arrow(expected).drop("run_order"),
                check_exact=True,
            )
            for name in ("offers", "uses"):
                got, full = getattr(part[mode], name), getattr(whole[mode], name)
                chosen = full.filter(pc.is_in(full["run_id"], value_set=ids))
                assert_frame_equal(pl.from_arrow(got), pl.from_arrow(chosen), check_exact=True)
        expected_labels = labels.filter(pc.is_in(labels["run_id"], value_set=ids))
        assert_frame_equal(
            pl.from_arrow(part_labels).sort("run_id", "label"),
            pl.from_arrow(expected_labels).sort("run_id", "label"),
            check_exact=True,
        )


def _archive_rows(root: Path) -> dict[str, pl.DataFrame]:
    """Every row of every table of the archive at ``root``, in a stable order."""
    archive = Archive.open(root)
    tables = ("runs", "offers", "uses", "outcomes", "streams", "messages", "standings")
    rows = {}
    for name in tables:
        files = archive.paths(archive.files(name))
        if not files:
            continue
        frame = pl.read_parquet(files, hive_partitioning=False)
        rows[name] = frame.sort([c for c, kind in frame.schema.items() if not kind.is_nested()])
    return rows


def test_more_runs_of_a_seed_add_to_an_archive_the_runs_a_fresh_one_holds(tmp_path):
    # --runs 250 after --runs 200 once kept runs 0-199 and wrote the 250-run batch's
    # labels for them too: 373 labels against 260, runs labelled both bad and good.
    grown, fresh = tmp_path / "grown", tmp_path / "fresh"
    date = {"seed": 3, "ingest_date": "2026-03-01", "workers": 1}
    synth_archive(grown, 200, **date)
    again = synth_archive(grown, 250, **date)
    assert (again.runs_added, again.runs_already_archived) == (50, 200)
    synth_archive(fresh, 250, **date)
    got, expected = _archive_rows(grown), _archive_rows(fresh)
    assert len(expected) == 7
    for name, rows in expected.items():
        assert_frame_equal(got[name], rows, check_exact=True)
    assert got["outcomes"].height == got["outcomes"].unique().height
    for mode in ACCOUNTING_MODES:
        got_ledger, expected_ledger = (
            compute_ledger(ArchiveTables(Archive.open(root), mode)) for root in (grown, fresh)
        )
        assert_frame_equal(got_ledger.frame, expected_ledger.frame, check_exact=True)
    runner = CliRunner()
    for command in (["outcomes"], ["ledger", "--format", "csv"]):
        outputs = [runner.invoke(main, [*command, str(root)]) for root in (grown, fresh)]
        assert outputs[0].exit_code == 0, outputs[0].output
        assert outputs[0].output == outputs[1].output


def test_synth_refuses_to_add_beside_runs_another_model_wrote(tmp_path, monkeypatch):
    root = tmp_path / "archive"
    monkeypatch.setattr(synth, "MODEL_VERSION", 2)  # an archive written by an older synth
    synth_archive(root, 100, seed=3, streams=False)
    monkeypatch.undo()
    labels_before = _archive_rows(root)["outcomes"]
    result = CliRunner().invoke(
        main, ["synth", "--runs", "150", "--archive", str(root), "--seed", "3"]
    )
    assert result.exit_code == 2
    assert "100 run(s) of seed 3 (synth-3-000000000, ...) were written by another" in result.output
    assert "synth into a new archive" in result.output
    assert_frame_equal(_archive_rows(root)["outcomes"], labels_before, check_exact=True)
    # and so is a snapshot ingested under a synthetic run's id
    other = tmp_path / "other"
    synth_snapshots(tmp_path / "runs", 1, SAMPLE, seed=3)
    ingest([tmp_path / "runs"], other, workers=1)
    with pytest.raises(ValueError, match=r"1 run\(s\) of seed 3 \(synth-3-000000000\)"):
        synth_archive(other, 10, seed=3, streams=False)


def test_synthetic_snapshots_are_recorded_runs_under_new_ids(tmp_path):
    written = synth_snapshots(tmp_path / "runs", 28, SAMPLE, seed=4)
    copies = read_runs(tmp_path / "runs", workers=1)
    originals = read_runs(SAMPLE, workers=1)
    assert copies.problems.num_rows == 0 and copies.runs.num_rows == len(written) == 28
    assert copies.offers.num_rows == 2 * originals.offers.num_rows  # each template twice
    report = ingest([tmp_path / "runs"], tmp_path / "archive", workers=1)
    assert report.runs_added == 28 and report.bytes_read > 0


def test_synth_snapshots_again_leaves_the_files_as_they_were(tmp_path):
    # Each run once rewrote every file with a new timestamp in its gzip header, so the
    # next ingest read them all again.
    folder = tmp_path / "runs"
    written = synth_snapshots(folder, 6, SAMPLE, seed=4)
    report = ingest([folder], tmp_path / "archive", workers=1)
    for path in written:  # a written file, touched in the past, is told apart from now
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = {path: (path.read_bytes(), 1_000_000_000) for path in written}
    assert synth_snapshots(folder, 6, SAMPLE, seed=4) == written
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in written} == before
    again = ingest([folder], tmp_path / "archive", workers=1)
    assert (report.files_read, again.files_read, again.files_unchanged) == (6, 0, 6)
    # the bytes themselves carry no time (gzip's MTIME field is zero): written afresh
    # elsewhere, they are the same
    assert all(path.read_bytes()[4:8] == bytes(4) for path in written)
    elsewhere = synth_snapshots(tmp_path / "elsewhere", 6, SAMPLE, seed=4)
    assert [path.read_bytes() for path in elsewhere] == [before[path][0] for path in written]
    # and a file that differs is written again
    written[0].write_bytes(b"{}")
    synth_snapshots(folder, 6, SAMPLE, seed=4)
    assert written[0].read_bytes() == before[written[0]][0]


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
