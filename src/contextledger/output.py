"""Where output goes: files that are whole or absent, and text a terminal shows as text.

A command's ``-o FILE`` is written under a temporary name in the same folder and
renamed into place, so a full disk, an error or a kill leaves the old file (or
none), never a partial or empty one. A symlink is written through (the file it
names is replaced, the link kept); a device or FIFO (``-o /dev/null``) is written
to directly, since renaming onto it would replace the device with a file.

Names read from input (tool names, piece and run ids, file names) may carry control
characters; printed raw, an ESC sequence
would recolour, move or retitle the terminal, so what is printed for people shows
them as ``\\xNN`` escapes. Machine formats (CSV, JSON, Parquet) keep exact values,
a text cell starting with ``=`` too, unless ``--csv-safe`` asks for the spreadsheet guard
(:func:`spreadsheet_safe`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

#: Control characters (C0, DEL, C1) and the visible escape each is printed as.
CONTROL_ESCAPES: dict[str, str] = {
    chr(code): f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
}
_ESCAPE_TABLE = {ord(char): escape for char, escape in CONTROL_ESCAPES.items()}


def terminal_text(text: str, *, keep: str = "") -> str:
    """``text`` with every control character written as a visible ``\\xNN`` escape.

    ``keep`` lists control characters to leave as they are (say ``"\\n"`` for a
    multi-line message whose lines come from the program, not the input).

    >>> terminal_text("read\\x1b[2J\\x07.json: bad\\rok")
    'read\\\\x1b[2J\\\\x07.json: bad\\\\x0dok'
    >>> terminal_text("two\\nlines\\x9b", keep="\\n")
    'two\\nlines\\\\x9b'
    """
    table = _ESCAPE_TABLE
    if keep:
        table = {code: escape for code, escape in table.items() if chr(code) not in keep}
    return text.translate(table)


def terminal_lines(lines: Iterable[str]) -> str:
    """The program's ``lines`` joined by newlines, each shown with :func:`terminal_text`:
    a newline inside a line came from the input (a file name may hold one) and is
    escaped like any control character, so it cannot pass for a line of the program's.

    >>> terminal_lines(["skipped:", "  bad\\nname\\x1b.json"])
    'skipped:\\n  bad\\\\x0aname\\\\x1b.json'
    """
    return "\n".join(terminal_text(line) for line in lines)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` when the block ends.

    Missing parent folders are created. If the block raises (a full disk, an error
    computing what to write), the temporary file is removed and ``path`` is left as
    it was. The temporary name keeps ``path``'s suffix (for writers that choose a
    format by it) and starts with ``.tmp-``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with atomic_path(Path(folder) / "new" / "out.csv") as temporary:
    ...         _ = temporary.write_text("a,b\\n")
    ...         during = sorted(p.name for p in temporary.parent.iterdir())
    ...     after = sorted(p.name for p in (Path(folder) / "new").iterdir())
    >>> during[0].startswith(".tmp-") and during[0].endswith("-out.csv"), after
    (True, ['out.csv'])
    """
    target = file_target(path)
    if target.is_symlink():
        target = target.resolve()  # write where the link points; the link stays
    if target.exists() and not target.is_file():  # /dev/null, a FIFO: renaming would
        yield target  # replace the device with a file; there is nothing to keep whole
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".tmp-{secrets.token_hex(4)}-{target.name}")
    try:
        yield temporary
        descriptor = os.open(temporary, os.O_RDONLY)  # raises if the block wrote nothing
        try:
            os.fsync(descriptor)  # the data is on disk before the name points at it
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def file_target(path: str | Path) -> Path:
    """``path`` as a file to write, or an ``OSError`` saying in one line why it names none:
    empty, a folder (``out/``, ``.``, an existing folder) or below a file (``file.py/x``).
    Checked first, so nothing is made or written (``Path('out/')`` drops the slash and
    would write a file ``out``; ``Path('')`` is ``.``).

    >>> file_target("out/")
    Traceback (most recent call last):
    IsADirectoryError: [Errno 21] names a folder, not a file: 'out/'
    """
    text = os.fspath(path)
    if not text:
        raise FileNotFoundError(errno.ENOENT, "no file name given (an empty path)", text)
    target = Path(text)
    if text.endswith(("/", os.sep)) or target.name in ("", ".", "..") or target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "names a folder, not a file", text)
    for parent in target.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                reason = f"{parent} is not a folder"
                raise NotADirectoryError(errno.ENOTDIR, reason, text)
            break
    return target


def write_text_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`; returns ``path``."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)


#: What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text cell that starts like a formula (``= + - @``, a tab or
    a carriage return) prefixed with ``'``, for a CSV opened in a spreadsheet. Numbers
    stay numbers (a negative count is no formula); the text is no longer exact.

    >>> import polars as pl
    >>> frame = pl.DataFrame({"id": ["=HYPERLINK(1)", "ok", None], "n": [-1, 2, 3]})
    >>> spreadsheet_safe(frame).rows()
    [("'=HYPERLINK(1)", -1), ('ok', 2), (None, 3)]
    """
    import polars as pl

    starts = "^[" + "".join(FORMULA_STARTS).replace("-", "\\-") + "]"
    return frame.with_columns(
        pl.when(pl.col(name).str.contains(starts))
        .then("'" + pl.col(name))
        .otherwise(pl.col(name))
        .alias(name)
        for name, dtype in frame.schema.items()
        if dtype == pl.String
    )


def nested_as_json(frame: pl.DataFrame) -> pl.DataFrame:
    """List and struct columns as JSON text, for CSV (which holds only flat values): the
    same columns as JSON Lines and Parquet give (``sql``, ``whatif``); null stays null.

    >>> import polars as pl
    >>> frame = pl.DataFrame({"id": ["a", "b"], "kept": [[1, 2], None]})
    >>> nested_as_json(frame).rows()
    [('a', '[1, 2]'), ('b', None)]
    """
    import json

    import polars as pl

    def encode(value: object) -> str | None:
        return None if value is None else json.dumps(value, default=str, ensure_ascii=False)

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    return frame.with_columns(
        pl.Series(name, [encode(value) for value in frame[name].to_list()], dtype=pl.String)
        for name in nested
    )
