"""The archive on disk: hive-partitioned Parquet files, and commits that say which count.

Every write goes to a temporary name and is renamed into place; a batch of files
counts only once its commit file (``_manifest/commits/NNNNNNNN-TOKEN.json``, the
last thing written) lists it. A process killed at any moment leaves at most
files no commit lists; the next writer deletes them and redoes that batch, so every
run is in the archive exactly once and nothing half-written is ever read.

Layout (``run_order`` is the ingest order: a run's place among all runs ever
committed, counted from 0)::

    DIR/archive.json                                     format, partition key
    DIR/runs/accounting=MODE/KEY=VALUE/part-*.parquet    schema.RUNS
    DIR/offers/accounting=MODE/KEY=VALUE/first_in_run=true|false/part-*.parquet
    DIR/uses/accounting=MODE/KEY=VALUE/first_in_run=true|false/part-*.parquet

Offers and uses are split by whether the row is its piece's first in its run (one
row per run and piece): the ledger counts ``runs_seen`` and credits outcomes from
that part alone, and takes insertion order from its first rows.
    DIR/piece_totals/accounting=MODE/KEY=VALUE/part-*.parquet    schema.PIECE_TOTALS

Piece totals are the ledger's counts over one commit's runs of a partition; the
ledger adds them up instead of reading every offer and use again (it still reads
the first offers, to credit outcome labels that may arrive after their runs).
    DIR/streams/KEY=VALUE/part-*.parquet                 schema.STREAMS (one row per run)
    DIR/messages/KEY=VALUE/part-*.parquet                schema.MESSAGES
    DIR/standings/KEY=VALUE/part-*.parquet               schema.STANDINGS (findings ledgers)

The window tables are stored once, not per accounting: ``whatif`` replays them.
Archives written before they were stored have none (``whatif`` says so).
    DIR/outcomes/part-*.parquet                          schema.OUTCOMES
    DIR/_manifest/commits/*.json                         what each batch wrote
    DIR/_manifest/{sources,runs,quarantine}/part-*.parquet
    DIR/quarantine.json                                  what could not be read, for people
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from contextledger.tables import schema

FORMAT = "contextledger-archive"
VERSION = 1
#: Hive keys a user may partition by; the ingest date is the default.
PARTITION_KEYS = ("ingest_date", "ingest_month", "runner_kind", "source_dir")
DEFAULT_PARTITION = "ingest_date"
#: Tables stored once per accounting mode.
PER_MODE_TABLES = ("runs", "offers", "uses", "piece_totals")
#: Tables stored once per run, whatever the accounting: what a window replay reads.
WINDOW_TABLES = ("streams", "messages", "standings")

#: The manifest: every source read (a file, an outcomes file, a synthetic batch).
SOURCES = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # snapshots / outcomes / synth
        pa.field("size", pa.int64()),  # bytes; null: could not be opened
        pa.field("mtime_ns", pa.int64()),
        pa.field("content_hash", pa.string()),  # blake2b-128 of the file's bytes
        pa.field("status", pa.string(), nullable=False),  # read / unreadable
        pa.field("run_ids", pa.list_(pa.string()), nullable=False),  # runs it added
        pa.field("runs_read", pa.int64(), nullable=False),
        pa.field("runs_already_archived", pa.int64(), nullable=False),  # same id, same content
        pa.field("runs_conflicting", pa.int64(), nullable=False),  # same id, other content
        pa.field("problem_count", pa.int64(), nullable=False),
    ]
)

#: The manifest's run index: one row per run the archive holds.
RUN_INDEX = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),  # blake2b-128 of the run's document
        pa.field("run_order", pa.int64(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("source_line", pa.int32()),
    ]
)

#: What a batch could not take in: schema.PROBLEMS, plus the mode it is confined to.
QUARANTINE = pa.schema(
    [
        *schema.PROBLEMS,
        pa.field("accounting", pa.string()),  # null: every mode
        pa.field("ingest_date", pa.string(), nullable=False),
    ]
)


class ArchiveError(Exception):
    """An archive that cannot be opened or written as asked."""


@dataclass(frozen=True)
class DataFile:
    """One committed Parquet file."""

    table: str
    path: str  # relative to the archive
    rows: int
    accounting: str | None = None
    partition: str | None = None
    first_in_run: bool | None = None
    source: str | None = None  # outcomes: the file the labels came from

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if value is not None}


@dataclass(frozen=True)
class Commit:
    """One batch, as its commit file lists it."""

    seq: int
    token: str
    committed_at: str
    ingest_date: str
    first_run_order: int
    run_count: int
    files: tuple[DataFile, ...]

    @property
    def next_run_order(self) -> int:
        return self.first_run_order + self.run_count


@dataclass
class Archive:
    """An archive directory and its committed state (read once, at open).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     archive = Archive.create(folder)
    ...     (archive.partition_by, archive.run_count)
    ('ingest_date', 0)
    """

    root: Path
    partition_by: str
    commits: list[Commit] = field(default_factory=list)

    # ── opening ────────────────────────────────────────────────────
    @staticmethod
    def is_archive(path: str | Path) -> bool:
        """True when ``path`` is a directory holding an archive."""
        return (Path(path) / "archive.json").is_file()

    @classmethod
    def open(cls, root: str | Path) -> Archive:
        """Open an existing archive; raises :class:`ArchiveError` when there is none."""
        root = Path(root)
        try:
            meta = json.loads((root / "archive.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ArchiveError(f"{root}: not a contextledger archive ({error})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ArchiveError(f"{root}: archive format {meta.get('version')!r} is not supported")
        archive = cls(root, meta["partition_by"])
        archive.reload()
        return archive

    @classmethod
    def create(cls, root: str | Path, partition_by: str | None = None) -> Archive:
        """Open ``root``, creating an empty archive there when there is none.

        ``partition_by`` is fixed when the archive is created; naming another one
        later is an error.
        """
        root = Path(root)
        if cls.is_archive(root):
            archive = cls.open(root)
            if partition_by and partition_by != archive.partition_by:
                raise ArchiveError(
                    f"{root} is partitioned by {archive.partition_by}, not {partition_by}"
                )
            return archive
        key = partition_by or DEFAULT_PARTITION
        if key not in PARTITION_KEYS:
            raise ArchiveError(
                f"cannot partition by {key!r}: choose one of {', '.join(PARTITION_KEYS)}"
            )
        if root.exists() and any(not p.name.startswith(".") for p in root.iterdir()):
            raise ArchiveError(f"{root} exists and is not an archive; choose an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "version": VERSION, "partition_by": key}
        write_atomically(root / "archive.json", json.dumps(meta, indent=2).encode())
        return cls(root, key)

    def reload(self) -> None:
        """Re-read the commit files."""
        self.commits = sorted(
            (_read_commit(path) for path in self._commit_dir().glob("*.json")),
            key=lambda commit: commit.seq,
        )

    # ── the committed state ────────────────────────────────────────
    @property
    def run_count(self) -> int:
        """Runs committed (the next run's run_order)."""
        return self.commits[-1].next_run_order if self.commits else 0

    def files(self, table: str, commits: Sequence[Commit] | None = None) -> list[DataFile]:
        """The committed files of ``table``, in commit order."""
        chosen = self.commits if commits is None else commits
        return [file for commit in chosen for file in commit.files if file.table == table]

    def paths(self, files: Sequence[DataFile]) -> list[str]:
        """Absolute paths of ``files``."""
        return [str(self.root / file.path) for file in files]

    # ── writing ────────────────────────────────────────────────────
    @contextlib.contextmanager
    def writing(self) -> Iterator[int]:
        """Hold the archive's write lock; clean up what a killed writer left.

        Yields how many leftover files were removed.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ArchiveError(f"{self.root} is being written by another process") from None
            try:
                self.reload()
                yield self.remove_uncommitted()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def remove_uncommitted(self) -> int:
        """Delete every data or manifest file no commit lists, and temporary files."""
        listed = {file.path for commit in self.commits for file in commit.files}
        removed = 0
        for path in self.root.glob(".*.tmp"):  # archive.json, quarantine.json
            path.unlink()
            removed += 1
        for top in (*PER_MODE_TABLES, *WINDOW_TABLES, "outcomes", "_manifest"):
            base = self.root / top
            if not base.is_dir():
                continue
            for path in base.rglob("*"):
                if not path.is_file():
                    continue
                relative = path.relative_to(self.root).as_posix()
                temporary = path.name.startswith(".") and path.name.endswith(".tmp")
                stray = path.suffix == ".parquet" and relative not in listed
                if temporary or stray:
                    path.unlink()
                    removed += 1
        return removed

    def new_batch(self, ingest_date: str) -> Batch:
        """A batch to fill and commit (under :meth:`writing`)."""
        seq = self.commits[-1].seq + 1 if self.commits else 1
        return Batch(self, seq, secrets.token_hex(4), ingest_date, self.run_count)

    def _commit_dir(self) -> Path:
        return self.root / "_manifest" / "commits"


@dataclass
class Batch:
    """Files written under temporary names until :meth:`commit` names them all at once."""

    archive: Archive
    seq: int
    token: str
    ingest_date: str
    first_run_order: int
    run_count: int = 0
    files: list[DataFile] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.seq:08d}-{self.token}"

    def write(
        self,
        table_name: str,
        table: pa.Table,
        *,
        accounting: str | None = None,
        partition: str | None = None,
        first_in_run: bool | None = None,
        source: str | None = None,
        directory: str | None = None,
    ) -> None:
        """Write ``table`` as one Parquet file of ``table_name`` (nothing when it is empty)."""
        if table.num_rows == 0:
            return
        parts = [directory or table_name]
        if accounting is not None:
            parts.append(f"accounting={accounting}")
        if partition is not None:
            parts.append(f"{self.archive.partition_by}={partition}")
        if first_in_run is not None:
            parts.append(f"first_in_run={'true' if first_in_run else 'false'}")
        relative = "/".join([*parts, f"part-{self.name}.parquet"])
        target = self.archive.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        pq.write_table(table, temporary, compression="zstd", row_group_size=1 << 20)
        _fsync(temporary)
        os.replace(temporary, target)
        self.files.append(
            DataFile(
                table_name, relative, table.num_rows, accounting, partition, first_in_run, source
            )
        )

    def commit(self) -> Commit:
        """Make the batch's files part of the archive (one atomic rename)."""
        commit = Commit(
            self.seq,
            self.token,
            dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            self.ingest_date,
            self.first_run_order,
            self.run_count,
            tuple(self.files),
        )
        document = {
            "seq": commit.seq,
            "token": commit.token,
            "committed_at": commit.committed_at,
            "ingest_date": commit.ingest_date,
            "first_run_order": commit.first_run_order,
            "run_count": commit.run_count,
            "files": [file.to_json() for file in commit.files],
        }
        path = self.archive._commit_dir() / f"{self.name}.json"
        write_atomically(path, json.dumps(document, indent=1).encode())
        self.archive.commits.append(commit)
        return commit


def _read_commit(path: Path) -> Commit:
    document = json.loads(path.read_text(encoding="utf-8"))
    return Commit(
        document["seq"],
        document["token"],
        document["committed_at"],
        document["ingest_date"],
        document["first_run_order"],
        document["run_count"],
        tuple(DataFile(**file) for file in document["files"]),
    )


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


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):
        _fsync(path)


