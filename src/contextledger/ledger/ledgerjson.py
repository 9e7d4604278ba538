"""LedgerJSON v1, the reference's persisted ledger: export, import, merge.

Byte-compatible with agentfootprint's ``exportJSON`` (compact JSON, its field
names and order, numbers printed the JavaScript way) and readable by its
``importJSON``. The reference silently ignores another version; we refuse it, and every
count that is not a whole number from 0 to 2**63 - 1 (the reference would add 1.5 or -3
as they come, and an Int64 column would wrap).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

from contextledger.ledger.compute import LEDGER_COLUMNS, Ledger, merge_ledgers
from contextledger.read.jsjson import js_stringify
from contextledger.tables import columns

LEDGER_JSON_VERSION = 1
_SIGNALS = columns.USED_SIGNAL_COLUMNS
#: The largest count a ledger holds (its columns are Int64).
MAX_COUNT = 2**63 - 1


def whole_count(value: Any, field: str) -> int:
    """``value`` as a count, or ``ValueError`` saying what ``field`` holds instead.

    JSON has one number type: ``2`` and ``2.0`` are the same count; ``1.5``, ``-3``,
    ``1e400`` and ``2**70`` are no count at all.

    >>> whole_count(2.0, "offered")
    2
    >>> whole_count(Decimal("1.5"), "offered")
    Traceback (most recent call last):
    ...
    ValueError: offered is 1.5, not a whole number
    >>> whole_count(-3, "runsRecorded")
    Traceback (most recent call last):
    ...
    ValueError: runsRecorded is -3, a count cannot be negative
    """
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        msg = f"{field} must be a whole number, got {json.dumps(value)[:40]}"
        raise ValueError(msg)
    if isinstance(value, float | Decimal):
        if not math.isfinite(value):
            msg = f"{field} is {value}, not a finite number"
            raise ValueError(msg)
        if value != int(value):
            msg = f"{field} is {value}, not a whole number"
            raise ValueError(msg)
        value = int(value)
    if value < 0:
        msg = f"{field} is {value}, a count cannot be negative"
        raise ValueError(msg)
    if value > MAX_COUNT:
        msg = f"{field} is {value}, past the largest count a ledger holds (2**63 - 1)"
        raise ValueError(msg)
    return value


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
    rows = document.get("rows") or []
    if not isinstance(rows, list):
        msg = f"{source}: rows must be an array of LedgerRows, got {json.dumps(rows)[:40]}"
        raise ValueError(msg)
    records = []
    for position, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                msg = f"a LedgerRow is an object, got {json.dumps(row)[:40]}"
                raise ValueError(msg)
            used_via = row.get("usedVia") or {}
            unknown = set(used_via) - set(_SIGNALS)
            if unknown:
                msg = f"unknown usedVia signal(s) {sorted(unknown)}"
                raise ValueError(msg)
            outcomes = row.get("outcomes") or {}
            records.append(
                {
                    "id": str(row["id"]),
                    "kind": str(row["kind"]),
                    "offered": whole_count(row["offered"], "offered"),
                    "approx_tokens_spent": whole_count(
                        row["approxTokensSpent"], "approxTokensSpent"
                    ),
                    "used": whole_count(row["used"], "used"),
                    **{
                        column: whole_count(used_via.get(signal, 0), f"usedVia[{signal!r}]")
                        for signal, column in _SIGNALS.items()
                    },
                    "runs_seen": whole_count(row["runsSeen"], "runsSeen"),
                    "outcomes": [
                        {"label": str(label), "runs": whole_count(runs, f"outcomes[{label!r}]")}
                        for label, runs in outcomes.items()
                    ],
                    "earn_rate": 0.0,
                }
            )
        except KeyError as error:
            msg = f"{source}: row {position}{_named(row)} is not a LedgerRow (no field {error})"
            raise ValueError(msg) from None
        except (TypeError, ValueError, AttributeError) as error:
            msg = f"{source}: row {position}{_named(row)} is not a LedgerRow ({error})"
            raise ValueError(msg) from None
    frame = pl.DataFrame(records, schema=columns.polars_schema(columns.LEDGER))
    try:
        runs_recorded = whole_count(document.get("runsRecorded", 0), "runsRecorded")
    except ValueError as error:
        msg = f"{source}: {error}"
        raise ValueError(msg) from None
    # Recompute earn_rate rather than trusting the file.
    return merge_ledgers([Ledger(frame.select(LEDGER_COLUMNS), runs_recorded)])


def load(path: str | Path) -> Ledger:
    """Read a LedgerJSON v1 file; ``ValueError`` naming the file, the row and the field
    when it is not one (numbers are read exactly, so ``1e400`` is named as written)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
        document = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        msg = f"{path}: not valid JSON ({error.msg} at line {error.lineno})"
        raise ValueError(msg) from None
    except UnicodeDecodeError as error:
        msg = f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
        raise ValueError(msg) from None
    except (ValueError, RecursionError) as error:
        # An integer past Python's digit limit, NaN/Infinity, or nesting too deep.
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        msg = f"{path}: not a LedgerJSON document ({reason})"
        raise ValueError(msg) from None
    return from_ledger_json(document, source=str(path))


def _named(row: Any) -> str:
    """`` (id 'x')`` for a row that has a text id, to find it in a long file."""
    identifier = row.get("id") if isinstance(row, dict) else None
    return f" (id {identifier!r})" if isinstance(identifier, str) else ""


def _no_constant(name: str) -> None:
    """``NaN`` and ``Infinity`` are not JSON (Python's parser accepts them)."""
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)
