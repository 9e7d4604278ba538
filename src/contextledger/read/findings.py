"""The model's findings, as a snapshot's findings ledger records them.

Newer agentfootprint files the model's standing of each tool result (``fact``,
``open``, ``noise``, ``ruled-out``) under ``findingsLedger``; the ledger-fact pin
keeps what the model declared a fact. This reads those rows from a run.
"""

from __future__ import annotations

from typing import Any

from contextledger.read.commitlog import ABSENT, commit_value_at
from contextledger.read.snapshot import Run

#: The key newer agentfootprint files the model's findings under.
FINDINGS_LEDGER_KEY = "findingsLedger"
#: The standings a model may file on a tool result, most valuable first.
STANDINGS = ("fact", "open", "ruled-out", "noise")


def standings_from_snapshot(run: Run) -> list[dict[str, Any]]:
    """The ``standing`` rows of a run's findings ledger (final value), in ledger order.

    Rows that are not standings, or lack an id, a known standing or an iteration,
    are skipped (the ledger's writer drops what it cannot read, too).
    """
    log = run.snapshot.commit_log or []
    if not log:
        return []
    ledger = commit_value_at(log, len(log) - 1, FINDINGS_LEDGER_KEY)
    if ledger is ABSENT or not isinstance(ledger, list):
        return []
    rows = []
    for row in ledger:
        if not isinstance(row, dict) or row.get("kind") != "standing":
            continue
        call_id, standing, iteration = (row.get(k) for k in ("toolCallId", "standing", "iteration"))
        if not isinstance(call_id, str) or standing not in STANDINGS:
            continue
        if not isinstance(iteration, int) or isinstance(iteration, bool):
            continue
        rows.append(
            {
                "run_id": run.run_id,
                "tool_call_id": call_id,
                "standing": standing,
                "iteration": iteration,
                "source": "snapshot",
                "source_line": None,
            }
        )
    return rows
