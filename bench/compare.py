"""Compare speed: the audit of every policy family over the corpus, against ``whatif``.

What is measured, all in this one process, on the runs under ``--corpus`` (default: the
reference corpus beside the repository, 301 runs), read once into memory (not timed):

- ``whatif``: :func:`contextledger.jobs.whatif.whatif` over agentfootprint's policies
  (``DEFAULT_POLICIES``), the baseline: its vectorized replay and its rows;
- ``compare, agentfootprint's``: :func:`contextledger.jobs.compare.compare` over the same
  policies (each run replayed exactly, one window per call, then audited);
- ``compare, <family>``: ``compare`` over each other framework's spec in
  ``FRAMEWORK_DEFAULTS``, one family at a time;
- ``compare, all``: ``COMPARE_POLICIES``, what ``contextledger compare`` runs by default.

Each figure is the median of ``--repeat`` repetitions, with its ratio to ``whatif``'s
median measured in the same run; the machine's other load counts against all alike, and
the load average is printed. Run: ``.venv/bin/python bench/compare.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from contextledger.jobs.compare import FRAMEWORK_DEFAULTS, compare
from contextledger.jobs.whatif import read_inputs, whatif
from contextledger.report import COMPARE_POLICIES, DEFAULT_POLICIES
from contextledger.window.frameworks import framework_name

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "agentfootprint-9.62" / "runs"


def median_seconds(work: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``work``."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    streams = read_inputs(args.corpus).streams
    print(f"{len(streams)} runs from {args.corpus}; median of {args.repeat} repetitions")
    families: dict[str, list[str]] = {}
    for spec in FRAMEWORK_DEFAULTS:
        families.setdefault(framework_name(spec) or spec, []).append(spec)
    cases: list[tuple[str, int, Callable[[], object]]] = [
        ("whatif (baseline)", len(DEFAULT_POLICIES), lambda: whatif(streams, DEFAULT_POLICIES)),
        (
            "compare, agentfootprint's",
            len(DEFAULT_POLICIES),
            lambda: compare(streams, DEFAULT_POLICIES),
        ),
        *(
            (f"compare, {name}", len(specs), lambda specs=specs: compare(streams, specs))
            for name, specs in families.items()
        ),
        ("compare, all", len(COMPARE_POLICIES), lambda: compare(streams, COMPARE_POLICIES)),
    ]
    baseline = None
    print(f"{'what':<34} {'policies':>8} {'median s':>9} {'x whatif':>9}")
    for label, count, work in cases:
        seconds = median_seconds(work, args.repeat)
        baseline = baseline or seconds
        print(f"{label:<34} {count:>8} {seconds:>9.3f} {seconds / baseline:>9.2f}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
