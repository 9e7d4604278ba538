"""``--format json``: one rule for every command, the shapes docs/cli.md's "Output formats"
names. An aggregate is exactly one compact JSON object on one line; rows are JSON Lines,
each line one object with the documented keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
OUTCOMES = ROOT / "data" / "sample-outcomes.csv"
STANDINGS = ROOT / "data" / "sample-standings.csv"
QUERY = "SELECT id, kind, offered, earn_rate FROM ledger_rows"

COMMANDS = {
    "ledger": ["ledger", str(SAMPLE), "--outcomes", str(OUTCOMES)],
    "outcomes": ["outcomes", str(SAMPLE), "--outcomes", str(OUTCOMES)],
    "gates": ["gates", str(SAMPLE)],
    "sql": ["sql", str(SAMPLE), QUERY, "--outcomes", str(OUTCOMES)],
    "whatif": ["whatif", str(SAMPLE), "--policy", "none", "--policy", "sliding:keep=3"],
    "compare": ["compare", str(SAMPLE), "--policy", "none", "--policy", "sliding:keep=3"],
}
for args in (COMMANDS["whatif"], COMMANDS["compare"]):
    args += ["--standings", str(STANDINGS)]


def documented() -> dict[str, tuple[str, list[str]]]:
    """Each command's bullet in docs/cli.md's "Output formats": (aggregate|rows, keys)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Output formats", 1)[1].split("\n#", 1)[0]
    bullets = [" ".join(b.split()) for b in re.split(r"\n- ", section)[1:]]
    shapes = {}
    for bullet in bullets:
        found = re.match(r"`(\w+)` \((aggregate|rows)\): ([^;]*)", bullet)
        assert found, bullet
        command, kind, keys = found.groups()
        shapes[command] = (kind, re.findall(r"`(\w+)`", keys))
    return shapes


def json_output(name: str) -> str:
    result = CliRunner().invoke(main, [*COMMANDS[name], "--format", "json"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_docs_document_every_command_with_json():
    assert set(documented()) == set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_json_follows_the_one_rule_with_the_documented_keys(name):
    kind, keys = documented()[name]
    text = json_output(name)
    lines = text.splitlines()
    assert text.endswith("\n") and lines and all(lines)
    if kind == "aggregate":
        assert len(lines) == 1  # compact: one line
        document = json.loads(text)
        assert isinstance(document, dict)
        assert list(document) == keys
        assert all(document[key] for key in keys)  # none empty on the sample
    else:
        rows = [json.loads(line) for line in lines]
        assert all(isinstance(row, dict) for row in rows)
        expected = keys or ["id", "kind", "offered", "earn_rate"]  # sql: the query's columns
        assert all(list(row) == expected for row in rows)
        if name != "sql":  # one line per (run, policy)
            pairs = [(row["run_id"], row["policy"]) for row in rows]
            assert len(set(pairs)) == len(pairs) == 2 * len(list(SAMPLE.glob("*.json.gz")))


def test_an_aggregate_holds_the_rows_the_table_shows():
    """outcomes used to be JSON Lines: the same rows, now in one object."""
    document = json.loads(json_output("outcomes"))
    csv_rows = CliRunner().invoke(main, [*COMMANDS["outcomes"], "--format", "csv"]).stdout
    assert len(document["rows"]) == len(csv_rows.splitlines()) - 1
    first = csv_rows.splitlines()[0].split(",")
    assert list(document["rows"][0]) == first


def test_sql_rows_are_json_lines_and_no_rows_print_nothing():
    """sql used to print one JSON array: now a row a line, as whatif and compare do."""
    rows = [json.loads(line) for line in json_output("sql").splitlines()]
    assert [row["id"] for row in rows][:1] and len(rows) > 1
    none = CliRunner().invoke(
        main, ["sql", str(SAMPLE), "SELECT id FROM ledger_rows WHERE false", "--format", "json"]
    )
    assert none.exit_code == 0 and none.stdout == ""
