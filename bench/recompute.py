"""Recompute from an archive: the ledger against a bare group-by floor, and ingest speed.

What is measured, each in a fresh process (so peak memory is its own: Linux carries
a parent's peak RSS into the child it forks, so the parent stays small until the
timings are done), repeated ``--reps`` times interleaved, reported as the median:

- ``floor``: ``pl.scan_parquet(offers files).group_by("kind", "piece_id").len()``,
  streaming, over the offer files the ledger reads (corrected accounting).
- ``floor+uses``: the same group-by over the use files too (the ledger reads both).
- ``ledger (Polars)``: ``compute_ledger`` over the archive: every column of the
  ledger, the archive's outcome labels credited, insertion order, streaming. Counts
  come from the piece totals ingest stores per commit, the outcome credit from the
  (piece, label) credit it stores per commit for the labels it knew.
- ``ledger, labels from offers``: the ledger as it was before label credit was stored
  (and as it is for commits whose runs later labels name): the counts from the piece
  totals, the labels credited from every first offer.
- ``ledger, no labels``: the same without outcome labels (no credit to compute).
- ``ledger from rows``: the ledger as it is computed when the totals do not cover the
  selection (a run-id or label filter, an archive written before totals): every
  offer and use row read and grouped.
- ``3 run ids``, ``3 run ids, every commit``: the ledger of three runs (the archive's
  last three) by a ``run_id`` filter: reading the commit that holds them, as now, and
  every commit's files filtered row by row, as before.
- ``label=good``: the ledger of the runs carrying the label ``good`` (55% of the
  synthetic runs), a run-level filter: from the selected runs' stored run totals
  (``label=good (DuckDB)`` likewise), and ``label=good, from rows`` as it was computed
  before run totals were stored (every offer and use row read, the selected runs kept).
- ``100k run ids``: the ledger of every tenth run (a ``run_id=@FILE`` of 100,000 ids),
  from run totals, in Polars and DuckDB.
- ``ledger (DuckDB)``, ``DuckDB, labels from offers``, ``DuckDB, no labels``,
  ``DuckDB from rows``: the ``ledger_rows``
  view over ``read_parquet`` of the same files, likewise.
- ``ingest``: ``contextledger ingest`` of snapshot files (``synth --snapshots``,
  copies of the corpus) into a new archive, both cores: runs/s and MB/s.

Run: ``.venv/bin/python bench/recompute.py [--runs 1000000] [--work /tmp/cl-bench]``;
the archive is made once with ``contextledger synth`` (about 2 minutes for 1M runs)
and kept for later runs. ``--baseline DIR`` (a ``src`` folder of another version) takes
each measurement with that code too, next to this checkout's: before and after, with
their ratios to one floor, in one run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl

from contextledger.archive import Archive, ArchiveTables, Selection
from contextledger.tables import schema

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "agentfootprint-9.62" / "runs"
CONTEXTLEDGER = str(Path(sys.executable).parent / "contextledger")


def measure_once(name: str, archive_dir: str, mode: str) -> dict[str, float]:
    """Run measurement ``name`` in this process; its wall time and this process's peak RSS."""
    import polars as pl

    from contextledger.ledger.compute import compute_ledger, ledger_inputs
    from contextledger.ledger.duckdb_views import ledger_rows_sql

    archive = Archive.open(archive_dir)
    # every part's CRC-32 checked before the clock, as an ingested archive remembers it
    archive.verify_content([file for commit in archive.commits for file in commit.files])
    tables = ArchiveTables(archive, mode)
    offers, uses = tables.files("offers"), tables.files("uses")
    tables.outcome_scan()  # the modules a scan of the archive imports, imported
    if name.startswith("3 run ids"):
        three_runs(archive_dir)  # warm the file cache as the others are
    tenth = every_tenth_run(archive_dir) if name.startswith("100k run ids") else ()
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    if name == "floor":
        rows = pl.scan_parquet(offers).group_by("kind", "piece_id").len()
        height = rows.collect(engine="streaming").height
    elif name == "floor+uses":
        frames = [pl.scan_parquet(f).group_by("kind", "piece_id").len() for f in (offers, uses)]
        height = sum(frame.height for frame in pl.collect_all(frames, engine="streaming"))
    elif name == "ledger (Polars)":
        height = compute_ledger(tables).frame.height
    elif name == "ledger, labels from offers":
        height = compute_ledger(replace(ledger_inputs(tables), credit=None)).frame.height
    elif name == "ledger, no labels":
        no_labels = pl.LazyFrame(schema={"run_id": pl.String, "label": pl.String})
        unlabelled = replace(ledger_inputs(tables), outcomes=no_labels, credit=None)
        height = compute_ledger(unlabelled).frame.height
    elif name == "ledger from rows":
        inputs = replace(ledger_inputs(tables), totals=None, credit=None)
        height = compute_ledger(inputs).frame.height
    elif name in ("3 run ids", "3 run ids, every commit"):
        kind = ArchiveTables if name == "3 run ids" else EveryCommit
        chosen = kind(Archive.open(archive_dir), mode, Selection(run_ids=three_runs(archive_dir)))
        height = compute_ledger(chosen).frame.height
    elif name.startswith("label=good"):  # the selection made on the clock
        good = Selection(labels=("good",))
        chosen = ArchiveTables(archive, mode, good)
        if name == "label=good (DuckDB)":
            height = ledger_rows_sql(chosen).height
        elif name == "label=good, from rows (DuckDB)":
            height = ledger_rows_sql(WithoutRunTotals(archive, mode, good)).height
        elif name == "label=good, from rows":
            height = compute_ledger(replace(ledger_inputs(chosen), run_totals=None)).frame.height
        else:
            height = compute_ledger(chosen).frame.height
    elif name.startswith("100k run ids"):
        chosen = ArchiveTables(archive, mode, Selection(run_ids=tenth))
        if name == "100k run ids (DuckDB)":
            height = ledger_rows_sql(chosen).height
        else:
            height = compute_ledger(chosen).frame.height
    elif name == "ledger (DuckDB)":
        height = ledger_rows_sql(tables).height
    elif name == "DuckDB, labels from offers":
        height = ledger_rows_sql(FromOffers(Archive.open(archive_dir), mode)).height
    elif name == "DuckDB, no labels":
        height = ledger_rows_sql(Unlabelled(Archive.open(archive_dir), mode)).height
    elif name == "DuckDB from rows":
        height = ledger_rows_sql(FromRows(Archive.open(archive_dir), mode)).height
    else:
        raise SystemExit(f"unknown measurement {name}")
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": peak, "rows": height}


