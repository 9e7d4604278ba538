"""JSON as JavaScript reads and writes it: numbers as it holds and prints them (what a token
estimate measures and what two copies of a recording are compared by), and lone surrogates,
which JSON.parse accepts.

The expected strings follow ECMAScript's Number::toString (shortest round-trip digits;
an exponent from 1e21 up and below 1e-6; ``-0`` as ``0``; an integer read as the nearest
double); each was checked once against ``node -e 'JSON.stringify(...)'``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT
from contextledger.jobs.whatif import read_inputs
from contextledger.ledger.compute import compute_ledger
from contextledger.read.jsjson import (
    approx_tokens,
    approx_tokens_of_json,
    js_number,
    js_stringify,
)
from contextledger.read.snapshot import decode_run, iter_documents
from contextledger.tables.build import ACCOUNTING_MODES, read_runs
from contextledger.window.whatif import parse_policies, whatif_table

from .conftest import SAMPLE

#: A Python number -> what JSON.stringify writes for it.
JAVASCRIPT_PRINTS = [
    (1, "1"),
    (1.0, "1"),
    (-0.0, "0"),
    (0.1, "0.1"),
    (-1.5, "-1.5"),
    (100.0, "100"),
    (1e20, "100000000000000000000"),
    (10**20, "100000000000000000000"),
    (1e21, "1e+21"),
    (10**21, "1e+21"),
    (10**24, "1e+24"),
    (1e24, "1e+24"),
    (-(10**24), "-1e+24"),
    (2**53 - 1, "9007199254740991"),
    (2**53 + 1, "9007199254740992"),  # the nearest double
    (2**60, "1152921504606847000"),
    (18446744073709551615, "18446744073709552000"),
    (1.2345678901234567e20, "123456789012345670000"),
    (123456789012345678901234567890, "1.2345678901234568e+29"),
    (1e-6, "0.000001"),
    (1.5e-6, "0.0000015"),
    (1e-7, "1e-7"),
    (-1.5e-7, "-1.5e-7"),
    (123e-20, "1.23e-18"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (10**400, "null"),  # Infinity, which JSON.stringify writes as null
    (2**1024 - 2**970, "null"),  # halfway to the next power: rounds up, past the doubles
    (2**1024 - 2**971, "1.7976931348623157e+308"),
]


@pytest.mark.parametrize(
    ("number", "printed"), JAVASCRIPT_PRINTS, ids=[printed for _, printed in JAVASCRIPT_PRINTS]
)
def test_a_number_prints_as_javascript_prints_it(number, printed):
    assert js_number(number) == printed
    assert js_stringify([number]) == f"[{printed}]"


def test_a_big_integer_is_charged_for_the_digits_javascript_writes():
    """``1e+24`` is 5 characters where 25 digits are 25."""
    spelled = {"maximum": 10**24, "name": "probe"}
    assert js_stringify(spelled) == '{"maximum":1e+24,"name":"probe"}'
    assert approx_tokens(spelled) == 8


def with_maximum(tmp_path: Path, name: str, number: str) -> Path:
    """s0001-fact-bench with ``"maximum": NUMBER`` in both tool schemas' argument, as written."""
    text = gzip.decompress((SAMPLE / "s0001-fact-bench.json.gz").read_bytes()).decode()
    argument = '"description":"item index"'
    assert text.count(argument) > 0
    path = tmp_path / f"{name}.json"
    path.write_text(text.replace(argument, f'{argument},"maximum":{number}'), encoding="utf-8")
    return path


