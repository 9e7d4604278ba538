"""The gate what-if: what agentfootprint's ledger gates (``gates.ts``) would have left out.

The reference measured its gates on one over-stuffed fixture; this replays the verdict over
any archive, runs in ``run_order``, run k judged by the ledger of the metered runs before it
(the first run is never gated), once per offer. ``makeVerdict``: unknown or offered fewer
than ``min_offers`` times, or earning at least the floor: pass; else demoted, and the
piece's demotion counter (1 on the first) paroles it at each multiple of ``refresh_every``.
A demoted tool or injection is left out; a demoted skill is only down-weighted (score x
0.25, re-ranked), so it saves nothing and loses nothing.

A tool use is lost when the gate left the tool out of the call that made it
(``uses.call_index``); without a call (reference mode) it is judged per run: lost if left
out of every call of the run, at risk if of some. An injection's answer-slice use is lost
when the gate left it out of the last call that carried it (the slot write it is read from).

Deliberately wrong: the ledger is the recorded, ungated one (a gated piece would stop
accruing offers and uses); the rest of a run is assumed to go as recorded after a piece is
left out; every injection counts as wrapped with ``ledgerGated`` (``on-tool-return`` ones
would pass untouched, but triggers are not recorded) and every tool as served through the
gate; one gate instance lives for the whole replay (``parole_counter="run"``: one per run).
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from contextledger.tables.build import RunTables

#: agentfootprint's ``LedgerPolicy`` defaults (gates.ts line 43).
MIN_OFFERS = 5
EARN_RATE_FLOOR = 0.05
REFRESH_EVERY = 10

#: What ``uses_lost`` and ``uses_at_risk`` count, for output that shows them.
ATTRIBUTION_NOTE = (
    "uses_lost: a tool call made at a call the gate left the tool out of, or an injection's "
    "answer-slice credit where it was left out of the last call that carried it; a tool call "
    "whose call is not recorded (uses_judged_per_run, all of them in reference mode) is lost "
    "when the gate left the tool out of every call of its run and at risk (uses_at_risk) "
    "when it left it out of some"
)

#: Count columns of both frames, in output order.
COUNT_COLUMNS = [
    "offered",
    "approx_tokens_spent",
    "offers_demoted",
    "offers_paroled",
    "offers_gated",
    "offers_down_weighted",
    "approx_tokens_saved",
    "used",
    "uses_lost",
    "uses_at_risk",
    "uses_judged_per_run",
]


def _demotion_count(parole_counter: Literal["archive", "run"]) -> pl.Expr:
    """The sequential part, ``makeVerdict``'s ``demotions`` map: on a demoted decision, how
    many demoted decisions of this piece so far, this one included (0 when not demoted).

    Evaluated on decisions in decision order; the counter lives for the whole replay (one
    gate instance) or restarts each run (a gate built per run).
    """
    demoted = pl.col("demoted").cast(pl.Int64)
    keys = ["kind", "piece_id"] if parole_counter == "archive" else ["kind", "piece_id", "run_id"]
    return demoted.cum_sum().over(keys, order_by=["run_order", "call_index", "seq"]) * demoted


def replay_decisions(
    tables: RunTables,
    *,
    min_offers: int = MIN_OFFERS,
    earn_rate_floor: float = EARN_RATE_FLOOR,
    refresh_every: int | None = REFRESH_EVERY,
    parole_counter: Literal["archive", "run"] = "archive",
) -> pl.DataFrame:
    """One row per offer of a metered run with the gate's verdict, in decision order.

    Adds the piece's ledger before this run (``prior_offered``, ``prior_used``,
    ``prior_earn_rate``), ``demoted`` (the ledger judged it a non-earner),
    ``demotion_count``, ``paroled``, ``left_out`` (tools, injections) and
    ``down_weighted`` (skills). ``refresh_every`` of 0 or ``None`` disables parole (the
    reference's ``Infinity``).
    """
    if refresh_every is not None and refresh_every < 0:
        msg = f"refresh_every must be 0 (no parole) or more, not {refresh_every}"
        raise ValueError(msg)
    metered = pl.DataFrame(tables.runs).filter(pl.col("metered")).select("run_id", "run_order")
    offers = pl.DataFrame(tables.offers).join(metered, on="run_id")
    uses = pl.DataFrame(tables.uses).join(metered, on="run_id")
    prior = _ledger_before_each_run(offers, uses)
    earn_rate = (
        pl.when(pl.col("prior_offered") > 0)
        .then(pl.col("prior_used") / pl.col("prior_offered"))
        .otherwise(0.0)
    )
    known = (pl.col("prior_offered") + pl.col("prior_used")) > 0
    decisions = (
        offers.join(prior, on=["kind", "piece_id", "run_order"], how="left")
        .with_columns(pl.col("prior_offered", "prior_used").fill_null(0))
        .sort("run_order", "call_index", "seq")
        .with_columns(
            prior_earn_rate=earn_rate,
            demoted=known & (pl.col("prior_offered") >= min_offers) & (earn_rate < earn_rate_floor),
        )
    )
    decisions = decisions.with_columns(demotion_count=_demotion_count(parole_counter))
    paroled = (
        pl.col("demoted") & (pl.col("demotion_count") % refresh_every == 0)
        if refresh_every
        else pl.lit(False)
    )
    return decisions.with_columns(paroled=paroled).with_columns(
        left_out=pl.col("demoted") & ~pl.col("paroled") & (pl.col("kind") != "skill"),
        down_weighted=pl.col("demoted") & ~pl.col("paroled") & (pl.col("kind") == "skill"),
    )


def _ledger_before_each_run(offers: pl.DataFrame, uses: pl.DataFrame) -> pl.DataFrame:
    """Per piece and run where it was offered or used: its ledger counts over earlier runs."""
    keys = ["kind", "piece_id", "run_order"]
    per_run = (
        offers.group_by(keys)
        .agg(run_offered=pl.len())
        .join(uses.group_by(keys).agg(run_used=pl.len()), on=keys, how="full", coalesce=True)
        .with_columns(pl.col("run_offered", "run_used").fill_null(0).cast(pl.Int64))
    )
    offered, used = pl.col("run_offered"), pl.col("run_used")
    piece = ["kind", "piece_id"]
    return per_run.select(
        keys,
        prior_offered=offered.cum_sum().over(piece, order_by="run_order") - offered,
        prior_used=used.cum_sum().over(piece, order_by="run_order") - used,
    )


def _uses_cost(decisions: pl.DataFrame, uses: pl.DataFrame) -> pl.DataFrame:
    """Per piece: the uses the gate would have lost, and those it put at risk.

    Only the decisions on a piece a run used are read: the others cost no use (at
    10,000 synthetic runs, two in five offers).
    """
    decisions = decisions.join(
        uses.select("run_id", "kind", "piece_id").unique(),
        on=["run_id", "kind", "piece_id"],
        how="semi",
    )
    at_call = decisions.group_by("run_id", "call_index", "kind", "piece_id").agg(
        call_left_out=pl.col("left_out").any()
    )
    in_run = decisions.group_by("run_id", "kind", "piece_id").agg(
        run_offers=pl.len(),
        run_left_out=pl.col("left_out").sum(),
        left_out_at_last=pl.col("left_out").sort_by("call_index", "seq").last(),
    )
    attributed = (
        uses.join(at_call, on=["run_id", "call_index", "kind", "piece_id"], how="left")
        .join(in_run, on=["run_id", "kind", "piece_id"], how="left")
        .with_columns(
            pl.col("run_offers", "run_left_out").fill_null(0),
            pl.col("call_left_out", "left_out_at_last").fill_null(False),
        )
    )
    tool = pl.col("kind") == "tool"
    per_run = tool & pl.col("call_index").is_null()
    every_call = (pl.col("run_offers") > 0) & (pl.col("run_left_out") == pl.col("run_offers"))
    some_calls = (pl.col("run_left_out") > 0) & ~every_call
    lost = (
        pl.when(per_run)
        .then(every_call)
        .when(tool)
        .then(pl.col("call_left_out"))
        .when(pl.col("kind") == "injection")
        .then(pl.col("left_out_at_last"))
        .otherwise(False)
    )
    return attributed.group_by("kind", "piece_id").agg(
        used=pl.len(),
        uses_lost=lost.sum(),
        uses_at_risk=(per_run & some_calls).sum(),
        uses_judged_per_run=per_run.sum(),
    )


def gate_what_if(
    tables: RunTables,
    *,
    min_offers: int = MIN_OFFERS,
    earn_rate_floor: float = EARN_RATE_FLOOR,
    refresh_every: int | None = REFRESH_EVERY,
    parole_counter: Literal["archive", "run"] = "archive",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per piece, and a one-row total: what the ledger gates would have left out, and cost.

    Pieces are sorted by ``approx_tokens_saved`` (most first), then first appearance.

    Examples
    --------
    >>> from contextledger.tables.build import read_runs
    >>> pieces, total = gate_what_if(read_runs("data/sample"))
    >>> total.height, "approx_tokens_saved" in pieces.columns
    (1, True)
    """
    decisions = replay_decisions(
        tables,
        min_offers=min_offers,
        earn_rate_floor=earn_rate_floor,
        refresh_every=refresh_every,
        parole_counter=parole_counter,
    )
    metered = pl.DataFrame(tables.runs).filter(pl.col("metered")).select("run_id", "run_order")
    uses = pl.DataFrame(tables.uses).join(metered, on="run_id")
    saved = pl.when(pl.col("left_out")).then(pl.col("approx_tokens")).otherwise(0)
    # First appearance, as the ledger orders rows: runs in order, offers before uses.
    first_offer = (pl.col("run_order") * 2) * (1 << 31) + pl.col("seq")
    first_use = (pl.col("run_order") * 2 + 1) * (1 << 31) + pl.col("seq")
    offered = decisions.group_by("kind", "piece_id").agg(
        offered=pl.len(),
        approx_tokens_spent=pl.col("approx_tokens").sum(),
        offers_demoted=pl.col("demoted").sum(),
        offers_paroled=pl.col("paroled").sum(),
        offers_gated=pl.col("left_out").sum(),
        offers_down_weighted=pl.col("down_weighted").sum(),
        approx_tokens_saved=saved.sum(),
        first=first_offer.min(),
    )
    used = _uses_cost(decisions, uses).join(
        uses.group_by("kind", "piece_id").agg(first_use=first_use.min()), on=["kind", "piece_id"]
    )
    pieces = (
        offered.join(used, on=["kind", "piece_id"], how="full", coalesce=True)
        .with_columns(
            pl.col(COUNT_COLUMNS).fill_null(0).cast(pl.Int64),
            first=pl.min_horizontal("first", "first_use"),
        )
        .sort(["approx_tokens_saved", "first"], descending=[True, False])
        .rename({"piece_id": "id"})
        .select("kind", "id", *COUNT_COLUMNS)
    )
    total = pieces.select(pl.col(COUNT_COLUMNS).sum()).with_columns(
        runs_replayed=pl.lit(metered.height, pl.Int64),
        runs_gated=pl.lit(decisions.filter(pl.col("left_out"))["run_id"].n_unique(), pl.Int64),
        min_offers=pl.lit(min_offers, pl.Int64),
        earn_rate_floor=pl.lit(earn_rate_floor, pl.Float64),
        refresh_every=pl.lit(refresh_every or 0, pl.Int64),
        mode=pl.lit(tables.mode),
    )
    return pieces, total


def gate_note(order: str) -> str:
    """What a gate what-if's output notes: the order its runs were replayed in (``order``,
    a :attr:`RunTables.order`: the result depends on it), then :data:`ATTRIBUTION_NOTE`."""
    return f"runs in {order}, each judged by the ledger of the runs before it; {ATTRIBUTION_NOTE}"


def describe_total(total: pl.DataFrame, order: str) -> str:
    """The one-row total as a few lines of text, with the run ``order`` and what
    ``uses_lost`` means (:func:`gate_note`)."""
    t = total.row(0, named=True)
    share = t["approx_tokens_saved"] / t["approx_tokens_spent"] if t["approx_tokens_spent"] else 0
    parole = f"every {t['refresh_every']}th demotion" if t["refresh_every"] else "never"
    return (
        f"gates would have left out {t['offers_gated']} of {t['offered']} offers, "
        f"~{t['approx_tokens_saved']} of ~{t['approx_tokens_spent']} approx tokens ({share:.1%}), "
        f"in {t['runs_gated']} of {t['runs_replayed']} runs; "
        f"{t['offers_paroled']} demoted offers paroled, "
        f"{t['offers_down_weighted']} skill offers down-weighted (never removed)\n"
        f"uses lost {t['uses_lost']}, at risk {t['uses_at_risk']}, of {t['used']} "
        f"({t['uses_judged_per_run']} tool uses without a recorded call judged per run)\n"
        f"policy: min_offers {t['min_offers']}, earn_rate_floor {t['earn_rate_floor']}, "
        f"parole {parole}; ledger from earlier runs only ({t['mode']} accounting)\n"
        f"{gate_note(order)}"
    )
