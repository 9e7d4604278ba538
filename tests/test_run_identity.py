"""A run counts once, whatever reaches it twice: copies, overlapping folders, a JSON
Lines twin, an archive; and a (run, label) pair counts once, whatever repeats it.

Every path is compared with the ledger of the clean sample, exactly.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import msgspec
import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables
from contextledger.archive.manifest import archived_digests
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger, ledger_inputs
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.ledger.gates import gate_what_if
from contextledger.ledger.stats import outcome_association
from contextledger.read.digest import DIGEST_KIND, digest_kind
from contextledger.read.identity import RunIdentity, content_digest
from contextledger.read.snapshot import ReadError, RunSource
from contextledger.report import collect, render_html
from contextledger.tables.build import ACCOUNTING_MODES, read_runs
from contextledger.tables.sidecars import load_outcomes
from contextledger.window.whatif import parse_policies, whatif_table

from .conftest import SAMPLE, as_new_run, written_without

LOOP = SAMPLE / "s0003-loop.json.gz"
OUTCOMES = SAMPLE.parent / "sample-outcomes.csv"
POLICIES = parse_policies(["none", "sliding:keep=3"])


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    """The sample, with s0003-loop reached five more times: a copy beside it, a copy in
    an overlapping export, its pretty-printed JSON, its JSON with sorted keys, and its
    JSON Lines twin."""
    folder = tmp_path / "messy"
    shutil.copytree(SAMPLE, folder / "export-1")
    (folder / "export-2").mkdir()
    shutil.copy(LOOP, folder / "export-1" / "s0003-loop (copy).json.gz")
    shutil.copy(LOOP, folder / "export-2" / "s0003-loop.json.gz")
    document = json.loads(gzip.decompress(LOOP.read_bytes()))
    (folder / "export-2" / "pretty.json").write_text(json.dumps(document, indent=2))
    (folder / "twin.jsonl").write_text(json.dumps(document, separators=(",", ":")) + "\n")
    sorted_keys = json.dumps(document, sort_keys=True, ensure_ascii=False)  # as jq -S writes
    (folder / "export-2" / "sorted.json").write_text(sorted_keys, encoding="utf-8")
    return folder


@pytest.fixture
def repeated_labels(tmp_path: Path) -> Path:
    """The sample's labels with every row given twice."""
    lines = OUTCOMES.read_text().splitlines()
    path = tmp_path / "labels.csv"
    path.write_text("\n".join([lines[0], *lines[1:], *lines[1:]]) + "\n")
    return path


def clean_ledger(mode: str) -> pl.DataFrame:
    tables = read_runs(SAMPLE, mode=mode).with_outcomes(load_outcomes(OUTCOMES))
    return compute_ledger(tables).rows()


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_a_run_reached_six_times_is_counted_once(messy, mode):
    tables = read_runs(messy, mode=mode).with_outcomes(load_outcomes(OUTCOMES))
    assert_frame_equal(compute_ledger(tables).rows(), clean_ledger(mode), check_exact=True)
    assert tables.runs.num_rows == len(list(SAMPLE.glob("*.json.gz")))
    assert tables.problems.num_rows == 0
    duplicates = pl.DataFrame(tables.duplicates)
    assert duplicates["run_id"].to_list() == ["s0003-loop"] * 5
    assert set(duplicates["kept_path"]) == {str(messy / "export-1" / "s0003-loop (copy).json.gz")}


def test_the_same_file_named_twice_is_one_run():
    tables = read_runs([SAMPLE, LOOP])
    assert tables.runs.num_rows == len(list(SAMPLE.glob("*.json.gz")))
    assert tables.duplicates.num_rows == 1