def test_a_tool_schema_with_a_big_integer_costs_what_the_reference_charges(tmp_path):
    """21 offers each of probe_fact (JSON.stringify length 180: 45 tokens) and probe_noise
    (182: 46), however the file spells 10**24; 25 digits once charged 50 and 51."""
    spellings = {"digits": "1" + "0" * 24, "e24": "1e24", "e_plus_24": "1e+24", "float": "1.0e24"}
    ledgers = [
        compute_ledger(read_runs(with_maximum(tmp_path, name, number))).frame
        for name, number in spellings.items()
    ]
    expected = pl.DataFrame(
        {
            "id": ["probe_fact", "probe_noise"],
            "offered": [21, 21],
            "approx_tokens_spent": [945, 966],
        }
    )
    for ledger in ledgers:
        assert_frame_equal(ledger, ledgers[0], check_exact=True)
        tools = ledger.filter(pl.col("id").is_in(["probe_fact", "probe_noise"]))
        assert_frame_equal(tools.select(expected.columns), expected, check_exact=True)


def test_one_recording_with_a_number_spelled_two_ways_is_a_duplicate_not_a_conflict(tmp_path):
    """JSON.parse reads 1e24 and 25 digits as one number: the same recording."""
    digits = with_maximum(tmp_path, "a-digits", "1" + "0" * 24)
    short = with_maximum(tmp_path, "b-short", "1e24")
    tables = read_runs([digits, short])
    assert tables.problems.num_rows == 0
    assert tables.runs.num_rows == 1
    assert tables.duplicates.to_pylist() == [
        {
            "run_id": "s0001-fact-bench",
            "path": str(short),
            "line": None,
            "kept_path": str(digits),
            "kept_line": None,
            "kept_run_id": "s0001-fact-bench",
            "kept_archived": False,
        }
    ]


def test_a_number_that_is_another_double_is_another_recording(tmp_path):
    digits = with_maximum(tmp_path, "a-digits", "1" + "0" * 24)
    other = with_maximum(tmp_path, "b-other", "1.0000000000000001e24")  # the next double up
    tables = read_runs([digits, other])
    assert tables.runs.num_rows == 1
    [problem] = tables.problems.to_pylist()
    assert "different content" in problem["reason"]


# ── lone surrogates: what JavaScript writes for a string cut inside an emoji ─────────


def with_text(tmp_path: Path, run: str, name: str, old: str, new: str) -> Path:
    """Sample run ``run`` with every ``old`` replaced by ``new`` (JSON text), as ``name``."""
    text = gzip.decompress((SAMPLE / f"{run}.json.gz").read_bytes()).decode()
    assert text.count(old) > 0
    path = tmp_path / name
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


#: A text's end in a sample run: a tool result of s0003-loop, and a question in the
#: subflows of s0246-llmcall (grouped: read from its undecoded subflowResults).
TEXT_ENDS = {"s0003-loop": "latency region cargo fjord m", "s0246-llmcall": "quota latency harbor"}


@pytest.mark.parametrize("run", TEXT_ENDS)
def test_a_message_cut_inside_an_emoji_is_read_as_one_code_unit(tmp_path, run):
    """JSON.parse keeps the lone surrogate: one UTF-16 code unit, as a plain ``x`` is."""
    end = TEXT_ENDS[run]
    cut = with_text(tmp_path, run, "cut.json", end, end[:-1] + "\\ud83d")
    plain = with_text(tmp_path, run, "x.json", end, end[:-1] + "x")
    policies = parse_policies(["none", "sliding:keep=3", "token_budget:threshold=2000,keep=2"])
    read_cut, read_plain = read_inputs(cut), read_inputs(plain)
    assert read_cut.problems == [] and len(read_cut.streams) == 1
    assert_frame_equal(
        whatif_table(read_cut.streams, policies),
        whatif_table(read_plain.streams, policies),
        check_exact=True,
    )
    for mode in ACCOUNTING_MODES:
        tables = read_runs(cut, mode=mode)
        assert tables.problems.num_rows == 0
        expected = compute_ledger(read_runs(plain, mode=mode)).frame
        assert_frame_equal(compute_ledger(tables).frame, expected, check_exact=True)


