"""The report: what it computes from the sample, that the page is one self-contained file,
the command line, and docs/ledger.md it shares the reference's differences with."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
from functools import cache
from pathlib import Path

import polars as pl
import pytest
from altair.utils.schemapi import SchemaValidationError
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from contextledger import drawing
from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs, read_with_tables
from contextledger.report import (
    CHART_NAMES,
    DEFAULT_POLICIES,
    Progress,
    ReportData,
    build_charts,
    collect,
    findings,
    recommendation,
    render_html,
    write_report,
)
from contextledger.report.differences import DIFFERENCES, markdown_table
from contextledger.report.figures import spec_of
from contextledger.report.frames import accounting_comparison
from contextledger.tables import build
from contextledger.tables import files as table_files
from contextledger.tables.build import ACCOUNTING_MODES, read_runs
from contextledger.tables.windows import messages_table
from contextledger.window.audit_arrays import wire_check
from contextledger.window.whatif import parse_policies

from .conftest import REPO, SAMPLE

README = (REPO / "README.md").read_text(encoding="utf-8")
LEDGER_DOC = (REPO / "docs" / "ledger.md").read_text(encoding="utf-8")
REPORT_DOC = (REPO / "docs" / "report.md").read_text(encoding="utf-8")


@cache
def sample_report() -> ReportData:
    return collect()


@cache
def sample_page() -> str:
    return render_html(sample_report())


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_by_default_the_report_reads_the_bundled_sample_with_its_outcomes_and_standings():
    data = sample_report()
    assert data.bundled and data.inputs == [str(SAMPLE)]
    assert data.outcomes_from == str(REPO / "data" / "sample-outcomes.csv")
    assert data.standings_from == str(REPO / "data" / "sample-standings.csv")
    assert data.per_policy["policy"].to_list() == list(DEFAULT_POLICIES)
    assert data.command() == "contextledger report -o DIR"


def test_the_timeline_shows_the_policy_keeping_most_facts_on_the_run_it_removed_most_from():
    data = sample_report()
    assert data.timeline.select("run_id", "policy").unique().rows() == [
        ("s0001-fact-bench", "sliding:keep=6,last_tool_results=2,ledger_facts=4")
    ]
    pinned = data.timeline.filter(pl.col("status") == "pinned")
    assert set(pinned["reason"]) == {"pinned: holds a result the model filed as a fact"}


def test_the_timeline_run_and_policy_can_be_chosen_and_a_wrong_choice_is_named():
    data = collect(timeline_run="s0224-wrapup", timeline_policy="sliding:keep=3")
    assert data.timeline["run_id"][0] == "s0224-wrapup"
    with pytest.raises(ValueError, match="no such run"):
        collect(timeline_run="s9999-missing")
    with pytest.raises(ValueError, match="not among the compared policies"):
        collect(policies=["none"], timeline_policy="sliding:keep=2")


def test_findings_open_the_page_with_the_numbers_a_reader_takes_away():
    lines = findings(sample_report())
    assert lines[0].startswith("14 run(s) read: 14 metered, 0 refused, 0 input(s) unreadable")
    assert "5 piece(s) offered at least 5 times were never used: ~2,813 approx tokens" in lines[1]
    assert "left out 88 offers, saving ~6,526 approx tokens (12.2%)" in lines[2]
    assert lines[3].startswith("Recommended window policy: sliding:keep=6, the cheapest")
    assert lines[-1].startswith(
        "Every window replayed under agentfootprint's policies is one a provider accepts; "
        "5 of the other frameworks' 10 policies would send windows a provider rejects, most "
        "often autogen_buffered:buffer_size=8 (93) and mastra_token_limit:limit=600 (81) wire "
        "problems (the cost chart names each)."
    )


def test_the_summary_and_the_chart_count_the_same_never_used_pieces():
    """The summary said 5 never used, the chart beside the ledger 7 (it also counted
    two pieces offered fewer than 5 times): one definition, one number."""
    data = sample_report()
    chart = build_charts(data)["earn_rate"].to_dict()
    listed = chart["hconcat"][2]["title"]["text"]
    assert " ".join(listed).startswith("Never used (5 piece(s) offered 5+ times")
    assert findings(data)[1].startswith("5 piece(s) offered at least 5 times were never used")
    page = sample_page()
    assert page.count('<tr class="idle">') == 5


def test_every_replayed_window_of_the_sample_is_valid_on_the_wire():
    streams = read_inputs(SAMPLE).streams
    checked = wire_check(streams, parse_policies(["none", "sliding:keep=1", "sliding:keep=3"]))
    assert checked.height == 3 * len(streams)
    assert checked["wire_violations"].sum() == 0


def test_the_reference_comparison_counts_what_the_corrected_accounting_changes():
    frame = accounting_comparison(read_runs(SAMPLE, mode="reference"), read_runs(SAMPLE))
    by_name = {row["what"]: row for row in frame.to_dicts()}
    assert (by_name["runs refused"]["reference"], by_name["runs refused"]["corrected"]) == (2, 0)
    assert by_name["answer-slice uses"]["reference"] == 0
    assert by_name["answer-slice uses"]["corrected"] > 0


def test_the_page_draws_every_chart_from_specs_inlined_in_it():
    page = sample_page()
    for name in CHART_NAMES:
        assert f'<div class="chart" id="chart-{name}"></div>' in page
    specs = re.findall(r'^\s+"(\w+)": (\{.*\})(?:,)?$', page, flags=re.MULTILINE)
    assert [name for name, _ in specs] == list(CHART_NAMES)
    for _, spec in specs:
        document = json.loads(spec)
        assert "url" not in json.dumps(document.get("data", {}))


def test_every_chart_the_page_inlines_is_valid_vega_lite_as_altair_would_write_it():
    """The report writes specs unvalidated (``spec_of``): checked here, every chart of the
    sample (all six drawn), against the Vega-Lite schema, equal to Altair's own."""
    built = build_charts(sample_report())
    assert list(built) == list(CHART_NAMES)
    for chart in built.values():
        assert spec_of(chart) == chart.to_dict()  # to_dict raises on an invalid spec


