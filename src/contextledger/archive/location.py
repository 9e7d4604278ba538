"""Where an archive is: a folder on this machine, or a filesystem URI read through ``pyarrow.fs``.

The one seam between the archive and storage. :func:`locate` turns what a user
names into a :class:`Location`: a plain path stays the local path it is; a URI goes
to ``pyarrow.fs.FileSystem.from_uri`` (``file://``, ``s3://``, ``gs://``, ``abfs://``,
``hdfs://``), which gives a filesystem and the archive's path on it, with the
credentials pyarrow reads from the environment. A ``file://`` URI becomes the local
path it names, so it reads exactly as that path does. Every read of an archive (its
commit files, the sizes checked at open, the Parquet files Polars, DuckDB, pyarrow
and Spark read) asks its Location; a local one keeps the fast local readers, any
other reads through the pyarrow filesystem. Writing stays local
(:func:`local_root`): a commit's atomic rename and write lock are a local
filesystem's.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

#: ``scheme://`` at the start of a name: a URI, not a local path.
_URI = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

#: Characters left as they are when a URI is handed to pyarrow: a space (say) is
#: escaped first, and an escape already there (``%20``) is kept for pyarrow to decode.
_URI_SAFE = "%:/?@!$&'()*+,;=~"


class ArchiveError(Exception):
    """An archive that cannot be opened or written as asked (defined here, where the
    first of those errors is found: a name that is no place to read one from)."""


def uri_scheme(text: str) -> str | None:
    """The scheme ``text`` starts with (``s3``), or None for a plain path.

    >>> uri_scheme("s3://bucket/runs"), uri_scheme("runs/2026"), uri_scheme("C:/runs")
    ('s3', None, None)
    """
    found = _URI.match(text)
    return found.group(1).lower() if found else None


def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem and path for ``uri``; :class:`ArchiveError` with pyarrow's
    reason (its first line) when it cannot open it."""
    try:
        # a '%' that starts no escape is a percent sign: escaped, as a space is
        escaped = quote(re.sub(r"%(?![0-9A-Fa-f]{2})", "%25", uri), safe=_URI_SAFE)
        return pafs.FileSystem.from_uri(escaped)
    except (pa.ArrowException, OSError, ValueError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ArchiveError(f"{uri}: cannot be opened ({lines[0]})") from None


@dataclass(frozen=True)
class Location:
    """An archive's folder: a filesystem, the folder's path on it, and the URI it was
    named by (None: a local path, named as it is)."""

    filesystem: pafs.FileSystem
    root: str
    uri: str | None = None

    @classmethod
    def local_at(cls, root: str | Path) -> Location:
        """The folder ``root`` on this machine, named as ``Path(root)`` names it."""
        return cls(pafs.LocalFileSystem(), str(Path(root)))

    @property
    def is_local(self) -> bool:
        """Whether the archive is a folder on this machine (read with the local readers)."""
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def __str__(self) -> str:
        return self.uri if self.uri is not None else self.root

    def path(self, relative: str) -> str:
        """``relative``'s path on the filesystem: what the readers are given."""
        if self.is_local:
            return str(Path(self.root) / relative)
        return f"{self.root.rstrip('/')}/{relative}"

    def name(self, relative: str) -> str:
        """``relative`` as messages name it: a local path, or a URI under the archive's."""
        if self.uri is None:
            return self.path(relative)
        return f"{self.uri.rstrip('/')}/{relative}"

    def relative(self, path: str) -> str:
        """The archive-relative name of one of :meth:`path`'s answers."""
        if self.is_local:
            return Path(path).relative_to(self.root).as_posix()
        return path[len(self.root.rstrip("/")) + 1 :]

    def spark_path(self, path: str) -> str:
        """What Spark's Hadoop filesystems read for ``path``: the local path, or the URI
        (``s3://`` as Hadoop's ``s3a://``)."""
        if self.uri is None:
            return path
        uri = self.name(self.relative(path))
        return "s3a://" + uri[len("s3://") :] if uri_scheme(uri) == "s3" else uri

    # ── reading files ──────────────────────────────────────────────
    def read_bytes(self, relative: str) -> bytes:
        """The bytes of ``relative`` (``FileNotFoundError`` when it is not there)."""
        if self.is_local:
            return Path(self.path(relative)).read_bytes()
        if not self.is_file(relative):
            raise FileNotFoundError(f"{self.name(relative)}: no such file")
        with self.filesystem.open_input_stream(self.path(relative)) as stream:
            return bytes(stream.read())

    def size(self, relative: str) -> int:
        """``relative``'s size in bytes (``FileNotFoundError`` when it is not there)."""
        if self.is_local:
            return Path(self.path(relative)).stat().st_size
        info = self.filesystem.get_file_info(self.path(relative))
        if info.type != pafs.FileType.File or info.size is None:
            raise FileNotFoundError(f"{self.name(relative)}: no such file")
        return int(info.size)

    def is_file(self, relative: str) -> bool:
        if self.is_local:
            return Path(self.path(relative)).is_file()
        return self.filesystem.get_file_info(self.path(relative)).type == pafs.FileType.File

    def find(self, folder: str, pattern: str, *, recursive: bool = False) -> list[str]:
        """The archive-relative names of the files under ``folder`` whose name matches
        ``pattern`` (a glob), sorted (a folder that is not there: none)."""
        if self.is_local:
            base = Path(self.path(folder))
            found = base.rglob(pattern) if recursive else base.glob(pattern)
            return sorted(self.relative(str(path)) for path in found if path.is_file())
        selector = pafs.FileSelector(self.path(folder), allow_not_found=True, recursive=recursive)
        return sorted(
            self.relative(info.path)
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File and fnmatch.fnmatchcase(info.base_name, pattern)
        )

    def scan(self, paths: Sequence[str], table_schema: pa.Schema | None = None) -> pl.LazyFrame:
        """A lazy Polars scan of the Parquet files ``paths`` (at least one), in order.

        With ``table_schema``, a file written before one of its columns existed (an
        archive older than ``runs.basis``) reads that column as null, or as an empty
        list where the schema says it cannot be null: archives written by earlier
        versions stay readable after the schema grows.
        """
        if not self.is_local:
            frame = pl.scan_pyarrow_dataset(self.dataset(paths, table_schema))
        elif table_schema is None:
            return pl.scan_parquet(list(paths), hive_partitioning=False, glob=False)
        else:
            frame = pl.scan_parquet(
                list(paths),
                hive_partitioning=False,
                glob=False,
                schema=pl.DataFrame(table_schema.empty_table()).schema,
                missing_columns="insert",
            )
        if table_schema is None:
            return frame
        empty_lists = [
            pl.col(f.name).fill_null(pl.lit([], dtype=frame.collect_schema()[f.name]))
            for f in table_schema
            if not f.nullable and pa.types.is_list(f.type)
        ]
        return frame.with_columns(empty_lists) if empty_lists else frame

    def dataset(self, paths: Sequence[str], table_schema: pa.Schema | None = None) -> Any:
        """The Parquet files ``paths`` as one ``pyarrow.dataset`` on this filesystem."""
        import pyarrow.dataset as ds

        return ds.dataset(
            list(paths), schema=table_schema, format="parquet", filesystem=self.filesystem
        )

    def read_table(self, path: str, **options: Any) -> pa.Table:
        """``pyarrow.parquet.read_table`` of ``path`` on this filesystem."""
        if self.is_local:
            return pq.read_table(path, **options)
        return pq.read_table(path, filesystem=self.filesystem, **options)

    def parquet_file(self, path: str) -> pq.ParquetFile:
        """``path`` opened as a ``pyarrow.parquet.ParquetFile``."""
        if self.is_local:
            return pq.ParquetFile(path)
        return pq.ParquetFile(self.filesystem.open_input_file(path))


def locate(name: str | Path) -> Location:
    """Where ``name`` (a path, or a URI without its ``?`` selection) is.

    A plain path is local, kept as given; ``file:///abs/dir`` is the local path it
    names (``%XX`` escapes decoded, a space taken as written); any other URI is
    opened by ``pyarrow.fs`` (:class:`ArchiveError`, with pyarrow's reason, when it
    cannot be).

    >>> str(locate("file:///tmp/my%20runs").root), locate("runs").root
    ('/tmp/my runs', 'runs')
    """
    text = str(name)
    if uri_scheme(text) is None:
        return Location.local_at(name)
    filesystem, path = _from_uri(text)
    if isinstance(filesystem, pafs.LocalFileSystem):
        return Location.local_at(path)
    return Location(filesystem, path, text.rstrip("/"))


def local_root(name: str | Path) -> Path:
    """The local folder ``name`` is, for writing: a path, or a ``file://`` URI. Any other
    scheme raises :class:`ArchiveError`: archives are written on this machine only.

    >>> local_root("file:///tmp/runs%202026")
    PosixPath('/tmp/runs 2026')
    """
    text = str(name)
    scheme = uri_scheme(text)
    if scheme is None:
        return Path(name)
    if scheme != "file":
        raise ArchiveError(
            f"{text}: archives are written on this machine only, not to {scheme}:// "
            "(write a local DIR, copy it there, and read it back by URI)"
        )
    return Path(locate(text).root)
