"""What ingest reads under both accountings is decoded once per run, answering the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextledger.read import slice as slice_module
from contextledger.read import snapshot
from contextledger.read.corrected import meter_run
from contextledger.read.reference import llm_call_mount_keys, record_run
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.read.snapshot_files import find_snapshot_files
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


def test_a_snapshot_file_is_opened_and_inflated_once(monkeypatch: pytest.MonkeyPatch):
    """Its format is told from the head the reader inflated already: sniffing it apart
    opened the file and inflated its head a second time. The runs are those the sniffed
    path reads, and the file's hash is the manifest's, from the same bytes."""
    from contextledger.jobs.ingest import content_hash
    from contextledger.tables import files

    paths = find_snapshot_files([SAMPLE]).files

    def read_all() -> list[files.FileRead]:
        return [files.read_file(p, ACCOUNTING_MODES, {}, False, digest=True) for p in paths]

    with monkeypatch.context() as sniffed:
        sniffed.setattr(files, "read_whole_document", lambda *args, **kwargs: None)
        before = read_all()

    def no_sniff(path: Path) -> None:
        raise AssertionError(f"{path} sniffed apart")

    monkeypatch.setattr(files, "_sniff", no_sniff)
    after = read_all()
    assert [read.runs for read in after] == [read.runs for read in before]
    assert [read.problems for read in after] == [read.problems for read in before] == [[]] * 14
    assert [read.file_digest for read in after] == [content_hash(path) for path in paths]
    assert [read.file_digest for read in before] == [None] * 14


def test_a_file_whose_head_may_be_another_format_is_sniffed_as_before(tmp_path: Path):
    """A trace file named like a snapshot, and a pretty-printed snapshot (its first line
    ends in the head), are told apart by the sniff; the pretty-printed copy is the same run."""
    import gzip

    import msgspec

    from contextledger.tables import files

    traces = tmp_path / "traces.json.gz"
    traces.write_bytes((SAMPLE.parent / "otel" / "traces" / "genai-openai.jsonl.gz").read_bytes())
    read = files.read_file(traces, ACCOUNTING_MODES, {}, False, digest=True)
    assert read.traces is not None and read.traces.spans and not read.runs
    original = SAMPLE / "s0003-loop.json.gz"
    pretty = tmp_path / "s0003-loop.json"
    pretty.write_bytes(msgspec.json.format(gzip.decompress(original.read_bytes()), indent=2))
    compact, spaced = (
        files.read_file(path, ACCOUNTING_MODES, {}, False, digest=True).runs[0]
        for path in (original, pretty)
    )
    assert (spaced.run_id, spaced.digest, spaced.facts) == (
        compact.run_id,
        compact.digest,
        compact.facts,
    )
