"""What the window knew of the model's declared standings of tool results, and when.

Standings come from a snapshot's findings ledger (``read.findings``) and from a
file the user labels results in after the fact (``tables.standings``). A row
counts from the visit after the iteration that declared it; the last row per
``tool_call_id`` wins. A file row without an iteration counts from the first visit.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


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
        self._by_id: dict[str, tuple[list[int], list[str]]] | None = None

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

    def standing_at(self, call_id: str, iteration: int) -> str | None:
        """``at(iteration).get(call_id)`` without building every standing in force: one
        search among the rows of ``call_id`` (the kernel asks this per dropped result).

        >>> timeline = StandingsTimeline([("c1", "open", 2), ("c1", "fact", 5)])
        >>> timeline.standing_at("c1", 2), timeline.standing_at("c1", 3)
        (None, 'open')
        """
        if self._by_id is None:
            self._by_id = {}
            for filed_id, standing, at in self._rows:  # in iteration order
                ats, standings = self._by_id.setdefault(filed_id, ([], []))
                ats.append(at)
                standings.append(standing)
        filed_at, filed = self._by_id.get(call_id, ([], []))
        before = bisect.bisect_left(filed_at, iteration)  # rows declared before the visit
        return filed[before - 1] if before else None

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
