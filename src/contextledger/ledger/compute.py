"""The ledger: a Polars group-by over offers, uses and outcomes of metered runs.

Rows keep the reference's insertion order (the first offer or use that created
each row, runs in input order) so that ``rows()`` can sort worst earn rate
first and break ties exactly as agentfootprint's stable sort does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, runtime_checkable

import polars as pl

from contextledger.ledger.run_totals import run_totals_counts
from contextledger.tables import columns
from contextledger.tables.build import RunTables

#: Columns of a ledger frame, in order (see ``columns.LEDGER``).
LEDGER_COLUMNS = columns.names(columns.LEDGER)
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
_COUNT_COLUMNS = [
    "offered",
    "approx_tokens_spent",
    "used",
    *columns.USED_SIGNAL_COLUMNS.values(),
    "runs_seen",
]


@dataclass(frozen=True)
class Ledger:
    """Ledger rows in insertion order, and how many runs were recorded into them."""

    frame: pl.DataFrame
    runs_recorded: int

    def rows(self) -> pl.DataFrame:
        """Worst earn rate first; ties keep insertion order (the reference's ``rows()``)."""
        return self.frame.sort("earn_rate", maintain_order=True)

    def merge(self, other: Ledger) -> Ledger:
        """Both ledgers' counts added, as ``importJSON`` does (self's rows first)."""
        return merge_ledgers([self, other])

    def _counts(self) -> list[tuple[str, str]]:
        return [("runs recorded", f"{self.runs_recorded:,}"), ("pieces", f"{self.frame.height:,}")]

    def __repr__(self) -> str:
        """How many runs and pieces, not the frame (``ledger.rows()`` prints it)."""
        from contextledger.tables.display import summary_text

        return summary_text("Ledger", self._counts())

    def _repr_html_(self) -> str:
        """In Jupyter: the rows worst first, under how many runs and pieces they cover."""
        from contextledger.tables.display import summary_html

        title = "Context ledger, worst earn rate first"
        return summary_html(title, self._counts(), self.rows())


def _empty_frame() -> pl.DataFrame:
    return columns.empty_frame(columns.LEDGER)


def _finish(frame: FrameT) -> FrameT:
    """Fill missing counts, compute earn_rate, order the columns."""
    return (
        frame.with_columns([pl.col(name).fill_null(0).cast(pl.Int64) for name in _COUNT_COLUMNS])
        .with_columns(
            earn_rate=pl.when(pl.col("offered") > 0)
            .then(pl.col("used") / pl.col("offered"))
            .otherwise(0.0)
        )
        .select(LEDGER_COLUMNS)
    )


#: ``LazyFrame.collect`` engines: ``"streaming"`` keeps memory flat over scans of files.
Engine = Literal["auto", "in-memory", "streaming"]

#: A ledger row's place in insertion order packs (run_order, step, seq) into one Int64:
#: step 0 for the run's offers, 1 for its uses; seq below 2**31.
_STEP = 1 << 31
_OUTCOMES_DTYPE = pl.List(pl.Struct({"label": pl.String, "runs": pl.Int64}))


@dataclass(frozen=True)
class LedgerInputs:
    """The tables the ledger reads, as Polars LazyFrames (in memory, or scans of an archive).

    Given ``split`` (what an archive stores), offers and uses come as two parts each:
    the rows that are their piece's first in the run (``first_offers``,
    ``first_uses``) and the rest (``later_offers``, ``later_uses``); they then hold
    metered runs only, run ids are unique, and the first parts list rows run by run
    in ``run_order``, each run's rows by ``seq``. Otherwise the plan joins, sorts and
    splits ``offers`` and ``uses`` itself. Given ``totals`` (``schema.PIECE_TOTALS``
    rows over disjoint parts of the metered runs, as an archive stores per commit), the
    counts are their sums and offers and uses are read only for the outcome credit.
    Given ``credit`` too (an archive's stored label credit), the outcome credit is its
    sum, plus the credit of the first offers it does not cover.

    >>> from contextledger.tables.build import read_runs
    >>> inputs = LedgerInputs.of(read_runs("data/sample"))
    >>> compute_ledger(inputs).runs_recorded
    14
    """

    runs: pl.LazyFrame
    offers: pl.LazyFrame
    uses: pl.LazyFrame
    outcomes: pl.LazyFrame
    split: SplitRows | None = None
    engine: Engine = "auto"
    totals: pl.LazyFrame | None = None
    credit: StoredCredit | None = None
    #: ``schema.RUN_TOTALS`` rows (an archive's, under a run-level filter) of at least
    #: the metered runs of ``runs``: given (and no ``totals``), the counts and the first
    #: offers credited come from those runs' rows, and ``split`` is not read.
    run_totals: pl.LazyFrame | None = None

    @classmethod
    def of(cls, tables: RunTables) -> LedgerInputs:
        """In-memory tables as they are (nothing promised)."""
        runs, offers, uses, outcomes = (
            tables.frame(table).lazy() for table in ("runs", "offers", "uses", "outcomes")
        )
        return cls(runs, offers, uses, outcomes, engine="in-memory")


@dataclass(frozen=True)
class SplitRows:
    """Offers and uses split by whether the row is its piece's first in the run."""

    first_offers: pl.LazyFrame
    later_offers: pl.LazyFrame
    first_uses: pl.LazyFrame
    later_uses: pl.LazyFrame


@dataclass(frozen=True)
class StoredCredit:
    """An archive's stored label credit (``schema.LABEL_CREDIT`` rows over disjoint parts
    of the metered runs), and the first offers of the runs it does not cover: those are
    credited from the labels (None: it covers every run)."""

    stored: pl.LazyFrame
    uncovered: pl.LazyFrame | None
    #: The first offers of the runs ``stored`` covers (what the invariant recomputes).
    covered: pl.LazyFrame


@runtime_checkable
class StoredTables(Protocol):
    """Tables stored as files (an archive): lazy scans of each table in ingest order,
    offers and uses split by ``first_in_run``, and the stored piece totals where they
    stand for every selected run (None: read the rows). The ledger builds its inputs
    from these; storage never needs to know the ledger."""

    def scan(self, table: str, first_in_run: bool | None = None) -> pl.LazyFrame: ...

    def outcome_scan(self, selected: bool = False, distinct: bool = True) -> pl.LazyFrame: ...

    def totals_scan(self) -> pl.LazyFrame | None: ...

    def credit_scan(self) -> tuple[pl.LazyFrame, pl.LazyFrame | None, pl.LazyFrame] | None: ...

    def run_totals_scan(self) -> pl.LazyFrame | None:
        """Stored ``schema.RUN_TOTALS`` rows of (at least) the selected runs; None when
        the selection has none stored."""


def compute_ledger(tables: RunTables | LedgerInputs) -> Ledger:
    """The ledger of ``tables`` (metered runs only; outcomes credited to every offered piece).

    One plan for tables in memory and for an archive's scans (:class:`LedgerInputs`);
    over scans it streams, so memory does not grow with the archive.

    Examples
    --------
    >>> from contextledger.tables.build import read_runs
    >>> ledger = compute_ledger(read_runs("data/sample", mode="reference"))
    >>> ledger.rows().columns[:3]
    ['id', 'kind', 'offered']
    """
    inputs = ledger_inputs(tables, rows=False)
    rows, recorded = ledger_plan(inputs)
    frame, count = pl.collect_all([rows, recorded], engine=inputs.engine)
    runs_recorded = int(count.item())
    if runs_recorded == 0:
        return Ledger(_empty_frame(), 0)
    return Ledger(frame, runs_recorded)


def ledger_inputs(tables: RunTables | LedgerInputs, *, rows: bool = True) -> LedgerInputs:
    """What the ledger reads of ``tables``: an archive's scans, else the tables in memory.

    ``rows=False``: where an archive's stored run totals stand for the selected runs'
    offers and uses, leave those out (none listed, so none checked or read): what the
    ledger alone needs; the invariants compare the two, and keep them.

    >>> from contextledger.tables.build import read_runs
    >>> ledger_inputs(read_runs("data/sample")).engine
    'in-memory'
    """
    if isinstance(tables, LedgerInputs):
        return tables
    if isinstance(tables, StoredTables):
        run_totals = tables.run_totals_scan()

        def scan(table: str, first_in_run: bool | None = None) -> pl.LazyFrame:
            if rows or run_totals is None:
                return tables.scan(table, first_in_run)
            return columns.empty_frame(columns.READ_TABLES[table]).lazy()

        return LedgerInputs(
            runs=tables.scan("runs"),
            offers=scan("offers"),
            uses=scan("uses"),
            # under run totals the credit finds the selected runs' labels and keeps each
            # pair's first row itself
            outcomes=tables.outcome_scan(
                selected=rows or run_totals is None, distinct=rows or run_totals is None
            ),
            split=SplitRows(
                first_offers=scan("offers", first_in_run=True),
                later_offers=scan("offers", first_in_run=False),
                first_uses=scan("uses", first_in_run=True),
                later_uses=scan("uses", first_in_run=False),
            ),
            engine="streaming",
            totals=tables.totals_scan(),
            credit=_stored_credit(tables),
            run_totals=run_totals,
        )
    return LedgerInputs.of(tables)


def _stored_credit(tables: StoredTables) -> StoredCredit | None:
    found = tables.credit_scan()
    return None if found is None else StoredCredit(*found)


def ledger_plan(inputs: LedgerInputs) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The ledger frame (insertion order) and the metered run count, as lazy plans.

    The counts come from :func:`piece_totals` (or the totals ``inputs`` carries, or its
    runs' totals); the outcome credit from the first offer of each piece in each run,
    which is why the first offers are read even when the totals are stored.
    """
    metered, run_orders, split = _ordered(inputs)
    piece = ["kind", "piece_id"]
    if inputs.totals is None and inputs.run_totals is not None:
        # the selected runs' own totals, in one pass; their metered runs in memory (a row
        # per run), read once
        chosen = metered.collect(engine="in-memory")
        summed, credited = run_totals_counts(
            inputs.run_totals, chosen, inputs.outcomes, inputs.engine
        )
        totals, credit, metered = summed.lazy(), _credit_lists(credited.lazy()), chosen.lazy()
    else:
        if inputs.totals is not None:  # parts of the runs each: add them up
            totals = inputs.totals.group_by(piece).agg(
                *[pl.col(name).sum() for name in _COUNT_COLUMNS],
                pl.col("first_offer").min(),
                pl.col("first_use").min(),
            )
        else:
            totals = _piece_totals(run_orders, split)
        if inputs.credit is None:
            credit = _outcomes_per_piece(inputs.outcomes, split.first_offers, run_orders)
        else:
            credit = _stored_outcomes(inputs.outcomes, inputs.credit, run_orders)
    rows = (
        totals.with_columns(first=pl.min_horizontal("first_offer", "first_use"))
        .join(credit, on=piece, how="left")
        .with_columns(outcomes=pl.col("outcomes").fill_null(pl.lit([], dtype=_OUTCOMES_DTYPE)))
        .sort("first")
        .rename({"piece_id": "id"})
    )
    return _finish(rows), metered.select(pl.len())


def piece_totals(inputs: LedgerInputs) -> pl.LazyFrame:
    """Per piece, the ledger's counts over ``inputs``' metered runs (``schema.PIECE_TOTALS``).

    Offers counted and summed over every offer row; ``runs_seen`` over the first offer
    of the piece in each run (one row per run and piece); the first offer and first use
    packed as ``schema.PIECE_TOTALS`` says, runs in run_order.
    """
    _, run_orders, split = _ordered(inputs)
    return _piece_totals(run_orders, split)


def run_piece_totals(inputs: LedgerInputs) -> pl.LazyFrame:
    """Per piece, the counts of ``inputs``' stored run totals over its metered runs
    (``schema.PIECE_TOTALS``), as the ledger adds them up under a run-level filter.

    >>> import tempfile
    >>> from contextledger.archive import Archive, ArchiveTables, Selection
    >>> from contextledger.jobs.ingest import ingest
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = ingest(["data/sample"], folder, workers=1)
    ...     one = Selection(run_ids=("s0003-loop",))
    ...     chosen = ArchiveTables(Archive.open(folder), "corrected", one)
    ...     totals = run_piece_totals(ledger_inputs(chosen)).collect()
    >>> totals["runs_seen"].max()
    1
    """
    assert inputs.run_totals is not None
    metered = _ordered(inputs)[0].collect(engine="in-memory")
    return run_totals_counts(inputs.run_totals, metered, None, inputs.engine)[0].lazy()


def split_rows(inputs: LedgerInputs) -> SplitRows:
    """The metered runs' offers and uses, split by whether the row is its piece's first
    in the run (as an archive stores them, else split here), in run order."""
    return _ordered(inputs)[2]


def _ordered(inputs: LedgerInputs) -> tuple[pl.LazyFrame, pl.LazyFrame, SplitRows]:
    """The metered runs, each metered run's run_order, and the split offers and uses."""
    metered = inputs.runs.filter(pl.col("metered")).select("run_id", "run_order")
    if inputs.split is not None:
        return metered, metered, inputs.split
    run_orders = metered.group_by("run_id").agg(pl.col("run_order").min())
    return metered, run_orders, _split(inputs.offers, inputs.uses, metered)


def _piece_totals(run_orders: pl.LazyFrame, split: SplitRows) -> pl.LazyFrame:
    piece = ["kind", "piece_id"]
    # A piece's first offer is its first-in-run row of the lowest (run_order, seq): the
    # rows' order is not relied on (an archive's files split a commit's runs by partition).
    firsts = (
        split.first_offers.join(run_orders, on="run_id", how="left")
        .group_by(piece)
        .agg(
            runs_seen=pl.len(),
            first_tokens=pl.col("approx_tokens").sum(),
            first_offer=(pl.col("run_order") * 2 * _STEP + pl.col("seq")).min(),
        )
    )
    laters = split.later_offers.group_by(piece).agg(
        later_offered=pl.len(), later_tokens=pl.col("approx_tokens").sum()
    )
    offered = firsts.join(laters, on=piece, how="left").select(
        *piece,
        "runs_seen",
        "first_offer",
        offered=pl.col("runs_seen") + pl.col("later_offered").fill_null(0),
        approx_tokens_spent=pl.col("first_tokens") + pl.col("later_tokens").fill_null(0),
    )
    first_uses = split.first_uses.join(run_orders, on="run_id", how="left")
    used_by_signal = pl.concat(
        [
            first_uses.group_by(*piece, "signal").agg(
                uses=pl.len(),
                first_use=((pl.col("run_order") * 2 + 1) * _STEP + pl.col("seq")).min(),
            ),
            split.later_uses.group_by(*piece, "signal").agg(uses=pl.len()),
        ],
        how="diagonal_relaxed",
    )
    used = used_by_signal.group_by(piece).agg(
        used=pl.col("uses").sum(),
        **{
            column: pl.col("uses").filter(pl.col("signal") == signal).sum()
            for signal, column in columns.USED_SIGNAL_COLUMNS.items()
        },
        first_use=pl.col("first_use").min(),
    )
    return (
        offered.join(used, on=piece, how="full", coalesce=True)
        .with_columns([pl.col(name).fill_null(0).cast(pl.Int64) for name in _COUNT_COLUMNS])
        .select(columns.names(columns.PIECE_TOTALS))
    )


def _split(offers: pl.LazyFrame, uses: pl.LazyFrame, metered: pl.LazyFrame) -> SplitRows:
    """Metered runs' offers and uses in (run_order, seq) order, split by first in run."""
    parts = []
    for table in (offers, uses):
        ordered = table.join(metered, on="run_id").sort("run_order", "seq", maintain_order=True)
        first = pl.struct("run_id", "kind", "piece_id").is_first_distinct()
        ordered = ordered.with_columns(first_in_run=first).drop("run_order")
        parts += [
            ordered.filter(pl.col("first_in_run")).drop("first_in_run"),
            ordered.filter(~pl.col("first_in_run")).drop("first_in_run"),
        ]
    return SplitRows(*parts)


def _outcomes_per_piece(
    outcomes: pl.LazyFrame, first_offers: pl.LazyFrame, run_orders: pl.LazyFrame
) -> pl.LazyFrame:
    """Per piece, ``[{label, runs}]`` over the labelled runs that offered it.

    Labels are listed in the order the reference would have recorded them: by the
    first run (in run order) that carried the label and offered the piece, then by
    the label's row in the outcomes table. ``first_offers`` holds one row per run and
    piece (in any order); each labelled metered run's labels carry that (run_order,
    row) key. A (run, label) pair counts once, however often the outcomes table lists it.
    """
    return _credit_lists(label_credit(outcomes, first_offers, run_orders))


def label_credit(
    outcomes: pl.LazyFrame,
    first_offers: pl.LazyFrame,
    run_orders: pl.LazyFrame,
    *,
    ranked: bool = False,
) -> pl.LazyFrame:
    """Per piece and label, the labelled runs that offered it and the earliest credit
    (``schema.LABEL_CREDIT``): what an archive stores per commit, and what parts of the
    runs add up to (``runs`` sums, ``first_credit`` takes the min).

    ``first_credit`` is ``run_order * 2**32`` plus the label's row among the (run, label)
    pairs of ``outcomes``: only its order among one run's labels matters, so labels
    narrowed to some runs (in the same order) give the same ledger. ``first_offers``
    names each run by ``run_id``, or by ``run_order`` (as stored run totals do). ``ranked`` numbers
    each run's labels from 0 instead, as an archive stores them: the same key whatever
    other runs ``outcomes`` labels.
    """
    pairs = outcomes.select("run_id", "label").unique(maintain_order=True)
    if ranked:
        position = pl.int_range(pl.len(), dtype=pl.UInt32).over("run_id")
        pairs = pairs.with_columns(label_position=position)
    else:
        pairs = pairs.with_row_index("label_position")
    # first offers keyed by run order (stored run totals) join on it: an integer
    run = "run_order" if "run_order" in first_offers.collect_schema() else "run_id"
    labels = pairs.join(run_orders, on="run_id").select(
        run,
        "label",
        credit=pl.col("run_order") * (1 << 32) + pl.col("label_position").cast(pl.Int64),
    )
    credited = first_offers.select(run, "kind", "piece_id").join(labels, on=run)
    return credited.group_by("kind", "piece_id", "label").agg(
        runs=pl.len().cast(pl.Int64), first_credit=pl.col("credit").min()
    )


def _credit_lists(per_label: pl.LazyFrame) -> pl.LazyFrame:
    """Per piece, ``[{label, runs}]`` from label credit rows, earliest credit first."""
    return per_label.group_by("kind", "piece_id").agg(
        outcomes=pl.struct("label", "runs").sort_by("first_credit")
    )


def _stored_outcomes(
    outcomes: pl.LazyFrame, credit: StoredCredit, run_orders: pl.LazyFrame
) -> pl.LazyFrame:
    """Per piece, ``[{label, runs}]``: the stored credit added up with the credit of the
    first offers it does not cover (credited from the labels, as without it)."""
    parts = [credit.stored.select(columns.names(columns.LABEL_CREDIT))]
    if credit.uncovered is not None:
        parts.append(label_credit(outcomes, credit.uncovered, run_orders))
    summed = (
        pl.concat(parts)
        .group_by("kind", "piece_id", "label")
        .agg(pl.col("runs").sum(), pl.col("first_credit").min())
    )
    return _credit_lists(summed)


#: The largest count an Int64 column holds: sums past it are refused, never wrapped.
_MAX_COUNT = 2**63 - 1


def _checked_sums(frame: pl.DataFrame, summed: list[str]) -> pl.DataFrame:
    """``frame`` with its Int128 sums in ``summed`` back in Int64, or ``OverflowError``
    naming the first piece whose count would not fit."""
    too_big = frame.filter(pl.any_horizontal(pl.col(name) > _MAX_COUNT for name in summed))
    if too_big.height:
        row = too_big.row(0, named=True)
        column = next(name for name in summed if row[name] > _MAX_COUNT)
        msg = (
            f"{row['kind']} {row['id']!r}: {column} adds up to {row[column]}, "
            "past the largest count (2**63 - 1)"
        )
        raise OverflowError(msg)
    return frame.with_columns(pl.col(name).cast(pl.Int64) for name in summed)


def merge_ledgers(ledgers: list[Ledger]) -> Ledger:
    """Add ledgers together (``importJSON`` semantics): counts and outcomes add, earliest
    ledger's row order first."""
    frames = [ledger.frame for ledger in ledgers if ledger.frame.height]
    runs_recorded = sum(ledger.runs_recorded for ledger in ledgers)
    if runs_recorded > _MAX_COUNT:
        msg = f"runsRecorded adds up to {runs_recorded}, past the largest count (2**63 - 1)"
        raise OverflowError(msg)
    if not frames:
        return Ledger(_empty_frame(), runs_recorded)
    stacked = pl.concat(frames).with_row_index("position")
    counts = _checked_sums(
        stacked.group_by("kind", "id").agg(
            *[pl.col(name).cast(pl.Int128).sum() for name in _COUNT_COLUMNS],
            first=pl.col("position").min(),
        ),
        _COUNT_COLUMNS,
    )
    labels = _checked_sums(
        stacked.select("kind", "id", "position", "outcomes")
        .explode("outcomes")
        .drop_nulls("outcomes")
        .unnest("outcomes")
        .with_row_index("label_position")
        .group_by("kind", "id", "label")
        .agg(runs=pl.col("runs").cast(pl.Int128).sum(), first=pl.col("label_position").min()),
        ["runs"],
    )
    labels = (
        labels.sort("first")
        .group_by("kind", "id", maintain_order=True)
        .agg(outcomes=pl.struct("label", "runs"))
    )
    merged = counts.join(labels, on=["kind", "id"], how="left").sort("first")
    merged = merged.with_columns(
        outcomes=pl.col("outcomes").fill_null(
            pl.lit([], dtype=pl.List(pl.Struct({"label": pl.String, "runs": pl.Int64})))
        )
    )
    return Ledger(_finish(merged), runs_recorded)
