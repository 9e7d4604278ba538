"""The backward slice of the final answer, as footprintjs 9.24 computes it.

agentfootprint's ledger credits an injection slot when the slot key's last
writer sits on ``sliceForKey(commitLog, 'finalContent', ...)``. This module
reproduces that query (``keysReadFromExecutionTree``, ``causalChain``,
``flattenCausalDAG``) exactly, including its index and truncation rules, and
answers it in a few milliseconds per run.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from contextledger.read.memo import LastSnapshot
from contextledger.read.snapshot import Bundle, Snapshot

#: The state key the final answer is written to.
ANSWER_KEY = "finalContent"

#: agentfootprint ``INJECTION_KEYS``, in the reference's iteration order.
SLOT_KEYS = ("systemPromptInjections", "messagesInjections", "toolsInjections")

#: Stage-level read-sets: a runtimeStageId → keys map, or a lookup function.
KeysRead = Mapping[str, Sequence[str]] | Callable[[str], Sequence[str]]

EdgeAttribution = Literal["stage", "per-write"]

_MAX_ARRAY_INDEX = 2**32 - 1


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness: unlike Python, empty objects and arrays are true."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def _is_array_index(key: str) -> bool:
    return (
        key.isascii()
        and key.isdigit()
        and (key == "0" or not key.startswith("0"))
        and int(key) < _MAX_ARRAY_INDEX
    )


def _js_object_keys(value: Any) -> list[str]:
    """``Object.keys``: array-index keys first in numeric order, then insertion order.

    JSON written by ``JSON.stringify`` is already in this order; reapplying it
    keeps hand-built trees honest too.
    """
    if isinstance(value, dict):
        keys = [str(key) for key in value]
        indices = sorted((key for key in keys if _is_array_index(key)), key=int)
        if not indices:
            return keys
        return [*indices, *(key for key in keys if not _is_array_index(key))]
    if isinstance(value, list):
        return [str(position) for position in range(len(value))]
    if isinstance(value, str):
        return [str(position) for position in range(len(value.encode("utf-16-le")) // 2)]
    return []


def keys_read_from_execution_tree(tree: Any) -> dict[str, list[str]]:
    """Stage-level read-sets from a finished run's execution tree.

    Walks like the reference (a stack, ``next`` pushed before ``children``), so
    when two nodes share a runtimeStageId the one visited LAST wins; nodes
    whose ``stageReads`` has no keys leave an earlier read-set standing.
    """
    by_step: dict[str, list[str]] = {}
    stack: list[Any] = list(tree) if isinstance(tree, list) else [tree]
    visited: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if not isinstance(node, dict):
            continue
        runtime_stage_id = node.get("runtimeStageId")
        # A non-string id could never match a bundle's string id, so skip it.
        if isinstance(runtime_stage_id, str) and runtime_stage_id:
            stage_reads = node.get("stageReads")
            if js_truthy(stage_reads):
                keys = _js_object_keys(stage_reads)
                if keys:
                    by_step[runtime_stage_id] = keys
        following = node.get("next")
        if js_truthy(following):
            stack.append(following)
        children = node.get("children")
        if isinstance(children, list):
            stack.extend(children)
    return by_step


class LogIndex:
    """Positions in one commit log, built once so every writer lookup is a bisect.

    ``last_position`` maps a runtimeStageId to its LAST array position (a
    subflow mount commits two bundles under one id), as ``causalChain`` does.
    """

    __slots__ = ("last_position", "log", "positions")

    def __init__(self, log: Sequence[Bundle]) -> None:
        self.log = log
        self.positions: dict[str, list[int]] = {}
        self.last_position: dict[str, int] = {}
        for position, bundle in enumerate(log):
            self.last_position[bundle.runtime_stage_id] = position
            for entry in bundle.trace:
                found = self.positions.get(entry.path)
                if found is None:
                    self.positions[entry.path] = [position]
                elif found[-1] != position:
                    found.append(position)

    def last_writer(self, key: str, before: int | None = None) -> int | None:
        """Position of the last bundle strictly before ``before`` whose trace touches ``key``."""
        found = self.positions.get(key)
        if not found:
            return None
        cut = bisect_left(found, len(self.log) if before is None else before)
        return found[cut - 1] if cut else None


#: The logs of the snapshot read last, each with its index (by ``id()``; an index keeps
#: its log, so the id is not reused): a run's two accountings and its answer slice index
#: the same root and inner logs in turn.
_INDEXES = LastSnapshot()


def log_index(snapshot: Snapshot, log: Sequence[Bundle]) -> LogIndex:
    """The :class:`LogIndex` of ``log`` (the root or an inner log of ``snapshot``), built
    once however often the snapshot's readers ask for it."""
    indexes = _INDEXES.of(snapshot)
    found = indexes.get(id(log))
    if found is None or found.log is not log:
        found = indexes[id(log)] = LogIndex(log)
    return found


