"""Where contextledger's corrected accounting differs from agentfootprint 9.62, in one place.

docs/ledger.md's table and the report's section are both rendered from
:data:`DIFFERENCES` (a test checks docs/ledger.md holds :func:`markdown_table`), so
the two never drift apart. The effects were measured on the 301-run corpus
(``tests/test_corrected.py`` holds each figure).
"""

from __future__ import annotations

from typing import NamedTuple


class Difference(NamedTuple):
    """One rule the reference gets wrong, what we do instead, why, and what it changes."""

    reference: str
    ours: str
    why: str
    effect: str


#: Column headers, as docs/ledger.md prints them.
HEADERS = Difference(
    reference="what the reference does",
    ours="what we do",
    why="why",
    effect="effect on the corpus (reference → corrected)",
)

DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        reference="Reads tool uses from the final, windowed `history`",
        ours=(
            "Counts every tool call this run executed (appended to `history` by "
            "this run), whatever a window later dropped"
        ),
        why="A window dropping a turn does not undo the call",
        effect=(
            "tool uses 2,243 → 2,838; the fact bench's `probe_fact` 2 → 6, `probe_noise` 4 → 14"
        ),
    ),
    Difference(
        reference="Counts a follow-up turn's carried-over tool calls again",
        ours="Counts only calls appended in this run",
        why="`used` could exceed what the run did",
        effect="see the row above (included in it)",
    ),
    Difference(
        reference=(
            "Meters each grouped-mode call twice (the inner `turn-seed` bundle is "
            "also a call marker)"
        ),
        ours="One offer per `call-llm` execution",
        why="A call is a call",
        effect=(
            "metered calls: 2,589 markers → 2,230 model calls (equal to the calls "
            "the provider received)"
        ),
    ),
    Difference(
        reference=(
            "Books all tools on a wrap-up call, and skips a call whose provider reported no usage"
        ),
        ours=(
            "Offers exactly the tools the call carried (none on a wrap-up call); "
            "meters every call, usage reported or not"
        ),
        why="Offers should be what the model was sent",
        effect="tool offers 11,801 → 11,065, equal to the wire's count on every run",
    ),
    Difference(
        reference="Refuses a run whose provider reported zero usage on every call",
        ours="Meters it",
        why="It made real calls",
        effect="refused runs 9 → 0",
    ),
    Difference(
        reference="Credits `answer-slice(slot)` by `record.id`, which slot records never carry",
        ours=("Matches `sourceId` against the injections in effect; once per injection per run"),
        why="The credit never fired",
        effect="injection and skill answer-slice uses 0 → 372",
    ),
    Difference(
        reference="—",
        ours=(
            "Grouped-mode injections are left **unmetered** for the run (listed in "
            "`runs.unmetered_kinds`), not scored as unused"
        ),
        why="Their slots live in subflows the root slice cannot enter",
        effect="65 runs (61 grouped Agent runs, 4 `LLMCall` runs)",
    ),
)


def markdown_table() -> str:
    """The table as docs/ledger.md holds it (Markdown, one row per difference).

    >>> markdown_table().splitlines()[1]
    '|---|---|---|---|'
    """
    lines = [_markdown_row(HEADERS), "|---|---|---|---|"]
    lines += [_markdown_row(row) for row in DIFFERENCES]
    return "\n".join(lines)


def _markdown_row(row: Difference) -> str:
    return "| " + " | ".join(row) + " |"
