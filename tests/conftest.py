"""Shared fixtures: the reference corpus and the bundled sample.

A test that needs the corpus is skipped, saying so, when it is absent; under CI
(``$CI`` set, as ``.ci/run`` is run) it fails instead, so a missing corpus never
passes for a green run. The skips are explained once, at the end of the run
(:func:`pytest_terminal_summary`), rather than left as bare ``s`` marks.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


@contextlib.contextmanager
def written_without(monkeypatch, column: str):
    """Archive files written in this block lack ``column``, as versions before it wrote
    them (to test that archives written then still read)."""
    import contextledger.archive.store as store

    write_table = store.pq.write_table

    def as_older_versions_wrote(table, *args, **kwargs):
        if column in table.column_names:
            table = table.drop_columns(column)
        return write_table(table, *args, **kwargs)

    monkeypatch.setattr(store.pq, "write_table", as_older_versions_wrote)
    try:
        yield
    finally:
        monkeypatch.setattr(store.pq, "write_table", write_table)


def as_new_run(document: dict, run_id: str) -> dict:
    """A recorded run's wrapper made another run: under ``run_id``, and with an execution
    id of its own (``snapshot.runId``); with only its ``run_id`` changed it would be the
    same recording under a second id, which ``read.identity`` counts once."""
    document["run_id"] = run_id
    document["snapshot"]["runId"] = f"{run_id}-execution"
    return document


def corpus_dir() -> Path:
    """The reference corpus: $CONTEXTLEDGER_CORPUS, else ../shared/corpus/agentfootprint-9.62."""
    configured = os.environ.get("CONTEXTLEDGER_CORPUS")
    if configured:
        return Path(configured)
    return REPO.parent / "shared" / "corpus" / "agentfootprint-9.62"


def in_ci() -> bool:
    """True when ``$CI`` is set (to anything but empty, ``0`` or ``false``): nothing may skip."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def corpus_present() -> bool:
    """Whether the reference corpus (its oracle) is where :func:`corpus_dir` says."""
    return (corpus_dir() / "oracle" / "runs.jsonl").is_file()


#: How every corpus skip's reason starts (:func:`skip_summary` counts them by it).
CORPUS_ABSENT = "reference corpus not found at"


def require_corpus(*, allow_module_level: bool = False) -> Path:
    """The corpus folder; when it is absent, skip the test (or the module), or under CI fail."""
    path = corpus_dir()
    if not corpus_present():
        reason = f"{CORPUS_ABSENT} {path} (set CONTEXTLEDGER_CORPUS to its folder)"
        if in_ci():
            pytest.fail(f"{reason}; CI runs every corpus test", pytrace=False)
        pytest.skip(reason, allow_module_level=allow_module_level)
    return path


@cache
def oracle_runs() -> dict[str, dict]:
    """oracle/runs.jsonl keyed by run_id, in recording order."""
    path = require_corpus() / "oracle" / "runs.jsonl"
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return {row["run_id"]: row for row in rows}


@cache
def oracle_calls() -> dict[str, dict]:
    """oracle/calls.jsonl.gz keyed by run_id: what each model call was sent."""
    path = require_corpus() / "oracle" / "calls.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return {row["run_id"]: row for row in map(json.loads, handle)}


@pytest.fixture(scope="session")
def corpus() -> Path:
    return require_corpus()


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """Why a skipped test (or module) skipped, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_summary(skipped: list[pytest.TestReport | pytest.CollectReport]) -> list[str]:
    """Lines saying once why the run's skips skipped: the corpus's first, then any other
    reason with its count."""
    reasons: dict[str, int] = {}
    corpus_skips = 0
    for report in skipped:
        reason = skip_reason(report)
        if reason.startswith(CORPUS_ABSENT):
            corpus_skips += 1
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    lines = []
    if corpus_skips:
        lines += [
            f"{corpus_skips} skipped: the reference corpus is not at {corpus_dir()}.",
            "  It holds 301 runs recorded with agentfootprint 9.62.0 and the reference's own "
            "answers on them;",
            "  the tests that compare against those answers need it. It is not shipped with the "
            "repository",
            "  (docs/development.md#the-reference-corpus): set CONTEXTLEDGER_CORPUS to its folder "
            "to run them.",
            "  Under CI ($CI set) they fail instead. This note: pytest_terminal_summary in "
            "tests/conftest.py.",
        ]
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        lines.append(f"{count} skipped: {reason}")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once, at the end, why tests skipped (a bare ``s`` says nothing)."""
    lines = skip_summary(terminalreporter.stats.get("skipped", []))
    if lines:
        terminalreporter.section("why tests skipped", sep="-")
        for line in lines:
            terminalreporter.write_line(line)
