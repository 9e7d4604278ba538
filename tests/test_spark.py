"""The ledger on Spark equals the local ledger exactly, rows and order, over the corpus archive.

Needs the ``spark`` extra and Java; skipped (saying which is missing) without them,
except under ``$CI``, where a missing Spark fails instead of skipping silently. One
``local[2]`` session serves every test.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables, verify_archive
from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import BASE_VIEWS, PIECE_VIEWS, VIEWS, view_sql
from contextledger.tables.build import ACCOUNTING_MODES, read_runs

from .conftest import REPO, SAMPLE, in_ci, oracle_runs, require_corpus
from .test_archive import interleaved_archive
from .test_duckdb_ledger import corpus_outcomes

SPARK_PACKAGE = REPO / "src" / "contextledger" / "jobs" / "spark"


def _missing(*modules: str) -> str | None:
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed (pip install -e '.[spark]')"
    if "pyspark" in modules and shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        return "java not found (Spark needs Java 17+)"
    return None


def require(*modules: str) -> None:
    """Skip unless ``modules`` (and Java, for pyspark) are here; under $CI, fail instead."""
    reason = _missing(*modules)
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI must run the Spark tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    require("pyspark", "sqlglot")
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import contextledger
    session = (
        SparkSession.builder.master("local[2]")
        .appName("contextledger-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")  # more than one: order must not hang on it
        .config("spark.sql.adaptive.enabled", "false")  # else tiny shuffles coalesce to one
        .config("spark.default.parallelism", "2")
        # the JIT's first tier only, and one GC thread: these tests run many small queries,
        # whose planning and generated code the optimizing tier spends minutes of CPU on
        # compiling for no gain; the flags change how fast the JVM runs, never what it computes
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"spark session started in {time.perf_counter() - started:.1f} s")
    yield session
    session.stop()


DAY_ONE, DAY_TWO = "2026-11-01", "2026-11-02"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus over two ingest dates, partitioned by runner_kind (partitions interleave
    run_order within a commit) in commits of 80 runs; day two's labels stored with it."""
    folder = tmp_path_factory.mktemp("spark")
    files = sorted((require_corpus() / "runs").glob("*.json.gz"))
    labels = folder / "labels.csv"
    with labels.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run_id", "label"])
        writer.writerows((run, row["outcome_label"]) for run, row in oracle_runs().items())
    root = folder / "archive"
    common = {"partition_by": "runner_kind", "batch_runs": 80, "workers": 1}
    ingest(files[:150], root, ingest_date=DAY_ONE, **common)
    ingest(files[150:], root, ingest_date=DAY_TWO, outcomes=labels, **common)
    return root


def test_spark_reads_an_archive_named_by_file_uri(spark, archive):
    """``file:///...`` (escaped) with and without a selection: Spark's ledger and rows
    are the local ledger's over the plain path."""
    from urllib.parse import quote

    from contextledger.archive import archive_tables
    from contextledger.jobs.spark.views import spark_ledger, spark_ledger_rows

    for selection in ("", f"?since={DAY_TWO}&label=good"):
        plain = archive_tables([f"{archive}{selection}"], "corrected")
        assert plain is not None
        expected = compute_ledger(plain)
        uri = "file://" + quote(str(archive)) + selection
        got = spark_ledger(uri, "corrected", spark)
        assert_frame_equal(got.frame, expected.frame, check_exact=True)
        assert got.runs_recorded == expected.runs_recorded
        rows = spark_ledger_rows(uri, "corrected", spark)
        assert_frame_equal(rows, expected.rows(), check_exact=True)


def both(spark, tables: ArchiveTables, use_totals: bool | None = None) -> None:
    """Spark's ledger view (insertion order) and ledger_rows view, from one registration,
    each exactly the local ledger's; and the metered runs counted alike."""
    from contextledger.jobs.spark.views import register, to_polars
    from contextledger.tables import schema

    expected = compute_ledger(tables)
    session = register(tables, spark=spark, use_totals=use_totals)
    frame = session.table("ledger").orderBy("insertion_order").drop("insertion_order")
    assert_frame_equal(to_polars(frame, schema.LEDGER), expected.frame, check_exact=True)
    rows = to_polars(session.sql("SELECT * FROM ledger_rows"), schema.LEDGER)
    assert_frame_equal(rows, expected.rows(), check_exact=True)
    assert session.table("runs").where("metered").count() == expected.runs_recorded


