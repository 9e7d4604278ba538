"""Parquet archives of the run tables: ingest snapshots once, recompute from the tables.

``ingest`` appends both accountings' tables to a hive-partitioned dataset with a
manifest that makes it idempotent and crash-safe; ``ArchiveTables`` reads it lazily
for the ledger and the DuckDB views; ``verify_archive`` names what is damaged. See
``store`` for the layout.
"""

from contextledger.archive.ingest import IngestReport, ingest
from contextledger.archive.store import (
    Archive,
    ArchiveDamaged,
    ArchiveError,
    ArchiveProblem,
    verify_archive,
)
from contextledger.archive.tables import ArchiveTables, Selection, archive_tables

__all__ = [
    "Archive",
    "ArchiveDamaged",
    "ArchiveError",
    "ArchiveProblem",
    "ArchiveTables",
    "IngestReport",
    "Selection",
    "archive_tables",
    "ingest",
    "verify_archive",
]
