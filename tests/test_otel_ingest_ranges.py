"""An ingest of traces holds a batch of runs, not the input: archives equal to one range.

Each test lowers the span budget (``_spill.SPANS_HELD``, 8192 records) to a few records
and the runs assembled at a time (``ingest.TRACE_PART_RUNS``) to two, so the
recordings of ``data/otel`` (one trace split over two files) spill in the file's
reader, are assembled range by range and committed ``batch_runs`` at a time; the
archive must hold the rows an ingest of everything at once holds, manifest included.
The messy input adds a file read twice, a span copied with another value and a cut line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables, verify_archive
from contextledger.jobs import ingest as ingest_module
from contextledger.jobs.ingest import ingest
from contextledger.jobs.ingest_merge import ArchivedTraces
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.invariants import check_invariants
from contextledger.read.otel import _spill, read_trace_file
from contextledger.tables import files as files_module
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import SAMPLE
from .test_otel_archive import _split
from .test_otel_read import TRACES
from .test_otel_spill import messy_traces

DATE = "2026-12-02"
#: Span records held before spilling, and trace runs assembled at a time, in these tests.
TINY, PART = 3, 2
#: Tables with a row per run (or per run and piece), whatever the batches.
PER_RUN = ("runs", "offers", "uses", "run_totals")
ONCE = ("streams", "messages", "standings", "spans", "run_index")
#: Tables whose rows are per commit: equal only when the runs are committed at once.
PER_COMMIT = ("piece_totals", "label_credit")
MANIFEST = ("sources", "quarantine")
#: How an ingest's spill folder is named (read/otel/_spill.py: spill_folder).
SPILLS = "contextledger-spill-ingest-"


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recordings made messy as ``test_otel_spill`` makes them."""
    return messy_traces(tmp_path_factory.mktemp("messy"))


