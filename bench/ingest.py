"""Ingest speed: snapshots -> tables -> ledger, against two baselines measured in the same run.

What is measured, each repeated until it has run for about ``--seconds`` and reported
as the median of its repetitions:

- ``contextledger``: ``read_runs`` (both cores) + ``compute_ledger``, in corrected and
  reference accounting; and the ``contextledger ledger`` command end to end (process
  start, imports, reading, printing), which is what a user waits for.
- ``json.loads floor``: gunzip + ``json.loads`` of the same files on one core, nothing
  else: what any reader that decodes the whole document pays before doing any work.
- ``ingest's reading``: what ``ingest`` does to each file (both accountings, digest,
  message stream rows) in one process, as runs per CPU-second (issue 21: at least 300).
- ``plain port``: a per-run Python port of the reference's loop (``json.loads``, then
  ``commitValueAt`` from scratch at every write, as contextLedger.ts does), one core.
- ``contextledger ingest`` (issue 21): the command end to end into a new archive, over
  ``--ingest-runs`` synthetic snapshots (``synth --snapshots``, made once and kept),
  ``--ingest-reps`` times; CPU is user + sys of the whole process tree (the command, its
  forkserver and workers: this process is their subreaper), printed as runs per
  CPU-second (runs/s per core; the issue asks for at least 300, 3.3 ms per run) beside
  the wall time. ``--baseline-src`` times another checkout's ``src`` alternately in the
  same run (before/after at the same load). ``--ingest-only`` skips everything else.
- ``where a run's CPU goes``: each step ingest takes for a run, timed apart in this
  process over the first ``--breakdown-runs`` of those snapshots (best of 3 passes):
  what a worker does (read the file and hash it for the manifest, inflate, decode, content
  digest, both accountings of a run in turn, the message stream's rows, sending the result
  back) and what the parent does (a batch's tables, Parquet files and commit).

Peak memory is the largest resident set of this process and of the reading workers.
Run: ``.venv/bin/python bench/ingest.py [--corpus DIR] [--seconds 5]``, or
``PYTHONPATH=src .venv/bin/python bench/ingest.py --ingest-only --baseline-src ../main/src``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextledger.ledger.compute import compute_ledger
from contextledger.tables import ACCOUNTING_MODES
from contextledger.tables.build import read_runs
from contextledger.tables.files import read_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import COMMAND, elapsed  # bench/cli.py

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "agentfootprint-9.62" / "runs"


def _cpu() -> float:
    """CPU seconds (user + sys) of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(work: Callable[[], object], seconds: float) -> tuple[float, float, int]:
    """Median wall and CPU time of ``work`` over repetitions filling about ``seconds``
    (CPU counts worker processes once they have exited, as a pool's have)."""
    times: list[float] = []
    cpus: list[float] = []
    started = time.perf_counter()
    while not times or (time.perf_counter() - started < seconds and len(times) < 50):
        begin, begin_cpu = time.perf_counter(), _cpu()
        work()
        times.append(time.perf_counter() - begin)
        cpus.append(_cpu() - begin_cpu)
    return statistics.median(times), statistics.median(cpus), len(times)


def ingest_reading(files: list[Path]) -> None:
    """What ``ingest`` does to each file, in this process: both accountings, the
    content digest and the message stream's rows."""
    for path in files:
        read_file(path, ACCOUNTING_MODES, {}, False, digest=True, windows=True)


def json_floor(files: list[Path]) -> None:
    for path in files:
        json.loads(gzip.decompress(path.read_bytes()))


def _value_at(log: list[dict[str, Any]], index: int, key: str) -> Any:
    """commitValueAt, written the plain way: scan from the start every time."""
    touches = [(t["verb"], b) for b in log[: index + 1] for t in b["trace"] if t["path"] == key]
    start = max((i for i, (verb, _) in enumerate(touches) if verb in ("set", "delete")), default=0)
    value: Any = None
    for verb, bundle in touches[start:]:
        tail = bundle["overwrite"].get(key)
        if verb == "set":
            value = tail
        elif verb == "append":
            value = value + tail if isinstance(value, list) and isinstance(tail, list) else tail
        elif verb == "delete":
            value = None
    return value


