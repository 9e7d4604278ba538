"""Standings from a file: the user's labels of tool results, as the ``STANDINGS`` table.

A user may file, after the fact, which tool results were facts (CSV with a header,
or JSON Lines). Each row is checked strictly and refused with its file and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from contextledger.read.findings import STANDINGS as STANDING_VALUES
from contextledger.tables import schema
from contextledger.tables.sidecars import read_rows

_FILE_COLUMNS = ("run_id", "tool_call_id", "standing", "iteration")


class StandingsFileError(ValueError):
    """A standings file that cannot be read; the message names the file and the line."""


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