def _cpu_seconds() -> float:
    """This process's CPU time, every thread's (user and system): under a load of 10 on
    two cores, wall time follows the other jobs; CPU time, much less."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Unlabelled(ArchiveTables):
    """An archive's tables without its outcome labels (for the DuckDB views)."""

    def outcome_scan(self, selected: bool = False) -> pl.LazyFrame:
        return pl.DataFrame(schema.empty(schema.OUTCOMES)).lazy()

    def credit_files(self) -> tuple[list[str], list[str], list[str]] | None:
        return None


def three_runs(archive_dir: str) -> tuple[str, ...]:
    """The archive's last three run ids (read before the clock starts): one commit's."""
    import polars as pl

    archive = Archive.open(archive_dir)
    index = pl.read_parquet(archive.paths(archive.files("run_index")), columns=["run_id"])
    return tuple(index["run_id"].tail(3).to_list())


def every_tenth_run(archive_dir: str) -> tuple[str, ...]:
    """Every tenth run id of the archive (read before the clock starts, as a file of
    ids would be): 100,000 at 1M runs, in every commit."""
    import polars as pl

    archive = Archive.open(archive_dir)
    index = pl.read_parquet(archive.paths(archive.files("run_index")), columns=["run_id"])
    return tuple(index["run_id"].gather_every(10).to_list())


class WithoutRunTotals(ArchiveTables):
    """An archive's tables read as if it stored no run totals (for the DuckDB views)."""

    def run_totals_files(self) -> list[str] | None:
        return None