# ── no Spark needed ──────────────────────────────────────────────────
def test_importing_contextledger_and_its_cli_does_not_import_pyspark():
    code = (
        "import sys, contextledger, contextledger.cli\n"
        "import contextledger.jobs.spark as on_spark\n"
        "assert on_spark.available() in (None, on_spark.available())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'sqlglot')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_spark_view_is_derived_from_a_shipped_duckdb_file():
    """One source of truth: Spark registers each archive view DuckDB has, transpiled from
    its file, except the DuckDB-only ones (refused by rule, not left out by hand); and the
    spark package holds no SQL text of its own."""
    require("sqlglot")
    from contextledger.jobs.spark.dialect import DialectError, to_spark
    from contextledger.jobs.spark.views import DUCKDB_ONLY, view_files

    def columns(table: str) -> list[str]:
        return ["id", "kind", "insertion_order"] if table == "ledger" else []

    for pieces in ("rows", "totals"):
        duckdb_files = [*BASE_VIEWS["archive"], *PIECE_VIEWS[pieces], *VIEWS]
        assert view_files(pieces) == [name for name in duckdb_files if name not in DUCKDB_ONLY]
        for name in duckdb_files:
            if name in DUCKDB_ONLY:
                with pytest.raises(DialectError, match="insertion order"):
                    to_spark(view_sql(name), columns)
            else:
                view, query = to_spark(view_sql(name), columns)
                assert f"VIEW {view} AS" in view_sql(name)
                assert query.startswith(("SELECT", "WITH"))
    assert not list(SPARK_PACKAGE.rglob("*.sql"))
    for path in SPARK_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        documented = (ast.Module, ast.FunctionDef, ast.ClassDef)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, documented) and ast.get_docstring(node) is not None
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docstrings:
                    continue
                text = node.value.upper()
                assert not ("SELECT " in text and " FROM " in text), (path.name, node.value)


def test_an_ordered_list_keeps_its_order_on_spark():
    require("sqlglot")
    from contextledger.jobs.spark.dialect import to_spark

    _, query = to_spark("CREATE VIEW v AS SELECT list(x ORDER BY k, j) AS xs FROM t", list)
    assert "ARRAY_SORT(COLLECT_LIST(STRUCT(k AS k0, j AS k1, x AS v)))" in query


def test_engine_spark_is_refused_for_snapshots_and_without_pyspark(monkeypatch):
    import contextledger.jobs.spark

    runner = CliRunner()
    monkeypatch.setattr(contextledger.jobs.spark, "available", lambda: None)  # as if installed
    result = runner.invoke(main, ["ledger", str(SAMPLE), "--engine", "spark"])
    assert result.exit_code == EXIT_USAGE and "reads one archive" in result.output
    monkeypatch.setattr(contextledger.jobs.spark, "available", lambda: "pyspark not installed: ...")
    for command in (
        ["ledger", str(SAMPLE)],
        ["sql", str(SAMPLE), "SELECT 1"],
        ["ingest", str(SAMPLE), "--archive", "never-made"],  # snapshots: ingest reads them
    ):
        result = runner.invoke(main, [*command, "--engine", "spark"])
        assert result.exit_code == EXIT_USAGE and "pyspark not installed" in result.output
    assert not Path("never-made").exists()


# ── on Spark ─────────────────────────────────────────────────────────
@pytest.mark.parametrize("use_totals", [None, False], ids=["totals", "rows"])
@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_corpus_ledger_with_labels_equals_the_local_ledger(spark, archive, mode, use_totals):
    """Stored labels (day two) and labels given in Python (repeated pairs, a second label
    on every 20th run, a label for no run), in both accountings, totals and rows paths."""
    tables = ArchiveTables(Archive.open(archive), mode).with_outcomes(corpus_outcomes())
    assert tables.totals_files() is not None  # the rows path is asked for, not forced
    both(spark, tables, use_totals)


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_corpus_ledger_without_given_labels_equals_the_local_ledger(spark, archive, mode):
    both(spark, ArchiveTables(Archive.open(archive), mode))


@pytest.mark.parametrize(
    "filters",
    [
        {"since": DAY_TWO},
        {"until": DAY_ONE},
        {"labels": ("good",)},
        {"labels": ("bad", "good")},
        {"run_ids": ("s0003-loop", "s0150-loop", "s0224-wrapup", "no-such-run")},
    ],
    ids=["since", "until", "label", "labels", "run_id"],
)
def test_each_selection_filter_gives_the_local_ledger(spark, archive, filters):
    tables = ArchiveTables(Archive.open(archive), "corrected").select(**filters)
    assert tables.runs.num_rows < 301
    both(spark, tables)


