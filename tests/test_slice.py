"""The answer slice against footprintjs: hand-made logs, then every corpus run's oracle."""

from __future__ import annotations

import time
from typing import Any

import pytest

from contextledger.read.slice import (
    SLOT_KEYS,
    LogIndex,
    answer_slice,
    causal_chain,
    keys_read_from_execution_tree,
    slice_members,
)
from contextledger.read.snapshot import Bundle, TraceEntry, decode_run, iter_documents

from .conftest import corpus_present, oracle_calls, require_corpus


def _bundle(runtime_stage_id: str, *writes: str, read_keys: list[str] | None = None) -> Bundle:
    keys = None if read_keys is None else tuple(read_keys)
    return Bundle(
        trace=[TraceEntry(path, "set", keys) for path in writes],
        runtime_stage_id=runtime_stage_id,
        stage_id=runtime_stage_id.split("#")[0],
    )


# ── hand-made logs ─────────────────────────────────────────────────────


def test_a_stage_reading_two_keys_from_two_writers_gets_both_as_parents() -> None:
    log = [
        _bundle("seed#0", "unrelated"),
        _bundle("score#1", "creditScore"),
        _bundle("ratio#2", "dti"),
        _bundle("decide#3", "decision"),
    ]
    reads = {"decide#3": ["creditScore", "dti"]}
    root = causal_chain(log, "decide#3", reads)
    assert root is not None
    assert [parent.runtime_stage_id for parent in root.parents] == ["score#1", "ratio#2"]
    assert [parent.linked_by for parent in root.parents] == ["creditScore", "dti"]
    assert all(parent.depth == 1 for parent in root.parents)
    assert slice_members(root) == ["decide#3", "score#1", "ratio#2"]
    assert not root.truncated


def test_a_repeated_runtime_stage_id_expands_from_its_last_position() -> None:
    # A subflow mount commits twice under one id; the chain starts from the
    # SECOND bundle, so a write between the two is visible to its reads.
    log = [
        _bundle("seed#0", "x"),
        _bundle("mount#1", "answer"),
        _bundle("late#2", "x"),
        _bundle("mount#1", "exit"),
    ]
    reads = {"mount#1": ["x"]}
    root = causal_chain(log, "mount#1", reads)
    assert root is not None
    assert slice_members(root) == ["mount#1", "late#2"]


def test_a_repeated_runtime_stage_id_can_become_its_own_parent() -> None:
    log = [_bundle("seed#0", "x"), _bundle("mount#1", "x"), _bundle("mount#1", "y")]
    root = causal_chain(log, "mount#1", {"mount#1": ["x"]})
    assert root is not None
    assert root.parents == [root]
    assert slice_members(root) == ["mount#1"]


def test_max_nodes_drops_further_parents_and_flags_the_root() -> None:
    log = [_bundle(f"w#{i}", f"k{i}") for i in range(5)]
    log.append(_bundle("reader#5", "out"))
    reads = {"reader#5": [f"k{i}" for i in range(5)]}
    root = causal_chain(log, "reader#5", reads, max_nodes=3)
    assert root is not None
    assert slice_members(root) == ["reader#5", "w#0", "w#1"]
    assert root.truncated_by_nodes and not root.truncated_by_depth
    complete = causal_chain(log, "reader#5", reads, max_nodes=6)
    assert complete is not None and not complete.truncated
    assert len(slice_members(complete)) == 6


def test_max_depth_flags_only_a_node_that_still_had_reads() -> None:
    log = [_bundle("a#0", "a"), _bundle("b#1", "b"), _bundle("c#2", "c")]
    leafless = causal_chain(log, "c#2", {"c#2": ["b"]}, max_depth=1)
    assert leafless is not None and not leafless.truncated
    cut = causal_chain(log, "c#2", {"c#2": ["b"], "b#1": ["a"]}, max_depth=1)
    assert cut is not None
    assert cut.truncated_by_depth
    assert slice_members(cut) == ["c#2", "b#1"]


def test_per_write_follows_read_keys_and_falls_back_without_them() -> None:
    log = [
        _bundle("a#0", "a"),
        _bundle("b#1", "b"),
        Bundle(
            trace=[TraceEntry("answer", "set", ("a",)), TraceEntry("other", "set", ("b",))],
            runtime_stage_id="w#2",
        ),
    ]
    reads = {"w#2": ["a", "b"]}
    root = causal_chain(log, "w#2", reads, edge_attribution="per-write", root_link_keys=["answer"])
    assert root is not None
    assert slice_members(root) == ["w#2", "a#0"]
    stage = causal_chain(log, "w#2", reads, root_link_keys=["answer"])
    assert stage is not None
    assert slice_members(stage) == ["w#2", "a#0", "b#1"]


