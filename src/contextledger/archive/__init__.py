"""Parquet archives of the run tables: ingest snapshots once, recompute from the tables.

``ingest`` appends both accountings' tables to a hive-partitioned dataset with a
manifest that makes it idempotent and crash-safe; ``ArchiveTables`` reads it lazily
for the ledger and the DuckDB views. See ``store`` for the layout.
"""

from contextledger.archive.ingest import IngestReport, ingest
from contextledger.archive.store import Archive, ArchiveError
from contextledger.archive.tables import ArchiveTables, Selection, archive_tables

__all__ = [
    "Archive",
    "ArchiveError",
    "ArchiveTables",
    "IngestReport",
    "Selection",
    "archive_tables",
    "ingest",
]