@pytest.mark.parametrize("use_totals", [None, False], ids=["totals", "rows"])
def test_partitions_interleaving_run_order_give_the_direct_ledger(spark, tmp_path, use_totals):
    """Pieces shared across partitions whose files split one commit's runs out of order:
    first offers and label credit follow run_order on Spark too."""
    root, paths, labels = interleaved_archive(tmp_path)
    tables = ArchiveTables(Archive.open(root), "corrected").with_outcomes(labels)
    expected = compute_ledger(read_runs(paths).with_outcomes(labels))
    assert_frame_equal(compute_ledger(tables).frame, expected.frame, check_exact=True)
    both(spark, tables, use_totals)


def test_the_public_api_reads_an_archive_path_with_filters(spark, archive):
    import contextledger.jobs.spark as on_spark

    path = f"{archive}?since={DAY_TWO}"
    tables = ArchiveTables(Archive.open(archive), "reference").select(since=DAY_TWO)
    got = on_spark.ledger_rows(path, mode="reference", spark=spark)
    assert_frame_equal(got, compute_ledger(tables).rows(), check_exact=True)
    counts = on_spark.sql(path, "SELECT count(*) AS n FROM runs", "reference", spark)
    assert counts["n"].to_list() == [tables.runs.num_rows]


def test_files_no_commit_lists_are_not_counted(spark, archive, tmp_path):
    """What a crashed ingest leaves (data files no commit lists) is not read."""
    root = tmp_path / "archive"
    shutil.copytree(archive, root)
    planted = 0
    for table in ("runs", "offers", "uses", "piece_totals", "outcomes"):
        for path in list((root / table).rglob("*.parquet")):
            shutil.copy(path, path.with_name("part-99999999-deadbeef.parquet"))
            planted += 1
    assert planted > 10
    for mode in ACCOUNTING_MODES:
        tables = ArchiveTables(Archive.open(root), mode).with_outcomes(corpus_outcomes())
        clean = ArchiveTables(Archive.open(archive), mode).with_outcomes(corpus_outcomes())
        import contextledger.jobs.spark as on_spark

        got = on_spark.ledger(tables, spark=spark)
        assert_frame_equal(got.frame, compute_ledger(clean).frame, check_exact=True)
        assert got.runs_recorded == 301 - (9 if mode == "reference" else 0)


def test_cli_engine_spark_prints_what_the_local_engine_prints(spark, archive):
    runner = CliRunner()
    for args in (
        ["ledger", str(archive), "--format", "csv"],
        ["ledger", f"{archive}?label=bad", "--mode", "reference", "--format", "json"],
        ["ledger", f"{archive}?label=bad&label=good", "--format", "csv"],  # either label
        [
            "sql",
            str(archive),
            "SELECT kind, count(*) AS pieces FROM ledger_rows GROUP BY kind ORDER BY kind",
        ],
    ):
        local = runner.invoke(main, args)
        on_spark = runner.invoke(main, [*args, "--engine", "spark"])
        assert local.exit_code == on_spark.exit_code == 0, on_spark.output
        assert on_spark.stdout == local.stdout
    bad = runner.invoke(main, ["sql", str(archive), "SELECT nope FROM runs", "--engine", "spark"])
    assert bad.exit_code == EXIT_USAGE and "SQL error" in bad.output


def test_an_empty_selection_gives_an_empty_ledger(spark, archive):
    import contextledger.jobs.spark as on_spark

    tables = ArchiveTables(Archive.open(archive), "corrected").select(since="2030-01-01")
    got = on_spark.ledger(tables, spark=spark)
    assert got.runs_recorded == 0
    assert_frame_equal(got.frame, compute_ledger(tables).frame, check_exact=True)
    rows = on_spark.ledger_rows(tables, spark=spark)
    assert_frame_equal(rows, compute_ledger(tables).rows(), check_exact=True)
    assert pl.DataFrame(on_spark.ledger_rows(tables, spark=spark)).height == 0


# ── what-if on Spark ─────────────────────────────────────────────────
#: Every policy family: none, sliding, token budget; pins on, off, and ledger facts.
POLICIES = [
    "none",
    "sliding:keep=6",
    "sliding:keep=3,ledger_facts=0,last_tool_results=0",
    "token_budget:threshold=500",
    "token_budget:threshold=2000,keep=4,ledger_facts=2",
]


