"""CI cannot pass by leaving something out: no corpus test skips under CI."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import REPO

# ── the corpus under CI ──────────────────────────────────────────────────────

#: One test for each way a test reaches the corpus: the ``corpus`` fixture's
#: require_corpus(), oracle_runs(), a parametrized oracle test, and a module that needs
#: the corpus to collect.
CORPUS_TESTS = (
    "tests/test_corrected.py::test_a_wrap_up_call_offers_no_tool",
    "tests/test_stats.py::test_base_rates_are_the_label_shares_of_all_labelled_metered_runs",
    "tests/test_slice.py::test_answer_slice_matches_the_reference",
    "tests/test_window_parity.py",
)


def pytest_without_corpus(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """The suite's corpus tests, run with CONTEXTLEDGER_CORPUS at an empty folder."""
    empty = tmp_path / "no-corpus"
    empty.mkdir(exist_ok=True)
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["CONTEXTLEDGER_CORPUS"] = str(empty)
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs"]
    return subprocess.run(
        [*command, "--continue-on-collection-errors", *CORPUS_TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def outcomes(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """pytest's closing tally, e.g. ``{"failed": 2, "errors": 3}``."""
    tally = result.stdout.strip().splitlines()[-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", tally)}


def test_without_the_corpus_its_tests_skip_and_say_why(tmp_path):
    result = pytest_without_corpus(tmp_path, ci=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(outcomes(result)) == {"skipped"}
    assert outcomes(result)["skipped"] >= len(CORPUS_TESTS)
    assert "reference corpus not found" in result.stdout


def test_under_ci_a_missing_corpus_fails_every_test_that_needs_it(tmp_path):
    result = pytest_without_corpus(tmp_path, ci="true")
    assert result.returncode != 0
    assert set(outcomes(result)) <= {"failed", "errors"}, result.stdout
    failed = [
        line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith(("FAILED ", "ERROR ")) and "CI runs every corpus test" in line
    ]
    assert all(any(name.startswith(test) for name in failed) for test in CORPUS_TESTS), failed


#: Where a test may skip: only helpers that fail instead under CI.
SKIPPING_HELPERS = {("conftest.py", "require_corpus"), ("test_report_browser.py", "chromium")}


def skips_in(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of each pytest skip (``skip``, ``skipif``,
    ``importorskip``) in ``source``."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif", "importorskip"):
            found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def test_no_test_skips_except_through_a_helper_that_fails_under_ci():
    found = [
        f"{path.name}:{line} in {function}"
        for path in sorted(Path(__file__).parent.glob("*.py"))
        for line, function in skips_in(path.read_text(encoding="utf-8"))
        if (path.name, function) not in SKIPPING_HELPERS
    ]
    assert found == []
    example = "@pytest.mark.skipif(True, reason='x')\ndef test_x():\n    pytest.skip()\n"
    assert sorted(skips_in(example)) == [(1, "test_x"), (3, "test_x")]
