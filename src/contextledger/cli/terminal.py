"""How a result table reads in a terminal: numbers for people, no wider than the screen.

Only the ``table`` format passes through here; CSV, JSON and Parquet keep exact values.
The width is ``COLUMNS`` when set, else the terminal's when stdout is one. Piped without
``COLUMNS``, or written with ``-o FILE``, a table keeps every column and wraps nothing:
what a script or a file receives does not depend on the window it was typed in.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contextledger.output import CONTROL_ESCAPES, terminal_text

if TYPE_CHECKING:
    import polars as pl

#: A text cell that holds only numbers (``1791.5 / 34493``, ``12,588``, ``-``): shown as a
#: count is, when its column shows it was written as one (a `` / `` or a ``,`` somewhere;
#: digits alone may be an id, and are left as they are).
_TERM = r"(?:-|-?[\d,]+(?:\.\d+)?)"
_NUMERIC_TEXT = re.compile(rf"{_TERM}(?: / {_TERM})*")
#: A whole part of four digits or more, not after a decimal point.
_UNGROUPED = re.compile(r"(?<![.\d])\d{4,}")

#: Decimals every rate, share and interval bound is shown with, so that ``earn_rate``
#: and its interval read at the same precision (0.048 in [0.008, 0.227]).
RATE_DECIMALS = 3


def output_width(output: str | None) -> int | None:
    """The columns a table printed to stdout may take; None: no limit.

    ``COLUMNS`` (a positive integer) wins, piped or not; else the terminal's width when
    stdout is one; else (piped, or ``output`` names a file) no limit.

    >>> output_width("ledger.txt") is None
    True
    """
    if output is not None:
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        attached = sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        attached = False
    if not attached:
        return None
    import shutil

    return shutil.get_terminal_size().columns


@dataclass(frozen=True)
class Fit:
    """How a table gives way when it is wider than the screen.

    ``keep``: columns always shown; ``drop_first``: the others in the order they go
    (a column named in neither goes before them, the rightmost first); ``wrap``: text
    columns whose cells may break after each comma (a policy spec) before any column
    goes; ``hint``: where the hidden columns can be read, said after them.
    """

    keep: Sequence[str] = ()
    drop_first: Sequence[str] = ()
    wrap: Sequence[str] = ()
    hint: str = "use --format csv or a wider terminal"


def table_text(
    frame: pl.DataFrame,
    *,
    width: int | None = None,
    fit: Fit | None = None,
    str_len: int | None = 60,
) -> str:
    """``frame`` as a table for people: every row, counts with thousands separators and
    right-aligned, fractions at :data:`RATE_DECIMALS` decimals, no shape or dtype lines.

    Wider than ``width``, it first breaks ``fit.wrap`` cells after commas, then hides
    columns (``fit``'s order) until it fits, and says which in a line at the end; when
    even the kept columns do not fit, their cells wrap. Control characters in text cells
    are shown as ``\\xNN`` escapes (:func:`~contextledger.output.terminal_text`), cells
    first so that columns stay aligned.

    >>> import polars as pl
    >>> frame = pl.DataFrame({"id": ["a"], "offered": [78077285], "earn_rate": [0.047619]})
    >>> print(table_text(frame))
    ┌────┬────────────┬───────────┐
    │ id ┆    offered ┆ earn_rate │
    ╞════╪════════════╪═══════════╡
    │ a  ┆ 78,077,285 ┆     0.048 │
    └────┴────────────┴───────────┘
    >>> print(table_text(frame, width=28, fit=Fit(keep=["id", "earn_rate"])))
    ┌────┬───────────┐
    │ id ┆ earn_rate │
    ╞════╪═══════════╡
    │ a  ┆     0.048 │
    └────┴───────────┘
    1 column hidden: offered (use --format csv or a wider terminal)
    """
    import polars as pl

    fit = fit or Fit()
    escapes = list(CONTROL_ESCAPES)
    frame = frame.with_columns(
        pl.col(pl.String).str.replace_many(escapes, [CONTROL_ESCAPES[c] for c in escapes])
    )
    if str_len is not None:  # cut here, not by Polars, so that widths are measured as shown
        text_columns = [name for name, dtype in frame.schema.items() if dtype == pl.String]
        frame = frame.with_columns(
            pl.when(pl.col(name).str.len_chars() > str_len)
            .then(pl.col(name).str.slice(0, str_len) + "…")
            .otherwise(pl.col(name))
            .alias(name)
            for name in text_columns
        )
    frame = frame.with_columns(_numeric_text(frame))
    order = frame.columns
    hidden: list[str] = []
    widths = _column_widths(frame) if width is not None else {}
    if width is not None and _table_width(widths) > width:
        wrapped = [name for name in fit.wrap if frame.schema.get(name) == pl.String]
        if wrapped:
            frame = frame.with_columns(pl.col(wrapped).str.replace_all(",", ",\n", literal=True))
            widths = _column_widths(frame)
        for name in _drop_order(frame.columns, fit):
            if _table_width(widths) <= width:
                break
            del widths[name]
            hidden.append(name)
        frame = frame.drop(hidden)
    # the kept columns alone wider than the terminal: their cells wrap
    fits = width is None or _table_width(widths) <= width
    text = _render(frame, None if fits else width)
    if hidden:
        hidden.sort(key=order.index)  # named as the full table shows them
        columns = "column" if len(hidden) == 1 else "columns"
        said = f"{len(hidden)} {columns} hidden: {', '.join(hidden)} ({fit.hint})"
        text += "\n" + prose(terminal_text(said), width)
    return text


def _numeric_text(frame: pl.DataFrame) -> list[pl.Series]:
    """The text columns that hold only numbers (a ``median / total`` cell), their whole
    parts grouped by thousands and right-aligned, as number columns are."""
    import polars as pl

    shown = []
    for name, dtype in frame.schema.items():
        if dtype != pl.String:
            continue
        cells = frame[name].to_list()
        if not all(cell is None or _NUMERIC_TEXT.fullmatch(cell) for cell in cells):
            continue
        if not any(cell is not None and (" / " in cell or "," in cell) for cell in cells):
            continue  # digits alone: perhaps ids, not counts
        grouped = [
            None if cell is None else _UNGROUPED.sub(lambda m: f"{int(m[0]):,}", cell)
            for cell in cells
        ]
        widest = max((len(cell) for cell in grouped if cell is not None), default=len(name))
        widest = max(widest, len(name))  # right-aligned under the header too
        aligned = [None if cell is None else cell.rjust(widest) for cell in grouped]
        shown.append(pl.Series(name, aligned, dtype=pl.String))
    return shown


def _drop_order(columns: Sequence[str], fit: Fit) -> list[str]:
    """The columns ``fit`` lets go, first to last: those it names nowhere (rightmost
    first), then ``fit.drop_first`` in order."""
    named = {*fit.keep, *fit.drop_first}
    unnamed = [name for name in reversed(columns) if name not in named]
    return [*unnamed, *(name for name in fit.drop_first if name in columns)]


def _column_widths(frame: pl.DataFrame) -> dict[str, int]:
    """Each column's width as Polars draws it, padding included, measured on the rows
    that draw widest (the longest text line, the longest integer, the largest and the
    smallest float): drawing 10,000 rows takes a second, these few a millisecond.

    >>> import polars as pl
    >>> _column_widths(pl.DataFrame({"id": ["a", "b\\nlonger"], "n": [5, -12345]}))
    {'id': 8, 'n': 9}
    """
    import polars as pl

    rows = {0} if frame.height else set()
    for name, dtype in frame.schema.items():
        column = frame[name]
        if dtype == pl.String:
            lines = column.str.split("\n").list.eval(pl.element().str.len_chars()).list.max()
            candidates = [lines.arg_max()]
        elif dtype.is_float():
            candidates = [column.arg_max(), column.arg_min()]
        else:
            try:
                candidates = [column.cast(pl.String).str.len_chars().arg_max()]
            except pl.exceptions.PolarsError:  # nothing to measure by: every row
                candidates = list(range(frame.height))
        rows.update(row for row in candidates if row is not None)
    border = _render(frame[sorted(rows)], None).splitlines()[0]
    return dict(zip(frame.columns, map(len, border[1:-1].split("┬")), strict=True))


def _table_width(widths: dict[str, int]) -> int:
    """A table's width from its columns': their borders and separators added."""
    return sum(widths.values()) + len(widths) + 1


def _render(frame: pl.DataFrame, width: int | None) -> str:
    import polars as pl

    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=-1 if width is None else width,
        fmt_str_lengths=1_000_000,  # cut already (table_text's str_len)
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        thousands_separator=",",
        float_precision=RATE_DECIMALS,
        tbl_cell_numeric_alignment="RIGHT",
    ):
        return terminal_text(str(frame), keep="\n")


def prose(text: str, width: int | None) -> str:
    """``text``'s lines wrapped at word boundaries to ``width`` (None: as they are), an
    indented line's continuations indented under it, the newline it ends with kept.

    >>> prose("one two three\\n  four five", 9)
    'one two\\nthree\\n  four\\n  five'
    """
    if width is None:
        return text
    ending = "\n" if text.endswith("\n") else ""
    wrapped = []
    for line in text.removesuffix("\n").split("\n"):
        indent = line[: len(line) - len(line.lstrip(" "))]
        wrapped.append(
            textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False) or line
        )
    return "\n".join(wrapped) + ending
