"""Archives named by filesystem URI (``archive/location.py``): ``file://`` reads exactly as
the local path does, in every reading command; a filesystem that is not this machine's
(a pyarrow filesystem other than the local one) reads the same rows through pyarrow,
damage and uncommitted files included; what cannot be opened, reached or written says
so in one line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import quote

import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveError, ArchiveTables, Selection, verify_archive
from contextledger.archive.location import Location, locate
from contextledger.archive.selection import parse_archive_path
from contextledger.archive.windows import stream_batches, unreplayable_runs
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.whatif import whatif_table
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.tables.build import ACCOUNTING_MODES
from contextledger.window.whatif import parse_policies

from .conftest import SAMPLE, require_corpus
from .test_duckdb_ledger import corpus_outcomes

POLICY = "sliding:keep=3,ledger_facts=0"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def corpus_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested with its labels by ``contextledger ingest``, under a folder
    whose name needs escaping in a URI (a space, a percent sign, a plus)."""
    base = tmp_path_factory.mktemp("uri") / "runs 100%+"
    base.mkdir()
    labels = base.parent / "labels.csv"
    pacsv.write_csv(corpus_outcomes(), labels)
    root = base / "archive"
    code, _, err = run(
        "ingest",
        str(require_corpus() / "runs"),
        "--archive",
        str(root),
        "--outcomes",
        str(labels),
        "--ingest-date",
        "2026-11-15",
    )
    assert code == 0, err
    return root


def file_uri(path: Path) -> str:
    return "file://" + quote(str(path))


def test_a_file_uri_is_the_local_path_it_names(corpus_archive):
    """``%XX`` escapes are decoded, a space may be written as it is; a '%' that starts
    no escape is a percent sign."""
    plain = str(corpus_archive)
    assert "%25" in file_uri(corpus_archive) and "%20" in file_uri(corpus_archive)
    for uri in (file_uri(corpus_archive), "file://" + plain):
        location = locate(uri)
        assert (location.is_local, location.root, str(location)) == (True, plain, plain)
    found = parse_archive_path(file_uri(corpus_archive) + "?label=good&since=2026-11-15")
    assert found is not None
    assert (found[0].root, found[1]) == (plain, Selection("2026-11-15", None, None, ("good",)))


READING_COMMANDS = [
    *(("ledger", "--format", "csv", "--mode", mode) for mode in ACCOUNTING_MODES),
    ("ledger", "--format", "json"),
    ("sql", "SELECT * FROM ledger_rows", "--format", "csv"),
    ("sql", "SELECT * FROM ledger", "--format", "csv", "--mode", "reference"),
    ("outcomes", "--format", "csv"),
    ("gates",),
    ("whatif", "--policy", POLICY, "--format", "json"),
    ("check",),
]


@pytest.mark.parametrize("selection", ["", "?label=good", "?until=2026-11-15&label=bad,good"])
@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_every_reading_command_answers_through_file_uri_as_through_the_path(
    corpus_archive, command, selection
):
    """The ledger from stored totals (no run filter) and from rows (a label), in Polars
    and DuckDB; the outcomes, gates, what-if and check: output and exit status equal."""
    name, *options = command
    plain = run(name, f"{corpus_archive}{selection}", *options)
    by_uri = run(name, f"{file_uri(corpus_archive)}{selection}", *options)
    assert plain[0] == 0, plain[2]
    assert plain[1] and by_uri[:2] == plain[:2]
    if name != "whatif":  # whatif's last line says how fast it went
        assert by_uri[2] == plain[2]


def test_the_report_over_a_file_uri_is_the_report_over_the_path(corpus_archive, tmp_path):
    """Everything but the name the page shows for its input (the URI, as given) and the
    minute it was written."""
    pages = []
    for name in (f"{corpus_archive}?label=good", f"{file_uri(corpus_archive)}?label=good"):
        out = tmp_path / str(len(pages))
        code, _, err = run("report", name, "--policy", POLICY, "-o", str(out))
        assert code == 0, err
        page = (out / "report.html").read_text(encoding="utf-8").replace(name, "INPUT")
        pages.append(re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "TIME", page))
    assert pages[0].count("INPUT") >= 1
    assert pages[1] == pages[0]


