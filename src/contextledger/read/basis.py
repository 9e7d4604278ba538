"""What a run's ledger answer rests on when an agent's ``redact`` kept values out of its log.

Newer agentfootprint (``RecordedRun.basis`` and ``RecordedRun.unmetered``,
``src/lib/context-ledger/types.ts``, read at 9.117) says, per state key the ledger
read, why an answer was not exact, and leaves a kind UNMETERED for the run when a read
its offers or uses come from rests on a redaction: neither its offers nor its uses
count, so a placeholder is never scored as "not used". footprintjs marks a scrubbed
write by listing its path in the commit's ``redactedPaths`` (``commitValueAtWithBasis``
reports ``'redacted'`` for a key when a path at, inside or around it was scrubbed).

Only the ``'redacted'`` code is read here: it is the one that changes what is metered
(the other codes, ``never-written``, ``nested-rows``, ``from-initial-state``,
``deleted``, describe exact answers and are not reproduced).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from contextledger.read.facts import KINDS
from contextledger.read.slice import SLOT_KEYS
from contextledger.read.snapshot import Bundle

#: The keys the ledger reads, and the kinds whose offers or uses come from each.
LEDGER_READS: dict[str, tuple[str, ...]] = {
    "activeInjections": ("injection", "skill"),  # injection and skill offers
    "dynamicToolSchemas": ("tool",),  # tool offers
    "history": ("tool",),  # tool uses
    "activatedInjectionIds": ("skill",),  # skill uses
    **dict.fromkeys(SLOT_KEYS, ("injection",)),  # answer-slice credit
}
#: footprintjs joins a nested path's segments with U+001F.
_DELIM = "\x1f"


def _touches(path: str, key: str) -> bool:
    """The scrubbed ``path`` is at, inside or around ``key``."""
    return path == key or path.startswith(key + _DELIM) or key.startswith(path + _DELIM)


def redaction_basis(logs: Iterable[Sequence[Bundle]]) -> dict[str, list[str]]:
    """``{key: ['redacted']}`` for each key the ledger reads that a redaction touched.

    >>> log = [Bundle(redacted_paths=["history"]), Bundle(redacted_paths=["other"])]
    >>> redaction_basis([log])
    {'history': ['redacted']}
    """
    scrubbed = {path for log in logs for bundle in log for path in bundle.redacted_paths}
    if not scrubbed:
        return {}
    return {
        key: ["redacted"] for key in LEDGER_READS if any(_touches(path, key) for path in scrubbed)
    }


def unmetered_by_basis(basis: dict[str, list[str]]) -> list[str]:
    """The kinds a basis leaves unmetered, in ``KINDS`` order.

    >>> unmetered_by_basis({"history": ["redacted"]})
    ['tool']
    """
    kinds = {
        kind for key, codes in basis.items() if "redacted" in codes for kind in LEDGER_READS[key]
    }
    return [kind for kind in KINDS if kind in kinds]
