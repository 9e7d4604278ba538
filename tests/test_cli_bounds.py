"""Every number the command line takes has an upper bound, refused in one line (exit 2)
where it is declared, instead of a traceback from a 64-bit column or a C call later."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_USAGE, MAX_WHOLE
from contextledger.window.frameworks import parse_framework_policy
from contextledger.window.policies import MAX_SPEC_NUMBER, PolicySpecError, parse_policy

from .conftest import SAMPLE

HUGE = "99999999999999999999"
PAST_INT64 = "9223372036854775808"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from contextledger.jobs.ingest import ingest

    root = tmp_path_factory.mktemp("bounds") / "archive"
    ingest([SAMPLE], root, workers=1)
    return root


def refused(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.output


SPECS = [
    (f"sliding:keep={HUGE}", f"keep={HUGE} is above {MAX_SPEC_NUMBER}"),
    (f"sliding:keep={PAST_INT64}", f"keep={PAST_INT64} is above"),
    (f"sliding:keep=3,last_tool_results={HUGE}", f"last_tool_results={HUGE} is above"),
    (f"sliding:keep=3,ledger_facts={HUGE}", f"ledger_facts={HUGE} is above"),
    (f"token_budget:threshold={HUGE}", f"threshold={HUGE} is above"),
    ("token_budget:threshold=1e12", "threshold=1e12 is above"),
    (f"token_budget:threshold=500,keep={HUGE}", f"keep={HUGE} is above"),
]


@pytest.mark.parametrize(("spec", "says"), SPECS)
def test_a_number_past_the_bound_is_refused_by_name_in_the_spec(spec, says):
    with pytest.raises(PolicySpecError) as caught:
        parse_policy(spec)
    assert says in str(caught.value) and f"each at most {MAX_SPEC_NUMBER}" in str(caught.value)


def test_the_bound_itself_is_taken():
    top = MAX_SPEC_NUMBER
    policy = parse_policy(f"token_budget:threshold={top},keep={top},last_tool_results={top}")
    assert policy.keep == policy.threshold == policy.last_tool_results == top


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (f"openai_trim:recent_turns={HUGE}", f"recent_turns={HUGE} is above {MAX_SPEC_NUMBER}"),
        (f"autogen_buffered:buffer_size={PAST_INT64}", "buffer_size=9223372036854775808 is above"),
        (f"langchain_clear:trigger=tokens:{HUGE}", f"trigger={HUGE} is above"),
        (f"langchain_trim:max_tokens={HUGE}", f"max_tokens={HUGE} is above"),
    ],
)
def test_the_other_frameworks_specs_share_the_bound(spec, says):
    with pytest.raises(PolicySpecError) as caught:
        parse_framework_policy(spec)
    assert says in str(caught.value) and f"to {MAX_SPEC_NUMBER})" in str(caught.value)
    top = parse_framework_policy(spec.replace(HUGE, str(MAX_SPEC_NUMBER)).replace(PAST_INT64, "1"))
    assert str(MAX_SPEC_NUMBER) in top.spec or "buffer_size=1" in top.spec


@pytest.mark.parametrize("spec", [s for s, _ in SPECS])
@pytest.mark.parametrize("over_archive", [False, True])
def test_whatif_compare_and_report_refuse_it_alike(spec, over_archive, archive, tmp_path):
    source = str(archive if over_archive else SAMPLE)
    says = f"window policy {spec!r}"
    assert says in refused("whatif", source, "--policy", spec)
    assert says in refused("compare", source, "--policy", spec)
    out = str(tmp_path / "r.html")
    assert says in refused("report", source, "--policy", spec, "-o", out)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["gates", str(SAMPLE), "--min-offers", HUGE], "--min-offers"),
        (["gates", str(SAMPLE), "--refresh-every", HUGE], "--refresh-every"),
        (["gates", str(SAMPLE), "--refresh-every", PAST_INT64], "--refresh-every"),
        (["gates", str(SAMPLE), "--floor", "nan"], "--floor"),
        (["ledger", str(SAMPLE), "--min-offers", HUGE], "--min-offers"),
        (["ledger", str(SAMPLE), "--max-document-mb", HUGE], "--max-document-mb"),
        (["ingest", str(SAMPLE), "--archive", "{tmp}/a", "--workers", HUGE], "--workers"),
        (["ingest", str(SAMPLE), "--archive", "{tmp}/a", "--workers", "257"], "--workers"),
        (["ingest", str(SAMPLE), "--archive", "{tmp}/a", "--batch-runs", HUGE], "--batch-runs"),
        (["synth", "--runs", HUGE, "--archive", "{tmp}/a"], "--runs"),
        (["synth", "--runs", "2", "--seed", HUGE, "--archive", "{tmp}/a"], "--seed"),
        (["synth", "--runs", "2", "--seed", "-1", "--archive", "{tmp}/a"], "--seed"),
    ],
)
def test_every_integer_option_is_bounded_where_it_is_declared(args, option, tmp_path):
    said = refused(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert f"Invalid value for '{option}'" in said
    assert not (tmp_path / "a").exists()


def test_every_integer_option_of_every_command_has_an_upper_bound():
    """Found by walking the commands, so a new option without one fails here."""
    import click

    unbounded = [
        f"{name} {param.opts[0]}"
        for name, command in main.commands.items()
        for param in command.params
        if isinstance(param.type, click.IntRange | click.types.IntParamType)
        and getattr(param.type, "max", None) is None
    ]
    assert unbounded == []
    assert MAX_WHOLE == MAX_SPEC_NUMBER


def test_the_environment_variable_is_bounded_too(monkeypatch):
    monkeypatch.setenv("CONTEXTLEDGER_MAX_DOCUMENT_MB", HUGE)
    assert "--max-document-mb" in refused("ledger", str(SAMPLE))


@pytest.mark.parametrize("price", ["1e20", "1001", "nan", "inf"])
def test_a_cache_price_past_the_bound_is_refused(price):
    said = refused("compare", str(SAMPLE), "--cache-read", price)
    assert "cache read price must be a number from 0 to 1000" in said


def test_ingest_starts_no_more_processes_than_it_has_chunks(tmp_path, monkeypatch):
    import contextledger.jobs.ingest as ingesting

    asked: list[int] = []
    real = ingesting.worker_pool

    def counted(max_workers: int):
        asked.append(max_workers)
        return real(max_workers)

    monkeypatch.setattr(ingesting, "worker_pool", counted)
    result = CliRunner().invoke(
        main, ["ingest", str(SAMPLE), "--archive", str(tmp_path / "a"), "--workers", "256"]
    )
    assert result.exit_code == 0, result.output
    files = len(list(SAMPLE.glob("*.json*")))
    assert asked == [-(-files // 4)]
