"""Report speed: ``contextledger report`` against ``ledger`` + ``whatif`` on the same runs.

What is measured: whole processes (the ``contextledger`` script beside this Python,
imports included, as a user waits for them), each command run ``--repeat`` times in turn
(report, ledger, whatif, report, ...) so the machine's other load falls on all three
alike; the medians are printed with the ratio report / (ledger + whatif). ``report``
writes its page and its charts as SVG and PNG (its defaults); ``whatif`` replays the
report's five default policies (``contextledger.report.DEFAULT_POLICIES``); ``ledger``
prints its table. The report bundles its charts' script (Vega) once per
vl-convert version and keeps it (``$CONTEXTLEDGER_CACHE``): ``report`` is timed with the
script kept, as every report after a machine's first runs, and ``report (first)`` with
an empty cache each time. The target (issue 12): the ratio at most 2.
Run: ``.venv/bin/python bench/report.py [--runs DIR] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextledger.report import DEFAULT_POLICIES

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "agentfootprint-9.62" / "runs"


def timed(argv: list[str], cache: str) -> float:
    """Seconds one whole command takes (it must succeed)."""
    environment = {**os.environ, "CONTEXTLEDGER_CACHE": cache}
    started = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, default=CORPUS, help="snapshots to read")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cli = [str(Path(sys.executable).with_name("contextledger"))]
    policies = [f"--policy={policy}" for policy in DEFAULT_POLICIES]
    with tempfile.TemporaryDirectory() as folder:
        report = [*cli, "report", str(args.runs), "-o", folder]
        commands = {
            "report": report,
            "report (first)": report,
            "ledger": [*cli, "ledger", str(args.runs)],
            "whatif": [*cli, "whatif", str(args.runs), *policies],
        }
        kept = f"{folder}/kept"
        timed(report, kept)  # keeps the script, as a machine's first report does
        times: dict[str, list[float]] = {name: [] for name in commands}
        for attempt in range(args.repeat):
            for name, argv in commands.items():
                cache = f"{folder}/empty-{attempt}" if name == "report (first)" else kept
                times[name].append(timed(argv, cache))
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.runs}: whole processes, median of {args.repeat}; load {os.getloadavg()[0]:.1f}")
    for name, value in median.items():
        print(f"  {name:<14} {value:6.2f} s")
    baseline = median["ledger"] + median["whatif"]
    for name in ("report", "report (first)"):
        print(f"  {name} / (ledger + whatif) = {median[name] / baseline:.2f}  (target: at most 2)")


if __name__ == "__main__":
    main()
