"""The ledger's invariants hold over every source of tables (snapshots, an archive,
``synth``), and each fires, naming the piece and the runs, on a table broken on purpose."""

from __future__ import annotations

import dataclasses
import json
import shutil
import zlib

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from contextledger.archive import Archive, ArchiveTables
from contextledger.archive.windows import stream_batches
from contextledger.cli import main
from contextledger.jobs.ingest import ingest
from contextledger.jobs.synth import synth_archive, synth_snapshots
from contextledger.ledger.compute import ledger_inputs
from contextledger.ledger.invariants import INVARIANTS, check_invariants
from contextledger.tables.build import ACCOUNTING_MODES, RunTables, read_runs
from contextledger.window.audit_arrays import wire_check
from contextledger.window.whatif import parse_policies

from .conftest import SAMPLE

ANSWER_SLICE = "answer-slice(slot)"


def assert_holds(tables: RunTables) -> None:
    report = check_invariants(tables)
    assert report.holds, report.violations.to_dicts()
    assert report.runs == tables.runs.num_rows > 0


@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample") / "archive"
    ingest([str(SAMPLE)], root, workers=1)
    return root


@pytest.fixture(scope="module")
def synthetic_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth") / "archive"
    synth_archive(root, 3000, seed=4, batch_runs=2000, workers=1)
    return root


# ── they hold ──────────────────────────────────────────────────────
@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_invariants_hold_on_the_corpus(corpus, mode):
    tables = read_runs(corpus / "runs", mode=mode)
    assert_holds(tables)
    # ... though the model called tools it was never given (s0254, s0255): a tool call
    # is what the model did, so use-implies-offer leaves tool calls out
    offered = pl.DataFrame(tables.offers).select("run_id", "kind", "piece_id").unique()
    uses = pl.DataFrame(tables.uses).join(offered, on=["run_id", "kind", "piece_id"], how="anti")
    assert set(uses["signal"]) == {"tool-called"}
    assert {"s0254-edge-unknown-tool", "s0255-edge-unknown-tool-parallel"} <= set(uses["run_id"])


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_invariants_hold_on_an_archive_of_the_corpus(corpus, tmp_path_factory, mode):
    root = tmp_path_factory.getbasetemp() / "corpus-archive"
    if not Archive.is_archive(root):
        ingest([str(corpus / "runs")], root, workers=2, batch_runs=120)
    assert_holds(ArchiveTables(Archive.open(root), mode))


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_invariants_hold_on_the_sample(mode):
    outcomes = pl.read_csv(SAMPLE.parent / "sample-outcomes.csv").to_arrow()
    assert_holds(read_runs(SAMPLE, mode=mode).with_outcomes(outcomes))


@pytest.mark.parametrize("mode", ACCOUNTING_MODES)
def test_the_invariants_hold_on_a_synthetic_archive(synthetic_archive, mode):
    # synth once credited the answer slice to injections the run never offered (their
    # start call came after the run ended): offered 0, used 34 on one piece
    tables = ArchiveTables(Archive.open(synthetic_archive), mode)
    assert_holds(tables)
    assert tables.outcomes.num_rows > 3000  # the labels were checked too
    assert pl.DataFrame(tables.uses)["signal"].value_counts().height == (
        3 if mode == "corrected" else 2
    )


def test_the_invariants_hold_on_synthetic_snapshots(tmp_path):
    synth_snapshots(tmp_path, 40, SAMPLE, seed=2)
    for mode in ACCOUNTING_MODES:
        assert_holds(read_runs(tmp_path, mode=mode))


def test_synthetic_streams_replayed_under_none_are_valid_on_the_wire(synthetic_archive):
    # synth once left 3% of tool calls unanswered: every window after one carried an
    # unanswered call (20,832 problems over 10,000 runs); no recorded run has one
    policies = parse_policies(["none"])
    checked = pl.concat(
        wire_check(streams, policies, standings)
        for streams, standings in stream_batches(Archive.open(synthetic_archive))
    )
    assert checked.height == 3000
    assert checked["wire_violations"].sum() == 0


# ── each fires on a table broken on purpose ────────────────────────
def corrected_sample() -> RunTables:
    return read_runs(SAMPLE, mode="corrected")