def test_whatif_rows_on_spark_equal_the_local_rows_for_every_policy_family(spark, archive):
    """The whole archive with standings given (the sample's, for the fact bench run), then
    a selection by date and label: per-run rows exactly those of the local replay."""
    from contextledger.jobs.spark.whatif import whatif_rows
    from contextledger.jobs.whatif import whatif_archive
    from contextledger.tables.standings import load_standings
    from contextledger.window.whatif import parse_policies

    given = load_standings(REPO / "data" / "sample-standings.csv").to_pylist()
    without = whatif_archive(str(archive), parse_policies(POLICIES))
    with_given = whatif_archive(str(archive), parse_policies(POLICIES), given)
    assert without is not None and with_given is not None
    pinned = [
        frame["pins_held_ledger_fact"].sum() for frame in (without.per_run, with_given.per_run)
    ]
    assert pinned[0] < pinned[1]  # the given standings change what is kept
    for path, standings in ((str(archive), given), (f"{archive}?since={DAY_TWO}&label=bad", [])):
        local = whatif_archive(path, parse_policies(POLICIES), standings)
        assert local is not None and local.per_run.height
        got = whatif_rows(path, POLICIES, standings, spark)
        assert_frame_equal(got, local.per_run, check_exact=True)


def recommit(root: Path, rewritten: Path) -> None:
    """Record a data file rewritten on purpose in its commit (size, rows and checksum),
    so the archive reads it instead of naming it damaged."""
    relative = str(rewritten.relative_to(root))
    for commit_file in (root / "_manifest" / "commits").glob("*.json"):
        commit = json.loads(commit_file.read_text())
        for entry in commit["files"]:
            if entry["path"] == relative:
                entry["bytes"] = rewritten.stat().st_size
                entry["rows"] = pl.read_parquet(rewritten).height
                commit["crc32"][relative] = zlib.crc32(rewritten.read_bytes())
                commit_file.write_text(json.dumps(commit))


def test_whatif_on_spark_keeps_the_order_of_stored_standings(spark, tmp_path):
    """The corpus stores no findings ledgers; synthetic runs do (30% of runs, over two
    commits): the last standing per result and iteration counts, so the rows of a
    standings file must reach the replay in their stored order."""
    from contextledger.jobs.spark.whatif import whatif_rows
    from contextledger.jobs.synth import synth_archive
    from contextledger.jobs.whatif import whatif_archive
    from contextledger.window.whatif import parse_policies

    root = tmp_path / "synthetic"
    synth_archive(root, 300, seed=4, batch_runs=200, workers=1)
    # Restate every declared fact as noise in the same iteration, later in its file: the
    # later row counts, so reading a file's rows out of order changes the rows.
    for path in (root / "standings").rglob("*.parquet"):
        stored = pl.read_parquet(path)
        restated = stored.filter(pl.col("standing") == "fact").with_columns(
            standing=pl.lit("noise")
        )
        assert restated.height
        pl.concat([stored, restated]).write_parquet(path)
        recommit(root, path)
    local = whatif_archive(str(root), parse_policies(POLICIES))
    assert local is not None and local.per_run["results_dropped_noise"].sum() > 0
    got = whatif_rows(str(root), POLICIES, spark=spark)
    assert_frame_equal(got, local.per_run, check_exact=True)


def test_cli_whatif_engine_spark_prints_what_the_local_engine_prints(spark, archive):
    runner = CliRunner()
    args = ["whatif", f"{archive}?until={DAY_ONE}", "--policy", "sliding:keep=6"]
    args += ["--policy", "token_budget:threshold=500", "--format", "json"]
    local = runner.invoke(main, args)
    on_spark = runner.invoke(main, [*args, "--engine", "spark"])
    assert local.exit_code == on_spark.exit_code == 0, on_spark.output
    assert on_spark.stdout == local.stdout and local.stdout.count("\n") > 100


# ── ingest on Spark ──────────────────────────────────────────────────
def committed_tables(root: Path) -> dict[str, pl.DataFrame]:
    """Every table of the archive at ``root``: its committed files' rows, in commit order."""
    archive = Archive.open(root)
    names = sorted({file.table for commit in archive.commits for file in commit.files})
    return {name: pl.read_parquet(archive.paths(archive.files(name))) for name in names}


