"""The command line as a user waits for it: whole processes, start to exit.

Each command is run ``--runs`` times (alternating, so load on the machine falls on
all of them alike) and reported as the median wall time and the median CPU time
(user + sys of the process, from ``getrusage(RUSAGE_CHILDREN)``: less noisy than wall
time on a loaded machine), against two floors measured in the same run:

- ``python -c pass``: the interpreter's own start, under which no command can go;
- ``import polars, pyarrow``: what any command that computes over Arrow pays first.

Then ``contextledger --help`` (issue 12's target: under 0.3 s) and ``contextledger
ledger CORPUS`` (issue 21's targets: a third of agentfootprint's own engine's wall time
and half its CPU time, on the same runs in the same bench run).

The reference is measured in the same run: ``node bench/reference/driver.mjs``, which
computes agentfootprint 9.62.0's own ``contextLedger()`` over the corpus and checks its
rows equal the oracle's. agentfootprint 9.62.0 is not on the npm registry (the corpus
was made from its TypeScript source), so the bench needs a checkout of its source
(``--agentfootprint-src DIR`` or ``AGENTFOOTPRINT_SRC``; commit in
``bench/reference/package.json``); it installs footprintjs 9.24.0 and esbuild with
``npm ci`` into a cache folder outside the repository, bundles the ledger from that
source there, and times the driver. Without node, npm, the registry or the source it
says why and falls back to the figure recorded in issue 12, labelled as such.

Run: ``.venv/bin/python bench/cli.py [--corpus DIR] [--runs 7] [--agentfootprint-src DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "agentfootprint-9.62" / "runs"
REFERENCE = REPO / "bench" / "reference"
#: agentfootprint 9.62's ledger over the 301 corpus runs, end to end, as recorded in issue 12.
REFERENCE_SECONDS = 6.4
COMMAND = [sys.executable, "-c", "from contextledger.cli import main; main()"]


class Unavailable(Exception):
    """Why the reference cannot be run here (printed, then the recorded figure is used)."""


def elapsed(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one process, its output discarded; it must
    succeed. The CPU counts every process it started, including those it leaves to be
    reaped by others (a forkserver and its workers): this process is their subreaper."""
    _adopt_orphans()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=cwd, env=env
    )
    wall = time.perf_counter() - begin
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def reap_orphans() -> None:
    """Wait for the timed command's orphans (a forkserver, its workers), adopted by this
    subreaper: they end when it does, and their CPU counts once they are waited for."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def _adopt_orphans() -> None:
    """Become the subreaper of what the commands start (Linux ``PR_SET_CHILD_SUBREAPER``),
    so their orphans' CPU time comes back here when they are reaped."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def compile_package() -> str:
    """Write the package's bytecode, as ``pip install`` does, and say where.

    Under ``PYTHONDONTWRITEBYTECODE`` (set on some machines) nothing else writes it, and
    every timed run would compile the package's source again: about 0.1 s of CPU in
    the command and again in its forkserver, which no installed copy pays."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("contextledger")
    if spec is None or not spec.submodule_search_locations:
        return "contextledger not importable here; its bytecode was not checked"
    folder = spec.submodule_search_locations[0]
    compileall.compile_dir(folder, quiet=1)
    return f"written for {folder} (what an installed copy has)"


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contextledger" / "bench-reference"


def prepare_reference(source: Path | None, corpus_root: Path) -> list[str]:
    """The argv that runs agentfootprint's ledger over the corpus, installed and checked
    once in a cache folder; raises Unavailable saying why not."""
    pin = json.loads((REFERENCE / "package.json").read_text())["agentfootprint"]
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not on PATH")
    if source is None:
        raise Unavailable(
            f"agentfootprint {pin['version']} is not on the npm registry; give a checkout "
            "of its source with --agentfootprint-src or AGENTFOOTPRINT_SRC"
        )
    try:
        version = json.loads((source / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError) as error:
        raise Unavailable(f"{source}: not an agentfootprint checkout ({error})") from None
    if version != pin["version"]:
        raise Unavailable(f"{source} is agentfootprint {version}, not {pin['version']}")
    lock = (REFERENCE / "package-lock.json").read_bytes()
    folder = _cache_root() / hashlib.sha256(lock + str(source.resolve()).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", "driver.mjs"):
        shutil.copyfile(REFERENCE / name, folder / name)
    steps = []
    if not (folder / "node_modules" / "footprintjs").is_dir():
        steps.append(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"])
    steps.append(
        [
            str(folder / "node_modules" / ".bin" / "esbuild"),
            str(source / pin["entry"]),
            "--bundle",
            "--format=esm",
            "--platform=node",
            "--external:footprintjs",
            "--log-level=error",
            f"--outfile={folder / 'ledger.mjs'}",
        ]
    )
    driver = ["node", str(folder / "driver.mjs"), str(corpus_root), str(folder / "ledger.mjs")]
    for step in [*steps, driver]:
        done = subprocess.run(step, cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise Unavailable(f"{' '.join(step[:2])} failed: {reason[-1] if reason else ''}")
    return driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="The runs folder.")
    parser.add_argument("--runs", type=int, default=7, help="Repetitions of each command.")
    parser.add_argument(
        "--agentfootprint-src",
        type=Path,
        default=Path(os.environ["AGENTFOOTPRINT_SRC"])
        if "AGENTFOOTPRINT_SRC" in os.environ
        else None,
        help="A checkout of agentfootprint 9.62.0's source, to measure the reference.",
    )
    args = parser.parse_args()
    compiled = compile_package()
    print(f"bytecode: {compiled}")
    ours = f"contextledger ledger {args.corpus.name}/"
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "import polars, pyarrow (floor)": [sys.executable, "-c", "import polars, pyarrow"],
        "contextledger --help": [*COMMAND, "--help"],
        ours: [*COMMAND, "ledger", str(args.corpus)],
    }
    reference = "agentfootprint (node driver.mjs)"
    try:
        cases[reference] = prepare_reference(args.agentfootprint_src, args.corpus.parent)
    except Unavailable as why:
        print(f"reference not measured: {why}")
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            wall, cpu = elapsed(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    median = {name: statistics.median(values) for name, values in walls.items()}
    cpu = {name: statistics.median(values) for name, values in cpus.items()}
    floor = median["python -c pass (floor)"]
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{args.runs} runs each, medians, {os.cpu_count()} cores, load {load} (a shared machine)")
    print(f"  {'':<40} {'wall':>8}  {'(range)':<11} {'x floor':>7} {'cpu':>8}")
    for name, seconds in median.items():
        spread = f"{min(walls[name]):.2f}-{max(walls[name]):.2f}"
        print(
            f"  {name:<40} {seconds:6.3f} s  ({spread})  {seconds / floor:5.1f}x {cpu[name]:6.3f} s"
        )
    helped = median["contextledger --help"]
    print(f"--help: {helped:.3f} s (target under 0.3 s: {'met' if helped < 0.3 else 'not met'})")
    if reference in median:
        wall_ratio = median[reference] / median[ours]
        cpu_ratio = cpu[reference] / cpu[ours]
        print(
            f"ledger: {median[ours]:.2f} s ({cpu[ours]:.2f} s cpu) against agentfootprint's "
            f"{median[reference]:.2f} s ({cpu[reference]:.2f} s cpu), measured in this run: "
            f"reference / ours = {wall_ratio:.2f} wall (target 3: "
            f"{'met' if wall_ratio >= 3 else 'not met'}), {cpu_ratio:.2f} cpu (target 2: "
            f"{'met' if cpu_ratio >= 2 else 'not met'})"
        )
    else:
        print(
            f"ledger: {median[ours]:.2f} s against agentfootprint's RECORDED {REFERENCE_SECONDS} s "
            f"(reference / ours = {REFERENCE_SECONDS / median[ours]:.2f}; target 3; not measured "
            "in this run, so load here counts against us)"
        )


if __name__ == "__main__":
    main()
