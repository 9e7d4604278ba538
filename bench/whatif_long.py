"""What-if over long runs: the kernel against the exact replay, runs of hundreds of turns.

Until the kernel held sets of turns of any length (``contextledger.window.turn_sets``),
a run of more than 64 turns left it for the exact replay, one run and policy at a time.
What is measured, on ``--runs`` synthetic runs of ``--calls`` model calls (one turn a
call: ``contextledger.window.synthetic.tool_batches``, the runs ``bench/whatif.py``
draws, each result given a standing) under ``bench/whatif.py``'s 6 policies, all in this
one process:

- ``kernel``: ``whatif_table`` over every run (messages in, rows out: laid out as turns,
  replayed by the kernel, refusals and pins listed), ``--batch`` runs at a time as an
  archive is replayed (a run's recorded windows make its messages grow with the square
  of its calls: a thousand such runs at once do not fit in memory here), the sum;
- ``exact``: ``whatif_table_exact`` (each run and policy replayed on its own, what a long
  run got before) over the first ``--exact`` runs, once; its rows are checked equal to
  the kernel's rows for those runs, exactly. The exact replay of every run is that time
  scaled by ``runs / exact`` (each run is replayed alone, so it scales with the runs;
  replaying all 1,000 would take over an hour here).

It prints the medians, the ratio, the peak memory of the process, and the load average.
Run: ``.venv/bin/python bench/whatif_long.py [--runs 1000] [--calls 500] [--exact 20]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence

from polars.testing import assert_frame_equal

from contextledger.window.synthetic import script_streams, tool_batches
from contextledger.window.whatif import parse_policies, whatif_table, whatif_table_exact

sys.path.insert(0, os.path.dirname(__file__))
from whatif import POLICIES


def main(argv: Sequence[str] | None = None) -> int:
    began = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100, help="runs replayed together")
    parser.add_argument("--exact", type=int, default=20, help="runs replayed exactly")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    policies = parse_policies(POLICIES)
    scripts = tool_batches(args.runs, args.calls)
    kernel_times, built_s, messages, checked = [], 0.0, 0, 0
    exact_s = 0.0
    for first in range(0, args.runs, args.batch):
        start = time.perf_counter()
        built = list(script_streams(scripts, range(first, min(first + args.batch, args.runs))))
        streams = [stream for stream, _ in built]
        standings = [row for _, rows in built for row in rows]
        built_s += time.perf_counter() - start
        messages += sum(len(stream.messages) for stream in streams)
        start = time.perf_counter()
        fast = whatif_table(streams, policies, standings)
        kernel_times.append(time.perf_counter() - start)
        if first == 0:  # the exact replay of the first runs: the same rows
            chosen = streams[: args.exact]
            ids = {stream.run_id for stream in chosen}
            start = time.perf_counter()
            exact = whatif_table_exact(
                chosen, policies, [row for row in standings if row["run_id"] in ids]
            )
            exact_s = time.perf_counter() - start
            assert_frame_equal(fast.head(exact.height), exact, check_exact=True)
            checked = len(chosen)
        del built, streams, standings, fast
    kernel_s = sum(kernel_times)
    scaled = exact_s * args.runs / checked
    print(
        f"{args.runs} synthetic runs x {args.calls} calls x {len(policies)} policies "
        f"({messages} messages; built in {built_s:.1f} s, not timed)"
    )
    print(f"identical: whatif rows from the kernel = from the exact replay on {checked} runs")
    print(
        f"kernel  {kernel_s:8.2f} s for {args.runs} runs, in batches of {args.batch} "
        f"(median batch {statistics.median(kernel_times):.2f} s)"
    )
    print(f"exact   {exact_s:8.2f} s for {checked} runs; scaled: {scaled:.2f} s for {args.runs}")
    print(
        f"ratio: {scaled / kernel_s:.1f}x (per run: exact {exact_s / checked:.3f} s, "
        f"kernel {kernel_s / args.runs:.4f} s)"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    now = os.getloadavg()
    print(
        f"peak memory {peak:.0f} MB; whole bench {time.perf_counter() - began:.1f} s; "
        f"load average {load[0]:.2f} at the start, {now[0]:.2f} at the end "
        f"({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
