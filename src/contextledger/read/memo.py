"""What the readers of one snapshot ask for in turn, made once and let go of together.

A run's two accountings, its answer slice and its message stream ask for the same inner
logs, log indexes and slice in turn: each :class:`LastSnapshot` keeps what it was asked
for the snapshot read last. :func:`forget` lets go of all of them once a run is read
(:func:`~contextledger.tables.files.read_file` calls it): kept until the next run, a
decoded snapshot stayed alive through the cycle collector's pass after each file, which
walked it (0.16 ms of CPU a run in ingest, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any


class LastSnapshot:
    """Values made for the snapshot read last, by key (another snapshot starts afresh).

    >>> made = LastSnapshot()
    >>> first, second = object(), object()
    >>> made.of(first)["log"] = 1
    >>> made.of(first), made.of(second)
    ({'log': 1}, {})
    """

    __slots__ = ("_owner", "_values")

    def __init__(self) -> None:
        self._owner: object = None
        self._values: dict[Any, Any] = {}
        _MEMOS.append(self)

    def of(self, snapshot: object) -> dict[Any, Any]:
        """The values kept for ``snapshot``: empty when it is not the one read last."""
        if self._owner is not snapshot:
            self._owner, self._values = snapshot, {}
        return self._values

    def clear(self) -> None:
        self._owner, self._values = None, {}


_MEMOS: list[LastSnapshot] = []


def forget() -> None:
    """Let go of every value kept for the snapshot read last.

    >>> made = LastSnapshot()
    >>> snapshot = object()
    >>> made.of(snapshot)["log"] = 1
    >>> forget()
    >>> made.of(snapshot)
    {}
    """
    for memo in _MEMOS:
        memo.clear()
