"""Each chart built from the sample: what it encodes, and the titles a newcomer reads."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contextledger import charts
from contextledger.jobs.whatif import read_inputs, whatif
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.gates import gate_what_if
from contextledger.ledger.stats import outcome_association, with_uncertainty
from contextledger.report.frames import timeline_frame
from contextledger.tables.build import RunTables, read_runs
from contextledger.tables.sidecars import load_outcomes

from .conftest import REPO, SAMPLE

STANDINGS = REPO / "data" / "sample-standings.csv"
FACT_BENCH = SAMPLE / "s0001-fact-bench.json.gz"


@cache
def tables() -> RunTables:
    return read_runs(SAMPLE).with_outcomes(load_outcomes(REPO / "data" / "sample-outcomes.csv"))


@cache
def per_run() -> pl.DataFrame:
    policies = ["none", "sliding:keep=6,ledger_facts=0", "sliding:keep=6"]
    return whatif(SAMPLE, policies, standings=STANDINGS)[0]


def encodings(layer: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """``channel -> (field, type)`` of one layer of a chart's spec."""
    return {
        channel: (spec.get("field", ""), spec.get("type", ""))
        for channel, spec in layer.get("encoding", {}).items()
        if isinstance(spec, dict) and "field" in spec
    }


def rows_of(spec: dict[str, Any]) -> pl.DataFrame:
    """The rows a spec's top-level data holds (Altair inlines them as a named dataset)."""
    return pl.DataFrame(spec["datasets"][spec["data"]["name"]])


