"""The gate what-if: agentfootprint's ledger verdict (gates.ts ``makeVerdict``) replayed over runs.

Hand-made tables pin one rule each (a failing case next to a passing one); the sample
is checked against a literal transcription of ``makeVerdict``; the corpus for internal
consistency; the command end to end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.ledger.compute import compute_ledger
from contextledger.ledger.gates import COUNT_COLUMNS, gate_what_if, replay_decisions
from contextledger.tables import schema
from contextledger.tables.build import RunTables, read_runs

from .conftest import REPO, SAMPLE, require_corpus

Offer = tuple[str, int, str, str]  # run_id, call_index, kind, piece_id
Use = tuple[str, str, str, int | None]  # run_id, kind, piece_id, call_index


def make_tables(
    run_ids: Sequence[str], offers: Sequence[Offer], uses: Sequence[Use] = ()
) -> RunTables:
    """Metered runs with ``run_order`` their position in ``run_ids``; every offer costs 10."""
    n = len(run_ids)
    runs = pa.table(
        {
            "run_id": list(run_ids),
            "run_order": list(range(n)),
            "source_path": [f"{run_id}.json" for run_id in run_ids],
            "source_line": [None] * n,
            "runner_kind": ["Agent"] * n,
            "accounting": ["corrected"] * n,
            "metered": [True] * n,
            "refused_reason": [None] * n,
            "model_call_count": [1] * n,
            "metered_call_count": [1] * n,
            "unmetered_kinds": [[]] * n,
            "basis": [[]] * n,
            "grouped": [False] * n,
            "slice_available": [True] * n,
            "static_tool_names_from": ["none"] * n,
            "static_tool_name_count": [0] * n,
        },
        schema=schema.RUNS,
    )
    offer_table = pa.table(
        {
            "run_id": [o[0] for o in offers],
            "call_index": [o[1] for o in offers],
            "kind": [o[2] for o in offers],
            "piece_id": [o[3] for o in offers],
            "approx_tokens": [10] * len(offers),
            "seq": list(range(len(offers))),
        },
        schema=schema.OFFERS,
    )
    signals = {"tool": "tool-called", "skill": "skill-activated", "injection": "answer-slice(slot)"}
    use_table = pa.table(
        {
            "run_id": [u[0] for u in uses],
            "kind": [u[1] for u in uses],
            "piece_id": [u[2] for u in uses],
            "signal": [signals[u[1]] for u in uses],
            "call_index": [u[3] for u in uses],
            "seq": list(range(len(uses))),
        },
        schema=schema.USES,
    )
    return RunTables("corrected", runs, offer_table, use_table)


def calls(run_id: str, count: int, piece: str, kind: str = "tool") -> list[Offer]:
    """``piece`` offered at calls 0..count-1 of ``run_id``."""
    return [(run_id, index, kind, piece) for index in range(count)]


def left_out(tables: RunTables, run_id: str, piece: str, **policy) -> list[bool]:
    """The gate's exclusions of ``piece`` in ``run_id``, call by call."""
    decisions = replay_decisions(tables, **policy)
    chosen = decisions.filter((pl.col("run_id") == run_id) & (pl.col("piece_id") == piece))
    return chosen["left_out"].to_list()


def piece_row(pieces: pl.DataFrame, piece: str) -> dict:
    return pieces.filter(pl.col("id") == piece).row(0, named=True)


# -- the verdict (gates.ts 49-66) -------------------------------------------------------


def test_a_piece_offered_fewer_than_min_offers_times_is_not_judged() -> None:
    tables = make_tables(
        ["r0", "r1"],
        [
            *calls("r0", 4, "four"),
            *calls("r0", 5, "five"),
            ("r1", 0, "tool", "four"),
            ("r1", 0, "tool", "five"),
        ],
    )
    assert left_out(tables, "r1", "four") == [False]  # 4 earlier offers < minOffers 5
    assert left_out(tables, "r1", "five") == [True]  # 5 earlier offers, never used


def test_an_earn_rate_at_the_floor_passes_and_one_below_it_is_demoted() -> None:
    tables = make_tables(
        ["r0", "r1"],
        [
            *calls("r0", 20, "at_floor"),
            *calls("r0", 21, "below"),
            ("r1", 0, "tool", "at_floor"),
            ("r1", 0, "tool", "below"),
        ],
        [("r0", "tool", "at_floor", 0), ("r0", "tool", "below", 0)],
    )
    assert left_out(tables, "r1", "at_floor") == [False]  # 1/20 = 0.05, not below the floor
    assert left_out(tables, "r1", "below") == [True]  # 1/21 < 0.05


