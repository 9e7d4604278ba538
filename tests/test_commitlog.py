"""The commit-log fold is footprintjs's commitValueAt, verb for verb."""

from __future__ import annotations

import hashlib

import pytest

from contextledger.read.commitlog import (
    ABSENT,
    ForwardFold,
    commit_value_at,
    deep_smart_merge,
    find_last_writer,
)
from contextledger.read.jsjson import js_stringify
from contextledger.read.slice import LogIndex
from contextledger.read.snapshot import Bundle, TraceEntry, decode_run, iter_documents

from .conftest import SAMPLE, oracle_runs, require_corpus


def bundle(*trace: tuple[str, str], overwrite=None, updates=None) -> Bundle:
    return Bundle(
        trace=[TraceEntry(path, verb) for path, verb in trace],
        overwrite=overwrite or {},
        updates=updates or {},
    )


LOG = [
    bundle(("h", "set"), ("n", "set"), overwrite={"h": ["a"], "n": {"x": 1, "tags": [1, 2]}}),
    bundle(("h", "append"), overwrite={"h": ["b", "c"]}),
    bundle(("n", "merge"), updates={"n": {"y": 2, "tags": [2, 3]}}),
    bundle(("h", "delete")),
    bundle(("h", "append"), overwrite={"h": ["d"]}),
    bundle(("a\u001fb", "set"), overwrite={"a": {"b": 7}}),
]


def test_set_takes_the_overwritten_value():
    assert commit_value_at(LOG, 0, "h") == ["a"]


def test_append_concatenates_the_tail_under_delta_commit_values():
    assert commit_value_at(LOG, 1, "h") == ["a", "b", "c"]


def test_merge_deep_merges_updates_and_unions_primitive_array_items():
    assert commit_value_at(LOG, 2, "n") == {"x": 1, "tags": [1, 2, 3], "y": 2}


def test_delete_makes_the_key_absent():
    assert commit_value_at(LOG, 3, "h") is ABSENT


def test_append_after_delete_starts_from_the_tail():
    assert commit_value_at(LOG, 4, "h") == ["d"]


def test_a_key_never_written_is_absent():
    assert commit_value_at(LOG, 5, "missing") is ABSENT


def test_a_nested_path_reads_the_nested_overwrite_value():
    assert commit_value_at(LOG, 5, "a\u001fb") == 7


def test_an_index_past_the_end_reads_the_last_bundle():
    assert commit_value_at(LOG, 99, "a\u001fb") == 7


def test_append_onto_a_non_array_replaces_it_with_the_tail():
    log = [
        bundle(("k", "set"), overwrite={"k": "text"}),
        bundle(("k", "append"), overwrite={"k": [1]}),
    ]
    assert commit_value_at(log, 1, "k") == [1]


def test_merge_with_an_empty_array_clears():
    assert deep_smart_merge([1, 2], []) == []


def test_merge_never_deduplicates_objects_and_keeps_booleans_apart_from_numbers():
    assert deep_smart_merge([{"a": 1}, 1], [{"a": 1}, True, 1.0]) == [{"a": 1}, 1, {"a": 1}, True]


def test_find_last_writer_scans_strictly_before_the_bound():
    assert find_last_writer(LOG, "h") == 4
    assert find_last_writer(LOG, "h", before=4) == 3
    assert find_last_writer(LOG, "missing") is None


def test_the_forward_fold_agrees_with_commit_value_at_at_every_bundle():
    fold = ForwardFold(["h", "n", "a\u001fb"])
    for index, entry in enumerate(LOG):
        fold.step(entry)
        for key in ("h", "n", "a\u001fb"):
            assert fold.values[key] == commit_value_at(LOG, index, key)


def test_folding_only_a_keys_writers_gives_its_value_at_every_bundle():
    """The ledger folds a key at the bundles that write it (``LogIndex``), not the whole log."""
    log = [*LOG, bundle(("h", "set"), ("h", "append"), overwrite={"h": ["e"]})]
    index = LogIndex(log)
    for position in range(len(log)):
        for key in ("h", "n", "a\u001fb", "missing"):
            writers = index.positions.get(key, [])
            folded = commit_value_at(log, position, key, writers=writers)
            assert repr(folded) == repr(commit_value_at(log, position, key))


def test_folding_only_a_keys_writers_gives_every_final_value_of_the_sample():
    checked = 0
    for path in sorted(SAMPLE.glob("*.json.gz")):
        for document in iter_documents(path):
            log = decode_run(document).snapshot.commit_log or []
            index = LogIndex(log)
            for key, writers in index.positions.items():
                last = len(log) - 1
                folded = commit_value_at(log, last, key, writers=writers)
                assert repr(folded) == repr(commit_value_at(log, last, key)), (path.name, key)
                checked += 1
    assert checked > 400


def test_replayed_final_history_hashes_to_the_recorded_digest_for_every_agent_run():
    corpus = require_corpus()
    checked = 0
    for run_id, expected in oracle_runs().items():
        if expected["runner_kind"] != "Agent":
            continue
        (document,) = iter_documents(corpus / "runs" / f"{run_id}.json.gz")
        log = decode_run(document).snapshot.commit_log
        assert log
        history = commit_value_at(log, len(log) - 1, "history")
        digest = hashlib.sha256(js_stringify(history).encode("utf-8")).hexdigest()
        assert (run_id, digest) == (run_id, expected["final_history_sha256"])
        assert len(history) == expected["final_history_length"]
        checked += 1
    assert checked == 297


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"a": 1.0, "b": [None, True], "c": "é😀"}, '{"a":1,"b":[null,true],"c":"é😀"}'),
        ({"skip": ABSENT, "x": 1e-7}, '{"x":1e-7}'),
        ([ABSENT], "[null]"),
    ],
)
def test_js_stringify_prints_what_javascript_prints(value, text):
    assert js_stringify(value) == text
