"""What an ingest read and did, as the command says it: the sources and the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from contextledger.read.identity import DUPLICATES, describe_duplicates, describe_unmatched
from contextledger.read.snapshot import ReadProblem
from contextledger.tables.build import ACCOUNTING_MODES


@dataclass(frozen=True)
class Source:
    """A file named for ingest, as found on disk."""

    path: str
    size: int | None
    mtime_ns: int | None
    content_hash: str | None


@dataclass
class IngestReport:
    """What one ingest did; :meth:`summary` is what the command prints."""

    archive: str
    files_found: int = 0
    #: Files in input folders not read because of their names (``find_snapshot_files``).
    files_skipped: list[str] = field(default_factory=list)
    files_empty: list[str] = field(default_factory=list)  # 0 bytes: no run, not recorded
    files_unchanged: int = 0  # already ingested with the same content: not read again
    files_read: int = 0
    bytes_read: int = 0
    runs_read: int = 0
    runs_added: int = 0
    runs_already_archived: int = 0
    runs_conflicting: int = 0
    #: Trace runs archived before, whose spans arriving now were merged into them.
    runs_extended: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACCOUNTING_MODES, 0))
    bad_files: int = 0  # files with at least one problem
    problems: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)  # copies already archived
    outcome_labels_added: int = 0  # (run, label) pairs the archive did not hold yet
    #: Run ids of stored labels that name no run the archive holds (said, not an error:
    #: labels may arrive before their runs).
    unmatched_labels: list[str] = field(default_factory=list)
    commits: int = 0
    leftovers_removed: int = 0
    sources_retired: int = 0  # quarantined files since deleted: out of the quarantine
    seconds: float = 0.0

    def summary(self) -> str:
        """A few lines for people: runs read, refused, bad files, where to look."""
        return "\n".join(self.summary_lines())

    def __repr__(self) -> str:
        """The summary's first line, not every field (``.summary()`` has it all)."""
        return f"<IngestReport {self.archive}: {self.summary_lines()[0]}>"

    def _repr_html_(self) -> str:
        """In Jupyter: the summary the command prints, not every field."""
        import html

        return f"<pre>{html.escape(self.summary())}</pre>"

    def summary_lines(self) -> list[str]:
        """:meth:`summary`'s lines (a file name in one may hold a newline of its own)."""
        rate = self.runs_read / self.seconds if self.seconds else 0.0
        megabytes = self.bytes_read / 1e6
        lines = [
            f"{self.runs_read} run(s) read from {self.files_read} file(s) "
            f"({self.files_unchanged} unchanged file(s) skipped) in {self.seconds:.1f} s: "
            f"{rate:.0f} runs/s, {megabytes / self.seconds if self.seconds else 0:.1f} MB/s",
            f"  {self.runs_added} added, {self.runs_already_archived} already archived, "
            f"{self.runs_conflicting} conflicting (same run_id, other content: not added)"
            + (
                f", {self.runs_extended} archived trace run(s) extended by spans that "
                "arrived later (merged in place)"
                if self.runs_extended
                else ""
            ),
            "  refused: "
            + ", ".join(f"{count} under {mode}" for mode, count in self.refused.items()),
            f"  {self.bad_files} bad file(s), {len(self.problems)} problem(s) quarantined"
            + (
                f"; {self.outcome_labels_added} new (run, label) outcome label(s) stored"
                if self.outcome_labels_added
                else ""
            ),
        ]
        unmatched = describe_unmatched(
            "stored outcome label", self.unmatched_labels, runs="run the archive holds"
        )
        if unmatched is not None:
            lines.append(f"  note: {unmatched} (not an error: labels may arrive before their runs)")
        if self.sources_retired:
            lines.append(
                f"  {self.sources_retired} quarantined file(s) since deleted left the quarantine"
            )
        if self.leftovers_removed:
            lines.append(
                f"  removed {self.leftovers_removed} file(s) an interrupted ingest left uncommitted"
            )
        duplicates = pa.Table.from_pylist(self.duplicates, schema=DUPLICATES)
        lines.extend(f"  {line}" for line in describe_duplicates(duplicates))
        for problem in self.problems[:20]:
            lines.append(f"  quarantined {_where(problem)}: {problem['reason']}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        if self.problems:
            lines.append(f"  the quarantine is listed in {Path(self.archive) / 'quarantine.json'}")
        return lines


def _where(problem: Mapping[str, Any]) -> str:
    found = ReadProblem(problem["path"], problem.get("line"), problem.get("run_id"), "")
    where = found.where
    if problem.get("accounting") == "whatif":
        where += " [message stream: whatif only]"
    elif problem.get("accounting"):
        where += f" [{problem['accounting']} accounting]"
    return where
