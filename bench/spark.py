"""Spark against the local path, over one synthetic archive: the ledger and the what-if.

What is measured, each in a fresh process (so peak memory is its own, and each Spark
measurement starts its own JVM, as ``--engine spark`` does), repeated ``--reps`` times
interleaved, reported as the median (peak memory: the largest):

- ``ledger, totals``: the labelled ledger over the whole archive (``ledger DIR``): the
  stored piece totals added up, the archive's outcome labels credited;
- ``ledger, rows``: the same under ``DIR?label=bad``: the totals do not cover a label
  filter, so every offer and use row of the selected runs is read and grouped;
- ``what-if``: two policies replayed over ``DIR?run_id=@ids`` (``--whatif-runs`` runs,
  every n-th; 0: the whole archive), the per-run rows.

Local is ``compute_ledger`` (Polars) and ``jobs.whatif.whatif_archive``. Spark is
``jobs.spark`` on ``--master`` (default ``local[2]``). A Spark child times where its
time goes: the session start (JVM launch, SparkContext), registering the tables and
views (file listing, sqlglot, analysis: the planning), the query (optimizing, running,
Arrow to the driver); then the same once more in the same session (``warm``: what a
long-lived session pays). For the what-if it also times the plumbing alone: the runs
joined with their messages and standings and handed to the Python workers by
``mapInArrow`` with nothing replayed. Peak RSS: the Python driver's own
(``getrusage``); the JVM's is separate, read from ``/proc/PID/status`` (``VmHWM``, its
peak) of the gateway's java process, and its Python workers' likewise (summed over the
JVM's descendant processes alive at the end). At the end the answers are compared:
each Spark answer equals the local one exactly.

Run: ``.venv/bin/python bench/spark.py [--runs 100000] [--reps 3] [--whatif-runs 5000]``;
the archive is made once with ``contextledger synth --runs N --archive DIR`` (with
streams) under ``--work`` and kept.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLICIES = ("sliding:keep=6", "token_budget:threshold=2000")
CONTEXTLEDGER = str(Path(sys.executable).parent / "contextledger")
MEASURES = ("ledger, totals", "ledger, rows", "what-if")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sources(archive_dir: Path, ids_file: Path) -> dict[str, str]:
    """The source each measure reads."""
    return {
        "ledger, totals": str(archive_dir),
        "ledger, rows": f"{archive_dir}?label=bad",
        "what-if": f"{archive_dir}?run_id=@{ids_file}",
    }


# ── in a child ────────────────────────────────────────────────────
def answer_local(measure: str, source: str) -> Any:
    """The local answer: a ledger frame (insertion order) or the what-if's per-run rows."""
    from contextledger.archive.tables import archive_tables
    from contextledger.jobs.whatif import whatif_archive
    from contextledger.ledger.compute import compute_ledger
    from contextledger.window.whatif import parse_policies

    if measure == "what-if":
        replayed = whatif_archive(source, parse_policies(list(POLICIES)))
        assert replayed is not None and not replayed.problems
        return replayed.rows.collect()
    tables = archive_tables([source], "corrected")
    assert tables is not None
    return compute_ledger(tables).frame


def measure_local(measure: str, source: str) -> dict[str, Any]:
    started = time.perf_counter()
    height = answer_local(measure, source).height
    seconds = time.perf_counter() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "rows": height, "peak_rss_mb": max(peak_rss_mb(), children)}


def spark_session(master: str, confs: list[str]) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("contextledger-bench")
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for conf in confs:
        key, _, value = conf.partition("=")
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def answer_spark(measure: str, source: str, spark: Any) -> tuple[Any, dict[str, float]]:
    """Spark's answer, and the seconds of its steps (planning, query)."""
    from contextledger.jobs.spark.views import archive_of, register, to_polars
    from contextledger.jobs.spark.whatif import whatif_rows
    from contextledger.tables import schema
    from contextledger.window.whatif import parse_policies

    started = time.perf_counter()
    if measure == "what-if":
        tables = archive_of(source, None)
        planned = time.perf_counter()
        rows = whatif_rows(tables, parse_policies(list(POLICIES)), spark=spark)
        done = time.perf_counter()
        return rows, {"planning": planned - started, "query": done - planned}
    session = register(source, "corrected", spark)
    frame = session.table("ledger").orderBy("insertion_order").drop("insertion_order")
    planned = time.perf_counter()
    session.table("runs").where("metered").count()  # as spark_ledger counts them
    ledger = to_polars(frame, schema.LEDGER)
    done = time.perf_counter()
    return ledger, {"planning": planned - started, "query": done - planned}


