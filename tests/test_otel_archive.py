"""Trace runs in an archive over several ingests: a run whose spans arrive in two ingests
(a collector appending to its files, or rotating them) is archived as the run read
from every file at once, table for table; a grown file re-ingested reads its new spans
only once; trace runs are archived in the order reading the files gives them.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contextledger.archive import Archive, ArchiveTables, verify_archive
from contextledger.archive.store import Batch
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import whatif
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.duckdb_views import ledger_rows_sql
from contextledger.ledger.invariants import check_invariants
from contextledger.tables.build import ACCOUNTING_MODES, read_runs
from contextledger.tables.sidecars import load_outcomes

from .test_otel_read import TRACES, _trace

#: The 30-call run of the OpenAI recording (semconv instrumentation), split over two files.
LONG_RUN = "da63cff08af8f5fb57a120f6d5a37c66"
TABLES = ("runs", "offers", "uses")
ONCE = ("streams", "messages", "spans", "run_index")
POLICIES = ["none", "sliding:keep=4"]


def _split(tmp_path: Path) -> tuple[Path, Path]:
    """The OpenAI recording's two files, as a collector rotating its files wrote them:
    the 30-call run's first 15 calls in the first, the rest and its root span in the
    second (``data/otel/README.md``); plain, so that a test can append to them."""
    paths = tmp_path / "today.jsonl", tmp_path / "tomorrow.jsonl"
    for path, name in zip(paths, ("genai-openai.jsonl.gz", "genai-openai.2.jsonl.gz"), strict=True):
        path.write_bytes(gzip.decompress(_trace(name).read_bytes()))
    return paths


def _labels(tmp_path: Path) -> Path:
    path = tmp_path / "labels.csv"
    path.write_text(f"run_id,label\n{LONG_RUN},good\n")
    return path


def _stored(root: Path, table: str) -> pl.DataFrame:
    archive = Archive.open(root)
    files = archive.files(table)
    return pl.read_parquet(archive.paths(files)) if files else pl.DataFrame()


def assert_archives_equal(grown: Path, whole: Path, *, engines: bool = False) -> None:
    """Every table of the two archives equal, row for row, and both ledgers; ``engines``:
    the DuckDB views' ledgers too, and ``check``'s invariants (stored totals and label
    credit equal to the rows) on ``grown`` (the slow part: the main case only)."""
    for mode in ACCOUNTING_MODES if engines else ACCOUNTING_MODES[:1]:
        ours = ArchiveTables(Archive.open(grown), mode)
        theirs = ArchiveTables(Archive.open(whole), mode)
        for table in TABLES:
            assert_frame_equal(
                pl.DataFrame(getattr(ours, table)),
                pl.DataFrame(getattr(theirs, table)),
                check_exact=True,
            )
        assert_frame_equal(
            compute_ledger(ours).rows(), compute_ledger(theirs).rows(), check_exact=True
        )
        if not engines:
            continue
        assert_frame_equal(ledger_rows_sql(ours), ledger_rows_sql(theirs), check_exact=True)
        # stored per commit, the totals and label credit differ in rows from one ingest's;
        # each stands for its commit's rows (the ledgers above add them up)
        report = check_invariants(ours)
        assert report.holds, report.violations
    for table in ONCE:
        assert_frame_equal(_stored(grown, table), _stored(whole, table), check_exact=True)
    assert verify_archive(grown) == []


def test_a_run_split_over_two_ingests_is_archived_as_one_ingest_of_both(tmp_path):
    today, tomorrow = _split(tmp_path)
    labels = _labels(tmp_path)
    first = ingest([today], tmp_path / "grown", outcomes=labels, workers=1)
    second = ingest([tomorrow], tmp_path / "grown", workers=1)
    ingest([today, tomorrow], tmp_path / "whole", outcomes=labels, workers=1)
    assert (first.runs_added, second.runs_added, second.runs_extended) == (4, 4, 1)
    assert (second.runs_conflicting, second.problems) == (0, [])
    assert "1 archived trace run(s) extended by spans that arrived later" in second.summary()
    assert_archives_equal(tmp_path / "grown", tmp_path / "whole", engines=True)
    runs = read_runs([today, tomorrow], workers=1).with_outcomes(load_outcomes(labels))
    archived = ArchiveTables(Archive.open(tmp_path / "grown"), "corrected")
    assert_frame_equal(
        compute_ledger(archived).rows(), compute_ledger(runs).rows(), check_exact=True
    )
    grown, _ = whatif(str(tmp_path / "grown"), POLICIES)
    files, _ = whatif([today, tomorrow], POLICIES)
    assert_frame_equal(grown, files, check_exact=True)
    calls = pl.DataFrame(archived.runs).filter(pl.col("run_id") == LONG_RUN)["model_call_count"]
    assert calls.to_list() == [30]


def test_the_run_archived_before_its_later_spans_is_the_first_half(tmp_path):
    """The failing case beside the passing one: the first ingest alone holds part of
    the run, so the merge above is what makes the 30 calls."""
    today, _ = _split(tmp_path)
    ingest([today], tmp_path / "archive", workers=1)
    runs = pl.DataFrame(ArchiveTables(Archive.open(tmp_path / "archive"), "corrected").runs)
    calls = runs.filter(pl.col("run_id") == LONG_RUN)["model_call_count"].item()
    assert 0 < calls < 30


def test_a_grown_file_ingested_again_merges_what_it_gained_and_names_no_copy(tmp_path):
    today, tomorrow = _split(tmp_path)
    growing = tmp_path / "collector.jsonl"
    shutil.copy(today, growing)
    ingest([growing], tmp_path / "grown", workers=1)
    with growing.open("a") as handle:
        handle.write(tomorrow.read_text())
    again = ingest([growing], tmp_path / "grown", workers=1)
    assert (again.runs_added, again.runs_extended, again.runs_already_archived) == (4, 1, 3)
    assert (again.duplicates, again.problems, again.runs_conflicting) == ([], [], 0)
    retired = {
        path for r in Archive.open(tmp_path / "grown").commits[-1].replaces for path in r.retired
    }
    unchanged = ingest([growing], tmp_path / "grown", workers=1)  # deletes the old versions
    assert (unchanged.files_unchanged, unchanged.leftovers_removed) == (1, 0)
    assert retired and not any((tmp_path / "grown" / path).exists() for path in retired)
    ingest([growing], tmp_path / "whole", workers=1)
    assert_archives_equal(tmp_path / "grown", tmp_path / "whole")


def test_spans_archived_and_given_again_elsewhere_count_once(tmp_path):
    today, tomorrow = _split(tmp_path)
    ingest([today, tomorrow], tmp_path / "archive", workers=1)
    copy = tmp_path / "copy" / "tomorrow.jsonl"
    copy.parent.mkdir()
    shutil.copy(tomorrow, copy)
    again = ingest([copy], tmp_path / "archive", workers=1)
    assert (again.runs_added, again.runs_extended, again.runs_already_archived) == (0, 0, 5)
    assert {row["path"] for row in again.duplicates} == {str(copy)}
    ingest([today, tomorrow], tmp_path / "whole", workers=1)
    assert_archives_equal(tmp_path / "archive", tmp_path / "whole")


def test_a_merge_killed_before_its_commit_leaves_the_archive_as_it_was(tmp_path, monkeypatch):
    today, tomorrow = _split(tmp_path)
    ingest([today], tmp_path / "grown", workers=1)
    ingest([today], tmp_path / "before", workers=1)

    def killed(self: Batch) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(Batch, "commit", killed)
        with pytest.raises(KeyboardInterrupt):
            ingest([tomorrow], tmp_path / "grown", workers=1)
    assert_archives_equal(tmp_path / "grown", tmp_path / "before")
    again = ingest([tomorrow], tmp_path / "grown", workers=1)
    assert again.runs_extended == 1 and again.leftovers_removed > 0
    ingest([today, tomorrow], tmp_path / "whole", workers=1)
    assert_archives_equal(tmp_path / "grown", tmp_path / "whole")


def test_an_archive_orders_trace_runs_as_reading_the_files_does(tmp_path):
    ingest(TRACES, tmp_path / "archive", workers=1)
    archived = pl.DataFrame(ArchiveTables(Archive.open(tmp_path / "archive"), "corrected").runs)
    files = pl.DataFrame(read_runs(TRACES, workers=1).runs)
    assert archived["run_id"].to_list() == files["run_id"].to_list()
    assert_frame_equal(archived, files, check_exact=True)


def test_a_damaged_new_version_leaves_out_the_commit_it_belongs_to(tmp_path):
    """A merged run's files count as the commit that added the run: one of them missing
    leaves that commit out, named, as any damaged file does."""
    today, tomorrow = _split(tmp_path)
    ingest([today], tmp_path / "archive", workers=1)
    ingest([tomorrow], tmp_path / "archive", workers=1)
    archive = Archive.open(tmp_path / "archive")
    (newer,) = [
        file
        for file in archive.commits[0].files
        if (file.table, file.accounting) == ("runs", "corrected") and "-of-" in file.path
    ]
    (tmp_path / "archive" / newer.path).unlink()
    damaged = Archive.open(tmp_path / "archive")
    assert [commit.seq for commit in damaged.commits] == [2]
    (problem,) = damaged.damage
    assert problem.path.endswith(newer.path) and problem.commit == 1
    assert "missing: commit 1" in problem.reason and "with its 4 run(s)" in problem.reason


# ── a conversation over several traces ─────────────────────────────
CONVERSATION = "conv-genai-openai-conversation"


def _conversation(tmp_path: Path, edit) -> list[Path]:
    """The recorded two-trace conversation, one file per trace (``edit(trace, spans)``
    may change each trace's spans first), as a conversation continued tomorrow in a new
    trace comes."""
    lines = gzip.decompress(_trace("genai-openai.2.jsonl.gz").read_bytes()).splitlines()
    (line,) = [line for line in lines if CONVERSATION.encode() in line]
    request = json.loads(line)
    traces = sorted({span["traceId"] for span in _spans(request)})
    paths = []
    tmp_path.mkdir(exist_ok=True)
    for number, trace in enumerate(traces):
        kept = json.loads(line)
        for resource in kept["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = edit(trace, [s for s in scope["spans"] if s["traceId"] == trace])
        paths.append(tmp_path / f"trace-{number}.jsonl")
        paths[-1].write_text(json.dumps(kept) + "\n")
    return paths


def _spans(request: dict) -> list[dict]:
    return [
        span
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_a_conversation_continued_in_a_new_trace_merges_by_its_conversation_id(tmp_path):
    first, second = _conversation(tmp_path, lambda trace, spans: spans)
    ingest([first], tmp_path / "grown", workers=1)
    again = ingest([second], tmp_path / "grown", workers=1)
    assert (again.runs_added, again.runs_extended) == (0, 1)
    ingest([first, second], tmp_path / "whole", workers=1)
    assert_archives_equal(tmp_path / "grown", tmp_path / "whole")
    runs = ArchiveTables(Archive.open(tmp_path / "grown"), "corrected").runs
    assert runs["run_id"].to_pylist() == [CONVERSATION]


def test_spans_that_join_two_archived_runs_are_named_not_merged(tmp_path):
    """Two traces archived as two runs (no conversation id yet); a later span of each
    names one conversation: merging would join two archived runs, so it is a conflict
    and both stay as archived."""

    def without_conversation(trace: str, spans: list[dict]) -> list[dict]:
        for span in spans:
            span["attributes"] = [
                a for a in span["attributes"] if a["key"] != "gen_ai.conversation.id"
            ]
        return spans

    def one_later_span(trace: str, spans: list[dict]) -> list[dict]:
        chat = next((span for span in spans if span["name"].startswith("chat")), None)
        if chat is None:  # a scope of other spans
            return []
        later = json.loads(json.dumps(chat))
        later["spanId"] = "f" * 16
        later["startTimeUnixNano"] = str(int(chat["startTimeUnixNano"]) + 1)
        return [later]

    first = _conversation(tmp_path / "first", without_conversation)
    second = _conversation(tmp_path / "second", one_later_span)
    ingest(first, tmp_path / "archive", workers=1)
    before = pl.DataFrame(ArchiveTables(Archive.open(tmp_path / "archive"), "corrected").runs)
    again = ingest(second, tmp_path / "archive", workers=1)
    assert (again.runs_added, again.runs_extended, again.runs_conflicting) == (0, 0, 1)
    (problem,) = again.problems
    assert problem["run_id"] == CONVERSATION and "join the archived runs" in problem["reason"]
    after = pl.DataFrame(ArchiveTables(Archive.open(tmp_path / "archive"), "corrected").runs)
    assert_frame_equal(after, before, check_exact=True)


def test_a_run_that_grows_twice_takes_its_latest_version(tmp_path):
    """Three ingests: the 30-call run's first calls, then half of the rest, then the
    rest (a new version of new versions)."""
    today, tomorrow = _split(tmp_path)
    lines = tomorrow.read_text().splitlines()
    starts = sorted(
        int(span["startTimeUnixNano"])
        for line in lines
        for span in _spans(json.loads(line))
        if span["traceId"] == LONG_RUN
    )
    cut = starts[len(starts) // 2]
    halves: list[list[str]] = [[], []]
    for line in lines:
        for half, chosen in zip(halves, (False, True), strict=True):
            request = json.loads(line)
            for resource in request["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    scope["spans"] = [
                        span
                        for span in scope["spans"]
                        if (span["traceId"] == LONG_RUN and int(span["startTimeUnixNano"]) >= cut)
                        == chosen
                    ]
            if _spans(request):
                half.append(json.dumps(request))
    parts = [tmp_path / "part-1.jsonl", tmp_path / "part-2.jsonl"]
    for path, half in zip(parts, halves, strict=True):
        path.write_text("\n".join(half) + "\n")
    reports = [ingest([path], tmp_path / "grown", workers=1) for path in (today, *parts)]
    assert [report.runs_extended for report in reports] == [0, 1, 1]
    ingest([today, *parts], tmp_path / "whole", workers=1)
    assert_archives_equal(tmp_path / "grown", tmp_path / "whole")


def test_a_problem_of_archived_spans_is_not_said_again_by_the_merge(tmp_path):
    """A cut message attribute in the first file is quarantined by the ingest that read
    it; the merge that takes that span in again does not name it a second time."""
    today, tomorrow = _split(tmp_path)
    requests = [json.loads(line) for line in today.read_text().splitlines()]
    span = next(
        span
        for request in requests
        for span in _spans(request)
        if span["traceId"] == LONG_RUN
        and any(a["key"] == "gen_ai.input.messages" for a in span["attributes"])
    )
    for attribute in span["attributes"]:
        if attribute["key"] == "gen_ai.input.messages":
            attribute["value"]["stringValue"] = attribute["value"]["stringValue"][:40]
    today.write_text("".join(json.dumps(request) + "\n" for request in requests))
    first = ingest([today], tmp_path / "archive", workers=1)
    (problem,) = first.problems
    assert (problem["path"], problem["run_id"]) == (str(today), LONG_RUN)
    second = ingest([tomorrow], tmp_path / "archive", workers=1)
    assert (second.runs_extended, second.problems) == (1, [])


def test_a_run_archived_without_span_records_is_a_conflict_not_a_silent_copy(tmp_path):
    """An archive written before span records were kept cannot merge: the grown file's
    run is named as a conflict, not taken for the same file given twice."""
    today, tomorrow = _split(tmp_path)
    growing = tmp_path / "collector.jsonl"
    shutil.copy(today, growing)
    ingest([growing], tmp_path / "archive", workers=1)
    archive = Archive.open(tmp_path / "archive")
    for commit in archive.commits:  # as an older version wrote it: no spans
        for file in commit.files:
            if file.table == "spans":
                (tmp_path / "archive" / file.path).unlink()
        path = archive.commit_path(commit)
        document = json.loads(path.read_text())
        document["files"] = [f for f in document["files"] if f["table"] != "spans"]
        path.write_text(json.dumps(document))
    with growing.open("a") as handle:
        handle.write(tomorrow.read_text())
    again = ingest([growing], tmp_path / "archive", workers=1)
    assert (again.runs_extended, again.runs_conflicting) == (0, 1)
    (problem,) = again.problems
    assert problem["run_id"] == LONG_RUN and "without the span records" in problem["reason"]
