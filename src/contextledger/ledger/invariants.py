"""Counts that bound other counts, whatever wrote the tables: the ledger's invariants.

The snapshot readers, an archive and ``synth`` all produce the same tables, and the
ledger over them means something only if some counts stay within others: a run
used a piece only if it offered it, a piece was seen in no more runs than there
are, a label was credited to no more runs than offered the piece, an answer-slice
credit is given once per offering run. Each is checked column-wise in Polars over
the ledger's own inputs (an archive's scans stream, so memory stays bounded), and a
violation names the invariant, the piece and the runs that break it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from contextledger.ledger.compute import (
    LedgerInputs,
    SplitRows,
    label_credit,
    ledger_inputs,
    ledger_plan,
    piece_totals,
    run_piece_totals,
    split_rows,
)
from contextledger.tables.build import RunTables

#: Each invariant's name and what it says.
INVARIANTS = {
    "run-id-unique": "a run_id names one row of the runs table",
    "use-implies-offer": (
        "a skill activation or answer-slice credit names a piece its run offered"
    ),
    "runs-seen-within-runs": "a piece's runs_seen is at most the number of metered runs",
    "label-within-runs-seen": "a piece's runs per outcome label are at most its runs_seen",
    "answer-slice-within-offering-runs": (
        "a piece's used_answer_slice is at most the runs that offered it (its runs_seen)"
    ),
    "totals-equal-rows": (
        "an archive's stored piece totals are the totals of its offer and use rows"
    ),
    "run-totals-equal-rows": (
        "an archive's stored run totals of the selected runs are the totals of their rows"
    ),
    "label-credit-equal-rows": (
        "an archive's stored label credit is the credit of its first offers and labels"
    ),
}
#: The signal ``use-implies-offer`` leaves out: a tool call is what the model did, and a
#: model may call a tool it was never given (agentfootprint books it, offered 0, used 1,
#: as the corpus's ``s0254-edge-unknown-tool`` and ``s0255-...-parallel`` record).
MODEL_SIGNAL = "tool-called"
#: The signals that say what the agent did, not what the ledger credited: a tool call, and
#: (traces) a tool execution no model output names.
AGENT_SIGNALS = (MODEL_SIGNAL, "tool-executed")
#: Runs a violation names (it also says how many there are).
EXAMPLE_RUNS = 3
#: Columns of :attr:`InvariantReport.violations`.
VIOLATION_SCHEMA = pl.Schema(
    {
        "invariant": pl.String(),
        "accounting": pl.String(),
        "kind": pl.String(),  # null: not about one piece (run-id-unique)
        "piece_id": pl.String(),
        "detail": pl.String(),
        "run_count": pl.Int64(),  # the runs that break it
        "runs": pl.List(pl.String),  # the first EXAMPLE_RUNS of them, in run order
    }
)
_PIECE = ["kind", "piece_id"]
_RUN_PIECE = ["run_id", "kind", "piece_id"]
_ANSWER_SLICE = "answer-slice(slot)"


@dataclass(frozen=True)
class InvariantReport:
    """What :func:`check_invariants` found under one accounting."""

    accounting: str
    runs: int  # rows of the runs table
    violations: pl.DataFrame  # VIOLATION_SCHEMA, one row per invariant and piece (and label)

    @property
    def holds(self) -> bool:
        """True when no invariant is violated."""
        return self.violations.height == 0


def check_invariants(
    tables: RunTables | LedgerInputs,
    accounting: str | None = None,
    *,
    examples: int = EXAMPLE_RUNS,
) -> InvariantReport:
    """Check every invariant of :data:`INVARIANTS` over ``tables`` (whose accounting is
    ``tables.mode``, or ``accounting`` for bare :class:`LedgerInputs`).

    The counts are the ledger's own (an archive's stored piece totals where it has
    them); the runs behind a violated count are looked up only for the pieces that
    violate it.

    >>> from contextledger.tables.build import read_runs
    >>> report = check_invariants(read_runs("data/sample"))
    >>> report.holds, report.runs
    (True, 14)
    """
    if accounting is None:
        if not isinstance(tables, RunTables):
            raise ValueError("check_invariants: give the accounting of bare LedgerInputs")
        accounting = tables.mode
    inputs = ledger_inputs(tables)
    split = split_rows(inputs)
    orders = inputs.runs.group_by("run_id").agg(order=pl.col("run_order").min())
    rows, recorded = ledger_plan(inputs)
    plans = [
        inputs.runs.select(pl.len()),
        recorded,
        rows.select(
            "kind",
            piece_id="id",
            runs_seen="runs_seen",
            used_answer_slice="used_answer_slice",
            outcomes="outcomes",
        ),
        _duplicate_run_ids(inputs.runs),
    ]
    credited = split.first_uses.filter(~pl.col("signal").is_in(AGENT_SIGNALS))
    unoffered = credited.select(_RUN_PIECE).join(
        split.first_offers.select(_RUN_PIECE), on=_RUN_PIECE, how="anti"
    )
    plans.append(_named_runs(unoffered, orders, examples))
    collected = pl.collect_all(plans, engine=inputs.engine)
    run_count, metered = int(collected[0].item()), int(collected[1].item())
    counts, duplicates = collected[2], collected[3]

    found: list[pl.DataFrame] = []
    if duplicates.height:
        found.append(
            pl.DataFrame(
                {
                    "invariant": ["run-id-unique"],
                    "kind": [None],
                    "piece_id": [None],
                    "detail": [
                        f"{duplicates.height} run id(s) name more than one run "
                        f"(up to {duplicates.select(pl.col('rows').max()).item()} rows each)"
                    ],
                    "run_count": [duplicates.height],
                    "runs": [duplicates["run_id"].head(examples).to_list()],
                },
                schema_overrides={"kind": pl.String(), "piece_id": pl.String},
            )
        )
    if collected[4].height:
        found.append(
            collected[4].with_columns(
                invariant=pl.lit("use-implies-offer"),
                detail=pl.format("credited in {} run(s) that never offered it", "run_count"),
            )
        )
    found += _count_violations(inputs, split, orders, counts, metered, examples)
    if inputs.totals is not None:
        found += _totals_violations(inputs)
    elif inputs.run_totals is not None:
        found += _run_totals_violations(inputs)
    if inputs.credit is not None:
        found += _credit_violations(inputs)
    violations = (
        pl.concat(
            [frame.with_columns(accounting=pl.lit(accounting)) for frame in found],
            how="diagonal_relaxed",
        )
        .select(list(VIOLATION_SCHEMA))
        .cast(VIOLATION_SCHEMA)
        if found
        else pl.DataFrame(schema=VIOLATION_SCHEMA)
    )
    return InvariantReport(accounting, run_count, violations)


#: The stored totals' columns compared with the rows': counts add up, first keys take the min.
_TOTAL_COUNTS = (
    "offered",
    "approx_tokens_spent",
    "runs_seen",
    "used",
    "used_tool_called",
    "used_skill_activated",
    "used_answer_slice",
    "used_tool_executed",
)
_TOTAL_FIRSTS = ("first_offer", "first_use")


def _totals_violations(inputs: LedgerInputs) -> list[pl.DataFrame]:
    """Pieces whose stored totals (the ledger's fast path) differ from their rows' totals.

    The rows path is what a run-id or label filter reads; a totals file out of step with
    the rows (rewritten, or a bit flipped at the same size) would make the two paths give
    two ledgers. No run is named: totals do not say which runs they counted.
    """
    assert inputs.totals is not None
    return _totals_differ(inputs.totals, inputs, "totals-equal-rows")


def _run_totals_violations(inputs: LedgerInputs) -> list[pl.DataFrame]:
    """Pieces whose totals from the selected runs' stored run totals (what a run-level
    filter reads) differ from the totals of those runs' rows."""
    return _totals_differ(run_piece_totals(inputs), inputs, "run-totals-equal-rows")


