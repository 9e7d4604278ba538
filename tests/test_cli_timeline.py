"""``report --timeline-run RUN`` is checked against the runs read before any replay:
a wrong id fails at once (exit 2, the id named), not after every policy has run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import contextledger.report
import contextledger.report.data
from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE
from contextledger.jobs.ingest import ingest

from .conftest import SAMPLE


def no_replay(*args, **kwargs):
    raise AssertionError("the policies were replayed before the run id was checked")


@pytest.mark.parametrize("source", ["snapshots", "archive"])
def test_a_wrong_timeline_run_fails_before_the_replay(tmp_path, monkeypatch, source):
    path = SAMPLE
    if source == "archive":
        path = tmp_path / "archive"
        ingest([SAMPLE], path, workers=1)
    for replay in ("replay_and_audit", "replay_and_audit_tables"):  # in this process or not
        monkeypatch.setattr(contextledger.report.data, replay, no_replay)
    args = ["report", str(path), "-o", str(tmp_path / "out"), "--charts", "none"]
    result = CliRunner().invoke(main, [*args, "--timeline-run", "s9999-nosuch"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--timeline-run 's9999-nosuch': no such run among the inputs" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_timeline_run_among_the_inputs_is_drawn(tmp_path):
    out = tmp_path / "out"
    args = ["report", str(SAMPLE), "-o", str(out), "--charts", "none"]
    result = CliRunner().invoke(main, [*args, "--timeline-run", "s0003-loop"])
    assert result.exit_code == 0, result.output
    assert "s0003-loop" in (out / "report.html").read_text(encoding="utf-8")


def test_report_takes_policies_of_either_family_each_replacing_its_own_defaults(tmp_path):
    """agentfootprint's specs go to every window chart, another framework's to the cost
    chart; a family given no spec keeps its defaults."""
    seen = {}
    collect = contextledger.report.collect

    def spy(*args, **kwargs):
        data = collect(*args, **kwargs)
        seen["compared"] = data.compared
        seen["what-if"] = data.per_run["policy"].unique(maintain_order=True).to_list()
        return data

    args = ["report", str(SAMPLE), "-o", str(tmp_path / "out"), "--charts", "none"]
    given = ["--policy", "anthropic_clear:trigger=1000", "--policy", "sliding:keep=4"]
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contextledger.report, "collect", spy)
        assert runner.invoke(main, [*args, *given]).exit_code == 0
        assert seen == {
            "compared": ["sliding:keep=4", "anthropic_clear:trigger=1000"],
            "what-if": ["sliding:keep=4"],
        }
        assert runner.invoke(main, [*args, "--policy", "openai_trim"]).exit_code == 0
        assert seen["what-if"] == list(contextledger.report.DEFAULT_POLICIES)
        assert seen["compared"] == [*contextledger.report.DEFAULT_POLICIES, "openai_trim"]
    result = runner.invoke(main, [*args, *given, "--timeline-policy", given[1]])
    assert result.exit_code == EXIT_USAGE
    assert "the timeline is drawn under agentfootprint's policies" in result.stderr
