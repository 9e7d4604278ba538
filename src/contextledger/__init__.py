"""contextledger: which context pieces earned their tokens, and what another window would have kept.

The public surface, importable from here; each name loads its module on first use,
so the command line does not pay for DuckDB, NumPy or Altair when it needs none of them.

>>> import contextledger as cl
>>> tables = cl.read_runs("data/sample")
>>> cl.compute_ledger(tables).rows().height > 0
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "read_runs": "contextledger.tables.build",
    "load_outcomes": "contextledger.tables.sidecars",
    "load_static_tools": "contextledger.tables.sidecars",
    "RunTables": "contextledger.tables.build",
    "compute_ledger": "contextledger.ledger.compute",
    "merge_ledgers": "contextledger.ledger.compute",
    "Ledger": "contextledger.ledger.compute",
    "with_uncertainty": "contextledger.ledger.stats",
    "outcome_association": "contextledger.ledger.stats",
    "gate_what_if": "contextledger.ledger.gates",
    "connect": "contextledger.ledger.duckdb_views",
    "whatif": "contextledger.jobs.whatif",
    "ingest": "contextledger.jobs.ingest",
    "archive_tables": "contextledger.archive",
}

__all__ = [
    "Ledger",
    "RunTables",
    "archive_tables",
    "compute_ledger",
    "connect",
    "gate_what_if",
    "ingest",
    "load_outcomes",
    "load_static_tools",
    "merge_ledgers",
    "outcome_association",
    "read_runs",
    "whatif",
    "with_uncertainty",
]

if TYPE_CHECKING:
    from contextledger.archive import archive_tables
    from contextledger.jobs.ingest import ingest
    from contextledger.jobs.whatif import whatif
    from contextledger.ledger.compute import Ledger, compute_ledger, merge_ledgers
    from contextledger.ledger.duckdb_views import connect
    from contextledger.ledger.gates import gate_what_if
    from contextledger.ledger.stats import outcome_association, with_uncertainty
    from contextledger.tables.build import RunTables, read_runs
    from contextledger.tables.sidecars import load_outcomes, load_static_tools


def __dir__() -> list[str]:
    """The public names (loaded on first use, so not yet in the module) and the module's
    own dunders: what tab completion should offer, not this file's helper imports."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'contextledger' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