def test_an_injection_with_a_lone_surrogate_is_charged_its_escaped_length(tmp_path):
    """JSON.stringify writes a lone surrogate as ``\\ud83d`` (6 characters): fact-1's JSON
    grows from 114 to 120 characters, 29 to 30 tokens at each of its 3 offers."""
    fact = "Fact: bravo widget tensor quota nexus"
    path = with_text(tmp_path, "s0202-conv-t2", "cut.json", fact, fact + "\\ud83d")
    rows = compute_ledger(read_runs(path)).frame.filter(pl.col("id") == "fact-1")
    assert rows.select("offered", "approx_tokens_spent").rows() == [(3, 90)]
    plain = compute_ledger(read_runs(SAMPLE / "s0202-conv-t2.json.gz")).frame
    assert plain.filter(pl.col("id") == "fact-1")["approx_tokens_spent"].to_list() == [87]
    assert js_stringify(fact + chr(0xD83D)) == f'"{fact}\\ud83d"'


def test_a_name_with_a_lone_surrogate_is_refused_by_name_and_the_rest_is_read(tmp_path):
    """A tool name JavaScript holds but UTF-8 tables cannot: that run is named, once."""
    folder = tmp_path / "runs"
    folder.mkdir()
    bad = with_text(folder, "s0001-fact-bench", "named.json", '"probe_fact"', '"probe_fact\\ud83d"')
    (folder / "s0003-loop.json.gz").write_bytes((SAMPLE / "s0003-loop.json.gz").read_bytes())
    result = CliRunner().invoke(main, ["ledger", str(folder), "--format", "json"])
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert json.loads(result.stdout)["runsRecorded"] == 1
    assert (
        f"contextledger: skipped {bad} (run s0001-fact-bench): the tool name "
        '"probe_fact\\ud83d" holds a lone surrogate, which UTF-8 tables cannot hold\n'
    ) in result.stderr
    assert "Traceback" not in result.stderr


def test_a_number_past_the_doubles_is_refused_naming_the_number(tmp_path):
    argument = '"description":"item index"'
    path = with_text(
        tmp_path, "s0001-fact-bench", "inf.json", argument, argument + ',"maximum":1e400'
    )
    [problem] = read_runs(path).problems.to_pylist()
    assert problem["reason"] == (
        "the number 1e400 is past the largest double (JavaScript reads it as Infinity)"
    )
    assert problem["run_id"] == "s0001-fact-bench"


# ── a token estimate from msgspec's JSON, where it is as long as JavaScript's ──────

_TEXT = st.text(
    alphabet=st.sampled_from(
        ["a", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "\u2028", "é", "😀", "\ud83d"]
    )
)
_NUMBER = st.one_of(
    st.integers(-(2**53), 2**53),
    st.sampled_from([2**53 + 1, 2**60, 10**21, -(10**24), 2**90]),  # printed as doubles
    st.floats(allow_nan=True),
)
_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(_VALUE)
def test_a_token_estimate_from_msgspecs_json_is_javascripts_or_none(value):
    """msgspec's JSON stands in for ``JSON.stringify``'s only where it is as long: strings
    escaped alike; a float or a big integer, which JavaScript prints otherwise, gives None
    (the value is measured); a lone surrogate cannot be encoded at all."""
    try:
        encoded = msgspec.json.encode(value)
    except UnicodeEncodeError:
        return
    assert approx_tokens_of_json(encoded) in (None, approx_tokens(value))


def test_every_offered_value_of_the_sample_is_estimated_from_its_json():
    offered = []
    for path in sorted(SAMPLE.glob("*.json.gz")):
        for document in iter_documents(path):
            for bundle in decode_run(document).snapshot.commit_log or []:
                for key in ("activeInjections", "dynamicToolSchemas"):
                    value = bundle.overwrite.get(key)
                    offered += value if isinstance(value, list) else []
    assert len(offered) > 100
    for value in offered:
        assert approx_tokens_of_json(msgspec.json.encode(value)) == approx_tokens(value)
