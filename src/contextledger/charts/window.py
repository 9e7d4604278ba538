"""Charts of the window policies: one row per policy, ranked, every number printed
(what each would have kept and cost, with and without a prompt cache), and one run's
window call by call."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from contextledger.charts.style import (
    _SHORT_AXIS,
    TIMELINE_COLOURS,
    _largest,
    _largest_float,
    _thousands,
    _title,
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
    column (:func:`contextledger.window.audit_arrays.wire_check`). Each number is printed
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


def _short(value: float) -> str:
    """A cost in three or four figures (8,423; 19.6k; 34.5M), for a label beside a bar.

    >>> [_short(v) for v in (8423.4, 19602.0, 34_483_600.0, 2.5e9)]
    ['8,423', '19.6k', '34.5M', '2.5B']
    """
    for size, divisor, unit in ((1e9, 1e9, "B"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if value >= size:
            return f"{value / divisor:.1f}{unit}"
    return f"{value:,.0f}"


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
        cost_text=(
            pl.format(
                "{} ({} without)",
                pl.col(column).map_elements(_short, return_dtype=pl.String),
                pl.col(tick).map_elements(_short, return_dtype=pl.String),
            )
            if tick
            else _thousands(pl.col(column).round(0).cast(pl.Int64))
        ),
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
        scale=alt.Scale(domain=[0, cost_top * (1.9 if tick else 1.3)], nice=False),  # room
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
    columns: list[Any] = [alt.LayerChart(layer=cost_layers).properties(width=300 if tick else 260)]
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
    drawn = calls.tail(TIMELINE_CALLS)
    data = data.filter(
        pl.col("call").is_in(drawn.implode())
        & pl.col("turn_index").is_in(turns.tail(TIMELINE_TURNS).implode())
    )
    made = _largest(calls)  # calls count from 1: the frame may hold only the last ones
    cut = [
        f"The last {drawn.len()} of its {made:,} model calls" if drawn.len() < made else "",
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