def assert_same_archive(root: Path, expected: Path) -> None:
    """The archive a local ingest made, table by table and row by row (run index, sources
    with their content hashes, quarantine, both accountings' tables, piece totals, streams),
    the same commits' run counts, each accounting's ledger equal, and no damage."""
    made, local = committed_tables(root), committed_tables(expected)
    assert made.keys() == local.keys()
    for name, frame in local.items():
        assert made[name].equals(frame), name  # nulls equal: check_exact below
        assert_frame_equal(made[name], frame, check_exact=True)
    counts = [(c.ingest_date, c.run_count) for c in Archive.open(root).commits]
    assert counts == [(c.ingest_date, c.run_count) for c in Archive.open(expected).commits]
    for mode in ACCOUNTING_MODES:
        ours = compute_ledger(ArchiveTables(Archive.open(root), mode))
        theirs = compute_ledger(ArchiveTables(Archive.open(expected), mode))
        assert_frame_equal(ours.frame, theirs.frame, check_exact=True)
        assert ours.runs_recorded == theirs.runs_recorded
    assert verify_archive(root) == []


def spark_ingested(spark, root: Path, labels: Path | None = None) -> list:
    """The corpus ingested as the ``archive`` fixture ingests it, read on Spark."""
    from contextledger.jobs.spark import ingest as spark_ingest

    files = sorted((require_corpus() / "runs").glob("*.json.gz"))
    labels = labels or root.parent / "labels.csv"
    common = {"partition_by": "runner_kind", "batch_runs": 80, "spark": spark}
    return [
        spark_ingest(files[:150], str(root), ingest_date=DAY_ONE, **common),
        spark_ingest(files[150:], str(root), ingest_date=DAY_TWO, outcomes=labels, **common),
    ]


def test_ingest_on_spark_makes_the_archive_a_local_ingest_makes(spark, archive, tmp_path):
    """Small waves (3 tasks of 2 files) so order across waves and tasks is exercised."""
    from contextledger.jobs.ingest import ingest as local_ingest
    from contextledger.jobs.spark.reader import spark_reader

    root = tmp_path / "on-spark"
    files = sorted((require_corpus() / "runs").glob("*.json.gz"))
    reader = spark_reader(spark, files_per_task=2, tasks_per_wave=3)
    common = {"partition_by": "runner_kind", "batch_runs": 80, "reader": reader}
    first = local_ingest(files[:150], root, ingest_date=DAY_ONE, **common)
    labels = archive.parent / "labels.csv"
    local_ingest(files[150:], root, ingest_date=DAY_TWO, outcomes=labels, **common)
    assert first.runs_added > 0 and first.commits > 1
    assert_same_archive(root, archive)
    again = local_ingest(files, root, ingest_date=DAY_TWO, **common)
    assert again.files_unchanged == len(files) and again.runs_added == 0


