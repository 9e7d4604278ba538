"""Charts of the ledger: which pieces earn their tokens, the outcomes they turn up
with, and what agentfootprint's gates would have cost. Each draws a bounded number of
marks whatever the fleet, and says what it leaves out."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import polars as pl

from contextledger.charts.labels import place_labels
from contextledger.charts.style import (
    _SHORT_AXIS,
    GATE_FLOOR,
    _kind_scale,
    _largest,
    _largest_float,
    _thousands,
    _title,
)

#: Pieces the earn-rate chart names, those spending the most tokens; the rest are pooled
#: into one line of its subtitle, so 10,000 pieces draw as few marks as 40.
PIECES_SHOWN = 25
#: Never-used pieces the earn-rate chart lists beside, most expensive first.
NEVER_USED_SHOWN = 12


def never_used(rows: pl.DataFrame) -> pl.DataFrame:
    """The pieces offered often enough to judge (``judged``) and never used, most
    expensive first: the one definition the report's summary, table and chart share.

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.compute import compute_ledger
    >>> from contextledger.ledger.stats import with_uncertainty
    >>> rows = with_uncertainty(compute_ledger(read_runs("data/sample")).rows())
    >>> never_used(rows)["id"].to_list()[:3]
    ['diff_configs', 'create_account', 'check_inventory']
    """
    return rows.filter(pl.col("judged") & (pl.col("used") == 0)).sort(
        "approx_tokens_spent", "id", descending=[True, False]
    )


def earn_rate_chart(
    rows: pl.DataFrame,
    *,
    shown: int = PIECES_SHOWN,
    never_used_shown: int = NEVER_USED_SHOWN,
    min_offers: int = 5,
) -> alt.HConcatChart:
    """The ``shown`` pieces spending the most tokens: what each spent, and its earn rate
    with its 95% interval; beside, the never-used pieces that cost most.

    ``rows`` is :func:`~contextledger.ledger.stats.with_uncertainty` of the ledger
    rows. A chart of every piece is a cloud at a fleet's thousand pieces: the rest
    are pooled into one sentence of the subtitle (their tokens and pooled earn rate),
    so the chart draws at most ``shown + never_used_shown`` rows whatever the fleet.
    A red ring marks a piece :func:`never_used`; ``min_offers`` is the count that
    makes a piece judged, for the titles.

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.compute import compute_ledger
    >>> from contextledger.ledger.stats import with_uncertainty
    >>> rows = with_uncertainty(compute_ledger(read_runs("data/sample")).rows())
    >>> earn_rate_chart(rows).to_dict()["hconcat"][1]["layer"][1]["mark"]["type"]
    'point'
    """
    data = (
        rows.select(
            "kind",
            "id",
            "offered",
            "used",
            "approx_tokens_spent",
            "earn_rate",
            "earn_rate_low",
            "earn_rate_high",
            "judged",
        )
        .with_columns(never_used=pl.col("judged") & (pl.col("used") == 0))
        .sort("approx_tokens_spent", "id", descending=[True, False])
    )
    top, rest = data.head(shown), data.slice(shown)
    order = top["id"].to_list()
    y = alt.Y("id:N", title=None, sort=order, axis=alt.Axis(labelLimit=180))
    colour = alt.Color("kind:N", title="kind", scale=_kind_scale(top["kind"]))
    tooltip = [
        alt.Tooltip("id:N", title="piece"),
        alt.Tooltip("kind:N"),
        alt.Tooltip("offered:Q", title="offered (model calls)", format=","),
        alt.Tooltip("used:Q", title="used", format=","),
        alt.Tooltip("approx_tokens_spent:Q", title="approx tokens spent", format=","),
        alt.Tooltip("earn_rate:Q", title="earn rate", format=".1%"),
        alt.Tooltip("earn_rate_low:Q", title="95% interval from", format=".1%"),
        alt.Tooltip("earn_rate_high:Q", title="95% interval to", format=".1%"),
        alt.Tooltip("judged:N", title=f"offered {min_offers}+ times (judged)"),
    ]
    height = alt.Step(16)
    spent = (
        alt.Chart(top)
        .mark_bar(opacity=0.85)
        .encode(
            x=alt.X(
                "approx_tokens_spent:Q",
                title="approx tokens spent offering it (estimate)",
                axis=_SHORT_AXIS,
            ),
            y=y,
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=200, height=height)
    )
    rate_top = max(1.0, _largest_float(top["earn_rate"]), _largest_float(top["earn_rate_high"]))
    x = alt.X(
        "earn_rate:Q",
        title="earn rate (uses per offer), 95% interval",
        axis=alt.Axis(format="%", tickCount=5),
        scale=alt.Scale(domain=[0, rate_top], nice=False),
    )
    base = alt.Chart(top)
    y = alt.Y("id:N", title=None, sort=order, axis=None)  # the bars' labels name the rows
    layers: list[Any] = [
        base.transform_filter("isValid(datum.earn_rate_low)")
        .mark_rule(strokeWidth=2, opacity=0.5)
        .encode(x="earn_rate_low:Q", x2="earn_rate_high:Q", y=y, color=colour),
        base.mark_point(filled=True, size=60, opacity=0.9).encode(
            x=x, y=y, color=colour, tooltip=tooltip
        ),
        alt.Chart(pl.DataFrame({"floor": [GATE_FLOOR]}))
        .mark_rule(strokeDash=[4, 4], color="#999")
        .encode(x="floor:Q"),
    ]
    if top["never_used"].any():  # an empty layer would warn of an infinite extent
        layers.insert(
            2,
            base.transform_filter(alt.datum.never_used)
            .mark_point(filled=False, size=150, color="#d62728", strokeWidth=2)
            .encode(x=x, y=y, tooltip=tooltip),
        )
    rates = alt.LayerChart(layer=layers).properties(width=240, height=height)
    idle = never_used(data)
    listed: alt.Chart = (
        alt.Chart(idle.head(never_used_shown))
        .mark_bar(color="#d62728", opacity=0.8)
        .encode(
            x=alt.X(
                "approx_tokens_spent:Q",
                title="approx tokens spent, never used",
                axis=_SHORT_AXIS,
            ),
            y=alt.Y("id:N", title=None, sort="-x", axis=alt.Axis(labelLimit=140)),
            tooltip=tooltip,
        )
        .properties(
            width=150,
            height=alt.Step(16),
            title=alt.TitleParams(
                [
                    f"Never used ({idle.height:,} piece(s)",
                    f"offered {min_offers}+ times)"
                    + (
                        f": the {never_used_shown} costing most"
                        if idle.height > never_used_shown
                        else ""
                    ),
                ],
                fontSize=12,
                anchor="start",
            ),
        )
    )
    if not idle.height:
        listed = (
            alt.Chart(
                pl.DataFrame({"text": [f"Every piece offered {min_offers}+ times", "was used."]})
            )
            .mark_text(align="left", fontSize=12)
            .encode(text="text:N", y=alt.Y("text:N", axis=None, sort=None))
            .properties(width=150, height=40)
        )
    return alt.hconcat(spent, rates, listed, spacing=24).properties(
        title=_title(
            "Which context pieces earn their tokens?",
            [
                "Left: what each piece cost, offered to every model call that carried it. "
                "Middle: how often it was used when offered (line: 95% interval;",
                "dashed: the 5% floor below which agentfootprint's gates would demote it; red "
                "ring: never used). Beside: the never-used pieces that cost most.",
                _pooled(top, rest),
            ],
        ),
    )


def _pooled(top: pl.DataFrame, rest: pl.DataFrame) -> str:
    """The subtitle's sentence on what the chart does not draw."""
    if not rest.height:
        return f"All {top.height:,} piece(s) offered, most tokens spent first."
    spent = _largest(rest.select(pl.col("approx_tokens_spent").sum()).to_series())
    offered = _largest(rest.select(pl.col("offered").sum()).to_series())
    used = _largest(rest.select(pl.col("used").sum()).to_series())
    pooled = f"{used / offered:.1%}" if offered else "none offered"
    return (
        f"The {top.height:,} pieces spending the most tokens, of {top.height + rest.height:,}; "
        f"the other {rest.height:,} spent ~{spent:,} approx tokens, used {used:,} times in "
        f"{offered:,} offers ({pooled}). The ledger below lists them, worst first."
    )


