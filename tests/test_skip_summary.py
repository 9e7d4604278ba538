"""Without the reference corpus, pytest says once, at the end, why its tests skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, skip_summary


def pytest_output(tmp_path: Path, *args: str) -> str:
    """pytest's stdout on ``args`` with the corpus pointed at a folder that does not exist."""
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["CONTEXTLEDGER_CORPUS"] = str(tmp_path / "missing")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_run_without_the_corpus_ends_by_saying_once_why_its_tests_skipped(tmp_path):
    output = pytest_output(tmp_path, "tests/test_corrected.py")
    assert output.count("why tests skipped") == 1
    note = output.split("why tests skipped", 1)[1]
    assert f"11 skipped: the reference corpus is not at {tmp_path / 'missing'}." in note
    assert "CONTEXTLEDGER_CORPUS" in note and "tests/conftest.py" in note
    # The note comes after the progress dots and before pytest's closing tally.
    assert output.strip().splitlines()[-1].startswith("11 skipped")


def test_a_run_with_nothing_skipped_says_nothing_about_skips(tmp_path):
    output = pytest_output(tmp_path, "tests/test_skip_summary.py", "-k", "other_reasons")
    assert "why tests skipped" not in output


def test_other_reasons_are_counted_each_on_a_line_of_its_own():
    def skipped(reason: str) -> pytest.TestReport:
        return pytest.TestReport(
            "t", ("t.py", 1, "t"), {}, "skipped", ("t.py", 1, f"Skipped: {reason}"), "call"
        )

    lines = skip_summary([skipped("no browser"), skipped("no java"), skipped("no browser")])
    assert lines == ["2 skipped: no browser", "1 skipped: no java"]
