"""Read an archive lazily: the ledger streams its Parquet files, filtered before reading.

A selection (ingest date range, run ids, an outcome label) picks the commits and
rows to read; the date range prunes whole files, so a nightly job reading today's
partition reads only today's files. ``ArchiveTables`` stands in for ``RunTables``:
the ledger and the DuckDB views scan the files, anything else gets Arrow tables
collected on demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from contextledger.archive.damage import ArchiveDamaged, ArchiveProblem
from contextledger.archive.duckdb_sql import SELECTED_RUNS, read_parquet_sql
from contextledger.archive.selection import Selection, parse_archive_path
from contextledger.archive.store import Archive, ArchiveError, Commit, DataFile
from contextledger.read.identity import DUPLICATES
from contextledger.tables import schema
from contextledger.tables.build import ACCOUNTING_MODES, RunTables


def archive_tables(paths: Sequence[str], mode: str) -> ArchiveTables | None:
    """The archive ``paths`` name, as tables; None when no path is an archive.

    An archive must be the only input (raises :class:`ArchiveError` otherwise).
    """
    archives = [found for path in paths if (found := parse_archive_path(str(path)))]
    if not archives:
        return None
    if len(paths) != 1:
        raise ArchiveError("an archive must be the only input (ingest the other files into it)")
    root, selection = archives[0]
    return ArchiveTables(Archive.open(root), mode, selection)


def latest_outcome_files(files: Sequence[DataFile]) -> list[DataFile]:
    """Of outcomes ``files`` (commit order), each source's latest version, sources in the
    order they first arrived: the labels that count, in the order they are read."""
    latest: dict[str, DataFile] = {}
    for file in files:
        latest[file.source or file.path] = file
    return list(latest.values())


#: A selection of fewer runs than 1 in this many of its commits' runs reads only the
#: commits holding them (found in the run index); a larger one reaches nearly every
#: commit, so it reads every selected commit without looking them up (0.3-1 s at 1M
#: runs), the runs it keeps found row by row as ever.
PRUNE_BELOW = 20
#: ... unless it selects at most this many runs: then the lookup is cheap, and done.
ALWAYS_PRUNE_UP_TO = 10_000


def _empty(table_schema: pa.Schema) -> pl.LazyFrame:
    return pl.DataFrame(schema.empty(table_schema)).lazy()


class ArchiveTables(RunTables):
    """``RunTables`` over an archive: scans for the ledger and SQL, Arrow on demand.

    >>> import tempfile
    >>> from contextledger.jobs.ingest import ingest
    >>> from contextledger.ledger.compute import compute_ledger
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = ingest(["data/sample"], folder, workers=1)
    ...     tables = ArchiveTables(Archive.open(folder), "reference")
    ...     compute_ledger(tables).runs_recorded
    12
    """

    #: ``run_order``: a run's place among every run ever committed (docs/archive.md).
    order: ClassVar[str] = "ingest order"

    def __init__(
        self,
        archive: Archive,
        mode: str,
        selection: Selection | None = None,
        extra_outcomes: pa.Table | None = None,
    ) -> None:
        if mode not in ACCOUNTING_MODES:
            raise ArchiveError(f"unknown accounting mode {mode!r}")
        self.archive = archive
        self.mode = mode
        self.selection = selection or Selection()
        self.extra_outcomes = extra_outcomes
        self._commits = [c for c in archive.commits if self.selection.keeps(c)]
        self._cache: dict[str, pa.Table] = {}
        self._selected: pl.DataFrame | None = None
        self._selected_known = False
        self._selected_arrow: tuple[pl.DataFrame, pa.Table] | None = None
        self._holding: list[Commit] | None = None
        self._held: dict[str, pl.DataFrame] = {}
        #: The tables whose selected files were checked against their commits' CRC-32.
        self._checked: set[str] = set()
        #: Whether a file list went to a reader (damage found after that cannot be
        #: left out of what was read).
        self._handed = False
        self._check_read_set()
        #: Set once built: damage found later may be in what was already reported or
        #: read, so it is refused, not left out unsaid.
        self._built = True

    # ── what is read is checked first ──────────────────────────────
    def _check_read_set(self) -> None:
        """Check the bytes of what the ledger reads before anything is read, so that a
        commit with a part changed in place is left out whole, as a truncated one is.

        The ledger from stored totals reads the light tables (runs, totals, label
        credit, labels, run index) and the first offers of commits its stored credit
        does not cover; without totals (a run-level filter, an older archive) it reads
        every row, so everything is checked. The other tables are checked when first
        listed (:meth:`_check`).
        """
        handed, self._handed = self._handed, False  # deciding what to read hands out none
        self._verify(("outcomes", "run_index", "runs", "piece_totals", "label_credit"))
        if self.totals_files() is None:
            self._verify(("run_totals",))
            if not self._store_run_totals(self._commits):  # the rows may be read
                self._verify(None)
        else:
            split = self.credit_split()
            chosen = [c for c in self._commits if split is None or c.seq in split[1]]
            self._verify_files([f for c in chosen for f in c.files if f.first_in_run is True])
        self._handed = handed

    def _verify(self, tables: Sequence[str] | None) -> None:
        """Check ``tables`` (None: every table) of the selected commits (labels and the
        run index: of every commit, as they are read), until no more damage turns up."""
        selected = {commit.seq for commit in self._commits}
        files = [
            file
            for commit in self.archive.commits
            for file in commit.files
            if (tables is None or file.table in tables)
            and (commit.seq in selected or file.table in ("outcomes", "run_index"))
        ]
        self._verify_files(files)
        self._checked |= {file.table for file in files} if tables is None else set(tables)

    def _verify_files(self, files: Sequence[DataFile]) -> None:
        """Check ``files``; leave out the commits found damaged, and check again what
        is read now (a commit left out changes which files the ledger reads)."""
        found = self.archive.verify_content(files)
        if not found:
            return
        if self._handed or getattr(self, "_built", False):  # read or reported already
            raise ArchiveDamaged(self.archive.root, found, written=False)
        kept = {commit.seq for commit in self.archive.commits}
        self._commits = [c for c in self._commits if c.seq in kept]
        self._holding = None
        self._selected_known = False
        self._check_read_set()

    def check_all(self) -> None:
        """Check every selected file's bytes now: for a reader of every table (SQL, the
        report), so that damage anywhere leaves its commit out before anything is read
        or any damage is reported (call it before either)."""
        self.check_tables(None)

    def check_tables(self, tables: Sequence[str] | None) -> None:
        """Check the selected files of ``tables`` (None: every table) now, as
        :meth:`check_all` does every table: for a reader that lists more than the ledger
        reads (``compute_ledger`` lists the offers and uses whatever it reads), so damage
        in them leaves its commit out instead of refusing the answer (call it before
        anything is read or reported)."""
        self._built = False
        try:
            self._verify(tables)
        finally:
            self._built = True

    def _check(self, table: str) -> None:
        """Check ``table``'s selected files before a reader is given them."""
        if table not in self._checked:
            self._verify((table,))
        self._handed = True

    def __repr__(self) -> str:
        """Which archive and selection, from the commits, reading no table."""
        from contextledger.tables.display import summary_text

        return summary_text("ArchiveTables", self._counts())

    def _repr_html_(self) -> str:
        """In Jupyter: which archive and selection, from the commits, reading no table."""
        from contextledger.tables.display import summary_html

        return summary_html("Archive tables", self._counts())

    def _counts(self) -> list[tuple[str, str]]:
        """The archive, its selection and what it holds, from the commits alone."""
        chosen = self.selection
        filters = [
            f"{name}={value if isinstance(value, str) else ','.join(value)}"
            for name, value in (
                ("since", chosen.since),
                ("until", chosen.until),
                ("run_id", chosen.run_ids),
                ("label", chosen.labels),
            )
            if value is not None
        ]
        runs = f"{sum(commit.run_count for commit in self._commits):,}"
        if chosen.run_ids is not None or chosen.labels is not None:
            runs += " (before the run id and label filters)"
        return [
            ("archive", str(self.archive.root)),
            ("accounting", self.mode),
            ("selection", "&".join(filters) or "every run"),
            ("commits selected", f"{len(self._commits):,} of {len(self.archive.commits):,}"),
            ("runs in them", runs),
        ]

    # ── what is selected ───────────────────────────────────────────
    @property
    def commits(self) -> list[Commit]:
        """The commits whose files the selection reads (its ingest date range)."""
        return list(self._commits)

    def files(self, table: str, first_in_run: bool | None = None) -> list[str]:
        """Absolute paths of the selected files of ``table`` (this accounting), commit order."""
        self._check(table)
        chosen = [
            file
            for file in self.archive.files(table, self._holding_commits())
            if file.accounting in (None, self.mode)
            and (first_in_run is None or file.first_in_run == first_in_run)
        ]
        return self.archive.paths(chosen)

    def _holding_commits(self) -> list[Commit]:
        """The selected commits that can hold a selected run: under a run-level filter,
        only those holding one of its runs (by the run index: a run's rows are all in the
        commit that added it), so a few run ids read a few commits' files."""
        chosen = self.selected_runs()
        if chosen is None:
            return self._commits
        if self._holding is None:
            from contextledger.archive.manifest import commits_of

            runs = sum(c.run_count for c in self._commits)
            if chosen.height > ALWAYS_PRUNE_UP_TO and chosen.height * PRUNE_BELOW >= runs:
                self._holding = self._commits  # reaches nearly every commit: no lookup
            else:
                held = commits_of(self.archive, self._runs_held("selected")["run_order"])
                self._holding = [c for c in self._commits if c.seq in held]
        return self._holding

    def _runs_held(self, which: str) -> pl.DataFrame:
        """:func:`~contextledger.archive.manifest.held_runs` of the ``"selected"`` runs or
        of the ids the ``run_id`` filter ``"given"``, each looked up once: the commits to
        read and the run ids to name as unmatched come from one lookup."""
        from contextledger.archive.manifest import held_runs

        if which == "given" and self.selection.labels is None:
            which = "selected"  # the same ids
        if which not in self._held:
            if which == "selected":
                chosen = self.selected_runs()
                ids = chosen["run_id"] if chosen is not None else pl.Series([], dtype=pl.String)
            else:
                ids = pl.Series(self.selection.run_ids or (), dtype=pl.String)
            self._held[which] = held_runs(self.archive, ids)
        return self._held[which]

    def unmatched_run_ids(self) -> list[str]:
        """The ids of the ``run_id`` filter that name no run the archive holds, in the
        order given (none without that filter): looked up in the run index with the
        commits to read, so naming them reads nothing more."""
        wanted = self.selection.run_ids
        if wanted is None:
            return []
        held = set(self._runs_held("given")["run_id"].to_list())
        return [run_id for run_id in dict.fromkeys(wanted) if run_id not in held]

    def run_id_filter(self) -> list[str] | None:
        """The run ids the selection keeps, sorted (None: no run-level filter)."""
        chosen = self.selected_runs()
        return None if chosen is None else chosen["run_id"].unique().sort().to_list()

    def selected_runs(self) -> pl.DataFrame | None:
        """The run ids the selection keeps, one ``run_id`` column, in no order, an id
        given or labelled twice listed twice (None: no run-level filter): what scans
        semi-join against (``is_in`` with a long list of ids is rebuilt per file,
        seconds at 1M runs; a join hashes the ids once, and keeps a row once however
        often its id is listed; making 599,033 ids distinct cost 0.1-0.2 s)."""
        if not self._selected_known:
            ids = None
            if self.selection.run_ids is not None:
                ids = pl.DataFrame({"run_id": self.selection.run_ids}, schema={"run_id": pl.String})
            if self.selection.labels is not None:
                labels = pl.Series(self.selection.labels, dtype=pl.String)
                labelled = (
                    self._outcome_scan(distinct=False)
                    .filter(pl.col("label").is_in(labels.implode()))
                    .select("run_id")
                    .collect()
                )
                ids = labelled if ids is None else ids.join(labelled, on="run_id", how="semi")
            self._selected = ids
            self._selected_known = True
        return self._selected

    def scan(self, table: str, first_in_run: bool | None = None) -> pl.LazyFrame:
        """A lazy scan of ``table`` under the selection, rows in ingest order."""
        table_schema = schema.TABLES[table]
        files = self.files(table, first_in_run)
        frame = self.archive.location.scan(files, table_schema) if files else _empty(table_schema)
        return self._keep_selected(frame, ordered=table == "runs")

    def _keep_selected(self, frame: pl.LazyFrame, ordered: bool = True) -> pl.LazyFrame:
        """``frame``'s rows of the selected runs (all without a run filter), in their order
        when ``ordered`` (keeping it costs the streaming engine: 3x for every offer of
        ``label=good`` at 1M runs; the ledger groups offers and uses, and sorts them by
        ``run_order`` and ``seq`` where it lists them)."""
        chosen = self.selected_runs()
        if chosen is None:
            return frame
        if not ordered:
            return frame.join(chosen.lazy(), on="run_id", how="semi")
        # numbered, joined in any order, sorted back: cheaper than a join keeping order
        numbered = frame.with_row_index("_row").join(chosen.lazy(), on="run_id", how="semi")
        return numbered.sort("_row").drop("_row")

    def outcome_scan(self, selected: bool = False, distinct: bool = True) -> pl.LazyFrame:
        """Archived labels (each outcomes file's latest version), then those added here.

        Labels are not filtered by date: a label may arrive after its run. Each (run,
        label) pair is listed once (``distinct=False``: each row as given, a pair given
        twice listed twice, for a reader keeping each pair's first row itself: making
        every label of 1M runs distinct costs Polars 0.3 s). ``selected``: only the
        selected runs' labels, in the same order, under a run-level filter (what the
        ledger credits: a few runs' labels, not every label the archive holds).
        """
        if not selected or self.selected_runs() is None:
            return self._outcome_scan(distinct)
        # the selected runs' rows first, then each pair once: the same pairs in the same
        # order, without making every label of the archive distinct
        chosen = self._keep_selected(self._outcome_scan(distinct=False))
        return chosen.unique(maintain_order=True) if distinct else chosen

    def _outcome_scan(self, distinct: bool = True) -> pl.LazyFrame:
        where = self.archive.location
        frames = [where.scan([path], schema.OUTCOMES) for path in self.outcome_files()]
        if self.extra_outcomes is not None:
            frames.append(pl.DataFrame(self.extra_outcomes.cast(schema.OUTCOMES)).lazy())
        if not frames:
            return _empty(schema.OUTCOMES)
        # a (run, label) pair counts once, whether stored, given again, or both
        return pl.concat(frames).unique(maintain_order=True) if distinct else pl.concat(frames)

    def outcome_files(self) -> list[str]:
        """Absolute paths of the archived outcomes files that count: each source's latest
        version, sources in the order they first arrived (labels are read in this order)."""
        return self.archive.paths(latest_outcome_files(self.archive.files("outcomes")))

    def outcome_sources(self) -> list[str]:
        """The outcomes files the archived labels came from (each once, as ingested)."""
        return list(dict.fromkeys(f.source or f.path for f in self.archive.files("outcomes")))

    # ── what the ledger reads (see ledger.compute.StoredTables) ──────
    def totals_scan(self) -> pl.LazyFrame | None:
        """The stored per-commit piece totals, when they stand for every selected run.

        None (read the offers and uses instead) under a run-level filter (run ids, a
        label), or when a selected commit has no totals (written before archives
        stored them).
        """
        files = self.totals_files()
        if files is None:
            return None
        if not files:
            return _empty(schema.PIECE_TOTALS)
        return self.archive.location.scan(files, schema.PIECE_TOTALS)

    def totals_files(self) -> list[str] | None:
        """The piece totals files of the selection; None when they do not cover it."""
        if self.selected_runs() is not None:
            return None
        for commit in self._commits:
            tables = {f.table for f in commit.files if f.accounting == self.mode}
            if tables & {"offers", "uses"} and "piece_totals" not in tables:
                return None
        return self.files("piece_totals")

    def run_totals_scan(self) -> pl.LazyFrame | None:
        """The stored per-run totals (``schema.RUN_TOTALS``) of the commits holding the
        selected runs, when the piece totals do not stand for the selection (a run-level
        filter) and each of those commits stored them; None: read the offers and uses.

        Other runs of those commits are in it too: the ledger joins it with the selected
        runs' run orders, which keeps the selected runs' rows (one join, not two).
        """
        files = self.run_totals_files()
        if files is None:
            return None
        return self._scan_files(files, schema.RUN_TOTALS)

    def run_totals_files(self) -> list[str] | None:
        """The run totals files :meth:`run_totals_scan` reads; None when it reads none."""
        if self.totals_files() is not None or not self._store_run_totals(self._holding_commits()):
            return None
        return self._mode_files("run_totals", self._holding_commits())

    def _store_run_totals(self, commits: Sequence[Commit]) -> bool:
        """Whether each of ``commits`` holding offers or uses stored their run totals."""
        for commit in commits:
            tables = {f.table for f in commit.files if f.accounting == self.mode}
            if tables & {"offers", "uses"} and "run_totals" not in tables:
                return False
        return True

    def credit_scan(self) -> tuple[pl.LazyFrame, pl.LazyFrame | None, pl.LazyFrame] | None:
        """The stored label credit where it stands (``schema.LABEL_CREDIT``), the first
        offers of the other selected commits (to credit from the labels; None: there are
        none), and the first offers the stored credit covers (for the invariant); None:
        credit every run from the labels (:meth:`credit_split`)."""
        files = self.credit_files()
        if files is None:
            return None
        stored, uncovered, covered = files
        return (
            self._scan_files(stored, schema.LABEL_CREDIT),
            self._scan_files(uncovered, schema.OFFERS) if uncovered else None,
            self._scan_files(covered, schema.OFFERS),
        )

    def credit_files(self) -> tuple[list[str], list[str], list[str]] | None:
        """:meth:`credit_scan`'s files: the stored label credit files that stand, the
        first-in-run offer files of the commits they do not cover, and those of the
        commits they do; None: credit every run from the labels."""
        split = self.credit_split()
        if split is None:
            return None
        stored, uncovered = split
        covered = [c for c in self._commits if c.seq in stored]
        first = [c for c in self._commits if c.seq in uncovered]
        return (
            self._mode_files("label_credit", covered),
            self._mode_files("offers", first, True),
            self._mode_files("offers", covered, True),
        )

    def credit_split(self) -> tuple[set[int], set[int]] | None:
        """The selected commits (by number) whose stored label credit stands, and those
        whose runs are credited from the labels; None when no stored credit is used.

        Stored credit counts the labels a commit's runs had when it was written. It is
        used with the piece totals (no run-level filter), and not at all when labels are
        added here (``--outcomes``) or the archive is damaged (a lost commit's labels may
        be in it). A commit's own credit does not stand when it stores none (written
        before label credit was), or a later commit's labels (or the labels they
        replace) name its runs (``Commit.relabels``).
        """
        if self.totals_files() is None or self.extra_outcomes is not None:
            return None
        if self.archive.damage:
            return None
        relabelled = {seq for commit in self.archive.commits for seq in commit.relabels}
        stored, uncovered = set(), set()
        for commit in self._commits:
            tables = {f.table for f in commit.files if f.accounting == self.mode}
            if "offers" not in tables:
                continue
            if commit.label_credit and commit.seq not in relabelled:
                stored.add(commit.seq)
            else:
                uncovered.add(commit.seq)
        return (stored, uncovered) if stored else None

    def _mode_files(
        self, table: str, commits: Sequence[Commit], first_in_run: bool | None = None
    ) -> list[str]:
        """Absolute paths of ``table``'s files of ``commits`` under this accounting."""
        self._check(table)
        chosen = [
            file
            for file in self.archive.files(table, commits)
            if file.accounting == self.mode
            and (first_in_run is None or file.first_in_run == first_in_run)
        ]
        return self.archive.paths(chosen)

    def _scan_files(self, files: list[str], table_schema: pa.Schema) -> pl.LazyFrame:
        if not files:
            return _empty(table_schema)
        return self.archive.location.scan(files, table_schema)

    def with_outcomes(self, outcomes: pa.Table) -> ArchiveTables:
        """The same selection with ``outcomes`` added after the archived labels."""
        extra = outcomes.cast(schema.OUTCOMES)
        if self.extra_outcomes is not None:
            extra = pa.concat_tables([self.extra_outcomes, extra])
        tables = ArchiveTables(self.archive, self.mode, self.selection, extra)
        tables._held = dict(self._held)  # the same selection: the run index is not read again
        return tables

    def select(self, **filters: Any) -> ArchiveTables:
        """The same archive under another selection (``Selection`` field names)."""
        selection = replace(self.selection, **filters)
        return ArchiveTables(self.archive, self.mode, selection, self.extra_outcomes)

    # ── RunTables' attributes, collected on demand ─────────────────
    def _collect(self, table: str) -> pa.Table:
        if table not in self._cache:
            self._verify((table, "runs"))  # checked before read; damage found now refuses
            frame = self.outcome_scan() if table == "outcomes" else self.scan(table)
            if table in ("offers", "uses"):  # stored split by first_in_run: back in run order
                orders = self.scan("runs").select("run_id", "run_order")
                frame = frame.join(orders, on="run_id").sort("run_order", "seq").drop("run_order")
            collected = frame.collect(engine="streaming").to_arrow()
            self._cache[table] = collected.cast(schema.TABLES[table])
        return self._cache[table]

    @property
    def runs(self) -> pa.Table:
        return self._collect("runs")

    @property
    def offers(self) -> pa.Table:
        return self._collect("offers")

    @property
    def uses(self) -> pa.Table:
        return self._collect("uses")

    @property
    def outcomes(self) -> pa.Table:
        return self._collect("outcomes")

    def unmatched_label_ids(self) -> list[str]:
        """The run ids of the labels (stored, and any added here) that name no run the
        archive holds, in the order they arrived: labels may come before their runs.

        Reads the outcomes and the run index's ``run_id`` column only, never the big
        tables, and nothing at all when there are no labels.
        """
        if not self.outcome_files() and self.extra_outcomes is None:
            return []
        labelled = self.outcome_scan().select("run_id").unique(maintain_order=True)
        index = self.archive.paths(self.archive.files("run_index"))
        if index:
            held = self.archive.location.scan(index).select("run_id")
            labelled = labelled.join(held, on="run_id", how="anti", maintain_order="left")
        return [str(run_id) for run_id in labelled.collect()["run_id"].to_list()]

    @property
    def duplicates(self) -> pa.Table:
        """None: ingest admits each run once (:mod:`~contextledger.read.identity`)."""
        return schema.empty(DUPLICATES)

    @property
    def problems(self) -> pa.Table:
        """What the selection could not read: the archive's :attr:`damage` it touches, then
        the quarantine rows (this mode's, or every mode's) that concern it
        (:meth:`unreadable`)."""
        if "problems" not in self._cache:
            self._cache["problems"] = self.unreadable(self.mode)
        return self._cache["problems"]

    def unreadable(self, accounting: str | None) -> pa.Table:
        """The archive's :attr:`damage` the selection touches, then the quarantine rows
        that concern it: every accounting's (a file or line nothing could read), and
        ``accounting``'s (None: those alone, what a what-if names as a folder's does).

        A quarantine row counts when its ingest date is in the selection's date range,
        and, under a run-level filter (run ids, a label), only when it names a selected
        run: a row without a run id (a whole file, or a line without one, unreadable)
        counts only without a run-level filter.
        """
        from contextledger.archive.manifest import current_quarantine

        quarantine = current_quarantine(self.archive)
        if self.selection.since is not None:
            quarantine = quarantine.filter(pl.col("ingest_date") >= self.selection.since)
        if self.selection.until is not None:
            quarantine = quarantine.filter(pl.col("ingest_date") <= self.selection.until)
        every = pl.col("accounting").is_null()
        quarantine = quarantine.filter(
            every if accounting is None else every | (pl.col("accounting") == accounting)
        )
        chosen = self.selected_runs()
        if chosen is not None:  # a row without a run id is null here, and dropped
            quarantine = quarantine.join(chosen, on="run_id", how="semi", maintain_order="left")
        damage = [
            {"path": p.path, "line": None, "run_id": None, "reason": p.reason} for p in self.damage
        ]
        quarantined = quarantine.select(schema.PROBLEMS.names).to_arrow()
        return pa.concat_tables(
            [
                pa.Table.from_pylist(damage, schema=schema.PROBLEMS),
                quarantined.cast(schema.PROBLEMS),
            ]
        )

    @property
    def damage(self) -> list[ArchiveProblem]:
        """The archive's damage (:attr:`Archive.damage`) that may hide selected runs: in
        the date range, or of unknown date. Run-level filters do not narrow it: what a
        lost file held is not known."""
        return [
            problem
            for problem in self.archive.damage
            if problem.ingest_date is None or self.selection.keeps_date(problem.ingest_date)
        ]

    # ── DuckDB ─────────────────────────────────────────────────────
    def duckdb_sources(self) -> dict[str, str]:
        """``CREATE VIEW`` bodies reading the selected files: the tables, the offers and
        uses that are their piece's first in the run, and the piece totals when they
        cover the selection. A local archive's are read with ``read_parquet``; one on
        another filesystem's, from the Arrow datasets :meth:`duckdb_datasets` names (the
        same views over either: the SQL in ``ledger/sql`` is written once)."""
        return {name: body for name, (body, _) in self._duckdb_parts().items()}

    def duckdb_datasets(self) -> dict[str, Any]:
        """The ``pyarrow.dataset`` each :meth:`duckdb_sources` body reads, by the name to
        register it under (none for a local archive: DuckDB reads its files itself), and
        the selected run ids (:data:`SELECTED_RUNS`) under a run-level filter."""
        parts = self._duckdb_parts().values()
        return {name: dataset for _, datasets in parts for name, dataset in datasets.items()}

    def _duckdb_parts(self) -> dict[str, tuple[str, dict[str, Any]]]:
        self.check_all()  # SQL may read any table: check them all before any is listed
        kept = self.selected_runs() is not None
        chosen: dict[str, tuple[list[str], pa.Schema, bool]] = {}
        for table in ("runs", "offers", "uses"):
            chosen[table] = (self.files(table), schema.TABLES[table], kept)
        for table in ("offers", "uses"):  # each row its piece's first in the run
            files = self.files(table, first_in_run=True)
            chosen[f"{table}_first_in_run"] = (files, schema.TABLES[table], kept)
        totals = self.totals_files()
        if totals is not None:
            chosen["piece_totals"] = (totals, schema.PIECE_TOTALS, False)
        run_totals = self.run_totals_files()
        if run_totals is not None:
            # every run of the commits holding a selected run: the views join on
            # run_order with the selected runs (an integer, not the ids again)
            chosen["run_totals"] = (run_totals, schema.RUN_TOTALS, False)
        chosen.update(self._credit_sources())
        where = self.archive.location
        parts = {}
        selected_ids = self._selected_ids()  # registered once, joined
        for name, (files, table_schema, kept) in chosen.items():
            datasets: dict[str, Any] = {}
            source = None
            if files and not where.is_local:
                source = f"archive_{name}_files"
                datasets[source] = where.dataset(files, table_schema)
            if kept and selected_ids is not None:
                datasets[SELECTED_RUNS] = selected_ids
            parts[name] = (read_parquet_sql(files, table_schema, kept, source), datasets)
        return parts

    def _selected_ids(self) -> pa.Table | None:
        """:meth:`selected_runs` as Arrow, made once for the DuckDB sources and datasets
        (599,033 ids under ``label=good`` at 1M runs: 0.16 s made for each table)."""
        chosen = self.selected_runs()
        if chosen is None:
            return None
        if self._selected_arrow is None or self._selected_arrow[0] is not chosen:
            self._selected_arrow = (chosen, chosen.to_arrow())
        return self._selected_arrow[1]

    def _credit_sources(self) -> dict[str, tuple[list[str], pa.Schema, bool]]:
        """The stored label credit that stands (``label_credit``) and the first offers of
        the commits it does not cover (``uncredited_offers``), when it is used."""
        files = self.credit_files()
        if files is None:
            return {}
        stored, uncovered, _ = files
        return {
            "label_credit": (stored, schema.LABEL_CREDIT, False),
            "uncredited_offers": (uncovered, schema.OFFERS, False),
        }