def _totals_differ(
    stored: pl.LazyFrame, inputs: LedgerInputs, invariant: str
) -> list[pl.DataFrame]:
    """``invariant`` violations: pieces whose ``stored`` totals (``schema.PIECE_TOTALS``
    rows, added up) differ from the totals of ``inputs``' offer and use rows."""
    aggregate = [
        *(pl.col(c).sum() for c in _TOTAL_COUNTS),
        *(pl.col(c).min() for c in _TOTAL_FIRSTS),
    ]
    stored = stored.group_by(_PIECE).agg(aggregate)
    rows_only = replace(inputs, totals=None, run_totals=None)
    rows = piece_totals(rows_only).group_by(_PIECE).agg(aggregate)
    both = stored.join(rows, on=_PIECE, how="full", suffix="_rows", coalesce=True, nulls_equal=True)
    columns = (*_TOTAL_COUNTS, *_TOTAL_FIRSTS)
    return _stored_differs(both, columns, invariant, inputs)


def _credit_violations(inputs: LedgerInputs) -> list[pl.DataFrame]:
    """(Piece, label) pairs whose stored label credit (the ledger's fast path) differs
    from the credit of the first offers and labels it stands for: the runs counted, or
    the first credit (run_order, and the label's rank among the run's labels)."""
    assert inputs.credit is not None
    key = [*_PIECE, "label"]
    aggregate = [pl.col("runs").sum(), pl.col("first_credit").min()]
    stored = inputs.credit.stored.group_by(key).agg(aggregate)
    metered = inputs.runs.filter(pl.col("metered")).select("run_id", "run_order")
    rows = label_credit(inputs.outcomes, inputs.credit.covered, metered, ranked=True)
    both = stored.join(
        rows.group_by(key).agg(aggregate), on=key, how="full", suffix="_rows", coalesce=True
    )
    columns = ("runs", "first_credit")
    return _stored_differs(both, columns, "label-credit-equal-rows", inputs)