def test_parole_lets_every_refresh_every_th_demotion_through_counting_from_one() -> None:
    tables = make_tables(["r0", "r1"], [*calls("r0", 5, "dead"), *calls("r1", 6, "dead")])
    # gates.test.ts 65-70: refreshEvery 3 gives [false, false, true, false, false, true].
    assert left_out(tables, "r1", "dead", refresh_every=3) == [True, True, False] * 2
    assert left_out(tables, "r1", "dead", refresh_every=0) == [True] * 6  # Infinity: no parole


def test_the_parole_counter_counts_demotions_only_and_carries_across_runs() -> None:
    tables = make_tables(
        ["r0", "r1", "r2"],
        [*calls("r0", 5, "dead"), *calls("r1", 2, "dead"), *calls("r2", 2, "dead")],
    )
    # Not demoted in r0 (no earlier run), so r0 does not advance the counter.
    assert left_out(tables, "r0", "dead", refresh_every=3) == [False] * 5
    assert left_out(tables, "r1", "dead", refresh_every=3) == [True, True]  # demotions 1, 2
    assert left_out(tables, "r2", "dead", refresh_every=3) == [False, True]  # 3 paroled, 4
    # A gate built per run starts its counter again each run.
    assert left_out(tables, "r2", "dead", refresh_every=3, parole_counter="run") == [True, True]


def test_the_ledger_judging_a_run_holds_only_earlier_runs() -> None:
    tables = make_tables(
        ["r0", "r1", "r2"],
        [*calls("r0", 10, "t"), *calls("r1", 2, "t"), *calls("r2", 1, "t")],
        [("r1", "tool", "t", 0)] * 5,
    )
    assert left_out(tables, "r0", "t") == [False] * 10  # its own 10 unused offers don't count
    assert left_out(tables, "r1", "t") == [True, True]  # r1's own uses don't rescue it
    assert left_out(tables, "r2", "t") == [False]  # 5 used / 12 offered earlier


def test_earlier_means_earlier_in_run_order_not_in_the_table() -> None:
    tables = make_tables(["late", "early"], [*calls("late", 1, "t"), *calls("early", 5, "t")])
    runs = pl.DataFrame(tables.runs).with_columns(run_order=pl.Series([1, 0]))
    tables.runs = runs.to_arrow().cast(schema.RUNS)
    assert left_out(tables, "early", "t") == [False] * 5
    assert left_out(tables, "late", "t") == [True]


# -- the three gates and what they cost ------------------------------------------------


def test_skills_are_down_weighted_never_left_out() -> None:
    tables = make_tables(
        ["r0", "r1"], [*calls("r0", 5, "s", "skill"), *calls("r1", 2, "s", "skill")]
    )
    pieces, _ = gate_what_if(tables)
    row = piece_row(pieces, "s")
    assert (row["offers_down_weighted"], row["offers_gated"], row["approx_tokens_saved"]) == (
        2,
        0,
        0,
    )


def test_injections_are_left_out_like_tools() -> None:
    tables = make_tables(
        ["r0", "r1"], [*calls("r0", 5, "i", "injection"), *calls("r1", 2, "i", "injection")]
    )
    row = piece_row(gate_what_if(tables)[0], "i")
    assert (row["offers_gated"], row["approx_tokens_saved"]) == (2, 20)


def test_a_tool_use_is_lost_when_the_call_that_made_it_was_not_sent_the_tool() -> None:
    offers = [*calls("r0", 5, "t"), *calls("r1", 10, "t")]  # demotions 1-10 in r1; 10 paroled
    uses: list[Use] = [("r1", "tool", "t", 9), ("r1", "tool", "t", 8)]
    row = piece_row(gate_what_if(make_tables(["r0", "r1"], offers, uses))[0], "t")
    assert (row["uses_lost"], row["uses_at_risk"], row["uses_judged_per_run"]) == (1, 0, 0)


