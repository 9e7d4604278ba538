"""Find, open and decode agentfootprint run snapshots, naming every file that fails.

A snapshot is about a megabyte of JSON, nearly all of it subflow state the
ledger never reads. The typed decoder below decodes the commit log and leaves
the rest as raw bytes until something asks for it (REFERENCE.md §5).
Accepted shapes: a bare ``agent.getLastSnapshot()``, the corpus wrapper
``{run_id, static_tool_names, snapshot, ...}``, ``.json`` / ``.json.gz``,
JSON Lines with one snapshot per line, and directories of any of these.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

_SNAPSHOT_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", ".ndjson")


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


class _TreeContext(msgspec.Struct):
    history: list[Bundle] | None = None


class _SubflowResult(msgspec.Struct, rename="camel"):
    tree_context: _TreeContext | None = None


class _TreeNode(msgspec.Struct, rename="camel", gc=False):
    """The fields of an execution-tree node the answer slice reads (only the read KEYS)."""

    runtime_stage_id: Any = None
    stage_reads: dict[str, msgspec.Raw] | None = None
    next: _TreeNode | None = None
    children: list[_TreeNode] | None = None


_TREE = msgspec.json.Decoder(_TreeNode)


def _typed_keys_read(root: _TreeNode) -> dict[str, list[str]]:
    """``keysReadFromExecutionTree`` over typed nodes: a stack, ``next`` before ``children``."""
    by_step: dict[str, list[str]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        stage_id = node.runtime_stage_id
        if isinstance(stage_id, str) and stage_id and node.stage_reads:
            by_step[stage_id] = list(node.stage_reads)
        if node.next is not None:
            stack.append(node.next)
        if node.children:
            stack.extend(node.children)
    return by_step


class Snapshot(msgspec.Struct, rename="camel"):
    """The parts of ``agent.getLastSnapshot()`` contextledger reads.

    ``execution_tree`` and ``subflow_results`` stay raw JSON until asked for.
    """

    commit_log: list[Bundle] | None = None
    execution_tree: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    subflow_results: dict[str, msgspec.Raw] | None = None
    commit_values: str | None = None

    def subflow_history(self, key: str) -> list[Bundle] | None:
        """The inner commit log of subflow ``key`` (``treeContext.history``)."""
        raw = (self.subflow_results or {}).get(key)
        if raw is None:
            return None
        result = msgspec.json.decode(raw, type=_SubflowResult | None)
        if result is None or result.tree_context is None:
            return None
        return result.tree_context.history

    def tree(self) -> Any:
        """The decoded execution tree (None when absent)."""
        if not self.execution_tree:
            return None
        return msgspec.json.decode(self.execution_tree)

    def keys_read(self) -> dict[str, list[str]] | None:
        """Stage read-sets from the execution tree; None when the tree is absent or falsy.

        The common shape decodes typed, reading only what the slice needs (about 15x
        faster); any other shape goes through the general walk in ``read.slice``.
        """
        if memoryview(self.execution_tree)[:1] == b"{":
            try:
                return _typed_keys_read(_TREE.decode(self.execution_tree))
            except msgspec.ValidationError:
                pass
        from contextledger.read.slice import js_truthy, keys_read_from_execution_tree

        tree = self.tree()
        return keys_read_from_execution_tree(tree) if js_truthy(tree) else None


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

    def inner(self) -> Snapshot | None:
        """The snapshot this document carries, or None when it is not a snapshot."""
        if self.commit_log is not msgspec.UNSET:
            return Snapshot(
                commit_log=self.commit_log,
                execution_tree=self.execution_tree,
                subflow_results=self.subflow_results,
                commit_values=self.commit_values,
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
        for suffix in (".json.gz", ".jsonl.gz", ".json", ".jsonl", ".ndjson"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
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
    """The bytes of one snapshot document and where they came from."""

    source: RunSource
    payload: bytes = field(repr=False)


def find_snapshot_files(paths: Sequence[str | Path]) -> list[Path]:
    """Every snapshot file under ``paths`` (files as given, directories recursively, sorted)."""
    found: list[Path] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found.extend(
                sorted(
                    p
                    for p in path.rglob("*")
                    if p.is_file() and p.name.endswith(_SNAPSHOT_SUFFIXES)
                )
            )
        else:
            found.append(path)
    return found


def _read_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        head = handle.read(2)
        handle.seek(0)
        if head == b"\x1f\x8b":
            return gzip.decompress(handle.read())
        return handle.read()


def _is_json_lines(path: Path) -> bool:
    name = path.name
    return name.endswith((".jsonl", ".jsonl.gz", ".ndjson"))


def iter_documents(path: Path) -> Iterator[Document]:
    """Split one file into snapshot documents; raise ReadError if it cannot be opened."""
    source = RunSource(str(path))
    try:
        payload = _read_bytes(path)
    except FileNotFoundError:
        raise ReadError(source, "no such file") from None
    except IsADirectoryError:
        raise ReadError(source, "is a directory") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ReadError(source, f"corrupt or truncated gzip ({error})") from None
    except OSError as error:
        raise ReadError(source, f"cannot be opened ({error.strerror or error})") from None
    if _is_json_lines(path):
        for number, line in enumerate(payload.splitlines(), start=1):
            if line.strip():
                yield Document(RunSource(str(path), number), line)
    else:
        yield Document(source, payload)


_DOCUMENT = msgspec.json.Decoder(_Document)


def _describe(error: msgspec.MsgspecError) -> str:
    text = str(error)
    if isinstance(error, msgspec.ValidationError):
        return f"not a snapshot of the expected shape: {text}"
    return f"invalid JSON: {text}"


def decode_run(document: Document) -> Run:
    """Decode one document into a :class:`Run`, or raise :class:`ReadError` saying why."""
    source = document.source
    try:
        decoded = _DOCUMENT.decode(document.payload)
    except msgspec.ValidationError as error:
        if " - at `$" not in str(error):
            raise ReadError(source, "not a snapshot: the JSON value is not an object") from None
        raise ReadError(source, _describe(error)) from None
    except msgspec.DecodeError as error:
        raise ReadError(source, _describe(error)) from None
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
    )