def test_a_spark_ingest_killed_before_a_commit_counts_nothing_of_that_batch(
    spark, archive, tmp_path, monkeypatch
):
    """The driver commits last: a batch whose commit never lands is not in the archive
    (its files are removed by the next ingest), and the rerun gives the local archive."""
    from contextledger.archive import store

    root = tmp_path / "on-spark"
    commit = store.Batch.commit
    calls = {"n": 0}

    class Killed(Exception):
        """Stands for the process dying between a batch's files and its commit."""

    def fail_second(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Killed
        return commit(self)

    monkeypatch.setattr(store.Batch, "commit", fail_second)
    with pytest.raises(Killed):
        spark_ingested(spark, root, archive.parent / "labels.csv")
    monkeypatch.setattr(store.Batch, "commit", commit)
    held = Archive.open(root)
    assert len(held.commits) == 1 and held.run_count == held.commits[0].run_count
    counted = pl.read_parquet(held.paths(held.files("run_index")))
    assert counted["run_order"].to_list() == list(range(held.run_count))
    assert verify_archive(root) == []
    ledger = compute_ledger(ArchiveTables(held, "corrected"))
    assert ledger.runs_recorded <= held.run_count
    spark_ingested(spark, root, archive.parent / "labels.csv")
    assert_same_archive(root, archive)


def test_cli_ingest_engine_spark_makes_the_local_archive(spark, tmp_path):
    runner = CliRunner()
    made = {}
    for engine in ("local", "spark"):
        root = tmp_path / engine
        args = ["ingest", str(SAMPLE), "--archive", str(root), "--ingest-date", DAY_ONE]
        result = runner.invoke(main, [*args, "--engine", engine, "--no-progress"])
        assert result.exit_code == 0, result.output
        made[engine] = root
        assert "14 added" in result.output
    assert_same_archive(made["spark"], made["local"])
    both_flags = ["ingest", str(SAMPLE), "--archive", str(tmp_path / "x"), "--workers", "2"]
    refused = runner.invoke(main, [*both_flags, "--engine", "spark"])
    assert refused.exit_code == EXIT_USAGE and "--workers" in refused.output


def test_an_archive_under_a_folder_whose_name_looks_like_a_glob_is_read_on_spark(spark, tmp_path):
    """Spark reads paths as Hadoop globs; ``[1]`` in a folder name matched no file."""
    import contextledger.jobs.spark as on_spark

    root = tmp_path / "runs [1] {a}" / "archive"
    ingest([SAMPLE], root, workers=1)
    tables = ArchiveTables(Archive.open(root), "corrected")
    assert_frame_equal(
        on_spark.ledger_rows(tables, spark=spark), compute_ledger(tables).rows(), check_exact=True
    )


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_stored_label_credit_gives_the_local_ledger_on_spark(spark, archive, mode):
    """Day two's commits are credited from their stored label credit; day one's, whose
    runs day two's labels name, from their first offers: on Spark as locally."""
    from contextledger.jobs.spark.views import register, view_files

    tables = ArchiveTables(Archive.open(archive), mode)
    split = tables.credit_split()
    assert split is not None and split[0] and split[1]  # stored, and credited from offers
    assert "credit_piece_outcomes" in view_files("totals", credit=True)
    session = register(tables, spark=spark)
    assert session.table("label_credit").count() > 0
    assert session.table("uncredited_offers").count() > 0
    both(spark, tables)


# ── OpenTelemetry traces: the same rows as the local engine ─────────
def _trace_files() -> list[Path]:
    from contextledger.read.otel import sniff

    folder = REPO / "data" / "otel"
    return sorted(p for p in folder.rglob("*") if p.is_file() and sniff(p) == "otlp-json")


@pytest.fixture(scope="module")
def trace_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded OpenTelemetry traces (data/otel), ingested locally."""
    root = tmp_path_factory.mktemp("otel") / "archive"
    ingest(_trace_files(), root, ingest_date=DAY_ONE, partition_by="runner_kind", workers=1)
    return root


@pytest.mark.parametrize("use_totals", [None, False], ids=["totals", "rows"])
@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_trace_ledger_on_spark_equals_the_local_ledger(spark, trace_archive, mode, use_totals):
    both(spark, ArchiveTables(Archive.open(trace_archive), mode), use_totals)


def test_trace_whatif_rows_on_spark_equal_the_local_rows(spark, trace_archive):
    from contextledger.jobs.spark.whatif import whatif_rows
    from contextledger.jobs.whatif import whatif_archive
    from contextledger.window.whatif import parse_policies

    local = whatif_archive(str(trace_archive), parse_policies(POLICIES))
    assert local is not None and local.per_run.height
    got = whatif_rows(str(trace_archive), POLICIES, [], spark)
    assert_frame_equal(got, local.per_run, check_exact=True)


def test_trace_ingest_on_spark_makes_the_archive_a_local_ingest_makes(
    spark, trace_archive, tmp_path, monkeypatch
):
    """A trace split over files read by different tasks is still one run; past the span
    budget (3 records here) the executors of a local master spill them as local workers
    do, and the archive is the one an ingest in memory makes."""
    from contextledger.jobs.ingest import ingest as local_ingest
    from contextledger.jobs.spark.reader import spark_reader
    from contextledger.read.otel import _spill

    monkeypatch.setattr(_spill, "SPANS_HELD", 3)  # told to the executors (SpillTo.budgeted)
    root = tmp_path / "on-spark"
    on_spark = spark_reader(spark, files_per_task=2, tasks_per_wave=3)
    spilled: list[bool] = []

    def reader(sources, sidecar, spill):
        for source, read in on_spark(sources, sidecar, spill):
            spilled.append(read.traces is not None and read.traces.spilled is not None)
            yield source, read

    local_ingest(
        _trace_files(), root, ingest_date=DAY_ONE, partition_by="runner_kind", reader=reader
    )
    assert any(spilled)
    assert_same_archive(root, trace_archive)
