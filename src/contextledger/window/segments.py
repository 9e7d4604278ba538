"""Array helpers over segments laid end to end: windows as runs of message ids.

A batch's windows are one flat array of ids and an array of lengths; these find each
segment's bounds, sums, first elements, and compare pairs of segments, without a loop
in Python.
"""

from __future__ import annotations

import numpy as np


def spans(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(span, offset)`` of every element of spans of ``lengths`` laid end to end."""
    span = np.repeat(np.arange(len(lengths)), lengths)
    firsts = np.cumsum(lengths) - lengths
    return span, np.arange(len(span)) - firsts[span]


def firsts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``ordered`` (sorted) begins."""
    starts = np.ones(len(ordered), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return np.flatnonzero(starts)


def first_per(span: np.ndarray, mask: np.ndarray, value: np.ndarray, spans: int) -> np.ndarray:
    """Per span (``span`` sorted), ``value`` at its first element where ``mask`` holds (-1
    where none)."""
    out = np.full(spans, -1, dtype=np.int64)
    where = np.flatnonzero(mask)
    first = where[firsts(span[where])]
    out[span[first]] = value[first]
    return out


def sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of ``values`` over consecutive spans of ``lengths`` (exact, in int64)."""
    running = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    ends = np.cumsum(lengths)
    return running[ends] - running[ends - lengths]


def order(key: np.ndarray, at: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The order sorting by ``key``, then ``at``, then ``last`` (0 or 1): one int64 sort
    where the three fit in one number, else a lexical sort."""
    width = 2 * (int(at.max(initial=0)) + 1)
    if int(key.max(initial=0)) < (1 << 62) // width:
        return np.argsort(key * width + at * 2 + last)
    return np.lexsort((last, at, key))


def member(values: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``ordered`` (sorted)."""
    if not len(ordered):
        return np.zeros(len(values), dtype=bool)
    found = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return ordered[found] == values


def pairs_differ(
    keys: np.ndarray, left: np.ndarray, right: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Per pair of spans of ``keys`` starting at ``left`` and ``right``, the first offset
    below ``lengths`` where they differ (``lengths`` where they do not)."""
    span, offset = spans(lengths)
    broken = np.flatnonzero(keys[left[span] + offset] != keys[right[span] + offset])
    first = broken[firsts(span[broken])]
    out = lengths.copy()
    out[span[first]] = offset[first]
    return out