class EveryCommit(ArchiveTables):
    """An archive's tables read as before a run-id filter pruned commits."""

    def _holding_commits(self) -> list:  # type: ignore[type-arg]
        return self.commits


class FromOffers(ArchiveTables):
    """An archive's tables read as if it stored no label credit (for the DuckDB views)."""

    def credit_files(self) -> tuple[list[str], list[str], list[str]] | None:
        return None


class FromRows(ArchiveTables):
    """An archive's tables read as if it stored no piece totals (for the DuckDB views)."""

    def totals_files(self) -> list[str] | None:
        return None

    def credit_files(self) -> tuple[list[str], list[str], list[str]] | None:
        return None


#: Appended to a measurement's name when it is taken with the ``--baseline`` code.
BASELINE = " @baseline"


def in_child(
    name: str, archive_dir: Path, mode: str, baseline: Path | None = None
) -> dict[str, float]:
    """Measurement ``name`` in a fresh process: with the code of ``baseline`` (a ``src``
    folder) when the name ends in :data:`BASELINE`, else this checkout's."""
    env = None
    if name.endswith(BASELINE):
        assert baseline is not None
        name = name.removesuffix(BASELINE)
        env = {**os.environ, "PYTHONPATH": str(baseline)}
    command = [sys.executable, __file__, "--one", name, "--archive", str(archive_dir)]
    output = subprocess.run(
        [*command, "--mode", mode], capture_output=True, text=True, check=True, env=env
    ).stdout
    return json.loads(output.splitlines()[-1])


def archive_size(archive_dir: Path, mode: str) -> tuple[int, int, int, float]:
    import polars as pl

    tables = ArchiveTables(Archive.open(archive_dir), mode)
    counts = []
    for table in ("runs", "offers", "uses"):
        counts.append(pl.scan_parquet(tables.files(table)).select(pl.len()).collect().item())
    megabytes = sum(Path(p).stat().st_size for t in ("offers", "uses") for p in tables.files(t))
    return counts[0], counts[1], counts[2], megabytes / 1e6


