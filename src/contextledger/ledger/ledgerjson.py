"""LedgerJSON v1, the reference's persisted ledger: export, import, merge.

Byte-compatible with agentfootprint's ``exportJSON`` (compact JSON, its field
names and order, numbers printed the JavaScript way) and readable by its
``importJSON``. The reference silently ignores another version; we refuse it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from contextledger.ledger.compute import LEDGER_COLUMNS, Ledger, merge_ledgers
from contextledger.read.jsjson import js_stringify
from contextledger.tables import schema

LEDGER_JSON_VERSION = 1
_SIGNALS = schema.USED_SIGNAL_COLUMNS


def row_to_json(row: dict[str, Any]) -> dict[str, Any]:
    """One ledger frame row as a reference ``LedgerRow``."""
    return {
        "id": row["id"],
        "kind": row["kind"],
        "offered": row["offered"],
        "approxTokensSpent": row["approx_tokens_spent"],
        "used": row["used"],
        "usedVia": {signal: row[column] for signal, column in _SIGNALS.items() if row[column]},
        "runsSeen": row["runs_seen"],
        "outcomes": {item["label"]: item["runs"] for item in row["outcomes"]},
        "earnRate": row["earn_rate"],
    }


def rows_to_json(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Every row of a ledger frame as reference ``LedgerRow`` objects."""
    return [row_to_json(row) for row in frame.iter_rows(named=True)]


def to_ledger_json(ledger: Ledger) -> dict[str, Any]:
    """``{version: 1, rows, runsRecorded}`` with rows in insertion order, as ``exportJSON``."""
    return {
        "version": LEDGER_JSON_VERSION,
        "rows": rows_to_json(ledger.frame),
        "runsRecorded": ledger.runs_recorded,
    }


def dumps(ledger: Ledger) -> str:
    """LedgerJSON v1 text exactly as ``JSON.stringify(ledger.exportJSON())`` prints it."""
    text = js_stringify(to_ledger_json(ledger))
    assert text is not None
    return text


def from_ledger_json(document: Any, *, source: str = "LedgerJSON") -> Ledger:
    """A :class:`Ledger` from a parsed LedgerJSON v1 document.

    Raises ``ValueError`` naming ``source`` when the version is not 1 or a row is malformed.

    >>> doc = {"version": 1, "runsRecorded": 1, "rows": [{"id": "t", "kind": "tool",
    ...     "offered": 2, "approxTokensSpent": 8, "used": 1, "usedVia": {"tool-called": 1},
    ...     "runsSeen": 1, "outcomes": {"good": 1}, "earnRate": 0.5}]}
    >>> from_ledger_json(doc).frame.select("id", "offered", "earn_rate").row(0)
    ('t', 2, 0.5)
    """
    if not isinstance(document, dict):
        msg = f"{source}: a LedgerJSON document is an object, got {type(document).__name__}"
        raise ValueError(msg)
    version = document.get("version")
    if version != LEDGER_JSON_VERSION:
        msg = (
            f"{source}: unsupported LedgerJSON version {version!r}; "
            f"contextledger reads version {LEDGER_JSON_VERSION}"
        )
        raise ValueError(msg)
    records = []
    for position, row in enumerate(document.get("rows") or []):
        try:
            used_via = row.get("usedVia") or {}
            unknown = set(used_via) - set(_SIGNALS)
            if unknown:
                msg = f"unknown usedVia signal(s) {sorted(unknown)}"
                raise ValueError(msg)
            records.append(
                {
                    "id": str(row["id"]),
                    "kind": str(row["kind"]),
                    "offered": int(row["offered"]),
                    "approx_tokens_spent": int(row["approxTokensSpent"]),
                    "used": int(row["used"]),
                    **{column: int(used_via.get(signal, 0)) for signal, column in _SIGNALS.items()},
                    "runs_seen": int(row["runsSeen"]),
                    "outcomes": [
                        {"label": str(label), "runs": int(runs)}
                        for label, runs in (row.get("outcomes") or {}).items()
                    ],
                    "earn_rate": 0.0,
                }
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            msg = f"{source}: row {position} is not a LedgerRow ({error})"
            raise ValueError(msg) from None
    frame = pl.DataFrame(records, schema=pl.DataFrame(schema.empty(schema.LEDGER)).schema)
    runs_recorded = document.get("runsRecorded", 0)
    if not isinstance(runs_recorded, int):
        msg = f"{source}: runsRecorded must be a whole number, got {runs_recorded!r}"
        raise ValueError(msg)
    # Recompute earn_rate rather than trusting the file.
    return merge_ledgers([Ledger(frame.select(LEDGER_COLUMNS), runs_recorded)])


def load(path: str | Path) -> Ledger:
    """Read a LedgerJSON v1 file."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        msg = f"{path}: not valid JSON ({error.msg} at line {error.lineno})"
        raise ValueError(msg) from None
    return from_ledger_json(document, source=str(path))
