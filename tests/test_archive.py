"""Archives: the ledger from an archive equals the ledger from the snapshots; ingest is
idempotent; a bad file is quarantined and retried; filters select what they say; a
ledger exported yesterday merged with today's partition equals a full recompute."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveError, ArchiveTables
from contextledger.archive.selection import parse_archive_path
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.ledger.compute import compute_ledger, ledger_inputs
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.tables.build import ACCOUNTING_MODES, read_runs
from contextledger.tables.sidecars import load_outcomes

from .conftest import REPO, SAMPLE, as_new_run, require_corpus, written_without
from .test_duckdb_ledger import corpus_outcomes

SAMPLE_OUTCOMES = REPO / "data" / "sample-outcomes.csv"


@pytest.fixture(scope="module")
def corpus_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "archive"
    report = ingest([require_corpus() / "runs"], root)
    assert (report.runs_added, report.problems) == (301, [])
    return root


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_corpus_archive_gives_the_direct_ledger_in_both_modes(corpus_archive, mode):
    """Every row and its order (insertion-order ties depend on run_order = ingest order)."""
    labels = corpus_outcomes()
    direct = read_runs(require_corpus() / "runs", mode=mode).with_outcomes(labels)
    archived = ArchiveTables(Archive.open(corpus_archive), mode).with_outcomes(labels)
    expected = compute_ledger(direct)
    got = compute_ledger(archived)
    assert_frame_equal(got.frame, expected.frame, check_exact=True)
    assert got.runs_recorded == expected.runs_recorded
    assert_frame_equal(got.rows(), expected.rows(), check_exact=True)
    assert_frame_equal(ledger_rows_sql(archived), expected.rows(), check_exact=True)


def test_stored_piece_totals_give_the_ledger_the_rows_give(tmp_path):
    """Totals per commit and partition add up to the ledger of every row: with commits of
    a few runs, partitions that interleave run_order within a commit, and an archive
    whose commits list no totals (written before they were stored), which reads rows."""
    root = tmp_path / "archive"
    ingest([require_corpus() / "runs"], root, partition_by="runner_kind", batch_runs=40)
    labels = corpus_outcomes()
    for mode in ACCOUNTING_MODES:
        tables = ArchiveTables(Archive.open(root), mode).with_outcomes(labels)
        inputs = ledger_inputs(tables)
        assert inputs.totals is not None
        from_totals = compute_ledger(inputs)
        from_rows = compute_ledger(replace(inputs, totals=None))
        assert_frame_equal(from_totals.frame, from_rows.frame, check_exact=True)
        direct = read_runs(require_corpus() / "runs", mode=mode).with_outcomes(labels)
        assert_frame_equal(from_totals.frame, compute_ledger(direct).frame, check_exact=True)
        assert "piece_totals" in tables.duckdb_sources()
        assert_frame_equal(ledger_rows_sql(tables), from_rows.rows(), check_exact=True)
        assert tables.select(labels=("success",)).totals_scan() is None  # a run-level filter
    for commit_file in (root / "_manifest" / "commits").glob("*.json"):
        commit = json.loads(commit_file.read_text())
        commit["files"] = [f for f in commit["files"] if f["table"] != "piece_totals"]
        commit_file.write_text(json.dumps(commit))
    shutil.rmtree(root / "piece_totals")
    for mode in ACCOUNTING_MODES:
        older = ArchiveTables(Archive.open(root), mode).with_outcomes(labels)
        assert older.totals_scan() is None
        direct = read_runs(require_corpus() / "runs", mode=mode).with_outcomes(labels)
        assert_frame_equal(
            compute_ledger(older).frame, compute_ledger(direct).frame, check_exact=True
        )
        assert_frame_equal(ledger_rows_sql(older), compute_ledger(direct).rows(), check_exact=True)


def test_the_archive_holds_the_tables_and_run_order_is_ingest_order(corpus_archive):
    archive = Archive.open(corpus_archive)
    for mode in ACCOUNTING_MODES:
        direct = read_runs(require_corpus() / "runs", mode=mode)
        archived = ArchiveTables(archive, mode)
        assert archived.runs.drop_columns("source_path").equals(
            direct.runs.drop_columns("source_path")
        )
        for name in ("offers", "uses"):
            metered = pl.DataFrame(direct.runs).filter("metered")["run_id"].implode()
            want = pl.DataFrame(getattr(direct, name)).filter(pl.col("run_id").is_in(metered))
            got = pl.DataFrame(getattr(archived, name))
            assert_frame_equal(got, want, check_exact=True)


def test_reingesting_the_same_files_adds_nothing(tmp_path):
    snapshots = tmp_path / "runs"
    shutil.copytree(SAMPLE, snapshots)
    root = tmp_path / "archive"
    first = ingest([snapshots], root, workers=1)
    assert (first.runs_added, first.commits) == (14, 1)
    again = ingest([snapshots], root, workers=1)
    assert (again.files_read, again.files_unchanged, again.commits) == (0, 14, 0)
    # Touched but identical: hashed, found unchanged, not read.
    touched = next(snapshots.iterdir())
    os.utime(touched, ns=(1, 1))
    assert ingest([snapshots], root, workers=1).files_unchanged == 14
    # The same run under another file name: read, and counted as already archived.
    shutil.copy(touched, tmp_path / touched.name)
    copy = ingest([tmp_path / touched.name], root, workers=1)
    assert (copy.runs_read, copy.runs_added, copy.runs_already_archived) == (1, 0, 1)
    runs = ArchiveTables(Archive.open(root), "corrected").runs
    assert runs.num_rows == 14 == len(set(runs["run_id"].to_pylist()))
    assert len(Archive.open(root).commits) == 2  # the copy's manifest entry


def test_a_run_id_arriving_with_other_content_is_reported_not_added(tmp_path):
    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1)
    original = SAMPLE / "s0003-loop.json.gz"
    document = json.loads(gzip.decompress(original.read_bytes()))
    document["snapshot"]["runId"] = "re-recorded"
    changed = tmp_path / "s0003-loop.json.gz"
    changed.write_bytes(gzip.compress(json.dumps(document).encode()))
    report = ingest([changed], root, workers=1)
    assert (report.runs_added, report.runs_conflicting) == (0, 1)
    assert "different content" in report.problems[0]["reason"]
    assert "conflicting" in report.summary()
    listing = json.loads((root / "quarantine.json").read_text())["quarantined"]
    assert [row["run_id"] for row in listing] == ["s0003-loop"]
    assert ArchiveTables(Archive.open(root), "corrected").runs.num_rows == 14


def test_bad_files_are_quarantined_and_retried_once_fixed(tmp_path):
    snapshots = tmp_path / "runs"
    shutil.copytree(SAMPLE, snapshots)
    good = (snapshots / "s0003-loop.json.gz").read_bytes()
    (snapshots / "truncated.json.gz").write_bytes(good[: len(good) // 2])
    (snapshots / "invalid.json").write_text("{not json", encoding="utf-8")
    root = tmp_path / "archive"
    result = CliRunner().invoke(main, ["ingest", str(snapshots), "--archive", str(root)])
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "14 added" in result.output and "2 bad file(s)" in result.output
    assert "truncated.json.gz" in result.output and "invalid JSON" in result.output
    listing = json.loads((root / "quarantine.json").read_text())["quarantined"]
    names = sorted(Path(row["path"]).name for row in listing)
    assert names == ["invalid.json", "truncated.json.gz"]
    # Unchanged bad files are not read again; the ledger still names them.
    assert ingest([snapshots], root, workers=1).files_read == 0
    ledger = CliRunner().invoke(main, ["ledger", str(root)])
    assert ledger.exit_code == EXIT_UNREADABLE_INPUT and "truncated.json.gz" in ledger.output
    # Fixed: read again, added, and out of quarantine; the unchanged bad file stays.
    document = json.loads(gzip.decompress(good))
    as_new_run(document, "fixed-run")
    (snapshots / "truncated.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    fixed = ingest([snapshots], root, workers=1)
    assert (fixed.files_read, fixed.runs_added) == (1, 1)
    listing = json.loads((root / "quarantine.json").read_text())["quarantined"]
    assert [Path(row["path"]).name for row in listing] == ["invalid.json"]


def test_filters_select_by_run_id_label_and_ingest_date(tmp_path):
    root = tmp_path / "archive"
    files = sorted(SAMPLE.glob("*.json.gz"))
    ingest(files[:7], root, ingest_date="2026-01-01", workers=1)
    ingest(files[7:], root, ingest_date="2026-01-02", outcomes=SAMPLE_OUTCOMES, workers=1)
    archive = Archive.open(root)
    tables = ArchiveTables(archive, "corrected")
    day_two = tables.select(since="2026-01-02")
    assert day_two.runs.num_rows == 7
    assert len(day_two.files("offers")) < len(tables.files("offers"))  # pruned, not filtered
    chosen = ["s0003-loop", "s0224-wrapup"]
    direct = read_runs([SAMPLE / f"{run}.json.gz" for run in chosen])
    direct = direct.with_outcomes(load_outcomes(SAMPLE_OUTCOMES))
    by_id = tables.select(run_ids=tuple(chosen))
    assert_frame_equal(compute_ledger(by_id).frame, compute_ledger(direct).frame, check_exact=True)
    labels = pl.read_csv(SAMPLE_OUTCOMES)
    good = set(labels.filter(pl.col("label") == "good")["run_id"])
    assert set(tables.select(labels=("good",)).runs["run_id"].to_pylist()) == good
    path, selection = parse_archive_path(f"{root}?since=2026-01-02&run_id=a,b&label=x") or ()
    assert (path.root, selection.since, selection.run_ids, selection.labels) == (
        str(root),
        "2026-01-02",
        ("a", "b"),
        ("x",),
    )
    with pytest.raises(ArchiveError, match="unknown archive filter"):
        parse_archive_path(f"{root}?from=2026-01-01")


def test_a_repeated_label_means_either_and_a_repeated_date_is_refused(tmp_path):
    """``label=bad&label=good`` kept the last label (now either, as ``label=bad,good``
    and as ``run_id`` does); a repeated ``since``/``until`` kept the last one silently."""
    root = tmp_path / "archive"
    ingest([SAMPLE], root, ingest_date="2026-11-15", outcomes=SAMPLE_OUTCOMES, workers=1)
    labels = pl.read_csv(SAMPLE_OUTCOMES)
    either = sorted(labels.filter(pl.col("label").is_in(["bad", "good"]))["run_id"].unique())
    by_ids = ArchiveTables(Archive.open(root), "corrected").select(run_ids=tuple(either))
    expected = compute_ledger(by_ids).frame
    for query in ("label=bad&label=good", "label=bad,good", "label=good&label=bad,nope"):
        found = parse_archive_path(f"{root}?{query}")
        assert found is not None
        tables = ArchiveTables(Archive.open(root), "corrected", found[1])
        assert sorted(tables.runs["run_id"].to_pylist()) == either, query
        assert_frame_equal(compute_ledger(tables).frame, expected, check_exact=True)
    for name in ("since", "until"):
        result = CliRunner().invoke(main, ["ledger", f"{root}?{name}=2026-11-01&{name}=2026-11-15"])
        assert result.exit_code == EXIT_USAGE, result.output
        assert result.stderr.splitlines() == [
            f"contextledger: {root}?{name}=2026-11-01&{name}=2026-11-15: {name} given 2 "
            f"times ('2026-11-01', '2026-11-15'): give it once"
        ]


def test_a_plus_in_a_selection_stays_a_plus(tmp_path):
    """``+05:00`` was decoded as a space (form encoding): the offset made the date
    unreadable, and a run id or label with a ``+`` could not be selected."""
    snapshots = tmp_path / "runs"
    snapshots.mkdir()
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    as_new_run(document, "loop+1")
    (snapshots / "loop.json").write_text(json.dumps(document), encoding="utf-8")
    shutil.copy(SAMPLE / "s0048-loop.json.gz", snapshots)
    labels = tmp_path / "labels.csv"
    labels.write_text("run_id,label\nloop+1,ok+\ns0048-loop,ok\n", encoding="utf-8")
    root = tmp_path / "archive"
    ingest([snapshots], root, ingest_date="2026-11-15", outcomes=labels, workers=1)

    def selected(query: str) -> list[str]:
        found = parse_archive_path(f"{root}?{query}")
        assert found is not None
        tables = ArchiveTables(Archive.open(root), "corrected", found[1])
        return sorted(tables.runs["run_id"].to_pylist())

    # 02:00 at +05:00 is 21:00 UTC the day before: the day the runs were ingested
    assert selected("since=2026-11-16T02:00:00+05:00") == ["loop+1", "s0048-loop"]
    assert selected("until=2026-11-14T23:00:00-05:00") == ["loop+1", "s0048-loop"]
    assert selected("run_id=loop+1") == ["loop+1"]
    assert selected("label=ok+") == ["loop+1"]
    assert selected("run_id=loop%2B1") == ["loop+1"]  # a %XX escape is still decoded
    result = CliRunner().invoke(main, ["ledger", f"{root}?since=2026-11-15T23:00:00+05:00"])
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(main, ["ledger", f"{root}?since=soon+later%21"])
    assert bad.exit_code == EXIT_USAGE
    assert "since 'soon+later%21' is not a date" in bad.stderr


def test_yesterdays_export_merged_with_todays_partition_equals_a_full_recompute(tmp_path):
    """What a nightly job does: ledger --merge yesterday.json over today's partition."""
    root = tmp_path / "archive"
    files = sorted(SAMPLE.glob("*.json.gz"))
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    run("ingest", *map(str, files[:8]), "--archive", str(root), "--ingest-date", "2026-03-01")
    for mode in ACCOUNTING_MODES:  # the export a job wrote last night
        yesterday = tmp_path / f"{mode}-yesterday.json"
        outcomes = ["--outcomes", str(SAMPLE_OUTCOMES), "--mode", mode]
        run("ledger", str(root), *outcomes, "--format", "json", "-o", str(yesterday))
    run("ingest", *map(str, files[8:]), "--archive", str(root), "--ingest-date", "2026-03-02")
    for mode in ACCOUNTING_MODES:
        yesterday = tmp_path / f"{mode}-yesterday.json"
        outcomes = ["--outcomes", str(SAMPLE_OUTCOMES), "--mode", mode]
        today = f"{root}?since=2026-03-02"
        merged = run("ledger", today, *outcomes, "--merge", str(yesterday), "--format", "json")
        full = run("ledger", str(root), *outcomes, "--format", "json")
        assert merged.splitlines()[0] == full.splitlines()[0]
        runs = json.loads(full.splitlines()[0])["runsRecorded"]
        assert runs == (14 if mode == "corrected" else 12)


