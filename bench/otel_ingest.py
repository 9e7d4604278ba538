"""Peak memory of ``contextledger ingest`` of big trace files, the whole process tree.

For each ``--memory-mb`` size, the recorded traces of ``data/otel`` repeated into one
file of that size (``bench/otel_read.py``'s ``write_traces``: each copy's ids rewritten)
are ingested by the command, in a fresh process (``--workers`` reading processes, the
default of the command otherwise), in four ways:

- ``new``: ``ingest BIG --archive A``, into a new archive;
- ``again``: the same command once more (the file unchanged: nothing read);
- ``copy``: a copy of ``BIG`` under another name into ``A`` (every span already
  archived: every archived run's span records handed out and assembled again);
- ``grow``: ``ingest TODAY --archive B`` then ``ingest TOMORROW --archive B``, where
  TOMORROW holds, of every copy, the lines of the recording's second file (one run of
  each copy split over the two, ``data/otel/README.md``): the second ingest's spans
  join runs archived before (``jobs/ingest_merge.py``). The peak is the second's;
- ``whatif`` (asked for): ``whatif A --policy sliding:keep=4``, the replay of the archive.

Memory is VmHWM (the peak resident set the kernel kept) of every process of the tree
(the command, its forkserver and its reading workers; this process is their
subreaper), read every 20 ms until each ends: printed are the command's own peak, the
largest worker's, and the largest sum of resident sets seen at one time; and the wall
and CPU seconds of the tree. After each
size: ``check A`` must exit 0 and ``ledger A`` print what ``ledger BIG`` prints, byte
for byte (likewise ``ledger B`` and ``ledger TODAY TOMORROW``, whose ties may be in
another order: B's runs are in ingest order, today's first, so the refused runs it
names as examples may differ; its CSV rows are compared as a set too). ``--compare-src`` runs
another checkout's package for ``new`` and ``grow`` in the same run.
Run: ``PYTHONPATH=src .venv/bin/python bench/otel_ingest.py --memory-mb 256 1024``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import _adopt_orphans, reap_orphans  # bench/cli.py
from otel_read import _CONVERSATION, _IDS, OTEL, recorded_lines, write_traces

REPO = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-c", "from contextledger.cli import main; main()"]
#: The recording whose file holds the second half of a run split over two files.
SECOND = "genai-openai.2.jsonl.gz"


@dataclass
class Peak:
    """What :func:`run_measured` saw of a process tree."""

    seconds: float
    cpu: float
    command_mib: float
    worker_mib: float
    tree_mib: float
    processes: int


def _status(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, VmHWM KiB, VmRSS KiB) of a process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        parent = int(fields["PPid"])
        high = int(fields.get("VmHWM", "0 kB").split()[0])
        resident = int(fields.get("VmRSS", "0 kB").split()[0])
    except (KeyError, ValueError):
        return None
    return parent, high, resident


def _tree(root: int) -> dict[int, tuple[int, int]]:
    """(VmHWM, VmRSS) of every process under ``root`` (orphans come to ``root``, its
    subreaper)."""
    found: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            status = _status(int(entry))
            if status is not None:
                found[int(entry)] = status
    under = {root}
    changed = True
    while changed:
        changed = False
        for pid, (parent, _, _) in found.items():
            if parent in under and pid not in under:
                under.add(pid)
                changed = True
    return {pid: found[pid][1:] for pid in under - {root} if pid in found}


def run_measured(argv: list[str], env: dict[str, str]) -> Peak:
    """Run ``argv`` (it must succeed) and sample its process tree every 20 ms."""
    _adopt_orphans()
    peaks: dict[int, int] = {}
    tree = [0]
    done = threading.Event()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    def sample() -> None:
        while not done.is_set():
            seen = _tree(os.getpid())
            for pid, (high, _) in seen.items():
                peaks[pid] = max(peaks.get(pid, 0), high)
            tree[0] = max(tree[0], sum(resident for _, resident in seen.values()))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    sampler.start()
    _, errors = process.communicate()
    seconds = time.perf_counter() - begin
    done.set()
    sampler.join()
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if process.returncode != 0:
        sys.exit(f"{' '.join(argv[3:])} exited {process.returncode}: {errors.decode()[-2000:]}")
    own = peaks.pop(process.pid, 0)
    workers = max(peaks.values(), default=0)
    return Peak(seconds, cpu, own / 1024, workers / 1024, tree[0] / 1024, len(peaks) + 1)


_TIMES = re.compile(rb'"(startTimeUnixNano|endTimeUnixNano|timeUnixNano)":"(\d+)"')
#: How far each copy's times are moved (a day): copies come one after another in time.
_COPY_SHIFT_NS = 86_400 * 10**9


def shift_times(path: Path) -> None:
    """Move each copy's span times a day past the copy before (``write_traces`` keeps
    them, so the copies' runs interleave in start-time order and one batch may hold many
    copies of the largest run): the runs of a collector's file, one day after another."""
    moved = path.with_suffix(".moved")
    with path.open("rb") as source, moved.open("wb") as target:
        for line in source:
            copy = int(_IDS.search(line).group(2), 16) if _IDS.search(line) else 0
            shift = copy * _COPY_SHIFT_NS

            def later(match: re.Match[bytes], shift: int = shift) -> bytes:
                return b'"%s":"%d"' % (match.group(1), int(match.group(2)) + shift)

            target.write(_TIMES.sub(later, line))
    moved.replace(path)


