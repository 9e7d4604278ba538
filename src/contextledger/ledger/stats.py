"""How far to trust an earn rate, and how pieces line up with outcomes: what the reference lacks.

An earn rate from 3 offers and one from 3,000 print the same; the Wilson interval
says which one to believe, and a row offered fewer times than the gate's
``minOffers`` is marked as not yet judged. Outcome shares are association: a
piece offered in runs that went well did not make them go well.
"""

from __future__ import annotations

import math

import polars as pl

from contextledger.ledger import DEFAULT_MIN_OFFERS
from contextledger.tables.build import RunTables
from contextledger.tables.columns import USED_SIGNAL_COLUMNS

#: Two-sided 95% normal quantile.
Z_95 = 1.959963984540054


def wilson_interval(used: int, offered: int, z: float = Z_95) -> tuple[float, float] | None:
    """95% Wilson score interval for ``used / offered``; None when it is no proportion.

    None when nothing was offered, or when ``used > offered`` (several calls per
    offer: a rate, not a share of offers).

    >>> [round(bound, 4) for bound in wilson_interval(2, 21)]
    [0.0265, 0.2891]
    """
    if offered <= 0 or used > offered:
        return None
    share = used / offered
    z2 = z * z
    centre = (share + z2 / (2 * offered)) / (1 + z2 / offered)
    half = z / (1 + z2 / offered) * math.sqrt(share * (1 - share) / offered + z2 / (4 * offered**2))
    # the bound at 0 (never used) or 1 (used at every offer) is exact, not a rounding residue
    low = 0.0 if used == 0 else max(0.0, centre - half)
    high = 1.0 if used == offered else min(1.0, centre + half)
    return low, high


def with_uncertainty(rows: pl.DataFrame, *, min_offers: int = DEFAULT_MIN_OFFERS) -> pl.DataFrame:
    """Ledger rows plus ``earn_rate_low`` / ``earn_rate_high`` (95% Wilson) and ``judged``.

    ``judged`` is False below ``min_offers`` offers, where the gate would not act yet.
    The bounds are null where ``used > offered`` (see :func:`wilson_interval`).

    >>> frame = pl.DataFrame({"offered": [21, 3, 4], "used": [2, 1, 9]})
    >>> with_uncertainty(frame).select("earn_rate_low", "judged").rows()
    [(0.02651..., True), (0.06149..., False), (None, False)]
    """
    z2 = Z_95 * Z_95
    offered = pl.col("offered").cast(pl.Float64)
    share = pl.col("used") / offered
    centre = (share + z2 / (2 * offered)) / (1 + z2 / offered)
    half = (
        Z_95 / (1 + z2 / offered) * (share * (1 - share) / offered + z2 / (4 * offered**2)).sqrt()
    )
    is_proportion = (pl.col("offered") > 0) & (pl.col("used") <= pl.col("offered"))
    # exact at the ends: 0 when never used (not 1.4e-17), 1 when used at every offer
    low = pl.when(pl.col("used") == 0).then(0.0).otherwise(pl.max_horizontal(centre - half, 0.0))
    high = (
        pl.when(pl.col("used") == pl.col("offered"))
        .then(1.0)
        .otherwise(pl.min_horizontal(centre + half, 1.0))
    )
    return rows.with_columns(
        earn_rate_low=pl.when(is_proportion).then(low),
        earn_rate_high=pl.when(is_proportion).then(high),
        judged=pl.col("offered") >= min_offers,
    )


def used_via_text() -> pl.Expr:
    """``usedVia`` as short text, e.g. ``tool-called=6`` (for tables and CSV)."""
    signals = [
        pl.when(pl.col(column) > 0).then(pl.lit(f"{signal}=") + pl.col(column).cast(pl.String))
        for signal, column in USED_SIGNAL_COLUMNS.items()
    ]
    return pl.concat_str(signals, separator=" ", ignore_nulls=True)


def outcomes_text() -> pl.Expr:
    """The ``outcomes`` list as short text, e.g. ``good=2 bad=1``."""
    outcome = pl.element().struct
    return (
        pl.col("outcomes")
        .list.eval(pl.concat_str(outcome.field("label"), pl.lit("="), outcome.field("runs")))
        .list.join(" ")
    )


def ledger_csv_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """The ledger's rows as CSV and JSON Lines hold them (``ledger --format csv``, the
    report's ``ledger.csv``): every count a number, the interval's bounds, the uses by
    signal, and ``used_via`` / ``outcomes`` as short text. ``rows`` carry the interval
    (:func:`with_uncertainty`)."""
    return rows.select(
        "id",
        "kind",
        "offered",
        "approx_tokens_spent",
        "used",
        *USED_SIGNAL_COLUMNS.values(),
        used_via_text().alias("used_via"),
        "runs_seen",
        outcomes_text().alias("outcomes"),
        "earn_rate",
        "earn_rate_low",
        "earn_rate_high",
        "judged",
    )


