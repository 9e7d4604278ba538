"""A data file changed in place at its own length (a byte flipped, random bytes) is
found by its commit's CRC-32, and takes its commit out as a truncated one does."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from contextledger.archive import Archive, ArchiveDamaged, ArchiveTables, verify_archive
from contextledger.archive.location import Location
from contextledger.archive.verified import VerifiedParts
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.ledger.compute import compute_ledger

from .conftest import SAMPLE

OUTCOMES = Path(SAMPLE).parent / "sample-outcomes.csv"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "archive"
    args = ["--batch-runs", "5", "--workers", "1", "--outcomes", str(OUTCOMES)]
    result = invoke("ingest", str(SAMPLE), "--archive", str(root), *args)
    assert result.exit_code == 0, result.output
    return root


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def copy(pristine: Path, where: Path) -> Path:
    shutil.copytree(pristine, where)
    return where


def part(root: Path, table: str, seq: int = 2) -> Path:
    return sorted((root / table).rglob(f"part-{seq:08d}-*.parquet"))[0]


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def scramble(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def assert_named(result: Result, damaged: Path) -> None:
    assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert f"skipped {damaged}: its bytes differ from those its commit recorded" in result.stderr


#: Which commands read each table (and so must name it): the ledger from stored totals
#: reads no window table, and lists the offers though it reads only their totals.
READERS = {
    "runs": ("ledger", "sql", "gates", "whatif", "compare", "report"),
    "offers": ("ledger", "sql", "report"),
    "piece_totals": ("ledger", "sql", "gates", "outcomes", "whatif", "compare", "report"),
    "label_credit": ("ledger", "sql", "outcomes", "report"),
    "streams": ("sql", "whatif", "compare", "report"),
    "messages": ("sql", "whatif", "compare", "report"),
}

COMMANDS = {
    "ledger": ("ledger", "{a}", "--format", "csv"),
    "sql": ("sql", "{a}", "SELECT count(*) AS n FROM ledger_rows", "--format", "csv"),
    "gates": ("gates", "{a}"),
    "outcomes": ("outcomes", "{a}", "--format", "csv"),
    "whatif": ("whatif", "{a}", "--policy", "sliding:keep=4", "--format", "json"),
    "compare": ("compare", "{a}", "--policy", "sliding:keep=4"),
    "report": ("report", "{a}", "-o", "{out}", "--charts", "none"),
}


@pytest.mark.parametrize("damage", [flip, scramble], ids=["flipped", "random"])
@pytest.mark.parametrize("table", READERS)
def test_a_part_changed_in_place_is_named_and_its_commit_left_out(
    pristine, tmp_path, table, damage
):
    archive = copy(pristine, tmp_path / "changed")
    damaged = part(archive, table)
    damage(damaged)
    cut = copy(pristine, tmp_path / "cut")  # the same file truncated: the trusted path
    truncate(part(cut, table))
    for name in READERS[table]:
        args = [a.format(a=archive, out=tmp_path / "r1") for a in COMMANDS[name]]
        result = invoke(*args)
        assert_named(result, damaged)
        expected = invoke(*[a.format(a=cut, out=tmp_path / "r2") for a in COMMANDS[name]])
        if name != "report":
            assert result.stdout == expected.stdout, name
    check = invoke("check", str(archive))
    assert check.exit_code == EXIT_UNREADABLE_INPUT
    assert str(damaged) in check.stderr
    problems = verify_archive(archive)
    assert [p.path for p in problems] == [str(damaged)]
    before = {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()}
    refused = invoke("ingest", str(SAMPLE), "--archive", str(archive))
    assert refused.exit_code == EXIT_USAGE
    assert str(damaged) in refused.stderr
    assert {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()} == before


def test_an_archive_without_checksums_still_reads(pristine, tmp_path):
    """Commits written before checksums were recorded have no ``crc32`` map: their files
    are checked by size as before, and the archive reads to the same answers."""
    archive = copy(pristine, tmp_path / "old")
    for path in (archive / "_manifest" / "commits").glob("*.json"):
        document = json.loads(path.read_text())
        assert document.pop("crc32")
        path.write_text(json.dumps(document))
    assert all(f.crc32 is None for c in Archive.open(archive).commits for f in c.files)
    old = invoke("ledger", str(archive), "--format", "csv")
    new = invoke("ledger", str(pristine), "--format", "csv")
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout
    assert verify_archive(archive) == []


@pytest.mark.parametrize("seq", [1, 3], ids=["first commit", "last commit"])
@pytest.mark.parametrize("table", ["offers", "uses"])
def test_damaged_later_rows_leave_their_commit_out_of_the_ledger(pristine, tmp_path, table, seq):
    """The ledger lists the later offers and uses (not their piece's first in a run) though
    it reads only their totals: a part of them changed in place was found only then, and
    the ledger refused, saying both "nothing was answered" and "commit N is left out".
    Now it is checked first: the commit is left out and named, the rest answered, exit 1,
    as when the same part is cut short."""
    archive = copy(pristine, tmp_path / "later")
    damaged = next((archive / table).rglob(f"first_in_run=false/part-{seq:08d}-*.parquet"))
    flip(damaged)
    cut = copy(pristine, tmp_path / "cut")
    truncate(next((cut / table).rglob(f"first_in_run=false/part-{seq:08d}-*.parquet")))
    ledger = invoke("ledger", str(archive), "--format", "csv")
    assert_named(ledger, damaged)
    assert "nothing was answered" not in ledger.stderr
    assert f"commit {seq} (ingest date " in ledger.stderr
    expected = invoke("ledger", str(cut), "--format", "csv")
    assert expected.exit_code == EXIT_UNREADABLE_INPUT
    assert ledger.stdout == expected.stdout != ""
    assert str(damaged) in invoke("check", str(archive)).stderr


def test_damage_found_after_a_read_is_one_true_refusal(pristine, tmp_path):
    """A caller that reads an archive's tables before the ledger lists its later offers
    still gets a refusal (what was read cannot be taken back), and it says one thing:
    nothing was answered, naming the file and the commit holding it, not that the
    commit "is left out" of an answer never given."""
    archive = copy(pristine, tmp_path / "later")
    damaged = next((archive / "offers").rglob("first_in_run=false/part-00000002-*.parquet"))
    flip(damaged)
    tables = ArchiveTables(Archive.open(archive), "corrected")
    assert tables.runs.num_rows == 14  # read before the damage is found
    with pytest.raises(ArchiveDamaged) as refused:
        compute_ledger(tables)
    head, line = refused.value.lines
    assert head.endswith(
        "is damaged, found only once part of it had been read, so nothing was answered "
        "(restore these files from a backup, or ingest the snapshots into a new archive):"
    )
    assert line == (
        f"  {damaged}: its bytes differ from those its commit recorded (changed in place) "
        "(in commit 2, ingest date "
        + Archive.open(pristine).commits[1].ingest_date
        + ", with 5 run(s))"
    )


def test_a_part_no_checksum_covers_that_the_engines_cannot_decode_is_one_line(pristine, tmp_path):
    """An archive written before checksums: a flipped byte in its piece totals gave
    Polars' "File out of specification" traceback; now one line, exit 1."""
    archive = copy(pristine, tmp_path / "old")
    for path in (archive / "_manifest" / "commits").glob("*.json"):
        document = json.loads(path.read_text())
        document.pop("crc32")
        path.write_text(json.dumps(document))
    damaged = part(archive, "piece_totals")
    flip(damaged)
    result = invoke("ledger", str(archive))
    assert result.exit_code == EXIT_UNREADABLE_INPUT, result.output
    assert "Traceback" not in result.output and not result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("contextledger: a Parquet file could not be decoded")
    assert "contextledger check ARCHIVE" in line


def test_labels_of_runs_a_damaged_commit_took_out_are_not_said_to_match_no_run(pristine, tmp_path):
    """They said "match no run the archive holds": the archive holds those runs; its damaged
    commit was left out."""
    archive = copy(pristine, tmp_path / "damaged")
    flip(part(archive, "runs"))
    result = invoke("ledger", str(archive))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "match no run the archive holds" not in result.stderr
    assert "match no run read from the archive's intact commits" in result.stderr


def aged(root: Path, seconds: int = 60) -> None:
    """Date every file of ``root`` back, as if written a while ago (a part modified within
    two seconds of a check is not remembered: a change in the same tick could hide)."""
    then = time.time_ns() - seconds * 1_000_000_000
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(then, then))