@dataclass(eq=False)
class CausalNode:
    """One step on a backward slice; ``parents`` are the steps whose writes it read.

    Nodes are shared (a DAG, possibly with a self-loop when a subflow mount's
    two bundles feed each other), so equality is identity. The truncation
    flags are only ever set on the root.
    """

    runtime_stage_id: str
    depth: int
    linked_by: str = ""
    parents: list[CausalNode] = field(default_factory=list, repr=False)
    truncated_by_depth: bool = False
    truncated_by_nodes: bool = False

    @property
    def truncated(self) -> bool:
        """Whether a limit cut the slice short (older causes exist beyond it)."""
        return self.truncated_by_depth or self.truncated_by_nodes


def _lookup_of(keys_read: KeysRead) -> Callable[[str], Sequence[str]]:
    if callable(keys_read):
        return keys_read
    table = keys_read
    return lambda runtime_stage_id: table.get(runtime_stage_id, ())


def causal_chain(
    log: Sequence[Bundle],
    start_runtime_stage_id: str,
    keys_read: KeysRead,
    *,
    max_depth: int = 20,
    max_nodes: int = 100,
    edge_attribution: EdgeAttribution = "stage",
    root_link_keys: Sequence[str] | None = None,
    index: LogIndex | None = None,
) -> CausalNode | None:
    """footprintjs ``causalChain``: BFS from a step back through read→write edges.

    None when the start id is not in the log. Under ``'per-write'`` a node
    expands only the ``readKeys`` of the writes that linked it, falling back to
    its stage-level reads when a linking trace entry carries none.
    """
    if index is None:
        index = LogIndex(log)
    start_position = index.last_position.get(start_runtime_stage_id)
    if start_position is None:
        return None
    get_keys_read = _lookup_of(keys_read)
    per_write = edge_attribution == "per-write"
    truncated_by_depth = False
    truncated_by_nodes = False

    def reads_for_links(
        commit: Bundle, link_keys: Sequence[str] | None
    ) -> tuple[Sequence[str], bool]:
        if not per_write or not link_keys:
            return get_keys_read(commit.runtime_stage_id), True
        union: dict[str, None] = {}
        for link_key in link_keys:
            entry = next((e for e in commit.trace if e.path == link_key), None)
            if entry is None or entry.read_keys is None:
                return get_keys_read(commit.runtime_stage_id), True
            union.update(dict.fromkeys(entry.read_keys))
        return list(union), False

    root = CausalNode(start_runtime_stage_id, 0)
    nodes: dict[str, CausalNode] = {start_runtime_stage_id: root}
    if per_write:
        root_reads, root_full = reads_for_links(log[start_position], root_link_keys)
    else:
        root_reads, root_full = get_keys_read(start_runtime_stage_id), True
    expanded_reads: dict[str, set[str]] = {start_runtime_stage_id: set(root_reads)}
    fully_expanded: set[str] = {start_runtime_stage_id} if root_full else set()
    queue: deque[tuple[CausalNode, int, int, Sequence[str]]] = deque(
        [(root, start_position, 0, root_reads)]
    )
    visited = 1
    #: Each node's parents' runtimeStageIds (by the node's id: a node links a step once).
    parent_ids: dict[int, set[str]] = {}

    def link_parent(node: CausalNode, parent_commit: Bundle, key: str, depth: int) -> None:
        nonlocal visited, truncated_by_nodes
        parent_id = parent_commit.runtime_stage_id
        parent = nodes.get(parent_id)
        if parent is None:
            if visited >= max_nodes:
                truncated_by_nodes = True
                return
            parent_position = index.last_position[parent_id]
            parent = CausalNode(parent_id, depth + 1, key)
            nodes[parent_id] = parent
            visited += 1
            link_reads, link_full = reads_for_links(parent_commit, [key])
            expanded_reads[parent_id] = set(link_reads)
            if link_full:
                fully_expanded.add(parent_id)
            queue.append((parent, parent_position, depth + 1, link_reads))
        elif per_write and parent_id not in fully_expanded:
            link_reads, link_full = reads_for_links(parent_commit, [key])
            expanded = expanded_reads[parent_id]
            delta = [read for read in link_reads if read not in expanded]
            if link_full:
                fully_expanded.add(parent_id)
            if delta:
                expanded.update(delta)
                queue.append((parent, index.last_position[parent_id], parent.depth, delta))
        linked = parent_ids.setdefault(id(node), set())
        if parent_id not in linked:
            linked.add(parent_id)
            node.parents.append(parent)

    while queue:
        node, position, depth, keys_to_expand = queue.popleft()
        if depth >= max_depth:
            if keys_to_expand:
                truncated_by_depth = True
            continue
        for key in keys_to_expand:
            writer = index.last_writer(key, position)
            if writer is not None:
                link_parent(node, log[writer], key, depth)

    root.truncated_by_depth = truncated_by_depth
    root.truncated_by_nodes = truncated_by_nodes
    return root