def test_sql_and_ledger_commands_read_an_archive(tmp_path):
    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1)
    runner = CliRunner()
    result = runner.invoke(main, ["sql", str(root), "SELECT count(*) AS runs FROM runs"])
    assert result.exit_code == 0 and "14" in result.output
    both = runner.invoke(main, ["ledger", str(root), str(SAMPLE)])
    assert both.exit_code == EXIT_USAGE and "only input" in both.output
    direct = runner.invoke(main, ["ledger", str(SAMPLE), "--format", "csv"])
    archived = runner.invoke(main, ["ledger", str(root), "--format", "csv"])
    assert archived.output == direct.output


def test_a_partition_key_is_fixed_when_the_archive_is_created(tmp_path):
    root = tmp_path / "archive"
    ingest([SAMPLE / "s0003-loop.json.gz"], root, partition_by="runner_kind", workers=1)
    assert (root / "runs" / "accounting=corrected" / "runner_kind=Agent").is_dir()
    with pytest.raises(ArchiveError, match="partitioned by runner_kind"):
        ingest([SAMPLE], root, partition_by="ingest_date")
    assert ingest([SAMPLE], root, workers=1).runs_added == 13


def test_an_empty_selection_gives_an_empty_ledger(tmp_path):
    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1, ingest_date="2026-01-01")
    tables = ArchiveTables(Archive.open(root), "corrected").select(since="2027-01-01")
    assert compute_ledger(tables).runs_recorded == 0
    assert ledger_rows_sql(tables).height == 0
    assert tables.runs.num_rows == 0 and isinstance(tables.offers, pa.Table)


