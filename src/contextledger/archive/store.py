"""The archive on disk: hive-partitioned Parquet files, and commits that say which count.

Every write goes to a temporary name and is renamed into place; a batch of files
counts only once its commit file (``_manifest/commits/NNNNNNNN-TOKEN.json``, the
last thing written) lists it. A process killed at any moment leaves at most
files no commit lists; the next writer deletes them and redoes that batch, so every
run is in the archive exactly once and nothing half-written is ever read.

Damage done from outside (a truncated or deleted data file, a garbled or deleted
commit file) is found when the archive is opened, from the commit files, the head
and file sizes alone: commits are numbered 1, 2, ... with no gap up to the head (the
latest commit's number, written after it), and each commit records its files' rows
and bytes; each commit's runs continue the run orders of the one before. A commit
with a damaged file, or out of that chain, is left out whole, and named
(:attr:`Archive.damage`); :func:`.verify.verify_archive` also reads every row.

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
    DIR/run_totals/accounting=MODE/KEY=VALUE/part-*.parquet      schema.RUN_TOTALS

Run totals are those counts per run and piece: a ledger of some runs (a label or run-id
filter) adds up the selected runs' rows instead of reading every offer and use. Commits
written before they were stored are read from their offers and uses.
    DIR/label_credit/accounting=MODE/KEY=VALUE/part-*.parquet    schema.LABEL_CREDIT

Label credit is the outcome credit of one commit's runs of a partition, for the labels
the archive held when the commit was written (its own outcomes files included): the
ledger adds it up instead of joining every first offer with the labels, as long as no
later commit's labels name those runs (a commit lists the earlier commits whose runs its
labels, or the labels they replace, name: ``relabels``). Commits written before label
credit was stored (``label_credit`` false) are credited from their first offers.
    DIR/streams/KEY=VALUE/part-*.parquet                 schema.STREAMS (one row per run)
    DIR/messages/KEY=VALUE/part-*.parquet                schema.MESSAGES
    DIR/standings/KEY=VALUE/part-*.parquet               schema.STANDINGS (findings ledgers)

The window tables are stored once, not per accounting: ``whatif`` replays them.
Archives written before they were stored have none (``whatif`` says so).
    DIR/spans/KEY=VALUE/part-*.parquet                   TRACE_SPANS (trace runs' span records)

A trace run's spans are kept (encoded records, not the OTLP JSON) so that spans of it
arriving in a later ingest can be merged: the merged run takes the archived run's
place (its run order, commit, partition and ingest date), the later commit writing new
versions of that commit's files of the run's partition and retiring the old ones
(``replaces`` in its commit file, :class:`Replacement`; :meth:`Archive.reload` applies
them, so every reader lists the new versions under the commit that added the run).
    DIR/outcomes/part-*.parquet                          schema.OUTCOMES
    DIR/_manifest/commits/*.json                         what each batch wrote
    DIR/_manifest/head.json                              the latest commit's number
    DIR/_manifest/{sources,runs,quarantine}/part-*.parquet
    DIR/quarantine.json                                  what could not be read, for people
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import secrets
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from contextledger.archive.damage import ArchiveDamaged, ArchiveProblem
from contextledger.archive.durable import fsync, locked, write_atomically
from contextledger.archive.location import ArchiveError, Location, local_root, locate
from contextledger.archive.verified import VerifiedParts

FORMAT = "contextledger-archive"
VERSION = 1
#: Hive keys a user may partition by; the ingest date is the default.
PARTITION_KEYS = ("ingest_date", "ingest_month", "runner_kind", "source_dir")
DEFAULT_PARTITION = "ingest_date"
#: Tables stored once per accounting mode.
PER_MODE_TABLES = ("runs", "offers", "uses", "piece_totals", "run_totals", "label_credit")
#: Tables stored once per run, whatever the accounting: what a window replay reads.
WINDOW_TABLES = ("streams", "messages", "standings")
#: Tables stored once per trace run: its span records, to merge spans arriving later.
SPAN_TABLES = ("spans",)
#: Where the commit files are, under the archive.
COMMITS_DIR = "_manifest/commits"

#: A trace run's span records (``read.otel``'s ``SpanRecord`` list, deflated JSON),
#: one row per run: what it takes to assemble the run again with spans that arrive in a
#: later ingest.
TRACE_SPANS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_order", pa.int64(), nullable=False),
        pa.field("trace_ids", pa.list_(pa.string()), nullable=False),  # the traces it holds
        pa.field("records", pa.binary(), nullable=False),
    ]
)


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
    bytes: int | None = None  # the file's size (None: written before sizes were recorded)
    #: CRC-32 of the file's bytes (None: written before checksums were recorded). Kept
    #: in the commit file's ``crc32`` map, not the file's entry: an older reader, which
    #: takes every key of an entry as a field, still opens the archive.
    crc32: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self.__dict__.items()
            if value is not None and key != "crc32"
        }


@dataclass(frozen=True)
class Replacement:
    """New versions of an earlier commit's files, written by a later commit: the
    earlier commit's files ``retired`` no longer count, ``files`` (written by the later
    commit) count in their place, as the earlier commit's own (its runs, its date)."""

    commit: int
    retired: tuple[str, ...]
    files: tuple[DataFile, ...]


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
    #: Whether the commit stores its runs' label credit (a missing file: none to give).
    label_credit: bool = False
    #: The earlier commits whose runs this commit's outcome labels (or those they
    #: replace) name: their stored label credit no longer stands.
    relabels: tuple[int, ...] = ()
    #: Earlier commits' files this commit writes new versions of (merged trace runs).
    replaces: tuple[Replacement, ...] = ()

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
    #: The intact commits, in order: every file each lists is there, as it was written.
    commits: list[Commit] = field(default_factory=list)
    #: What :meth:`reload` found damaged (a commit with a damaged file is left out whole).
    damage: list[ArchiveProblem] = field(default_factory=list)
    #: Where its files are read from (default: the local folder ``root``); for an
    #: archive named by URI, ``root`` is its path on that filesystem, never written.
    location: Location = field(default=None)  # type: ignore[assignment]
    #: The files whose bytes :meth:`verify_content` found as their commit recorded them.
    _verified: set[str] = field(default_factory=set, repr=False)
    #: The parts checked by an earlier ingest and unchanged since (:mod:`.verified`).
    _remembered: VerifiedParts = field(default_factory=lambda: VerifiedParts(None), repr=False)

    def __post_init__(self) -> None:
        if self.location is None:
            self.location = Location.local_at(self.root)

    # ── opening ────────────────────────────────────────────────────
    @staticmethod
    def is_archive(path: str | Path | Location) -> bool:
        """True when ``path`` (a path, a URI, or a :class:`Location`) is a directory
        holding an archive; :class:`ArchiveError` when a URI cannot be reached."""
        location = path if isinstance(path, Location) else locate(path)
        try:
            return location.is_file("archive.json")
        except OSError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else error
            raise ArchiveError(f"{location}: cannot be read ({reason})") from None

    @classmethod
    def open(cls, root: str | Path | Location) -> Archive:
        """Open an existing archive (a path, a URI, or a :class:`Location`); raises
        :class:`ArchiveError` when there is none."""
        location = root if isinstance(root, Location) else locate(root)
        try:
            meta = json.loads(location.read_bytes("archive.json").decode("utf-8"))
        except (OSError, ValueError) as error:
            raise ArchiveError(f"{location}: not a contextledger archive ({error})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            version = meta.get("version")
            raise ArchiveError(f"{location}: archive format {version!r} is not supported")
        archive = cls(Path(location.root), meta["partition_by"], location=location)
        archive.reload()
        return archive

    @classmethod
    def create(cls, root: str | Path, partition_by: str | None = None) -> Archive:
        """Open ``root``, creating an empty archive there when there is none.

        ``partition_by`` is fixed when the archive is created; naming another one
        later is an error. ``root`` is a local path (or ``file://`` URI): archives are
        written on this machine only.
        """
        root = local_root(root)
        if not cls.is_archive(root):
            key = partition_by or DEFAULT_PARTITION
            if key not in PARTITION_KEYS:
                raise ArchiveError(
                    f"cannot partition by {key!r}: choose one of {', '.join(PARTITION_KEYS)}"
                )
            if root.exists() and any(not p.name.startswith(".") for p in root.iterdir()):
                raise ArchiveError(
                    f"{root} exists and is not an archive; choose an empty directory"
                )
            with locked(root):  # another process may be creating it too
                if not cls.is_archive(root):
                    meta = {"format": FORMAT, "version": VERSION, "partition_by": key}
                    write_atomically(root / "archive.json", json.dumps(meta, indent=2).encode())
                    return cls(root, key)
        archive = cls.open(root)
        if partition_by and partition_by != archive.partition_by:
            raise ArchiveError(
                f"{root} is partitioned by {archive.partition_by}, not {partition_by}"
            )
        return archive

    def reload(self) -> None:
        """Re-read the commit files, and check the files they list are there as written.

        Cheap: the commit files, the head, and each listed file's size (its Parquet
        footer for commits that did not record sizes). A commit whose file is missing,
        truncated or unreadable is left out of :attr:`commits`, and so is one whose runs
        do not continue the run orders of the commits before it; they, a commit file
        that cannot be read, and a gap in the commit numbers go to :attr:`damage`.
        """
        damage: list[ArchiveProblem] = []
        head = self._read_head(damage)  # before listing: a commit is in place before its head
        parsed: list[Commit] = []
        numbered: dict[int, str] = {}  # every commit file's number, readable or not
        lost: list[tuple[int, str, str]] = []  # (number, commit file, why)
        for relative in self.location.find(COMMITS_DIR, "*.json"):
            path = self.location.name(relative)
            try:
                commit = _read_commit(self.location.read_bytes(relative))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                seq = _number_of(relative.rpartition("/")[2])
                lost.append((seq, path, f"unreadable ({type(error).__name__}: {error})"))
                numbered[seq] = path
                continue
            parsed.append(commit)
            numbered[commit.seq] = path
        parsed.sort(key=lambda commit: commit.seq)
        for seq in range(1, max([head, *numbered], default=0) + 1):
            if seq not in numbered:
                lost.append((seq, *self._missing_commit(seq)))
        for seq, where, cause in sorted(lost):
            what, runs = _lost(seq, parsed)
            damage.append(ArchiveProblem(where, f"commit file {cause}: {what}", None, seq, runs))
        # run orders are a run's identity: a commit that does not start where the last
        # commit of the chain ends (or after it, past a lost commit) was not written after
        # it (say, a commit file copied in from another archive); its runs cannot be
        # placed and may be ones already counted, so it is left out whole, as a damaged
        # file leaves its commit out, and so is every commit chained to it
        unchained = set()
        chain: Commit | None = None
        for commit in parsed:
            if chain is None or (
                commit.first_run_order == chain.next_run_order
                if commit.seq == chain.seq + 1
                else commit.first_run_order >= chain.next_run_order
            ):
                chain = commit
                continue
            unchained.add(commit.seq)
            damage.append(
                ArchiveProblem(
                    numbered[commit.seq],
                    f"starts at run_order {commit.first_run_order}, but commit {chain.seq} "
                    f"ends at {chain.next_run_order - 1}: " + _left_out(commit),
                    commit.ingest_date,
                    commit.seq,
                    commit.run_count,
                )
            )
        # a later commit's new versions of an earlier commit's files replace those it
        # retired (deleted by the next ingest): checked in their place
        self.commits = self._replaced(
            [commit for commit in parsed if commit.seq not in unchained], damage
        )
        self.damage = damage
        self._verified = set()
        self._remembered = VerifiedParts.load(
            Path(self.location.root) if self.location.is_local else None
        )

    def _replaced(self, chained: list[Commit], damage: list[ArchiveProblem]) -> list[Commit]:
        """The commits of ``chained`` whose files are all there as written, each with the
        replacements of later commits applied, in commit order (a run merged twice: the
        latest version). A damaged file leaves out the commit it belongs to, a new
        version the commit it replaces files of (its runs are what it holds), named."""
        current = {commit.seq: commit for commit in chained}
        for commit in chained:
            for replacement in commit.replaces:
                target = current.get(replacement.commit)
                if target is None:  # left out already, and named
                    continue
                retired = set(replacement.retired)
                kept = tuple(file for file in target.files if file.path not in retired)
                files = (*kept, *(file for file in replacement.files if file not in kept))
                current[target.seq] = dataclasses.replace(target, files=files)
        result = []
        for commit in chained:
            now = current[commit.seq]
            found = [(file, why) for file in now.files if (why := self._file_damage(file))]
            damage.extend(self._file_problem(file, now, why) for file, why in found)
            if not found:
                result.append(now)
        return result

    def _file_problem(self, file: DataFile, commit: Commit, why: str) -> ArchiveProblem:
        """Damage to one of ``commit``'s files, said with what leaving the commit out costs."""
        return ArchiveProblem(
            self.location.name(file.path),
            f"{why}: {_left_out(commit)}",
            commit.ingest_date,
            commit.seq,
            commit.run_count,
            cause=why,
        )

    def verify_content(
        self, files: Sequence[DataFile], *, remembered: bool = True
    ) -> list[ArchiveProblem]:
        """Check the bytes of ``files`` against the CRC-32 their commit recorded, and
        leave out (into :attr:`damage`) each intact commit one of them belongs to whose
        content differs: the damage a size check cannot see (a byte changed, a file
        overwritten at its length). Returns what it found.

        Not part of :meth:`reload`: it reads every byte, so readers check the files they
        are about to read (:class:`~contextledger.archive.tables.ArchiveTables`),
        ``ingest`` and :func:`.verify.verify_archive` every file. Each file is read once per
        opening; a file written before checksums were recorded is passed over (a
        damaged one is found by its reader, and named then). ``remembered``: a part an
        earlier ingest checked and that is unchanged since, by its size and mtime, is not
        read again (:mod:`~contextledger.archive.verified`); ``check`` reads every byte.
        """
        owner = {file.path: commit for commit in self.commits for file in commit.files}
        found: list[ArchiveProblem] = []
        lost: set[int] = set()
        for file in files:
            commit = owner.get(file.path)
            if file.crc32 is None or file.path in self._verified or commit is None:
                continue
            if commit.seq in lost:
                continue
            if remembered and self._remembered.holds(file.path, file.crc32):
                self._verified.add(file.path)
                continue
            try:
                checksum = zlib.crc32(self.location.read_bytes(file.path))
            except OSError as error:
                why = f"cannot be read ({error.strerror or error})"
            else:
                if checksum == file.crc32:
                    self._verified.add(file.path)
                    self._remembered.record(file.path, checksum)
                    continue
                why = "its bytes differ from those its commit recorded (changed in place)"
            lost.add(commit.seq)
            found.append(self._file_problem(file, commit, why))
        if found:
            self.commits = [commit for commit in self.commits if commit.seq not in lost]
            self.damage = [*self.damage, *found]
        return found

    def _read_head(self, damage: list[ArchiveProblem]) -> int:
        """The latest commit's number as last written (0: none yet, or an older archive)."""
        relative = "_manifest/head.json"
        try:
            return int(json.loads(self.location.read_bytes(relative))["seq"])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as error:
            reason = (
                f"unreadable ({type(error).__name__}: {error}), so a missing last commit "
                "would go unnoticed; delete it once every commit file is in place"
            )
            damage.append(ArchiveProblem(self.location.name(relative), reason))
            return 0

    def _missing_commit(self, seq: int) -> tuple[str, str]:
        """A gap in the commit numbers, named by its orphaned data files: (path, why)."""
        orphans = self.location.find("", f"part-{seq:08d}-*.parquet", recursive=True)
        name = orphans[0].rpartition("/")[2] if orphans else ""
        token = name.removesuffix(".parquet").split("-")[-1] if orphans else "*"
        path = self.location.name(f"{COMMITS_DIR}/{seq:08d}-{token}.json")
        left = f" ({len(orphans)} of its data files remain, uncounted)" if orphans else ""
        return path, f"missing{left}"

    def _file_damage(self, file: DataFile) -> str | None:
        """Why a committed file is not as its commit says (None: it is)."""
        try:
            size = self.location.size(file.path)
        except FileNotFoundError:
            return "missing"
        except OSError as error:
            return f"cannot be read ({error.strerror or error})"
        if file.bytes is not None:
            if size == file.bytes:
                return None
            return f"{size:,} bytes, its commit says {file.bytes:,} (truncated or overwritten)"
        try:
            rows = self.location.parquet_file(self.location.path(file.path)).metadata.num_rows
        except (OSError, pa.ArrowException) as error:
            return f"not a readable Parquet file ({error})"
        return None if rows == file.rows else f"{rows} rows, its commit says {file.rows}"

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
        """Paths of ``files`` for the readers: on this machine (as the archive was named),
        or on the archive's filesystem (:attr:`location`)."""
        return [self.location.path(file.path) for file in files]

    # ── writing ────────────────────────────────────────────────────
    @contextlib.contextmanager
    def writing(self) -> Iterator[int]:
        """Hold the archive's write lock; clean up what a killed writer left.

        Yields how many leftover files were removed. Raises :class:`ArchiveDamaged`
        (naming the damage) before touching anything when the archive is damaged: the
        files of a lost commit must not be taken for leftovers and deleted.
        """
        with locked(self.root):
            self.reload()
            listed = [file for commit in self.commits for file in commit.files]
            self.verify_content(listed)  # reads only what no earlier ingest checked
            if self.damage:
                raise ArchiveDamaged(self.root, self.damage)
            self._remembered.keep_only({file.path for file in listed})
            self._remembered.save()
            yield self.remove_uncommitted()

    def remove_uncommitted(self) -> int:
        """Delete every data or manifest file no commit lists, and temporary files.

        Returns how many were left by an interrupted writer: the files a later commit
        retired (``Replacement.retired``, old versions of a merged run's files) are
        deleted too, but not counted."""
        listed = {file.path for commit in self.commits for file in commit.files}
        retired = {path for c in self.commits for r in c.replaces for path in r.retired}
        removed = 0
        for path in self.root.glob(".*.tmp"):  # archive.json, quarantine.json
            path.unlink()
            removed += 1
        for top in (*PER_MODE_TABLES, *WINDOW_TABLES, *SPAN_TABLES, "outcomes", "_manifest"):
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
                    removed += relative not in retired
        return removed

    def new_batch(self, ingest_date: str) -> Batch:
        """A batch to fill and commit (under :meth:`writing`)."""
        seq = self.commits[-1].seq + 1 if self.commits else 1
        return Batch(self, seq, secrets.token_hex(4), ingest_date, self.run_count)

    def commit_path(self, commit: Commit) -> Path:
        """Where ``commit``'s commit file is."""
        return self._commit_dir() / f"{commit.seq:08d}-{commit.token}.json"

    def _commit_dir(self) -> Path:
        return self.root / COMMITS_DIR


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
    label_credit: bool = False
    relabels: tuple[int, ...] = ()
    #: New versions of earlier commits' files (:class:`Replacement`), by commit number:
    #: (the paths retired, the files written in their place).
    replacements: dict[int, tuple[list[str], list[DataFile]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.seq:08d}-{self.token}"

    def retire(self, commit: int, paths: Sequence[str]) -> None:
        """Say that ``paths`` of earlier commit ``commit`` no longer count once this
        batch is committed (the files :meth:`write` writes ``replacing`` it count instead)."""
        retired, _ = self.replacements.setdefault(commit, ([], []))
        retired.extend(path for path in paths if path not in retired)

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
        replacing: int | None = None,
    ) -> None:
        """Write ``table`` as one Parquet file of ``table_name`` (nothing when it is empty).

        ``replacing``: the file is a new version of files of earlier commit
        ``replacing`` (:meth:`retire` names the old ones), and counts as that commit's.
        """
        if table.num_rows == 0:
            return
        parts = [directory or table_name]
        if accounting is not None:
            parts.append(f"accounting={accounting}")
        if partition is not None:
            parts.append(f"{self.archive.partition_by}={partition}")
        if first_in_run is not None:
            parts.append(f"first_in_run={'true' if first_in_run else 'false'}")
        suffix = "" if replacing is None else f"-of-{replacing:08d}"
        relative = "/".join([*parts, f"part-{self.name}{suffix}.parquet"])
        target = self.archive.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        pq.write_table(table, temporary, compression="zstd", row_group_size=1 << 20)
        fsync(temporary)
        checksum = zlib.crc32(temporary.read_bytes())
        os.replace(temporary, target)
        written = DataFile(
            table_name,
            relative,
            table.num_rows,
            accounting,
            partition,
            first_in_run,
            source,
            target.stat().st_size,
            checksum,
        )
        if replacing is None:
            self.files.append(written)
        else:
            self.replacements.setdefault(replacing, ([], []))[1].append(written)

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
            self.label_credit,
            tuple(sorted(set(self.relabels))),
            tuple(
                Replacement(seq, tuple(retired), tuple(files))
                for seq, (retired, files) in sorted(self.replacements.items())
            ),
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
        if commit.label_credit:  # only then: an older reader ignores keys it does not know
            document["label_credit"] = True
        if commit.relabels:
            document["relabels"] = list(commit.relabels)
        if commit.replaces:  # the new versions are listed here, not in files: an older
            # reader, which knows no replacement, reads the commits as they were
            document["replaces"] = [
                {
                    "commit": replacement.commit,
                    "retired": list(replacement.retired),
                    "files": [file.to_json() for file in replacement.files],
                }
                for replacement in commit.replaces
            ]
        every = [*commit.files, *(f for r in commit.replaces for f in r.files)]
        checksums = {file.path: file.crc32 for file in every if file.crc32 is not None}
        if checksums:
            document["crc32"] = checksums
        path = self.archive.commit_path(commit)
        write_atomically(path, json.dumps(document, indent=1).encode())
        head = json.dumps({"seq": commit.seq}).encode()  # after the commit: never ahead of it
        write_atomically(self.archive.root / "_manifest" / "head.json", head)
        self.archive.commits.append(commit)
        if commit.replaces:  # the files this batch wrote are there: no damage to find
            self.archive.commits = self.archive._replaced(self.archive.commits, [])
        return commit


def _read_commit(data: bytes) -> Commit:
    document = json.loads(data.decode("utf-8"))
    checksums = document.get("crc32", {})

    def listed(file: dict[str, Any]) -> DataFile:
        return DataFile(**file, crc32=checksums.get(file["path"]))

    replaces = tuple(
        Replacement(
            int(entry["commit"]),
            tuple(entry["retired"]),
            tuple(listed(file) for file in entry["files"]),
        )
        for entry in document.get("replaces", ())
    )
    return Commit(
        document["seq"],
        document["token"],
        document["committed_at"],
        document["ingest_date"],
        document["first_run_order"],
        document["run_count"],
        tuple(listed(file) for file in document["files"]),
        bool(document.get("label_credit", False)),
        tuple(int(seq) for seq in document.get("relabels", ())),
        replaces,
    )


def _number_of(name: str) -> int:
    """A commit file's number, from its name ``NNNNNNNN-TOKEN.json`` (0: not so named)."""
    digits = name.partition("-")[0]
    return int(digits) if digits.isdigit() else 0


def _left_out(commit: Commit) -> str:
    """What leaving ``commit`` out costs, as a damage reason says it."""
    return (
        f"commit {commit.seq} (ingest date {commit.ingest_date}) is left out, with its "
        f"{commit.run_count} run(s)"
    )


def _lost(seq: int, parsed: Sequence[Commit]) -> tuple[str, int | None]:
    """Which runs went with lost commit ``seq``: the run orders between its neighbours,
    said, and counted (None: not known, the last commit's)."""
    before = [c for c in parsed if c.seq < seq]
    after = [c for c in parsed if c.seq > seq]
    first = before[-1].next_run_order if before else 0
    if not after:
        return f"its runs (run_order {first} on, if it added any) are left out", None
    end = after[0].first_run_order
    if end <= first:
        return "it added no runs (its outcome labels and manifest rows are left out)", 0
    return f"its {end - first} run(s) (run_order {first}-{end - 1}) are left out", end - first
