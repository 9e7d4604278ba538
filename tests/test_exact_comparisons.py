"""Where the tests claim two engines or two paths give the same frame, they compare exactly.

Polars' ``assert_frame_equal`` tolerates a relative difference of 1e-5 by default, enough
to pass an earn rate computed in float32 as equal to the float64 one. Every frame
comparison in ``tests/`` therefore passes ``check_exact=True`` and loosens nothing else
(dtypes, row order and column order stay checked); this test reads the test files and
names any comparison that does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

#: Polars' frame and series comparisons.
FRAME_ASSERTIONS = ("assert_frame_equal", "assert_series_equal")
#: Keywords that loosen such a comparison whatever their value (tolerances, or turning
#: off a check).
LOOSENING_KEYWORDS = ("rtol", "atol", "check_dtypes", "check_row_order", "check_column_order")


def loose_frame_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, why) for each frame or series comparison in ``source`` that is not exact."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name not in FRAME_ASSERTIONS:
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        exact = keywords.get("check_exact")
        if not (isinstance(exact, ast.Constant) and exact.value is True):
            found.append((node.lineno, f"{name} without check_exact=True"))
        found.extend(
            (node.lineno, f"{name} with {keyword}=")
            for keyword in LOOSENING_KEYWORDS
            if keyword in keywords
        )
    return found


def test_every_frame_comparison_in_the_tests_is_exact():
    found = [
        f"{path.name}:{line}: {why}"
        for path in sorted(Path(__file__).parent.glob("*.py"))
        for line, why in loose_frame_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert any(
        "assert_frame_equal(" in path.read_text(encoding="utf-8")
        for path in Path(__file__).parent.glob("test_*.py")
        if path.name != Path(__file__).name
    )


def test_a_tolerant_or_loosened_comparison_is_named():
    source = """
assert_frame_equal(a, b)
assert_frame_equal(a, b, check_exact=True)
testing.assert_series_equal(a, b, check_exact=False)
assert_frame_equal(a, b, check_exact=True, check_row_order=False)
assert_frame_equal(a, b, check_exact=True, rtol=0)
"""
    assert loose_frame_comparisons(source) == [
        (2, "assert_frame_equal without check_exact=True"),
        (4, "assert_series_equal without check_exact=True"),
        (5, "assert_frame_equal with check_row_order="),
        (6, "assert_frame_equal with rtol="),
    ]