def test_read_keys_decode_from_camel_case_json() -> None:
    import msgspec

    entry = msgspec.json.decode(b'{"path":"p","verb":"set","readKeys":["x"]}', type=TraceEntry)
    assert entry.read_keys == ("x",)
    assert msgspec.json.decode(b'{"path":"p","verb":"set"}', type=TraceEntry).read_keys is None


def test_tree_reads_keep_null_valued_keys_and_the_last_visited_node_wins() -> None:
    tree = {
        "runtimeStageId": "s#0",
        "stageReads": {"first": None},
        "next": {"runtimeStageId": "s#0", "stageReads": {"second": 1}},
        "children": [
            {"runtimeStageId": "c#1", "stageReads": {}},
            {"runtimeStageId": "", "stageReads": {"ignored": 1}},
            {"runtimeStageId": "d#2", "stageReads": {"b": 1, "10": 1, "2": 1}},
        ],
    }
    reads = keys_read_from_execution_tree(tree)
    # children are popped before next, so next's read-set overwrites.
    assert reads == {"s#0": ["second"], "d#2": ["2", "10", "b"]}


def test_writer_lookup_is_strictly_before_the_position() -> None:
    index = LogIndex([_bundle("a#0", "k"), _bundle("b#1", "k"), _bundle("c#2", "j")])
    assert index.last_writer("k") == 1
    assert index.last_writer("k", 1) == 0
    assert index.last_writer("k", 0) is None
    assert index.last_writer("missing") is None


def test_no_tree_or_no_answer_write_means_no_slice() -> None:
    log = [_bundle("seed#0", "finalContent")]
    assert answer_slice(log, None) is None
    assert answer_slice([], {"runtimeStageId": "x#0"}) is None
    assert answer_slice([_bundle("seed#0", "other")], {"runtimeStageId": "x#0"}) is None
    found = answer_slice(log, {})  # an empty object is truthy in JavaScript
    assert found is not None
    assert found.writer == "seed#0"
    assert found.slot_last_writers == dict.fromkeys(SLOT_KEYS, (None, False))


# ── corpus oracle ──────────────────────────────────────────────────────

#: The oracle's rows, in recording order; one placeholder when the corpus is absent, so
#: that the parametrized test runs once and skips (or fails under CI) in require_corpus.
_ROWS: list[dict[str, Any] | None] = [*oracle_calls().values()] if corpus_present() else [None]


def _run_snapshot(run_id: str) -> Any:
    document = next(iter_documents(require_corpus() / "runs" / f"{run_id}.json.gz"))
    return decode_run(document).snapshot


def test_corpus_oracle_covers_every_run() -> None:
    corpus = require_corpus()
    assert len(oracle_calls()) == 301
    assert len(list((corpus / "runs").glob("*.json.gz"))) == len(oracle_calls())


@pytest.mark.parametrize("row", _ROWS, ids=[row["run_id"] if row else "corpus" for row in _ROWS])
def test_answer_slice_matches_the_reference(row: dict[str, Any] | None) -> None:
    require_corpus()
    assert row is not None
    expected = row["answer_slice"]
    found = answer_slice(_run_snapshot(row["run_id"]))
    assert (found is not None) == expected["available"]
    if found is None:
        return
    assert found.writer == expected["writer"]
    assert len(found.members) == expected["member_count"]
    # The oracle lists members sorted; ours stay in flattenCausalDAG BFS order.
    assert sorted(found.members) == expected["members"]
    assert found.members[0] == found.writer
    assert found.slot_last_writers == {
        slot: (entry["last_writer"], entry["in_slice"])
        for slot, entry in expected["slot_last_writers"].items()
    }


def test_answer_slice_takes_a_few_milliseconds_per_run() -> None:
    require_corpus()
    snapshots = [_run_snapshot(run_id) for run_id in list(oracle_calls())[:40]]
    started = time.perf_counter()
    for snapshot in snapshots:
        answer_slice(snapshot)
    per_run = (time.perf_counter() - started) / len(snapshots)
    assert per_run < 0.05, f"{per_run * 1000:.1f} ms per run"