#: ``YYYY-MM-DD``, or a full ISO timestamp (``YYYY-MM-DDTHH:MM[:SS[.f]][Z|+HH:MM]``).
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ISO_TIMESTAMP = re.compile(
    _ISO_DATE.pattern
    + r"[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:?[0-9]{2})?"
)


def ingest_date_text(value: str, name: str = "date") -> str:
    """``value`` as the ``YYYY-MM-DD`` ingest date an archive stores and filters by.

    A full ISO timestamp is taken as its UTC date (one without an offset as UTC
    already). Anything else, the compact ``20261101`` included (stored dates are
    compared as text, so it would select nothing), raises ``ValueError`` naming
    ``name`` and the value.

    >>> ingest_date_text("2026-11-01"), ingest_date_text("2026-11-01T23:30:00-02:00")
    ('2026-11-01', '2026-11-02')
    """
    text = value.strip()
    try:
        if _ISO_DATE.fullmatch(text):
            return dt.date.fromisoformat(text).isoformat()
        if _ISO_TIMESTAMP.fullmatch(text):
            moment = dt.datetime.fromisoformat(text)
            if moment.tzinfo is not None:
                moment = moment.astimezone(dt.UTC)
            return moment.date().isoformat()
    except ValueError:
        pass
    msg = f"{name} {value!r} is not a date: give YYYY-MM-DD (or a full ISO timestamp)"
    raise ValueError(msg)


def partition_value(key: str, ingest_date: str, runner_kind: str | None, source_path: str) -> str:
    """The hive value of partition ``key`` for one run, escaped for a directory name."""
    if key == "ingest_date":
        value = ingest_date
    elif key == "ingest_month":
        value = ingest_date[:7]
    elif key == "runner_kind":
        value = runner_kind or "unknown"
    else:
        value = Path(source_path).parent.name or "."
    return quote(value, safe="-_.")
