"""Find, open and decode agentfootprint run snapshots, naming every file that fails.

A snapshot is about a megabyte of JSON, nearly all of it subflow state the
ledger never reads. The typed decoder below decodes the commit log and leaves
the rest as raw bytes until something asks for it (REFERENCE.md §5).
Accepted shapes: a bare ``agent.getLastSnapshot()``, the corpus wrapper
``{run_id, static_tool_names, snapshot, ...}``, ``.json`` / ``.json.gz``,
JSON Lines with one snapshot per line, and directories of any of these (a file in
a folder is read by its name's suffix, in any case; the others are listed, so a
command can say what it did not read).

Hostile inputs are refused by name, never followed into a crash, a hang or
unbounded memory: a document is decompressed as a stream and refused past a cap
(``--max-document-mb``), JSON Lines are read a line at a time, anything that is
not a regular file is never opened, symlinked folders are followed once, and a
name that is not UTF-8 is shown escaped (:func:`.snapshot_files.display_path`).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from contextledger.read import jsparse
from contextledger.read.digest import file_digest
from contextledger.read.gunzip import GZIP_MAGIC, GzipError, inflate, open_inflated
from contextledger.read.memo import LastSnapshot
from contextledger.read.snapshot_files import JSON_LINES_SUFFIXES, display_path, snapshot_suffix

#: The default cap on the (decompressed) size of one document: a real snapshot is
#: about 1 MB, so this only ever stops a gzip bomb or a file that is no snapshot.
DEFAULT_MAX_DOCUMENT_MB = 256
#: Where the cap is read from (``--max-document-mb`` sets it, so worker processes see it).
MAX_DOCUMENT_MB_ENV = "CONTEXTLEDGER_MAX_DOCUMENT_MB"
_MIB = 1 << 20


def max_document_bytes() -> int:
    """The cap on one document's decompressed size, in bytes: ``$CONTEXTLEDGER_MAX_DOCUMENT_MB``
    MiB (set by ``--max-document-mb``), else :data:`DEFAULT_MAX_DOCUMENT_MB`.

    >>> max_document_bytes() == DEFAULT_MAX_DOCUMENT_MB << 20 or MAX_DOCUMENT_MB_ENV in os.environ
    True
    """
    configured = os.environ.get(MAX_DOCUMENT_MB_ENV, "").strip()
    if not configured:
        return DEFAULT_MAX_DOCUMENT_MB * _MIB
    try:
        megabytes = int(configured)
    except ValueError:
        megabytes = 0
    if megabytes < 1:
        msg = f"${MAX_DOCUMENT_MB_ENV} must be a whole number of MiB, at least 1: {configured!r}"
        raise ValueError(msg)
    return megabytes * _MIB


def _too_large(cap: int, what: str) -> str:
    return (
        f"{what} is larger than the {cap / _MIB:g} MiB cap on one document "
        "(raise it with --max-document-mb)"
    )


#: The reason given wherever a document nests too deeply for Python to walk.
TOO_DEEP = "JSON nested too deeply to read (more levels than Python's recursion limit)"


class TraceEntry(msgspec.Struct, frozen=True, gc=False):
    """One ``{path, verb}`` entry of a bundle's trace.

    ``read_keys`` is the per-write provenance footprintjs records only when the
    ``writeProvenance`` dial is on; None stands for JavaScript ``undefined``.
    """

    path: str
    verb: str
    read_keys: tuple[str, ...] | None = msgspec.field(name="readKeys", default=None)


class Bundle(msgspec.Struct, rename="camel", gc=False):
    """One commit bundle of a footprintjs commit log."""

    trace: list[TraceEntry] = msgspec.field(default_factory=list)
    overwrite: dict[str, Any] = msgspec.field(default_factory=dict)
    updates: dict[str, Any] = msgspec.field(default_factory=dict)
    stage_id: str = ""
    runtime_stage_id: str = ""
    stage: str = ""
    #: Paths an agent's ``redact`` scrubbed from this commit (footprintjs writes the
    #: placeholder ``REDACTED`` in their place); ``[]`` in every corpus run.
    redacted_paths: list[str] = msgspec.field(default_factory=list)


class _TreeContext(msgspec.Struct):
    history: list[Bundle] | None = None


class _SubflowResult(msgspec.Struct, rename="camel"):
    tree_context: _TreeContext | None = None


class Snapshot(msgspec.Struct, rename="camel"):
    """The parts of ``agent.getLastSnapshot()`` contextledger reads.

    ``execution_tree`` and ``subflow_results`` stay raw JSON until asked for.
    """

    commit_log: list[Bundle] | None = None
    execution_tree: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    subflow_results: dict[str, msgspec.Raw] | None = None
    commit_values: str | None = None
    #: footprintjs's own ``runId`` for the execution (``"1795993079864-0000000003"``):
    #: what tells two copies of one recording apart from two runs, whatever their names.
    execution_id: Any = msgspec.field(name="runId", default=None)

    def subflow_history(self, key: str) -> list[Bundle] | None:
        """The inner commit log of subflow ``key`` (``treeContext.history``). Asked again
        for the same snapshot, as each accounting of a grouped run asks in turn, it
        answers the log it decoded last (a fifth of ingest's decoding of such a run)."""
        decoded = _HISTORIES.of(self)
        if key not in decoded:
            decoded[key] = self._decode_subflow_history(key)
        return decoded[key]

    def _decode_subflow_history(self, key: str) -> list[Bundle] | None:
        raw = (self.subflow_results or {}).get(key)
        if raw is None:
            return None
        result = decode_raw(raw, _SubflowResult | None)
        if result is None or result.tree_context is None:
            return None
        return result.tree_context.history

    def tree(self) -> Any:
        """The decoded execution tree (None when absent)."""
        if not self.execution_tree:
            return None
        return decode_raw(self.execution_tree, Any)


#: The inner logs of the snapshot read last, by subflow key.
_HISTORIES = LastSnapshot()


def decode_raw(raw: msgspec.Raw | bytes, into: Any) -> Any:
    """A part of a snapshot left undecoded, decoded now as ``into``: by msgspec, or, where
    it holds a lone surrogate msgspec refuses, as ``JSON.parse`` reads it (:mod:`jsparse`)."""
    try:
        return msgspec.json.decode(raw, type=into)
    except msgspec.DecodeError:
        if not jsparse.has_surrogate_escape(bytes(raw)):
            raise
        return msgspec.convert(jsparse.loads(bytes(raw)), into)


class _Document(msgspec.Struct, rename="camel"):
    """A bare snapshot, or the corpus wrapper around one: decoded in a single pass."""

    run_id: str | None = msgspec.field(name="run_id", default=None)
    static_tool_names: list[str] | None = msgspec.field(name="static_tool_names", default=None)
    runner_kind: str | None = msgspec.field(name="runner_kind", default=None)
    snapshot: Snapshot | msgspec.UnsetType | None = msgspec.UNSET
    commit_log: list[Bundle] | msgspec.UnsetType | None = msgspec.UNSET
    execution_tree: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    subflow_results: dict[str, msgspec.Raw] | None = None
    commit_values: str | None = None
    execution_id: Any = msgspec.field(name="runId", default=None)

    def inner(self) -> Snapshot | None:
        """The snapshot this document carries, or None when it is not a snapshot."""
        if self.commit_log is not msgspec.UNSET:
            return Snapshot(
                commit_log=self.commit_log,
                execution_tree=self.execution_tree,
                subflow_results=self.subflow_results,
                commit_values=self.commit_values,
                execution_id=self.execution_id,
            )
        if isinstance(self.snapshot, Snapshot):
            return self.snapshot
        return None


@dataclass(frozen=True)
class RunSource:
    """Where one run came from: a file, and the line for JSON Lines."""

    path: str
    line: int | None = None

    def default_run_id(self) -> str:
        name = Path(self.path).name
        suffix = snapshot_suffix(name)
        name = name[: -len(suffix)] if suffix else name
        return name if self.line is None else f"{name}:{self.line}"

    def __str__(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"


@dataclass
class Run:
    """One decoded run: its snapshot and what the file said around it."""

    run_id: str
    source: RunSource
    snapshot: Snapshot
    static_tool_names: list[str] | None = None
    runner_kind: str | None = None
    #: Read as ``JSON.parse`` reads a lone surrogate (:mod:`jsparse`): a string in it may
    #: hold one, which UTF-8 (Arrow, Parquet) cannot.
    lone_surrogates: bool = False
    #: Whether the document names its run (a wrapper's ``run_id``); else ``run_id`` is
    #: its file's name, and another copy that names the run is counted instead.
    named: bool = False

    @property
    def execution_id(self) -> str | None:
        """The snapshot's footprintjs ``runId`` (:attr:`Snapshot.execution_id`); None when
        it has none, or one that is not a non-empty string."""
        found = self.snapshot.execution_id
        return found if isinstance(found, str) and found else None


class ReadError(Exception):
    """A file (or one line of it) that could not be read as a snapshot."""

    def __init__(self, source: RunSource, reason: str, run_id: str | None = None) -> None:
        self.source = source
        self.reason = reason
        self.run_id = run_id
        super().__init__(f"{source}: {reason}")

    def __reduce__(self) -> tuple[type[ReadError], tuple[RunSource, str, str | None]]:
        return (ReadError, (self.source, self.reason, self.run_id))


@dataclass
class ReadProblem:
    """What could not be read, kept for the user to see."""

    path: str
    line: int | None
    run_id: str | None
    reason: str

    @property
    def where(self) -> str:
        """Where the run came from: ``PATH[:LINE][ (run ID)]``.

        >>> ReadProblem("runs.jsonl", 3, "r7", "bad").where
        'runs.jsonl:3 (run r7)'
        """
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return where if not self.run_id else f"{where} (run {self.run_id})"


@dataclass
class Document:
    """The bytes of one snapshot document and where they came from.

    ``refused`` says why the document was not read (too large); :func:`decode_run`
    raises it, so every reader names it the same way.
    """

    source: RunSource
    payload: bytes = field(repr=False)
    refused: str | None = None


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"not a regular file ({kind}), skipped"


def _folder_reason(path: Path) -> str:
    if path.is_symlink():
        target = display_path(path.resolve())
        return f"a symlink loop (links back to {target}, a folder it is inside), not followed"
    try:
        os.scandir(path).close()
    except OSError as error:
        return f"a folder that cannot be listed ({error.strerror or error})"
    return "is a directory"


def _open_regular(path: Path, source: RunSource) -> IO[bytes]:
    """``path`` opened for reading if it is a regular file; a FIFO or device is never opened."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ReadError(source, "no such file") from None
    except OSError as error:
        raise ReadError(source, f"cannot be opened ({error.strerror or error})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ReadError(source, _folder_reason(path))
    if not stat.S_ISREG(info.st_mode):
        raise ReadError(source, _not_regular(info.st_mode))
    try:  # non-blocking, in case it became a FIFO since: the check below then refuses it
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ReadError(source, f"cannot be opened ({error.strerror or error})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise ReadError(source, _not_regular(mode))
    return os.fdopen(descriptor, "rb")


class _TooLarge(Exception):
    """A document past the cap (its message is the reason)."""


def _document_bytes(pieces: Iterator[bytes], packed: bool, cap: int) -> bytes:
    """All of a file's ``pieces`` (inflated, when it is ``packed``) joined; raises
    _TooLarge as soon as they pass ``cap`` bytes."""
    chunks: list[bytes] = []
    total = 0
    for chunk in pieces:
        total += len(chunk)
        if total > cap:
            raise _TooLarge(_too_large(cap, "decompressed, the file" if packed else "the file"))
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _refusals(source: RunSource) -> Iterator[None]:
    """What goes wrong reading a file's bytes, raised as the :class:`ReadError` every
    reader words the same way: a damaged gzip, a failed read, a document past the cap."""
    try:
        yield
    except GzipError as error:
        raise ReadError(source, f"corrupt or truncated gzip ({error})") from None
    except OSError as error:
        raise ReadError(source, f"cannot be read ({error.strerror or error})") from None
    except _TooLarge as error:
        raise ReadError(source, str(error)) from None


#: A UTF-8 byte order mark, which some Windows tools write at the start of a file: not
#: JSON, so it is dropped before a file's first document is read.
BOM = b"\xef\xbb\xbf"


def _json_lines(stream: IO[bytes], name: str, cap: int) -> Iterator[Document]:
    """One document per non-blank line, read a megabyte at a time and cut at each
    newline: a line past ``cap`` bytes is refused as soon as it passes it, and the rest
    of it skipped. (Cutting large reads is a quarter of the CPU time of ``readline``,
    which copies a long line through its small buffer piece by piece.)"""
    number = 0
    pieces: list[bytes] = []  # the line read so far, when it began in an earlier read
    size = 0  # its bytes; past ``cap``, it is skipped to its end
    while chunk := stream.read(_MIB):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            number += 1
            size += end + 1 - start
            if size > cap:
                yield Document(RunSource(name, number), b"", refused=_too_large(cap, "the line"))
            else:
                line = chunk[start : end + 1]
                if pieces:
                    line = b"".join([*pieces, line])
                if number == 1:
                    line = line.removeprefix(BOM)
                if not line.isspace():
                    yield Document(RunSource(name, number), line)
            pieces, size, start = [], 0, end + 1
        if start < len(chunk):
            size += len(chunk) - start
            if size <= cap:
                pieces.append(chunk[start:])
            else:
                pieces.clear()
    if size:  # the last line, without a newline
        number += 1
        if size > cap:
            yield Document(RunSource(name, number), b"", refused=_too_large(cap, "the line"))
        else:
            line = b"".join(pieces)
            if number == 1:
                line = line.removeprefix(BOM)
            if not line.isspace():
                yield Document(RunSource(name, number), line)


def _is_json_lines(path: Path) -> bool:
    return path.name.lower().endswith(JSON_LINES_SUFFIXES)


def iter_documents(
    path: Path, max_bytes: int | None = None, *, lines: bool | None = None
) -> Iterator[Document]:
    """Split one file into snapshot documents, reading as it goes; raise ReadError if it
    cannot be opened (or is no regular file) or breaks off.

    ``lines``: read it as JSON Lines (True) or as one document (False) whatever its
    name; None (default): as its name says (a trace reader knows from the content).

    Gzip is detected by content and inflated as a stream (:mod:`.gunzip`). A document larger than
    ``max_bytes`` (default :func:`max_document_bytes`), decompressed, is refused: a
    whole file, or in JSON Lines one line (a :class:`Document` whose ``refused`` says
    why), and the next line is still read.
    """
    cap = max_document_bytes() if max_bytes is None else max_bytes
    source = RunSource(display_path(path))
    with _open_regular(path, source) as handle, _refusals(source):
        packed = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
        if _is_json_lines(path) if lines is None else lines:
            stream = open_inflated(handle) if packed else handle
            yield from _json_lines(stream, source.path, cap)
            return
        if not packed and os.fstat(handle.fileno()).st_size > cap:  # refused unread
            raise _TooLarge(_too_large(cap, "the file"))
        pieces = inflate(handle) if packed else iter(lambda: handle.read(_MIB), b"")
        payload = _document_bytes(pieces, packed, cap)
    yield Document(source, payload.removeprefix(BOM))


#: Files up to this size as stored (a snapshot is about 70 KB gzip) are read at once by
#: :func:`read_whole_document`; a larger one is left to the streaming readers.
WHOLE_FILE_BYTES = 16 * _MIB


@dataclass(frozen=True)
class WholeFile:
    """The one document of a file read at once, and the blake2b-128 of the file's bytes
    as stored (what the archive's manifest keeps, :func:`~.digest.file_digest`)."""

    document: Document
    file_digest: str | None


def read_whole_document(
    path: Path,
    head_is_a_snapshot: Callable[[bytes], bool],
    head_bytes: int,
    *,
    max_bytes: int | None = None,
    digest: bool = False,
) -> WholeFile | None:
    """The one document of the file at ``path`` (not JSON Lines), opened and inflated
    once, as :func:`iter_documents` would give it; None when it is no file of one
    snapshot by its head (the first ``head_bytes``, inflated, which
    ``head_is_a_snapshot`` is shown before the rest is inflated), is JSON Lines by its
    name or is larger than :data:`WHOLE_FILE_BYTES`: read it another way then.
    ``digest``: also hash the file's bytes. Raises :class:`ReadError` as
    :func:`iter_documents` does.

    >>> whole = read_whole_document(Path("data/sample/s0003-loop.json.gz"), bool, 1 << 16)
    >>> whole.document.payload[:12], whole.file_digest
    (b'{"run_id":"s', None)
    """
    if _is_json_lines(path):
        return None
    cap = max_document_bytes() if max_bytes is None else max_bytes
    source = RunSource(display_path(path))
    with _open_regular(path, source) as handle, _refusals(source):
        if os.fstat(handle.fileno()).st_size > WHOLE_FILE_BYTES:
            return None
        data = handle.read()
    with _refusals(source):
        packed = data[:2] == GZIP_MAGIC
        pieces = inflate(io.BytesIO(data), head_bytes=head_bytes) if packed else iter([data])
        head = [next(pieces, b"")]
        while head[-1] and sum(map(len, head)) < head_bytes:
            head.append(next(pieces, b""))
        opening = head[0] if len(head[0]) >= head_bytes else b"".join(head)
        if not head_is_a_snapshot(opening[:head_bytes]):
            return None
        payload = _document_bytes(itertools.chain(head, pieces), packed, cap)
    document = Document(source, payload.removeprefix(BOM))
    return WholeFile(document, file_digest(data) if digest else None)


_DOCUMENT = msgspec.json.Decoder(_Document)


class _WrapperId(msgspec.Struct):
    run_id: Any = None


def _wrapper_run_id(payload: bytes) -> str | None:
    """The wrapper's ``run_id`` of a document that is not a snapshot of the expected
    shape, so the problem names the run too; None when it cannot be had."""
    try:
        found = msgspec.json.decode(payload, type=_WrapperId).run_id
    except (msgspec.MsgspecError, RecursionError):
        return None
    return found if isinstance(found, str) and found else None


def _number_out_of_range(payload: bytes) -> str | None:
    """Which number msgspec found out of range (past the doubles), as written."""
    try:
        jsparse.loads(payload)
    except jsparse.NotJavaScriptJSON as error:
        return str(error)
    except RecursionError:
        return None
    return None


def _as_javascript_parses(payload: bytes, source: RunSource, error: msgspec.DecodeError) -> Any:
    """A document msgspec refused for a lone surrogate, read as ``JSON.parse`` reads it;
    its undecoded parts are written back as JSON (surrogates escaped) for :func:`decode_raw`."""
    try:
        value = jsparse.loads(payload)
    except jsparse.NotJavaScriptJSON:
        raise ReadError(source, _describe(error)) from None
    except RecursionError:
        raise ReadError(source, TOO_DEEP) from None
    for holder in (value, value.get("snapshot") if isinstance(value, dict) else None):
        if not isinstance(holder, dict):
            continue
        if "executionTree" in holder:
            holder["executionTree"] = msgspec.Raw(json.dumps(holder["executionTree"]).encode())
        if isinstance(results := holder.get("subflowResults"), dict):
            holder["subflowResults"] = {
                key: msgspec.Raw(json.dumps(item).encode()) for key, item in results.items()
            }
    try:
        return msgspec.convert(value, _Document)
    except msgspec.ValidationError as invalid:
        if " - at `$" not in str(invalid):
            raise ReadError(source, "not a snapshot: the JSON value is not an object") from None
        raise ReadError(source, _describe(invalid), _wrapper_run_id(payload)) from None


def _describe(error: msgspec.MsgspecError) -> str:
    text = str(error)
    if isinstance(error, msgspec.ValidationError):
        return f"not a snapshot of the expected shape: {text}"
    return f"invalid JSON: {text}"


def decode_run(document: Document) -> Run:
    """Decode one document into a :class:`Run`, or raise :class:`ReadError` saying why."""
    source = document.source
    if document.refused is not None:
        raise ReadError(source, document.refused)
    if not document.payload.strip():
        raise ReadError(source, "blank: no JSON in it (only white space, or a gzip of nothing)")
    tolerant = False
    try:
        decoded = _DOCUMENT.decode(document.payload)
    except msgspec.ValidationError as error:
        if " - at `$" not in str(error):
            raise ReadError(source, "not a snapshot: the JSON value is not an object") from None
        reason = _describe(error)
        if str(error).startswith("Number out of range"):
            reason = _number_out_of_range(document.payload) or reason
        raise ReadError(source, reason, _wrapper_run_id(document.payload)) from None
    except msgspec.DecodeError as error:
        if not jsparse.has_surrogate_escape(document.payload):
            raise ReadError(source, _describe(error)) from None
        decoded = _as_javascript_parses(document.payload, source, error)
        tolerant = True
    except RecursionError:
        raise ReadError(source, TOO_DEEP) from None
    snapshot = decoded.inner()
    if snapshot is None:
        reason = "not a snapshot: no commitLog key and no snapshot object"
        raise ReadError(source, reason, decoded.run_id)
    return Run(
        run_id=decoded.run_id or source.default_run_id(),
        source=source,
        snapshot=snapshot,
        static_tool_names=decoded.static_tool_names,
        runner_kind=decoded.runner_kind,
        lone_surrogates=tolerant,
        named=bool(decoded.run_id),
    )
