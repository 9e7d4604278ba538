"""The other frameworks' audit of one batch: window by window against as arrays, in one run.

What is measured, in this one process, on the first batch (``STREAM_BATCH_RUNS``, 2,000
runs) of an archive's window tables, rebuilt as streams once (not timed): the audit of the
frameworks' policies the report audits over an archive (``FRAMEWORK_DEFAULTS`` but those
reading tool text), as :func:`~contextledger.window.audit.audit_table_exact` (each window
replayed and audited in Python) and :func:`~contextledger.window.audit_batch.audit_served`
(the stateless policies' windows laid out for the whole batch from arrays of its
histories, :mod:`~contextledger.window.framework_ranges`, the others replayed window by
window, then all audited as arrays), the same with every policy replayed window by
window (as before the ranges: ``ranged`` made to refuse every policy), and the replays
alone; each ``--repeat`` times in turn, CPU seconds (user + sys), medians, the ratio of
the two ``audit_served`` and the load average. The audits' rows are checked equal once
(``check_exact``). Run:
``.venv/bin/python bench/framework_audit.py [--archive DIR] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from polars.testing import assert_frame_equal

from contextledger.archive.store import Archive
from contextledger.archive.windows import stream_batches
from contextledger.jobs.compare import FRAMEWORK_DEFAULTS
from contextledger.window import audit_batch
from contextledger.window.audit import (
    audit_table_exact,
    parse_audit_policy,
    served_windows,
    without_tool_text,
)
from contextledger.window.audit_batch import audit_served
from contextledger.window.frameworks._common import tokens_at_rate

ARCHIVE = Path(tempfile.gettempdir()) / "contextledger-bench-report" / "synthetic-10000"


def cpu_seconds(work: Callable[[], object]) -> float:
    """User + sys CPU seconds of one call of ``work``."""
    before = os.times()
    work()
    after = os.times()
    return (after.user - before.user) + (after.system - before.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    streams, standings = next(stream_batches(Archive.open(str(args.archive))))
    policies, _ = without_tool_text(
        [(spec, parse_audit_policy(spec)) for spec in FRAMEWORK_DEFAULTS]
    )
    ranged = audit_batch.ranged

    def every_window_replayed() -> object:
        audit_batch.ranged = lambda policy: False
        try:
            return audit_served(streams, policies, standings)
        finally:
            audit_batch.ranged = ranged

    exact = audit_table_exact(streams, policies, standings)
    assert_frame_equal(audit_served(streams, policies, standings), exact, check_exact=True)
    assert_frame_equal(every_window_replayed(), exact, check_exact=True)  # type: ignore[arg-type]

    def replays() -> None:
        for stream in streams:
            tokens_of = tokens_at_rate(stream.tokens_per_char())
            for _, policy in policies:
                served_windows(stream, policy, None, tokens_of)

    cases: dict[str, Callable[[], object]] = {
        "window by window (audit_table_exact)": lambda: audit_table_exact(
            streams, policies, standings
        ),
        "every window replayed (before)": every_window_replayed,
        "stateless ones as ranges (audit_served)": lambda: audit_served(
            streams, policies, standings
        ),
        "their replays alone": replays,
    }
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, work in cases.items():
            seconds[name].append(cpu_seconds(work))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{len(streams)} runs, {len(policies)} policies; CPU, medians of {args.repeat}")
    for name, values in seconds.items():
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"  {name:<40} {statistics.median(values):6.2f} s  ({spread})")
    before, now = (
        statistics.median(seconds[name])
        for name in ("every window replayed (before)", "stateless ones as ranges (audit_served)")
    )
    print(f"  before / ranges: {before / now:.2f}x CPU")
    print(f"  load {load}; rows equal (check_exact)")


if __name__ == "__main__":
    main()