def plain_port(files: list[Path]) -> dict[str, list[int]]:
    """The reference's recordRun as a straightforward per-run Python loop."""
    table: dict[str, list[int]] = {}
    for path in files:
        document = json.loads(gzip.decompress(path.read_bytes()))
        snapshot = document.get("snapshot", document)
        static = document.get("static_tool_names") or []
        log = snapshot.get("commitLog") or []
        mounts = sorted(
            (k for k in snapshot.get("subflowResults") or {} if k.startswith("sf-llm-call#")),
            key=lambda k: int(k.rsplit("#", 1)[1]),
        )
        logs = [snapshot["subflowResults"][k]["treeContext"]["history"] for k in mounts] or [log]
        markers = 0
        for offer_log in logs:
            injections: list[Any] = []
            schemas: list[Any] = []
            for i, bundle in enumerate(offer_log):
                paths = {t["path"] for t in bundle["trace"]}
                if "activeInjections" in paths:
                    injections = _value_at(offer_log, i, "activeInjections") or []
                if "dynamicToolSchemas" in paths:
                    schemas = _value_at(offer_log, i, "dynamicToolSchemas") or []
                if "totalInputTokens" not in paths or "userMessage" in paths:
                    continue
                markers += 1
                offered: set[str] = set()
                for item in injections:
                    if item.get("id"):
                        kind = "skill" if item.get("flavor") == "skill" else "injection"
                        size = (
                            len(
                                json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode(
                                    "utf-16-le"
                                )
                            )
                            // 2
                        )
                        row = table.setdefault(f"{kind}:{item['id']}", [0, 0, 0])
                        row[0] += 1
                        row[1] += math.ceil(size / 4)
                for schema in schemas:
                    if schema.get("name") and schema["name"] not in offered:
                        offered.add(schema["name"])
                        size = (
                            len(
                                json.dumps(
                                    schema, separators=(",", ":"), ensure_ascii=False
                                ).encode("utf-16-le")
                            )
                            // 2
                        )
                        row = table.setdefault(f"tool:{schema['name']}", [0, 0, 0])
                        row[0] += 1
                        row[1] += math.ceil(size / 4)
                for name in static:
                    if name not in offered:
                        offered.add(name)
                        table.setdefault(f"tool:{name}", [0, 0, 0])[0] += 1
        if not markers:
            continue
        for message in _value_at(log, len(log) - 1, "history") or []:
            if message.get("role") == "assistant":
                for call in message.get("toolCalls") or []:
                    table.setdefault(f"tool:{call['name']}", [0, 0, 0])[2] += 1
    return table