def subtree(folder: Path) -> Location:
    """``folder`` as an archive on a pyarrow filesystem that is not the local one, so it
    is read as an ``s3://`` archive is: through pyarrow (datasets for Polars and DuckDB)."""
    filesystem = pafs.SubTreeFileSystem(str(folder.parent), pafs.LocalFileSystem())
    return Location(filesystem, folder.name, f"mock://bucket/{folder.name}")


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_an_archive_on_another_filesystem_gives_the_same_ledger(corpus_archive, mode):
    """Totals and rows paths in Polars, and DuckDB's views over registered Arrow datasets
    (the same SQL), under no filter and a label."""
    local = Archive.open(corpus_archive)
    remote = Archive.open(subtree(corpus_archive))
    assert not remote.location.is_local and remote.commits == local.commits
    for selection in (Selection(), Selection(labels=("good",))):
        expected = ArchiveTables(local, mode, selection)
        got = ArchiveTables(remote, mode, selection)
        assert (got.totals_files() is None) == (expected.totals_files() is None)
        assert got.duckdb_datasets()  # a local archive's files are read by DuckDB itself
        assert not [name for name in expected.duckdb_datasets() if name.endswith("_files")]
        ledger, direct = compute_ledger(got), compute_ledger(expected)
        assert_frame_equal(ledger.frame, direct.frame, check_exact=True)
        assert ledger.runs_recorded == direct.runs_recorded
        assert_frame_equal(ledger_rows_sql(got), direct.rows(), check_exact=True)
        assert got.unmatched_label_ids() == expected.unmatched_label_ids()


def test_an_archive_on_another_filesystem_replays_the_same_runs(corpus_archive):
    local = Archive.open(corpus_archive)
    remote = Archive.open(subtree(corpus_archive))
    policies = parse_policies([POLICY])
    selection = Selection(labels=("bad",))
    for archive_a, archive_b in [(local, remote)]:
        rows_a = [
            whatif_table(streams, policies, standings)
            for streams, standings in stream_batches(archive_a, selection, 50)
        ]
        rows_b = [
            whatif_table(streams, policies, standings)
            for streams, standings in stream_batches(archive_b, selection, 50)
        ]
        assert len(rows_a) == len(rows_b) > 1
        for a, b in zip(rows_a, rows_b, strict=True):
            assert_frame_equal(b, a, check_exact=True)
        assert unreplayable_runs(archive_b, selection) == unreplayable_runs(archive_a, selection)


def test_damage_and_leftovers_are_seen_through_another_filesystem(tmp_path):
    """A truncated committed file takes its commit out, named by the archive's URI; a
    file no commit lists (a crashed ingest's) is never read; verify reads every row."""
    root = tmp_path / "archive"
    code, _, err = run("ingest", str(SAMPLE), "--archive", str(root))
    assert code == 0, err
    archive = Archive.open(root)
    # a stray Parquet file beside the committed ones, as a killed ingest leaves it
    [runs_file] = [f for f in archive.files("runs") if f.accounting == "corrected"]
    stray = root / Path(runs_file.path).with_name("part-99999999-dead.parquet")
    shutil.copy(root / runs_file.path, stray)
    remote = Archive.open(subtree(root))
    assert remote.damage == []
    expected = compute_ledger(ArchiveTables(Archive.open(root), "corrected"))
    got = compute_ledger(ArchiveTables(remote, "corrected"))
    assert_frame_equal(got.frame, expected.frame, check_exact=True)
    assert verify_archive(remote) == []
    # truncate a committed file: the same damage, named under the URI
    target = root / runs_file.path
    target.write_bytes(target.read_bytes()[:-100])
    local_damage = Archive.open(root).damage
    remote = Archive.open(subtree(root))
    assert [p.reason for p in remote.damage] == [p.reason for p in local_damage]
    assert [p.path for p in remote.damage] == [f"mock://bucket/archive/{runs_file.path}"]
    assert remote.commits == Archive.open(root).commits
    assert [p.path for p in verify_archive(remote)][: len(remote.damage)] == [
        p.path for p in remote.damage
    ]