def test_a_chart_spec_that_breaks_the_schema_is_caught_by_the_validating_export():
    """The failing case beside it: ``to_dict`` does refuse a spec Vega-Lite would not read."""
    broken = build_charts(sample_report())["earn_rate"].properties(width="wide")
    assert spec_of(broken)["width"] == "wide"
    with pytest.raises(SchemaValidationError):
        broken.to_dict()


def test_the_page_fetches_nothing_from_the_network():
    page = sample_page()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    assert "vegaEmbed" in page and "<script src" not in page


def test_the_page_lists_the_refused_runs_and_the_differences_from_the_reference():
    page = sample_page()
    assert "No run was refused under the corrected accounting: all 14 were metered." in page
    assert "would refuse 2 of them, for 1 reason(s)" in page
    assert "<code>s0246-llmcall</code>, <code>s0250-zero</code>" in page
    assert page.count("<tr><td>") >= len(DIFFERENCES)
    assert "<code>answer-slice(slot)</code>" in page


def test_the_docs_hold_the_same_differences_table_the_report_shows():
    assert markdown_table() in LEDGER_DOC


def test_the_readme_quick_start_runs_the_report_first():
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert "contextledger report" in commands[0]
    assert commands[1] == (
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[dev,spark]" '
        "&& .venv/bin/python -m pytest"
    )


def test_report_command_writes_the_page_and_each_chart_for_slides(tmp_path: Path):
    result = run("report", "-o", str(tmp_path / "out"), "--charts", "svg")
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'out' / 'report.html'}" in result.output
    assert "14 run(s) metered, 0 refused" in result.output
    written = sorted(path.name for path in (tmp_path / "out" / "charts").iterdir())
    assert written == sorted(f"{name}.svg" for name in CHART_NAMES)


def test_report_command_on_given_paths_still_writes_the_page_past_an_unreadable_input(
    tmp_path: Path,
):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(SAMPLE / "s0003-loop.json.gz", folder)
    (folder / "broken.json").write_text("{", encoding="utf-8")
    result = run("report", str(folder), "-o", str(tmp_path / "out"), "--charts", "none")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "skipped" in result.output and "broken.json" in result.output
    assert "not replayed" not in result.output  # named once, as unreadable
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "1 input(s) could not be read" in page
    assert not (tmp_path / "out" / "charts").exists()


def test_the_report_over_an_archive_shows_what_it_shows_over_the_snapshots(tmp_path: Path):
    """Ledger, association, gates, every replayed window and the timeline, with the
    archive's stored labels (no --outcomes needed); a bad filter is named, exit 2."""
    root = tmp_path / "archive"
    sample = REPO / "data"
    ingest([SAMPLE], root, outcomes=sample / "sample-outcomes.csv", workers=1, batch_runs=5)
    standings = sample / "sample-standings.csv"
    archived = collect([str(root)], standings=standings)
    direct = sample_report()
    assert archived.inputs == [str(root)]
    for name in ("rows", "association", "gate_pieces", "gate_total", "per_policy", "timeline"):
        assert_frame_equal(getattr(archived, name), getattr(direct, name), check_exact=True)
    assert_frame_equal(archived.per_run, direct.per_run, check_exact=True)
    assert archived.reference is not None and direct.reference is not None
    assert_frame_equal(
        accounting_comparison(archived.reference, archived.tables),
        accounting_comparison(direct.reference, direct.tables),
        check_exact=True,
    )
    result = run("report", f"{root}?label=good", "-o", str(tmp_path / "out"), "--charts", "none")
    assert result.exit_code == 0, result.output
    assert "11 run(s) metered" in result.output
    result = CliRunner().invoke(main, ["report", f"{root}?from=x", "-o", str(tmp_path / "o")])
    assert result.exit_code == EXIT_USAGE
    assert "unknown archive filter from" in result.output


def test_the_replay_spread_over_worker_processes_gives_the_rows_of_one(tmp_path: Path, monkeypatch):
    """From POOL_FROM_RUNS runs the replay and the audit go to workers, in batches of
    snapshots' streams or of an archive's window tables: none is replayed here, and the
    rows are those of one process replaying every run."""
    import contextledger.jobs.compare as compare_job
    import contextledger.report.data as report_module

    chosen = {
        "policies": ["none", "sliding:keep=3"],
        "frameworks": ["mastra_tool_filter", "openai_trim:recent_turns=1"],
        "compare_reference": False,
    }
    direct = collect(**chosen, workers=1)
    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1, batch_runs=5)
    monkeypatch.setattr(report_module, "POOL_FROM_RUNS", 1)
    monkeypatch.setattr(compare_job, "REPLAY_BATCH_RUNS", 4)
    monkeypatch.setattr(compare_job, "whatif_and_audit", lambda *_: pytest.fail("replayed here"))
    spread = collect(**chosen, workers=2)
    assert_frame_equal(spread.per_run, direct.per_run, check_exact=True)
    assert_frame_equal(spread.audit, direct.audit, check_exact=True)
    assert_frame_equal(spread.timeline, direct.timeline, check_exact=True)
    standings = REPO / "data" / "sample-standings.csv"
    archived = collect([str(root)], standings=standings, **chosen, workers=2)
    assert_frame_equal(archived.per_run, direct.per_run, check_exact=True)
    assert archived.compared == ["none", "sliding:keep=3", "mastra_tool_filter"]  # no text
    kept = pl.col("policy").is_in(archived.compared)
    assert_frame_equal(archived.audit, direct.audit.filter(kept), check_exact=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "sliding:keep=0"], "window policy 'sliding:keep=0'"),
        (["--timeline-run", "nope"], "no such run"),
        (["--standings", "missing.csv"], "cannot read the standings file"),
    ],
)
def test_report_command_names_a_bad_option_and_exits_2(tmp_path: Path, args, message):
    result = CliRunner().invoke(main, ["report", "-o", str(tmp_path), *args])
    assert result.exit_code == EXIT_USAGE
    assert message in result.output


