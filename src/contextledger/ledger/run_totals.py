"""The ledger of some runs (a ``label`` or ``run_id`` filter) from an archive's stored run
totals, in one pass over them.

Each run-total row (one per run and piece) of a selected run is keyed by its run's
*label set*, a small integer looked up by ``run_order``; one group-by by piece and label
set then gives both the counts and the outcome credit, with no join on run ids or labels
over the rows and no second read. The label sets are made in memory from the selected
runs' labels (a row per run and label). Nothing is approximated: the ledger is the one
the rows give (``tests/test_run_totals.py`` checks it exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from contextledger.tables import columns

if TYPE_CHECKING:
    import numpy as np

#: A first offer or use is packed as ``run_order * 2**32 + seq`` (plus ``2**31`` for a
#: use), and a label's credit as ``run_order * 2**32 + the label's row``: see
#: ``columns.PIECE_TOTALS`` and ``columns.LABEL_CREDIT``.
_RUN = 1 << 32
_USE = 1 << 31
_PIECE = ["kind", "piece_id"]
#: The run-total columns a piece's counts add up.
_SUMMED = ["offered", "approx_tokens_spent", "used", *columns.USED_SIGNAL_COLUMNS.values()]
#: A run's label set is looked up in an array over the selected run orders' span while
#: the span is at most this many entries per selected run (plus ``_DENSE_SPAN_FREE``):
#: indexing is 8x cheaper than a join at 1M runs. A sparse selection (a few runs far
#: apart in a large archive) joins instead, so memory stays with the selection.
_DENSE_SPAN_PER_RUN = 8
_DENSE_SPAN_FREE = 1 << 22


@dataclass(frozen=True)
class LabelSets:
    """The selected metered runs' label sets, labels numbered by ``labels`` (``code``).

    ``run_orders`` (sorted), the labelled ones (``labelled``) and their sets
    (``labelled_sets``: any other run's is 0, the empty set), ``members`` (a row per set
    and label: ``label_set``, ``code``), and ``positions`` (a row per run and label:
    ``run_order``, ``code``, and the label's first row among the labels as given,
    ``label_position``, which orders one run's labels).
    """

    run_orders: np.ndarray
    labelled: np.ndarray
    labelled_sets: np.ndarray
    labels: pl.Series
    members: pl.DataFrame
    positions: pl.DataFrame


def label_sets(metered: pl.DataFrame, outcomes: pl.LazyFrame | None) -> LabelSets:
    """The label sets of ``metered``'s runs (``run_id``, ``run_order``), from ``outcomes``
    (``run_id``, ``label`` rows, in the order the reference records them; None: none).

    Made with NumPy from a row per run and label: a group-by of 600,000 runs costs
    Polars 0.3 s, a sort 0.02 s.

    >>> runs = pl.DataFrame({"run_id": ["a", "b", "c"], "run_order": [7, 8, 9]})
    >>> labels = pl.LazyFrame({"run_id": ["c", "a", "c", "a"], "label": ["x", "y", "y", "x"]})
    >>> sets = label_sets(runs, labels)
    >>> sets.labelled.tolist(), sets.labelled_sets.tolist()
    ([7, 9], [1, 1])
    >>> sets.members.sort("label_set", "code").rows()
    [(1, 0), (1, 1)]
    """
    import numpy as np

    run_orders = np.sort(metered["run_order"].to_numpy(), kind="stable")  # mostly in order
    given = pl.LazyFrame(schema={"run_id": pl.String, "label": pl.String})
    found = (
        (outcomes if outcomes is not None else given)
        .select("run_id", "label")
        .with_row_index("label_position")
        .join(metered.lazy().select("run_id", "run_order"), on="run_id")
        .select("run_order", "label", pl.col("label_position").cast(pl.Int64))
        .collect(engine="in-memory")
    )
    labels = found["label"].unique(maintain_order=True)
    codes = found["label"].replace_strict(labels, pl.int_range(len(labels), eager=True))
    # each (run, label) pair once, at its first row: runs in order, a run's labels by code
    run_of, code_of = found["run_order"].to_numpy(), codes.to_numpy()
    position_of = found["label_position"].to_numpy()
    # one key (a run order is below 2**31, as packed with 2**32; a code, below the rows)
    order = np.argsort(run_of * len(labels) + code_of, kind="stable")
    run_of, code_of, position_of = run_of[order], code_of[order], position_of[order]
    pair_starts = np.flatnonzero(_starts(run_of) | _starts(code_of))
    pair_run, pair_code = run_of[pair_starts], code_of[pair_starts]
    first_row = np.minimum.reduceat(position_of, pair_starts) if len(pair_starts) else pair_run
    positions = pl.DataFrame(
        {"run_order": pair_run, "code": pair_code, "label_position": first_row},
        schema={"run_order": pl.Int64, "code": pl.Int64, "label_position": pl.Int64},
    )
    # each labelled run's codes, numbered as a set: runs with as many labels at once
    run_starts = np.flatnonzero(_starts(pair_run))
    sizes = np.diff(np.append(run_starts, len(pair_run)))
    set_of_labelled = np.zeros(len(run_starts), dtype=np.int32)
    member_sets, member_codes = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    next_set = 1  # 0: no label
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        distinct, inverse = _distinct_rows(pair_code[run_starts[which, None] + np.arange(size)])
        set_of_labelled[which] = next_set + inverse
        member_sets.append(np.repeat(np.arange(next_set, next_set + len(distinct)), size))
        member_codes.append(distinct.reshape(-1))
        next_set += len(distinct)
    members = pl.DataFrame(
        {"label_set": np.concatenate(member_sets), "code": np.concatenate(member_codes)},
        schema={"label_set": pl.Int32, "code": pl.Int64},
    )
    return LabelSets(run_orders, pair_run[run_starts], set_of_labelled, labels, members, positions)


def _starts(values: np.ndarray) -> np.ndarray:
    """Where ``values`` differs from the value before it (the first: always)."""
    import numpy as np

    differs = np.ones(len(values), dtype=bool)
    differs[1:] = values[1:] != values[:-1]
    return differs


def run_totals_counts(
    run_totals: pl.LazyFrame,
    metered: pl.DataFrame,
    outcomes: pl.LazyFrame | None,
    engine: str = "streaming",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per piece, the counts of ``metered``'s runs (``schema.PIECE_TOTALS``), and per piece
    and label, the credit (``schema.LABEL_CREDIT``), from ``run_totals``
    (``schema.RUN_TOTALS`` rows of at least those runs) and ``outcomes`` (None: no credit).

    The counts are :func:`~contextledger.ledger.compute.piece_totals`' of the same runs'
    rows; the credit is :func:`~contextledger.ledger.compute.label_credit`'s, with each
    label's row counted among the labels as given.
    """
    sets = label_sets(metered, outcomes)
    keyed = _keyed_by_label_set(run_totals, sets)
    grouped = (
        keyed.group_by(*_PIECE, "label_set")
        .agg(
            *[pl.col(name).sum() for name in _SUMMED],
            runs_seen=pl.col("first_offer_seq").count().cast(pl.Int64),
            first_offer=(pl.col("run_order") * _RUN + pl.col("first_offer_seq")).min(),
            first_use=(pl.col("run_order") * _RUN + _USE + pl.col("first_use_seq")).min(),
        )
        .collect(engine=engine)  # type: ignore[call-overload]
    )
    totals = (
        grouped.group_by(_PIECE)
        .agg(
            *[pl.col(name).sum() for name in [*_SUMMED, "runs_seen"]],
            pl.col("first_offer").min(),
            pl.col("first_use").min(),
        )
        .select(columns.names(columns.PIECE_TOTALS))
    )
    # a label's first credit is in the earliest run that offered the piece with it: the
    # earliest first offer of the sets holding the label, then the label's row in that run
    credit = (
        grouped.filter(pl.col("runs_seen") > 0)
        .join(sets.members, on="label_set")
        .group_by(*_PIECE, "code")
        .agg(runs=pl.col("runs_seen").sum(), run_order=(pl.col("first_offer") // _RUN).min())
        .join(sets.positions, on=["run_order", "code"])
        .select(
            *_PIECE,
            label=pl.lit(sets.labels).gather(pl.col("code")),
            runs="runs",
            first_credit=pl.col("run_order") * _RUN + pl.col("label_position"),
        )
    )
    return totals, credit


def _keyed_by_label_set(run_totals: pl.LazyFrame, sets: LabelSets) -> pl.LazyFrame:
    """``run_totals``' rows of the runs of ``sets``, each with its run's ``label_set``."""
    import numpy as np

    orders = sets.run_orders
    if not len(orders):
        return run_totals.filter(pl.lit(value=False)).with_columns(label_set=pl.lit(0, pl.Int32))
    # kept by a filter of the scan's own column, which the reader applies before decoding
    # the other columns (a filter on the looked-up set cost 1.6x more at 100,000 runs)
    kept = run_totals.filter(pl.col("run_order").is_in(pl.Series(orders).implode()))
    low, high = int(orders[0]), int(orders[-1])
    span = high - low + 1
    if span > _DENSE_SPAN_PER_RUN * len(orders) + _DENSE_SPAN_FREE:
        label_set = np.zeros(len(orders), dtype=np.int32)
        label_set[np.searchsorted(orders, sets.labelled)] = sets.labelled_sets
        by_run = pl.DataFrame({"run_order": orders, "label_set": label_set})
        return kept.join(by_run.lazy(), on="run_order")
    lookup = np.zeros(span, dtype=np.int32)
    lookup[sets.labelled - low] = sets.labelled_sets
    return kept.with_columns(label_set=pl.lit(pl.Series(lookup)).gather(pl.col("run_order") - low))


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the 2-D ``rows`` and each row's number among them (what
    ``np.unique(axis=0, return_inverse=True)`` gives, 40x faster: it sorts the rows as
    bytes)."""
    import numpy as np

    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse
