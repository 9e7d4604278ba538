"""Sets of a run's turns as words of bits, for the vectorized kernel: any number of turns.

A set is a uint64 array whose first axis is its words (turn t is bit ``t % 64`` of word
``t // 64``); the other axes are whatever the caller vectorizes over (policies, runs,
visits). With one word (runs of up to 64 turns, the common case) every operation is the
plain uint64 bit trick; with more, the words are combined where a trick needs a carry
(the lowest or highest bit, the bits below one).
"""

from __future__ import annotations

import numpy as np

WORD_BITS = 64
ALL = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
ZERO = np.uint64(0)
ONE = np.uint64(1)
_EXPONENT = np.uint64(0xFFF0_0000_0000_0000)
#: ``_LOW[n]``: the bits below bit n of a word.
_LOW = np.array([(1 << n) - 1 for n in range(WORD_BITS + 1)], dtype=np.uint64)
#: Words of up to this many bits convert to float64 exactly (``high_bit``).
FLOAT_BITS = 53


def words_for(turns: int) -> int:
    """Words a set of ``turns`` turns takes (at least one).

    >>> words_for(64), words_for(65), words_for(2000)
    (1, 2, 32)
    """
    return max(1, -(-turns // WORD_BITS))


def low_bit(x: np.ndarray) -> np.ndarray:
    """The lowest turn of each set (the empty set for an empty one)."""
    low = x & (ZERO - x)
    if x.shape[0] > 1:  # only the first word holding a bit keeps it
        low[1:] *= ~np.logical_or.accumulate(x[:-1] != 0, axis=0)
    return low


def _word_high_bit(x: np.ndarray, narrow: bool) -> np.ndarray:
    if narrow:  # the float holds x exactly: keep its exponent, clear its mantissa
        exponent = x.astype(np.float64).view(np.uint64) & _EXPONENT
        return exponent.view(np.float64).astype(np.uint64)
    y = x | (x >> np.uint64(1))
    for shift in (2, 4, 8, 16, 32):
        y |= y >> np.uint64(shift)
    return y ^ (y >> np.uint64(1))


def high_bit(x: np.ndarray, narrow: bool = False) -> np.ndarray:
    """The highest turn of each set; ``narrow``: one word of at most 53 turns."""
    high = _word_high_bit(x, narrow and x.shape[0] == 1)
    if x.shape[0] > 1:  # only the last word holding a bit keeps it
        later = np.logical_or.accumulate((x != 0)[::-1], axis=0)[::-1]
        high[:-1] *= ~later[1:]
    return high


def below(bit: np.ndarray) -> np.ndarray:
    """The turns below a set of one turn (every turn for the empty set): ``bit - 1``."""
    out = bit - ONE  # a word without the bit wraps to every bit
    if bit.shape[0] > 1:  # the words above the bit's hold none
        out[1:] *= ~np.logical_or.accumulate(bit[:-1] != 0, axis=0)
    return out


def count(x: np.ndarray) -> np.ndarray:
    """Turns in each set (int64)."""
    if x.shape[0] == 1:
        return np.bitwise_count(x[0]).astype(np.int64)
    return np.bitwise_count(x).sum(0, dtype=np.int64)


def nonempty(x: np.ndarray) -> np.ndarray:
    """Each set holds a turn."""
    return x[0] != 0 if x.shape[0] == 1 else (x != 0).any(0)


def equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[0] == b[0] if a.shape[0] == 1 else (a == b).all(0)


def position(bit: np.ndarray) -> np.ndarray:
    """The turn of a set of one turn (``64 * words`` for the empty set)."""
    if bit.shape[0] == 1:
        return np.bitwise_count(bit[0] - ONE).astype(np.intp)
    return np.bitwise_count(below(bit)).sum(0, dtype=np.intp)


def single(turns: np.ndarray, words: int) -> np.ndarray:
    """``[words, N]``: the set of just ``turns[n]`` for each n (empty where it is negative)."""
    turns = np.asarray(turns, dtype=np.int64)
    word = turns // WORD_BITS
    bit = np.left_shift(ONE, (turns % WORD_BITS).astype(np.uint64))
    return np.where(np.arange(words).reshape(-1, *([1] * turns.ndim)) == word, bit, ZERO)


def contains(sets: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """``sets[..., n]`` holds ``turns[n]`` (``turns`` runs along the last axis)."""
    turns = np.asarray(turns, dtype=np.int64)
    shift = (turns % WORD_BITS).astype(np.uint64)
    if sets.shape[0] == 1:
        return ((sets[0] >> shift) & ONE) != 0
    word = np.broadcast_to(turns // WORD_BITS, sets.shape[1:])[None]
    return ((np.take_along_axis(sets, word, axis=0)[0] >> shift) & ONE) != 0


def span(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The turns from ``low`` to ``high`` (sets of one turn each, ``low`` not above)."""
    return (below(high) & ~below(low)) | high


def _lowest_in_word(x: np.ndarray, m: np.ndarray, bits: int) -> np.ndarray:
    """The lowest ``m`` set bits of each word ``x`` (of ``bits`` bits): the bit position
    below which ``m`` bits are set, by binary search (``count(x & _LOW[p]) < m`` grows)."""
    want = np.minimum(m, WORD_BITS).astype(np.uint8)  # (fewer bytes a pass; m >= 0)
    p = np.zeros(x.shape, dtype=np.uint8)
    for step in [1 << n for n in reversed(range(max(bits - 1, 0).bit_length()))]:
        trial = (p + np.uint8(step)).astype(np.intp)
        under = np.bitwise_count(x & _LOW.take(trial)) < want
        p += under.view(np.uint8) * np.uint8(step)
    return (x & _LOW.take(p.astype(np.intp) + 1)) * (want > 0)


def lowest(x: np.ndarray, m: np.ndarray, turns: int) -> np.ndarray:
    """The lowest ``m`` turns of each set (of ``turns`` turns at most): each word gives the
    ones still wanted after the words below it."""
    if x.shape[0] == 1:
        return _lowest_in_word(x[0], m, turns)[None]
    held = np.bitwise_count(x).astype(np.int64)
    wanted = np.asarray(m, dtype=np.int64)[None] - (np.cumsum(held, axis=0) - held)
    return _lowest_in_word(x, np.maximum(wanted, 0), WORD_BITS)


def highest(x: np.ndarray, limit: np.ndarray, narrow: bool = False) -> np.ndarray:
    """The highest ``limit[...]`` turns of each set (a pin ceiling: small), one turn per
    round over the sets that have any (``x`` is ``[W, N]``)."""
    index = np.flatnonzero(nonempty(x))
    taken = np.zeros(x.shape, dtype=np.uint64)
    if index.size:
        rest = x.take(index, axis=1)
        ceiling = limit[index]
        held = np.zeros(rest.shape, dtype=np.uint64)
        for round_ in range(int(ceiling.max())):
            top = high_bit(rest, narrow)
            held |= top * (ceiling > round_)
            rest ^= top
            if not rest.any():
                break
        taken[:, index] = held
    return taken


def as_sets(flags: np.ndarray, words: int | None = None) -> np.ndarray:
    """``[R, T]`` booleans as ``[W, R]`` sets, turn t for column t."""
    words = words_for(flags.shape[1]) if words is None else words
    packed = np.packbits(flags, axis=1, bitorder="little")
    wide = np.zeros((flags.shape[0], 8 * words), dtype=np.uint8)
    wide[:, : packed.shape[1]] = packed
    return np.ascontiguousarray(wide.view("<u8").astype(np.uint64).T)


def unpack(sets: np.ndarray, turns: int) -> np.ndarray:
    """``[W, N]`` sets as ``[N, turns]`` booleans (the inverse of :func:`as_sets`)."""
    as_bytes = np.ascontiguousarray(sets.T).astype("<u8").view(np.uint8)
    return np.unpackbits(as_bytes, axis=1, count=turns, bitorder="little").view(bool)


def sums(columns: list[np.ndarray], runs: np.ndarray, sets: np.ndarray) -> list[np.ndarray]:
    """Each ``values[run, t]`` summed over the turns of ``sets`` (``[W, N]``), one turn
    per round for the sets that still have one (``sets`` hold few turns)."""
    totals = [np.zeros(sets.shape[1], dtype=np.int64) for _ in columns]
    rest = sets.copy()
    index = np.flatnonzero(nonempty(rest))
    while index.size:
        low = low_bit(rest[:, index])
        runs_now, turns = runs[index], position(low)
        for total, values in zip(totals, columns, strict=True):
            total[index] += values[runs_now, turns]
        rest[:, index] ^= low
        index = index[nonempty(rest[:, index])]
    return totals
