"""One progress line on a terminal, redrawn in place, for the commands that take a while
(``ingest``, ``synth``, ``whatif``): one meter, so they look and behave alike.

A line is drawn only on a terminal: written to a log or a pipe, ``\\r`` redraws would
clutter it, so the stream is None there and the meter says nothing. A meter with a
``delay`` stays quiet until the work has run that long: a quick command prints nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

#: A command that is often quick (``whatif``) draws its line only once it has run this
#: long (seconds): a second's work prints nothing.
SLOW_SECONDS = 2.0
#: The line is redrawn at most this often (seconds), however often it is told.
REDRAW_SECONDS = 0.2


def progress_stream() -> TextIO | None:
    """stderr when it is a terminal (a progress line would clutter a log)."""
    return sys.stderr if sys.stderr.isatty() else None


def chosen_stream(progress: bool | None) -> TextIO | None:
    """Where ``--progress/--no-progress`` draws: stderr, nowhere, or (not given) stderr
    when it is a terminal."""
    if progress is None:
        return progress_stream()
    return sys.stderr if progress else None


class Progress:
    """A one-line meter: :meth:`show` redraws the line (at most every
    :data:`REDRAW_SECONDS`, once ``delay`` seconds have passed), :meth:`close` ends it.
    Silent when ``stream`` is None.

    >>> import io
    >>> meter = Progress(io.StringIO())
    >>> meter.show("1/2 files")
    >>> meter.close("2/2 files")
    >>> meter.stream.getvalue()
    '\\r1/2 files\\r2/2 files\\n'
    """

    def __init__(
        self,
        stream: TextIO | None,
        *,
        delay: float = 0.0,
        started: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
        command: str = "contextledger",
    ) -> None:
        self.stream = stream
        #: What the lines it is shown begin with (the command whose work they count).
        self.command = command
        self.delay = delay
        self.clock = clock
        self.started = clock() if started is None else started
        self.shown_at: float | None = None
        self.width = 0

    @property
    def elapsed(self) -> float:
        """Seconds since the work started (never 0, to divide by)."""
        return max(self.clock() - self.started, 1e-9)

    @property
    def drawn(self) -> bool:
        """Whether a line is on the terminal (and :meth:`close` will end it)."""
        return self.shown_at is not None

    def due(self) -> bool:
        """Whether :meth:`show` would draw now: worth building the line for."""
        return self.stream is not None and self._due(self.clock())

    def show(self, line: str, *, force: bool = False, now: float | None = None) -> None:
        """Redraw the line as ``line`` if it is :meth:`due` (``force``: once past the delay,
        whenever it was last drawn); a shorter line blanks the rest of the last. ``now``:
        the clock's reading the line was built at (read again when not given)."""
        if self.stream is None:
            return
        now = self.clock() if now is None else now
        if not (self._due(now) or (force and now - self.started >= self.delay)):
            return
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width, self.shown_at = len(line), now

    def close(self, line: str | None = None) -> None:
        """End the line, if one was drawn, drawing ``line`` (the final count) first."""
        if self.stream is None or self.shown_at is None:
            return
        if line is not None:
            self.stream.write("\r" + line.ljust(self.width))
        self.stream.write("\n")
        self.stream.flush()
        self.shown_at, self.width = None, 0

    def _due(self, now: float) -> bool:
        if now - self.started < self.delay:
            return False
        return self.shown_at is None or now - self.shown_at >= REDRAW_SECONDS