def cli_end_to_end(corpus: Path) -> None:
    subprocess.run(
        [str(Path(sys.executable).parent / "contextledger"), "ledger", str(corpus)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


#: Issue 21: ingest at least this many runs per second of one core.
TARGET_RUNS_PER_CPU_SECOND = 300


def _adopt_orphans() -> None:
    """Become the subreaper of what the commands start (Linux ``PR_SET_CHILD_SUBREAPER``),
    so a forkserver's and its workers' CPU comes back here when they are reaped."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def synthetic_snapshots(runs: int, folder: Path | None) -> Path:
    """``runs`` synthetic snapshot files (``synth --snapshots``, seed 0), made once in
    ``folder`` (default: under the temporary folder) and kept for later runs; a
    ``folder`` given that holds snapshots already is used as it is."""
    if folder is not None and any(folder.glob("*.json.gz")):
        return folder
    folder = folder or Path(tempfile.gettempdir()) / f"contextledger-bench-ingest-{runs}"
    if len(list(folder.glob("*.json.gz"))) < runs:
        print(f"writing {runs} synthetic snapshots to {folder} (once)")
        argv = ["synth", "--runs", str(runs), "--snapshots", str(folder)]
        subprocess.run([*COMMAND, *argv], check=True, stdout=subprocess.DEVNULL)
    return folder


def ingest_command(snapshots: Path, src: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of ``contextledger ingest`` of ``snapshots`` into a new
    archive, the CPU summed over every process it starts; ``src``: the package's
    source to run instead of the one this interpreter imports."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as folder:
        argv = ["ingest", str(snapshots), "--archive", str(Path(folder) / "archive")]
        return elapsed([*COMMAND, *argv], env=env)


def bench_ingest(snapshots: Path, reps: int, baseline: Path | None) -> None:
    """Time ``contextledger ingest`` (and a baseline checkout's, alternately) and print
    medians: runs per CPU-second against issue 21's target."""
    _adopt_orphans()
    runs = len(list(snapshots.glob("*.json.gz")))
    megabytes = sum(p.stat().st_size for p in snapshots.glob("*.json.gz")) / 1e6
    print(f"ingest: {runs} synthetic snapshots, {megabytes:.0f} MB gzip ({snapshots})")
    timed_sources: dict[str, Path | None] = {"this checkout": None}
    if baseline is not None:
        timed_sources = {f"baseline {baseline}": baseline, **timed_sources}
    walls: dict[str, list[float]] = {name: [] for name in timed_sources}
    cpus: dict[str, list[float]] = {name: [] for name in timed_sources}
    loads: list[float] = []
    for _ in range(reps):
        for name, src in timed_sources.items():
            wall, cpu = ingest_command(snapshots, src)
            walls[name].append(wall)
            cpus[name].append(cpu)
            loads.append(os.getloadavg()[0])
            print(f"  {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, load {loads[-1]:.1f}")
    print(
        f"medians of {reps}; load (1 min) {min(loads):.1f}-{max(loads):.1f} on "
        f"{os.cpu_count()} cores; CPU = user + sys of the command, its forkserver and workers"
    )
    print(
        f"{'contextledger ingest':44} {'wall s':>7} {'runs/s':>7} {'CPU s':>7} {'ms/run':>7}"
        f" {'runs/CPU-s':>10}"
    )
    per_core = {}
    for name in timed_sources:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        per_core[name] = runs / cpu
        print(
            f"{name[:44]:44} {wall:7.1f} {runs / wall:7.0f} {cpu:7.1f} {cpu / runs * 1e3:7.2f}"
            f" {runs / cpu:10.0f}"
        )
    ours = per_core["this checkout"]
    met = "met" if ours >= TARGET_RUNS_PER_CPU_SECOND else "not met"
    print(
        f"ingest: {ours:.0f} runs per CPU-second, i.e. runs/s per core (issue 21: at least "
        f"{TARGET_RUNS_PER_CPU_SECOND}, {met})"
    )
    if baseline is not None:
        print(f"against the baseline: {ours / per_core[f'baseline {baseline}']:.2f}x runs/CPU-s")


def _best_per_run(work: Callable[[], object], runs: int) -> float:
    """The least CPU of three passes of ``work``, in milliseconds per run."""
    best = math.inf
    for _ in range(3):
        begin = time.process_time()
        work()
        best = min(best, time.process_time() - begin)
    return best / runs * 1e3


def breakdown(snapshots: Path, count: int) -> None:
    """Print where one run's CPU goes in ingest, step by step (see the module docstring)."""
    import pickle

    from contextledger.jobs import ingest as ingest_job
    from contextledger.read.corrected import meter_run
    from contextledger.read.digest import content_digest
    from contextledger.read.otel.functions import SNIFF_BYTES
    from contextledger.read.reference import record_run
    from contextledger.read.snapshot import decode_run, iter_documents, read_whole_document
    from contextledger.tables.files import head_is_a_snapshot
    from contextledger.tables.window_rows import run_window

    files = sorted(snapshots.glob("*.json.gz"))[:count]
    runs = len(files)
    documents = [document for path in files for document in iter_documents(path)]
    decoded = [decode_run(document) for document in documents]

    def read_whole(path: Path) -> object:
        return read_whole_document(path, head_is_a_snapshot, SNIFF_BYTES, digest=True)

    steps: dict[str, Callable[[], object]] = {
        "worker: read, inflate (ISA-L), hash the file": lambda: [read_whole(p) for p in files],
        "worker: decode (msgspec)": lambda: [decode_run(document) for document in documents],
        "worker: content digest (format + BLAKE3)": lambda: [
            content_digest(document.payload) for document in documents
        ],
        # in turn, as a worker reads them: they share a run's log indexes and answer slice
        "worker: both accountings": lambda: [
            (record_run(r.snapshot, []), meter_run(r, [])) for r in decoded
        ],
        "worker: message stream rows": lambda: [run_window(r) for r in decoded],
    }
    results = {name: _best_per_run(work, runs) for name, work in steps.items()}
    sources = list(ingest_job._changed(files, {}, False, ingest_job.IngestReport("")))
    reads = [(source, read_chunk_one(source.path)) for source in sources]
    payload = [read for _, read in reads]
    results["worker -> parent: pickle and unpickle"] = _best_per_run(
        lambda: pickle.loads(pickle.dumps(payload)), runs
    )
    results["parent: the batch's tables, files, commit"] = _flush_per_run(reads, runs)
    print(f"where a run's CPU goes in ingest ({runs} synthetic runs, best of 3, one process):")
    for name, milliseconds in results.items():
        print(f"  {name:48} {milliseconds:6.3f} ms")
    total = sum(results.values())
    print(
        f"  {'sum':48} {total:6.3f} ms ({1e3 / total:.0f} runs per CPU-second; the target "
        f"is {1e3 / TARGET_RUNS_PER_CPU_SECOND:.2f} ms)"
    )


def read_chunk_one(path: str) -> Any:
    from contextledger.tables.files import read_chunk

    return read_chunk([path], {})[0]


def _flush_per_run(reads: list[Any], runs: int) -> float:
    """CPU of committing ``reads`` as one batch of a new archive, ms per run."""
    from contextledger.archive.store import Archive
    from contextledger.jobs import ingest as ingest_job

    best = math.inf
    for _ in range(3):
        with tempfile.TemporaryDirectory(prefix="bench-flush-") as folder:
            archive = Archive.create(Path(folder) / "archive", None)
            report = ingest_job.IngestReport(folder)
            with archive.writing():
                pending = ingest_job._Pending(archive, "2026-12-02", report)
                for source, read in reads:
                    pending.add(source, read)
                begin = time.process_time()
                pending.flush()
                best = min(best, time.process_time() - begin)
    return best / runs * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--ingest-runs", type=int, default=10_000, help="synthetic snapshots to ingest"
    )
    parser.add_argument(
        "--ingest-reps", type=int, default=3, help="times each ingest is run (0: none)"
    )
    parser.add_argument(
        "--ingest-snapshots", type=Path, help="a folder of snapshots to ingest instead"
    )
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src to time")
    parser.add_argument("--ingest-only", action="store_true", help="skip the other benches")
    parser.add_argument(
        "--breakdown-runs", type=int, default=500, help="runs timed step by step (0: none)"
    )
    args = parser.parse_args()
    snapshots = synthetic_snapshots(args.ingest_runs, args.ingest_snapshots)
    if args.ingest_reps:
        bench_ingest(snapshots, args.ingest_reps, args.baseline_src)
    if args.breakdown_runs:
        breakdown(snapshots, args.breakdown_runs)
    if args.ingest_only:
        return
    files = sorted(args.corpus.glob("*.json.gz"))
    if not files:
        sys.exit(f"no snapshots under {args.corpus}")
    runs = len(files)
    megabytes = sum(len(gzip.decompress(p.read_bytes())) for p in files) / 1e6
    print(f"corpus: {runs} runs, {megabytes:.1f} MB of JSON ({args.corpus})")

    check = plain_port(files)
    reference = compute_ledger(read_runs(files, mode="reference")).frame
    expected = {
        f"{kind}:{piece}": [offered, tokens, used if kind == "tool" else 0]
        for kind, piece, offered, tokens, used in reference.select(
            "kind", "id", "offered", "approx_tokens_spent", "used"
        ).iter_rows()
    }
    assert check == expected, "the plain port disagrees with the reference accounting"
    print("plain port checked: same offered, tokens and tool uses as --mode reference")

    measurements = {
        "contextledger corrected (2 workers)": lambda: compute_ledger(read_runs(files)),
        "contextledger reference (2 workers)": lambda: compute_ledger(
            read_runs(files, mode="reference")
        ),
        "contextledger corrected (1 worker)": lambda: compute_ledger(read_runs(files, workers=1)),
        "contextledger ledger command, end to end": lambda: cli_end_to_end(args.corpus),
        "ingest's reading of each run (1 core)": lambda: ingest_reading(files),
        "json.loads floor (1 core)": lambda: json_floor(files),
        "plain per-run port of the reference loop (1 core)": lambda: plain_port(files),
    }
    results = {}
    cpu_results = {}
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"medians; load {load}; runs/cpu-s: runs per second of CPU, a core's worth")
    print(
        f"{'what':52} {'median s':>9} {'runs/s':>8} {'MB/s':>7} {'cpu s':>7} {'runs/cpu-s':>10}"
        f" {'reps':>5}"
    )
    for name, work in measurements.items():
        seconds, cpu, reps = timed(work, args.seconds)
        results[name] = seconds
        cpu_results[name] = cpu
        print(
            f"{name:52} {seconds:9.3f} {runs / seconds:8.0f} {megabytes / seconds:7.1f}"
            f" {cpu:7.3f} {runs / cpu:10.0f} {reps:5d}"
        )
    ours = results["contextledger corrected (2 workers)"]
    print(
        f"\nspeed-up over the json.loads floor: {results['json.loads floor (1 core)'] / ours:.1f}x"
    )
    plain = results["plain per-run port of the reference loop (1 core)"]
    print(f"speed-up over the plain port:       {plain / ours:.1f}x")
    command = results["contextledger ledger command, end to end"]
    print(f"command end to end: {runs / command:.0f} runs/s")
    per_core = runs / cpu_results["ingest's reading of each run (1 core)"]
    met = "met" if per_core >= 300 else "not met"
    print(f"ingest's reading: {per_core:.0f} runs per CPU-second (issue 21: at least 300, {met})")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process {own:.0f} MB, largest child {workers:.0f} MB")


if __name__ == "__main__":
    main()