def titles(spec: dict[str, Any]) -> list[str]:
    """Every axis or legend title in a spec, wherever it is nested."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("title"), str) and ("field" in node or "aggregate" in node):
                found.append(node["title"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def ledger_rows() -> pl.DataFrame:
    return with_uncertainty(compute_ledger(tables()).rows())


def test_earn_rate_chart_ranks_the_pieces_spending_most_with_their_earn_rate_and_interval():
    spec = charts.earn_rate_chart(ledger_rows()).to_dict()
    spent, rates, _ = spec["hconcat"]
    assert encodings(spent)["x"] == ("approx_tokens_spent", "quantitative")
    assert encodings(spent)["y"] == ("id", "nominal")
    interval, points = encodings(rates["layer"][0]), encodings(rates["layer"][1])
    assert interval["x"] == ("earn_rate_low", "quantitative")
    assert interval["x2"][0] == "earn_rate_high"
    assert points["x"] == ("earn_rate", "quantitative")
    assert points["color"] == ("kind", "nominal")
    order = ledger_rows().sort("approx_tokens_spent", "id", descending=[True, False])["id"]
    assert spent["encoding"]["y"]["sort"] == order.head(charts.PIECES_SHOWN).to_list()
    assert spec["title"]["text"] == "Which context pieces earn their tokens?"
    assert "earn rate (uses per offer), 95% interval" in titles(spec)


def test_earn_rate_chart_pools_the_pieces_it_does_not_draw_into_its_subtitle():
    rows = ledger_rows()
    rest = rows.sort("approx_tokens_spent", "id", descending=[True, False]).slice(25)
    subtitle = charts.earn_rate_chart(rows, shown=25).to_dict()["title"]["subtitle"]
    assert (
        f"The 25 pieces spending the most tokens, of 40; the other 15 spent "
        f"~{rest['approx_tokens_spent'].sum():,} approx tokens, used {rest['used'].sum()} "
        f"times in {rest['offered'].sum()} offers"
    ) in subtitle[-1]
    everything = charts.earn_rate_chart(rows, shown=40).to_dict()["title"]["subtitle"]
    assert everything[-1] == "All 40 piece(s) offered, most tokens spent first."


def test_earn_rate_chart_lists_the_never_used_pieces_most_expensive_first():
    chart = charts.earn_rate_chart(ledger_rows(), never_used_shown=3)
    bars = chart.hconcat[2]
    listed = bars.data.sort("approx_tokens_spent", descending=True)["id"].to_list()
    assert listed == ["diff_configs", "create_account", "check_inventory"]
    assert bars.to_dict()["encoding"]["y"]["sort"] == "-x"


def test_never_used_is_one_definition_offered_often_enough_to_judge_and_not_used():
    """The summary said 5 never used and the chart 7: the chart counted two pieces
    offered fewer than 5 times (tail_events, charge_card), not yet judged."""
    rows = ledger_rows()
    idle = charts.never_used(rows)
    assert idle["id"].to_list() == [
        "diff_configs",
        "create_account",
        "check_inventory",
        "rollback",
        "export_csv",
    ]
    chart = charts.earn_rate_chart(rows)
    assert chart.hconcat[2].data["id"].to_list() == idle["id"].to_list()
    title = " ".join(chart.hconcat[2].to_dict()["title"]["text"])
    assert title.startswith("Never used (5 piece(s) offered 5+ times")
    every = charts.earn_rate_chart(rows, shown=rows.height).hconcat[1].layer[2]
    assert every.to_dict()["mark"]["filled"] is False  # the red rings
    assert set(every.data.filter(pl.col("never_used"))["id"]) == set(idle["id"])


def test_outcome_chart_draws_each_label_against_its_base_rate_with_counts():
    spec = charts.outcome_chart(outcome_association(tables())).to_dict()
    assert spec["facet"]["field"] == "label"
    assert spec["columns"] == 3  # three labels, one row
    bars, tick, dots, counts = spec["spec"]["layer"]
    assert encodings(bars)["x"] == ("base_rate", "quantitative")
    assert encodings(bars)["x2"][0] == "share_with_label"
    assert encodings(tick)["x"][0] == "base_rate"
    assert encodings(dots)["x"][0] == "share_with_label"
    assert encodings(counts)["text"] == ("counts", "nominal")
    assert "association, not cause" in spec["title"]["text"]
    assert "share of runs carrying the label" in titles(spec)
    labels = {row["label"] for row in spec["datasets"][spec["data"]["name"]]}
    assert labels == {"good", "bad", "neutral"}


def test_outcome_chart_counts_read_as_runs_with_the_label_of_runs_offering_the_piece():
    frame = charts.outcome_chart(outcome_association(tables()), labels=["bad"]).data
    row = frame.filter(pl.col("id") == "open_ticket").row(0, named=True)
    assert (row["counts"], row["direction"]) == ("1 of 3", "more often than the base rate")


def test_policy_chart_ranks_the_policies_by_input_tokens_beside_the_facts_they_keep():
    spec = charts.policy_chart(per_run(), named="sliding:keep=6").to_dict()
    cost, facts, wire = spec["hconcat"]
    assert encodings(cost["layer"][0])["x"] == ("input_tokens", "quantitative")
    assert encodings(facts["layer"][0])["x"] == ("answer_facts_verbatim", "quantitative")
    assert encodings(wire)["text"] == ("flag", "nominal")
    rows = rows_of(spec).select("policy", "input_tokens", "measure_text", "role", "flag")
    assert rows.rows() == [
        ("sliding:keep=6,ledger_facts=0", 29610, "2 of 6", "compared", "✓ valid"),
        ("sliding:keep=6", 29837, "6 of 6", "named in the findings", "✓ valid"),
        ("none", 34493, "6 of 6", "keeps everything", "✓ valid"),
    ]
    assert cost["layer"][0]["encoding"]["y"]["sort"] == rows["policy"].to_list()
    assert "facts reaching the answer turn" in titles(spec)


def test_policy_chart_prints_each_number_beside_its_bar():
    """A reader checks the findings' numbers against the chart, not against a legend."""
    spec = charts.policy_chart(per_run()).to_dict()
    cost, facts, _ = spec["hconcat"]
    assert encodings(cost["layer"][-1])["text"] == ("cost_text", "nominal")
    assert encodings(facts["layer"][-1])["text"] == ("measure_text", "nominal")
    assert set(rows_of(spec)["cost_text"]) == {"29,610", "29,837", "34,493"}


def test_policy_chart_names_the_wire_problems_in_their_own_column():
    flagged = per_run().with_columns(
        wire_violations=pl.when(
            (pl.col("policy") == "sliding:keep=6") & (pl.col("run_id") == "s0001-fact-bench")
        )
        .then(3)
        .otherwise(0)
    )
    spec = charts.policy_chart(flagged).to_dict()
    rows = rows_of(spec).select("policy", "wire", "flag").rows()
    assert ("sliding:keep=6", "rejected on the wire", "✗ 3 wire problem(s)") in rows
    assert ("none", "valid on the wire", "✓ valid") in rows
    assert spec["hconcat"][-1]["title"]["text"] == "provider check"


def test_policy_chart_without_facts_compares_the_tool_results_reaching_the_answer():
    """With no fact declared, facts reaching the answer is 0 for every policy (a y axis
    from 0 to -1): the chart shows the measure that varies, and says why."""
    bare, _ = whatif(FACT_BENCH, ["none", "sliding:keep=3"])
    spec = charts.policy_chart(bare).to_dict()
    measure = encodings(spec["hconcat"][1]["layer"][0])["x"]
    assert measure == ("answer_results_verbatim", "quantitative")
    assert len(set(rows_of(spec)["answer_results_verbatim"])) == 2
    assert any("--standings" in line for line in spec["title"]["subtitle"])


