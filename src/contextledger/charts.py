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

#: More pieces than this and the earn-rate chart draws them smaller and lighter.
CROWDED = 150

_KIND_SCALE = alt.Scale(domain=list(KIND_COLOURS), range=list(KIND_COLOURS.values()))


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


def earn_rate_chart(rows: pl.DataFrame, *, never_used_shown: int = 12) -> alt.HConcatChart:
    """Earn rate against approx tokens spent, one mark per piece, with its 95% interval.

    ``rows`` is :func:`~contextledger.ledger.stats.with_uncertainty` of the ledger
    rows. Size is how often the piece was offered, colour its kind; a red ring marks
    a piece never used, and the bars beside list the ``never_used_shown`` most
    expensive of those, so the pieces that cost and never earn stand out at once.

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.compute import compute_ledger
    >>> from contextledger.ledger.stats import with_uncertainty
    >>> rows = with_uncertainty(compute_ledger(read_runs("data/sample")).rows())
    >>> earn_rate_chart(rows).to_dict()["hconcat"][0]["layer"][1]["mark"]["type"]
    'point'
    """
    data = rows.select(
        "kind",
        "id",
        "offered",
        "used",
        "approx_tokens_spent",
        "earn_rate",
        "earn_rate_low",
        "earn_rate_high",
        "judged",
    ).with_columns(never_used=pl.col("used") == 0)
    x = alt.X(
        "approx_tokens_spent:Q",
        title="approx tokens spent offering the piece (estimate; log scale)",
        scale=alt.Scale(type="symlog", domain=[0, _decade_above(data["approx_tokens_spent"])]),
        axis=alt.Axis(
            values=_decades(data["approx_tokens_spent"]), labelExpr="format(datum.value, ',')"
        ),
    )
    y = alt.Y("earn_rate:Q", title="earn rate (uses per offer)", axis=alt.Axis(format="%"))
    colour = alt.Color(
        "kind:N", title="kind", scale=_KIND_SCALE, legend=alt.Legend(symbolOpacity=1)
    )
    tooltip = [
        alt.Tooltip("id:N", title="piece"),
        alt.Tooltip("kind:N"),
        alt.Tooltip("offered:Q", title="offered (model calls)"),
        alt.Tooltip("used:Q", title="used"),
        alt.Tooltip("approx_tokens_spent:Q", title="approx tokens spent", format=","),
        alt.Tooltip("earn_rate:Q", title="earn rate", format=".1%"),
        alt.Tooltip("earn_rate_low:Q", title="95% interval from", format=".1%"),
        alt.Tooltip("earn_rate_high:Q", title="95% interval to", format=".1%"),
        alt.Tooltip("judged:N", title="enough offers to judge"),
    ]
    base = alt.Chart(data)
    crowded = data.height > CROWDED  # hundreds of pieces: lighter bars, smaller dots
    interval = base.mark_rule(opacity=0.15 if crowded else 0.4, strokeWidth=2).encode(
        x=x, y="earn_rate_low:Q", y2="earn_rate_high:Q", color=colour
    )
    size = alt.Size(
        "offered:Q",
        title="offered (model calls)",
        scale=alt.Scale(range=[12, 300] if crowded else [30, 600]),
    )
    points = base.mark_point(filled=True, opacity=0.8, stroke="white", strokeWidth=0.5).encode(
        x=x, y=y, size=size, color=colour, tooltip=tooltip
    )
    rings = (
        base.transform_filter(alt.datum.never_used)
        .mark_point(filled=False, color="#d62728", strokeWidth=2)
        .encode(x=x, y=y, size=size, tooltip=tooltip)
    )
    floor = (
        alt.Chart(pl.DataFrame({"floor": [GATE_FLOOR]}))
        .mark_rule(strokeDash=[4, 4], color="#999")
        .encode(y="floor:Q")
    )
    idle = data.filter(pl.col("never_used")).sort("approx_tokens_spent", descending=True)
    # A layer or chart with no rows makes Vega warn of an infinite extent: leave it out.
    layers = [interval, points, rings, floor] if idle.height else [interval, points, floor]
    scatter = alt.LayerChart(layer=layers).properties(width=560, height=360)
    listed: alt.Chart = (
        alt.Chart(idle.head(never_used_shown))
        .mark_bar(color="#d62728", opacity=0.8)
        .encode(
            x=alt.X("approx_tokens_spent:Q", title="approx tokens spent, never used"),
            y=alt.Y("id:N", title=None, sort="-x"),
            tooltip=tooltip,
        )
        .properties(
            width=200,
            height=alt.Step(18),
            title=alt.TitleParams(
                f"Never used ({idle.height} piece(s))", fontSize=12, anchor="start"
            ),
        )
    )
    if not idle.height:
        listed = (
            alt.Chart(pl.DataFrame({"text": ["Every piece was used at least once."]}))
            .mark_text(align="left", fontSize=12)
            .encode(text="text:N")
            .properties(width=200, height=40)
        )
    return alt.hconcat(scatter, listed, spacing=40).properties(
        title=_title(
            "Which context pieces earn their tokens?",
            [
                "One dot per piece: right = more tokens spent offering it (each step ten times "
                "more), up = used more often when offered. Bars: 95% interval. Red rings: "
                "never used.",
                "Dashed line: the 5% floor below which agentfootprint's gates would demote "
                "a piece. Beside: the never-used pieces that cost most.",
            ],
        ),
    )


def _largest(values: pl.Series) -> int:
    """The largest of ``values`` (0 when there is none)."""
    return int(pl.DataFrame({"v": values}).select(pl.col("v").max()).item() or 0)


def _decade_above(values: pl.Series) -> int:
    """The power of ten at or above the largest of ``values`` (at least 10)."""
    top = max(_largest(values), 1)
    return int(10 ** max(1, math.ceil(math.log10(top))))


def _decades(values: pl.Series) -> list[int]:
    """Axis ticks for a symlog token axis: 0, then each power of ten from 10 to the top.

    >>> _decades(pl.Series([0, 36, 84_904]))
    [0, 10, 100, 1000, 10000, 100000]
    """
    top = _decade_above(values)
    return [0, *(10**power for power in range(1, round(math.log10(top)) + 1))]


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
    association: pl.DataFrame, *, labels: list[str] | None = None, pieces: int = 40
) -> alt.FacetChart:
    """Per label, the share of runs offering each piece that carried it, against the base rate.

    ``association`` is :func:`~contextledger.ledger.stats.outcome_association`.
    Bars run from the base rate (all labelled runs) to the piece's share; the text
    gives the counts. It shows association, not cause. Only the ``pieces`` offered in
    the most labelled runs are drawn.

    >>> from contextledger.tables.build import read_runs, load_outcomes
    >>> from contextledger.ledger.stats import outcome_association
    >>> tables = read_runs("data/sample").with_outcomes(load_outcomes("data/sample-outcomes.csv"))
    >>> outcome_chart(outcome_association(tables)).to_dict()["facet"]["field"]
    'label'
    """
    data = association
    if labels is not None:
        data = data.filter(pl.col("label").is_in(labels))
    data = data.with_columns(
        counts=pl.format("{} of {}", "runs_offered_with_label", "runs_offered"),
        direction=pl.when(pl.col("share_minus_base") > 0)
        .then(pl.lit("more often than the base rate"))
        .when(pl.col("share_minus_base") < 0)
        .then(pl.lit("less often than the base rate"))
        .otherwise(pl.lit("as often as the base rate")),
    )
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
                        [f"The {len(shown)} of {len(order)} pieces offered in most labelled runs."]
                        if len(shown) < len(order)
                        else []
                    ),
                ],
            )
        )
    )


def policy_chart(per_run: pl.DataFrame, *, per_run_points: bool = False) -> alt.LayerChart:
    """Facts reaching the answer turn against input tokens, one point per window policy.

    ``per_run`` is the what-if's per-(run, policy) frame
    (:func:`contextledger.jobs.whatif.whatif`), optionally with a
    ``wire_violations`` column (:func:`contextledger.window.audit.wire_check`):
    a policy whose windows a provider would reject is drawn as a red cross and named.
    ``per_run_points`` draws one point per run and policy instead.

    >>> from contextledger.jobs.whatif import whatif
    >>> per_run, _ = whatif("data/sample/s0001-fact-bench.json.gz", ["none", "sliding:keep=6"])
    >>> policy_chart(per_run).to_dict()["layer"][0]["encoding"]["x"]["field"]
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
    if per_run_points:
        frame = data.select("run_id", "policy", *metrics)
    else:
        frame = data.group_by("policy", maintain_order=True).agg(
            pl.len().alias("runs"),
            pl.col("input_tokens").null_count().alias("runs_without_tokens"),
            *[pl.col(name).sum() for name in metrics],
        )
    frame = frame.with_columns(**_wire_marks("wire_violations", "wire violation(s)"))
    x = alt.X(
        "input_tokens:Q",
        title="input tokens sent over all model calls (recorded; estimated where the window "
        "differs)",
        scale=alt.Scale(zero=False, nice=True),
    )
    y = alt.Y(
        "answer_facts_verbatim:Q",
        title="facts reaching the answer turn verbatim",
        scale=alt.Scale(zero=True, nice=True),
        axis=alt.Axis(tickMinStep=1),
    )
    tooltip = [alt.Tooltip("policy:N")]
    if per_run_points:
        tooltip.append(alt.Tooltip("run_id:N", title="run"))
    else:
        tooltip.append(alt.Tooltip("runs:Q"))
    tooltip += [
        alt.Tooltip("input_tokens:Q", title="input tokens", format=","),
        alt.Tooltip("input_tokens_estimated_calls:Q", title="calls with estimated tokens"),
        alt.Tooltip("answer_facts_verbatim:Q", title="facts in the answer window"),
        alt.Tooltip("facts_declared:Q", title="results the model filed as facts"),
        alt.Tooltip("answer_results_verbatim:Q", title="tool results in the answer window"),
        alt.Tooltip("results_dropped:Q", title="tool results dropped"),
        alt.Tooltip("engaged_visits:Q", title="visits where the window engaged"),
        alt.Tooltip("wire_violations:Q", title="windows a provider would reject"),
    ]
    base = alt.Chart(frame)
    points = base.mark_point(filled=True, size=140, opacity=0.85).encode(
        x=x,
        y=y,
        color=alt.Color("policy:N", title="window policy"),
        shape=alt.Shape(
            "wire:N",
            title="wire check",
            scale=alt.Scale(
                domain=["valid on the wire", "rejected on the wire"], range=["circle", "cross"]
            ),
        ),
        tooltip=tooltip,
    )
    layers: list[Any] = [points]
    if not per_run_points:
        layers.append(
            base.mark_text(align="left", dx=9, dy=-7, fontSize=10).encode(
                x=x, y=y, text="policy:N", color=alt.Color("policy:N", legend=None)
            )
        )
    if frame["wire_violations"].sum():  # an empty layer would warn of an infinite extent
        layers.append(
            base.transform_filter(alt.datum.wire_violations > 0)
            .mark_text(align="left", dx=9, dy=8, fontSize=10, color="#d62728", fontWeight="bold")
            .encode(x=x, y=y, text="flag:N")
        )
    declared = int(data["facts_declared"].sum()) if data.height else 0
    note = (
        "No result was filed as a fact: give standings (--standings FILE) to count facts."
        if declared == 0
        else "A fact is a tool result the model (or your standings file) filed as 'fact'."
    )
    what = "one point per run and policy" if per_run_points else "one point per policy"
    return alt.LayerChart(layer=layers).properties(
        width=640,
        height=340,
        title=_title(
            "What would each window policy have kept for the answer, and at what cost?",
            [
                f"Replayed on the recorded runs, {what}: up and left is better. "
                "Crosses: windows a provider would reject.",
                note,
            ],
        ),
    )


def _wire_marks(column: str, counted: str) -> dict[str, pl.Expr]:
    """The two policy charts' wire columns: ``wire`` (rejected or valid, the mark's
    shape) and ``flag`` (the label beside a rejected policy: ``N counted``)."""
    rejected = pl.col(column) > 0
    return {
        "wire": pl.when(rejected)
        .then(pl.lit("rejected on the wire"))
        .otherwise(pl.lit("valid on the wire")),
        "flag": pl.when(rejected).then(pl.format(f"{{}} {counted}", column)).otherwise(pl.lit("")),
    }


def compare_chart(table: pl.DataFrame) -> alt.LayerChart:
    """Facts reaching the answer against what the input cost with a prompt cache, one
    point per policy; a line back to the cost without a cache shows what caching saved.

    ``table`` is :func:`contextledger.jobs.compare.comparison_table` (``Comparison.table``).
    A policy whose windows a provider would reject is a red cross, named with its count.

    >>> from contextledger.jobs.compare import compare
    >>> found = compare("data/sample/s0003-loop.json.gz", ["none", "sliding:keep=2"])
    >>> compare_chart(found.table).to_dict()["layer"][1]["encoding"]["x"]["field"]
    'cost_with_cache'
    """
    # Policies are told apart by the legend (and the tooltip): labels beside the points
    # overlap when two policies cost about the same.
    frame = table.with_columns(**_wire_marks("wire_problems", "wire problem(s)"))
    # Rejected policies with the same facts sit on one row: each label a step lower than
    # the previous one's (in cost order), so two close costs do not print over each other.
    step = (
        pl.col("cost_with_cache")
        .rank("ordinal")
        .over("facts_at_answer", pl.col("wire_problems") > 0)
        - 1
    )
    frame = frame.with_columns(label_y=pl.col("facts_at_answer") - 0.3 * step.cast(pl.Float64))
    x = alt.X(
        "cost_with_cache:Q",
        title="input cost with a prompt cache, in input-token units (line: without a cache)",
        scale=alt.Scale(zero=False, nice=True),
    )
    y = alt.Y(
        "facts_at_answer:Q",
        title="facts reaching the answer turn verbatim",
        scale=alt.Scale(zero=True, nice=True),
        axis=alt.Axis(tickMinStep=1),
    )
    colour = alt.Color(
        "policy:N",
        title="window policy",
        sort=frame["policy"].to_list(),  # the order compared, not alphabetical
        scale=alt.Scale(scheme="tableau20"),  # up to 20 policies, each its own colour
        legend=alt.Legend(labelLimit=420),
    )
    tooltip = [
        alt.Tooltip("policy:N"),
        alt.Tooltip("runs:Q"),
        alt.Tooltip("facts_at_answer:Q", title="facts at the answer"),
        alt.Tooltip("facts_declared:Q", title="facts filed"),
        alt.Tooltip("input_tokens:Q", title="input tokens", format=","),
        alt.Tooltip("cache_invalidations:Q", title="prefix-cache invalidations"),
        alt.Tooltip("cost_without_cache:Q", title="cost without a cache", format=",.0f"),
        alt.Tooltip("cost_with_cache:Q", title="cost with a cache", format=",.0f"),
        alt.Tooltip("wire_problems:Q", title="wire problems"),
        alt.Tooltip("first_offending_call:N", title="first offending call"),
    ]
    base = alt.Chart(frame)
    layers: list[Any] = [
        base.mark_rule(strokeDash=[4, 3], opacity=0.6).encode(
            x=x, x2="cost_without_cache:Q", y=y, color=colour
        ),
        base.mark_point(filled=True, size=140, opacity=0.85).encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape(
                "wire:N",
                title="wire check",
                scale=alt.Scale(
                    domain=["valid on the wire", "rejected on the wire"],
                    range=["circle", "cross"],
                ),
            ),
            tooltip=tooltip,
        ),
    ]
    if frame["wire_problems"].sum():  # an empty layer would warn of an infinite extent
        layers.append(
            base.transform_filter(alt.datum.wire_problems > 0)
            .mark_text(align="left", dx=9, dy=8, fontSize=10, color="#d62728", fontWeight="bold")
            .encode(x=x, y=alt.Y("label_y:Q"), text="flag:N")
        )
    return alt.LayerChart(layer=layers).properties(
        width=640,
        height=340,
        title=_title(
            "What does each window policy cost once a prompt cache is counted?",
            [
                "Up and left is better. A policy that trims the window breaks the cached "
                "prefix: it may send fewer tokens and still cost more.",
                "Cache reads and writes priced as multiples of the input price; crosses: "
                "windows a provider would reject.",
            ],
        ),
    )


def timeline_chart(cells: pl.DataFrame) -> alt.Chart:
    """One run's window, visit by visit: turns as rows, model calls as columns.

    ``cells`` is :func:`contextledger.report.frames.timeline_frame`: one row per
    turn and call, with ``status`` (kept, pinned, refused, dropped, dropped
    earlier) and the ``reason`` shown on hover.

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
                ],
            ),
        )
    )