def plumbing(source: str, spark: Any) -> float:
    """The what-if's Spark side alone: runs nested with their rows, sent to the Python
    workers by mapInArrow, nothing replayed (one small row back per batch)."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from contextledger.jobs.spark.views import archive_of
    from contextledger.jobs.spark.whatif import _runs

    def count(batches: Any) -> Any:
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"n": [batch.num_rows]})

    started = time.perf_counter()
    runs = _runs(spark, archive_of(source, None))
    result = runs.mapInArrow(count, StructType([StructField("n", LongType())])).collect()
    assert sum(row.n for row in result) > 0
    return time.perf_counter() - started


def jvm_memory_mb(spark: Any) -> tuple[float, float]:
    """Peak RSS (VmHWM) of the JVM, and summed over its descendants (Python workers)."""
    pid = spark.sparkContext._gateway.proc.pid
    found = _java(pid)
    workers = sum(_peak_kb(child) for child in _descendants(found)) / 1024
    return _peak_kb(found) / 1024, workers


def _java(pid: int) -> int:
    """The java process the gateway launched (spark-submit may be a shell in between)."""
    for candidate in [pid, *_descendants(pid)]:
        name = Path(f"/proc/{candidate}/comm").read_text().strip()
        if name == "java":
            return candidate
    return pid


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (a child is listed under the thread that started it)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        for child in map(int, text.split()):
            found += [child, *_descendants(child)]
    return found


def _peak_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure_spark(measure: str, source: str, master: str, confs: list[str]) -> dict[str, Any]:
    began = time.perf_counter()
    spark = spark_session(master, confs)
    session_seconds = time.perf_counter() - began
    cold_started = time.perf_counter()
    answer, steps = answer_spark(measure, source, spark)
    cold = time.perf_counter() - cold_started
    warm_started = time.perf_counter()
    _, warm_steps = answer_spark(measure, source, spark)
    warm = time.perf_counter() - warm_started
    result: dict[str, Any] = {
        "seconds": cold,
        "session": session_seconds,
        "planning": steps["planning"],
        "query": steps["query"],
        "warm": warm,
        "warm_planning": warm_steps["planning"],
        "rows": answer.height,
    }
    if measure == "what-if":
        result["plumbing"] = plumbing(source, spark)
    result["peak_rss_mb"] = peak_rss_mb()
    result["jvm_mb"], result["workers_mb"] = jvm_memory_mb(spark)
    spark.stop()
    return result


def check_same(archive_dir: Path, ids_file: Path, master: str, confs: list[str]) -> None:
    """Every answer timed above, Spark's equal to the local one exactly."""
    from polars.testing import assert_frame_equal

    spark = spark_session(master, confs)
    for measure, source in sources(archive_dir, ids_file).items():
        local = answer_local(measure, source)
        on_spark, _ = answer_spark(measure, source, spark)
        assert_frame_equal(on_spark, local, check_exact=True)
        print(f"checked: {measure}: Spark equals local exactly ({local.height:,} rows)")
    spark.stop()


