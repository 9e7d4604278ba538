"""The ledger: a Polars group-by over offers, uses and outcomes of metered runs.

Rows keep the reference's insertion order (the first offer or use that created
each row, runs in input order) so that ``rows()`` can sort worst earn rate
first and break ties exactly as agentfootprint's stable sort does.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from contextledger.tables import schema
from contextledger.tables.build import RunTables

#: Columns of a ledger frame, in order (see ``schema.LEDGER``).
LEDGER_COLUMNS = schema.LEDGER.names
_COUNT_COLUMNS = [
    "offered",
    "approx_tokens_spent",
    "used",
    *schema.USED_SIGNAL_COLUMNS.values(),
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


def _empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema.LEDGER.empty_table())


def _finish(frame: pl.DataFrame) -> pl.DataFrame:
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


def compute_ledger(tables: RunTables) -> Ledger:
    """The ledger of ``tables`` (metered runs only; outcomes credited to every offered piece).

    Examples
    --------
    >>> from contextledger.tables.build import read_runs
    >>> ledger = compute_ledger(read_runs("data/sample", mode="reference"))
    >>> ledger.rows().columns[:3]
    ['id', 'kind', 'offered']
    """
    runs = pl.DataFrame(tables.runs)
    metered = runs.filter(pl.col("metered")).select("run_id", "run_order")
    if metered.height == 0:
        return Ledger(_empty_frame(), 0)
    offers = pl.DataFrame(tables.offers).join(metered, on="run_id")
    uses = pl.DataFrame(tables.uses).join(metered, on="run_id")
    # Insertion order: runs in order; within a run, offers then uses.
    first_offer = (pl.col("run_order") * 2) * (1 << 31) + pl.col("seq")
    first_use = (pl.col("run_order") * 2 + 1) * (1 << 31) + pl.col("seq")
    offered = offers.group_by("kind", "piece_id").agg(
        offered=pl.len(),
        approx_tokens_spent=pl.col("approx_tokens").sum(),
        runs_seen=pl.col("run_id").n_unique(),
        first=first_offer.min(),
    )
    used = uses.group_by("kind", "piece_id").agg(
        used=pl.len(),
        **{
            column: (pl.col("signal") == signal).sum()
            for signal, column in schema.USED_SIGNAL_COLUMNS.items()
        },
        first=first_use.min(),
    )
    rows = offered.join(used, on=["kind", "piece_id"], how="full", coalesce=True).with_columns(
        first=pl.min_horizontal("first", "first_right")
    )
    rows = rows.join(_outcomes_per_piece(tables, offers), on=["kind", "piece_id"], how="left")
    rows = rows.with_columns(
        outcomes=pl.col("outcomes").fill_null(pl.lit([], dtype=rows.schema["outcomes"]))
    )
    frame = _finish(rows.sort("first").rename({"piece_id": "id"}))
    return Ledger(frame, metered.height)


def _outcomes_per_piece(tables: RunTables, offers: pl.DataFrame) -> pl.DataFrame:
    """Per piece, ``[{label, runs}]`` over the labelled runs that offered it.

    Labels are listed in the order the reference would have recorded them: by
    the first run (in input order) that carried the label and offered the piece.
    """
    outcomes = pl.DataFrame(tables.outcomes).with_row_index("label_position")
    pieces = offers.select("run_id", "run_order", "kind", "piece_id").unique()
    credited = pieces.join(outcomes, on="run_id").sort("run_order", "label_position")
    per_label = credited.group_by("kind", "piece_id", "label", maintain_order=True).agg(
        runs=pl.len()
    )
    return per_label.group_by("kind", "piece_id", maintain_order=True).agg(
        outcomes=pl.struct(pl.col("label"), pl.col("runs").cast(pl.Int64))
    )


def merge_ledgers(ledgers: list[Ledger]) -> Ledger:
    """Add ledgers together (``importJSON`` semantics): counts and outcomes add, earliest
    ledger's row order first."""
    frames = [ledger.frame for ledger in ledgers if ledger.frame.height]
    runs_recorded = sum(ledger.runs_recorded for ledger in ledgers)
    if not frames:
        return Ledger(_empty_frame(), runs_recorded)
    stacked = pl.concat(frames).with_row_index("position")
    counts = stacked.group_by("kind", "id").agg(
        *[pl.col(name).sum() for name in _COUNT_COLUMNS],
        first=pl.col("position").min(),
    )
    labels = (
        stacked.select("kind", "id", "position", "outcomes")
        .explode("outcomes")
        .drop_nulls("outcomes")
        .unnest("outcomes")
        .with_row_index("label_position")
        .group_by("kind", "id", "label")
        .agg(runs=pl.col("runs").sum(), first=pl.col("label_position").min())
        .sort("first")
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