def test_timeline_chart_has_turns_as_rows_calls_as_columns_and_the_reason_on_hover():
    stream = read_inputs(FACT_BENCH).streams[0]
    cells = timeline_frame(stream, "sliding:keep=6", {f"call-{i}": "fact" for i in (3, 6, 9)})
    spec = charts.timeline_chart(cells).to_dict()
    assert spec["mark"]["type"] == "rect"
    assert encodings(spec)["x"] == ("call", "ordinal")
    assert encodings(spec)["y"] == ("turn_label", "nominal")
    assert encodings(spec)["color"] == ("status", "nominal")
    assert spec["encoding"]["color"]["scale"]["domain"] == list(charts.TIMELINE_COLOURS)
    assert {tip["field"] for tip in spec["encoding"]["tooltip"]} >= {"status", "reason"}
    assert spec["encoding"]["y"]["sort"][1:4] == [
        " 1 assistant → probe_noise",
        " 2 assistant → probe_noise",
        " 3 assistant → probe_fact",
    ]
    assert "s0001-fact-bench" in spec["title"]["text"]


def test_gate_chart_puts_uses_lost_against_tokens_saved_for_the_pieces_touched():
    pieces, _ = gate_what_if(tables())
    spec = charts.gate_chart(pieces).to_dict()
    points = encodings(spec["layer"][0])
    assert points["x"] == ("approx_tokens_saved", "quantitative")
    assert points["y"] == ("uses_lost", "quantitative")
    assert points["size"] == ("offers_gated", "quantitative")
    rows = pl.DataFrame(spec["datasets"][spec["layer"][0]["data"]["name"]])
    assert "issue_refund" in set(rows["id"]) and "read_skill" not in set(rows["id"])
    assert "approx tokens the gates would have saved" in titles(spec)
    legend = spec["layer"][0]["encoding"]["size"]["legend"]["values"]
    assert legend[0] == 1 and legend[-1] == rows["offers_gated"].max()  # no 0: none drawn


@pytest.mark.parametrize("suffix, opening", [(".svg", b"<svg"), (".png", b"\x89PNG")])
def test_a_chart_exports_for_slides_without_a_browser(tmp_path: Path, suffix: str, opening: bytes):
    pieces, _ = gate_what_if(tables())
    path = charts.save_chart(charts.gate_chart(pieces), tmp_path / f"gates{suffix}")
    assert path.read_bytes().startswith(opening)


def test_a_chart_refuses_a_format_it_cannot_write(tmp_path: Path):
    pieces, _ = gate_what_if(tables())
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        charts.save_chart(charts.gate_chart(pieces), tmp_path / "gates.pdf")


def test_outcome_chart_keeps_the_pieces_offered_in_most_labelled_runs():
    spec = charts.outcome_chart(outcome_association(tables()), pieces=3).to_dict()
    assert spec["spec"]["layer"][0]["encoding"]["y"]["sort"] == [
        "read_skill",
        "send_email",
        "fact-1",
    ]
    assert set(rows_of(spec)["id"]) == {"read_skill", "send_email", "fact-1"}
    assert "The 3 of 40 pieces offered in most labelled runs." in spec["title"]["subtitle"]