def _stored_differs(
    both: pl.LazyFrame, columns: tuple[str, ...], invariant: str, inputs: LedgerInputs
) -> list[pl.DataFrame]:
    """The rows of ``both`` (stored ``columns`` beside their ``*_rows`` recount) that
    differ, as ``invariant`` violations saying which counts differ (and the label, for
    label credit). No run is named: stored counts do not say which runs they counted."""
    differ = [~pl.col(c).eq_missing(pl.col(f"{c}_rows")) for c in columns]
    found = both.filter(pl.any_horizontal(differ)).collect(engine=inputs.engine)
    if not found.height:
        return []
    details = [
        (f"label {row['label']!r}: " if "label" in row else "")
        + "; ".join(
            f"{c}: stored {row[c]}, rows {row[f'{c}_rows']}"
            for c in columns
            if row[c] != row[f"{c}_rows"]
        )
        for row in found.iter_rows(named=True)
    ]
    return [
        found.select(_PIECE).with_columns(
            invariant=pl.lit(invariant),
            detail=pl.Series(details, dtype=pl.String),
            run_count=pl.lit(0, dtype=pl.Int64),
            runs=pl.lit([], dtype=pl.List(pl.String)),
        )
    ]


def _duplicate_run_ids(runs: pl.LazyFrame) -> pl.LazyFrame:
    """Run ids with more than one runs row, in the order they first appear."""
    return (
        runs.group_by("run_id")
        .agg(rows=pl.len(), order=pl.col("run_order").min())
        .filter(pl.col("rows") > 1)
        .sort("order")
    )


