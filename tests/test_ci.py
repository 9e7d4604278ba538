"""CI cannot pass by leaving something out: no corpus test skips under CI, and ``.ci/run``
stops at the first step that fails, with that step's exit status.

``.ci/run`` is run for real, copied into a temporary folder where every program it calls
(``python3``, ``apt-get``, the virtualenv's ``pip``, ``python``, ``ruff``, ``mypy``) is a
stub that records its call and exits with the status the test chooses.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

CI_SCRIPT = REPO / ".ci" / "run"

# ── the corpus under CI ──────────────────────────────────────────────────────

#: One test for each way a test reaches the corpus: require_corpus() in its body, a
#: fixture reading oracle_runs(), a test parametrized over the oracle, and a module that
#: needs the corpus to be collected.
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
SKIPPING_HELPERS = {
    ("conftest.py", "require_corpus"),
    ("test_report_browser.py", "chromium"),
    ("test_output.py", "test_a_full_tmpfs_leaves_nothing"),
    ("test_spark.py", "require"),
}


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


# ── .ci/run ───────────────────────────────────────────────────────────────────

#: The stubs on PATH, and those the README's command creates in .venv/bin.
PATH_PROGRAMS = ("python3", "apt-get", "chromium", "java")
VENV_PROGRAMS = ("pip", "python", "ruff", "mypy")


def stub(path: Path, name: str) -> None:
    """An executable that logs ``NAME ARGS`` to $CI_STEPS and exits with $FAIL_NAME (or 0)."""
    variable = f"FAIL_{name.replace('-', '_')}"
    path.write_text(
        f'#!/bin/bash\necho "{name} $*" >> "$CI_STEPS"\n'
        f'echo "{name} CI=${{CI-}}" >> "$CI_STEPS.env"\n'
        f'exit "${{{variable}:-0}}"\n',
        encoding="utf-8",
    )
    path.chmod(0o755)


def run_ci(
    tmp_path: Path, *, chromium: bool = True, java: bool = True, **fail: int
) -> tuple[int, list[str]]:
    """Run a copy of ``.ci/run`` among stubs; ``fail`` maps a program to its exit status.
    Returns the script's exit status and the steps it ran, in order."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy2(CI_SCRIPT, clone / ".ci" / "run")
    venv = clone / ".venv" / "bin"
    venv.mkdir(parents=True)
    for name in VENV_PROGRAMS:
        stub(venv / name, name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in PATH_PROGRAMS:
        if {"chromium": chromium, "java": java}.get(name, True):
            stub(bin_dir / name, name)
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)
    steps = tmp_path / "steps.log"
    steps.touch()
    env = {"PATH": str(bin_dir), "CI_STEPS": str(steps), "HOME": str(tmp_path)}
    env |= {f"FAIL_{name.replace('-', '_')}": str(status) for name, status in fail.items()}
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, str(clone / ".ci" / "run")], env=env, capture_output=True, timeout=60, check=False
    )
    return result.returncode, [s.rstrip() for s in steps.read_text(encoding="utf-8").splitlines()]


ALL_STEPS = [
    "python3 -m venv .venv",
    "pip install -q -e .[dev,spark]",
    "python -m pytest",
    "ruff check",
    "ruff format --check",
    "mypy",
]


def test_ci_runs_the_readmes_test_command_verbatim():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = (
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[dev,spark]" '
        "&& .venv/bin/python -m pytest"
    )
    assert f"\n{command}\n" in readme
    assert command in CI_SCRIPT.read_text(encoding="utf-8")


def test_ci_runs_every_step_in_order_when_each_passes(tmp_path):
    assert run_ci(tmp_path) == (0, ALL_STEPS)


@pytest.mark.parametrize(
    ("failing", "status", "steps_run"),
    [
        ("python3", 2, 1),  # the virtualenv cannot be made
        ("pip", 3, 2),  # the install fails
        ("python", 1, 3),  # a test fails
        ("ruff", 1, 4),  # lint
        ("mypy", 2, 6),  # types
    ],
)
def test_ci_stops_at_the_first_failing_step_with_its_status(tmp_path, failing, status, steps_run):
    assert run_ci(tmp_path, **{failing: status}) == (status, ALL_STEPS[:steps_run])


def test_ci_sets_ci_so_a_missing_corpus_fails_instead_of_skipping(tmp_path):
    assert run_ci(tmp_path) == (0, ALL_STEPS)
    seen = (tmp_path / "steps.log.env").read_text(encoding="utf-8").splitlines()
    assert "python CI=true" in seen


def test_ci_stops_when_chromium_cannot_be_installed(tmp_path):
    assert run_ci(tmp_path, chromium=False, apt_get=100) == (100, ["apt-get update -qq"])
    status, steps = run_ci(tmp_path / "installs", chromium=False)
    assert status == 0
    assert steps == ["apt-get update -qq", "apt-get install -y -qq chromium", *ALL_STEPS]


def test_ci_installs_java_for_spark_when_it_is_missing(tmp_path):
    status, steps = run_ci(tmp_path, java=False)
    assert status == 0
    assert steps == [
        "apt-get update -qq",
        "apt-get install -y -qq openjdk-17-jre-headless",
        *ALL_STEPS,
    ]
