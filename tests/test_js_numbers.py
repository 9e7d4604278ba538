"""Numbers as JavaScript holds and prints them: what a token estimate measures and what two
copies of a recording are compared by.

The expected strings follow ECMAScript's Number::toString (shortest round-trip digits;
an exponent from 1e21 up and below 1e-6; ``-0`` as ``0``; an integer read as the nearest
double); each was checked once against ``node -e 'JSON.stringify(...)'``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contextledger.ledger.compute import compute_ledger
from contextledger.read.jsjson import approx_tokens, js_number, js_stringify
from contextledger.tables.build import read_runs

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
        }
    ]


def test_a_number_that_is_another_double_is_another_recording(tmp_path):
    digits = with_maximum(tmp_path, "a-digits", "1" + "0" * 24)
    other = with_maximum(tmp_path, "b-other", "1.0000000000000001e24")  # the next double up
    tables = read_runs([digits, other])
    assert tables.runs.num_rows == 1
    [problem] = tables.problems.to_pylist()
    assert "different content" in problem["reason"]