def only(report, invariant: str) -> dict:
    assert not report.holds
    assert set(report.violations["invariant"]) == {invariant}
    (row,) = report.violations.to_dicts()
    return row


def test_a_run_id_named_twice_is_reported():
    tables = corrected_sample()
    twice = tables.runs.slice(2, 1)
    broken = dataclasses.replace(tables, runs=pa.concat_tables([tables.runs, twice]))
    found = check_invariants(broken).violations
    # (its uses, joined to both rows, are counted twice: other invariants may fire too)
    row = found.filter(pl.col("invariant") == "run-id-unique").row(0, named=True)
    assert row["runs"] == twice["run_id"].to_pylist() and row["run_count"] == 1
    assert row["piece_id"] is None and "1 run id(s)" in row["detail"]


def test_a_credit_without_an_offer_is_reported():
    tables = corrected_sample()
    uses = pl.DataFrame(tables.uses)
    credit = uses.filter(pl.col("signal") == ANSWER_SLICE).row(0, named=True)
    offers = pl.DataFrame(tables.offers)
    lost = (pl.col("run_id") == credit["run_id"]) & (pl.col("piece_id") == credit["piece_id"])
    broken = dataclasses.replace(tables, offers=offers.filter(~lost).to_arrow())
    found = check_invariants(broken).violations
    row = found.filter(pl.col("invariant") == "use-implies-offer").row(0, named=True)
    assert (row["kind"], row["piece_id"]) == (credit["kind"], credit["piece_id"])
    assert row["runs"] == [credit["run_id"]] and row["run_count"] == 1


def test_runs_seen_beyond_the_metered_runs_is_reported(sample_archive):
    # an archive whose runs rows were lost: its stored offers still count the runs
    inputs = ledger_inputs(ArchiveTables(Archive.open(sample_archive), "corrected"))
    kept = "s0001-fact-bench"
    damaged = dataclasses.replace(inputs, runs=inputs.runs.filter(pl.col("run_id") == kept))
    report = check_invariants(damaged, "corrected")
    found = report.violations.filter(pl.col("invariant") == "runs-seen-within-runs")
    assert found.height > 0 and report.runs == 1
    for row in found.iter_rows(named=True):
        assert row["detail"].endswith("> 1 metered run(s)")
        assert row["run_count"] >= 1 and kept not in row["runs"]


def test_a_label_credited_beyond_runs_seen_is_reported(sample_archive):
    # A repeated label row no longer breaks this (a (run, label) pair counts once), so
    # break the archive instead: stored piece totals that count one run fewer than
    # the first offers the labels are credited from (a totals file out of step).
    outcomes = pa.table({"run_id": ["s0003-loop"], "label": ["bad"]})
    tables = ArchiveTables(Archive.open(sample_archive), "corrected").with_outcomes(outcomes)
    inputs = ledger_inputs(tables)
    assert inputs.totals is not None
    piece = (pl.col("kind") == "tool") & (pl.col("piece_id") == "geo_locate")
    fewer = inputs.totals.with_columns(
        runs_seen=pl.when(piece).then(0).otherwise(pl.col("runs_seen"))
    )
    broken = check_invariants(dataclasses.replace(inputs, totals=fewer), "corrected")
    assert set(broken.violations["invariant"]) == {"label-within-runs-seen", "totals-equal-rows"}
    row = broken.violations.filter(pl.col("invariant") == "label-within-runs-seen").row(
        0, named=True
    )
    assert row["runs"] == ["s0003-loop"] and row["detail"] == "label bad: 1 run(s) > runs_seen 0"