def test_ingest_reads_each_committed_part_for_its_checksum_once(pristine, tmp_path, monkeypatch):
    """Every ingest read every committed part to check its CRC-32 before writing (about
    0.4 s at 1M runs, growing with the archive). Now a part checked once, and unchanged
    since by its size and mtime, is not read again; one changed in place is (its mtime
    moved), and refuses the ingest; ``check`` still reads every byte."""
    archive = copy(pristine, tmp_path / "archive")
    aged(archive)
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    read: list[str] = []
    real = Location.read_bytes

    def counted(self: Location, relative: str) -> bytes:
        if relative.endswith(".parquet"):
            read.append(relative)
        return real(self, relative)

    monkeypatch.setattr(Location, "read_bytes", counted)
    parts = [f.path for c in Archive.open(archive).commits for f in c.files if f.crc32]
    ingest([nothing], archive, workers=1)
    assert sorted(read) == sorted(parts)
    for _ in range(2):
        read.clear()
        ingest([nothing], archive, workers=1)
        assert read == []
    damaged = part(archive, "offers", seq=3)
    flip(damaged)
    read.clear()
    refused = invoke("ingest", str(nothing), "--archive", str(archive))
    assert refused.exit_code == EXIT_USAGE and str(damaged) in refused.stderr
    assert read == [damaged.relative_to(archive).as_posix()]
    read.clear()
    assert [p.path for p in verify_archive(archive)] == [str(damaged)]
    intact = [f.path for c in Archive.open(pristine).commits[:2] for f in c.files if f.crc32]
    assert set(intact) < set(read)  # check trusts nothing remembered


def test_a_part_just_written_is_checked_again_by_the_next_ingest(pristine, tmp_path):
    """A part's mtime within two seconds of its check is not remembered: a change in the
    same clock tick could keep that mtime. So the parts an ingest just wrote are read
    once more by the next one, and then no more."""
    archive = copy(pristine, tmp_path / "archive")
    aged(archive, seconds=0)  # as an ingest leaves the parts it wrote
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    ingest([nothing], archive, workers=1)  # fresh mtimes: checked, not remembered
    remembered = VerifiedParts.load(archive).parts
    assert remembered == {}
    aged(archive)
    ingest([nothing], archive, workers=1)
    parts = {f.path for c in Archive.open(archive).commits for f in c.files if f.crc32}
    assert set(VerifiedParts.load(archive).parts) == parts
