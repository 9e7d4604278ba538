"""Tables for people: no wider than the terminal (what gave way said in one line), counts
grouped by thousands, rates at their interval's precision; piped or written to a file,
every column; the machine formats untouched."""

from __future__ import annotations

import re

import polars as pl
import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.terminal import Fit, table_text

from .conftest import SAMPLE

STANDINGS = SAMPLE.parent / "sample-standings.csv"
#: Before this, in 100 columns: ledger 172 wide, whatif 242, compare 338.
COMMANDS = {
    "ledger": ["ledger", str(SAMPLE)],
    "whatif": [
        "whatif",
        str(SAMPLE),
        "--policy",
        "none",
        "--policy",
        "sliding:keep=6",
        "--policy",
        "token_budget:threshold=500",
    ],
    "compare": ["compare", str(SAMPLE), "--standings", str(STANDINGS)],
    "gates": ["gates", str(SAMPLE), "--min-offers", "1", "--floor", "0.5"],
    "outcomes": ["outcomes", str(SAMPLE), "--outcomes", str(SAMPLE.parent / "sample-outcomes.csv")],
    "sql": ["sql", str(SAMPLE), "select * from ledger_rows"],
}


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def run(args: list[str], columns: int | None) -> object:
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": ""}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("command", COMMANDS)
def test_a_table_fits_a_100_column_terminal_and_says_what_it_hid(command):
    result = run(COMMANDS[command], 100)
    assert widest(result.stdout) <= 100
    said = " ".join(result.stdout.split())  # the line wraps to the terminal too
    assert re.search(r"\d+ columns? hidden: .+? \(use .+? or a wider terminal\)", said)


@pytest.mark.parametrize("command", COMMANDS)
def test_piped_without_columns_a_table_keeps_every_column(command):
    result = run(COMMANDS[command], None)
    assert "hidden:" not in result.stdout
    assert widest(result.stdout) > 100


def test_the_narrow_ledger_keeps_every_row_in_order_and_the_columns_that_judge_a_piece():
    wide, narrow = run(COMMANDS["ledger"], None), run(COMMANDS["ledger"], 100)

    def cells(text: str) -> list[list[str]]:
        rows = [line for line in text.splitlines() if line.startswith("│")]
        return [[cell.strip() for cell in row.strip("│").split("┆")] for row in rows]

    header = cells(narrow.stdout)[0]
    assert {"id", "offered", "used", "earn_rate"} <= set(header)
    full = cells(wide.stdout)
    kept = [full[0].index(name) for name in header]
    assert [[row[i] for i in kept] for row in full] == cells(narrow.stdout)
    assert narrow.stdout.splitlines()[-2] == (
        "4 columns hidden: used_via, runs_seen, outcomes, judged "
        "(use --format csv or a wider terminal)"
    )


def test_a_file_written_with_o_keeps_every_column_whatever_the_terminal(tmp_path):
    out = tmp_path / "ledger.txt"
    run([*COMMANDS["ledger"], "-o", str(out)], 100)
    assert "hidden:" not in out.read_text(encoding="utf-8")
    assert "used_via" in out.read_text(encoding="utf-8")


def test_policy_specs_break_after_commas_before_a_column_goes():
    text = run(COMMANDS["compare"], 100).stdout
    assert "│ langchain_summarize:trigger=tokens:1000, ┆" in text
    assert "│ keep=messages:6," in text and "│ summary_tokens=200" in text


def test_counts_are_grouped_by_thousands_and_right_aligned():
    ledger = run(COMMANDS["ledger"], None).stdout
    assert re.search(r"│ onboarding +┆ skill +┆ +5 ┆ +1,766 ┆", ledger)
    whatif = run(COMMANDS["whatif"], None).stdout  # median / total cells too
    assert "1,791.5 / 34,493" in whatif
    compare = run(COMMANDS["compare"], None).stdout
    assert re.search(r"┆ +34,493 ┆", compare)


def test_a_rate_is_shown_at_its_intervals_precision():
    text = run([*COMMANDS["ledger"], "--min-offers", "1"], None).stdout
    onboarding = next(line for line in text.splitlines() if "onboarding" in line)
    assert "┆     0.800 ┆ [0.376, 0.964] ┆" in onboarding  # 4 uses of 5 offers


def test_the_machine_formats_keep_exact_values_whatever_the_terminal():
    for fmt in ("csv", "jsonl", "json"):
        piped = run([*COMMANDS["ledger"], "--format", fmt], None).stdout
        assert run([*COMMANDS["ledger"], "--format", fmt], 40).stdout == piped
    csv = run([*COMMANDS["ledger"], "--format", "csv"], None).stdout
    assert ",1766," in csv and "1,766" not in csv


def test_kept_columns_wider_than_the_terminal_wrap_their_cells():
    frame = pl.DataFrame({"id": ["x" * 50], "offered": [3]})
    text = table_text(frame, width=30, fit=Fit(keep=["id", "offered"]))
    assert widest(text) <= 30 and "hidden" not in text
    assert "".join(re.findall(r"x+", text)) == "x" * 50


def test_a_hostile_cell_is_escaped_before_it_is_measured():
    frame = pl.DataFrame({"id": ["a\x1b[2Jb"], "note": ["n" * 40]})
    text = table_text(frame, width=20, fit=Fit(keep=["id"]))
    assert "a\\x1b[2Jb" in text and "\x1b" not in text
    assert widest(text) <= 20 and "1 column hidden: note" in " ".join(text.split())


def test_the_summary_under_a_table_groups_its_counts_too(tmp_path):
    archive = tmp_path / "archive"
    synth = CliRunner().invoke(
        main, ["synth", "--runs", "1200", "--archive", str(archive), "--no-streams"]
    )
    assert synth.exit_code == 0, synth.output
    text = run(["ledger", str(archive)], None).stdout
    assert text.splitlines()[-1].startswith("1,200 run(s) metered, 0 refused")
    offered = [line.split("┆")[2].strip() for line in text.splitlines() if line.startswith("│ ")]
    assert any("," in count for count in offered[1:])  # pieces offered over 1,000 times


class _Stdout:
    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(
    ("columns", "terminal", "output", "width"),
    [
        (None, True, None, 77),  # the terminal's own width
        (None, False, None, None),  # piped: every column
        ("100", False, None, 100),  # COLUMNS wins, piped or not
        ("100", True, None, 100),
        ("100", True, "out.txt", None),  # a file keeps every column
        ("wide", True, None, 77),  # a COLUMNS that is no width is not one
        ("0", False, None, None),
    ],
)
def test_the_width_comes_from_columns_else_the_terminal_else_none(
    monkeypatch, columns, terminal, output, width
):
    import os
    import shutil
    import sys

    from contextledger.cli.terminal import output_width

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(sys, "stdout", _Stdout(terminal))
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: os.terminal_size((77, 24)))
    assert output_width(output) == width


def test_text_of_digits_alone_is_not_taken_for_a_count():
    """A run id or a label may be digits: only a column written as counts (``a / b``,
    grouped already) is grouped and right-aligned."""
    frame = pl.DataFrame({"run_id": ["100234", "7"], "cells": ["1791.5 / 34493", "- / 0"]})
    rows = [line for line in table_text(frame).splitlines() if line.startswith("│ ")]
    assert rows[1] == "│ 100234 ┆ 1,791.5 / 34,493 │"
    assert rows[2] == "│ 7      ┆            - / 0 │"