@pytest.fixture(scope="module")
def whole(messy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The messy input ingested as before: every trace run in memory, one range."""
    root = tmp_path_factory.mktemp("whole") / "archive"
    ingest([messy], root, workers=1, ingest_date=DATE)
    return root


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(ingest_module, "TRACE_PART_RUNS", PART, raising=False)


def _stored(root: Path, table: str, mode: str | None = None) -> pl.DataFrame:
    archive = Archive.open(root)
    chosen = [f for f in archive.files(table) if mode is None or f.accounting == mode]
    return pl.read_parquet(archive.paths(chosen)) if chosen else pl.DataFrame()


def assert_tables_equal(
    ours: Path, theirs: Path, tables: tuple[str, ...], *, commits: bool = False
) -> None:
    """The stored rows of ``tables``, file after file (commits in order), exactly; offers
    and uses as the ledger reads them (stored split by first row in the run, per commit);
    ``commits``: ``ours`` in several commits, so run totals (in the order a commit's
    pieces first appear) in run and piece order."""
    for table in tables:
        for mode in ACCOUNTING_MODES if table in (*PER_RUN, *PER_COMMIT) else (None,):
            if table in ("offers", "uses"):
                frames = [
                    pl.DataFrame(getattr(ArchiveTables(Archive.open(root), str(mode)), table))
                    for root in (ours, theirs)
                ]
            else:
                frames = [_stored(root, table, mode) for root in (ours, theirs)]
            if commits and table == "run_totals":
                frames = [frame.sort("run_order", "kind", "piece_id") for frame in frames]
            try:
                assert_frame_equal(frames[0], frames[1], check_exact=True)
            except AssertionError as error:
                raise AssertionError(f"{table} {mode}: {error}") from None


@pytest.mark.parametrize("workers", [1, 2])
def test_ingest_in_ranges_gives_the_archive_of_one_range(
    messy: Path, whole: Path, tmp_path, tiny, workers: int
) -> None:
    """Records spilled by the files' readers (this process, or worker processes),
    runs assembled two at a time, one commit: every table equal, row for row, the
    per-commit totals and the manifest too."""
    report = ingest([messy], tmp_path / "ranges", workers=workers, ingest_date=DATE)
    assert report.commits == 1
    assert_tables_equal(tmp_path / "ranges", whole, PER_RUN + ONCE + PER_COMMIT + MANIFEST)
    assert report.duplicates and report.problems
    assert verify_archive(tmp_path / "ranges") == []


def test_ingest_commits_a_batch_of_trace_runs_at_a_time(messy: Path, whole: Path, tmp_path, tiny):
    """The failing case of holding every trace run until the end: runs are committed
    ``batch_runs`` at a time, each trace file's manifest row once, by the last."""
    report = ingest([messy], tmp_path / "batches", workers=1, ingest_date=DATE, batch_runs=25)
    counts = [commit.run_count for commit in Archive.open(tmp_path / "batches").commits]
    assert report.commits == len(counts) > 1 and sum(counts) == Archive.open(whole).run_count
    assert all(25 <= count < 25 + PART for count in counts[:-1])
    assert_tables_equal(tmp_path / "batches", whole, PER_RUN + ONCE + MANIFEST, commits=True)
    for mode in ACCOUNTING_MODES:
        ours = ArchiveTables(Archive.open(tmp_path / "batches"), mode)
        files = read_runs([messy], mode=mode, workers=1)
        assert_frame_equal(
            compute_ledger(ours).rows(), compute_ledger(files).rows(), check_exact=True
        )
        checked = check_invariants(ours)
        assert checked.holds, checked.violations


def test_a_big_trace_file_is_spilled_by_its_reader_in_an_ingest(tmp_path, tiny, monkeypatch):
    """The failing case of a reader that hands back every record of a file."""
    spilled: list[bool] = []

    def reading(path: Path, **options: object) -> object:
        read = read_trace_file(path, **options)  # type: ignore[arg-type]
        spilled.append(read.spilled is not None)
        return read

    monkeypatch.setattr(files_module, "_read_trace_file", reading)
    ingest([TRACES[0]], tmp_path / "archive", workers=1)
    assert spilled == [True]


def test_an_ingest_makes_its_spill_folder_only_when_a_reader_spills(tmp_path, tiny, monkeypatch):
    """The failing case: every ingest made a spill folder, traces or not, which a killed
    ingest left behind. Snapshots make none; a trace file past the budget makes it,
    and it is gone after."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    seen: list[list[str]] = []

    def reader(sources, sidecar, spill):
        for source, read in ingest_module.local_reader(1)(sources, sidecar, spill):
            seen.append([p.name for p in temporary.iterdir() if p.name.startswith(SPILLS)])
            yield source, read

    ingest([SAMPLE], tmp_path / "snapshots", reader=reader)
    assert len(seen) == 14 and not any(seen)
    seen.clear()
    ingest([TRACES[0]], tmp_path / "traces", reader=reader)
    assert len(seen) == 1 and seen[0]
    assert not list(temporary.iterdir())


def test_a_merge_with_an_earlier_ingest_in_ranges_equals_one_ingest_of_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spans that grow a run archived before, read past the budget and committed a run
    at a time, give the archive of one ingest of both files."""
    today, tomorrow = _split(tmp_path)
    ingest([today], tmp_path / "grown", workers=1, ingest_date=DATE)
    ingest([today, tomorrow], tmp_path / "whole", workers=1, ingest_date=DATE)
    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    monkeypatch.setattr(ingest_module, "TRACE_PART_RUNS", 1, raising=False)
    again = ingest([tomorrow], tmp_path / "grown", workers=1, ingest_date=DATE, batch_runs=1)
    assert (again.runs_added, again.runs_extended, again.commits) == (4, 1, 5)
    assert_tables_equal(tmp_path / "grown", tmp_path / "whole", PER_RUN + ONCE, commits=True)
    ours = ArchiveTables(Archive.open(tmp_path / "grown"), "corrected")
    theirs = ArchiveTables(Archive.open(tmp_path / "whole"), "corrected")
    assert_frame_equal(compute_ledger(ours).rows(), compute_ledger(theirs).rows(), check_exact=True)
    assert check_invariants(ours).holds
    assert verify_archive(tmp_path / "grown") == []


def test_archived_records_are_handed_out_a_group_of_whole_runs_at_a_time(tmp_path, monkeypatch):
    """The failing case of one list of every archived record the spans read now join."""
    ingest(TRACES, tmp_path / "archive", workers=1)
    monkeypatch.setattr(_spill, "SPANS_HELD", TINY)
    read = read_trace_file(TRACES[0])
    archived = ArchivedTraces(Archive.open(tmp_path / "archive"))
    groups = list(archived.records_for(read))
    runs = [{archived._traces[record.trace_id] for record in group} for group in groups]
    assert len(groups) > 1
    assert all(
        len(group) <= TINY or len(held) == 1 for group, held in zip(groups, runs, strict=True)
    )
    assert len({run for held in runs for run in held}) == sum(len(held) for held in runs)
    assert {r.trace_id for r in read.spans} <= {r.trace_id for group in groups for r in group}