def slice_members(root: CausalNode) -> list[str]:
    """runtimeStageIds of the slice, each once, in ``flattenCausalDAG`` BFS order."""
    members: list[str] = []
    seen: set[str] = set()
    queue: deque[CausalNode] = deque([root])
    while queue:
        node = queue.popleft()
        if node.runtime_stage_id in seen:
            continue
        seen.add(node.runtime_stage_id)
        members.append(node.runtime_stage_id)
        queue.extend(parent for parent in node.parents if parent.runtime_stage_id not in seen)
    return members


@dataclass(frozen=True)
class AnswerSlice:
    """The final answer's backward slice and where each injection slot stands on it.

    ``slot_last_writers`` maps each slot key to ``(last writer's
    runtimeStageId or None, whether that writer is a slice member)`` — the
    signal the reference ledger credits injections by.
    """

    writer: str
    members: list[str]
    truncated: bool
    slot_last_writers: dict[str, tuple[str | None, bool]]
    root: CausalNode = field(repr=False, compare=False)


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


def keys_read(snapshot: Snapshot) -> dict[str, list[str]] | None:
    """Stage read-sets from the snapshot's execution tree; None when it is absent or falsy.

    The common shape decodes typed, reading only what the slice needs (about 15x
    faster); any other shape goes through the general walk.
    """
    if memoryview(snapshot.execution_tree)[:1] == b"{":
        try:
            return _typed_keys_read(_TREE.decode(snapshot.execution_tree))
        except (msgspec.ValidationError, msgspec.DecodeError):  # a lone surrogate: tree()
            pass
    tree = snapshot.tree()
    return keys_read_from_execution_tree(tree) if js_truthy(tree) else None


#: The slice of the snapshot read last: both accountings of a run ask in turn (ingest
#: reads every run under both), and a slice is a fifth of an accounting's time.
_SLICES = LastSnapshot()


def answer_slice(
    source: Snapshot | Sequence[Bundle], tree: Any = None, *, index: LogIndex | None = None
) -> AnswerSlice | None:
    """``sliceForKey(log, 'finalContent', keysReadFromExecutionTree(tree))`` plus slot membership.

    Pass a :class:`Snapshot`, or a commit log and its decoded execution tree; ``index``:
    the snapshot's commit log's :class:`LogIndex`, when the caller built one already.
    None when the reference has no slice: no tree, an empty log, or
    ``finalContent`` never written. Asked again for the same snapshot object, it
    answers the slice it gave last.
    """
    if isinstance(source, Snapshot):
        sliced = _SLICES.of(source)
        if "slice" not in sliced:
            log = source.commit_log or []
            sliced["slice"] = _slice(log, keys_read(source), index or log_index(source, log))
        found: AnswerSlice | None = sliced["slice"]
        return found
    return _slice(source, keys_read_from_execution_tree(tree) if js_truthy(tree) else None)


def _slice(
    log: Sequence[Bundle], read_sets: KeysRead | None, index: LogIndex | None = None
) -> AnswerSlice | None:
    if read_sets is None or not log:
        return None
    index = LogIndex(log) if index is None else index
    writer_position = index.last_writer(ANSWER_KEY)
    if writer_position is None:
        return None
    root = causal_chain(
        log,
        log[writer_position].runtime_stage_id,
        read_sets,
        edge_attribution="per-write",
        root_link_keys=[ANSWER_KEY],
        index=index,
    )
    if root is None:
        return None
    members = slice_members(root)
    member_set = set(members)
    slots: dict[str, tuple[str | None, bool]] = {}
    for slot_key in SLOT_KEYS:
        position = index.last_writer(slot_key)
        if position is None:
            slots[slot_key] = (None, False)
        else:
            slot_writer = log[position].runtime_stage_id
            slots[slot_key] = (slot_writer, slot_writer in member_set)
    return AnswerSlice(
        writer=log[writer_position].runtime_stage_id,
        members=members,
        truncated=root.truncated,
        slot_last_writers=slots,
        root=root,
    )
