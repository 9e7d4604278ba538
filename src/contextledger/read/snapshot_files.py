"""Which files under the input paths are snapshots, and how their names are shown.

Apart from :mod:`.snapshot` (which opens and decodes them) because finding is a walk
over folders that never opens a file: names decide, and what is left unread is listed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The names read from input folders (compared in lower case): gzip is detected by
#: content, so the name only says JSON or JSON Lines. A bare ``.gz`` says neither, and
#: folders hold other archives (``.tar.gz``), so it is read only when named as a file.
SNAPSHOT_SUFFIXES = (".json.gz", ".jsonl.gz", ".ndjson.gz", ".json", ".jsonl", ".ndjson")
JSON_LINES_SUFFIXES = (".jsonl.gz", ".ndjson.gz", ".jsonl", ".ndjson")


def snapshot_suffix(name: str) -> str | None:
    """The snapshot suffix ``name`` ends in, in any case (as written); None if none.

    >>> snapshot_suffix("s0003-loop.JSON.GZ"), snapshot_suffix("s0073-loop.gz")
    ('.JSON.GZ', None)
    """
    lowered = name.lower()
    found = next((suffix for suffix in SNAPSHOT_SUFFIXES if lowered.endswith(suffix)), None)
    return None if found is None else name[-len(found) :]


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as text to show and to store in a table: bytes of its name that are not
    UTF-8 are escaped (``\\xff``), so the text always encodes.

    >>> display_path(os.fsdecode(b"runs/bad\\xff.json"))
    'runs/bad\\\\xff.json'
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@dataclass
class SnapshotFiles:
    """What :func:`find_snapshot_files` found: the files to read, and the files in input
    folders it left unread because of their names (shown as :func:`display_path`)."""

    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: Files of 0 bytes, never opened: no run in them (a writer that has not written
    #: yet, or a ``touch``), so no problem either; :func:`describe_empty` names them.
    empty: list[str] = field(default_factory=list)


def find_snapshot_files(paths: Sequence[str | Path]) -> SnapshotFiles:
    """Every snapshot file under ``paths``: files as given (read whatever their name),
    directories walked in name order, taking the names :data:`SNAPSHOT_SUFFIXES` end
    in, in any case; the other files there are listed in ``skipped``, never opened, and
    files of 0 bytes (named or found) in ``empty``.

    Symlinked folders are followed, each real folder once; a link back to a folder it
    is inside (a loop) is listed, not followed, as is anything with a snapshot's name
    that is not a regular file (a FIFO, a device) and a folder that cannot be listed:
    :func:`.snapshot.iter_documents` names each and never opens it.
    """
    found = SnapshotFiles()
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            _walk(path, found)
        else:
            _take_file(path, found)
    return found


def _take_file(path: Path, found: SnapshotFiles) -> None:
    """``path`` to be read, or listed as empty when it is a regular file of 0 bytes
    (anything that cannot be stat'ed is read, so the reader says why)."""
    try:
        info = path.stat()
    except OSError:
        found.files.append(path)
        return
    if stat.S_ISREG(info.st_mode) and info.st_size == 0:
        found.empty.append(display_path(path))
    else:
        found.files.append(path)


def describe_empty(empty: Sequence[str]) -> list[str]:
    """One line per file of 0 bytes: named, skipped, not an error (no run is in it).

    >>> describe_empty(["in/a.json"])
    ['skipped in/a.json: empty file (0 bytes, no run in it)']
    """
    return [f"skipped {path}: empty file (0 bytes, no run in it)" for path in empty]


def describe_skipped(skipped: Sequence[str], shown: int = 3) -> str | None:
    """One line naming the files in input folders not read because of their names: how
    many, the first ``shown``, and which names are read; None when there are none.

    >>> line = describe_skipped(["in/a.gz"]) or ""
    >>> line.startswith("not read: 1 file in input folders"), line.endswith("): in/a.gz")
    (True, True)
    """
    if not skipped:
        return None
    suffixes = ", ".join(sorted(SNAPSHOT_SUFFIXES))
    files = f"{len(skipped)} file{'s' if len(skipped) > 1 else ''}"
    listed = ", ".join(skipped[:shown]) + (", ..." if len(skipped) > shown else "")
    return (
        f"not read: {files} in input folders without a snapshot suffix ({suffixes}, in any "
        f"case; name a file to read it whatever its name): {listed}"
    )


_Identity = tuple[int, int]


def _walk(root: Path, found: SnapshotFiles) -> None:
    """Depth first in name order (what sorting the paths gives), following symlinks.

    The folders ``root`` itself is inside count as ancestors too: a link up to one of
    them (``up -> ..``) is a loop, not a way into the tree around the input.
    """
    seen: set[_Identity] = set()
    stack: list[tuple[Path, bool, tuple[_Identity, ...]]] = [(root, True, _outer(root))]
    while stack:
        path, is_folder, ancestors = stack.pop()
        if not is_folder:
            _take_file(path, found)
            continue
        try:
            info = path.stat()
            with os.scandir(path) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            found.files.append(path)  # iter_documents says why it cannot be listed
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in ancestors:
            found.files.append(path)  # a loop: named once, not followed
            continue
        if identity in seen:
            continue  # reached again through another link: read once
        seen.add(identity)
        inside = (*ancestors, identity)
        children: list[tuple[Path, bool, tuple[_Identity, ...]]] = []
        for entry in entries:
            try:
                child_is_folder = entry.is_dir()
            except OSError:
                child_is_folder = False
            if child_is_folder or snapshot_suffix(entry.name):
                children.append((Path(entry.path), child_is_folder, inside))
            else:
                found.skipped.append(display_path(entry.path))
        stack.extend(reversed(children))


def _outer(root: Path) -> tuple[_Identity, ...]:
    """The identities of the real folders ``root`` is inside (its resolved parents)."""
    outer = []
    for folder in root.resolve().parents:
        with contextlib.suppress(OSError):
            info = folder.stat()
            outer.append((info.st_dev, info.st_ino))
    return tuple(outer)
