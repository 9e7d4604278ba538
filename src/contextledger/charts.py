"""Altair charts of the package's frames: what a user shares after exploring.

Each function takes a frame the package already computes (the ledger rows, the
outcome association, the gate and window what-ifs, a replayed window's
timeline) and returns a chart with a title and axis titles a newcomer can read.
:func:`save_chart` writes one as PNG or SVG for slides (vl-convert, no browser).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

#: Colours per piece kind, the same in every chart.
KIND_COLOURS = {"tool": "#4c78a8", "injection": "#f58518", "skill": "#54a24b"}
#: Colours per window-timeline cell status, in legend order.
TIMELINE_COLOURS = {
    "kept": "#c7e9c0",
    "pinned": "#3182bd",
    "refused": "#fdae6b",
    "dropped": "#de2d26",
    "dropped earlier": "#f0f0f0",
}
#: agentfootprint's gate floor: a judged piece earning less than this is demoted.
GATE_FLOOR = 0.05

#: Pieces the earn-rate chart names, those spending the most tokens; the rest are pooled
#: into one line of its subtitle, so 10,000 pieces draw as few marks as 40.
PIECES_SHOWN = 25
#: Never-used pieces the earn-rate chart lists beside, most expensive first.
NEVER_USED_SHOWN = 12

#: A count axis with short labels (2k, 40M) and a plain 0, whole numbers only.
_SHORT_AXIS = alt.Axis(
    tickCount=4, tickMinStep=1, labelExpr="datum.value == 0 ? '0' : format(datum.value, '~s')"
)


def _kind_scale(kinds: pl.Series) -> alt.Scale:
    """The kind colours, the legend naming only the kinds drawn (runs recorded as
    traces offer tools only: a legend of skills and injections would mislead)."""
    present = set(kinds.to_list())
    domain = [kind for kind in KIND_COLOURS if kind in present] or list(KIND_COLOURS)
    return alt.Scale(domain=domain, range=[KIND_COLOURS[kind] for kind in domain])


def draw_offline() -> None:
    """Draw Altair charts in Jupyter as SVG made in the kernel (vl-convert, as the
    report's exports): Altair's default renderer loads Vega from a public CDN, so on an
    offline or locked-down machine, and in a notebook exported with ``jupyter nbconvert
    --to html``, every chart showed "Error loading script". Importing this module calls
    it unless a renderer was already chosen; ``alt.renderers.enable("default")`` brings
    back the interactive (online) one.

    >>> draw_offline()
    >>> alt.renderers.active
    'svg'
    """
    alt.renderers.enable("svg")


if alt.renderers.active == "default":
    draw_offline()


def _title(text: str, subtitle: str | list[str]) -> alt.TitleParams:
    return alt.TitleParams(
        text,
        subtitle=subtitle,
        anchor="start",
        fontSize=15,
        subtitleFontSize=12,
        subtitleColor="#555",
    )


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


def _largest_float(values: pl.Series) -> float:
    """The largest of ``values``, nulls and NaN left out (0 when there is none)."""
    found = pl.DataFrame({"v": values}).select(pl.col("v").fill_nan(None).max()).item()
    return float(found or 0.0)


def _largest(values: pl.Series) -> int:
    """The largest of ``values`` (0 when there is none)."""
    return int(pl.DataFrame({"v": values}).select(pl.col("v").max()).item() or 0)


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

    >>> from contextledger.tables.build import read_runs, load_outcomes
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
        counts=pl.format("{} of {}", "runs_offered_with_label", "runs_offered"),
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
                            "carried; `contextledger outcomes` lists them all."
                        ]
                        if len(facets) < every_label
                        else []
                    ),
                ],
            )
        )
    )


#: Colours of a policy's row in the window-policy charts: the one the findings name
#: stands out, the baseline (keeping everything) is grey.
ROLE_COLOURS = {
    "named in the findings": "#e45756",
    "keeps everything": "#9d9d9d",
    "compared": "#4c78a8",
}


def policy_chart(
    per_run: pl.DataFrame, *, named: str | None = None, baseline: str = "none"
) -> alt.HConcatChart:
    """Per window policy, one row, cheapest first: the input tokens it would have sent,
    the facts (or, with no fact declared, the tool results) reaching the answer turn,
    and whether a provider would accept its windows.

    ``per_run`` is the what-if's per-(run, policy) frame
    (:func:`contextledger.jobs.whatif.whatif`), optionally with a ``wire_violations``
    column (:func:`contextledger.window.audit.wire_check`). Each number is printed
    beside its bar, so the findings' recommendation (``named``, drawn in its own
    colour beside ``baseline``) can be checked against the chart row by row.

    >>> from contextledger.jobs.whatif import whatif
    >>> per_run, _ = whatif("data/sample/s0001-fact-bench.json.gz", ["none", "sliding:keep=6"])
    >>> policy_chart(per_run).to_dict()["hconcat"][0]["layer"][0]["encoding"]["x"]["field"]
    'input_tokens'
    """
    data = per_run
    if "wire_violations" not in data.columns:
        data = data.with_columns(wire_violations=pl.lit(0, pl.Int64))
    metrics = [
        "input_tokens",
        "input_tokens_estimated_calls",
        "model_calls",
        "answer_facts_verbatim",
        "facts_declared",
        "answer_results_verbatim",
        "results_dropped",
        "engaged_visits",
        "wire_violations",
    ]
    frame = data.group_by("policy", maintain_order=True).agg(
        pl.len().alias("runs"), *[pl.col(name).sum() for name in metrics]
    )
    declared = _largest(frame["facts_declared"])
    if declared:
        measure, measure_title = "answer_facts_verbatim", "facts reaching the answer turn"
        shown = pl.format("{} of {}", _thousands(measure), _thousands("facts_declared"))
        note = "A fact is a tool result the model (or your standings file) filed as 'fact'."
    else:
        measure, measure_title = "answer_results_verbatim", "tool results reaching the answer turn"
        shown = _thousands(measure)
        note = (
            "No result was filed as a fact (give --standings FILE to count facts): the "
            "right-hand bars count every tool result the answer turn still saw."
        )
    frame = frame.with_columns(
        measure_text=shown, **_wire_marks("wire_violations", "wire problem(s)")
    )
    tooltip = [
        alt.Tooltip("policy:N"),
        alt.Tooltip("runs:Q", format=","),
        alt.Tooltip("input_tokens:Q", title="input tokens", format=","),
        alt.Tooltip("input_tokens_estimated_calls:Q", title="calls with estimated tokens"),
        alt.Tooltip("answer_facts_verbatim:Q", title="facts in the answer window", format=","),
        alt.Tooltip("facts_declared:Q", title="results the model filed as facts", format=","),
        alt.Tooltip(
            "answer_results_verbatim:Q", title="tool results in the answer window", format=","
        ),
        alt.Tooltip("results_dropped:Q", title="tool results dropped", format=","),
        alt.Tooltip("engaged_visits:Q", title="visits where the window engaged", format=","),
        alt.Tooltip("wire_violations:Q", title="windows a provider would reject", format=","),
    ]
    return _ranked(
        frame,
        named=named,
        baseline=baseline,
        cost=("input_tokens", "input tokens sent over all model calls", None),
        measure=(measure, measure_title, "measure_text"),
        tooltip=tooltip,
        title=_title(
            "What would each window policy have kept for the answer, and at what cost?",
            [
                "Replayed on the recorded runs, one row per policy, fewest input tokens first "
                "(recorded; estimated where the replayed window differs).",
                note,
            ],
        ),
    )


def _thousands(column: str | pl.Expr) -> pl.Expr:
    """Whole numbers as text with thousands separators (1,234,567), for the labels."""
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.map_elements(lambda value: f"{value:,}", return_dtype=pl.String)


def _wire_marks(column: str, counted: str) -> dict[str, pl.Expr]:
    """The policy charts' wire columns: ``wire`` (rejected or valid) and ``flag`` (the
    text in the wire column: ``valid`` or ``N counted``)."""
    rejected = pl.col(column) > 0
    return {
        "wire": pl.when(rejected)
        .then(pl.lit("rejected on the wire"))
        .otherwise(pl.lit("valid on the wire")),
        "flag": pl.when(rejected)
        .then(pl.format(f"✗ {{}} {counted}", _thousands(column)))
        .otherwise(pl.lit("✓ valid")),
    }


def _ranked(
    frame: pl.DataFrame,
    *,
    named: str | None,
    baseline: str,
    cost: tuple[str, str, str | None],
    measure: tuple[str, str, str] | None,
    tooltip: list[alt.Tooltip],
    title: alt.TitleParams,
) -> alt.HConcatChart:
    """One row per policy, cheapest ``cost`` first, its number printed at its bar's end;
    the ``measure`` beside it the same way; then the wire check in words. ``cost`` is
    (column, axis title, column of a second cost drawn as a tick, or None)."""
    column, cost_title, tick = cost
    frame = frame.sort(column, "policy", nulls_last=True, maintain_order=True).with_columns(
        role=pl.when(pl.col("policy") == pl.lit(named, pl.String))
        .then(pl.lit("named in the findings"))
        .when(pl.col("policy") == baseline)
        .then(pl.lit("keeps everything"))
        .otherwise(pl.lit("compared")),
        cost_text=_thousands(pl.col(column).round(0).cast(pl.Int64)),
        text_at=pl.max_horizontal(column, tick) if tick else pl.col(column),
    )
    order = frame["policy"].to_list()
    roles = [role for role in ROLE_COLOURS if role in set(frame["role"])]
    colour = alt.Color(
        "role:N",
        title="policy",
        scale=alt.Scale(domain=roles, range=[ROLE_COLOURS[r] for r in roles]),
        legend=alt.Legend(orient="bottom", direction="horizontal"),
    )
    y = alt.Y("policy:N", title=None, sort=order, axis=alt.Axis(labelLimit=420))
    hidden = alt.Y("policy:N", title=None, sort=order, axis=None)
    base = alt.Chart(frame)
    cost_top = max(_largest_float(frame[column]), _largest_float(frame[tick]) if tick else 0, 1)
    x = alt.X(
        f"{column}:Q",
        title=cost_title,
        axis=_SHORT_AXIS,
        scale=alt.Scale(domain=[0, cost_top * 1.3], nice=False),  # room for the numbers
    )
    cost_layers: list[Any] = [
        base.mark_bar(height=12).encode(x=x, y=y, color=colour, tooltip=tooltip),
        base.mark_text(align="left", dx=5, fontSize=10, color="#333").encode(
            x="text_at:Q", y=y, text="cost_text:N"
        ),
    ]
    if tick:
        cost_layers.insert(
            1,
            base.mark_tick(color="#333", thickness=2, size=14).encode(
                x=f"{tick}:Q", y=y, tooltip=tooltip
            ),
        )
    columns: list[Any] = [alt.LayerChart(layer=cost_layers).properties(width=260)]
    if measure is not None:
        field, measure_title, text = measure
        top = max(_largest_float(frame[field]), 1)
        columns.append(
            alt.LayerChart(
                layer=[
                    base.mark_bar(height=12).encode(
                        x=alt.X(
                            f"{field}:Q",
                            title=measure_title,
                            axis=_SHORT_AXIS,
                            scale=alt.Scale(domain=[0, top * 1.45], nice=False),
                        ),
                        y=hidden,
                        color=colour,
                        tooltip=tooltip,
                    ),
                    base.mark_text(align="left", dx=4, fontSize=10, color="#333").encode(
                        x=f"{field}:Q", y=hidden, text=f"{text}:N"
                    ),
                ]
            ).properties(width=200)
        )
    columns.append(
        base.mark_text(align="left", fontSize=11)
        .encode(
            x=alt.value(0),
            y=hidden,
            text="flag:N",
            color=alt.condition(  # a fixed colour: the role legend stays the only one
                alt.datum.wire == "rejected on the wire", alt.value("#d62728"), alt.value("#1a7f37")
            ),
            tooltip=tooltip,
        )
        .properties(width=150, title=alt.TitleParams("provider check", fontSize=11))
    )
    return alt.hconcat(*columns, spacing=12).properties(title=title).configure_view(stroke=None)


def compare_chart(table: pl.DataFrame, *, named: str | None = None) -> alt.HConcatChart:
    """Per policy, one row, cheapest first: the input cost with a prompt cache (bar) and
    without one (tick), the facts reaching the answer, and the wire check in words.

    ``table`` is :func:`contextledger.jobs.compare.comparison_table`
    (``Comparison.table``). Fifteen policies told apart by colour alone cannot be read,
    nor eight points on one spot: each row is named on its axis and its numbers are
    printed, so the findings' policy (``named``) can be checked against it.

    >>> from contextledger.jobs.compare import compare
    >>> found = compare("data/sample/s0003-loop.json.gz", ["none", "sliding:keep=2"])
    >>> compare_chart(found.table).to_dict()["hconcat"][0]["layer"][0]["encoding"]["x"]["field"]
    'cost_with_cache'
    """
    frame = table.with_columns(
        facts_text=pl.format(
            "{} of {}", _thousands("facts_at_answer"), _thousands("facts_declared")
        ),
        **_wire_marks("wire_problems", "wire problem(s)"),
    )
    declared = _largest(frame["facts_declared"])
    tooltip = [
        alt.Tooltip("policy:N"),
        alt.Tooltip("runs:Q", format=","),
        alt.Tooltip("facts_at_answer:Q", title="facts at the answer", format=","),
        alt.Tooltip("facts_declared:Q", title="facts filed", format=","),
        alt.Tooltip("input_tokens:Q", title="input tokens", format=","),
        alt.Tooltip("cache_invalidations:Q", title="prefix-cache invalidations", format=","),
        alt.Tooltip("cost_without_cache:Q", title="cost without a cache", format=",.0f"),
        alt.Tooltip("cost_with_cache:Q", title="cost with a cache", format=",.0f"),
        alt.Tooltip("wire_problems:Q", title="windows a provider would reject", format=","),
        alt.Tooltip("first_offending_call:N", title="first offending call"),
    ]
    return _ranked(
        frame,
        named=named,
        baseline="none",
        cost=(
            "cost_with_cache",
            "input cost with a prompt cache (input-token units)",
            "cost_without_cache",
        ),
        measure=("facts_at_answer", "facts reaching the answer turn", "facts_text")
        if declared
        else None,
        tooltip=tooltip,
        title=_title(
            "What does each window policy cost once a prompt cache is counted?",
            [
                "One row per policy, cheapest first. Bar: the input cost with a cache (reads "
                "and writes priced as multiples of the input price); tick: without one.",
                "A policy that trims the window breaks the cached prefix: it may send fewer "
                "tokens and still cost more."
                + (
                    ""
                    if declared
                    else " No result was filed as a fact: facts kept are not compared."
                ),
            ],
        ),
    )


#: Model calls and turns the timeline draws at most (the last ones: the answer's window).
TIMELINE_CALLS = 60
TIMELINE_TURNS = 80


def timeline_chart(cells: pl.DataFrame) -> alt.Chart:
    """One run's window, visit by visit: turns as rows, model calls as columns.

    ``cells`` is :func:`contextledger.report.frames.timeline_frame`: one row per
    turn and call, with ``status`` (kept, pinned, refused, dropped, dropped
    earlier) and the ``reason`` shown on hover. A long run draws its last
    :data:`TIMELINE_CALLS` calls and :data:`TIMELINE_TURNS` turns, and says so.

    >>> from contextledger.report.frames import timeline_frame
    >>> from contextledger.jobs.whatif import read_inputs
    >>> stream = read_inputs("data/sample/s0001-fact-bench.json.gz").streams[0]
    >>> timeline_chart(timeline_frame(stream, "sliding:keep=6")).to_dict()["mark"]["type"]
    'rect'
    """
    data = cells.select(
        "run_id",
        "policy",
        "turn_index",
        "turn_label",
        "call",
        "iteration",
        "status",
        "reason",
        "turn_chars",
    )
    run = data["run_id"][0] if data.height else "(no run)"
    policy = data["policy"][0] if data.height else ""
    calls = data["call"].unique().sort()
    turns = data["turn_index"].unique().sort()
    data = data.filter(
        pl.col("call").is_in(calls.tail(TIMELINE_CALLS).implode())
        & pl.col("turn_index").is_in(turns.tail(TIMELINE_TURNS).implode())
    )
    cut = [
        f"The last {TIMELINE_CALLS} of its {calls.len():,} model calls"
        if calls.len() > TIMELINE_CALLS
        else "",
        f"the last {TIMELINE_TURNS} of its {turns.len():,} turns"
        if turns.len() > TIMELINE_TURNS
        else "",
    ]
    shown = " and ".join(part for part in cut if part)
    order = data.sort("turn_index")["turn_label"].unique(maintain_order=True).to_list()
    return (
        alt.Chart(data)
        .mark_rect(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X(
                "call:O",
                title="model call (the last one writes the answer)",
                axis=alt.Axis(labelAngle=0),
            ),
            y=alt.Y("turn_label:N", title="turn of the conversation", sort=order),
            color=alt.Color(
                "status:N",
                title="at this call the turn was",
                scale=alt.Scale(
                    domain=list(TIMELINE_COLOURS), range=list(TIMELINE_COLOURS.values())
                ),
            ),
            tooltip=[
                alt.Tooltip("turn_label:N", title="turn"),
                alt.Tooltip("call:O", title="model call"),
                alt.Tooltip("status:N"),
                alt.Tooltip("reason:N", title="why"),
                alt.Tooltip("turn_chars:Q", title="turn size (chars)", format=","),
            ],
        )
        .properties(
            width=alt.Step(22),
            height=alt.Step(16),
            title=_title(
                f"How the window treated each turn of {run}",
                [
                    f"Replayed under {policy}: before each model call the window stage keeps, "
                    "pins or drops whole turns. Hover a cell for the reason.",
                    *([f"{shown[0].upper()}{shown[1:]} are drawn."] if shown else []),
                ],
            ),
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


def place_labels(
    points: pl.DataFrame,
    x: str,
    y: str,
    tops: tuple[float, float],
    size: tuple[int, int],
    *,
    radius: str | None = None,
    most: int = 8,
) -> pl.DataFrame:
    """The points worth naming, each with where its label goes so that it overlaps no
    other label and stays inside the plot: ``label_x``, ``label_y`` (in the axes' units)
    and ``align`` (``left``: the text starts there). Points are taken most important
    first (largest ``x``, then largest ``y``, alternately), at most ``most``; one whose
    label fits nowhere is left to its tooltip; no label covers a point. ``tops`` are
    the axes' upper ends (both start at 0), ``size`` the plot's width and height in
    pixels, ``radius`` a column of each point's radius in pixels.

    >>> frame = pl.DataFrame({"id": ["alpha", "beta", "c"], "x": [10, 10, 1], "y": [5, 5, 0]})
    >>> placed = place_labels(frame, "x", "y", (11, 6), (200, 100))
    >>> placed.select("id", "align", pl.col("label_y").round(2)).rows()
    [('alpha', 'right', 5.0), ('beta', 'right', 5.78), ('c', 'left', 0.78)]
    """
    (x_top, y_top), (width, height) = tops, size
    by_x = points.sort([x, y], descending=True, maintain_order=True)["id"].to_list()
    by_y = points.sort([y, x], descending=True, maintain_order=True)["id"].to_list()
    order = list(dict.fromkeys(i for pair in itertools.zip_longest(by_x, by_y) for i in pair))
    where = {row["id"]: row for row in points.iter_rows(named=True)}

    def centre(row: dict[str, Any]) -> tuple[float, float, float]:
        r = row[radius] if radius else 4.0
        return row[x] / x_top * width, height - row[y] / y_top * height, r

    marks = [centre(row) for row in where.values()]
    taken = [(px - r, py - r, px + r, py + r) for px, py, r in marks]  # no label on a point
    chosen: list[dict[str, Any]] = []
    for name in order:
        if name is None or len(chosen) >= most:
            continue
        row = where[name]
        px, py, r = centre(row)
        gap = r + 4
        wide = 6.0 * len(str(name)) + 2
        for align, dy in (("left", 0), ("right", 0), ("left", -13), ("left", 13),
                          ("right", -13), ("right", 13)):  # fmt: skip
            start = px + gap if align == "left" else px - gap
            left = start if align == "left" else start - wide
            box = (left, py + dy - 6, left + wide, py + dy + 6)
            inside = box[0] >= 0 and box[2] <= width and box[1] >= -4 and box[3] <= height + 4
            if inside and not any(_overlap(box, other) for other in taken):
                taken.append(box)
                at = {"label_x": start / width * x_top, "label_y": (height - py - dy) / height}
                chosen.append({**row, **at, "align": align})
                chosen[-1]["label_y"] *= y_top
                break
    extra = {"label_x": pl.Float64, "label_y": pl.Float64, "align": pl.String}
    return pl.DataFrame(chosen, schema={**dict(points.schema), **extra})


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def save_chart(chart: alt.TopLevelMixin, path: str | Path, *, scale: float = 2.0) -> Path:
    """Write ``chart`` as PNG or SVG (by the file's suffix) for slides; no browser needed.

    >>> import tempfile
    >>> chart = alt.Chart(pl.DataFrame({"x": [1, 2]})).mark_point().encode(x="x:Q")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_chart(chart, f"{folder}/x.svg").read_text()[:4]
    '<svg'
    """
    path = Path(path)
    kind = path.suffix[1:]
    if kind not in ("svg", "png"):
        msg = f"{path}: save a chart as .png or .svg"
        raise ValueError(msg)
    path.write_bytes(chart_images(chart.to_dict(), (kind,), scale=scale)[kind])
    return path


def chart_images(
    spec: dict[str, Any], formats: Sequence[str], *, scale: float = 2.0
) -> dict[str, bytes]:
    """A chart's Vega-Lite ``spec`` drawn as each of ``formats`` (``svg``, ``png``).

    Vega lays the chart out once, as SVG; the PNG is that SVG rasterized (the bytes
    vl-convert's own PNG export gives, at half the cost).

    >>> spec = alt.Chart(pl.DataFrame({"x": [1]})).mark_point().encode(x="x:Q").to_dict()
    >>> sorted(chart_images(spec, ("png", "svg")))
    ['png', 'svg']
    """
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    if not formats:
        return {}
    svg = vlc.vegalite_to_svg(spec, vl_version=vl_version_for_vl_convert())
    out = {}
    for name in formats:
        if name == "svg":
            out[name] = svg.encode("utf-8")
        elif name == "png":
            out[name] = vlc.svg_to_png(svg, scale=scale)
        else:
            msg = f"a chart is drawn as svg or png, not {name!r}"
            raise ValueError(msg)
    return out