def test_stored_totals_out_of_step_with_the_rows_are_reported(sample_archive, tmp_path):
    """A totals file rewritten (or bit-flipped at the same size) gives the fast path a
    ledger the rows do not: named per piece with both counts, through the command too."""
    inputs = ledger_inputs(ArchiveTables(Archive.open(sample_archive), "corrected"))
    assert inputs.totals is not None
    probe = (pl.col("kind") == "tool") & (pl.col("piece_id") == "probe_fact")
    more = inputs.totals.with_columns(offered=pl.when(probe).then(29).otherwise("offered"))
    row = only(
        check_invariants(dataclasses.replace(inputs, totals=more), "corrected"), "totals-equal-rows"
    )
    assert (row["kind"], row["piece_id"]) == ("tool", "probe_fact")
    assert row["detail"] == "offered: stored 29, rows 21" and row["run_count"] == 0

    root = tmp_path / "archive"
    shutil.copytree(sample_archive, root)
    [path] = (root / "piece_totals" / "accounting=corrected").rglob("*.parquet")
    stored = pl.read_parquet(path)
    stored.with_columns(offered=pl.when(probe).then(29).otherwise("offered")).write_parquet(path)
    for commit_file in (root / "_manifest" / "commits").glob("*.json"):  # same size on record
        commit = json.loads(commit_file.read_text())
        for entry in commit["files"]:
            if (root / entry["path"]) == path:
                entry["bytes"] = path.stat().st_size
                commit["crc32"][entry["path"]] = zlib.crc32(path.read_bytes())
        commit_file.write_text(json.dumps(commit))
    result = CliRunner().invoke(main, ["check", str(root), "--mode", "corrected"])
    assert result.exit_code == 1
    assert "totals-equal-rows" in result.stdout and "offered: stored 29, rows 21" in result.stdout


def test_answer_slice_credits_beyond_the_offering_runs_are_reported():
    tables = corrected_sample()
    uses = pl.DataFrame(tables.uses)
    credit = uses.filter(pl.col("signal") == ANSWER_SLICE).row(0, named=True)
    piece = (pl.col("kind") == credit["kind"]) & (pl.col("piece_id") == credit["piece_id"])
    runs_seen = pl.DataFrame(tables.offers).filter(piece)["run_id"].n_unique()
    credited = uses.filter(piece & (pl.col("signal") == ANSWER_SLICE)).height
    extra = runs_seen - credited + 1  # credited again in one run, enough to exceed
    again = pl.DataFrame([credit] * extra, schema=uses.schema)
    broken = dataclasses.replace(tables, uses=pl.concat([uses, again]).to_arrow())
    row = only(check_invariants(broken), "answer-slice-within-offering-runs")
    assert row["piece_id"] == credit["piece_id"] and row["runs"] == [credit["run_id"]]
    assert row["detail"] == f"used_answer_slice {runs_seen + 1} > runs_seen {runs_seen}"


# ── the command ────────────────────────────────────────────────────
def test_check_says_all_invariants_hold(sample_archive):
    runner = CliRunner()
    for path in (str(SAMPLE), f"{sample_archive}?since=2000-01-01"):
        result = runner.invoke(main, ["check", path])
        assert result.exit_code == 0, result.output
        assert result.output == (
            f"all {len(INVARIANTS)} invariants hold over 14 runs "
            "(corrected and reference accounting)\n"
        )
    result = runner.invoke(main, ["check", str(SAMPLE), "--mode", "reference"])
    assert result.output.endswith("(reference accounting)\n") and result.exit_code == 0


def test_check_holds_over_a_repeated_label_row(tmp_path):
    """A label file that repeats a row credits its run once (read/identity), so it holds."""
    path = tmp_path / "labels.csv"
    path.write_text("run_id,label\ns0003-loop,bad\ns0003-loop,bad\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(SAMPLE), "--outcomes", str(path)])
    assert result.exit_code == 0 and result.stdout.startswith("all ")


def test_check_prints_each_violation_and_exits_1(monkeypatch):
    # No reader gives a run twice any more; feed the command tables that do.
    from contextledger.tables import build

    reader = build.read_accountings

    def read_twice(*args, **kwargs):
        found = reader(*args, **kwargs)
        return {
            mode: dataclasses.replace(tables, runs=pa.concat_tables([tables.runs, tables.runs]))
            for mode, tables in found.items()
        }

    monkeypatch.setattr(build, "read_accountings", read_twice)  # the command looks it up there
    result = CliRunner().invoke(main, ["check", str(SAMPLE)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert sum("run-id-unique" in line and "s0001-fact-bench" in line for line in lines) == 2
    assert lines[-1].endswith(
        "invariants violated over 28 runs (corrected and reference accounting)"
    )


def test_check_names_an_unreadable_input_once_and_exits_1(tmp_path):
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(SAMPLE / "s0003-loop.json.gz"), str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.count("bad.json") == 1
    assert result.stdout.startswith("all ")