# ── readable at scale ──────────────────────────────────────────────
def dense_points(count: int, seed: int = 0) -> pl.DataFrame:
    """Many pieces crowded near the origin, a few far out: a 10,000-run archive's gates."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "id": [f"piece_{i}_{'x' * int(rng.integers(0, 12))}" for i in range(count)],
            "x": np.round(rng.pareto(1.2, count) * 1000).astype(int),
            "y": np.round(rng.pareto(1.5, count) * 10).astype(int),
            "radius": rng.uniform(3, 12, count),
        }
    )


@pytest.mark.parametrize("count", [5, 40, 600])
def test_gate_labels_overlap_no_label_or_point_and_stay_inside(count: int):
    points = dense_points(count)
    width, height = 640, 320
    tops = (float(points["x"].max()) * 1.05 + 1, float(points["y"].max()) * 1.1 + 1)
    placed = charts.place_labels(points, "x", "y", tops, (width, height), radius="radius")
    assert 0 < placed.height <= 8
    boxes = []
    for row in placed.iter_rows(named=True):
        lx, ly = row["label_x"] / tops[0] * width, height - row["label_y"] / tops[1] * height
        wide = 6.0 * len(row["id"]) + 2
        left = lx if row["align"] == "left" else lx - wide
        boxes.append((left, ly - 6, left + wide, ly + 6))
    for i, box in enumerate(boxes):
        assert box[0] >= 0 and box[2] <= width and box[1] >= -4 and box[3] <= height + 4
        assert not any(charts._overlap(box, other) for other in boxes[i + 1 :])
        for row in points.iter_rows(named=True):
            px, py = row["x"] / tops[0] * width, height - row["y"] / tops[1] * height
            r = row["radius"]
            assert not charts._overlap(box, (px - r, py - r, px + r, py + r))
    # the piece saving most is named whenever its label fits anywhere: the first tried
    assert placed["id"][0] == points.sort("x", "y", descending=True)["id"][0]


def test_the_gate_chart_names_a_few_pieces_and_leaves_the_rest_to_the_tooltip():
    pieces, _ = gate_what_if(tables())
    spec = charts.gate_chart(pieces).to_dict()
    points, *labels = spec["layer"]
    named = [row for layer in labels for row in spec["datasets"][layer["data"]["name"]]]
    drawn = spec["datasets"][points["data"]["name"]]
    assert 0 < len(named) < len(drawn)  # 8 of the sample's 10
    assert {"field": "id", "type": "nominal", "title": "piece"} in points["encoding"]["tooltip"]
    assert f"({len(named)} of {len(drawn)}; hover a point for the others)" in " ".join(
        spec["title"]["subtitle"]
    )


def page_width() -> int:
    """The report page's content width in pixels: its ``main`` max-width less its padding."""
    import re

    css = (REPO / "src" / "contextledger" / "report" / "template.html").read_text()
    rule = re.search(r"main \{ max-width: (\d+)px;[^}]*padding: \d+px (\d+)px", css)
    assert rule is not None
    return int(rule[1]) - 2 * int(rule[2])


@pytest.mark.parametrize("labels, rows", [(4, 2), (6, 2)])
def test_the_outcome_chart_wraps_its_labels_into_rows_that_fit_the_page(labels: int, rows: int):
    """A 10,000-run archive's four labels drew 1,396 px wide, the fourth cut at the edge."""
    import vl_convert

    association = outcome_association(tables())
    names = association["label"].unique().sort().to_list()
    extra = [
        association.filter(pl.col("label") == names[i % len(names)]).with_columns(
            label=pl.lit(f"label-{i}")
        )
        for i in range(labels - len(names))
    ]
    spec = charts.outcome_chart(pl.concat([association, *extra])).to_dict()
    svg = vl_convert.vegalite_to_svg(spec)
    width = float(svg.split('width="', 1)[1].split('"', 1)[0])
    assert width <= page_width()
    assert spec["columns"] == -(-labels // rows)


def test_outcome_chart_direction_comes_from_counts_not_rounded_shares():
    """3 of 5 runs labelled bad, the piece offered in all 5: Polars gave a share of 0.6
    and a base rate of 0.6000000000000001, and the chart said "less often"."""
    association = pl.DataFrame(
        {
            "kind": ["tool"],
            "id": ["get_user"],
            "label": ["bad"],
            "runs_offered": [5],
            "runs_offered_with_label": [3],
            "share_with_label": [0.6],
            "runs_labelled": [5],
            "runs_labelled_with_label": [3],
            "base_rate": [0.6000000000000001],
            "share_minus_base": [0.6 - 0.6000000000000001],
        }
    )
    assert association["share_minus_base"][0] < 0  # the floats disagree
    drawn = charts.outcome_chart(association).data
    assert drawn["direction"].to_list() == ["as often as the base rate"]


def test_a_long_runs_timeline_keeps_only_its_last_calls_and_says_so():
    """A run of thousands of calls was a cell per turn and call (millions): the frame
    keeps the last calls' rows, the same rows the whole replay gives, and the chart
    says how many calls the run made."""
    stream = read_inputs(FACT_BENCH).streams[0]
    whole = timeline_frame(stream, "sliding:keep=6")
    last = timeline_frame(stream, "sliding:keep=6", last_calls=8)
    made = int(whole["call"].max())
    assert made > 8
    assert_frame_equal(last, whole.filter(pl.col("call") > made - 8), check_exact=True)
    subtitle = charts.timeline_chart(last).to_dict()["title"]["subtitle"]
    assert f"The last 8 of its {made} model calls are drawn." in subtitle
    assert not any(
        "are drawn" in line for line in charts.timeline_chart(whole).to_dict()["title"]["subtitle"]
    )