def interleaved_archive(tmp_path: Path) -> tuple[Path, list[Path], pa.Table]:
    """The sample in one commit, partitioned by source_dir with the runs alternating
    between two folders (so each partition's file holds every other run), and labels:
    ``(archive, snapshot paths in run order, labels)``."""
    paths = []
    for position, path in enumerate(sorted(SAMPLE.glob("*.json.gz"))):
        folder = tmp_path / ("a" if position % 2 else "b")
        folder.mkdir(exist_ok=True)
        paths.append(Path(shutil.copy(path, folder / path.name)))
    root = tmp_path / "archive"
    ingest(paths, root, partition_by="source_dir", workers=1)
    run_ids = [path.name.removesuffix(".json.gz") for path in paths]
    labels = pa.table(
        {
            "run_id": [*run_ids, *run_ids[::-3]],
            "label": ["good" if i % 3 else "bad" for i in range(len(run_ids))]
            + ["reviewed"] * len(run_ids[::-3]),
        }
    )
    return root, paths, labels


def test_partitions_interleaving_run_order_give_the_direct_ledger_on_every_path(tmp_path):
    """A partition key that splits one commit's runs into files out of run order: a
    piece's first offer and the order its labels are credited follow run_order, not the
    order of the files, from the totals and from every row, in Polars and DuckDB."""
    root, paths, labels = interleaved_archive(tmp_path)
    run_ids = [path.name.removesuffix(".json.gz") for path in paths]
    for mode in ACCOUNTING_MODES:
        tables = ArchiveTables(Archive.open(root), mode).with_outcomes(labels)
        files = [Path(path).parent.parent.name for path in tables.files("offers", True)]
        assert files == ["source_dir=b", "source_dir=a"]  # b holds the first run
        expected = compute_ledger(read_runs(paths, mode=mode).with_outcomes(labels))
        inputs = ledger_inputs(tables)
        for path in (inputs, replace(inputs, totals=None)):
            assert_frame_equal(compute_ledger(path).frame, expected.frame, check_exact=True)
        assert_frame_equal(ledger_rows_sql(tables), expected.rows(), check_exact=True)
        by_rows = tables.select(run_ids=tuple(run_ids))  # a run-level filter reads rows
        assert by_rows.totals_scan() is None
        assert_frame_equal(ledger_rows_sql(by_rows), expected.rows(), check_exact=True)


