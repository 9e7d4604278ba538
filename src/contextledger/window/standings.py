"""The model's declared standings of tool results, and what the window knew of them when.

Standings come from a snapshot's findings ledger (``findingsLedger``, rows of kind
``standing``, as newer agentfootprint writes them) and from a file the user labels
results in after the fact. A row counts from the visit after the iteration that
declared it; the last row per ``tool_call_id`` wins. A file row without an
iteration counts from the first visit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from contextledger.read.commitlog import ABSENT, commit_value_at
from contextledger.read.snapshot import Run
from contextledger.tables import schema
from contextledger.tables.build import read_rows
from contextledger.window.refusals import STANDINGS as STANDING_VALUES

#: The key newer agentfootprint files the model's findings under.
FINDINGS_LEDGER_KEY = "findingsLedger"
_FILE_COLUMNS = ("run_id", "tool_call_id", "standing", "iteration")


class StandingsFileError(ValueError):
    """A standings file that cannot be read; the message names the file and the line."""


def standings_from_snapshot(run: Run) -> list[dict[str, Any]]:
    """The ``standing`` rows of a run's findings ledger (final value), in ledger order.

    Rows that are not standings, or lack an id, a known standing or an iteration,
    are skipped (the ledger's writer drops what it cannot read, too).
    """
    log = run.snapshot.commit_log or []
    if not log:
        return []
    ledger = commit_value_at(log, len(log) - 1, FINDINGS_LEDGER_KEY)
    if ledger is ABSENT or not isinstance(ledger, list):
        return []
    rows = []
    for row in ledger:
        if not isinstance(row, dict) or row.get("kind") != "standing":
            continue
        call_id, standing, iteration = (row.get(k) for k in ("toolCallId", "standing", "iteration"))
        if not isinstance(call_id, str) or standing not in STANDING_VALUES:
            continue
        if not isinstance(iteration, int) or isinstance(iteration, bool):
            continue
        rows.append(
            {
                "run_id": run.run_id,
                "tool_call_id": call_id,
                "standing": standing,
                "iteration": iteration,
                "source": "snapshot",
                "source_line": None,
            }
        )
    return rows


def load_standings(path: str | Path) -> pa.Table:
    """Read a standings file: CSV with a header, or JSON Lines (``.jsonl``, ``.ndjson``).

    Columns ``run_id, tool_call_id, standing, iteration``; ``iteration`` may be
    left empty (the row then counts from the first visit). Raises
    :class:`StandingsFileError` naming the file and line of the first bad row.

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    ...     _ = f.write("run_id,tool_call_id,standing,iteration\\nr1,call-3,fact,4\\n")
    >>> load_standings(f.name).to_pylist()[0]["standing"]
    'fact'
    >>> os.unlink(f.name)
    """
    path = Path(path)
    header = f"{', '.join(_FILE_COLUMNS)} (iteration may be empty)"
    try:
        rows = read_rows(path, required=_FILE_COLUMNS[:3], header=header, error=StandingsFileError)
    except (OSError, UnicodeDecodeError) as problem:
        msg = f"{path}: cannot read the standings file ({problem})"
        raise StandingsFileError(msg) from None
    out = [_file_row(path, number, row) for number, row in rows]
    return pa.Table.from_pylist(out, schema=schema.STANDINGS)


def _file_row(path: Path, number: int, row: Any) -> dict[str, Any]:
    where = f"{path}:{number}"
    if not isinstance(row, Mapping):
        msg = f"{where}: a standings row is an object with {', '.join(_FILE_COLUMNS)}"
        raise StandingsFileError(msg)
    for key in ("run_id", "tool_call_id", "standing"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            msg = f"{where}: a standings row needs {key} (a non-empty string)"
            raise StandingsFileError(msg)
    standing = row["standing"].strip()
    if standing not in STANDING_VALUES:
        msg = f"{where}: unknown standing {standing!r} (allowed: {', '.join(STANDING_VALUES)})"
        raise StandingsFileError(msg)
    iteration = _iteration(row.get("iteration"))
    if iteration is None:
        msg = (
            f"{where}: iteration {row.get('iteration')!r} is not a whole number "
            f"from 0 to {_MAX_ITERATION}"
        )
        raise StandingsFileError(msg)
    return {
        "run_id": row["run_id"].strip(),
        "tool_call_id": row["tool_call_id"].strip(),
        "standing": standing,
        "iteration": iteration,
        "source": str(path),
        "source_line": number,
    }


#: The largest iteration the standings table holds (``schema.STANDINGS``: int32).
_MAX_ITERATION = 2**31 - 1


def _iteration(value: Any) -> int | None:
    """A file row's iteration (missing or empty: 0), or None when it is no whole number
    the table holds: text of ASCII digits or a JSON integer, 0 to 2**31 - 1.

    >>> _iteration(" 4 "), _iteration(""), _iteration("1_0"), _iteration(2**31), _iteration(2.0)
    (4, 0, None, None, None)
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= _MAX_ITERATION else None


class StandingsTimeline:
    """What a run's window knew of its standings at each visit.

    Rows are ordered by declaring iteration (ties: snapshot rows, then file rows,
    each in their own order); at a visit of iteration ``i`` the last row per id
    among rows declared before ``i`` counts.

    >>> timeline = StandingsTimeline([("c1", "open", 2), ("c1", "fact", 5)])
    >>> timeline.at(3), timeline.at(6), timeline.final()
    ({'c1': 'open'}, {'c1': 'fact'}, {'c1': 'fact'})
    """

    def __init__(self, rows: Iterable[tuple[str, str, int]]) -> None:
        self._rows = sorted(rows, key=lambda row: row[2])
        self._cache: dict[int, dict[str, str]] = {}

    def __bool__(self) -> bool:
        return bool(self._rows)

    @property
    def rows(self) -> list[tuple[str, str, int]]:
        """``(tool_call_id, standing, iteration)``, ordered by iteration."""
        return self._rows

    def at(self, iteration: int) -> dict[str, str]:
        """Standings in force at the visit before the call of ``iteration``."""
        known = self._cache.get(iteration)
        if known is None:
            known = {call_id: standing for call_id, standing, at in self._rows if at < iteration}
            self._cache[iteration] = known
        return known

    def final(self) -> dict[str, str]:
        """The last standing filed for each result, whenever it was filed."""
        return {call_id: standing for call_id, standing, _ in self._rows}


def timelines(rows: Sequence[Mapping[str, Any]]) -> dict[str, StandingsTimeline]:
    """One :class:`StandingsTimeline` per run from standings rows (snapshot rows first)."""
    ordered = sorted(rows, key=lambda row: row["source"] != "snapshot")
    by_run: dict[str, list[tuple[str, str, int]]] = {}
    for row in ordered:
        by_run.setdefault(row["run_id"], []).append(
            (row["tool_call_id"], row["standing"], int(row["iteration"]))
        )
    return {run_id: StandingsTimeline(items) for run_id, items in by_run.items()}
