"""Read snapshot files into the Arrow tables of ``schema.py``, keeping going past bad files.

One worker reads one file; files are shared across processes when there are
many. A file that cannot be read becomes a row of the ``problems`` table
(path, line, run, reason) and everything else is still read.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from contextledger.read.facts import RunFacts
from contextledger.read.reference import record_run
from contextledger.read.snapshot import (
    ReadError,
    ReadProblem,
    Run,
    RunSource,
    decode_run,
    find_snapshot_files,
    iter_documents,
)
from contextledger.tables import schema

ACCOUNTING_MODES = ("corrected", "reference")


def _accounting(mode: str) -> Callable[[Run, Sequence[str]], RunFacts]:
    if mode == "reference":
        return lambda run, names: record_run(run.snapshot, names)
    if mode == "corrected":
        from contextledger.read.corrected import meter_run

        return meter_run
    msg = f"unknown accounting mode {mode!r}: choose one of {', '.join(ACCOUNTING_MODES)}"
    raise ValueError(msg)


@dataclass
class RunTables:
    """The tables read from a batch of runs under one accounting mode."""

    mode: str
    runs: pa.Table
    offers: pa.Table
    uses: pa.Table
    outcomes: pa.Table = field(default_factory=lambda: schema.empty(schema.OUTCOMES))
    problems: pa.Table = field(default_factory=lambda: schema.empty(schema.PROBLEMS))

    def with_outcomes(self, outcomes: pa.Table) -> RunTables:
        """The same tables with ``outcomes`` (run_id, label) added."""
        combined = pa.concat_tables([self.outcomes, outcomes.cast(schema.OUTCOMES)])
        return RunTables(self.mode, self.runs, self.offers, self.uses, combined, self.problems)


@dataclass(frozen=True)
class _RunRow:
    """What a worker sends back for one run: small, so no snapshot crosses processes."""

    run_id: str
    source: RunSource
    runner_kind: str | None
    static_tool_names_from: str
    static_tool_name_count: int
    facts: RunFacts


@dataclass
class _FileResult:
    runs: list[_RunRow] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)


def _static_names(run: Run, sidecar: Mapping[str, Sequence[str]]) -> tuple[list[str], str]:
    if run.run_id in sidecar:
        return list(sidecar[run.run_id]), "sidecar"
    if run.static_tool_names is not None:
        return list(run.static_tool_names), "wrapper"
    return [], "none"


def _read_file(
    path: Path, mode: str, sidecar: Mapping[str, Sequence[str]], strict: bool
) -> _FileResult:
    meter = _accounting(mode)
    result = _FileResult()
    try:
        for document in iter_documents(path):
            try:
                run = decode_run(document)
                names, names_from = _static_names(run, sidecar)
                facts = meter(run, names)
            except ReadError as error:
                if strict:
                    raise
                result.problems.append(_problem(error.source, error.reason, error.run_id))
                continue
            except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as error:
                # A snapshot that decodes but whose values break the fold.
                reason = f"unreadable snapshot content ({type(error).__name__}: {error})"
                if strict:
                    raise ReadError(document.source, reason) from None
                result.problems.append(_problem(document.source, reason, None))
                continue
            result.runs.append(
                _RunRow(run.run_id, run.source, run.runner_kind, names_from, len(names), facts)
            )
    except ReadError as error:
        if strict:
            raise
        result.problems.append(_problem(error.source, error.reason, error.run_id))
    return result


def _problem(source: RunSource, reason: str, run_id: str | None) -> ReadProblem:
    return ReadProblem(source.path, source.line, run_id, reason)


def _read_all(
    files: Sequence[Path],
    mode: str,
    sidecar: Mapping[str, Sequence[str]],
    strict: bool,
    workers: int,
) -> Iterable[_FileResult]:
    if workers <= 1 or len(files) < 8:
        for path in files:
            yield _read_file(path, mode, sidecar, strict)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        chunk = max(1, len(files) // (workers * 8))
        yield from pool.map(
            _read_file,
            files,
            [mode] * len(files),
            [sidecar] * len(files),
            [strict] * len(files),
            chunksize=chunk,
        )


def read_runs(
    paths: Sequence[str | Path] | str | Path,
    *,
    mode: str = "corrected",
    static_tools: Mapping[str, Sequence[str]] | None = None,
    strict: bool = False,
    workers: int | None = None,
) -> RunTables:
    """Read every snapshot under ``paths`` into the run, offer and use tables.

    Parameters
    ----------
    paths
        Files (``.json``, ``.json.gz``, JSON Lines) or directories, read recursively.
    mode
        ``"corrected"`` (default) or ``"reference"`` (agentfootprint 9.62's own numbers).
    static_tools
        ``run_id -> static tool names``, overriding the corpus wrapper's
        ``static_tool_names`` (the reference reads these from the runner).
    strict
        Raise :class:`~contextledger.read.snapshot.ReadError` at the first bad file
        instead of listing it in ``problems``.
    workers
        Processes to read with; default: one per core.

    Examples
    --------
    >>> tables = read_runs("data/sample", mode="reference")
    >>> tables.runs.num_rows > 0, tables.problems.num_rows
    (True, 0)
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    _accounting(mode)  # fail fast on an unknown mode
    files = find_snapshot_files(paths)
    sidecar = dict(static_tools or {})
    worker_count = workers if workers is not None else (os.cpu_count() or 1)
    runs: dict[str, list[Any]] = {name: [] for name in schema.RUNS.names}
    offers: dict[str, list[Any]] = {name: [] for name in schema.OFFERS.names}
    uses: dict[str, list[Any]] = {name: [] for name in schema.USES.names}
    problems: dict[str, list[Any]] = {name: [] for name in schema.PROBLEMS.names}
    order = 0
    for result in _read_all(files, mode, sidecar, strict, worker_count):
        for problem in result.problems:
            for name in schema.PROBLEMS.names:
                problems[name].append(getattr(problem, name))
        for row in result.runs:
            _append_run(runs, offers, uses, row, order)
            order += 1
    return RunTables(
        mode=mode,
        runs=pa.table(runs, schema=schema.RUNS),
        offers=pa.table(offers, schema=schema.OFFERS),
        uses=pa.table(uses, schema=schema.USES),
        problems=pa.table(problems, schema=schema.PROBLEMS),
    )


def _append_run(
    runs: dict[str, list[Any]],
    offers: dict[str, list[Any]],
    uses: dict[str, list[Any]],
    run: _RunRow,
    order: int,
) -> None:
    facts = run.facts
    row = {
        "run_id": run.run_id,
        "run_order": order,
        "source_path": run.source.path,
        "source_line": run.source.line,
        "runner_kind": run.runner_kind,
        "accounting": facts.accounting,
        "metered": facts.metered,
        "refused_reason": facts.refused_reason,
        "model_call_count": facts.model_call_count,
        "metered_call_count": facts.metered_call_count,
        "unmetered_kinds": facts.unmetered_kinds,
        "grouped": facts.grouped,
        "slice_available": facts.slice_available,
        "static_tool_names_from": run.static_tool_names_from,
        "static_tool_name_count": run.static_tool_name_count,
    }
    for name, value in row.items():
        runs[name].append(value)
    for seq, (call_index, kind, piece_id, tokens) in enumerate(facts.offers):
        offers["run_id"].append(run.run_id)
        offers["call_index"].append(call_index)
        offers["kind"].append(kind)
        offers["piece_id"].append(piece_id)
        offers["approx_tokens"].append(tokens)
        offers["seq"].append(seq)
    for seq, (kind, piece_id, signal, use_call) in enumerate(facts.uses):
        uses["run_id"].append(run.run_id)
        uses["call_index"].append(use_call)
        uses["kind"].append(kind)
        uses["piece_id"].append(piece_id)
        uses["signal"].append(signal)
        uses["seq"].append(seq)


def load_outcomes(path: str | Path) -> pa.Table:
    """Read outcome labels from CSV (header ``run_id,label``) or JSON Lines.

    A run may carry several labels (one row each). Raises ``ValueError`` naming
    the file and line when a row lacks ``run_id`` or ``label``.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    rows: list[tuple[int, Mapping[str, Any]]] = []
    if path.suffix in (".jsonl", ".ndjson", ".json"):
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as error:
                    msg = f"{path}:{number}: invalid JSON ({error.msg})"
                    raise ValueError(msg) from None
    else:
        reader = csv.DictReader(io.StringIO(text))
        rows = [(number, row) for number, row in enumerate(reader, start=2)]
    run_ids, labels = [], []
    for number, row in rows:
        if not isinstance(row, Mapping) or not row.get("run_id") or not row.get("label"):
            msg = f"{path}:{number}: an outcome row needs a run_id and a label"
            raise ValueError(msg)
        run_ids.append(str(row["run_id"]))
        labels.append(str(row["label"]))
    return pa.table({"run_id": run_ids, "label": labels}, schema=schema.OUTCOMES)


def load_static_tools(path: str | Path) -> dict[str, list[str]]:
    """Read a static-tool-names sidecar: ``{run_id: [names]}`` JSON, or JSON Lines of
    ``{"run_id": ..., "static_tool_names": [...]}``."""
    path = Path(path)
    data = path.read_bytes()
    try:
        if path.suffix in (".jsonl", ".ndjson"):
            lines = [msgspec.json.decode(line) for line in data.splitlines() if line.strip()]
            mapping = {str(item["run_id"]): item["static_tool_names"] for item in lines}
        else:
            mapping = msgspec.json.decode(data)
    except (msgspec.DecodeError, KeyError, TypeError) as error:
        msg = f"{path}: not a static tool names sidecar ({error})"
        raise ValueError(msg) from None
    if not isinstance(mapping, dict) or not all(
        isinstance(names, list) and all(isinstance(n, str) for n in names)
        for names in mapping.values()
    ):
        msg = f"{path}: a sidecar maps each run_id to a list of tool names"
        raise ValueError(msg)
    return mapping
