"""Shared fixtures: the reference corpus (skipped when absent) and the bundled sample."""

from __future__ import annotations

import gzip
import json
import os
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def corpus_dir() -> Path:
    """The reference corpus: $CONTEXTLEDGER_CORPUS, else ../shared/corpus/agentfootprint-9.62."""
    configured = os.environ.get("CONTEXTLEDGER_CORPUS")
    if configured:
        return Path(configured)
    return REPO.parent / "shared" / "corpus" / "agentfootprint-9.62"


def require_corpus() -> Path:
    path = corpus_dir()
    if not (path / "oracle" / "runs.jsonl").is_file():
        pytest.skip(
            f"reference corpus not found at {path} (set CONTEXTLEDGER_CORPUS to its folder)"
        )
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
