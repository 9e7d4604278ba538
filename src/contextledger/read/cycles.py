"""Reading without the cyclic garbage collector, which only costs it time.

Decoding a run allocates hundreds of thousands of containers (msgspec's dicts and lists,
span records, facts), and CPython's collector walks every tracked container it has not
promoted each time allocations outrun frees by its threshold: about a tenth of the CPU of
reading the corpus's snapshots (1.36 s against 1.23 s, one process) and of a 50 MiB
trace file (0.32 s against 0.28 s). What reading allocates is trees, freed by reference
counting as soon as a run is done; no cycle is made that waits for the collector. So the
collector is paused while one file is read or one range of trace runs is assembled, and
resumed after, whatever happens: what accumulates in between is bounded by one file's
reading (docs/benchmarks.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector as it was after it.

    >>> with collector_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