def test_a_tool_use_without_a_call_is_lost_if_left_out_of_every_call_of_its_run_else_at_risk() -> (
    None
):
    offers = [*calls("r0", 5, "a"), *calls("r0", 5, "b"), *calls("r1", 2, "a")]
    offers += calls("r1", 10, "b")  # the 10th demotion of b is paroled
    uses: list[Use] = [("r1", "tool", "a", None), ("r1", "tool", "b", None)]
    pieces, _ = gate_what_if(make_tables(["r0", "r1"], offers, uses))
    a, b = piece_row(pieces, "a"), piece_row(pieces, "b")
    assert (a["uses_lost"], a["uses_at_risk"], a["uses_judged_per_run"]) == (1, 0, 1)
    assert (b["uses_lost"], b["uses_at_risk"], b["uses_judged_per_run"]) == (0, 1, 1)


def test_an_injection_use_is_lost_only_when_its_last_call_left_it_out() -> None:
    offers = [*calls("r0", 5, "i", "injection"), *calls("r0", 5, "j", "injection")]
    offers += [*calls("r1", 10, "i", "injection"), *calls("r1", 9, "j", "injection")]
    uses: list[Use] = [("r1", "injection", "i", None), ("r1", "injection", "j", None)]
    pieces, _ = gate_what_if(make_tables(["r0", "r1"], offers, uses))
    assert piece_row(pieces, "i")["uses_lost"] == 0  # paroled at its last call (10th demotion)
    assert piece_row(pieces, "j")["uses_lost"] == 1  # left out at its last call (9th)


# -- against a literal transcription of makeVerdict --------------------------------------


def make_verdict_literally(tables: RunTables, refresh_every: int = 10) -> list[bool]:
    """Inclusion per offer: gates.ts 55-65 line by line, the ledger rebuilt before each run."""
    runs = pl.DataFrame(tables.runs).filter(pl.col("metered")).sort("run_order")
    offers = pl.DataFrame(tables.offers)
    demotions: dict[tuple[str, str], int] = {}
    included: list[bool] = []
    for position, run_id in enumerate(runs["run_id"]):
        done = set(runs["run_id"][:position])
        earlier_runs = tables.runs.filter(
            pa.array([rid in done for rid in tables.runs["run_id"].to_pylist()])
        )
        ledger = compute_ledger(RunTables(tables.mode, earlier_runs, tables.offers, tables.uses))
        rows = {(row["kind"], row["id"]): row for row in ledger.frame.iter_rows(named=True)}
        for offer in (
            offers.filter(pl.col("run_id") == run_id)
            .sort("call_index", "seq")
            .iter_rows(named=True)
        ):
            key = (offer["kind"], offer["piece_id"])
            row = rows.get(key)
            if row is None or row["offered"] < 5 or row["earn_rate"] >= 0.05:
                included.append(True)
                continue
            count = demotions.get(key, 0) + 1
            demotions[key] = count
            included.append(count % refresh_every == 0)
    return included


@pytest.mark.parametrize("mode", ["corrected", "reference"])
def test_the_replay_equals_make_verdict_on_the_sample(mode) -> None:
    tables = read_runs(SAMPLE, mode=mode, workers=1)
    decisions = replay_decisions(tables)
    replayed = (~(pl.col("demoted") & ~pl.col("paroled"))).alias("included")
    assert decisions.select(replayed)["included"].to_list() == make_verdict_literally(tables)
    assert decisions["demoted"].sum() > 0


# -- the corpus --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["corrected", "reference"])
def test_corpus_what_if_is_internally_consistent(mode) -> None:
    tables = read_runs(require_corpus() / "runs", mode=mode)
    pieces, total = gate_what_if(tables)
    assert (pieces["approx_tokens_saved"] <= pieces["approx_tokens_spent"]).all()
    assert (pieces["offers_gated"] <= pieces["offered"]).all()
    demoted = pieces["offers_paroled"] + pieces["offers_gated"] + pieces["offers_down_weighted"]
    assert (pieces["offers_demoted"] == demoted).all()
    assert (pieces["uses_lost"] + pieces["uses_at_risk"] <= pieces["used"]).all()
    assert total.select(COUNT_COLUMNS).row(0) == pieces.select(pl.col(COUNT_COLUMNS).sum()).row(0)
    ledger = compute_ledger(tables).frame
    assert total["offered"][0] == ledger["offered"].sum()
    assert total["used"][0] == ledger["used"].sum()
    assert total["offers_gated"][0] > 0
    decisions = replay_decisions(tables)
    first_run = decisions["run_order"].min()
    assert not decisions.filter(pl.col("run_order") == first_run)["demoted"].any()