#: Outcome labels the outcome chart draws a facet for, those the most runs carried.
LABELS_SHOWN = 6
#: Facets a row of the outcome chart holds: three, with their counts, fit the report's page.
OUTCOME_FACETS_PER_ROW = 3


def _facet_columns(labels: int) -> int:
    """Facets per row for ``labels`` facets: rows of at most
    :data:`OUTCOME_FACETS_PER_ROW`, as even as they divide (four labels: two rows of two).

    >>> [_facet_columns(n) for n in range(1, 8)]
    [1, 2, 3, 2, 3, 3, 3]
    """
    rows = max(1, -(-labels // OUTCOME_FACETS_PER_ROW))
    return max(1, -(-labels // rows))


def outcome_chart(
    association: pl.DataFrame,
    *,
    labels: list[str] | None = None,
    pieces: int = 40,
    labels_shown: int = LABELS_SHOWN,
    label_count: int | None = None,
) -> alt.FacetChart:
    """Per label, the share of runs offering each piece that carried it, against the base rate.

    ``association`` is :func:`~contextledger.ledger.stats.outcome_association`.
    Bars run from the base rate (all labelled runs) to the piece's share; the text
    gives the counts. It shows association, not cause. Only the ``pieces`` offered in
    the most labelled runs are drawn, in a facet for each of the ``labels_shown`` labels
    the most runs carried (a labels file of ids or free text has thousands: the
    subtitle says how many are left out; ``label_count``, when ``association`` holds
    only those, says how many there were).

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.tables.sidecars import load_outcomes
    >>> from contextledger.ledger.stats import outcome_association
    >>> tables = read_runs("data/sample").with_outcomes(load_outcomes("data/sample-outcomes.csv"))
    >>> outcome_chart(outcome_association(tables)).to_dict()["facet"]["field"]
    'label'
    """
    data = association
    if labels is not None:
        data = data.filter(pl.col("label").is_in(labels))
    # A direction from counts, not from two rounded shares: 3 of 5 against a base rate
    # of 3 in 5 is "as often", though 0.6 < 0.6000000000000001.
    ahead = pl.col("runs_offered_with_label") * pl.col("runs_labelled") - pl.col(
        "runs_labelled_with_label"
    ) * pl.col("runs_offered")
    data = data.with_columns(
        counts=pl.format(
            "{} of {}", _thousands("runs_offered_with_label"), _thousands("runs_offered")
        ),
        direction=pl.when(ahead > 0)
        .then(pl.lit("more often than the base rate"))
        .when(ahead < 0)
        .then(pl.lit("less often than the base rate"))
        .otherwise(pl.lit("as often as the base rate")),
    )
    by_runs = (
        data.group_by("label")
        .agg(pl.col("runs_labelled_with_label").max())
        .sort("runs_labelled_with_label", "label", descending=[True, False])["label"]
    )
    facets = by_runs.head(labels_shown).to_list()
    every_label = max(by_runs.len(), label_count or 0)
    data = data.filter(pl.col("label").is_in(facets))
    order = (
        data.group_by("id", maintain_order=True)
        .agg(pl.col("runs_offered").max())
        .sort("runs_offered", "id", descending=[True, False])["id"]
        .to_list()
    )
    shown = order[:pieces]
    data = data.filter(pl.col("id").is_in(shown))
    y = alt.Y("id:N", title="piece", sort=shown)
    tooltip = [
        alt.Tooltip("id:N", title="piece"),
        alt.Tooltip("kind:N"),
        alt.Tooltip("label:N"),
        alt.Tooltip("counts:N", title="labelled runs that offered it, with the label"),
        alt.Tooltip("share_with_label:Q", title="share with the label", format=".0%"),
        alt.Tooltip("base_rate:Q", title="base rate (all labelled runs)", format=".0%"),
    ]
    colours = alt.Scale(
        domain=[
            "more often than the base rate",
            "less often than the base rate",
            "as often as the base rate",
        ],
        range=["#2166ac", "#b2182b", "#999999"],
    )
    base = alt.Chart()
    bars = base.mark_bar(height=8).encode(
        x=alt.X(
            "base_rate:Q",
            title="share of runs carrying the label",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        x2="share_with_label:Q",
        y=y,
        color=alt.Color("direction:N", title="its runs carried the label", scale=colours),
        tooltip=tooltip,
    )
    dots = base.mark_point(filled=True, size=40, color="#333").encode(
        x="share_with_label:Q", y=y, tooltip=tooltip
    )
    base_rate = base.mark_tick(color="#333", thickness=2, size=14).encode(
        x="base_rate:Q", y=y, tooltip=tooltip
    )
    counts = base.mark_text(align="left", dx=6, fontSize=9, color="#444").encode(
        x=alt.value(205), y=y, text="counts:N"
    )
    return (
        alt.layer(bars, base_rate, dots, counts, data=data)
        .properties(width=200, height=alt.Step(14))
        .facet(
            facet=alt.Facet("label:N", title="outcome label"),
            columns=_facet_columns(data["label"].n_unique()),
        )
        .properties(
            title=_title(
                "Which pieces turn up in runs with each outcome? (association, not cause)",
                [
                    "Dot: share of the labelled runs offering the piece that carried the label; "
                    "tick: the base rate over all labelled runs.",
                    "Counts: labelled runs that offered it and carried the label, of those that "
                    "offered it. A piece offered in runs that went well did not make them go well.",
                    *(
                        [
                            f"The {len(shown)} of {len(order):,} pieces offered in most "
                            "labelled runs."
                        ]
                        if len(shown) < len(order)
                        else []
                    ),
                    *(
                        [
                            f"The {len(facets)} of {every_label:,} labels the most runs "
                            "carried; contextledger outcomes lists them all."
                        ]
                        if len(facets) < every_label
                        else []
                    ),
                ],
            )
        )
    )


def gate_touched(pieces: pl.DataFrame) -> pl.DataFrame:
    """The pieces the gates saved tokens on or cost uses of: what :func:`gate_chart` draws."""
    return pieces.filter(
        (pl.col("approx_tokens_saved") + pl.col("uses_lost") + pl.col("uses_at_risk")) > 0
    )


def _most_touched(touched: pl.DataFrame, most: int) -> pl.DataFrame:
    """At most ``most`` of the pieces the gates touched: those saving the most tokens
    and those losing the most uses, half each (the points a reader looks for)."""
    if touched.height <= most:
        return touched
    saving = touched.sort("approx_tokens_saved", "uses_lost", "id", descending=[True, True, False])
    losing = touched.sort("uses_lost", "approx_tokens_saved", "id", descending=[True, True, False])
    ids = list(dict.fromkeys([*saving["id"].head(most // 2), *losing["id"].head(most)]))[:most]
    return touched.filter(pl.col("id").is_in(ids))


#: Pieces the gate chart draws at most: those saving most and those losing most uses.
GATE_POINTS = 150


def legend_counts(most: int, steps: int = 4) -> list[int]:
    """Round counts from the smallest drawn (1) to ``most``, for a size legend: every
    point drawn left at least one offer out, so a legend entry for 0 would be no point's.

    >>> legend_counts(14_000), legend_counts(615), legend_counts(3), legend_counts(1)
    ([1, 5000, 10000, 14000], [1, 200, 400, 615], [1, 2, 3], [1])
    """
    step = 10 ** max(len(str(max(most // steps, 1))) - 1, 0)
    for factor in (1, 2, 5, 10):
        if most // (step * factor) <= steps - 1:
            step *= factor
            break
    rounds = [count for count in range(step, most, step) if most - count >= step / 2]
    return sorted({1, *rounds, most})


def gate_chart(
    pieces: pl.DataFrame, *, width: int = 640, height: int = 320, most: int = GATE_POINTS
) -> alt.LayerChart:
    """Per piece, approx tokens the ledger gates would have saved against the uses lost.

    ``pieces`` is the first frame :func:`~contextledger.ledger.gates.gate_what_if`
    returns; pieces the gates never touched are left out (the subtitle counts them).

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.gates import gate_what_if
    >>> pieces, _ = gate_what_if(read_runs("data/sample"))
    >>> gate_chart(pieces).to_dict()["layer"][0]["encoding"]["y"]["field"]
    'uses_lost'
    """
    every = gate_touched(pieces)
    touched = _most_touched(every, most).select(
        "kind",
        "id",
        "offered",
        "offers_gated",
        "approx_tokens_spent",
        "approx_tokens_saved",
        "used",
        "uses_lost",
        "uses_at_risk",
    )
    x_top = max(_largest(touched["approx_tokens_saved"]), 1) * 1.05
    y_top = max(_largest(touched["uses_lost"]), 1) * 1.1
    # the size scale below: area 40 to 500 square pixels over 0 to the most offers left out
    most_gated = max(_largest(touched["offers_gated"]), 1)
    area = 40 + pl.col("offers_gated") / most_gated * 460
    placed = place_labels(
        touched.with_columns(radius=(area / math.pi).sqrt()),
        "approx_tokens_saved",
        "uses_lost",
        (x_top, y_top),
        (width, height),
        radius="radius",
    )
    x = alt.X(
        "approx_tokens_saved:Q",
        title="approx tokens the gates would have saved",
        scale=alt.Scale(domain=[0, x_top], nice=False),
    )
    y = alt.Y(
        "uses_lost:Q",
        title="uses lost (calls or answer credit the piece would have missed)",
        axis=alt.Axis(tickMinStep=1),
        scale=alt.Scale(domain=[0, y_top], nice=False),
    )
    base = alt.Chart(touched)
    points = base.mark_point(filled=True, opacity=0.85).encode(
        x=x,
        y=y,
        size=alt.Size(
            "offers_gated:Q",
            title="offers left out",
            scale=alt.Scale(domain=[0, most_gated], range=[40, 500]),
            legend=alt.Legend(values=legend_counts(most_gated)),
        ),
        color=alt.Color("kind:N", title="kind", scale=_kind_scale(touched["kind"])),
        tooltip=[
            alt.Tooltip("id:N", title="piece"),
            alt.Tooltip("kind:N"),
            alt.Tooltip("offered:Q", title="offered"),
            alt.Tooltip("offers_gated:Q", title="offers left out"),
            alt.Tooltip("approx_tokens_saved:Q", title="approx tokens saved", format=","),
            alt.Tooltip("approx_tokens_spent:Q", title="approx tokens spent", format=","),
            alt.Tooltip("used:Q", title="uses recorded"),
            alt.Tooltip("uses_lost:Q", title="uses lost"),
            alt.Tooltip("uses_at_risk:Q", title="uses at risk"),
        ],
    )
    colour = alt.Color("kind:N", scale=_kind_scale(touched["kind"]))
    labels = [
        alt.Chart(placed.filter(pl.col("align") == align))
        .mark_text(align=align, baseline="middle", fontSize=10)
        .encode(x="label_x:Q", y="label_y:Q", text="id:N", color=colour)
        for align in placed["align"].unique(maintain_order=True)
    ]
    untouched = pieces.height - every.height
    drawn = (
        f"{touched.height:,} of the {every.height:,} pieces the gates touched are drawn: "
        "those saving most or losing most uses."
        if touched.height < every.height
        else ""
    )
    return alt.LayerChart(layer=[points, *labels]).properties(
        width=width,
        height=height,
        title=_title(
            "What would agentfootprint's ledger gates have cost?",
            [
                "Each run judged by the ledger of the runs before it (min 5 offers, floor 5%, "
                "parole every 10th demotion). Right = tokens saved; up = uses lost.",
                f"Named: the pieces saving most and losing most uses ({placed.height} of "
                f"{touched.height}; hover a point for the others). {untouched:,} piece(s) "
                "the gates never touched are not drawn.",
                *([drawn] if drawn else []),
            ],
        ),
    )