def test_an_archive_under_a_folder_whose_name_looks_like_a_glob_is_read(tmp_path):
    """Polars reads a path as a glob by default: ``[1]`` in a folder name made every
    command over the archive fail with "expanded paths were empty"."""
    root = tmp_path / "runs [1] *" / "archive"
    ingest([SAMPLE], root, workers=1)
    runner = CliRunner()
    ledger = runner.invoke(main, ["ledger", str(root), "--format", "csv"])
    direct = runner.invoke(main, ["ledger", str(SAMPLE), "--format", "csv"])
    assert ledger.exit_code == 0, ledger.output
    assert ledger.stdout == direct.stdout
    for args in (
        ["sql", str(root), "SELECT count(*) AS runs FROM runs", "--format", "csv"],
        ["whatif", str(root), "--policy", "none"],
        ["check", str(root)],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)


def test_a_run_id_filter_reads_only_the_commits_holding_its_runs(tmp_path):
    """Every commit's files were scanned (and filtered row by row) for a few run ids, and
    every stored label was read and numbered to credit those few runs."""
    root = tmp_path / "archive"
    files = sorted(SAMPLE.glob("*.json.gz"))
    ingest(files, root, batch_runs=3, outcomes=SAMPLE_OUTCOMES, workers=1)
    archive = Archive.open(root)
    assert len(archive.commits) >= 4
    chosen = ("s0003-loop", "s0224-wrapup")
    for mode in ACCOUNTING_MODES:
        tables = ArchiveTables(archive, mode).select(run_ids=chosen)
        holding = {c.seq for c in archive.commits for f in c.files if f.table == "offers"}
        read = {path.split("part-")[1][:8] for path in tables.files("offers")}
        assert len(read) == 2 < len(holding)
        direct = read_runs([SAMPLE / f"{run}.json.gz" for run in chosen], mode=mode)
        direct = direct.with_outcomes(load_outcomes(SAMPLE_OUTCOMES))
        expected = compute_ledger(direct)
        assert_frame_equal(compute_ledger(tables).frame, expected.frame, check_exact=True)
        assert_frame_equal(ledger_rows_sql(tables), expected.rows(), check_exact=True)
        assert sorted(tables.runs["run_id"].to_pylist()) == sorted(chosen)
        # the labels credited are the chosen runs' (in order), not every stored label
        credited = ledger_inputs(tables).outcomes.collect()
        stored = tables.outcome_scan().collect()
        assert credited.equals(stored.filter(pl.col("run_id").is_in(chosen)))
        assert 0 < credited.height < stored.height
        none = ArchiveTables(archive, mode).select(run_ids=("no-such-run",))
        assert none.files("offers") == [] and compute_ledger(none).runs_recorded == 0