def test_damage_is_named_the_same_through_a_file_uri(tmp_path):
    root = tmp_path / "my archive"
    code, _, err = run("ingest", str(SAMPLE), "--archive", str(root))
    assert code == 0, err
    [runs_file] = [f for f in Archive.open(root).files("runs")][:1]
    (root / runs_file.path).write_bytes(b"garbage")
    for command in (("ledger",), ("check",)):
        plain = run(*command[:1], str(root), *command[1:])
        by_uri = run(*command[:1], file_uri(root), *command[1:])
        assert plain[0] == EXIT_UNREADABLE_INPUT
        # the same, the input named as it was given ("no run selected by NAME")
        named = f"selected by {root}"
        assert by_uri == (
            plain[0],
            plain[1],
            plain[2].replace(named, f"selected by {file_uri(root)}"),
        )
        assert runs_file.path in plain[2]


def test_ingest_writes_local_archives_only(tmp_path, monkeypatch):
    """``--archive s3://...`` made a folder named ``s3:``; ``file://`` is a local path."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run("ingest", str(SAMPLE), "--archive", "s3://bucket/runs")
    assert (code, out) == (EXIT_USAGE, "")
    assert err.splitlines() == [
        "contextledger: s3://bucket/runs: archives are written on this machine only, not to "
        "s3:// (write a local DIR, copy it there, and read it back by URI)"
    ]
    assert list(tmp_path.iterdir()) == []
    code, _, err = run("ingest", str(SAMPLE), "--archive", file_uri(tmp_path / "new 1"))
    assert code == 0, err
    assert Archive.is_archive(tmp_path / "new 1")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("foo://x/archive", r"cannot be opened \(Unrecognized filesystem type in URI"),
        ("file://otherhost/archive", r"cannot be opened \(Unsupported hostname"),
        (f"file://{SAMPLE.resolve()}", r"no contextledger archive there \(no archive\.json\)"),
        # pyarrow's HDFS needs a JVM and libhdfs: without them it fails before any network
        ("hdfs://127.0.0.1:1/archive", r"cannot be opened \(.*(Unable to load|load) lib"),
    ],
)
def test_a_uri_that_cannot_be_read_says_so_in_one_line(name, reason):
    for command in (("ledger",), ("whatif", "--policy", POLICY), ("check",), ("outcomes",)):
        code, out, err = run(command[0], f"{name}?label=good", *command[1:])
        assert (code, out) == (EXIT_USAGE, ""), err
        [line] = err.splitlines()
        assert re.match(f"contextledger: {re.escape(name)}: {reason}", line), line
    if "opened" in reason:  # and so does the Python API
        with pytest.raises(ArchiveError, match=reason):
            Archive.open(name)


def test_an_unreachable_s3_endpoint_says_so_in_one_line(monkeypatch):
    """An S3 endpoint on this machine that refuses the connection: no credentials looked
    up anywhere else (the instance metadata service is off, keys are given)."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    name = "s3://bucket/archive?endpoint_override=127.0.0.1:1&scheme=http&region=us-east-1"
    code, out, err = run("ledger", f"{name}&label=good")
    assert (code, out) == (EXIT_USAGE, ""), err
    [line] = err.splitlines()
    assert line.startswith(f"contextledger: {name}: cannot be read ("), line
    assert "127.0.0.1:1" in line


def test_spark_is_handed_the_archive_uri_its_hadoop_filesystems_read():
    """Spark reads an archive on another filesystem itself, by URI (S3 as ``s3a://``);
    a local archive by its path."""
    filesystem = pafs.SubTreeFileSystem("/", pafs.LocalFileSystem())
    for uri, expected in [
        ("s3://bucket/runs dir", "s3a://bucket/runs dir/runs/part-1.parquet"),
        ("gs://bucket/runs", "gs://bucket/runs/runs/part-1.parquet"),
    ]:
        location = Location(filesystem, "bucket/" + uri.rpartition("/")[2], uri)
        path = location.path("runs/part-1.parquet")
        assert (location.relative(path), location.spark_path(path)) == (
            "runs/part-1.parquet",
            expected,
        )
    local = locate("file:///data/runs%20dir")
    assert local.spark_path(local.path("runs/a.parquet")) == "/data/runs dir/runs/a.parquet"