def _named_runs(
    broken: pl.LazyFrame, orders: pl.LazyFrame, examples: int, by: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """Per piece (and ``by``): how many distinct runs of ``broken`` there are, and the
    first ``examples`` of them in run order (runs the runs table lacks come last)."""
    distinct = broken.select(*_RUN_PIECE, *by).unique()
    return (
        distinct.join(orders, on="run_id", how="left")
        .group_by(*_PIECE, *by)
        .agg(
            run_count=pl.len().cast(pl.Int64),
            runs=pl.col("run_id").sort_by("order", "run_id", nulls_last=True).head(examples),
        )
        .sort(*_PIECE, *by)
    )


def _count_violations(
    inputs: LedgerInputs,
    split: SplitRows,
    orders: pl.LazyFrame,
    counts: pl.DataFrame,
    metered: int,
    examples: int,
) -> list[pl.DataFrame]:
    """The pieces whose ledger counts exceed their bound, each with the runs behind it.

    Only the violating pieces' rows are read again: a run offering the piece twice
    as its first in the run, or missing from the metered runs (runs_seen); a run
    credited twice with one label (labels); a run credited by the answer slice more
    than once, or without offering the piece (used_answer_slice).
    """
    found: list[pl.DataFrame] = []
    metered_runs = inputs.runs.filter(pl.col("metered")).select("run_id")

    over_runs = counts.filter(pl.col("runs_seen") > metered).select(*_PIECE, "runs_seen")
    if over_runs.height:
        offers = split.first_offers.join(over_runs.lazy(), on=_PIECE, how="semi")
        broken = pl.concat(
            [
                offers.group_by(_RUN_PIECE).len().filter(pl.col("len") > 1).select(_RUN_PIECE),
                offers.join(metered_runs, on="run_id", how="anti").select(_RUN_PIECE),
            ]
        )
        found.append(
            _with_runs(over_runs, _named_runs(broken, orders, examples), inputs).with_columns(
                invariant=pl.lit("runs-seen-within-runs"),
                detail=pl.format("runs_seen {} > {} metered run(s)", "runs_seen", pl.lit(metered)),
            )
        )

    labels = (
        counts.select(*_PIECE, "runs_seen", "outcomes")
        .explode("outcomes")
        .drop_nulls("outcomes")
        .unnest("outcomes")
        .rename({"runs": "label_runs"})
        .filter(pl.col("label_runs") > pl.col("runs_seen"))
    )
    if labels.height:
        credited = (
            split.first_offers.join(labels.lazy().select(_PIECE).unique(), on=_PIECE, how="semi")
            .select(_RUN_PIECE)
            .join(inputs.outcomes.select("run_id", "label"), on="run_id")
            .join(labels.lazy().select(*_PIECE, "label"), on=[*_PIECE, "label"], how="semi")
        )
        # a (run, label) pair counts once, so no run is credited twice: name the runs
        # credited, whose labels the piece's runs_seen does not cover
        broken = credited.unique()
        named = _named_runs(broken, orders, examples, by=("label",))
        found.append(
            _with_runs(labels, named, inputs, by=("label",)).with_columns(
                invariant=pl.lit("label-within-runs-seen"),
                detail=pl.format(
                    "label {}: {} run(s) > runs_seen {}", "label", "label_runs", "runs_seen"
                ),
            )
        )

    over_slice = counts.filter(pl.col("used_answer_slice") > pl.col("runs_seen")).select(
        *_PIECE, "runs_seen", "used_answer_slice"
    )
    if over_slice.height:
        sliced = (
            pl.concat([split.first_uses, split.later_uses], how="diagonal_relaxed")
            .filter(pl.col("signal") == _ANSWER_SLICE)
            .join(over_slice.lazy(), on=_PIECE, how="semi")
            .group_by(_RUN_PIECE)
            .len()
        )
        unoffered = sliced.join(split.first_offers.select(_RUN_PIECE), on=_RUN_PIECE, how="anti")
        broken = pl.concat(
            [sliced.filter(pl.col("len") > 1).select(_RUN_PIECE), unoffered.select(_RUN_PIECE)]
        )
        found.append(
            _with_runs(over_slice, _named_runs(broken, orders, examples), inputs).with_columns(
                invariant=pl.lit("answer-slice-within-offering-runs"),
                detail=pl.format(
                    "used_answer_slice {} > runs_seen {}", "used_answer_slice", "runs_seen"
                ),
            )
        )
    return found


def _with_runs(
    violating: pl.DataFrame,
    named: pl.LazyFrame,
    inputs: LedgerInputs,
    by: tuple[str, ...] = (),
) -> pl.DataFrame:
    """``violating`` rows with the runs ``named`` for each (none found: 0 and [])."""
    runs = named.collect(engine=inputs.engine)
    return (
        violating.join(runs, on=[*_PIECE, *by], how="left")
        .with_columns(
            run_count=pl.col("run_count").fill_null(0),
            runs=pl.col("runs").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        )
        .sort(*_PIECE, *by)
    )
