"""What a window policy's windows cost: input tokens, the prompt cache, the price.

Per model call: the tokens of the window served (the provider's count where it is the
window the run sent, else an estimate at the run's own rate), the prefix it shares with
the previous call's window (what a prompt cache could read) and whether it broke that
prefix; summed and priced with a :class:`CachePrices` model. The best case, stated
in :class:`CachePrices`: every call caches its whole window. Pure functions, no I/O.
"""

from __future__ import annotations

import fractions
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.read.messages import Message, RunMessages
from contextledger.window.replay import same_window
from contextledger.window.turns import window_chars

#: The dearest cache price taken, in multiples of the input price (Anthropic's dearest
#: is 2): a dearer one would overflow the 64-bit cost columns, and prices nothing real.
MAX_CACHE_PRICE = 1000


@dataclass(frozen=True)
class CachePrices:
    """Prompt-cache prices as multiples of the base input-token price.

    Defaults are Anthropic's published ratios: a 5-minute cache write costs 1.25x the
    base input price and a cache read 0.1x ("Prompt caching", Pricing:
    https://platform.claude.com/docs/en/build-with-claude/prompt-caching#pricing; a
    1-hour write is 2x). :func:`priced` states how a run is priced with them: the best
    case, where every call caches its whole window and the next reads any shared prefix
    (no minimum cacheable length, no breakpoint limit).
    """

    write: float = 1.25
    read: float = 0.1

    def __post_init__(self) -> None:
        for name in ("write", "read"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_CACHE_PRICE:  # also refuses NaN and infinity
                msg = f"cache {name} price must be a number from 0 to {MAX_CACHE_PRICE}"
                msg += f", not {value!r}"
                raise ValueError(msg)


def wire_key(message: Message) -> tuple[Any, ...]:
    """What a cache compares: which message it is and the bytes it carries now (an
    edited message differs from its original)."""
    return rewritten_wire_key(
        message, message.content, message.chars, message.edit, message.tool_calls
    )


def rewritten_wire_key(
    message: Message, content: str, chars: int, edit: str | None, tool_calls: tuple[Any, ...]
) -> tuple[Any, ...]:
    """:func:`wire_key` of ``message`` with its ``content`` (of ``chars``), ``edit`` and
    ``tool_calls`` replaced, for an audit that measures a policy's rewrite unbuilt."""
    stream_index = message.index if message.index >= 0 and not message.window_authored else None
    return (
        stream_index,
        message.role,
        content,
        chars,
        message.tool_call_id,
        tool_calls,
        edit,
    )


def shared_prefix(previous: Sequence[Message], current: Sequence[Message]) -> int:
    """How many leading messages ``current`` shares with ``previous`` (same message, same
    content, same edit).

    >>> from contextledger.read.messages import Message
    >>> a, b, c = Message("user", "a", index=0), Message("tool", "b", index=1), Message("user", "c")
    >>> shared_prefix([a, b], [a, b, c]), shared_prefix([a, b], [a, c])
    (2, 1)
    """
    count = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new:
            if old.index != new.index and _in_stream(old) and _in_stream(new):
                break  # two different messages of the run: their keys differ at once
            if wire_key(old) != wire_key(new):
                break
        count += 1
    return count


def _in_stream(message: Message) -> bool:
    """The message is one the run appended: :func:`wire_key` names it by its index."""
    return message.index >= 0 and not message.window_authored


@dataclass(frozen=True)
class CallCost:
    """One model call's input tokens, the part a prompt cache could have read, and whether
    it broke the previous call's prefix."""

    tokens: int | None
    recorded: bool
    cached: int | None
    invalidated: bool


def call_costs(
    stream: RunMessages, served: Sequence[Sequence[Message]], rate: float | None
) -> list[CallCost]:
    """Per model call: input tokens, cached tokens, and whether the cache was invalidated.

    Tokens are the provider's recorded count where the call was served the very window
    the run sent and reported a count (so, usually, under ``none``), else
    ``round(rate * chars)`` (``rate``: the run's recorded tokens per char), None with no
    rate. The cached part is ``round(rate * chars of the prefix shared with the previous
    call's window)`` (at most the call's tokens; 0 at the first call). A call invalidates
    the cache when the previous call's window is not a prefix of its own.
    """
    out: list[CallCost] = []
    previous: Sequence[Message] | None = None
    for call, window in zip(stream.calls, served, strict=True):
        recorded = call.input_tokens > 0 and same_window(window, stream.window(call.window_served))
        tokens: int | None
        if recorded:
            tokens = call.input_tokens
        else:
            tokens = None if rate is None else round(rate * window_chars(window))
        shared = 0 if previous is None else shared_prefix(previous, window)
        invalidated = previous is not None and shared < len(previous)
        cached: int | None = None
        if tokens is not None and rate is not None:
            cached = min(tokens, round(rate * window_chars(window[:shared])))
        elif tokens is not None:
            cached = 0
        out.append(CallCost(tokens, recorded, cached, invalidated))
        previous = window
    return out


def recorded_cache(stream: RunMessages) -> tuple[int | None, int | None]:
    """``(read, written)``: the prompt-cache input tokens the provider recorded over the
    run's calls, for the windows the run sent (whatever policy is replayed); ``(None,
    None)`` when no call recorded either. A call that recorded one but not the other
    counts 0 for it: the official instrumentations leave a zero out.
    """
    reads = [call.cache_read_tokens for call in stream.calls]
    writes = [call.cache_write_tokens for call in stream.calls]
    if all(value is None for value in (*reads, *writes)):
        return None, None
    return sum(value or 0 for value in reads), sum(value or 0 for value in writes)


def priced(costs: Sequence[CallCost], prices: CachePrices) -> tuple[float | None, float | None]:
    """``(without cache, with cache)`` in base input-token units, over ``costs``.

    Without a cache every input token costs 1. With one, each call reads the tokens of
    the prefix it shares with the previous call's window at ``prices.read`` and writes
    the rest at ``prices.write`` (every call caches its whole window for the next; the
    first call writes all of it): ``sum(cached * read + (tokens - cached) * write)``.
    None when some call's tokens are unknown.

    The sum is exact, at the prices as written in decimal (``0.1`` is a tenth), rounded
    once to the nearest double: ``3541.7``, never a float sum's ``3541.699999999999``,
    so JSON and CSV print it short and every engine gets the same bits.

    >>> costs = [CallCost(100, True, 0, False), CallCost(150, False, 100, False)]
    >>> priced(costs, CachePrices())
    (250.0, 197.5)
    >>> priced([CallCost(3539, True, 767, False)], CachePrices())
    (3539.0, 3541.7)
    """
    if any(c.tokens is None or c.cached is None for c in costs):
        return None, None
    tokens = sum(c.tokens or 0 for c in costs)
    cached = sum(c.cached or 0 for c in costs)
    return priced_totals([tokens], [cached], prices)[0]


def priced_totals(
    tokens: Sequence[int], cached: Sequence[int], prices: CachePrices
) -> list[tuple[float, float]]:
    """:func:`priced` of many runs' totals at once: ``tokens[n]`` input tokens over a run's
    calls, ``cached[n]`` of them read from the cache.

    >>> priced_totals([250, 3539], [100, 767], CachePrices())
    [(250.0, 197.5), (3539.0, 3541.7)]
    """
    read, write = _decimal(prices.read), _decimal(prices.write)
    at_read = read.numerator * write.denominator
    at_write = write.numerator * read.denominator
    denominator = read.denominator * write.denominator
    return [
        (float(total), (part * at_read + (total - part) * at_write) / denominator)
        for total, part in zip(tokens, cached, strict=True)
    ]


@functools.lru_cache(maxsize=64)
def _decimal(price: float) -> fractions.Fraction:
    """``price`` as the decimal it is written as (its shortest repr): ``0.1`` is 1/10."""
    return fractions.Fraction(repr(price))
