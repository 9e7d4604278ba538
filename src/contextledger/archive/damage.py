"""Damage found in an archive, and what it leaves out of an answer.

Opening an archive checks its commits and files (:mod:`~contextledger.archive.store`);
what it finds is an :class:`ArchiveProblem` per file, naming the commit it takes out and
its runs, so that several damaged files of one commit count its runs once. A command
asked to write to a damaged archive, or finding damage only once part of an answer was
read, refuses with :class:`ArchiveDamaged`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contextledger.archive.location import ArchiveError


@dataclass(frozen=True)
class ArchiveProblem:
    """Damage found in an archive: the file, and what is wrong with it (and what it costs).

    ``ingest_date`` is the ingest date of the commit it takes out; None when unknown
    (a commit file missing or unreadable). ``commit`` is the number of the commit it
    takes out and ``runs`` how many runs that commit added (None: not known), so that
    several damaged files of one commit count its runs once (:func:`runs_left_out`).

    >>> str(ArchiveProblem("DIR/runs/part-1.parquet", "missing"))
    'DIR/runs/part-1.parquet: missing'
    """

    path: str
    reason: str
    ingest_date: str | None = None
    commit: int | None = None
    runs: int | None = None
    #: What is wrong with the file alone, without what leaving its commit out costs
    #: (None: ``reason`` says no more): what a refusal says, having left nothing out.
    cause: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def unanswered(self) -> str:
        """The problem as a refusal says it: the file, why, and the commit holding it;
        no commit was left out of an answer, since none was given.

        >>> problem = ArchiveProblem("p", "changed: commit 2 is left out", "2026-11-02", 2, 5,
        ...                          cause="changed")
        >>> problem.unanswered()
        'p: changed (in commit 2, ingest date 2026-11-02, with 5 run(s))'
        """
        if self.cause is None or self.commit is None:
            return str(self)
        runs = f", with {self.runs} run(s)" if self.runs is not None else ""
        held = f"in commit {self.commit}, ingest date {self.ingest_date}{runs}"
        return f"{self.path}: {self.cause} ({held})"


class ArchiveDamaged(ArchiveError):
    """A damaged archive asked to take more: writing would hide or deepen the damage."""

    def __init__(
        self, root: Path, problems: Sequence[ArchiveProblem], *, written: bool = True
    ) -> None:
        self.problems = list(problems)
        self.written = written
        said = (
            "so nothing was written to it"
            if written
            else "found only once part of it had been read, so nothing was answered"
        )
        #: The message a line at a time (a name in a line may hold a newline of its own).
        self.lines = [
            f"{root} is damaged, {said} (restore these files from a "
            "backup, or ingest the snapshots into a new archive):",
            *(f"  {problem if written else problem.unanswered()}" for problem in self.problems),
        ]
        super().__init__("\n".join(self.lines))


def runs_left_out(problems: Sequence[ArchiveProblem]) -> tuple[int, bool]:
    """How many runs ``problems`` leave out, each commit they take out counted once, and
    whether that is all (False: a lost commit's count is unknown, so at least this many).

    >>> runs_left_out([ArchiveProblem("a", "", None, 2, 7), ArchiveProblem("b", "", None, 2, 7)])
    (7, True)
    """
    commits: dict[int, int | None] = {}
    for problem in problems:
        if problem.commit is not None:
            commits[problem.commit] = problem.runs
    known = [runs for runs in commits.values() if runs is not None]
    return sum(known), len(known) == len(commits)