def bench_recompute(
    archive_dir: Path,
    mode: str,
    reps: int,
    only: list[str] | None = None,
    baseline: Path | None = None,
) -> None:
    runs, offers, uses, megabytes = archive_size(archive_dir, mode)
    print(
        f"archive: {runs:,} runs, {offers:,} offer rows, {uses:,} use rows "
        f"({mode}; {megabytes:,.0f} MB of offer and use Parquet)"
    )
    names = [
        "floor",
        "floor+uses",
        "ledger (Polars)",
        "ledger, labels from offers",
        "ledger, no labels",
        "ledger from rows",
        "3 run ids",
        "3 run ids, every commit",
        "label=good",
        "label=good, from rows",
        "100k run ids",
        "label=good (DuckDB)",
        "label=good, from rows (DuckDB)",
        "100k run ids (DuckDB)",
        "ledger (DuckDB)",
        "DuckDB, labels from offers",
        "DuckDB, no labels",
        "DuckDB from rows",
    ]
    if only:  # the floors always, then the measurements asked for, in the usual order
        names = [name for name in names if name in ("floor", "floor+uses", *only)]
    if baseline is not None:  # each measurement but the floors with the other code next
        names = [
            taken
            for name in names
            for taken in ([name] if name.startswith("floor") else [name, name + BASELINE])
        ]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    load_before = os.getloadavg()
    for _ in range(reps):
        for name in names:
            results[name].append(in_child(name, archive_dir, mode, baseline))
    load_after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} cores)"
    )
    print(
        f"\n{'what':22} {'median s':>9} {'runs/s':>12} {'x floor':>8} {'peak RSS MB':>12} "
        f"{'CPU s':>6} {'CPU x floor':>12}"
    )
    floor = statistics.median(r["seconds"] for r in results["floor"])
    floor_cpu = statistics.median(r["cpu_seconds"] for r in results["floor"])
    for name in names:
        seconds = statistics.median(r["seconds"] for r in results[name])
        cpu = statistics.median(r["cpu_seconds"] for r in results[name])
        peak = max(r["peak_rss_mb"] for r in results[name])
        print(
            f"{name:22} {seconds:9.2f} {runs / seconds:12,.0f} {seconds / floor:8.2f} "
            f"{peak:12,.0f} {cpu:6.2f} {cpu / floor_cpu:12.2f}"
        )
    both = statistics.median(r["seconds"] for r in results["floor+uses"])

    def have(*wanted: str) -> bool:
        return all(name in results for name in wanted)

    for name in names[2:]:
        seconds = statistics.median(r["seconds"] for r in results[name])
        cpu = statistics.median(r["cpu_seconds"] for r in results[name])
        print(
            f"{name}: {seconds / floor:.2f}x the offers floor ({cpu / floor_cpu:.2f}x its CPU), "
            f"{seconds / both:.2f}x the offers+uses floor"
        )
    for engine, before in (
        ("label=good", "label=good, from rows"),
        ("label=good (DuckDB)", "label=good, from rows (DuckDB)"),
    ):
        if not have(engine, before):
            continue
        after_s = statistics.median(r["seconds"] for r in results[engine])
        before_s = statistics.median(r["seconds"] for r in results[before])
        peak = max(r["peak_rss_mb"] for r in results[engine])
        print(
            f"{engine}: {before_s / floor:.2f}x the floor from every row -> "
            f"{after_s / floor:.2f}x from the run totals, peak {peak:,.0f} MB "
            f"(target: within 2x the floor and 1,000 MB)"
        )
    for engine, before in (
        ("ledger (Polars)", "ledger, labels from offers"),
        ("ledger (DuckDB)", "DuckDB, labels from offers"),
    ):
        if not have(engine, before):
            continue
        after_s = statistics.median(r["seconds"] for r in results[engine])
        before_s = statistics.median(r["seconds"] for r in results[before])
        print(
            f"{engine}, labelled: {before_s / floor:.2f}x the floor crediting every first offer "
            f"-> {after_s / floor:.2f}x from the stored label credit "
            f"({before_s / after_s:.1f}x faster; target: within 0.5x the floor)"
        )


def check_same(archive_dir: Path, mode: str) -> None:
    """The ledgers timed above are one ledger: stored credit, credit from the first
    offers, rows and DuckDB (both ways) agree row for row."""
    from polars.testing import assert_frame_equal

    from contextledger.ledger.compute import compute_ledger, ledger_inputs
    from contextledger.ledger.duckdb_views import ledger_rows_sql

    tables = ArchiveTables(Archive.open(archive_dir), mode)
    inputs = ledger_inputs(tables)
    assert inputs.credit is not None, "the archive stores no label credit (synth it again)"
    from_totals = compute_ledger(tables)
    from_offers = compute_ledger(replace(inputs, credit=None))
    from_rows = compute_ledger(replace(inputs, totals=None, credit=None))
    assert_frame_equal(from_totals.frame, from_offers.frame, check_exact=True)
    assert_frame_equal(from_totals.frame, from_rows.frame, check_exact=True)
    assert_frame_equal(ledger_rows_sql(tables), from_totals.rows(), check_exact=True)
    offers = FromOffers(Archive.open(archive_dir), mode)
    assert_frame_equal(ledger_rows_sql(offers), from_totals.rows(), check_exact=True)
    for selection in (Selection(labels=("good",)), Selection(run_ids=every_tenth_run(archive_dir))):
        chosen = ArchiveTables(Archive.open(archive_dir), mode, selection)
        chosen_inputs = ledger_inputs(chosen)
        assert chosen_inputs.run_totals is not None, "the archive stores no run totals"
        from_run_totals = compute_ledger(chosen_inputs)
        rows = compute_ledger(replace(chosen_inputs, run_totals=None))
        assert_frame_equal(from_run_totals.frame, rows.frame, check_exact=True)
        assert from_run_totals.runs_recorded == rows.runs_recorded
        assert_frame_equal(ledger_rows_sql(chosen), rows.rows(), check_exact=True)
        without = WithoutRunTotals(Archive.open(archive_dir), mode, selection)
        assert_frame_equal(ledger_rows_sql(without), rows.rows(), check_exact=True)
    print(
        "checked: under label=good and 100k run ids, the ledger from run totals equals the "
        "ledger from rows, in Polars and DuckDB"
    )
    print(
        f"checked: the ledger from stored credit equals the ledger crediting the first "
        f"offers, the ledger from rows and the DuckDB view both ways "
        f"({from_totals.frame.height:,} rows, {from_totals.runs_recorded:,} runs recorded)"
    )


