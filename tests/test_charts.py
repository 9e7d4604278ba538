"""Each chart built from the sample: what it encodes, and the titles a newcomer reads."""

from __future__ import annotations

import itertools
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
from contextledger.tables.build import RunTables, load_outcomes, read_runs

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


def test_earn_rate_chart_plots_each_piece_by_tokens_and_earn_rate_with_its_interval():
    rows = with_uncertainty(compute_ledger(tables()).rows())
    spec = charts.earn_rate_chart(rows).to_dict()
    scatter = spec["hconcat"][0]["layer"]
    interval, points = encodings(scatter[0]), encodings(scatter[1])
    assert interval["y"] == ("earn_rate_low", "quantitative")
    assert interval["y2"][0] == "earn_rate_high"
    assert points["x"] == ("approx_tokens_spent", "quantitative")
    assert points["y"] == ("earn_rate", "quantitative")
    assert points["size"] == ("offered", "quantitative")
    assert points["color"] == ("kind", "nominal")
    assert scatter[2]["transform"] == [{"filter": "datum.never_used"}]
    assert spec["title"]["text"] == "Which context pieces earn their tokens?"
    assert "approx tokens spent offering the piece (estimate; log scale)" in titles(spec)
    assert "earn rate (uses per offer)" in titles(spec)


def test_earn_rate_chart_lists_the_never_used_pieces_most_expensive_first():
    rows = with_uncertainty(compute_ledger(tables()).rows())
    chart = charts.earn_rate_chart(rows, never_used_shown=3)
    bars = chart.hconcat[1]
    listed = bars.data.sort("approx_tokens_spent", descending=True)["id"].to_list()
    assert listed == ["diff_configs", "create_account", "check_inventory"]
    assert bars.to_dict()["encoding"]["y"]["sort"] == "-x"


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


def test_policy_chart_puts_facts_reaching_the_answer_against_input_tokens_per_policy():
    spec = charts.policy_chart(per_run()).to_dict()
    points = encodings(spec["layer"][0])
    assert points["x"] == ("input_tokens", "quantitative")
    assert points["y"] == ("answer_facts_verbatim", "quantitative")
    assert points["color"] == ("policy", "nominal")
    assert points["shape"] == ("wire", "nominal")
    data = spec["datasets"][spec["data"]["name"]]
    facts = {row["policy"]: row["answer_facts_verbatim"] for row in data}
    assert facts == {"none": 6, "sliding:keep=6,ledger_facts=0": 2, "sliding:keep=6": 6}
    assert "facts reaching the answer turn verbatim" in titles(spec)


def test_policy_chart_draws_one_point_per_run_on_demand():
    spec = charts.policy_chart(per_run(), per_run_points=True).to_dict()
    assert_frame_equal(
        rows_of(spec).select("run_id", "policy"),
        per_run().select("run_id", "policy"),
        check_exact=True,
    )
    assert "run_id" in {tip["field"] for tip in spec["layer"][0]["encoding"]["tooltip"]}


def test_policy_chart_flags_a_policy_whose_windows_break_the_wire():
    flagged = per_run().with_columns(
        wire_violations=pl.when(
            (pl.col("policy") == "sliding:keep=6") & (pl.col("run_id") == "s0001-fact-bench")
        )
        .then(3)
        .otherwise(0)
    )
    spec = charts.policy_chart(flagged).to_dict()
    rows = rows_of(spec).select("policy", "wire", "flag").rows()
    assert ("sliding:keep=6", "rejected on the wire", "3 wire violation(s)") in rows
    assert ("none", "valid on the wire", "") in rows
    assert spec["layer"][-1]["transform"] == [{"filter": "(datum.wire_violations > 0)"}]


def test_policy_chart_says_when_no_result_was_filed_as_a_fact():
    bare, _ = whatif(FACT_BENCH, ["none"])
    subtitle = charts.policy_chart(bare).to_dict()["title"]["subtitle"]
    assert any("--standings" in line for line in subtitle)


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
    drawn = set(pl.DataFrame(spec["datasets"][spec["layer"][0]["data"]["name"]])["id"])
    assert "issue_refund" in drawn and "read_skill" not in drawn
    assert "approx tokens the gates would have saved" in titles(spec)


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
def test_the_earn_rate_chart_puts_tokens_on_a_log_axis_with_a_tick_per_power_of_ten():
    rows = with_uncertainty(compute_ledger(tables()).rows())
    x = charts.earn_rate_chart(rows).to_dict()["hconcat"][0]["layer"][1]["encoding"]["x"]
    top = int(rows["approx_tokens_spent"].max())
    assert x["scale"]["type"] == "symlog"  # pieces costing little spread out; 0 still drawn
    assert x["axis"]["values"][0] == 0 and x["axis"]["values"][-1] >= top
    assert all(b == a * 10 for a, b in itertools.pairwise(x["axis"]["values"][1:]))
    assert x["scale"]["domain"] == [0, x["axis"]["values"][-1]]


def test_the_earn_rate_chart_draws_hundreds_of_pieces_smaller_and_lighter(monkeypatch):
    rows = with_uncertainty(compute_ledger(tables()).rows())
    few = charts.earn_rate_chart(rows).to_dict()["hconcat"][0]["layer"]
    monkeypatch.setattr(charts, "CROWDED", rows.height - 1)
    many = charts.earn_rate_chart(rows).to_dict()["hconcat"][0]["layer"]
    assert many[0]["mark"]["opacity"] < few[0]["mark"]["opacity"]
    sizes = [layer["encoding"]["size"]["scale"]["range"][1] for layer in (many[1], few[1])]
    assert sizes[0] < sizes[1]


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
