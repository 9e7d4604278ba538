"""What one run contributes to the ledger, whichever accounting produced it."""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``(call_index, kind, piece_id, approx_tokens)``: one piece offered at one model call.
Offer = tuple[int, str, str, int]
#: ``(kind, piece_id, signal, call_index)``: one use (call_index None: the run's, not a call's).
Use = tuple[str, str, str, int | None]

#: Piece kinds, as the reference names them.
KINDS = ("injection", "skill", "tool")


@dataclass
class RunFacts:
    """Offers and uses of one run under one accounting mode.

    ``offers`` holds ``(call_index, kind, piece_id, approx_tokens)`` in offer
    order and ``uses`` ``(kind, piece_id, signal, call_index)`` in use order (the
    call that made the use, None where the use belongs to the run, not a call);
    the order is the reference's row-insertion order, which breaks earn-rate ties.
    """

    accounting: str
    grouped: bool = False
    metered: bool = False
    refused_reason: str | None = None
    model_call_count: int = 0
    metered_call_count: int = 0
    slice_available: bool = False
    unmetered_kinds: list[str] = field(default_factory=list)
    #: ``RecordedRun.basis`` (agentfootprint 9.1xx): per key read, why the answer is not
    #: exact; only ``'redacted'`` is read (``read.basis``). Empty: every read was exact.
    basis: dict[str, list[str]] = field(default_factory=dict)
    offers: list[Offer] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)

    def offered_pieces(self) -> list[str]:
        """``kind:id`` of every offered piece, first offer first (``RecordedRun.offeredPieces``)."""
        return list(dict.fromkeys(f"{kind}:{piece}" for _, kind, piece, _ in self.offers))