# ── one pass over the snapshots ────────────────────────────────────
def awkward_inputs(folder: Path) -> Path:
    """The sample, with a run no replay can hold (its accountings can), an unreadable
    file, a copy of a run and a JSON Lines file with one bad line."""
    shutil.copytree(SAMPLE, folder)
    loop = folder / "s0003-loop.json.gz"
    document = json.loads(gzip.decompress(loop.read_bytes()))
    for bundle in document["snapshot"]["commitLog"]:
        if "iteration" in bundle["overwrite"]:
            bundle["overwrite"]["iteration"] = 2**40
    loop.write_bytes(gzip.compress(json.dumps(document).encode()))
    (folder / "broken.json").write_text("{", encoding="utf-8")
    shutil.copy(SAMPLE / "s0001-fact-bench.json.gz", folder / "copy.json.gz")
    wrap = json.loads(gzip.decompress((SAMPLE / "s0224-wrapup.json.gz").read_bytes()))
    (folder / "lines.jsonl").write_text(f"{json.dumps(wrap)}\nnot json\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("workers", [1, 2])
def test_one_pass_gives_each_accounting_and_the_streams_as_reading_them_apart(
    tmp_path: Path, workers: int
):
    folder = awkward_inputs(tmp_path / "runs")
    both, inputs = read_with_tables([folder], ACCOUNTING_MODES, workers=workers)
    for mode in ACCOUNTING_MODES:
        alone = read_runs(folder, mode=mode, workers=1)
        for part in ("runs", "offers", "uses", "problems", "duplicates"):
            assert getattr(both[mode], part).equals(getattr(alone, part)), (mode, part)
        assert both[mode].skipped == alone.skipped
    apart = read_inputs([folder])
    assert [stream.run_id for stream in inputs.streams] == [s.run_id for s in apart.streams]
    assert messages_table(inputs.streams).equals(messages_table(apart.streams))
    assert repr(inputs.streams) == repr(apart.streams) and inputs.standings == apart.standings
    assert inputs.problems == apart.problems and inputs.duplicates.equals(apart.duplicates)
    reasons = {p.run_id: p.reason for p in inputs.problems}
    assert "iteration 1099511627776" in reasons["s0003-loop"]
    assert both["corrected"].runs.num_rows == 14  # the loop is metered, each copy once
    assert both["corrected"].duplicates.num_rows == 2


def test_the_report_reads_each_snapshot_once(tmp_path: Path, monkeypatch):
    """Both accountings and the message streams from one read of each file (fewer than
    eight files: read in this process, so every read is counted here)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    names = sorted(SAMPLE.iterdir())[:5]
    for path in names:
        shutil.copy(path, folder)
    opened: list[Path] = []
    whole, streamed = table_files.read_whole_document, table_files.iter_documents

    def read_whole(path: Path, *args, **kwargs):
        found = whole(path, *args, **kwargs)
        if found is not None:  # None: only its head was read, and it is read below
            opened.append(path)
        return found

    def read_streamed(path: Path):
        opened.append(path)
        return streamed(path)

    monkeypatch.setattr(table_files, "read_whole_document", read_whole)  # where files are read
    monkeypatch.setattr(table_files, "iter_documents", read_streamed)
    data = collect([folder], policies=["none"])
    assert sorted(p.name for p in opened) == [p.name for p in names]
    assert data.reference is not None and data.reference.runs.num_rows == 5
    assert data.per_run.height == 5


def test_each_chart_is_laid_out_once_for_both_exports(tmp_path: Path, monkeypatch):
    """Vega draws each chart once, as SVG; the PNG is that SVG rasterized, the same
    bytes vl-convert's own PNG export gives."""
    import vl_convert as vlc

    drawn: list[str] = []
    real_svg = vlc.vegalite_to_svg

    def counted(spec, **options):
        drawn.append(spec["title"]["text"] if isinstance(spec.get("title"), dict) else "")
        return real_svg(spec, **options)

    monkeypatch.setattr(vlc, "vegalite_to_svg", counted)
    monkeypatch.setattr(vlc, "vegalite_to_png", lambda *_, **__: pytest.fail("drawn twice"))
    monkeypatch.setattr(drawing, "POOL_FROM_CHARTS", len(CHART_NAMES) + 1)  # drawn here
    data = sample_report()
    write_report(data, tmp_path, formats=("svg", "png"))
    assert len(drawn) == len(CHART_NAMES)
    monkeypatch.undo()
    spec = build_charts(data)["gates"].to_dict()
    from altair.utils._importers import vl_version_for_vl_convert

    own = vlc.vegalite_to_png(spec, vl_version=vl_version_for_vl_convert(), scale=2.0)
    assert (tmp_path / "charts" / "gates.png").read_bytes() == own


def test_the_charts_are_drawn_in_worker_processes_while_the_page_is_written(
    tmp_path: Path, monkeypatch
):
    """vl-convert holds the GIL while it draws (the report's largest cost of its own), so
    the charts go to workers: none is drawn in this process, and the images are the
    bytes drawn here."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    data = sample_report()
    spec = build_charts(data)["gates"].to_dict()
    here = drawing.draw(spec, ("svg", "png"), scale=2.0, vl_version=vl_version_for_vl_convert())
    monkeypatch.setattr(vlc, "vegalite_to_svg", lambda *_, **__: pytest.fail("drawn here"))
    write_report(data, tmp_path, formats=("svg", "png"))
    assert sorted(path.name for path in (tmp_path / "charts").iterdir()) == sorted(
        f"{name}.{suffix}" for name in CHART_NAMES for suffix in ("png", "svg")
    )
    for suffix, image in here.items():
        assert (tmp_path / "charts" / f"gates.{suffix}").read_bytes() == image


def test_a_chart_a_worker_cannot_draw_is_an_error_and_its_workers_are_stopped():
    bad = {"mark": "nosuchmark", "data": {"values": []}}
    specs = {"a": bad, "b": bad, "c": bad}
    drawn = drawing.draw_all(specs, ("svg",), vl_version="v6_4", workers=2)
    with drawn, pytest.raises(ValueError):
        drawn.images("a")
    assert drawn.pool is None


def test_the_chart_script_is_bundled_once_and_kept_for_later_reports(tmp_path, monkeypatch):
    import vl_convert as vlc

    from contextledger.report import script as report

    monkeypatch.setenv("CONTEXTLEDGER_CACHE", str(tmp_path / "cache"))
    report._vega_script.cache_clear()
    first = report._vega_script()
    [kept] = (tmp_path / "cache").iterdir()
    assert kept.read_text(encoding="utf-8") == first and kept.name.startswith("vega-embed-")
    report._vega_script.cache_clear()
    monkeypatch.setattr(vlc, "javascript_bundle", lambda *_: pytest.fail("bundled again"))
    assert report._vega_script() == first
    # a damaged copy is bundled anew; a folder that cannot be written is no failure
    kept.write_text("window.vega", encoding="utf-8")
    monkeypatch.setattr(vlc, "javascript_bundle", lambda *_: first)
    report._vega_script.cache_clear()
    assert report._vega_script() == first and kept.read_text(encoding="utf-8") == first
    (tmp_path / "file").write_text("", encoding="utf-8")
    monkeypatch.setenv("CONTEXTLEDGER_CACHE", str(tmp_path / "file"))
    report._vega_script.cache_clear()
    assert report._vega_script() == first
    report._vega_script.cache_clear()


# ── progress on a terminal ─────────────────────────────────────────
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock each reading of which is ``step`` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_slow_report_shows_each_stage_on_one_terminal_line(tmp_path: Path):
    terminal = FakeTerminal()
    meter = Progress(terminal, clock=Clock(1.0))  # each stage a second after the last
    data = collect(policies=["none", "sliding:keep=3"], progress=meter)
    write_report(data, tmp_path, formats=("svg",), progress=meter)
    meter.close()
    text = terminal.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1  # one line, redrawn
    shown = [part.strip() for part in text.split("\r") if part.strip()]
    replaying = "replaying 14 runs under 2 window policies"
    for stage in ("reading files", replaying, "drawing the charts"):
        assert any(stage in part for part in shown), (stage, shown)
    assert re.match(r"report: reading files \d+  \d+ s", shown[0])


def test_a_quick_report_and_a_log_get_no_progress_line(tmp_path: Path):
    quick = FakeTerminal()
    meter = Progress(quick)  # the sample takes well under the 2 s delay... on a real clock
    meter.clock = Clock(0.001)
    meter.started = 0.0
    collect(policies=["none"], progress=meter)
    meter.close()
    assert quick.getvalue() == ""
    silent = Progress(None, delay=0)
    silent.stage("reading", 1)
    silent.close()  # nothing to write to, nothing fails


@pytest.mark.parametrize(
    "flag, shown", [("--progress", True), ("--no-progress", False), (None, False)]
)
def test_report_command_progress_flag(tmp_path: Path, monkeypatch, flag, shown):
    """--progress shows the meter, --no-progress hides it, and by default it follows
    whether stderr is a terminal (under the test runner it is not)."""
    from contextledger import progress

    monkeypatch.setattr(progress, "SLOW_SECONDS", 0.0)
    args = ["report", "-o", str(tmp_path), "--charts", "none", "--policy", "none"]
    result = run(*args, *([flag] if flag else []))
    assert result.exit_code == 0, result.output
    assert ("report: reading files" in result.stderr) is shown
    assert "report:" not in result.stdout


# ── the recommended window policy ──────────────────────────────────
def test_the_findings_recommend_the_cheapest_policy_keeping_nearly_every_fact():
    """Not ``none`` (the baseline), not token_budget (as many facts, more tokens): the
    cheapest bringing at least 95% of the facts none brings, with the trade-off."""
    advice = recommendation(sample_report())
    assert advice == (
        "Recommended window policy: sliding:keep=6, the cheapest compared that brings at "
        "least 95% of the facts keeping everything (none) brings to the answer turn: 6 of 6 "
        "declared facts (none: 6) for ~29,837 input tokens instead of ~34,493 (13.5% fewer). "
        "Input tokens are not the whole cost: with a prompt cache it costs ~19,249 against "
        "~12,588 for none (52.9% more), as a window that drops or rewrites messages breaks "
        "the cached prefix (see the cost chart)."
    )
    assert advice in findings(sample_report())


def test_the_recommendation_weighs_its_cache_cost_from_the_audit():
    """The pick is made on input tokens; the sentence gives what the audit prices it at
    with a prompt cache against the baseline, the same sums the cost chart draws."""
    data = sample_report()
    costs = dict(data.audit.group_by("policy").agg(pl.col("cost_with_cache").sum()).iter_rows())
    advice = recommendation(data) or ""
    assert f"~{costs['sliding:keep=6']:,.0f} against ~{costs['none']:,.0f} for none" in advice


def test_nearly_is_the_documented_threshold(monkeypatch):
    from contextledger import report
    from contextledger.report import advice as advice_module

    assert report.NEARLY_ALL_FACTS == 0.95
    assert "at least 95% of the facts `none`" in " ".join(REPORT_DOC.split())
    # 5 of 6 is enough: keep=3 is cheaper
    monkeypatch.setattr(advice_module, "NEARLY_ALL_FACTS", 0.8)
    advice = recommendation(sample_report())
    assert advice is not None and advice.startswith("Recommended window policy: sliding:keep=3")
    assert "5 of 6 declared facts (none: 6) for ~26,067 input tokens" in advice


def test_when_no_window_keeps_nearly_every_fact_the_closest_is_named_not_recommended():
    data = collect(policies=["none", "sliding:keep=3", "sliding:keep=1"])
    advice = recommendation(data)
    assert advice is not None and not advice.startswith("Recommended")
    assert advice.startswith("No window policy compared brings at least 95% of the facts")
    assert "the closest, sliding:keep=3, brings 5 (none: 6) for ~26,067 input tokens" in advice
    assert recommendation(collect(policies=["none"])) is None  # nothing to recommend


def test_without_declared_facts_no_policy_is_recommended_on_facts():
    advice = recommendation(collect([SAMPLE], policies=["none", "sliding:keep=3"]))
    assert advice is not None and advice.startswith("No tool result was declared a fact")
    assert "the cheapest compared, sliding:keep=3, sends ~25,788 input tokens" in advice


def test_the_page_states_the_rule_next_to_the_policies():
    assert "at least 95% of the facts <code>none</code>" in " ".join(sample_page().split())
    assert "Recommended window policy: sliding:keep=6" in sample_page()


# ── the header names where the labels came from ────────────────────
def header(page: str) -> str:
    return page.split('<ul class="findings">')[0]


def test_the_header_names_the_archives_stored_labels(tmp_path: Path):
    root = tmp_path / "archive"
    ingest([SAMPLE], root, outcomes=REPO / "data" / "sample-outcomes.csv", workers=1)
    data = collect([str(root)], policies=["none"])
    assert data.stored_labels_from == [str(REPO / "data" / "sample-outcomes.csv")]
    top = header(render_html(data))
    assert "none given" not in top
    assert "outcomes: the archive&#39;s stored labels (from <code>" in top
    assert "sample-outcomes.csv</code>): <code>bad</code>, <code>good</code>" in top
    bare = tmp_path / "bare"  # an archive holding no label says so
    ingest([SAMPLE], bare, workers=1)
    assert "outcomes: none given" in header(render_html(collect([str(bare)], policies=["none"])))
    given = collect([str(bare)], outcomes=REPO / "data" / "sample-outcomes.csv", policies=["none"])
    assert "sample-outcomes.csv</code>: <code>bad</code>" in header(render_html(given))


# ── an archive without message streams ─────────────────────────────
def test_over_an_archive_without_streams_the_window_section_is_left_out_with_a_note(
    tmp_path: Path,
):
    from contextledger.jobs.synth import synth_archive

    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1, ingest_date="2026-01-01")
    synth_archive(root, 30, ingest_date="2026-02-01", streams=False, workers=1)
    # the snapshots' commit alone: replayed as ever
    streamed = collect([f"{root}?until=2026-01-31"], policies=["none"])
    assert streamed.windows_note is None and streamed.per_run.height == 14
    for path in (str(root), f"{root}?since=2026-02-01"):  # a selection holding runs without
        data = collect([path], policies=["none", "sliding:keep=3"])
        assert data.windows_note is not None
        assert data.windows_note.startswith("The window policies are left out: 30 archived run")
        assert data.per_run.height == 0 and data.timeline.height == 0
        assert findings(data)[-1] == data.windows_note
        assert data.rows.height > 0  # the ledger is all there
    page = render_html(data)
    assert "The window policies are left out: 30 archived run(s)" in page
    assert 'id="chart-policies"' not in page and 'id="chart-timeline"' not in page
    out = tmp_path / "out"
    result = run("report", str(root), "-o", str(out), "--charts", "svg")
    assert result.exit_code == 0, result.output
    assert "contextledger: The window policies are left out: 30 archived run(s)" in result.stderr
    assert sorted(p.stem for p in (out / "charts").iterdir()) == ["earn_rate", "gates", "outcomes"]


def test_the_chart_script_is_bundled_on_a_thread_while_the_runs_are_replayed(monkeypatch):
    import threading

    from contextledger.report import script as report

    called: list[str] = []
    started = threading.Event()

    def bundle() -> str:
        called.append(threading.current_thread().name)
        started.set()
        return "window.vegaEmbed=fake;"

    monkeypatch.setattr(report, "_bundling", None)
    monkeypatch.setattr(report, "_vega_script", bundle)
    data = collect(policies=["none"])
    assert started.wait(10) and called == ["vega-bundle"]  # begun before the page is asked for
    assert "window.vegaEmbed=fake;" in render_html(data) and called == ["vega-bundle"]


def test_each_new_stage_is_drawn_at_once_and_its_counts_five_times_a_second():
    terminal = FakeTerminal()
    meter = Progress(terminal, delay=0, clock=Clock(0.01))  # 10 ms between readings
    meter.stage("reading the runs")
    for done in range(1, 50):
        meter.stage("reading files", done)
    meter.stage("drawing the charts", 0, 3)
    shown = [part.strip() for part in terminal.getvalue().split("\r") if part.strip()]
    assert [line.split("  ")[0] for line in shown] == [
        "report: reading the runs",
        "report: reading files 1",
        "report: reading files 21",  # 20 readings of 10 ms: 0.2 s later
        "report: reading files 41",
        "report: drawing the charts 0/3",
    ]


# ── at the scale of a fleet ────────────────────────────────────────
def refusing(tables: build.RunTables, every: int) -> build.RunTables:
    """``tables`` with every ``every``-th run refused, for the same reason as the sample's."""
    runs = pl.from_arrow(tables.runs)
    assert isinstance(runs, pl.DataFrame)
    refused = pl.int_range(0, pl.len()) % every == 0
    runs = runs.with_columns(
        metered=pl.when(refused).then(False).otherwise(pl.col("metered")),
        refused_reason=pl.when(refused)
        .then(pl.lit("no call marker"))
        .otherwise(pl.col("refused_reason")),
    )
    return build.RunTables(
        mode=tables.mode,
        runs=runs.to_arrow().cast(tables.runs.schema),
        offers=tables.offers,
        uses=tables.uses,
        outcomes=tables.outcomes,
    )


def test_refused_runs_are_grouped_by_reason_and_listed_whole_in_a_csv_beside_the_page(
    tmp_path: Path,
):
    """One row a refused run read 1,428 rows at 10,000 runs: one row a reason, with a
    count and a few examples; every run in refused-runs.csv."""
    from dataclasses import replace

    data = sample_report()
    assert data.reference is not None
    many = replace(data, reference=refusing(data.reference, every=2))
    page = write_report(many, tmp_path, formats=())
    html = page.read_text(encoding="utf-8")
    assert "would refuse 8 of them, for 2 reason(s)" in html
    section = html.split('id="refused"')[1].split('id="reference"')[0]
    assert section.count("<tr><td>") == 2
    assert "and 4 more" in section
    assert 'href="refused-runs.csv"' in section
    listed = pl.read_csv(tmp_path / "refused-runs.csv")
    assert listed.height == 8 and set(listed["accounting"]) == {"reference"}
    assert listed.columns == [
        "accounting",
        "run_id",
        "runner_kind",
        "model_call_count",
        "refused_reason",
        "source_path",
    ]
    # A later report with nothing refused leaves no stale list behind.
    write_report(replace(data, reference=None), tmp_path, formats=())
    assert not (tmp_path / "refused-runs.csv").exists()


def test_the_gates_are_a_table_in_words_with_numbers_formatted():
    """The gates section ended in a monospace dump with field names (uses_at_risk)."""
    page = sample_page()
    section = page.split('id="gates"')[1].split('id="policies"')[0]
    assert "<pre>" not in section and "uses_at_risk" not in section
    assert '<td>Offers left out</td><td class="n">88 of 579 (15.2%)</td>' in section
    assert "~6,526 of ~53,503 (12.2%)" in section


def test_the_threshold_reads_as_a_threshold_not_as_a_result():
    data = collect(policies=["none", "sliding:keep=3", "sliding:keep=1"])
    advice = recommendation(data)
    assert advice is not None
    assert "(that is, 6 or more of the 6 facts none brings)" in advice
    assert "of 6 declared facts" not in advice


def fleet_tables(runs: int = 4000, variants: int = 80, labels: int = 1000) -> build.RunTables:
    """Synthetic runs (``contextledger synth``'s model) whose pieces come in ``variants``
    per name, so a few thousand runs offer thousands of pieces, labelled with
    ``labels`` labels (one a run, as a labels file of ids or free text gives)."""
    from dataclasses import replace

    from contextledger.jobs.synth_model import synth_tables

    tables = synth_tables(0, 0, runs)[0]["corrected"]

    def spread(table):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        variant = pl.col("run_id").hash(7) % variants
        return frame.with_columns(piece_id=pl.format("{}-{}", "piece_id", variant)).to_arrow()

    tables = replace(tables, offers=spread(tables.offers), uses=spread(tables.uses))
    ids = pl.from_arrow(tables.runs).select("run_id")
    assert isinstance(ids, pl.DataFrame)
    labelled = ids.with_columns(label=pl.format("label-{}", pl.int_range(0, pl.len()) % labels))
    return tables.with_outcomes(labelled.to_arrow())


@cache
def fleet_report() -> ReportData:
    """The sample's report with a fleet's ledger, gates and outcomes: over 10,000 pieces
    and 1,000 labels (the window sections are the sample's)."""
    from dataclasses import replace

    from contextledger.ledger.compute import compute_ledger
    from contextledger.ledger.gates import gate_what_if
    from contextledger.ledger.stats import with_uncertainty
    from contextledger.report import shown_association

    tables = fleet_tables()
    pieces, total = gate_what_if(tables)
    return replace(
        sample_report(),
        tables=tables,
        rows=with_uncertainty(compute_ledger(tables).rows()),
        association=shown_association(tables),
        labels_read=1000,
        gate_pieces=pieces,
        gate_total=total,
        reference=None,
    )


def test_a_fleet_of_thousands_of_pieces_and_a_thousand_labels_draws_few_marks():
    """5,208 pieces, or 126 labels on 14 runs, crashed the report with Altair's
    MaxRowsError (more than 5,000 rows in one chart), even with --charts none."""
    data = fleet_report()
    pieces = data.rows.height
    assert pieces >= 10_000 and data.labels_read == 1000
    page = render_html(data)
    specs = {name: chart.to_dict() for name, chart in build_charts(data).items()}
    for name, spec in specs.items():
        drawn = sum(len(rows) for rows in spec.get("datasets", {}).values())
        assert drawn <= 400, (name, drawn)
    subtitle = " ".join(specs["outcomes"]["title"]["subtitle"])
    assert "The 6 of 1,000 labels the most runs carried" in subtitle
    assert f"The 25 pieces spending the most tokens, of {pieces:,}" in " ".join(
        specs["earn_rate"]["title"]["subtitle"]
    )
    assert f"The 300 worst of {pieces:,} pieces are listed" in page
    assert len(page.encode()) < 4_000_000


def test_the_ledger_table_groups_thousands_and_never_rounds_an_interval_to_nothing():
    """At 10,000 runs the ledger table read ``7571`` offered beside ``605,680`` tokens,
    and a piece never used in 2,157 offers showed ``0% to 0%``, which reads as certain:
    its interval reaches 0.2%. The sample's ledger with every count times 1,000."""
    from dataclasses import replace

    from contextledger.ledger.stats import with_uncertainty

    data = sample_report()
    counts = ["offered", "used", "runs_seen", "approx_tokens_spent"]
    scaled = data.rows.select(pl.exclude("earn_rate_low", "earn_rate_high"))
    rows = with_uncertainty(scaled.with_columns(pl.col(counts) * 1000))
    table = render_html(replace(data, rows=rows)).split('id="ledger"')[1].split("</table>")[0]
    cells = re.findall(r'<td class="n">([^<]*)</td>', table)
    assert "9,000" in cells and not any(cell.isdigit() and int(cell) >= 1000 for cell in cells)
    never = rows.filter(pl.col("used") == 0, pl.col("judged"))["earn_rate_high"]
    assert never.min() < 0.001 < never.max() < 0.005
    assert "0.0% to &lt;0.1%" in table and f"0.0% to {never.max():.1%}" in table
    assert "0.0% to 0.0%" not in table


def test_the_outcome_chart_groups_thousands_in_its_counts():
    """The sample's association with every run count times 1,000."""
    from contextledger.charts.ledger import outcome_chart

    association = sample_report().association
    runs = [name for name in association.columns if name.startswith("runs_")]
    chart = outcome_chart(association.with_columns(pl.col(runs) * 1000))
    counts = [row["counts"] for rows in chart.to_dict()["datasets"].values() for row in rows]
    grouped = r"\d{1,3}(,\d{3})*"
    assert counts and all(re.fullmatch(f"{grouped} of {grouped}", text) for text in counts)
    assert any(text.startswith("1,000 of") for text in counts)


def test_the_outcome_association_drawn_counts_as_over_every_label():
    """The chart's labels are read with the others pooled: the same rows as the full
    association, without its piece-by-label grid (millions of rows for a fleet)."""
    from contextledger.ledger.stats import outcome_association
    from contextledger.report import shown_association

    tables = fleet_tables(runs=400, variants=2, labels=30)
    shown = shown_association(tables, labels=4)
    labels = shown["label"].unique().sort().to_list()
    assert len(labels) == 4
    every = outcome_association(tables).filter(pl.col("label").is_in(labels))
    assert_frame_equal(shown, every, check_exact=True)


def test_a_report_with_a_thousand_labels_on_the_sample_is_written(tmp_path: Path):
    labels = tmp_path / "labels.csv"
    runs = [
        line.split(",")[0]
        for line in (REPO / "data" / "sample-outcomes.csv").read_text().split()[1:]
    ]
    rows = [f"{run},label-{i:04d}" for i in range(1000) for run in runs[i % 3 :: 3]]
    labels.write_text("run_id,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    result = run("report", str(SAMPLE), "--outcomes", str(labels), "-o", str(tmp_path / "out"),
                 "--charts", "none")  # fmt: skip
    assert result.exit_code == 0, result.output
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "The 6 of 1,000 labels the most runs carried" in page
    assert "and 994 more labels" in page or "more labels" in page


def tools_only(tables: build.RunTables) -> build.RunTables:
    """``tables`` as a traces reader gives them: tools offered and called, no skill or
    injection (OpenTelemetry's conventions define tools only)."""
    from dataclasses import replace

    def tools(table):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.filter(pl.col("kind") == "tool").to_arrow().cast(table.schema)

    return replace(tables, offers=tools(tables.offers), uses=tools(tables.uses))


@cache
def traces_like_report() -> ReportData:
    """The sample read as traces are: tools only, no labels, no fact declared, and the
    same counts under both accountings (no agentfootprint quirk applies)."""
    from dataclasses import replace

    from contextledger.ledger.compute import compute_ledger
    from contextledger.ledger.gates import gate_what_if
    from contextledger.ledger.stats import with_uncertainty

    data = collect([SAMPLE])
    tables = tools_only(data.tables)
    pieces, total = gate_what_if(tables)
    return replace(
        data,
        tables=tables,
        reference=tables,
        rows=with_uncertainty(compute_ledger(tables).rows()),
        gate_pieces=pieces,
        gate_total=total,
    )


def test_a_traces_like_input_leaves_no_agentfootprint_panel_empty_or_misleading():
    """Runs with tools only, no labels, no facts: each section says what it has not got
    and why; the legends name only tools; the reference section says nothing differed."""
    data = traces_like_report()
    page = render_html(data)

    def section(name: str, until: str) -> str:
        return " ".join(page.split(f'id="{name}"')[1].split(f"{until}")[0].split())

    assert "No outcome labels were given" in section("outcomes", 'id="gates"')
    assert "agree on every count (14 run(s))" in section("reference", "<footer>")
    assert "<table>" in section("reference", "<footer>")  # the rules, still, for reference
    assert "standings: only those the runs hold" in page
    specs = {name: chart.to_dict() for name, chart in build_charts(data).items()}
    assert "outcomes" not in specs
    rates = specs["earn_rate"]["hconcat"][0]["encoding"]["color"]["scale"]["domain"]
    assert rates == ["tool"]
    measure = specs["policies"]["hconcat"][1]["layer"][0]["encoding"]["x"]["field"]
    assert measure == "answer_results_verbatim"
    assert any(
        "No result was filed as a fact" in line
        for line in specs["policy_cost"]["title"]["subtitle"]
    )
    assert any(line.startswith("No tool result was declared a fact") for line in findings(data))


def test_labels_that_name_no_metered_run_are_said_to_name_none():
    from dataclasses import replace

    data = replace(traces_like_report(), outcomes_from="labels.csv")
    page = render_html(data)
    assert "The outcome labels given name none of the metered runs read" in page


def test_thousands_of_unreadable_inputs_are_counted_and_the_first_fifty_listed():
    from dataclasses import replace

    import pyarrow as pa

    from contextledger.tables import schema

    problems = pa.Table.from_pylist(
        [
            {"path": f"runs/{i}.json", "line": None, "run_id": None, "reason": "not JSON"}
            for i in range(1200)
        ],
        schema=schema.PROBLEMS,
    )
    data = sample_report()
    page = render_html(replace(data, tables=replace(data.tables, problems=problems)))
    assert "1,200 input(s) could not be read" in page
    assert "<code>runs/49.json</code>" in page and "<code>runs/50.json</code>" not in page
    assert "The first 50 of 1,200 are listed" in page


def test_without_facts_or_skills_the_tables_leave_out_what_never_happened():
    page = " ".join(render_html(traces_like_report()).split())
    policies = page.split('id="policies"')[1].split('id="policy-cost"')[0]
    assert "facts reaching the answer</th>" not in policies
    assert "so the facts columns are left out" in policies
    gates = page.split('id="gates"')[1].split('id="policies"')[0]
    assert "Skill offers down-weighted" not in gates and "Uses at risk" not in gates
    assert "facts reaching the answer</th>" in " ".join(sample_page().split())


def test_the_ledger_csv_beside_the_page_is_what_ledger_writes_as_csv(tmp_path):
    out = tmp_path / "report"
    outcomes = str(REPO / "data" / "sample-outcomes.csv")
    written = run("report", str(SAMPLE), "--outcomes", outcomes, "--charts", "none", "-o", str(out))
    assert written.exit_code == 0, written.output
    printed = run("ledger", str(SAMPLE), "--outcomes", outcomes, "--format", "csv")
    assert printed.exit_code == 0, printed.output
    assert (out / "ledger.csv").read_text(encoding="utf-8") == printed.stdout


def test_a_tool_called_but_never_offered_is_not_counted_as_offered(tmp_path):
    """The findings counted every ledger row as offered, a tool the model called that no
    call offered too: offered means offered > 0, and the other is said apart."""
    source = REPO / "data" / "otel" / "traces" / "genai-openai.jsonl.gz"
    lines = []
    for line in gzip.decompress(source.read_bytes()).decode().splitlines():
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for attribute in span["attributes"]:
                        if attribute["key"] == "gen_ai.tool.definitions":
                            tools = json.loads(attribute["value"]["stringValue"])
                            kept = [tool for tool in tools if tool["name"] != "get_weather"]
                            attribute["value"]["stringValue"] = json.dumps(kept)
        lines.append(json.dumps(request))
    path = tmp_path / "unoffered.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = collect([path])
    never = data.rows.filter(pl.col("offered") == 0)
    assert never["id"].to_list() == ["get_weather"] and never["used"][0] > 0
    said = findings(data)
    offered = data.rows.height - 1
    assert f"{offered:,} context pieces were offered" in said[0]
    assert said[1].startswith("1 tool(s) called but never offered: get_weather")


def test_an_archives_accounting_totals_are_counted_without_collecting_its_tables(
    tmp_path, monkeypatch
):
    """The page's comparison of the two accountings over an archive counts its scans (the
    reference's offers and uses are read for nothing else), with the totals of the same
    runs read from their snapshots."""
    from contextledger.archive import Archive, ArchiveTables

    root = tmp_path / "archive"
    ingest([SAMPLE], root, workers=1)
    expected = accounting_comparison(read_runs(SAMPLE, mode="reference"), read_runs(SAMPLE))
    monkeypatch.setattr(ArchiveTables, "_collect", lambda *_: pytest.fail("a table collected"))
    archive = Archive.open(root)
    archived = accounting_comparison(
        ArchiveTables(archive, "reference"), ArchiveTables(archive, "corrected")
    )
    assert_frame_equal(archived, expected, check_exact=True)
    assert expected.filter(pl.col("difference") != 0).height > 0


def test_the_ledger_charts_are_drawn_while_the_runs_are_replayed_in_one_worker(
    tmp_path: Path, monkeypatch
):
    """``collect(draw=...)`` hands the ledger's charts to one drawing worker before any
    run is replayed (vl-convert starts once); ``write_report`` hands that worker the
    rest, and every file is the bytes of a report drawn the usual way."""
    import contextledger.report.data as report_data

    chosen = {"policies": ["none", "sliding:keep=3"], "frameworks": ["openai_trim"]}
    events: list[str] = []
    added = drawing.Drawing.add
    replay = report_data.replay_and_audit

    def add(self, specs):
        events.append("drawn: " + ", ".join(specs))
        return added(self, specs)

    def replayed(*args, **kwargs):
        events.append("replayed")
        return replay(*args, **kwargs)

    usual = tmp_path / "usual"
    write_report(collect(**chosen), usual, formats=("svg", "png"))
    monkeypatch.setattr(drawing.Drawing, "add", add)
    monkeypatch.setattr(report_data, "replay_and_audit", replayed)
    monkeypatch.setattr(drawing, "draw_all", lambda *_, **__: pytest.fail("drawn anew"))
    data = collect(**chosen, draw=("svg", "png"))
    assert events == ["drawn: earn_rate, outcomes, gates", "replayed"]
    assert data.drawing is not None and data.drawing.pool is not None
    early = tmp_path / "early"
    write_report(data, early, formats=("svg", "png"))
    assert events[2:] == ["drawn: policies, policy_cost, timeline"]
    assert data.drawing is None  # taken, and closed
    written = sorted(path.relative_to(usual) for path in usual.rglob("*") if path.is_file())
    assert written == sorted(p.relative_to(early) for p in early.rglob("*") if p.is_file())
    for path in written:
        if path.name != "report.html":  # time-stamped
            assert (early / path).read_bytes() == (usual / path).read_bytes(), path


def test_a_report_that_fails_before_drawing_stops_the_worker_collect_started(
    tmp_path: Path, monkeypatch
):
    import contextledger.report.page as report_page

    data = collect(policies=["none"], frameworks=[], draw=("svg",))
    started = data.drawing
    assert started is not None and started.pool is not None

    def broken(_data):
        raise RuntimeError("no chart")

    monkeypatch.setattr(report_page, "chart_specs", broken)
    with pytest.raises(RuntimeError, match="no chart"):
        write_report(data, tmp_path, formats=("svg",))
    assert started.pool is None and data.drawing is None
