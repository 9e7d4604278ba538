"""What ingest reads under both accountings is decoded once per run, answering the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextledger.read import slice as slice_module
from contextledger.read import snapshot
from contextledger.read.corrected import meter_run
from contextledger.read.reference import llm_call_mount_keys, record_run
from contextledger.read.snapshot import decode_run, find_snapshot_files, iter_documents
from contextledger.tables import ACCOUNTING_MODES

from .conftest import SAMPLE


def grouped_sample_runs() -> list[snapshot.Run]:
    files = find_snapshot_files([SAMPLE]).files
    runs = [decode_run(document) for path in files for document in iter_documents(path)]
    return [run for run in runs if llm_call_mount_keys(run.snapshot)]


def test_both_accountings_of_a_grouped_run_decode_its_inner_logs_once(
    monkeypatch: pytest.MonkeyPatch,
):
    runs = grouped_sample_runs()
    assert runs
    decoded: list[object] = []
    real = snapshot.decode_raw

    def counting(raw: object, into: object) -> object:
        decoded.append(raw)
        return real(raw, into)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot, "decode_raw", counting)
    for run in runs:
        decoded.clear()
        record_run(run.snapshot, [])
        meter_run(run, [])
        assert len(decoded) == len(llm_call_mount_keys(run.snapshot)), run.run_id


def test_an_inner_log_read_again_is_the_log_decoded_alone():
    for run in grouped_sample_runs():
        for key in llm_call_mount_keys(run.snapshot):
            first = run.snapshot.subflow_history(key)
            again = run.snapshot.subflow_history(key)
            alone = decode_run_again(run).snapshot.subflow_history(key)
            assert first is again
            assert first == alone


def test_both_accountings_and_the_slice_index_each_log_of_a_run_once(
    monkeypatch: pytest.MonkeyPatch,
):
    """A :class:`LogIndex` is one pass over a log's every trace entry: the reference's
    offers, the corrected accounting's and the answer slice share one per log."""
    files = find_snapshot_files([SAMPLE]).files
    runs = [decode_run(document) for path in files for document in iter_documents(path)]
    built: list[int] = []
    real = slice_module.LogIndex.__init__

    def counting(index: slice_module.LogIndex, log: object) -> None:
        built.append(id(log))
        real(index, log)  # type: ignore[arg-type]

    monkeypatch.setattr(slice_module.LogIndex, "__init__", counting)
    grouped = 0
    for run in runs:
        built.clear()
        record_run(run.snapshot, [])
        meter_run(run, [])
        logs = [run.snapshot.commit_log or []]
        logs += [run.snapshot.subflow_history(k) for k in llm_call_mount_keys(run.snapshot)]
        grouped += len(logs) > 1
        assert sorted(built) == sorted({id(log) for log in logs}), run.run_id
    assert grouped  # the sample has grouped runs: their inner logs are indexed once too


def decode_run_again(run: snapshot.Run) -> snapshot.Run:
    """``run`` decoded anew from its file (a snapshot no cache has seen)."""
    (document,) = iter_documents(Path(run.source.path))
    return decode_run(document)


@pytest.mark.parametrize(
    "path",
    [SAMPLE / "s0003-loop.json.gz", SAMPLE.parent / "otel" / "traces" / "genai-anthropic.jsonl.gz"],
)
def test_a_file_is_read_without_cycle_collections_and_the_collector_is_restored(
    path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Reading allocates trees that reference counting frees; the cycle collector's passes
    over them were a tenth of reading's CPU (read/cycles.py). Paused while a file is read,
    it is on again after, also when the reading fails."""
    import gc

    from contextledger.tables import files

    collections = []
    gc.callbacks.append(collections.append)
    try:
        read = files.read_file(path, ACCOUNTING_MODES, {}, False, streams=True)
    finally:
        gc.callbacks.remove(collections.append)
    assert (read.runs or read.traces) and collections == []
    assert gc.isenabled()

    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(files, "_read_file", fails)
    with pytest.raises(RuntimeError):
        files.read_file(path, ACCOUNTING_MODES, {}, False)
    assert gc.isenabled()