#: docs/ledger.md's corpus figures for the gates, as it words them (whitespace, line breaks
#: included, collapsed to single spaces before matching).
DOCUMENTED_GATES_FIGURES = re.compile(
    r"On the corpus \(corrected accounting, defaults\): (?P<saved>[\d,]+) of "
    r"(?P<spent>[\d,]+) approx tokens saved \((?P<share>[\d.]+%)\), (?P<gated>[\d,]+) "
    r"offers gated, (?P<lost>[\d,]+) tool calls lost\."
)


def documented_gates_figures(text: str) -> dict[str, str]:
    """The gates figures docs/ledger.md quotes for the corpus, as written."""
    found = DOCUMENTED_GATES_FIGURES.search(" ".join(text.split()))
    assert found is not None, "docs/ledger.md no longer quotes the gates' corpus figures"
    return found.groupdict()


def test_the_docs_quote_the_gates_corpus_figures() -> None:
    """Corrected accounting, default policy: what docs/ledger.md says is what the replay gives."""
    pieces, total = gate_what_if(read_runs(require_corpus() / "runs"))
    t = total.row(0, named=True)
    tool_calls_lost = pieces.filter(pl.col("kind") == "tool")["uses_lost"].sum()
    computed = {
        "saved": f"{t['approx_tokens_saved']:,}",
        "spent": f"{t['approx_tokens_spent']:,}",
        "share": f"{t['approx_tokens_saved'] / t['approx_tokens_spent']:.1%}",
        "gated": f"{t['offers_gated']:,}",
        "lost": f"{tool_calls_lost:,}",
    }
    ledger_doc = (REPO / "docs" / "ledger.md").read_text(encoding="utf-8")
    assert documented_gates_figures(ledger_doc) == computed


def test_the_readme_figures_are_read_across_line_breaks_and_a_change_shows() -> None:
    quoted = (
        "save nothing. On the corpus (corrected accounting, defaults): 61,603 of\n"
        "1,271,977 approx tokens saved (4.8%), 606 offers gated, 82 tool calls lost. The"
    )
    assert documented_gates_figures(quoted) == {
        "saved": "61,603",
        "spent": "1,271,977",
        "share": "4.8%",
        "gated": "606",
        "lost": "82",
    }
    with pytest.raises(AssertionError, match="no longer quotes"):
        documented_gates_figures(quoted.replace("offers gated", "offers left out"))


# -- the command ---------------------------------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_gates_command_on_the_sample() -> None:
    table = run("gates", str(SAMPLE))
    assert table.exit_code == 0
    assert "gates would have left out" in table.output
    assert "uses_lost" in table.output
    document = json.loads(run("gates", str(SAMPLE), "--format", "json").stdout)
    assert document["total"]["offers_gated"] > 0
    assert (
        sum(p["approx_tokens_saved"] for p in document["pieces"])
        == document["total"]["approx_tokens_saved"]
    )
    csv = run("gates", str(SAMPLE), "--format", "csv", "--mode", "reference").stdout
    assert csv.splitlines()[0].startswith("kind,id,offered,approx_tokens_spent")
    lenient = json.loads(
        run("gates", str(SAMPLE), "--min-offers", "1000", "--format", "json").stdout
    )
    assert lenient["total"]["offers_gated"] == 0
    assert run("gates", str(SAMPLE), "--refresh-every", "-1").exit_code == 2


def test_gates_output_names_the_run_order_it_replayed(tmp_path) -> None:
    """The refresh simulation depends on run order: each format's note says which one,
    ingest order over an archive, input order over snapshots."""
    from contextledger.jobs.ingest import ingest

    archive = tmp_path / "archive"
    ingest([SAMPLE], archive, workers=1)
    for source, order in ((SAMPLE, "input order"), (archive, "ingest order")):
        other = "ingest order" if order == "input order" else "input order"
        table = run("gates", str(source))
        assert f"\nruns in {order}, each judged by the ledger of the runs before it;" in (
            table.stdout
        )
        document = json.loads(run("gates", str(source), "--format", "json").stdout)
        assert document["note"].startswith(f"runs in {order}, ")
        csv = run("gates", str(source), "--format", "csv")
        assert f"\nruns in {order}, " in csv.stderr
        for said in (table.stdout, document["note"], csv.stderr):
            assert other not in said
