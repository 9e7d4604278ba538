"""The command line as a user waits for it: whole processes, start to exit.

Each command is run ``--runs`` times (alternating, so load on the machine falls on
all of them alike) and reported as the median, against two floors measured in the
same run:

- ``python -c pass``: the interpreter's own start, under which no command can go;
- ``import polars, pyarrow``: what any command that computes over Arrow pays first.

Then ``contextledger --help`` (issue 12's target: under 0.3 s) and ``contextledger
ledger CORPUS`` (target: 5x faster than agentfootprint's own engine on the same runs).
The reference figure (6.4 s for the 301 corpus runs, Node, end to end) is a recorded
one, not measured in this run: running the reference needs its npm package and a
driver script, which this bench does not install.

Run: ``.venv/bin/python bench/cli.py [--corpus DIR] [--runs 7]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "agentfootprint-9.62" / "runs"
#: agentfootprint 9.62's ledger over the 301 corpus runs, end to end, as recorded in issue 12.
REFERENCE_SECONDS = 6.4
COMMAND = [sys.executable, "-c", "from contextledger.cli import main; main()"]


def elapsed(argv: list[str]) -> float:
    """Wall seconds of one process, its output discarded; it must succeed."""
    begin = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--runs", type=int, default=7, help="Repetitions of each command.")
    args = parser.parse_args()
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "import polars, pyarrow (floor)": [sys.executable, "-c", "import polars, pyarrow"],
        "contextledger --help": [*COMMAND, "--help"],
        f"contextledger ledger {args.corpus.name}/": [*COMMAND, "ledger", str(args.corpus)],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(elapsed(argv))
    median = {name: statistics.median(values) for name, values in times.items()}
    floor = median["python -c pass (floor)"]
    print(f"{args.runs} runs each, medians, {os.cpu_count()} cores (a shared machine: loaded)")
    for name, seconds in median.items():
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"  {name:<40} {seconds:6.3f} s  ({spread})  {seconds / floor:5.1f}x floor")
    helped = median["contextledger --help"]
    ledger = median[f"contextledger ledger {args.corpus.name}/"]
    print(f"--help: {helped:.3f} s (target under 0.3 s: {'met' if helped < 0.3 else 'not met'})")
    print(
        f"ledger: {ledger:.2f} s against agentfootprint's {REFERENCE_SECONDS} s "
        f"(reference / ours = {REFERENCE_SECONDS / ledger:.2f}; target 5; the reference "
        "figure is a recorded one, not measured in this run, so load here counts against us)"
    )


if __name__ == "__main__":
    main()