def test_the_same_id_with_other_content_keeps_the_first_and_names_the_other(tmp_path):
    document = json.loads(gzip.decompress(LOOP.read_bytes()))
    document["snapshot"]["commitLog"] = document["snapshot"]["commitLog"][:3]
    other = tmp_path / "zz-rerecorded.json"
    other.write_text(json.dumps(document))
    tables = read_runs([SAMPLE, other])
    expected = compute_ledger(read_runs(SAMPLE)).rows()
    assert_frame_equal(compute_ledger(tables).rows(), expected, check_exact=True)
    [problem] = tables.problems.to_pylist()
    assert (problem["path"], problem["run_id"]) == (str(other), "s0003-loop")
    assert "different content" in problem["reason"] and str(LOOP) in problem["reason"]
    with pytest.raises(ReadError, match="different content"):
        read_runs([SAMPLE, other], strict=True)
    result = run_cli("ledger", str(SAMPLE), str(other))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "different content" in result.stderr


def test_identity_compares_content_only_when_an_id_repeats():
    identity = RunIdentity()
    assert identity.admit("r", RunSource("nowhere.json"))  # never read: no digest needed
    assert not identity.admit("r", RunSource("nowhere.json"))  # the same source again
    assert (len(identity.duplicates), len(identity.conflicts)) == (1, 0)
    assert content_digest(b'{"a": 1}\n') == content_digest(b'{"a":1}')
    assert content_digest(b'{"a": 1}') != content_digest(b'{"a": 2}')


def test_whatif_replays_a_run_reached_twice_once(messy):
    clean, doubled = read_inputs(SAMPLE), read_inputs(messy)
    assert [s.run_id for s in doubled.streams] == [s.run_id for s in clean.streams]
    assert doubled.duplicates.num_rows == 5 and not doubled.problems
    assert_frame_equal(
        whatif_table(doubled.streams, POLICIES, doubled.standings),
        whatif_table(clean.streams, POLICIES, clean.standings),
        check_exact=True,
    )


def test_gates_over_a_run_reached_twice_equal_the_clean_gates(messy):
    clean = gate_what_if(read_runs(SAMPLE))
    doubled = gate_what_if(read_runs(messy))
    for left, right in zip(doubled, clean, strict=True):
        assert_frame_equal(left, right, check_exact=True)


def test_a_repeated_label_row_credits_its_run_once(repeated_labels):
    once = read_runs(SAMPLE).with_outcomes(load_outcomes(OUTCOMES))
    twice = read_runs(SAMPLE).with_outcomes(load_outcomes(repeated_labels))
    twice = twice.with_outcomes(load_outcomes(OUTCOMES))  # and given once more
    assert twice.outcomes.num_rows == once.outcomes.num_rows
    assert_frame_equal(compute_ledger(twice).rows(), compute_ledger(once).rows(), check_exact=True)
    assert_frame_equal(outcome_association(twice), outcome_association(once), check_exact=True)
    labelled = compute_ledger(twice).rows().explode("outcomes").drop_nulls("outcomes")
    counts = labelled.select("runs_seen", runs=pl.col("outcomes").struct.field("runs"))
    assert (counts["runs"] <= counts["runs_seen"]).all()


def test_labels_stored_in_an_archive_and_given_again_count_once(tmp_path, repeated_labels):
    root = tmp_path / "archive"
    ingest([SAMPLE], root, outcomes=repeated_labels, workers=1)
    for mode in ACCOUNTING_MODES:
        tables = ArchiveTables(Archive.open(root), mode).with_outcomes(load_outcomes(OUTCOMES))
        expected = clean_ledger(mode)
        assert_frame_equal(compute_ledger(tables).rows(), expected, check_exact=True)
        assert_frame_equal(ledger_rows_sql(tables), expected, check_exact=True)


