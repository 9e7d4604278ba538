"""How the package's result objects show in Jupyter: a title, a few labelled facts, and
a frame where one says more than counts (``_repr_html_``). Their dataclass reprs print
whole Arrow tables field by field, which tells a notebook reader nothing."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any


def summary_html(title: str, facts: Sequence[tuple[str, Any]], frame: Any = None) -> str:
    """``title`` over a two-column table of ``facts`` (label, value), then ``frame``'s own
    HTML (a Polars frame) when given; every text escaped.

    >>> page = summary_html("Ledger", [("runs", "14 <metered>")])
    >>> "<strong>Ledger</strong>" in page, "14 &lt;metered&gt;</td>" in page
    (True, True)
    """
    rows = "".join(
        f'<tr><th style="text-align:left">{html.escape(str(label))}</th>'
        f'<td style="text-align:left">{html.escape(str(value))}</td></tr>'
        for label, value in facts
    )
    body = f"<strong>{html.escape(title)}</strong><table>{rows}</table>"
    if frame is not None:
        body += frame._repr_html_()
    return f'<div class="contextledger-summary">{body}</div>'


def summary_text(name: str, facts: Sequence[tuple[str, Any]]) -> str:
    """The same facts on one line, for ``repr``: a result's counts, not its tables.

    >>> summary_text("Ledger", [("runs recorded", "14"), ("pieces", "9")])
    '<Ledger runs recorded: 14; pieces: 9>'
    """
    return f"<{name} " + "; ".join(f"{label}: {value}" for label, value in facts) + ">"
