"""The parts whose bytes were found as their commits recorded them, remembered so each
is read for its checksum once, not on every ingest.

An entry is a part's size, modification time and CRC-32 when its bytes were last read
and matched; while a part's size and mtime are still those, it is taken as checked.
Changing a file in place gives it a new mtime, so the next reader checks it again; a
change that also restores the old mtime is beyond this (``contextledger check`` reads
every byte, always). An mtime within :data:`RACY_NS` of the check is not remembered: a
change in the same clock tick could keep it (git's "racily clean" entries). Only the
writer (under the archive's lock) saves the list; readers use it as it is; an archive
named by URI remembers nothing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Where the list is kept, beside the commit files (no commit lists it).
VERIFIED = "_manifest/verified.json"

#: How much older than the check an mtime must be to be remembered (two seconds: wider
#: than any filesystem's timestamp granularity here).
RACY_NS = 2_000_000_000


@dataclass
class VerifiedParts:
    """What was checked: ``path -> (size, mtime_ns, crc32)``, for the archive at ``root``
    (None: not a local folder, nothing is remembered).

    >>> import tempfile, zlib
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     part = Path(folder, "part.parquet")
    ...     _ = part.write_bytes(b"rows")
    ...     os.utime(part, ns=(0, 0))  # written long ago
    ...     parts = VerifiedParts.load(Path(folder))
    ...     parts.record("part.parquet", zlib.crc32(b"rows"))
    ...     parts.save()
    ...     again = VerifiedParts.load(Path(folder))
    ...     held = again.holds("part.parquet", zlib.crc32(b"rows"))
    ...     _ = part.write_bytes(b"rowz")  # changed in place: a new mtime
    ...     (held, again.holds("part.parquet", zlib.crc32(b"rows")))
    (True, False)
    """

    root: Path | None
    parts: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    #: Whether the list changed since it was loaded (else :meth:`save` writes nothing).
    changed: bool = False

    @classmethod
    def load(cls, root: Path | None) -> VerifiedParts:
        """The list saved in the archive at ``root``; empty when there is none, or it
        cannot be read (it is only ever a shortcut)."""
        if root is None:
            return cls(None)
        try:
            document = json.loads((root / VERIFIED).read_bytes())
            parts = {
                str(path): (int(size), int(mtime), int(crc))
                for path, (size, mtime, crc) in document["parts"].items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls(root)
        return cls(root, parts)

    def _stat(self, path: str) -> tuple[int, int] | None:
        if self.root is None:
            return None
        try:
            found = os.stat(self.root / path)
        except OSError:
            return None
        return found.st_size, found.st_mtime_ns

    def holds(self, path: str, crc32: int) -> bool:
        """Whether ``path`` was checked to have ``crc32`` and is, by its size and mtime,
        unchanged since."""
        entry = self.parts.get(path)
        if entry is None or entry[2] != crc32:
            return False
        return self._stat(path) == entry[:2]

    def record(self, path: str, crc32: int) -> None:
        """``path``'s bytes were just read and have ``crc32``: remember it, unless its
        mtime is too recent to tell a later change by."""
        found = self._stat(path)
        if found is None or found[1] > time.time_ns() - RACY_NS:
            return
        self.parts[path] = (*found, crc32)
        self.changed = True

    def keep_only(self, paths: set[str]) -> None:
        """Forget parts no commit lists any more (a lost commit's, a removed leftover)."""
        kept = {path: entry for path, entry in self.parts.items() if path in paths}
        self.changed = self.changed or len(kept) != len(self.parts)
        self.parts = kept

    def save(self) -> None:
        """Write the list if it changed (the writer's, under the archive's lock)."""
        if self.root is None or not self.changed:
            return
        listing = {path: list(entry) for path, entry in sorted(self.parts.items())}
        text = json.dumps({"version": 1, "parts": listing}, separators=(",", ":"))
        # renamed into place, never synced: lost in a crash, it is only rebuilt
        target = self.root / VERIFIED
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, target)
        self.changed = False