def gate_touched(pieces: pl.DataFrame) -> pl.DataFrame:
    """The pieces the gates saved tokens on or cost uses of: what :func:`gate_chart` draws."""
    return pieces.filter(
        (pl.col("approx_tokens_saved") + pl.col("uses_lost") + pl.col("uses_at_risk")) > 0
    )


def gate_chart(pieces: pl.DataFrame, *, width: int = 640, height: int = 320) -> alt.LayerChart:
    """Per piece, approx tokens the ledger gates would have saved against the uses lost.

    ``pieces`` is the first frame :func:`~contextledger.ledger.gates.gate_what_if`
    returns; pieces the gates never touched are left out (the subtitle counts them).

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.gates import gate_what_if
    >>> pieces, _ = gate_what_if(read_runs("data/sample"))
    >>> gate_chart(pieces).to_dict()["layer"][0]["encoding"]["y"]["field"]
    'uses_lost'
    """
    touched = gate_touched(pieces).select(
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
        color=alt.Color("kind:N", title="kind", scale=_KIND_SCALE),
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
    colour = alt.Color("kind:N", scale=_KIND_SCALE)
    labels = [
        alt.Chart(placed.filter(pl.col("align") == align))
        .mark_text(align=align, baseline="middle", fontSize=10)
        .encode(x="label_x:Q", y="label_y:Q", text="id:N", color=colour)
        for align in placed["align"].unique(maintain_order=True)
    ]
    untouched = pieces.height - touched.height
    return alt.LayerChart(layer=[points, *labels]).properties(
        width=width,
        height=height,
        title=_title(
            "What would agentfootprint's ledger gates have cost?",
            [
                "Each run judged by the ledger of the runs before it (min 5 offers, floor 5%, "
                "parole every 10th demotion). Right = tokens saved; up = uses lost.",
                f"Named: the pieces saving most and losing most uses ({placed.height} of "
                f"{touched.height}; hover a point for the others). {untouched} piece(s) the "
                "gates never touched are not drawn.",
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