def test_an_archive_written_before_runs_had_a_basis_column_still_reads(tmp_path, monkeypatch):
    """A commit written by a version without ``runs.basis`` beside one written with it:
    the ledger, the rows path, DuckDB and ``check`` read both, the old runs with an empty
    basis, and give the ledger of the snapshots read directly."""
    import pyarrow.parquet as pq

    runs = sorted((SAMPLE).glob("*.json*"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for index, path in enumerate(runs):
        shutil.copy(path, (first if index < 7 else second) / path.name)
    root = tmp_path / "archive"
    with written_without(monkeypatch, "basis"):
        ingest([first], root)
    ingest([second], root)
    written = sorted(root.glob("runs/accounting=corrected/*/*.parquet"))
    assert sorted("basis" in pq.read_schema(path).names for path in written) == [False, True]
    for mode in ACCOUNTING_MODES:
        archived = ArchiveTables(Archive.open(root), mode)
        direct = read_runs([first, second], mode=mode)
        expected = compute_ledger(direct)
        assert_frame_equal(compute_ledger(archived).frame, expected.frame, check_exact=True)
        inputs = ledger_inputs(archived)
        from_rows = compute_ledger(replace(inputs, totals=None))
        assert_frame_equal(from_rows.frame, expected.frame, check_exact=True)
        assert_frame_equal(ledger_rows_sql(archived), expected.rows(), check_exact=True)
        assert archived.scan("runs").collect()["basis"].to_list() == [[]] * len(runs)
    result = CliRunner().invoke(main, ["check", str(root)])
    assert result.exit_code == 0, result.output


def test_an_archive_whose_folder_name_holds_a_question_mark_is_read_as_named(tmp_path):
    """``ingest --archive 'arch?q'`` wrote it; reading ``arch?q`` took ``q`` for a query
    and walked the archive as a folder of snapshots (17 files not read, 0 runs)."""
    root = tmp_path / "arch?q"
    ingest([SAMPLE], root, workers=1)
    whole = CliRunner().invoke(main, ["ledger", str(root)])
    assert whole.exit_code == 0, whole.stderr
    assert "14 run(s) metered" in whole.stdout
    one = CliRunner().invoke(main, ["ledger", f"{root}?run_id=s0003-loop"])
    assert one.exit_code == 0 and "1 run(s) metered" in one.stdout


def test_ingest_takes_reads_with_the_collector_paused_and_collects_once_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A batch's reads are trees reference counting frees: the cycle collector walking
    them again as they piled up was a quarter of the ingesting process's CPU. It is paused
    while reads arrive, collects the young objects once a batch is committed, and is on
    again after; the archive is the same."""
    import gc

    from contextledger.jobs import ingest as ingest_job

    enabled: list[bool] = []
    add = ingest_job._Pending.add

    def watched(pending: ingest_job._Pending, *args: object, **kwargs: object) -> None:
        enabled.append(gc.isenabled())
        add(pending, *args, **kwargs)  # type: ignore[arg-type]

    collected: list[int] = []
    monkeypatch.setattr(ingest_job._Pending, "add", watched)
    monkeypatch.setattr(gc, "collect", lambda generation=2: collected.append(generation))
    report = ingest([SAMPLE], tmp_path / "archive", workers=1, batch_runs=5)
    assert (report.runs_added, report.commits) == (14, 3)
    assert enabled == [False] * 14 and gc.isenabled()
    assert collected == [0, 0, 0]
