"""What-if over an archive: runs/s replaying the stored message streams, against the same
streams replayed from memory.

What is measured, each in a fresh process (so peak memory is its own), repeated
``--reps`` times interleaved, reported as the median (peak memory: the largest):

- ``archive``: :func:`contextledger.jobs.whatif.whatif_archive` over the archive, what
  ``contextledger whatif DIR --policy ...`` runs: one commit's window tables read at a
  time, 2,000 runs at a time laid out for the vectorized kernel straight from their
  columns (streams rebuilt only for the runs replayed exactly) and replayed, each
  batch's rows written to a Parquet file, then the per-policy table (the
  command's default output) computed from those files;
- ``in memory``: the same runs' streams and standings, read from the archive first (not
  timed, a batch of 2,000 at a time, as ``archive`` reads them) and replayed by
  :func:`~contextledger.window.whatif.whatif_table` batch by batch (timed): the replay
  alone, so ``archive / in memory`` is what reading from the archive costs.

Policies: each of ``POLICIES`` alone (``none``, a sliding window, a token budget, a
window with both pins armed), then all of them in one call (as one ``whatif`` with four
``--policy``). The archive (``--runs`` synthetic runs, default 100,000, with their message
streams) is written once with ``contextledger synth`` under ``--work`` and kept; the time
it took and its size are printed. The machine's load average is printed before and after.

Run: ``.venv/bin/python bench/whatif_archive.py [--runs 100000] [--reps 3] [--together-only]``.
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

POLICIES = (
    "none",
    "sliding:keep=6",
    "token_budget:threshold=2000",
    "sliding:keep=3,last_tool_results=2,ledger_facts=4",
)
LABELS = {
    "none": "none",
    "sliding:keep=6": "sliding",
    "token_budget:threshold=2000": "budget",
    "sliding:keep=3,last_tool_results=2,ledger_facts=4": "pins",
}
CONTEXTLEDGER = str(Path(sys.executable).parent / "contextledger")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_archive(archive_dir: str, policies: list[str]) -> dict[str, Any]:
    """``whatif`` over the archive, in this process."""
    import polars as pl

    from contextledger.jobs.whatif import whatif_archive
    from contextledger.window.whatif import parse_policies, per_policy

    parsed = parse_policies(policies)
    started = time.perf_counter()
    replayed = whatif_archive(archive_dir, parsed)
    assert replayed is not None and not replayed.problems
    per_policy(replayed.rows)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "runs": replayed.runs,
        "rows": replayed.rows.select(pl.len()).collect().item(),
        "peak_rss_mb": peak_rss_mb(),
    }


def measure_memory(archive_dir: str, sets: list[list[str]]) -> list[dict[str, Any]]:
    """The same streams replayed from memory under each policy set: the replay alone."""
    from contextledger.archive import Archive
    from contextledger.archive.windows import stream_batches
    from contextledger.window.whatif import parse_policies, whatif_table

    parsed = [parse_policies(policies) for policies in sets]
    seconds = [0.0] * len(sets)
    rows = [0] * len(sets)
    runs = 0
    read = 0.0
    started = time.perf_counter()
    for streams, standings in stream_batches(Archive.open(archive_dir)):
        read += time.perf_counter() - started
        runs += len(streams)
        for number, policies in enumerate(parsed):
            began = time.perf_counter()
            rows[number] += whatif_table(streams, policies, standings).height
            seconds[number] += time.perf_counter() - began
        started = time.perf_counter()
    peak = peak_rss_mb()
    return [
        {"seconds": s, "runs": runs, "rows": r, "peak_rss_mb": peak, "read_seconds": read}
        for s, r in zip(seconds, rows, strict=True)
    ]


def in_child(*arguments: str) -> Any:
    command = [sys.executable, __file__, *arguments]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.splitlines()[-1])


def has_streams(archive_dir: Path, runs: int) -> bool:
    from contextledger.archive import Archive

    if not (archive_dir / "archive.json").is_file():
        return False
    archive = Archive.open(archive_dir)
    with_streams = all(
        any(file.table == "streams" for file in commit.files)
        for commit in archive.commits
        if commit.run_count
    )
    return archive.run_count == runs and with_streams


def build(archive_dir: Path, runs: int) -> None:
    shutil.rmtree(archive_dir, ignore_errors=True)
    print(f"writing {runs:,} synthetic runs with their streams to {archive_dir} ...", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [CONTEXTLEDGER, "synth", "--runs", str(runs), "--archive", str(archive_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    print(f"  {time.perf_counter() - started:.1f} s: {done.stdout.strip()}")


def describe_archive(archive_dir: Path) -> None:
    import polars as pl

    from contextledger.archive import Archive

    archive = Archive.open(archive_dir)

    def megabytes(table: str | None) -> float:
        """The committed Parquet of ``table`` (None: the whole archive), in MB."""
        paths = (
            archive_dir.rglob("*.parquet")
            if table is None
            else map(Path, archive.paths(archive.files(table)))
        )
        return sum(path.stat().st_size for path in paths) / 1e6

    streams = pl.scan_parquet(archive.paths(archive.files("streams")))
    shape = streams.select(
        runs=pl.len(), messages=pl.col("message_count").sum(), calls=pl.col("calls").list.len()
    ).select("runs", "messages", calls=pl.col("calls").sum())
    runs, messages, calls = shape.collect().row(0)
    standings = pl.scan_parquet(archive.paths(archive.files("standings")))
    filed = standings.select(pl.len(), pl.col("run_id").n_unique()).collect().row(0)
    window = sum(megabytes(t) for t in ("streams", "messages", "standings"))
    print(
        f"archive: {runs:,} runs, {calls:,} model calls, {messages:,} messages, "
        f"{filed[0]:,} standings in {filed[1]:,} runs; {megabytes(None):,.1f} MB of Parquet, "
        f"{window:,.1f} MB of it the window tables (streams {megabytes('streams'):,.1f}, "
        f"messages {megabytes('messages'):,.1f}, standings {megabytes('standings'):,.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/cl-bench"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--together-only",
        action="store_true",
        help="Time only the four policies in one call (not each alone).",
    )
    parser.add_argument("--archive", type=Path, help="An existing archive to read.")
    parser.add_argument("--one", choices=["archive", "memory"], help=argparse.SUPPRESS)
    parser.add_argument("--sets", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one == "archive":
        print(json.dumps(measure_archive(str(args.archive), json.loads(args.sets))))
        return
    if args.one == "memory":
        print(json.dumps(measure_memory(str(args.archive), json.loads(args.sets))))
        return
    archive_dir = args.archive or args.work / f"whatif-synth-{args.runs}"
    if args.archive is None and not has_streams(archive_dir, args.runs):
        build(archive_dir, args.runs)
    describe_archive(archive_dir)
    sets = [[policy] for policy in POLICIES] if not args.together_only else []
    sets.append(list(POLICIES))
    names = [" + ".join(LABELS[p] for p in policies) for policies in sets]
    archived: list[list[dict[str, Any]]] = [[] for _ in sets]
    memory: list[list[dict[str, Any]]] = [[] for _ in sets]
    load_before = os.getloadavg()
    began = time.perf_counter()
    for _ in range(args.reps):
        for number, policies in enumerate(sets):
            archived[number].append(
                in_child(
                    "--one",
                    "archive",
                    "--archive",
                    str(archive_dir),
                    "--sets",
                    json.dumps(policies),
                )
            )
        replayed = in_child(
            "--one", "memory", "--archive", str(archive_dir), "--sets", json.dumps(sets)
        )
        for number, result in enumerate(replayed):
            memory[number].append(result)
    load_after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} cores); "
        f"{time.perf_counter() - began:.0f} s measuring"
    )
    print(f"policies: {', '.join(f'{LABELS[p]} = {p}' for p in POLICIES)}")
    header = f"{'policies':32} {'from':8} {'median s':>9} {'runs/s':>9} {'peak RSS MB':>12}"
    print(f"\n{header} {'archive / memory':>17}")
    for number, name in enumerate(names):
        runs = archived[number][0]["runs"]
        assert all(r["rows"] == runs * len(sets[number]) for r in archived[number] + memory[number])
        from_archive = statistics.median(r["seconds"] for r in archived[number])
        from_memory = statistics.median(r["seconds"] for r in memory[number])
        for label, results, seconds in (
            ("archive", archived[number], from_archive),
            ("memory", memory[number], from_memory),
        ):
            peak = max(r["peak_rss_mb"] for r in results)
            ratio = f"{from_archive / from_memory:17.2f}" if label == "archive" else ""
            print(
                f"{name:32} {label:8} {seconds:9.2f} {runs / seconds:9,.0f} {peak:12,.0f} {ratio}"
            )
    read = statistics.median(r["read_seconds"] for r in memory[0])
    print(
        f"\nreading the streams alone (stream_batches, in the memory child): {read:.1f} s, "
        f"{archived[0][0]['runs'] / read:,.0f} runs/s; the memory child's peak RSS is one "
        "batch's streams held while every policy set replays them"
    )


if __name__ == "__main__":
    main()