def write_split(today: Path, tomorrow: Path, megabytes: int) -> int:
    """The recordings repeated into ``today`` up to ``megabytes``, the lines of
    :data:`SECOND` of each copy into ``tomorrow``; how many copies."""
    second = set(_lines_of(SECOND))
    lines = recorded_lines()
    target = megabytes << 20
    written = copy = 0
    with today.open("wb") as first, tomorrow.open("wb") as later:
        while written < target:
            prefix = b"%08x" % copy
            for line in lines:
                copied = _IDS.sub(b'"\\1":"' + prefix, line)
                copied = _CONVERSATION.sub(b"\\g<1>" + prefix + b"-", copied)
                (later if line in second else first).write(copied + b"\n")
                written += len(copied) + 1
            copy += 1
    return copy


def _lines_of(name: str) -> list[bytes]:
    import gzip

    (path,) = [path for path in OTEL.rglob(name) if path.is_file()]
    return [line for line in gzip.decompress(path.read_bytes()).splitlines() if line.strip()]


def _output(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    return done.returncode, done.stdout


def _runs_in(archive: Path, env: dict[str, str]) -> int:
    query = "select count(*) from runs"
    code, out = _output([*COMMAND, "sql", str(archive), query, "--format", "csv"], env)
    return int(re.findall(rb"\d+", out)[-1]) if code == 0 else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory-mb", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--workers", type=int, help="the command's --workers (its default)")
    parser.add_argument("--batch-runs", type=int, help="the command's --batch-runs (5000)")
    parser.add_argument("--compare-src", type=Path, help="another checkout's src, measured too")
    parser.add_argument("--skip-checks", action="store_true", help="no check/ledger compare")
    parser.add_argument(
        "--shift-times",
        action="store_true",
        help="each copy a day after the one before (default: copies share the recordings' times)",
    )
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=["new", "again", "copy", "grow", "whatif"],
        default=["new", "again", "copy", "grow"],
        help="which ingests to measure (checks need new and grow; whatif: of A, after new)",
    )
    options = parser.parse_args()
    sources = [("this checkout", REPO / "src")]
    if options.compare_src:
        sources.append((str(options.compare_src), options.compare_src.resolve()))
    workers = [] if options.workers is None else ["--workers", str(options.workers)]
    if options.batch_runs is not None:
        workers += ["--batch-runs", str(options.batch_runs)]
    print("peak memory of contextledger ingest, each command a fresh process tree:")
    for megabytes in options.memory_mb:
        with tempfile.TemporaryDirectory(prefix="otel-ingest-bench-") as folder:
            root = Path(folder)
            big, copy = root / "big.jsonl", root / "copy" / "big.jsonl"
            today, tomorrow = root / "today.jsonl", root / "tomorrow.jsonl"
            copies = write_traces(big, megabytes)
            write_split(today, tomorrow, megabytes)
            if options.shift_times:
                for path in (big, today, tomorrow):
                    shift_times(path)
            copy.parent.mkdir()
            size = big.stat().st_size / (1 << 20)
            for name, src in sources:
                env = dict(os.environ, PYTHONPATH=str(src))
                archive, grown = root / f"a-{len(name)}", root / f"b-{len(name)}"
                steps = [("new", [str(big)], archive)]
                if name == "this checkout":
                    steps += [("again", [str(big)], archive)]
                    steps += [("copy", [str(copy)], archive)]
                steps += [("grow: today", [str(today)], grown)]
                steps += [("grow: tomorrow", [str(tomorrow)], grown)]
                chosen = set(options.steps)
                for step, paths, target in steps:
                    if step.split(":")[0] not in chosen:
                        continue
                    if step == "copy":
                        shutil.copy(big, copy)
                    argv = [*COMMAND, "ingest", *paths, "--archive", str(target), *workers]
                    peak = run_measured(argv, env)
                    print(
                        f"  {size:7,.0f} MiB ({copies} copies), {name}, {step:15}: "
                        f"{peak.seconds:6.1f} s wall, {peak.cpu:6.1f} s CPU, "
                        f"command {peak.command_mib:5,.0f} MiB, "
                        f"largest worker {peak.worker_mib:5,.0f} MiB, tree at once "
                        f"{peak.tree_mib:5,.0f} MiB ({peak.processes} processes)",
                        flush=True,
                    )
                if "whatif" in chosen and name == "this checkout":
                    policy = ["--policy", "sliding:keep=4", "--format", "csv", "-o", os.devnull]
                    peak = run_measured([*COMMAND, "whatif", str(archive), *policy], env)
                    print(
                        f"  {size:7,.0f} MiB, whatif A (sliding:keep=4): {peak.seconds:6.1f} s "
                        f"wall, {peak.cpu:6.1f} s CPU, command {peak.command_mib:5,.0f} MiB, "
                        f"tree at once {peak.tree_mib:5,.0f} MiB ({peak.processes} processes)",
                        flush=True,
                    )
                if options.skip_checks or name != "this checkout" or chosen < {"new", "grow"}:
                    continue
                code, _ = _output([*COMMAND, "check", str(archive)], env)
                ours = _output([*COMMAND, "ledger", str(archive)], env)
                files = _output([*COMMAND, "ledger", str(big)], env)
                both = _output([*COMMAND, "ledger", str(grown)], env)
                split = _output([*COMMAND, "ledger", str(today), str(tomorrow)], env)
                csv = ["--format", "csv"]
                both_rows = _output([*COMMAND, "ledger", str(grown), *csv], env)[1].splitlines()
                split_rows = _output([*COMMAND, "ledger", str(today), str(tomorrow), *csv], env)
                rows = sorted(both_rows) == sorted(split_rows[1].splitlines())
                print(
                    f"    check A exit {code}; ledger A == ledger BIG: {ours == files} "
                    f"({len(ours[1]):,} bytes, {_runs_in(archive, env):,} runs); "
                    f"ledger B == ledger TODAY TOMORROW: {both == split} (its CSV rows the same, "
                    f"in any order: {rows})",
                    flush=True,
                )
                copy.unlink(missing_ok=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average: {load}")


if __name__ == "__main__":
    main()