# ── the parent ───────────────────────────────────────────────────
def in_child(*arguments: str) -> Any:
    command = [sys.executable, __file__, *arguments]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(arguments)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def build(archive_dir: Path, runs: int) -> None:
    if (archive_dir / "archive.json").is_file():
        from contextledger.archive import Archive

        if Archive.open(archive_dir).run_count == runs:
            return
    shutil.rmtree(archive_dir, ignore_errors=True)
    print(f"writing {runs:,} synthetic runs with their streams to {archive_dir} ...", flush=True)
    started = time.perf_counter()
    command = [CONTEXTLEDGER, "synth", "--runs", str(runs), "--archive", str(archive_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    print(f"  {time.perf_counter() - started:.0f} s")


def write_ids(archive_dir: Path, count: int) -> tuple[Path, int]:
    """Every n-th run id of the archive (``count`` of them; 0: all), one a line."""
    import polars as pl

    from contextledger.archive import Archive

    archive = Archive.open(archive_dir)
    ids = pl.read_parquet(archive.paths(archive.files("run_index")), columns=["run_id"])
    step = max(1, ids.height // count) if count else 1
    chosen = ids["run_id"].gather_every(step)[: count or None]
    path = archive_dir.parent / f"{archive_dir.name}-ids-{len(chosen)}.txt"
    path.write_text("".join(f"{run_id}\n" for run_id in chosen))
    return path, len(chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/cl-bench"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--whatif-runs", type=int, default=5000, help="0: every run")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE for Spark")
    parser.add_argument("--archive", type=Path, help="An existing archive (with streams).")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        if args.engine == "local":
            print(json.dumps(measure_local(args.one, args.source)))
        else:
            print(json.dumps(measure_spark(args.one, args.source, args.master, args.conf)))
        return
    archive_dir = args.archive or args.work / f"spark-synth-{args.runs}"
    if args.archive is None:
        build(archive_dir, args.runs)
    ids_file, chosen = write_ids(archive_dir, args.whatif_runs)
    named = sources(archive_dir, ids_file)
    spark_flags = ["--master", args.master, *(f"--conf={conf}" for conf in args.conf)]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    load_before = os.getloadavg()
    began = time.perf_counter()
    for _ in range(args.reps):
        for measure in MEASURES:
            for engine in ("local", "spark"):
                flags = ["--one", measure, "--engine", engine, "--source", named[measure]]
                result = in_child(*flags, *(spark_flags if engine == "spark" else []))
                results.setdefault((measure, engine), []).append(result)
    load_after = os.getloadavg()
    from contextledger.archive import Archive

    runs = Archive.open(archive_dir).run_count
    print(
        f"archive: {runs:,} synthetic runs ({archive_dir}); what-if over {chosen:,} of them, "
        f"policies {', '.join(POLICIES)}; Spark master {args.master}"
        + (f", {', '.join(args.conf)}" if args.conf else "")
    )
    print(
        f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} cores); "
        f"{time.perf_counter() - began:.0f} s measuring, medians of {args.reps}"
    )

    def median(measure: str, engine: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(measure, engine)])

    def largest(measure: str, engine: str, key: str) -> float:
        return max(r[key] for r in results[(measure, engine)])

    print(
        f"\n{'what':16} {'local s':>8} {'Spark s':>8} {'Spark/local':>12} {'+ session':>10} "
        f"{'warm s':>7} {'warm/local':>11} {'local RSS':>10} {'driver RSS':>11} "
        f"{'JVM RSS':>8} {'workers':>8}"
    )
    for measure in MEASURES:
        local = median(measure, "local", "seconds")
        spark = median(measure, "spark", "seconds")
        session = median(measure, "spark", "session")
        warm = median(measure, "spark", "warm")
        print(
            f"{measure:16} {local:8.2f} {spark:8.2f} {spark / local:12.2f} "
            f"{(spark + session) / local:10.2f} {warm:7.2f} {warm / local:11.2f} "
            f"{largest(measure, 'local', 'peak_rss_mb'):10,.0f} "
            f"{largest(measure, 'spark', 'peak_rss_mb'):11,.0f} "
            f"{largest(measure, 'spark', 'jvm_mb'):8,.0f} "
            f"{largest(measure, 'spark', 'workers_mb'):8,.0f}"
        )
    print("\nwhere Spark's time goes (medians, s):")
    session = statistics.median(
        r["session"] for k, v in results.items() if k[1] == "spark" for r in v
    )
    print(f"  session start (JVM, SparkContext): {session:.1f}")
    for measure in MEASURES:
        if measure == "what-if":  # whatif_rows plans and runs in one call
            plumbing = median(measure, "spark", "plumbing")
            print(
                f"  {measure}: plan and run {median(measure, 'spark', 'query'):.2f}; the "
                f"plumbing alone (runs nested with their rows, handed to the Python workers "
                f"by mapInArrow, nothing replayed; in the warm session) {plumbing:.2f}"
            )
            continue
        print(
            f"  {measure}: planning (tables, views) {median(measure, 'spark', 'planning'):.2f}, "
            f"query {median(measure, 'spark', 'query'):.2f}; warm planning "
            f"{median(measure, 'spark', 'warm_planning'):.2f}"
        )
    print(
        "RSS in MB, the largest of the reps: local and driver RSS are the Python process's "
        "peak (getrusage); the JVM's peak (VmHWM) and the Python workers' (summed) are "
        "separate processes, read from /proc"
    )
    check_same(archive_dir, ids_file, args.master, args.conf)  # after: children stay small


if __name__ == "__main__":
    main()