def bench_ingest(work: Path, corpus: Path, files: int) -> None:
    snapshots = work / "snapshots"
    if len(list(snapshots.glob("*.json.gz"))) != files:
        shutil.rmtree(snapshots, ignore_errors=True)
        command = [CONTEXTLEDGER, "synth", "--runs", str(files), "--snapshots", str(snapshots)]
        subprocess.run(
            [*command, "--templates", str(corpus), "--seed", "3"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    paths = sorted(snapshots.glob("*.json.gz"))
    stored = sum(p.stat().st_size for p in paths) / 1e6
    json_megabytes = sum(len(gzip.decompress(p.read_bytes())) for p in paths) / 1e6
    target = work / "ingest-archive"
    shutil.rmtree(target, ignore_errors=True)
    # Timed in a child that reports its own peak memory and its reading workers'.
    timer = (
        "import resource, subprocess, sys, time\n"
        "started = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "usage = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(time.perf_counter() - started, usage)\n"
    )
    command = [CONTEXTLEDGER, "ingest", str(snapshots), "--archive", str(target), "--no-progress"]
    timed = subprocess.run(
        [sys.executable, "-c", timer, *command], capture_output=True, text=True, check=True
    )
    seconds, peak = map(float, timed.stdout.split())
    print(
        f"\ningest: {files:,} snapshot files ({stored:,.0f} MB gzip, {json_megabytes:,.0f} MB "
        f"JSON) in {seconds:.1f} s, end to end, both accountings: {files / seconds:,.0f} runs/s, "
        f"{json_megabytes / seconds:,.1f} MB/s of JSON ({stored / seconds:,.1f} MB/s of files); "
        f"largest process (the command or a reading worker) {peak:,.0f} MB"
    )
    started = time.perf_counter()
    subprocess.run(
        [CONTEXTLEDGER, "ingest", str(snapshots), "--archive", str(target), "--no-progress"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"ingest again (nothing new): {time.perf_counter() - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/cl-bench"))
    parser.add_argument("--mode", default="corrected")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ingest-files", type=int, default=3000)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument(
        "--only",
        help="Comma-separated measurements to take (besides the floors); skips the checks. "
        "A name's own comma is followed by a space ('label=good, from rows').",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="A src folder of another version (git archive main src | tar -x -C DIR): each "
        "measurement is also taken with its code, interleaved, named NAME @baseline.",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help="An existing archive to read.")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_once(args.one, str(args.archive), args.mode)))
        return
    archive_dir = args.archive or args.work / f"synth-{args.runs}"
    if not (archive_dir / "archive.json").is_file():
        print(f"writing {args.runs:,} synthetic runs to {archive_dir} ...", flush=True)
        started = time.perf_counter()
        synth = [CONTEXTLEDGER, "synth", "--runs", str(args.runs)]
        subprocess.run(
            [*synth, "--archive", str(archive_dir), "--no-streams"],  # the ledger reads none
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"  {time.perf_counter() - started:.0f} s")
    # names hold commas followed by a space ("label=good, from rows"): split on the others
    only = re.split(r",(?! )", args.only) if args.only else None
    bench_recompute(archive_dir, args.mode, args.reps, only, args.baseline)
    if only is None:
        check_same(archive_dir, args.mode)  # after: a child would inherit this peak RSS
    if not args.skip_ingest:
        bench_ingest(args.work, args.corpus, args.ingest_files)


if __name__ == "__main__":
    main()
