"""The files given beside the runs: outcome labels and static tool names (and the rows
of findings standings files), read strictly, every refusal naming its file and line.

Apart from :mod:`.build` because these are small user-written files, read whole and
refused at the first bad row, where snapshots are read past every bad file.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from contextledger.read.snapshot import BOM

#: Suffixes read as JSON Lines by :func:`read_rows` (anything else is CSV with a header).
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".json")


def read_rows(
    path: Path,
    *,
    required: Sequence[str] = (),
    header: str = "",
    error: type[ValueError] = ValueError,
) -> list[tuple[int, Any]]:
    """Every row of :func:`iter_rows`, as a list."""
    return list(iter_rows(path, required=required, header=header, error=error))


def iter_rows(
    path: Path,
    *,
    required: Sequence[str] = (),
    header: str = "",
    error: type[ValueError] = ValueError,
) -> Iterator[tuple[int, Any]]:
    """``(line number, row)`` of a CSV (with a header) or JSON Lines file, one at a time
    (a reader may stop early: nothing after is parsed).

    JSON Lines is chosen by the ``.jsonl`` / ``.ndjson`` / ``.json`` suffix; lines end
    at ``\\n`` only (U+2028 and its kin are valid inside JSON). CSV is parsed strictly:
    blank lines are skipped; a quote left open, a value that runs over several lines,
    or more values than the header has columns is refused. Raises ``error`` naming the
    file and line of the first such row, of invalid JSON, of text that is not UTF-8,
    and, when ``required`` columns are named, of a CSV header that lacks one
    (``header`` describes the header the file should have).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    ...     _ = f.write('run_id,label\\nr1,"good\\nr2,bad\\n')
    >>> read_rows(Path(f.name))
    Traceback (most recent call last):
    ...
    ValueError: ...csv:2: a quoted value is never closed (an unbalanced quote?)
    >>> os.unlink(f.name)
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as problem:
        number = path.read_bytes()[: problem.start].count(b"\n") + 1
        msg = f"{path}:{number}: not UTF-8 text ({problem.reason})"
        raise error(msg) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if path.suffix in JSON_LINES_SUFFIXES:
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as problem:
                    msg = f"{path}:{number}: invalid JSON ({problem.msg})"
                    raise error(msg) from None
        return
    yield from _csv_rows(path, text, required, header, error)


def _csv_rows(
    path: Path, text: str, required: Sequence[str], header: str, error: type[ValueError]
) -> Iterator[tuple[int, dict[str, str | None]]]:
    reader = csv.reader(io.StringIO(text, newline="\n"), strict=True)
    columns: list[str] | None = None

    def lacking(found: list[str]) -> None:
        missing = [column for column in required if column not in found]
        if missing:
            wanted = header or ", ".join(required)
            msg = f"{path}:1: the header needs {wanted}; missing {', '.join(missing)}"
            raise error(msg)

    while True:
        first_line = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as problem:
            reason = str(problem)
            if reason == "unexpected end of data":
                reason = "a quoted value is never closed (an unbalanced quote?)"
            raise error(f"{path}:{first_line}: {reason}") from None
        if reader.line_num != first_line:
            msg = (
                f"{path}:{first_line}: a quoted value runs on to line {reader.line_num} "
                "(an unbalanced quote?); values here hold no line breaks"
            )
            raise error(msg)
        if not values:
            continue
        if columns is None:
            columns = values
            lacking(columns)
            continue
        if len(values) > len(columns):
            msg = (
                f"{path}:{first_line}: {len(values)} values for the header's {len(columns)} columns"
            )
            raise error(msg)
        row: dict[str, str | None] = dict.fromkeys(columns)
        row.update(zip(columns, values, strict=False))
        yield first_line, row
    if columns is None:
        lacking([])


def _label_text(row: Mapping[str, Any], key: str) -> str | None:
    """``row[key]`` as an outcome row's text, or None when it is missing or empty."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        return None
    return str(value)


#: The most distinct labels an outcomes file may hold. Labels are categories (good, bad,
#: escalated); every piece is compared with every label, so a column of run ids or free
#: text given as the label would ask for pieces x rows answers (1M labels over the 14
#: sample runs went past 8 GB). 2,000 labels over the sample: 0.5 GB, 13 s.
MAX_DISTINCT_LABELS = 2_000


def load_outcomes(path: str | Path) -> pa.Table:
    """Read outcome labels from CSV (header ``run_id,label``) or JSON Lines.

    A run may carry several labels (one row each). Raises ``ValueError`` naming
    the file and line of a row that is not valid CSV or JSON (see :func:`read_rows`)
    or lacks a ``run_id`` or ``label`` (missing, empty or blank), and a file of more
    than :data:`MAX_DISTINCT_LABELS` distinct labels, at the first label past it.
    """
    path = Path(path)
    rows = iter_rows(path, required=("run_id", "label"))
    run_ids, labels = [], []
    distinct: set[str] = set()
    for number, row in rows:
        run_id = _label_text(row, "run_id") if isinstance(row, Mapping) else None
        label = _label_text(row, "label") if isinstance(row, Mapping) else None
        if run_id is None or label is None:
            msg = f"{path}:{number}: an outcome row needs a run_id and a label (non-empty)"
            raise ValueError(msg)
        distinct.add(label)
        if len(distinct) > MAX_DISTINCT_LABELS:
            msg = (
                f"{path}:{number}: more than {MAX_DISTINCT_LABELS:,} distinct labels; labels "
                "are categories (good, bad, ...): is the label column run ids or free text?"
            )
            raise ValueError(msg)
        run_ids.append(run_id)
        labels.append(label)
    from contextledger.tables import schema

    return schema.from_columns({"run_id": run_ids, "label": labels}, schema.OUTCOMES)


def load_static_tools(path: str | Path) -> dict[str, list[str]]:
    """Read a static-tool-names sidecar: ``{run_id: [names]}`` JSON, or JSON Lines of
    ``{"run_id": ..., "static_tool_names": [...]}``."""
    path = Path(path)
    data = path.read_bytes().removeprefix(BOM)  # a UTF-8 BOM is no JSON
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
