"""Report speed: ``contextledger report`` against ``ledger`` + ``whatif`` on the same runs.

What is measured: whole processes (imports included, as a user waits for them), wall
and CPU time (user + sys of the command and every process it starts: bench/cli.py's
``elapsed``), each command run ``--repeat`` times in turn (report, report first,
ledger, whatif, report, ...) so the machine's other load falls on all alike; medians
are printed with the ratios report / (ledger + whatif). ``report`` writes its page,
CSVs and charts as SVG and PNG (its defaults); ``whatif`` replays the report's five
default policies (``contextledger.report.DEFAULT_POLICIES``); ``ledger`` prints its
table; ``compare`` audits the report's whole set of policies (its default,
``COMPARE_POLICIES``: the five and the other frameworks' the cost chart shows), so
``report / (ledger + compare)`` is what the page itself costs beyond the same analysis.
The package's bytecode is written first, as ``pip install`` does.

Two reports: ``report`` with the chart script (Vega, bundled once per vl-convert
version) kept in ``$CONTEXTLEDGER_CACHE``, as every report after a machine's first, and
``report (first)`` with an empty cache each time, as a new user's first report.

Two sources: the corpus's snapshots, and an archive of ``--synthetic`` runs written by
``contextledger synth`` (kept in ``--synthetic-dir`` for the next bench run).
The target (issue 21): both ratios at most 2 on both.

``--baseline SRC`` also times ``report`` (chart script kept) and ``compare`` of the
package under ``SRC`` (a source folder holding ``contextledger``, e.g. ``git archive
main src`` unpacked) in the same rounds, so a change is measured before and after in one run.
Run: ``.venv/bin/python bench/report.py [--corpus DIR] [--synthetic 10000] [--repeat 3]
[--baseline SRC]``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import COMMAND, compile_package, elapsed  # bench/cli.py

from contextledger.report import DEFAULT_POLICIES

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "agentfootprint-9.62" / "runs"
TARGET = 2.0


def timed(argv: list[str], cache: str, source: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one whole command (it must succeed), charts' script kept
    in ``cache``; the package imported from ``source`` when given."""
    env = {**os.environ, "CONTEXTLEDGER_CACHE": cache}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return elapsed(argv, env=env)


def synthetic_archive(runs: int, folder: Path) -> Path:
    """An archive of ``runs`` synthetic runs in ``folder`` (written once, then reused)."""
    archive = folder / f"synthetic-{runs}"
    subprocess.run(
        [*COMMAND, "synth", "--runs", str(runs), "--archive", str(archive)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return archive


def measure(source: Path, repeat: int, folder: str, baseline: Path | None = None) -> None:
    """Time the four commands on ``source`` (and ``report`` of ``baseline``'s package)
    and print medians and ratios."""
    policies = [f"--policy={policy}" for policy in DEFAULT_POLICIES]
    report = [*COMMAND, "report", str(source), "-o", f"{folder}/out"]
    commands = {
        "report": report,
        "report (first)": report,
        "ledger": [*COMMAND, "ledger", str(source)],
        "whatif": [*COMMAND, "whatif", str(source), *policies],
        "compare": [*COMMAND, "compare", str(source)],
    }
    if baseline is not None:
        commands["report (baseline)"] = report
        commands["compare (baseline)"] = commands["compare"]
    kept = f"{folder}/kept"
    timed(report, kept)  # keeps the script, as a machine's first report does
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for attempt in range(repeat):
        for name, argv in commands.items():
            cache = f"{folder}/empty-{source.name}-{attempt}" if name == "report (first)" else kept
            wall, cpu = timed(argv, cache, baseline if name.endswith("(baseline)") else None)
            walls[name].append(wall)
            cpus[name].append(cpu)
    wall = {name: statistics.median(values) for name, values in walls.items()}
    cpu = {name: statistics.median(values) for name, values in cpus.items()}
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{source}: whole processes, medians of {repeat}, {os.cpu_count()} cores, load {load}")
    print(f"  {'':<16} {'wall':>8}  {'(range)':<13} {'cpu':>8}")
    for name, seconds in wall.items():
        spread = f"{min(walls[name]):.2f}-{max(walls[name]):.2f}"
        print(f"  {name:<16} {seconds:6.2f} s  ({spread:<11}) {cpu[name]:6.2f} s")
    for name in ("report", "report (first)"):
        by_wall = wall[name] / (wall["ledger"] + wall["whatif"])
        by_cpu = cpu[name] / (cpu["ledger"] + cpu["whatif"])
        verdict = "met" if by_wall <= TARGET else "not met"
        print(
            f"  {name} / (ledger + whatif): {by_wall:.2f}x wall ({verdict}: at most "
            f"{TARGET:g}), {by_cpu:.2f}x cpu"
        )
    for name in ("report", "report (first)"):
        by_wall = wall[name] / (wall["ledger"] + wall["compare"])
        by_cpu = cpu[name] / (cpu["ledger"] + cpu["compare"])
        print(f"  {name} / (ledger + compare): {by_wall:.2f}x wall, {by_cpu:.2f}x cpu")
    if baseline is not None:
        for name in ("report", "compare"):
            by_wall = wall[name] / wall[f"{name} (baseline)"]
            by_cpu = cpu[name] / cpu[f"{name} (baseline)"]
            print(f"  {name} / {name} (baseline): {by_wall:.2f}x wall, {by_cpu:.2f}x cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="snapshots to read")
    parser.add_argument(
        "--synthetic", type=int, default=10_000, help="runs in the synthetic archive (0: none)"
    )
    parser.add_argument(
        "--synthetic-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "contextledger-bench-report",
        help="where the synthetic archive is written and kept",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--baseline", type=Path, help="a source folder whose package's report is timed beside"
    )
    args = parser.parse_args()
    print(f"bytecode: {compile_package()}")
    if args.baseline is not None:
        compileall.compile_dir(args.baseline, quiet=1)
        print(f"baseline: {args.baseline}")
    sources = [args.corpus]
    if args.synthetic:
        sources.append(synthetic_archive(args.synthetic, args.synthetic_dir))
    with tempfile.TemporaryDirectory() as folder:
        for source in sources:
            measure(source, args.repeat, folder, args.baseline)


if __name__ == "__main__":
    main()