def outcome_association(tables: RunTables) -> pl.DataFrame:
    """Per piece and label: the share of labelled runs that offered it carrying the label,
    against the base rate over all labelled metered runs. Association, not cause.

    Columns: ``kind, id, label, runs_offered, runs_offered_with_label,
    share_with_label, runs_labelled, runs_labelled_with_label, base_rate,
    share_minus_base, vs_base_rate``. ``runs_offered`` counts labelled metered runs that
    offered the piece; a run with several labels counts once in each denominator.

    ``vs_base_rate`` (``above``, ``equal``, ``below``) compares the counts, not the
    floats: 3 of 5 against 3 of 5 is ``equal`` even where one float division rounds
    differently from the other. ``share_minus_base`` is that same integer difference
    over its denominator, so its sign always agrees (exactly 0 when equal).
    """
    runs = pl.DataFrame(tables.runs).filter(pl.col("metered")).select("run_id")
    outcomes = pl.DataFrame(tables.outcomes).unique().join(runs, on="run_id")
    labelled = outcomes.select("run_id").unique()
    pieces = (
        pl.DataFrame(tables.offers)
        .select("run_id", "kind", "piece_id")
        .unique()
        .join(labelled, on="run_id")
    )
    runs_labelled = labelled.height
    base = outcomes.group_by("label").agg(runs_labelled_with_label=pl.len())
    # a real column, not a broadcast literal: Polars divides by a literal through its
    # reciprocal, which makes 3 / 5 come out as 0.6000000000000001
    base = base.with_columns(
        pl.Series("runs_labelled", [runs_labelled] * base.height, dtype=pl.Int64)
    )
    offered = pieces.group_by("kind", "piece_id").agg(runs_offered=pl.len())
    with_label = (
        pieces.join(outcomes, on="run_id")
        .group_by("kind", "piece_id", "label")
        .agg(runs_offered_with_label=pl.len())
    )
    grid = offered.join(base.select("label"), how="cross")
    return (
        grid.join(with_label, on=["kind", "piece_id", "label"], how="left")
        .join(base, on="label")
        .with_columns(
            pl.col("runs_offered_with_label").fill_null(0).cast(pl.Int64),
            pl.col("runs_offered").cast(pl.Int64),
            pl.col("runs_labelled_with_label").cast(pl.Int64),
        )
        .with_columns(
            share_with_label=pl.col("runs_offered_with_label") / pl.col("runs_offered"),
            base_rate=pl.col("runs_labelled_with_label") / pl.col("runs_labelled"),
            **_against_base_rate(),
        )
        .rename({"piece_id": "id"})
        .select(
            "kind",
            "id",
            "label",
            "runs_offered",
            "runs_offered_with_label",
            "share_with_label",
            "runs_labelled",
            "runs_labelled_with_label",
            "base_rate",
            "share_minus_base",
            "vs_base_rate",
        )
        .sort("label", "share_minus_base", "kind", "id")
    )


def _against_base_rate() -> dict[str, pl.Expr]:
    """``share_minus_base`` and ``vs_base_rate`` from the exact cross-product
    ``with_label * labelled - labelled_with_label * offered`` (Int128: no count overflows).

    >>> counts = pl.DataFrame({"runs_offered_with_label": [3, 4, 1], "runs_offered": [5, 5, 5],
    ...     "runs_labelled_with_label": [3, 3, 3], "runs_labelled": [5, 5, 5]})
    >>> counts.select(**_against_base_rate()).rows()
    [(0.0, 'equal'), (0.2, 'above'), (-0.4, 'below')]
    """
    wide = pl.Int128
    difference = pl.col("runs_offered_with_label").cast(wide) * pl.col("runs_labelled").cast(
        wide
    ) - pl.col("runs_labelled_with_label").cast(wide) * pl.col("runs_offered").cast(wide)
    denominator = pl.col("runs_offered").cast(wide) * pl.col("runs_labelled").cast(wide)
    return {
        "share_minus_base": difference.cast(pl.Float64) / denominator.cast(pl.Float64),
        "vs_base_rate": pl.when(difference > 0)
        .then(pl.lit("above"))
        .when(difference < 0)
        .then(pl.lit("below"))
        .otherwise(pl.lit("equal")),
    }
