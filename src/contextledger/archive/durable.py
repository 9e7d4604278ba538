"""Writes that survive a crash: the archive's write lock, fsync, write-then-rename.

Apart from the archive's layout because nothing here knows it: the same three
steps keep ``archive.json``, the commit files and ``quarantine.json`` whole.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from contextledger.archive.location import ArchiveError

#: The archives this process holds the write lock of (by ``.lock`` file identity).
_HELD: set[tuple[int, int]] = set()
_HELD_GUARD = threading.Lock()


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold ``root``'s write lock, or say another process holds it.

    A POSIX record lock (``lockf``), not ``flock``: a forked child (a reading worker)
    does not inherit it, so a worker that outlives a killed ingest cannot keep the
    archive locked. Record locks are per process, so a set of held locks keeps two
    writers in this process apart too.
    """
    root.mkdir(parents=True, exist_ok=True)
    busy = ArchiveError(f"{root} is being written by another process")
    with (root / ".lock").open("a+") as handle:
        status = os.fstat(handle.fileno())
        key = (status.st_dev, status.st_ino)
        with _HELD_GUARD:
            if key in _HELD:
                raise busy
            try:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno in (errno.EACCES, errno.EAGAIN):
                    raise busy from None
                raise
            _HELD.add(key)
        try:
            yield
        finally:
            with _HELD_GUARD:
                _HELD.discard(key)
                fcntl.lockf(handle, fcntl.LOCK_UN)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def fsync(path: Path) -> None:
    """Flush ``path`` (a file or a directory) to disk: a rename is durable only after."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):
        fsync(path)