def test_every_command_and_engine_gives_one_ledger_over_messy_inputs(
    tmp_path, messy, repeated_labels
):
    """ledger, sql, the archive (totals and rows, Polars and DuckDB) and the report."""
    expected = clean_ledger("corrected")
    tables = read_runs(messy).with_outcomes(load_outcomes(repeated_labels))
    assert_frame_equal(compute_ledger(tables).rows(), expected, check_exact=True)
    assert_frame_equal(ledger_rows_sql(tables), expected, check_exact=True)

    parquet = tmp_path / "ledger.parquet"
    args = ["--outcomes", str(repeated_labels), "--format", "parquet", "-o", str(parquet)]
    result = run_cli("ledger", str(messy), *args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("duplicate ") == 5
    command = pl.read_parquet(parquet).select(expected.columns)
    assert_frame_equal(command, expected, check_exact=True)

    query = "SELECT id, offered, used, runs_seen FROM ledger_rows"
    result = run_cli(
        "sql", str(messy), query, "--outcomes", str(repeated_labels), "--format", "csv"
    )
    assert result.exit_code == 0, result.stderr
    from_sql = pl.read_csv(result.stdout.encode())
    assert from_sql.rows() == expected.select("id", "offered", "used", "runs_seen").rows()

    root = tmp_path / "archive"
    report = ingest([messy], root, outcomes=repeated_labels, workers=1)
    assert (report.runs_added, report.runs_already_archived) == (14, 5)
    assert "duplicate" in report.summary()
    archived = ArchiveTables(Archive.open(root), "corrected")
    inputs = ledger_inputs(archived)
    assert inputs.totals is not None
    assert_frame_equal(compute_ledger(inputs).rows(), expected, check_exact=True)
    rows_path = compute_ledger(replace(inputs, totals=None)).rows()
    assert_frame_equal(rows_path, expected, check_exact=True)
    assert_frame_equal(ledger_rows_sql(archived), expected, check_exact=True)

    data = collect([messy], outcomes=repeated_labels, policies=["none"], compare_reference=False)
    assert_frame_equal(data.rows.select(expected.columns), expected, check_exact=True)
    assert data.tables.duplicates.num_rows == 5
    page = render_html(data)
    assert "5 input(s) held a run already read, and were counted once" in page
    assert "pretty.json" in page


def test_labels_and_standings_for_no_run_are_counted_and_named(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("run_id,label\ns0003-loop,good\nghost-1,bad\nghost-2,bad\nghost-1,bad\n")
    result = run_cli("ledger", str(SAMPLE), "--outcomes", str(labels))
    assert result.exit_code == 0
    assert "outcome label rows for 2 run id(s) that match no run read: ghost-1, ghost-2" in (
        result.stderr
    )
    standings = tmp_path / "standings.csv"
    standings.write_text("run_id,tool_call_id,standing,iteration\nghost-3,call-1,fact,1\n")
    result = run_cli("whatif", str(SAMPLE), "--policy", "none", "--standings", str(standings))
    assert result.exit_code == 0
    assert "standings rows for 1 run id(s) that match no run read: ghost-3" in result.stderr


def test_both_engines_count_a_repeated_label_once_even_in_hand_built_tables():
    """The rule holds in the ledger itself, not only in the readers that feed it."""
    tables = read_runs(SAMPLE)
    labels = load_outcomes(OUTCOMES)
    once = replace(tables, outcomes=labels)
    twice = replace(tables, outcomes=pa.concat_tables([labels, labels]))
    expected = compute_ledger(once).rows()
    assert_frame_equal(compute_ledger(twice).rows(), expected, check_exact=True)
    assert_frame_equal(ledger_rows_sql(twice), expected, check_exact=True)


def test_stored_labels_for_runs_the_archive_does_not_hold_are_named(tmp_path):
    """At ingest as a note (a label may come before its run), and by every command that
    reads the archive's labels; once the run arrives, no longer."""
    labels = tmp_path / "G.csv"
    labels.write_text("run_id,label\ns0001-fact-bench,good\nghost-run,bad\n")
    root = tmp_path / "archive"
    line = "outcome label rows for 1 run id(s) that match no run the archive holds: ghost-run"
    ingested = run_cli("ingest", str(SAMPLE), "--archive", str(root), "--outcomes", str(labels))
    assert ingested.exit_code == 0, ingested.output
    assert f"  note: stored {line} (not an error: " in ingested.stdout
    out = tmp_path / "report"
    for args in (
        ["ledger", str(root)],
        ["outcomes", str(root), "--outcomes", str(labels)],
        ["ledger", f"{root}?run_id=s0001-fact-bench"],  # all the archive holds, not selected
        ["report", str(root), "-o", str(out), "--charts", "none", "--policy", "none"],
    ):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
        assert result.stderr.count(line) == 1, (args, result.stderr)
    arrives = tmp_path / "later"
    arrives.mkdir()
    document = json.loads(gzip.decompress(LOOP.read_bytes()))
    as_new_run(document, "ghost-run")  # a run under that id
    (arrives / "ghost.json").write_text(json.dumps(document), encoding="utf-8")
    later = run_cli("ingest", str(arrives), "--archive", str(root))
    assert later.exit_code == 0 and "note:" not in later.stdout
    assert "match no run" not in run_cli("ledger", str(root)).stderr


def test_labels_given_again_under_another_name_add_only_the_new_pairs(tmp_path):
    """It said "17 outcome label(s) added" for the sample's 14 labels and 3 new ones."""
    root = tmp_path / "archive"
    first = ingest([SAMPLE], root, outcomes=OUTCOMES, workers=1)
    assert first.outcome_labels_added == 14
    again = tmp_path / "renamed.csv"
    again.write_text(
        OUTCOMES.read_text() + "s0003-loop,reviewed\ns0001-fact-bench,reviewed\n"
        "s0003-loop,reviewed\ns0048-loop,reviewed\n"
    )
    result = run_cli("ingest", str(SAMPLE), "--archive", str(root), "--outcomes", str(again))
    assert result.exit_code == 0, result.output
    assert "; 3 new (run, label) outcome label(s) stored" in result.stdout
    assert ingest([SAMPLE], root, outcomes=OUTCOMES, workers=1).outcome_labels_added == 0


# ── one recording under two ids ────────────────────────────────────
def bare(document_path: Path) -> dict:
    """The snapshot of a sample run, without the corpus wrapper (as agentfootprint saves it)."""
    return json.loads(gzip.decompress(document_path.read_bytes()))["snapshot"]


@pytest.fixture
def bare_runs(tmp_path: Path) -> Path:
    """The sample as bare snapshots (each run's id is its file name)."""
    folder = tmp_path / "bare"
    folder.mkdir()
    for path in sorted(SAMPLE.glob("*.json.gz")):
        name = path.name.removesuffix(".json.gz")
        (folder / f"{name}.json").write_text(json.dumps(bare(path)), encoding="utf-8")
    return folder


@pytest.fixture
def bare_messy(tmp_path: Path, bare_runs: Path) -> Path:
    """The bare sample with s0003-loop reached four more times under other ids: a symlink,
    a renamed copy, its JSON Lines twin, and the wrapped original (read last)."""
    folder = tmp_path / "bare-messy"
    shutil.copytree(bare_runs, folder / "a")
    loop = folder / "a" / "s0003-loop.json"
    (folder / "a" / "zlink.json").symlink_to(loop)
    shutil.copy(loop, folder / "a" / "zcopy.json")  # after the original: it counts
    (folder / "b").mkdir()
    (folder / "b" / "loop.jsonl").write_text(loop.read_text() + "\n", encoding="utf-8")
    (folder / "c").mkdir()
    shutil.copy(LOOP, folder / "c")
    return folder


TWINS = {"zcopy": "s0003-loop", "zlink": "s0003-loop", "loop:1": "s0003-loop"}


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_one_recording_under_other_names_is_counted_once(bare_runs, bare_messy, mode):
    """A bare snapshot's id is its file name, so a symlink, a copy or a twin under another
    name gave another id: each multiplied the run's counts, silently."""
    clean = read_runs(bare_runs, mode=mode)
    tables = read_runs(bare_messy, mode=mode)
    assert tables.runs["run_id"].to_pylist() == clean.runs["run_id"].to_pylist()
    assert_frame_equal(
        compute_ledger(tables).rows(), compute_ledger(clean).rows(), check_exact=True
    )
    duplicates = {row["run_id"]: row["kept_run_id"] for row in tables.duplicates.to_pylist()}
    assert duplicates == {**TWINS, "s0003-loop": "s0003-loop"}  # the wrapped one: same id
    assert tables.problems.num_rows == 0
    streams = read_inputs(bare_messy).streams
    assert [s.run_id for s in streams] == [s.run_id for s in read_inputs(bare_runs).streams]


def test_the_command_line_and_the_archive_name_one_recording_under_two_ids(
    tmp_path, bare_runs, bare_messy
):
    result = run_cli("ledger", str(bare_messy), "--format", "csv")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == run_cli("ledger", str(bare_runs), "--format", "csv").stdout
    link = bare_messy / "a" / "zlink.json"
    kept = bare_messy / "c" / "s0003-loop.json.gz"  # the wrapped copy: it names its run
    line = f"duplicate {link} (run zlink): the same recording as {kept} (run s0003-loop)"
    assert f"{line}, counted once" in result.stderr
    root = tmp_path / "archive"
    first = ingest([bare_runs], root, workers=1)
    later = ingest([bare_messy], root, workers=1)  # every copy arrives after its original
    assert (first.runs_added, later.runs_added, later.runs_already_archived) == (14, 0, 18)
    archived = compute_ledger(ArchiveTables(Archive.open(root), "corrected")).rows()
    assert_frame_equal(archived, compute_ledger(read_runs(bare_runs)).rows(), check_exact=True)


def test_two_recordings_of_one_execution_id_are_two_runs(tmp_path, bare_runs):
    """Execution ids can repeat (two machines in the same millisecond): only the same
    recording is folded; another snapshot under the same id counts as its own run."""
    snapshot = bare(LOOP)
    snapshot["commitLog"] = snapshot["commitLog"][:3]  # recorded earlier in the run
    (bare_runs / "early.json").write_text(json.dumps(snapshot), encoding="utf-8")
    tables = read_runs(bare_runs)
    assert "early" in tables.runs["run_id"].to_pylist()
    assert tables.duplicates.num_rows == 0 and tables.problems.num_rows == 0


def test_an_archive_written_before_execution_ids_were_kept_still_takes_new_runs(
    tmp_path, bare_runs, monkeypatch
):
    """Its run index has no ``execution_id``: its runs are known by id only (documented)."""
    root = tmp_path / "archive"
    with written_without(monkeypatch, "execution_id"):
        ingest([bare_runs], root, workers=1)
    renamed = tmp_path / "later"
    renamed.mkdir()
    shutil.copy(bare_runs / "s0003-loop.json", renamed / "loop-again.json")
    shutil.copy(bare_runs / "s0048-loop.json", renamed / "s0048-loop.json")
    later = ingest([renamed], root, workers=1)
    assert (later.runs_added, later.runs_already_archived) == (1, 1)  # by id only
    assert run_cli("check", str(root)).exit_code == 0


def stored_digests(root: Path) -> dict[str, str]:
    """The content digest the archive at ``root`` holds for each of the sample's runs."""
    runs = read_runs(SAMPLE).runs["run_id"].to_pylist()
    found = archived_digests(Archive.open(root), runs)
    return {run_id: digest for run_id, (digest, *_) in found.items()}


def copies_of_the_sample(folder: Path) -> Path:
    """The sample again elsewhere, with s0003-loop also pretty-printed (the same bytes
    but for insignificant whitespace), s0048-loop's commit log cut (other content) and
    that cut run also under a new id (a new run)."""
    shutil.copytree(SAMPLE, folder)
    pretty = msgspec.json.format(gzip.decompress(LOOP.read_bytes()), indent=2)
    (folder / "pretty.json").write_bytes(pretty)
    cut = json.loads(gzip.decompress((folder / "s0048-loop.json.gz").read_bytes()))
    cut["snapshot"]["commitLog"].pop()
    (folder / "s0048-loop.json.gz").write_bytes(gzip.compress(json.dumps(cut).encode()))
    cut["run_id"] = "s0048-cut"
    (folder / "s0048-cut.json").write_text(json.dumps(cut))
    return folder


@pytest.mark.parametrize("older", ["blake2b", "sha256"])
def test_an_archive_of_older_digests_knows_its_runs_after_their_files_are_gone(
    tmp_path, monkeypatch, older
):
    """Archives written by older versions hold older kinds of digest: blake2b-128 of each
    document (bare, unnamed: before digests named their kind), then sha256 (until
    2026-12-02). A run arriving again is compared in the kind its archived copy was stored
    in, so it is still known when the files it was ingested from are gone (none left to
    read again): the same content is already archived, a pretty-printed copy too, other
    content a conflict."""
    import contextledger.tables.files as files

    first, root = tmp_path / "first", tmp_path / "archive"
    shutil.copytree(SAMPLE, first)
    with monkeypatch.context() as before:  # as the versions that stored that kind wrote it
        before.setattr(files, "content_digest", lambda payload: content_digest(payload, older))
        ingest([first], root, workers=1)
    stored = stored_digests(root)
    assert len(stored) == 14 and {digest_kind(d) for d in stored.values()} == {older}
    shutil.rmtree(first)
    later = ingest([copies_of_the_sample(tmp_path / "later")], root, workers=1)
    assert (later.runs_added, later.runs_already_archived, later.runs_conflicting) == (1, 14, 1)
    assert [problem["run_id"] for problem in later.problems] == ["s0048-loop"]
    assert stored_digests(root) == stored  # an archive is append-only: its digests stay
    [(new_digest, *_)] = archived_digests(Archive.open(root), ["s0048-cut"]).values()
    assert digest_kind(new_digest) == DIGEST_KIND  # the new run in today's kind, beside them
    checked = run_cli("check", str(root))  # exit 1: the conflict stays quarantined
    assert "invariants hold over 15 runs" in checked.stdout, checked.stderr


def test_a_new_archive_stores_blake3_digests_and_compares_them_the_same_way(tmp_path):
    first, root = tmp_path / "first", tmp_path / "archive"
    shutil.copytree(SAMPLE, first)
    ingest([first], root, workers=1)
    assert {digest_kind(d) for d in stored_digests(root).values()} == {"blake3"}
    shutil.rmtree(first)
    later = ingest([copies_of_the_sample(tmp_path / "later")], root, workers=1)
    assert (later.runs_added, later.runs_already_archived, later.runs_conflicting) == (1, 14, 1)


# ── which copy of one recording is kept ────────────────────────────
def with_a_bare_twin(tmp_path: Path, twin_name: str) -> Path:
    """The sample, with s0003-loop also as a bare JSON Lines twin: its id is the file's
    (``TWIN:1``), and it lacks the wrapper's static tool names."""
    folder = tmp_path / twin_name
    shutil.copytree(SAMPLE, folder)
    (folder / f"{twin_name}.jsonl").write_text(json.dumps(bare(LOOP)) + "\n", encoding="utf-8")
    return folder


def by_piece(ledger: pl.DataFrame) -> pl.DataFrame:
    """The rows in a fixed order (where the kept run sits moves ties between rows)."""
    return ledger.sort("kind", "id")


@pytest.mark.parametrize("twin", ["a-twin", "z-twin"], ids=["twin read first", "twin read last"])
def test_the_copy_that_names_its_run_is_kept_whatever_the_file_order(tmp_path, twin):
    """The copy kept was the first read: a twin named ``a-twin:1`` read before the
    wrapped s0003-loop was counted under its file's name, without the static tool names
    the wrapper carries. Now the wrapped copy is kept in both orders, from the folder and
    through ingest, and the twin is its duplicate."""
    folder = with_a_bare_twin(tmp_path, twin)
    clean = read_runs(SAMPLE)
    tables = read_runs(folder)
    assert sorted(tables.runs["run_id"].to_pylist()) == sorted(clean.runs["run_id"].to_pylist())
    [duplicate] = tables.duplicates.to_pylist()
    assert (duplicate["run_id"], duplicate["kept_run_id"]) == (f"{twin}:1", "s0003-loop")
    assert duplicate["kept_path"] == str(folder / LOOP.name)
    expected = by_piece(compute_ledger(clean).rows())
    assert_frame_equal(by_piece(compute_ledger(tables).rows()), expected, check_exact=True)
    streams = read_inputs(folder).streams
    assert sorted(s.run_id for s in streams) == sorted(
        s.run_id for s in read_inputs(SAMPLE).streams
    )
    root = tmp_path / "archive"
    report = ingest([folder], root, workers=1)
    assert (report.runs_added, report.runs_already_archived) == (14, 1)
    archived = ArchiveTables(Archive.open(root), "corrected")
    assert sorted(archived.runs["run_id"].to_pylist()) == sorted(clean.runs["run_id"].to_pylist())
    assert_frame_equal(by_piece(compute_ledger(archived).rows()), expected, check_exact=True)


def test_a_named_copy_takes_its_twins_place_in_the_run_order(tmp_path):
    """The copy kept sits where its recording was first read: the runs come in the same
    order as they would with the twin alone, and later duplicates point at the kept one."""
    identity = RunIdentity()
    assert identity.place("twin:1", RunSource("a/twin.jsonl", 1), "d1", "x") == 0
    assert identity.place("other", RunSource("b/other.json"), "d2", "y") == 1
    assert identity.place("twin:1", RunSource("c/twin.jsonl", 1), "d1", "x") is None
    assert identity.place("loop", RunSource("d/loop.json.gz"), "d1", "x", named=True) == 0
    assert identity.place("copy", RunSource("e/copy.json"), "d1", "x") is None
    kept = {(row["path"], row["kept_run_id"]) for row in identity.duplicates}
    assert kept == {("c/twin.jsonl", "loop"), ("a/twin.jsonl", "loop"), ("e/copy.json", "loop")}


def test_a_trace_file_appended_to_since_its_ingest_says_so_not_given_twice(tmp_path):
    """Its earlier lines are read again with it: the runs on them are the archive's own,
    counted as already archived (their spans are the archived ones, read from the same
    lines), neither a copy nor one file given twice."""
    lines = (SAMPLE.parent / "otel" / "traces" / "openai-v2-latest.jsonl").read_bytes()
    head, rest = lines.splitlines(keepends=True)[:2], lines.splitlines(keepends=True)[2:]
    traces = tmp_path / "in" / "t.jsonl"
    traces.parent.mkdir()
    traces.write_bytes(b"".join(head))
    first = ingest([traces.parent], tmp_path / "archive", workers=1)
    traces.write_bytes(b"".join(head + rest))
    again = ingest([traces.parent], tmp_path / "archive", workers=1)
    assert (again.runs_conflicting, again.runs_already_archived) == (0, first.runs_added)
    assert again.runs_added == again.runs_read - first.runs_added > 0
    summary = again.summary()
    assert "given twice" not in summary and "duplicate" not in summary


def test_a_snapshot_rewritten_since_its_ingest_is_a_conflict_not_a_duplicate(tmp_path):
    """The same run id with other content in the same file: not added, quarantined, and
    the reason says the file changed since it was ingested."""
    snapshot = tmp_path / "in" / LOOP.name
    snapshot.parent.mkdir()
    shutil.copyfile(LOOP, snapshot)
    ingest([snapshot.parent], tmp_path / "archive", workers=1)
    document = json.loads(gzip.decompress(LOOP.read_bytes()))
    document["snapshot"]["commitLog"].pop()
    snapshot.write_bytes(gzip.compress(json.dumps(document).encode()))
    again = ingest([snapshot.parent], tmp_path / "archive", workers=1)
    assert (again.runs_added, again.runs_already_archived, again.runs_conflicting) == (0, 0, 1)
    assert again.duplicates == []
    assert [problem["reason"] for problem in again.problems] == [
        f"run_id s0003-loop already archived from {snapshot}, which changed since it was "
        "ingested, with different content; this copy was not counted (the first copy is kept)"
    ]
