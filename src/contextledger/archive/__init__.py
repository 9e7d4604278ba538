"""Parquet archives of the run tables: the layout, its commits and manifest, selection.

Storage only: it knows the schema, not the engines. ``jobs.ingest`` writes an
archive (idempotent, crash-safe); ``ArchiveTables`` reads it lazily for the ledger
and the DuckDB views; ``verify_archive`` names what is damaged. See ``store`` for
the layout.
"""

from contextledger.archive.damage import ArchiveDamaged, ArchiveProblem
from contextledger.archive.selection import Selection
from contextledger.archive.store import Archive, ArchiveError
from contextledger.archive.tables import ArchiveTables, archive_tables
from contextledger.archive.verify import verify_archive

__all__ = [
    "Archive",
    "ArchiveDamaged",
    "ArchiveError",
    "ArchiveProblem",
    "ArchiveTables",
    "Selection",
    "archive_tables",
    "verify_archive",
]
